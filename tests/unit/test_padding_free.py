"""Padding-free attention, checked on the CPU through an emulated varlen attention.

No FlashAttention runs here (no GPU). ``varlen_emulation`` stands in for it: an attention
function registered with transformers' ``AttentionInterface`` that reads ``cu_seq_lens_q/k``
from its keyword arguments, as FlashAttention's varlen path does, and runs SDPA with the
matching block-diagonal mask. Through it, the whole path (padded batch from the task's own
collator -> head -> flattened encoder call -> states scattered back) must give the same
logits, losses and gradients as the padded batch; with plain ``sdpa`` it must not, and the
toolkit must refuse.
"""

import json
import logging

import pytest
import torch
from transformers import AttentionInterface, AutoConfig, AutoModel, AutoTokenizer, DataCollatorWithFlattening
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from encoder_tasks import padding_free as pf
from encoder_tasks.backbone import load_encoder
from encoder_tasks.collators import PaddingCollator
from encoder_tasks.errors import UserError
from encoder_tasks.heads import load_starting_encoder
from encoder_tasks.tasks.classification.model import SequenceClassifier
from encoder_tasks.tasks.embedding.model import BiEncoder
from encoder_tasks.tasks.mlm.masking import MaskingCollator
from encoder_tasks.tasks.mlm.model import MaskedLanguageModel
from encoder_tasks.tasks.ner.features import TaggingCollator, featurize
from encoder_tasks.tasks.ner.model import TokenTagger
from encoder_tasks.tasks.qa.model import ExtractiveQuestionAnswering
from encoder_tasks.testing import CORPUS
from encoder_tasks.training_args import EncoderTrainingArguments
from tests.helpers import write

EMULATED = "varlen_emulation"


def varlen_emulation(
    module, query, key, value, attention_mask, cu_seq_lens_q=None, cu_seq_lens_k=None, **kwargs
):
    """SDPA that honours ``cu_seq_lens_q/k`` like FlashAttention's varlen kernel."""
    if cu_seq_lens_q is not None:
        rows = torch.arange(query.shape[2], device=query.device)
        cols = torch.arange(key.shape[2], device=key.device)
        seq_q = torch.bucketize(rows, cu_seq_lens_q[1:].long(), right=True)
        seq_k = torch.bucketize(cols, cu_seq_lens_k[1:].long(), right=True)
        block = (seq_q[:, None] == seq_k[None, :])[None, None]
        attention_mask = block if attention_mask is None else attention_mask.bool() & block
    for name in ("max_length_q", "max_length_k"):
        kwargs.pop(name, None)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(EMULATED, varlen_emulation)
AttentionMaskInterface.register(EMULATED, sdpa_mask)


@pytest.fixture(autouse=True)
def declared_varlen(monkeypatch):
    monkeypatch.setattr(pf, "VARLEN_ATTENTION", {EMULATED})


def encoder(path, attention=EMULATED):
    return load_encoder(path, attn_implementation=attention)


def tokenizer_of(path):
    return AutoTokenizer.from_pretrained(path)


def same(a, b, atol=1e-5):
    assert a.shape == b.shape
    assert torch.allclose(a.float(), b.float(), atol=atol, rtol=1e-4), (a - b).abs().max().item()


def both_ways(model, batch):
    """(outputs, gradients) of the padded and the padding-free run of the same batch."""
    model.eval()  # no dropout: the two runs must see the same function
    results = []
    for flag in (False, True):
        model.padding_free = flag
        model.zero_grad()
        out = model(**batch)
        out.loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((out, grads))
    model.padding_free = False
    return results


# ---- the flattening itself ------------------------------------------------------------------
def test_flatten_batch_matches_transformers_flattening_collator(tiny_bert):
    tok = tokenizer_of(tiny_bert)
    rows = [tok(text)["input_ids"] for text in CORPUS[:4]]
    padded = tok.pad([{"input_ids": r} for r in rows], padding=True, return_tensors="pt")
    counts = [len(r) for r in rows]
    flat, indices = pf.flatten_batch(dict(padded), counts)
    reference = DataCollatorWithFlattening(return_position_ids=True, return_flash_attn_kwargs=True)(
        [{"input_ids": r} for r in rows]
    )
    assert flat["input_ids"].tolist() == reference["input_ids"].tolist()
    assert flat["position_ids"].tolist() == reference["position_ids"].tolist()
    for key in ("cu_seq_lens_q", "cu_seq_lens_k"):
        assert flat[key].dtype == torch.int32
        assert flat[key].tolist() == reference[key].tolist()
    assert flat["max_length_q"] == flat["max_length_k"] == reference["max_length_q"] == max(counts)
    assert "attention_mask" not in flat
    # The indices put every real token back where it was.
    assert padded["input_ids"].flatten()[indices].tolist() == sum(rows, [])


def test_roberta_positions_start_after_the_padding_index(tiny_models):
    enc = encoder(tiny_models["roberta"])
    assert pf.position_offset(enc) == enc.config.pad_token_id + 1
    assert pf.position_offset(encoder(tiny_models["bert"])) == 0


def test_a_batch_without_padding_runs_unflattened(tiny_bert, monkeypatch):
    model = SequenceClassifier(encoder(tiny_bert), num_labels=2).eval()
    model.padding_free = True

    def fail(*args, **kwargs):
        raise AssertionError("flattened a batch that has no padding")

    monkeypatch.setattr(pf, "flatten_batch", fail)
    ids = torch.tensor([[2, 5, 6, 3], [2, 7, 8, 3]])
    model(input_ids=ids, attention_mask=torch.ones_like(ids))


# ---- every head: flattened == padded under a varlen attention ---------------------------------
def classification_batch(tok, pairs=False):
    texts = CORPUS[:6]
    if pairs:
        features = [dict(tok(a, b), labels=i % 2) for i, (a, b) in enumerate(zip(texts, reversed(texts)))]
    else:
        features = [dict(tok(t), labels=i % 3) for i, t in enumerate(texts)]
    return PaddingCollator(tok, pad_to_multiple_of=8)(features)


def ner_batch(tok, all_subtokens=False):
    sentences = [text.split() for text in CORPUS[:6]]
    labels = [[(i + j) % 3 for j in range(len(words))] for i, words in enumerate(sentences)]
    features = featurize(
        sentences, tok, 64, labels=labels, all_subtokens=all_subtokens, continuation=[0, 2, 2]
    )
    return TaggingCollator(tok, pad_to_multiple_of=8)(features)


def qa_batch(tok):
    features = []
    for i, (question, context) in enumerate(zip(CORPUS[:5], CORPUS[3:])):
        enc = tok(question, context)
        n = len(enc["input_ids"])
        features.append(dict(enc, start_positions=(i + 1) % n, end_positions=(i + 2) % n))
    return PaddingCollator(tok, pad_to_multiple_of=8, extra_keys=("start_positions", "end_positions"))(
        features
    )


def mlm_batch(tok):
    collate = MaskingCollator(tok, mask_rate=0.4, seed=0, pad_to_multiple_of=8)
    return collate([{"input_ids": tok(text)["input_ids"]} for text in CORPUS])


HEADS = {
    "classification-mean": (lambda e: SequenceClassifier(e, num_labels=3), classification_batch),
    "classification-cls": (
        lambda e: SequenceClassifier(e, num_labels=3, pooling="cls"),
        classification_batch,
    ),
    "classification-max": (
        lambda e: SequenceClassifier(e, num_labels=3, pooling="max"),
        classification_batch,
    ),
    "pair": (lambda e: SequenceClassifier(e, num_labels=2), lambda t: classification_batch(t, pairs=True)),
    "ner-softmax": (lambda e: TokenTagger(e, ["O", "B-X", "I-X"]), ner_batch),
    "ner-crf": (lambda e: TokenTagger(e, ["O", "B-X", "I-X"], crf=True), ner_batch),
    "ner-all-subtokens": (
        lambda e: TokenTagger(e, ["O", "B-X", "I-X"], label_subtokens="all"),
        lambda t: ner_batch(t, all_subtokens=True),
    ),
    "qa": (ExtractiveQuestionAnswering, qa_batch),
    "mlm": (MaskedLanguageModel, mlm_batch),
}


@pytest.mark.parametrize("head", sorted(HEADS))
def test_every_head_gives_the_padded_results_flattened(tiny_bert, head):
    build, make_batch = HEADS[head]
    torch.manual_seed(0)
    model = build(encoder(tiny_bert))
    batch = make_batch(tokenizer_of(tiny_bert))
    assert (batch["attention_mask"] == 0).any()  # there is padding to remove
    (padded, padded_grads), (flat, flat_grads) = both_ways(model, batch)
    for name in ("logits", "start_logits", "end_logits"):
        if getattr(padded, name, None) is not None:
            same(getattr(flat, name), getattr(padded, name))
    same(flat.loss, padded.loss, atol=1e-6)
    same(flat_grads, padded_grads)


def test_embedding_head_gives_the_padded_loss_flattened(tiny_bert):
    tok = tokenizer_of(tiny_bert)
    torch.manual_seed(0)
    model = BiEncoder(encoder(tiny_bert))
    anchors = dict(tok(CORPUS[:4], padding=True, return_tensors="pt"))
    positives = dict(tok(CORPUS[4:8], padding=True, return_tensors="pt"))
    (padded, padded_grads), (flat, flat_grads) = both_ways(model, {"anchor": anchors, "positive": positives})
    same(flat.embeddings, padded.embeddings)
    same(flat.loss, padded.loss, atol=1e-6)
    same(flat_grads, padded_grads)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "electra", "modernbert"])
def test_every_family_with_a_varlen_attention_gives_the_padded_results(tiny_models, family):
    torch.manual_seed(0)
    model = TokenTagger(encoder(tiny_models[family]), ["O", "B-X", "I-X"])
    batch = ner_batch(tokenizer_of(tiny_models[family]))
    (padded, padded_grads), (flat, flat_grads) = both_ways(model, batch)
    same(flat.logits, padded.logits)
    same(flat.loss, padded.loss, atol=1e-6)
    same(flat_grads, padded_grads)


def test_flattened_rows_longer_than_the_position_table(tmp_path):
    """A flattened row is longer than max_position_embeddings; positions restart, so it still runs."""
    from encoder_tasks.testing import make_tiny_model

    path = make_tiny_model("bert", str(tmp_path / "bert"))
    model = SequenceClassifier(encoder(path), num_labels=2).eval()
    ids = torch.randint(5, 100, (6, 100), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, 90:] = 0  # 590 real tokens in one row; the position table holds 128
    padded = model(input_ids=ids, attention_mask=mask).logits
    model.padding_free = True
    same(model(input_ids=ids, attention_mask=mask).logits, padded)


# ---- the guard ----------------------------------------------------------------------------------
def masks_split_packed_positions() -> bool:
    """Whether this transformers builds an encoder's mask from ``position_ids``, one block per
    restart (5.25 does: ``create_bidirectional_mask(..., position_ids=...)``), so plain sdpa keeps
    flattened BERT sequences apart; before it the flattened row was one sequence."""
    import inspect

    from transformers.masking_utils import create_bidirectional_mask

    return "position_ids" in inspect.signature(create_bidirectional_mask).parameters


def test_sdpa_lets_flattened_sequences_attend_to_each_other_unless_masks_split_them(tiny_bert):
    """Why the guard exists: without sequence boundaries the flattened outputs are wrong. Newer
    transformers split them for BERT from the restarting position_ids; the guard stays, since
    not every encoder passes its positions to the mask, and it probes instead of trusting this."""
    batch = ner_batch(tokenizer_of(tiny_bert))
    error = {}
    for attention in ("sdpa", EMULATED):
        torch.manual_seed(0)
        model = TokenTagger(encoder(tiny_bert, attention), ["O", "B-X", "I-X"]).eval()
        with torch.no_grad():
            padded = model(**batch).logits
            model.padding_free = True  # forced past the guard (sdpa), for the demonstration only
            error[attention] = (model(**batch).logits - padded).abs().max().item()
    if masks_split_packed_positions():
        assert error["sdpa"] < 1e-5, error
        return
    # Tiny random weights attend almost uniformly, so the leak is small, but it is far above
    # the rounding noise of the same computation with the boundaries kept.
    assert error["sdpa"] > 1e-4
    assert error["sdpa"] > 100 * max(error[EMULATED], 1e-7)


def args_for(choice, **kwargs):
    return EncoderTrainingArguments(output_dir=None, padding_free=choice, mixed_precision="no", **kwargs)


def test_true_on_sdpa_is_refused_with_the_fix(tiny_bert):
    model = SequenceClassifier(encoder(tiny_bert, "sdpa"), num_labels=2)
    with pytest.raises(UserError) as err:
        pf.configure_padding_free(model, args_for("true"))
    message = str(err.value)
    assert "--padding_free true" in message and "'sdpa'" in message
    assert "attend to the others" in message and "--attn_implementation flash_attention_2" in message
    assert "\n" not in message
    assert model.padding_free is False


def test_auto_stays_off_on_sdpa_even_on_a_gpu(tiny_bert, monkeypatch, caplog):
    monkeypatch.setattr(pf, "uses_gpu", lambda args: True)
    model = SequenceClassifier(encoder(tiny_bert, "eager"), num_labels=2)
    with caplog.at_level(logging.INFO, logger="encoder_tasks.padding_free"):
        assert pf.configure_padding_free(model, args_for("auto")) is False
    assert model.padding_free is False
    assert "padding-free attention off" in caplog.text and "'eager'" in caplog.text


def test_auto_stays_off_without_a_gpu(tiny_bert, caplog):
    model = SequenceClassifier(encoder(tiny_bert), num_labels=2)
    with caplog.at_level(logging.INFO, logger="encoder_tasks.padding_free"):
        assert pf.configure_padding_free(model, args_for("auto")) is False
    assert "does not run on a GPU" in caplog.text


def test_auto_turns_on_on_a_gpu_with_a_varlen_attention(tiny_models, monkeypatch):
    monkeypatch.setattr(pf, "uses_gpu", lambda args: True)
    for family in ("bert", "roberta", "modernbert"):
        model = SequenceClassifier(encoder(tiny_models[family]), num_labels=2).train()
        assert pf.configure_padding_free(model, args_for("auto")) is True
        assert model.padding_free is True and model.training  # the probe left the mode as it was


def test_false_is_always_off(tiny_bert, monkeypatch):
    monkeypatch.setattr(pf, "uses_gpu", lambda args: True)
    model = SequenceClassifier(encoder(tiny_bert), num_labels=2)
    assert pf.configure_padding_free(model, args_for("false")) is False
    assert model.padding_free is False


def test_the_probe_catches_a_model_that_ignores_the_boundaries(tiny_models, monkeypatch):
    """DeBERTa-v2's own attention never reaches the registered kernel: it passes the static
    checks here but leaks across sequences, which the probe measures."""
    monkeypatch.setattr(pf, "uses_gpu", lambda args: True)
    model = SequenceClassifier(encoder(tiny_models["deberta-v2"]), num_labels=2)
    assert pf.static_problem(model) is None
    flat_error, noise = pf.probe(model)
    assert flat_error > 100 * max(noise, 1e-6)
    assert pf.configure_padding_free(model, args_for("auto")) is False
    with pytest.raises(UserError, match="probe batch .* does not keep flattened sequences apart"):
        pf.configure_padding_free(model, args_for("true"))


def test_the_probe_decides_the_same_under_bf16_autocast(tiny_models, monkeypatch):
    """Under mixed precision the probe's noise floor grows, but a leak still stands out."""
    monkeypatch.setattr(pf, "uses_gpu", lambda args: True)
    args = EncoderTrainingArguments(output_dir=None, padding_free="auto", mixed_precision="bf16")
    good = SequenceClassifier(encoder(tiny_models["bert"]), num_labels=2)
    leaky = SequenceClassifier(encoder(tiny_models["deberta-v2"]), num_labels=2)
    assert pf.configure_padding_free(good, args) is True
    assert pf.configure_padding_free(leaky, args) is False


def test_the_probe_catches_wrong_positions(tiny_models, monkeypatch):
    model = SequenceClassifier(encoder(tiny_models["roberta"]), num_labels=2)
    monkeypatch.setattr(pf, "position_offset", lambda enc: 0)  # RoBERTa counts from padding_idx + 1
    with pytest.raises(UserError, match="ignores their position ids"):
        pf.configure_padding_free(model, args_for("true"))


def test_a_head_that_bypasses_encode_is_refused(tiny_bert):
    model = SequenceClassifier(encoder(tiny_bert), num_labels=2)
    model.supports_padding_free = False
    with pytest.raises(UserError, match="head does not support it"):
        pf.configure_padding_free(model, args_for("true"))


def test_the_probe_does_not_touch_the_global_rng(tiny_bert):
    model = SequenceClassifier(encoder(tiny_bert), num_labels=2)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    pf.configure_padding_free(model, args_for("true"))
    assert torch.equal(torch.rand(3), expected)


def test_padding_free_option_is_checked():
    assert args_for("True").padding_free == "true"
    with pytest.raises(UserError, match="--padding_free must be auto, true or false, found 'yes'"):
        args_for("yes")


def test_missing_flash_attention_is_a_user_error(tiny_bert):
    with pytest.raises(UserError, match="--attn_implementation flash_attention_2: .*FlashAttention"):
        load_encoder(tiny_bert, attn_implementation="flash_attention_2")


def test_attn_implementation_reaches_an_encoder_taken_from_a_run(tiny_bert, tmp_path):
    model = SequenceClassifier(load_encoder(tiny_bert), num_labels=2)
    model.save_pretrained(tmp_path / "run")
    started = load_starting_encoder(str(tmp_path / "run"), attn_implementation=EMULATED)
    assert started.config._attn_implementation == EMULATED


# ---- a real training run --------------------------------------------------------------------------
def _no_dropout_model(tiny_bert, directory):
    """The tiny BERT without dropout, so a padded and a flattened run compute the same function."""
    config = AutoConfig.from_pretrained(tiny_bert, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    AutoModel.from_pretrained(tiny_bert, config=config).save_pretrained(directory)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(directory)
    return str(directory)


def test_training_padding_free_matches_padded_training(tiny_bert, tmp_path, capsys, monkeypatch):
    from encoder_tasks.cli import main

    model_dir = _no_dropout_model(tiny_bert, tmp_path / "model")
    sentences = [text.split() for text in CORPUS]
    lines = []
    for i, words in enumerate(sentences * 2):
        tags = ["B-PER" if (i + j) % 4 == 0 else "O" for j in range(len(words))]
        lines.append("\n".join(f"{w}\t{t}" for w, t in zip(words, tags)))
    data = write(tmp_path / "train.conll", "\n\n".join(lines) + "\n")
    flattened = []
    real_flatten = pf.flatten_batch
    monkeypatch.setattr(pf, "flatten_batch", lambda *a, **k: flattened.append(1) or real_flatten(*a, **k))
    losses = {}
    for choice in ("false", "true"):
        flattened.clear()
        out = tmp_path / f"run-{choice}"
        main(
            ["ner", "train", "--model_name_or_path", model_dir, "--train_file", str(data)]
            + ["--output_dir", str(out), "--attn_implementation", EMULATED, "--padding_free", choice]
            + ["--max_steps", "3", "--per_device_train_batch_size", "4", "--logging_steps", "1"]
            + ["--save_strategy", "no", "--report_to", "none", "--mixed_precision", "no", "--crf", "true"]
            + ["--dataloader_num_workers", "0", "--disable_tqdm", "true"]
        )
        log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
        losses[choice] = [row["loss"] for row in log if "loss" in row]
        assert (out / "metrics.json").is_file()
        assert bool(flattened) == (choice == "true")  # padded batches really were flattened
    assert "padding-free attention on (varlen_emulation)" in capsys.readouterr().out
    assert len(losses["true"]) == len(losses["false"]) == 3
    assert losses["true"] == pytest.approx(losses["false"], rel=1e-4, abs=1e-5)


# ---- on a GPU with FlashAttention (skipped elsewhere) ---------------------------------------------
def _flash_attn_ready() -> bool:
    import importlib.util

    return torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None


@pytest.mark.gpu
@pytest.mark.skipif(not _flash_attn_ready(), reason="needs a CUDA GPU and the flash-attn package")
@pytest.mark.parametrize("family", ["bert", "roberta", "modernbert"])
def test_flash_attention_2_on_a_gpu(tiny_models, family):
    """The real kernel: auto turns padding-free on, and flattened == padded within bf16 noise."""
    args = EncoderTrainingArguments(output_dir=None, padding_free="auto", mixed_precision="bf16")
    torch.manual_seed(0)
    model = TokenTagger(encoder(tiny_models[family], "flash_attention_2"), ["O", "B-X", "I-X"])
    assert pf.configure_padding_free(model, args) is True
    batch = {k: v.cuda() for k, v in ner_batch(tokenizer_of(tiny_models[family])).items()}
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        flat = model(**batch).logits.float()
        model.padding_free = False
        padded = model(**batch).logits.float()
    assert (flat - padded).norm() <= 2e-2 * padded.norm()
    sdpa = TokenTagger(encoder(tiny_models[family], "sdpa"), ["O", "B-X", "I-X"])
    with pytest.raises(UserError, match="'sdpa'"):
        pf.configure_padding_free(sdpa, EncoderTrainingArguments(output_dir=None, padding_free="true"))

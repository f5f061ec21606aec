"""The MLM head: masked-only vs full head, pretrained heads, saving, tokenizer training, presets."""

import copy
import json

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer, EvalPrediction

from encoder_tasks.backbone import load_encoder
from encoder_tasks.heads import EncoderWithHead, load_starting_encoder
from encoder_tasks.tasks.mlm.args import MLMSettings
from encoder_tasks.tasks.mlm.masking import MaskingCollator
from encoder_tasks.tasks.mlm.metrics import compute_metrics, masked_predictions
from encoder_tasks.tasks.mlm.model import MaskedLanguageModel
from encoder_tasks.tasks.mlm.model import build_model as build_head
from encoder_tasks.tasks.mlm.tokenizer import PRESETS, build_from_scratch, train_wordpiece
from encoder_tasks.tasks.mlm.trainer import HeadWarmup
from encoder_tasks.testing import FAMILIES, make_tiny_tokenizer

TEXTS = [
    "the film was good and fun",
    "john smith lives in paris",
    "what did the cat do ? the cat sat on the mat",
]


def build_model(encoder, settings):
    """The head as a training run builds it (from the encoder's checkpoint)."""
    return build_head(encoder, MLMSettings(**settings), training={})


def batch_for(path, seed=0):
    tok = AutoTokenizer.from_pretrained(path)
    feats = [{"input_ids": ids} for ids in tok(TEXTS)["input_ids"]]
    return MaskingCollator(tok, mask_rate=0.4, seed=seed)(feats)


@pytest.mark.parametrize("family", FAMILIES)
def test_masked_only_head_gives_the_full_head_loss(tiny_models, family):
    torch.manual_seed(0)
    model = build_model(load_encoder(tiny_models[family]), {"masked_only_head": True}).eval()
    full = copy.deepcopy(model)
    full.masked_only_head = False
    batch = batch_for(tiny_models[family])
    a, b = model(**batch), full(**batch)
    assert torch.allclose(a.loss, b.loss, atol=1e-6)
    n_masked = int((batch["labels"] != -100).sum())
    assert a.logits.shape == (n_masked, model.head.bias.shape[0]) and b.logits.dim() == 3
    a.loss.backward()
    b.loss.backward()
    grads_a = dict(model.named_parameters())
    for name, param in full.named_parameters():
        if param.grad is not None:
            assert torch.allclose(param.grad, grads_a[name].grad, atol=1e-6), name
    # the evaluation summary is the same for both heads
    assert torch.allclose(
        masked_predictions(a.logits, batch["labels"]), masked_predictions(b.logits, batch["labels"])
    )


def test_loss_normalised_by_num_items_in_batch(tiny_bert):
    model = build_model(load_encoder(tiny_bert), {}).eval()
    batch = batch_for(tiny_bert)
    n = int((batch["labels"] != -100).sum())
    mean = model(**batch).loss
    summed = model(**batch, num_items_in_batch=torch.tensor(2 * n)).loss
    assert torch.allclose(summed * 2, mean)
    none_masked = dict(batch, labels=torch.full_like(batch["labels"], -100))
    assert model(**none_masked).loss.item() == 0.0  # not NaN


def test_compute_metrics_against_brute_force():
    labels = np.array([[-100, 5, 7, -100], [3, -100, -100, -100]])
    preds = np.zeros((2, 4, 2))
    preds[0, 1], preds[0, 2], preds[1, 0] = (5, 0.5), (2, 1.5), (3, 1.0)
    out = compute_metrics(EvalPrediction(predictions=preds, label_ids=labels))
    assert out["masked_accuracy"] == pytest.approx(2 / 3)
    assert out["masked_loss"] == pytest.approx(1.0) and out["perplexity"] == pytest.approx(np.e)
    assert out["masked_tokens"] == 3


@pytest.mark.parametrize("family", FAMILIES)
def test_pretrained_head_is_copied_exactly(tmp_path, tiny_models, family):
    torch.manual_seed(1)
    reference = AutoModelForMaskedLM.from_config(AutoModel.from_pretrained(tiny_models[family]).config)
    with torch.no_grad():  # a head that is clearly not the initial one
        for name, param in reference.named_parameters():
            if not name.startswith(reference.base_model_prefix + "."):
                param.add_(torch.randn_like(param) * 0.1)
    reference.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_models[family]).save_pretrained(tmp_path)
    model = build_model(load_encoder(str(tmp_path)), {"masked_only_head": False}).eval()
    assert model.head_source == "pretrained"
    batch = batch_for(str(tmp_path))
    reference.eval()
    with torch.no_grad():
        ours = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        theirs = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert torch.allclose(ours, theirs, atol=1e-4)


def test_checkpoint_without_head_gets_a_new_tied_head(tiny_bert):
    model = build_model(load_encoder(tiny_bert), {})
    assert model.head_source == "new"
    assert model.head.decoder.weight is model.encoder.get_input_embeddings().weight


def test_save_reload_and_start_another_task(tmp_path, tiny_bert):
    model = build_model(load_encoder(tiny_bert), {}).eval()
    with torch.no_grad():
        model.head.bias.add_(0.5)
    model.settings = model.settings.replace(mask_rate=0.3)
    model.save_pretrained(tmp_path)
    loaded = EncoderWithHead.from_pretrained(tmp_path)
    assert isinstance(loaded, MaskedLanguageModel)
    assert loaded.settings == model.settings and loaded.settings.mask_rate == 0.3
    assert loaded.head.decoder.weight is loaded.encoder.get_input_embeddings().weight  # still tied
    batch = batch_for(tiny_bert)
    assert torch.allclose(model(**batch).logits, loaded(**batch).logits, atol=1e-6)
    # the run's encoder is what any task starts from, and a new MLM run keeps the trained head
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(tmp_path)
    encoder = load_starting_encoder(str(tmp_path))
    for (name, a), b in zip(model.encoder.state_dict().items(), encoder.state_dict().values()):
        assert torch.equal(a, b), name
    again = build_model(encoder, {})
    assert again.head_source == "run" and torch.equal(again.head.bias, model.head.bias)


def test_head_warmup_freezes_the_encoder_first(tiny_bert):
    model = build_model(load_encoder(tiny_bert), {})

    class State:
        max_steps, global_step = 20, 0

    warm = HeadWarmup(model, 0.1)
    warm.on_train_begin(None, State, None)
    assert warm.steps == 2
    for step, frozen in ((0, True), (1, True), (2, False)):
        State.global_step = step
        warm.on_step_begin(None, State, None)
        assert all(p.requires_grad != frozen for p in model.encoder.parameters())
        assert model.head.dense.weight.requires_grad


def test_tokenizer_training_round_trip(tmp_path):
    corpus = ["The cat sat on the mat.", "Le chat est sur le tapis.", "我爱北京天安门", "hello world"] * 30
    tok = train_wordpiece(corpus, vocab_size=200, min_frequency=1)
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in corpus[:4]:
        ids = loaded(text)["input_ids"]
        assert loaded.unk_token_id not in ids
        assert loaded.decode(ids, skip_special_tokens=True).replace(" ", "") == text.lower().replace(" ", "")
    assert loaded.tokenize("我爱北京") == ["我", "爱", "北", "京"]  # one token per CJK character
    assert (
        loaded.mask_token == "[MASK]"
        and loaded.convert_ids_to_tokens(loaded("hi")["input_ids"])[0] == "[CLS]"
    )


@pytest.mark.parametrize("preset", ["bert-tiny", "bert-mini"])
def test_from_scratch_model_builds_from_preset(tmp_path, preset):
    path = build_from_scratch(["the cat sat on the mat", "a dog ran"] * 20, tmp_path, preset, vocab_size=80)
    model = AutoModel.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    for key, value in PRESETS[preset].items():
        assert getattr(model.config, key) == value
    assert model.config.vocab_size == len(tok) and model.config.pad_token_id == tok.pad_token_id
    mlm = build_model(load_encoder(path), {})
    batch = batch_for(path)
    assert torch.isfinite(mlm(**batch).loss)


def test_from_scratch_copies_another_family(tmp_path, tiny_models):
    path = build_from_scratch(
        ["the cat sat on the mat", "a dog ran"] * 20, tmp_path, tiny_models["roberta"], vocab_size=300
    )
    model = AutoModel.from_pretrained(path)
    assert model.config.model_type == "roberta" and model.config.vocab_size == len(
        AutoTokenizer.from_pretrained(path)
    )


def test_unknown_preset(tmp_path):
    from encoder_tasks.errors import UserError
    from encoder_tasks.tasks.mlm.tokenizer import preset_config

    with pytest.raises(UserError, match="unknown preset"):
        preset_config("bert-huge", make_tiny_tokenizer())


def test_format1_model_still_loads(tmp_path, tiny_bert):
    """A model saved before format 2 (flat metadata, the head in ``encoder_tasks.tasks.mlm``)."""
    model = build_model(load_encoder(tiny_bert), {"masked_only_head": False}).eval()
    model.save_pretrained(tmp_path)
    (tmp_path / "encoder_tasks.json").write_text(
        json.dumps(
            {
                "format_version": 1,
                "task": "mlm",
                "head_class": "encoder_tasks.tasks.mlm:MaskedLanguageModel",
                "head_config": {"masked_only_head": False, "activation": "gelu"},
                "text_column": "body",
                "max_length": 64,
                "line_by_line": True,
                "mask_rate": 0.3,
                "mask_replace_prob": 0.8,
                "random_replace_prob": 0.1,
                "whole_word_masking": True,
                "chinese_segmenter": "none",
                "eval_mask_seed": 7,
                "base_model": tiny_bert,
            }
        )
    )
    loaded = EncoderWithHead.from_pretrained(tmp_path)
    assert isinstance(loaded, MaskedLanguageModel) and loaded.masked_only_head is False
    assert loaded.settings == MLMSettings(
        max_length=64,
        base_model=tiny_bert,
        text_column="body",
        line_by_line=True,
        mask_rate=0.3,
        whole_word_masking=True,
        chinese_segmenter="none",
        eval_mask_seed=7,
        masked_only_head=False,
        activation="gelu",
    )
    batch = batch_for(tiny_bert)
    assert torch.allclose(model(**batch).logits, loaded(**batch).logits, atol=1e-6)


def test_saved_model_head_comes_from_its_weights(tiny_bert):
    """Rebuilding a saved model (no ``training``) does not look for a checkpoint head."""
    model = build_head(load_encoder(tiny_bert), MLMSettings(activation="relu"))
    assert model.head_source == "run" and model.settings.activation == "relu"


def test_trainer_options_come_from_task_args(tmp_path, tiny_bert):
    from transformers import TrainingArguments

    from encoder_tasks.tasks.mlm.args import MLMArguments
    from encoder_tasks.tasks.mlm.trainer import MLMTrainer

    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)

    def warmups(task_args):
        model = build_model(load_encoder(tiny_bert), {})
        trainer = MLMTrainer(model=model, args=args, task_args=task_args)
        found = [c for c in trainer.callback_handler.callbacks if isinstance(c, HeadWarmup)]
        return [c.steps for c in found], trainer.evaluate_before_training

    assert warmups(MLMArguments(head_warmup_steps=3, evaluate_before_training=True)) == ([3], True)
    assert warmups(MLMArguments(head_warmup_steps=3, from_scratch="bert-tiny")) == ([], False)
    assert warmups(MLMArguments(head_warmup_steps=0)) == ([], False)
    assert warmups(None) == ([], False)


def test_fill_mask_matches_the_full_head_at_any_batch_size(tiny_bert):
    from encoder_tasks.tasks.mlm.predict import fill_mask

    torch.manual_seed(3)
    model = build_model(load_encoder(tiny_bert), {}).eval()
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    texts = ["the [MASK] sat on the [MASK]", "no mask here", "john <mask> in paris and works"]
    one = fill_mask(model, tok, texts, top_k=3, batch_size=1, precision="fp32")
    assert one == fill_mask(model, tok, texts, top_k=3, batch_size=3, precision="fp32")
    assert [len(f) for f in one] == [2, 0, 1]
    batch = tok(texts[0].replace("[MASK]", tok.mask_token), return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits[0]
    positions = (batch["input_ids"][0] == tok.mask_token_id).nonzero().flatten()
    for fills, position in zip(one[0], positions):
        top = logits[position].softmax(-1).topk(3)
        assert [c["token"] for c in fills] == tok.convert_ids_to_tokens(top.indices.tolist())
        assert [c["score"] for c in fills] == pytest.approx(top.values.tolist(), abs=1e-5)

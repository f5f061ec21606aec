"""The tagging head: losses, learning-rate groups, decoding, metrics, saved settings."""

import numpy as np
import pytest
import torch

from encoder_tasks.backbone import load_encoder
from encoder_tasks.tasks.ner.args import NerArguments, NerSettings
from encoder_tasks.tasks.ner.decoding import decode
from encoder_tasks.tasks.ner.metrics import entity_metrics
from encoder_tasks.tasks.ner.model import TokenTagger
from encoder_tasks.tasks.ner.trainer import NerTrainer
from encoder_tasks.training_args import EncoderTrainingArguments

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


@pytest.fixture
def batch():
    return {
        "input_ids": torch.tensor([[2, 50, 51, 52, 3, 0], [2, 53, 54, 3, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]]),
        "word_index": torch.tensor([[1, 2, 3], [1, 3, -1]]),  # word 1 of row 2 has two sub-tokens
        "labels": torch.tensor([[1, 2, 0], [3, 0, -100]]),
    }


@pytest.mark.parametrize("crf", [False, True])
def test_forward_gathers_first_subtokens_and_masks_padding(tiny_bert, batch, crf):
    torch.manual_seed(0)
    model = TokenTagger(load_encoder(tiny_bert), LABELS, crf=crf).eval()
    out = model(**batch)
    assert out.logits.shape == (2, 3, len(LABELS))
    assert torch.all(out.logits[1, 2] == 0)  # padding word
    hidden = model.encode(batch["input_ids"], batch["attention_mask"])
    expected = model.classifier(hidden)[1, 3]
    assert torch.allclose(out.logits[1, 1], expected, atol=1e-5)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    out.loss.backward()
    assert model.classifier.weight.grad is not None


def test_all_subtoken_targets_add_a_loss(tiny_bert, batch):
    torch.manual_seed(0)
    model = TokenTagger(load_encoder(tiny_bert), LABELS, label_subtokens="all").eval()
    targets = torch.tensor([[-100, 1, 2, 0, -100, -100], [-100, 3, 4, 0, -100, -100]])
    with_targets = model(**batch, subtoken_targets=targets).loss
    ce = torch.nn.functional.cross_entropy(
        model.classifier(model.encode(batch["input_ids"], batch["attention_mask"])).flatten(0, 1),
        targets.flatten(),
        ignore_index=-100,
    )
    assert with_targets.item() == pytest.approx(ce.item(), rel=1e-5)


def test_learning_rate_groups(tiny_bert, tmp_path):
    model = TokenTagger(load_encoder(tiny_bert), LABELS, crf=True)
    args = EncoderTrainingArguments(output_dir=str(tmp_path), learning_rate=5e-5, report_to="none")
    task_args = NerArguments(head_learning_rate=1e-3, crf_learning_rate=1e-2)
    optimizer = NerTrainer(model=model, args=args, task_args=task_args).create_optimizer()
    by_id = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    assert by_id[id(model.classifier.weight)]["lr"] == pytest.approx(1e-3)
    assert by_id[id(model.crf.transitions)]["lr"] == pytest.approx(1e-2)
    assert by_id[id(model.crf.transitions)]["weight_decay"] == 0.0
    encoder_weight = next(p for n, p in model.encoder.named_parameters() if n.endswith("query.weight"))
    assert by_id[id(encoder_weight)]["lr"] == pytest.approx(5e-5)
    assert by_id[id(encoder_weight)]["weight_decay"] == pytest.approx(args.weight_decay)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))


def test_constrained_softmax_decoding_spans_windows_and_is_valid():
    rng = np.random.default_rng(0)
    scores = [rng.normal(size=(n, len(LABELS))).astype(np.float32) for n in (1, 5, 9)]
    argmax, _ = decode(scores, LABELS, mode="argmax")
    viterbi, probs = decode(scores, LABELS, mode="viterbi")
    assert [t for s in argmax for t in s] == [LABELS[i] for s in scores for i in s.argmax(-1)]
    for tags in viterbi:
        for prev, tag in zip(["O", *tags], tags):
            assert not tag.startswith("I-") or prev[2:] == tag[2:]
    assert all(((p > 0) & (p <= 1)).all() for p in probs)


def test_strict_and_lenient_differ_on_ill_formed_predictions():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    pred = [["I-PER", "I-PER", "O", "B-LOC"]]
    m = entity_metrics(gold, pred)
    assert m["f1_lenient"] == 1.0
    assert m["f1_strict"] == pytest.approx(2 / 3)  # strict: PER is not an entity (P=1, R=1/2)
    assert m["per_type"]["LOC"]["f1"] == 1.0 and m["per_type"]["PER"]["f1"] == 0.0


def test_learning_rates_fall_back_to_the_encoder_rate(tiny_bert, tmp_path):
    model = TokenTagger(load_encoder(tiny_bert), LABELS, crf=True)
    args = EncoderTrainingArguments(output_dir=str(tmp_path), learning_rate=5e-5, report_to="none")
    task_args = NerArguments(head_learning_rate=None, crf_learning_rate=None)
    optimizer = NerTrainer(model=model, args=args, task_args=task_args).create_optimizer()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([5e-5] * len(optimizer.param_groups))


# ---- saved settings ---------------------------------------------------------------------------
FORMAT1 = {  # encoder_tasks.json as written before format 2 (commit 82e43bd), a BIOES CRF run
    "format_version": 1,
    "task": "ner",
    "head_class": "encoder_tasks.tasks.ner:TokenTagger",
    "head_config": {
        "label_names": LABELS,
        "crf": True,
        "constrained": True,
        "dropout": 0.2,
        "label_subtokens": "all",
    },
    "tag_scheme": "bioes",
    "label_names": LABELS,
    "entity_types": ["LOC", "PER"],
    "tokens_column": "words",
    "tags_column": "ner_tags",
    "token_prefix": "en:",
    "max_length": 64,
    "window_stride": 8,
    "decoding": "auto",
    "tokenization": "word",
    "token_separator": " ",
    "added_characters": 0,
    "invalid_tags": "repair",
    "crf": True,
    "head_learning_rate": 0.001,
    "crf_learning_rate": 0.01,
    "base_model": "bert-base-cased",
}


def test_format1_model_loads_with_its_settings(tiny_bert, tmp_path):
    import json

    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.heads import EncoderWithHead
    from encoder_tasks.tasks.ner.model import build_model
    from encoder_tasks.tasks.ner.predict import predict_sentences

    torch.manual_seed(3)
    settings = NerSettings.from_format1(FORMAT1)
    assert settings.classifier_dropout == 0.2 and settings.label_subtokens == "all" and settings.crf
    assert settings.tokens_column == "words" and settings.invalid_tags == "repair"
    assert settings.base_model == "bert-base-cased" and dict(settings.extra) == {}
    model = build_model(load_encoder(tiny_bert), settings)
    model.save_pretrained(tmp_path / "run")
    load_tokenizer(tiny_bert).save_pretrained(tmp_path / "run")
    (tmp_path / "run" / "encoder_tasks.json").write_text(json.dumps(FORMAT1))
    loaded = EncoderWithHead.from_pretrained(tmp_path / "run")
    assert isinstance(loaded, TokenTagger) and loaded.settings == settings
    assert loaded.crf is not None and loaded.crf.allowed is not None
    assert torch.equal(loaded.crf.transitions, model.crf.transitions)
    sentences = [["john", "lives", "in", "paris"]]
    tokenizer = load_tokenizer(tiny_bert)
    assert (
        predict_sentences(loaded, tokenizer, sentences)[0]
        == predict_sentences(model.eval(), tokenizer, sentences)[0]
    )
    # Saved again, it is format 2 and loads to the same settings.
    loaded.save_pretrained(tmp_path / "again")
    saved = json.loads((tmp_path / "again" / "encoder_tasks.json").read_text())
    assert saved["format_version"] == 2 and saved["settings"]["classifier_dropout"] == 0.2
    assert EncoderWithHead.from_pretrained(tmp_path / "again").settings == settings


def test_settings_fill_the_flags_left_unset():
    from encoder_tasks.settings import resolve
    from encoder_tasks.tasks.ner.args import NerPredictArguments

    saved = NerSettings.from_format1(FORMAT1)
    flags = NerPredictArguments(model_dir="m", input_file="i", output_file="o", window_stride=4)
    resolve(flags, saved)
    assert (flags.max_length, flags.tokens_column, flags.window_stride) == (64, "words", 4)
    task_args = NerArguments(decoding="argmax")
    resolve(task_args, saved)
    assert task_args.tag_scheme == "bioes" and task_args.invalid_tags == "repair"
    assert task_args.decoding == "argmax" and task_args.token_prefix == "en:"


def test_a_tagger_built_by_hand_saves_and_reloads_its_labels(tiny_bert, tmp_path):
    from encoder_tasks.heads import EncoderWithHead

    model = TokenTagger(load_encoder(tiny_bert), ["NN", "VB"], constrained=False, dropout=0.3)
    model.save_pretrained(tmp_path / "run")
    loaded = EncoderWithHead.from_pretrained(tmp_path / "run")
    assert loaded.settings.label_names == ["NN", "VB"] and loaded.settings.tag_scheme == "none"
    assert loaded.crf is None and loaded.dropout.p == 0.3


def test_predict_honours_batch_size_and_precision_and_never_overwrites(tiny_bert, tmp_path, monkeypatch):
    import json

    from encoder_tasks import predict as shared
    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.errors import UserError
    from encoder_tasks.tasks.ner import predict
    from encoder_tasks.tasks.ner.args import NerPredictArguments

    model = TokenTagger(load_encoder(tiny_bert), LABELS)
    model.settings = model.settings.replace(max_length=6, window_stride=1)
    model.save_pretrained(tmp_path / "run")
    load_tokenizer(tiny_bert).save_pretrained(tmp_path / "run")
    (tmp_path / "in.txt").write_text("john lives in paris today\n\nacme\n")
    calls = []

    def spy(model, features, collate, batch_size, precision, **kwargs):
        calls.append((batch_size, precision, max(len(f["input_ids"]) for f in features)))
        return shared.run_batches(model, features, collate, batch_size, precision, **kwargs)

    monkeypatch.setattr(predict, "run_batches", spy)
    args = NerPredictArguments(
        model_dir=str(tmp_path / "run"),
        input_file=str(tmp_path / "in.txt"),
        output_file=str(tmp_path / "out.jsonl"),
        batch_size=3,
        precision="fp32",
    )
    assert predict.predict_file(args)["predictions"] == 2
    assert calls == [(3, "fp32", 6)]  # the saved max_length: windows of 6 sub-tokens
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rows] == [1, 3] and rows[0]["tokens"][0] == "john"
    with pytest.raises(UserError, match="already exists"):
        predict.predict_file(args)

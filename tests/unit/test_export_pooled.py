"""Mean- and max-pooled classifiers (the default head is mean-pooled) export to a layout stock
transformers loads: the weights plus ``modeling_encoder_tasks.py`` named in ``auto_map``.

``AutoModelForSequenceClassification.from_pretrained(dir, trust_remote_code=True)`` must give
the toolkit model's logits (1e-5) and ``pipeline("text-classification", ...)`` its labels, for
a single-label, a multi-label and a regression head; a CLS head keeps the plain stock layout.
"""

import json

import pytest
import torch

from encoder_tasks.backbone import load_encoder, load_tokenizer
from encoder_tasks.commands.export import export_model
from encoder_tasks.registry import TASKS
from encoder_tasks.tasks.classification.predict import predict_texts

TEXTS = ["the film was good and fun", "I hate this awful film .", "john smith lives in paris", "a"]
HEADS = {
    "single_label": ("neg", "neutral", "pos"),
    "multi_label": ("action", "comedy", "drama"),
    "regression": ("score",),
}


def export_head(path, tmp_path, problem_type="single_label", pooling="mean", task="classification"):
    """A tiny ``pooling`` head with large random weights, saved as a run and exported."""
    torch.manual_seed(3)
    spec = TASKS[task]
    settings = spec.Settings(
        label_names=list(HEADS[problem_type]), problem_type=problem_type, pooling=pooling, max_length=64
    )
    model = spec.build_model(load_encoder(path), settings).eval()
    torch.nn.init.normal_(model.classifier.weight, std=2.0)
    torch.nn.init.normal_(model.classifier.bias, std=1.0)
    tokenizer = load_tokenizer(path)
    model.save_pretrained(tmp_path / "run")
    tokenizer.save_pretrained(tmp_path / "run")
    info = export_model(tmp_path / "run", tmp_path / "exported")
    return model, tokenizer, info, tmp_path / "exported"


def load_stock(dest):
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(dest, trust_remote_code=True).eval()


def assert_same_logits(model, stock, tokenizer, pairs=None):
    # Padded batches: the pooling must skip the padding as the toolkit's does.
    batch = tokenizer(TEXTS, pairs, padding=True, return_tensors="pt")
    with torch.no_grad():
        want = model(**batch).logits
        got = stock(**batch).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["bert", "distilbert", "modernbert"])
def test_mean_pooled_classifier_loads_in_stock_transformers_and_its_pipeline(tiny_models, tmp_path, family):
    from transformers import pipeline

    model, tokenizer, info, dest = export_head(tiny_models[family], tmp_path)
    config = json.loads((dest / "config.json").read_text())
    assert (dest / "modeling_encoder_tasks.py").exists()
    assert config["auto_map"]["AutoModelForSequenceClassification"] == (
        "modeling_encoder_tasks.PooledEncoderForSequenceClassification"
    )
    assert config["pooling"] == "mean" and info["architecture"] == "PooledEncoderForSequenceClassification"
    assert info["trust_remote_code"] is True  # export_info.json says how to load it

    stock = load_stock(dest)
    assert type(stock).__name__ == "PooledEncoderForSequenceClassification"
    assert stock.config.id2label == {0: "neg", 1: "neutral", 2: "pos"}
    assert_same_logits(model, stock, tokenizer)

    pipe = pipeline("text-classification", model=str(dest), trust_remote_code=True, top_k=None, device=-1)
    ours, _ = predict_texts(model, tokenizer, TEXTS, max_length=64, stride=16, precision="fp32")
    for got, want in zip(pipe(TEXTS), ours):
        got = {row["label"]: row["score"] for row in got}
        assert max(got, key=got.get) == want["label"]
        assert got == pytest.approx(want["probabilities"], abs=1e-4)


@pytest.mark.parametrize(("problem_type", "pooling"), [("multi_label", "max"), ("regression", "mean")])
def test_multi_label_and_regression_heads_keep_their_outputs(tiny_models, tmp_path, problem_type, pooling):
    from transformers import pipeline

    model, tokenizer, _, dest = export_head(tiny_models["bert"], tmp_path, problem_type, pooling)
    stock = load_stock(dest)
    assert stock.config.problem_type == {"multi_label": "multi_label_classification"}.get(
        problem_type, problem_type
    )
    assert stock.config.pooling == pooling
    assert_same_logits(model, stock, tokenizer)

    pipe = pipeline("text-classification", model=str(dest), trust_remote_code=True, top_k=None, device=-1)
    ours, _ = predict_texts(model, tokenizer, TEXTS, max_length=64, stride=16, precision="fp32")
    for got, want in zip(pipe(TEXTS), ours):
        got = {row["label"]: row["score"] for row in got}
        if problem_type == "regression":  # the pipeline applies no function to a regression score
            assert got["score"] == pytest.approx(want["score"], abs=1e-4)
        else:  # sigmoid per label; the toolkit's labels are those over their (0.5) thresholds
            assert got == pytest.approx(want["probabilities"], abs=1e-4)
            assert sorted(k for k, p in got.items() if p >= 0.5) == sorted(want["labels"])


def test_pair_head_and_the_loss_of_the_loaded_model(tiny_models, tmp_path):
    """A mean-pooled cross-encoder reads both segments; the loaded model trains (its loss)."""
    model, tokenizer, _, dest = export_head(tiny_models["bert"], tmp_path, "regression", task="pair")
    stock = load_stock(dest)
    assert_same_logits(model, stock, tokenizer, pairs=TEXTS[::-1])
    batch = tokenizer(TEXTS, TEXTS[::-1], padding=True, return_tensors="pt")
    labels = torch.tensor([0.5, 1.0, 2.0, 3.0])
    with torch.no_grad():
        want = model(**batch, labels=labels).loss
        got = stock(**batch, labels=labels).loss
    assert float(got) == pytest.approx(float(want), rel=1e-5)


def test_cls_head_keeps_the_plain_stock_layout(tiny_models, tmp_path):
    from transformers import AutoModelForSequenceClassification

    model, tokenizer, info, dest = export_head(tiny_models["bert"], tmp_path, pooling="cls")
    assert info["architecture"] == "BertForSequenceClassification" and "trust_remote_code" not in info
    assert "auto_map" not in json.loads((dest / "config.json").read_text())
    assert not (dest / "modeling_encoder_tasks.py").exists()
    stock = AutoModelForSequenceClassification.from_pretrained(dest).eval()  # no remote code
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch).logits, model(**batch).logits, atol=1e-4, rtol=1e-4)


def test_without_trust_remote_code_loading_stops_instead_of_guessing(tiny_models, tmp_path):
    """No silent stock head with random weights: transformers asks for trust_remote_code."""
    from transformers import AutoModelForSequenceClassification

    _, _, _, dest = export_head(tiny_models["bert"], tmp_path)
    with pytest.raises(ValueError, match="trust_remote_code"):
        AutoModelForSequenceClassification.from_pretrained(dest, trust_remote_code=False)


def test_the_default_pooling_depends_on_the_head_and_says_what_export_gives(tiny_models, tmp_path):
    """Chosen by benchmarks/bench_pooling.py --sets (docs/ecosystem.md): mean pooling for a head
    that reads a pair of texts, [CLS] for one text. A [CLS] head exports to the plain stock class;
    a mean-pooled cross-encoder exports with its modeling file (trust_remote_code=True)."""
    from encoder_tasks.tasks.classification import ClassificationArguments
    from encoder_tasks.tasks.classification.args import resolve_pooling
    from encoder_tasks.tasks.pair import PairArguments

    assert ClassificationArguments().pooling == PairArguments().pooling == "auto"
    single = resolve_pooling("auto", pair=False)
    _, _, info, dest = export_head(tiny_models["bert"], tmp_path / "a", pooling=single)
    assert single == "cls" and info["architecture"] == "BertForSequenceClassification"
    assert not (dest / "modeling_encoder_tasks.py").exists()
    pair = resolve_pooling("auto", pair=True)
    _, _, info, dest = export_head(
        tiny_models["bert"], tmp_path / "b", "regression", pooling=pair, task="pair"
    )
    assert pair == "mean" and (dest / "modeling_encoder_tasks.py").exists() and info.get("trust_remote_code")

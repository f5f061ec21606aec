"""ONNX export parity (onnxruntime against PyTorch) for every head, CRF taggers' tags decoded
by the NER task's Viterbi, and :class:`OnnxModel` reading the settings of format-2 and format-1 exports."""

import itertools
import json

import numpy as np
import pytest
import torch

from encoder_tasks.artifact import TASK_FILE
from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.commands.export import export_model
from encoder_tasks.errors import UserError
from encoder_tasks.export import OnnxModel
from encoder_tasks.registry import TASKS
from encoder_tasks.tasks.ner.onnx import decode_tags
from tests.unit.test_export import FORMAT1, TEXTS, build, classifier, save, tagger

onnxruntime = pytest.importorskip("onnxruntime")
LONG = "a longer input than any of the others , by far"


def test_onnx_crf_decoding_matches_brute_force():
    rng = np.random.default_rng(0)
    emissions, transitions = rng.normal(size=(1, 4, 3)), rng.normal(size=(3, 3))
    start, end = rng.normal(size=3), rng.normal(size=3)

    def score(path):
        total = start[path[0]] + end[path[-1]] + sum(emissions[0, t, k] for t, k in enumerate(path))
        return total + sum(transitions[a, b] for a, b in zip(path, path[1:]))

    best = max(itertools.product(range(3), repeat=4), key=score)
    crf = {"transitions": transitions, "start": start, "end": end}
    served = type("Served", (), {"label_names": ["a", "b", "c"], "crf": crf})()
    assert decode_tags(served, emissions, np.ones((1, 4))) == [["abc"[k] for k in best]]


def test_crf_tagger_is_refused_for_stock_but_exports_to_onnx(tiny_models, tmp_path):
    path = tiny_models["bert"]
    tokenizer = load_tokenizer(path)
    model = tagger(path, crf=True)
    save(model, tokenizer, tmp_path / "run")
    with pytest.raises(UserError, match="CRF.*--format onnx"):
        export_model(tmp_path / "run", tmp_path / "stock")
    info = export_model(tmp_path / "run", tmp_path / "onnx", fmt="onnx")
    assert info["max_abs_diff"] < 1e-3
    served = OnnxModel(tmp_path / "onnx")
    out = served.outputs(TEXTS)
    tags = decode_tags(served, out["logits"], out["attention_mask"])
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
        paths, _ = model.crf.decode(logits, batch["attention_mask"].bool())
    for row, path_row, mask in zip(tags, paths, batch["attention_mask"]):
        assert row == [model.label_names[i] for i in path_row[: int(mask.sum())].tolist()]


@pytest.mark.parametrize("family", ["bert", "deberta-v2", "modernbert"])
def test_onnx_classifier_matches_pytorch(tiny_models, tmp_path, family):
    path = tiny_models[family]
    tokenizer = load_tokenizer(path)
    model = classifier(path, pooling="mean")  # any head exports to ONNX
    save(model, tokenizer, tmp_path / "run")
    export_model(tmp_path / "run", tmp_path / "onnx", fmt="onnx")
    served = OnnxModel(tmp_path / "onnx")
    assert served.label_names == ["neg", "neutral", "pos"]
    got = served.outputs(TEXTS + [LONG])
    batch = tokenizer(TEXTS + [LONG], padding=True, return_tensors="pt")
    with torch.no_grad():
        want = model(**batch).logits.numpy()
    np.testing.assert_allclose(got["logits"], want, atol=1e-4, rtol=1e-4)


def _head(task, path):
    if task == "ner":
        return build("ner", path, 5, label_names=["O", "B-X", "I-X"])
    if task == "embedding":
        return build("embedding", path, 5, pooling="mean", normalize=True)
    return build(task, path, 5)


@pytest.mark.parametrize("task", ["qa", "mlm", "embedding", "ner", "pair"])
def test_onnx_every_head_matches_pytorch(tiny_models, tmp_path, task):
    path = tiny_models["roberta"]  # BPE, no token types
    tokenizer = load_tokenizer(path)
    model = classifier(path, task="pair", pooling="max") if task == "pair" else _head(task, path)
    save(model, tokenizer, tmp_path / "run")
    export_model(tmp_path / "run", tmp_path / "onnx", fmt="onnx")
    outputs = TASKS[task].onnx_outputs
    served = OnnxModel(tmp_path / "onnx")
    assert served.output_names == list(outputs)
    pairs = TEXTS[::-1] if task in ("qa", "pair") else None
    got = served.outputs(TEXTS, pairs)
    batch = tokenizer(TEXTS, pairs, padding=True, return_tensors="pt")
    real = batch["attention_mask"].bool().numpy()
    with torch.no_grad():
        out = model(**batch)
    for name, axes in outputs.items():
        value, mine = getattr(out, name).float().numpy(), got[name]
        assert mine.shape == value.shape
        if "sequence" in axes:  # per token: compare real positions
            value, mine = value[real], mine[real]
        np.testing.assert_allclose(mine, value, atol=1e-4, rtol=1e-4)


def test_onnx_export_writes_format2_settings_and_reads_format1(tiny_models, tmp_path):
    path = tiny_models["bert"]
    tokenizer = load_tokenizer(path)
    save(tagger(path, crf=False), tokenizer, tmp_path / "run")
    export_model(tmp_path / "run", tmp_path / "onnx", fmt="onnx")
    meta_file = tmp_path / "onnx" / TASK_FILE
    meta = json.loads(meta_file.read_text())
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    assert meta["format_version"] == 2 and meta["task"] == "ner" and meta["settings"]["label_names"] == labels
    assert meta["onnx"]["outputs"] == ["logits"]
    out = OnnxModel(tmp_path / "onnx").outputs(TEXTS)
    want = decode_tags(OnnxModel(tmp_path / "onnx"), out["logits"], out["attention_mask"])
    # An export written before format 2: the settings flat beside head_config.
    old = {"task": "ner", "head_config": meta["head_config"], **meta["settings"], "onnx": meta["onnx"]}
    meta_file.write_text(json.dumps(old))
    served = OnnxModel(tmp_path / "onnx")
    assert served.label_names == labels
    assert decode_tags(served, out["logits"], out["attention_mask"]) == want
    del old["label_names"]  # the oldest files: label names only among the head's arguments
    meta_file.write_text(json.dumps(old))
    assert OnnxModel(tmp_path / "onnx").label_names == labels


@pytest.mark.parametrize("task", ["classification", "ner", "pair"])
def test_format1_models_export_to_onnx_with_their_labels(tmp_path, task):
    """Format-1 fixtures: mean-pooled classifiers and a CRF tagger, which only ONNX serves."""
    saved = json.loads((FORMAT1 / task / TASK_FILE).read_text())
    info = export_model(FORMAT1 / task, tmp_path / "onnx", fmt="onnx")
    assert info["max_abs_diff"] < 1e-3
    served = OnnxModel(tmp_path / "onnx")
    assert served.label_names == saved["label_names"]
    assert served.settings["max_length"] == saved["max_length"]
    assert (tmp_path / "onnx" / "crf.npz").is_file() == bool(saved["head_config"].get("crf"))

"""The OpenVINO backend (encoder_tasks/runtimes/openvino.py): the encoder as an OpenVINO graph.

Hidden states equal torch's on padded batches of varying lengths, threads calling at once get
their own answers, the int8 copy stays close, and an export folder works as a cache.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("openvino")
pytest.importorskip("nncf")

from encoder_tasks.errors import UserError  # noqa: E402
from encoder_tasks.runtimes import openvino as ov_runtime  # noqa: E402
from encoder_tasks.testing import CORPUS, make_tiny_model  # noqa: E402

#: |OpenVINO fp32 - torch| allowed on the tiny encoders' hidden states (values of order 1).
FP32_TOLERANCE = 1e-4
#: Cosine of each sentence's mean-pooled int8 vector with torch's fp32 one, at least.
INT8_MIN_COSINE = 0.99


@pytest.fixture(scope="module")
def bert(tiny_bert):
    from transformers import AutoModel, AutoTokenizer

    return AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(tiny_bert)


@pytest.fixture(scope="module")
def exported(bert, tmp_path_factory):
    return ov_runtime.export_encoder(bert[0], tmp_path_factory.mktemp("ov") / "fp32")


def torch_hidden(encoder, batch) -> np.ndarray:
    with torch.no_grad():
        return encoder(**{k: torch.as_tensor(v) for k, v in batch.items()}).last_hidden_state.numpy()


def mean_pool(hidden, mask) -> np.ndarray:
    mask = np.asarray(mask, dtype=np.float32)[..., None]
    return (hidden * mask).sum(1) / mask.sum(1)


def test_fp32_equals_torch_on_padded_batches_of_varying_length(bert, exported):
    encoder, tokenizer = bert
    runtime = ov_runtime.load(exported, encoder.config, threads=1)
    pairs = tokenizer(CORPUS[:3], CORPUS[3:6], padding=True, return_tensors="pt")  # token types 0 and 1
    batches = [
        tokenizer(CORPUS, padding=True, return_tensors="pt"),
        tokenizer(CORPUS[:1], return_tensors="pt"),
        pairs,
    ]
    assert pairs["token_type_ids"].max() == 1 and batches[0]["attention_mask"].min() == 0
    for batch in batches:
        out = runtime(**batch)
        assert out.last_hidden_state.dtype == torch.float32
        want = torch_hidden(encoder, batch)
        assert out.last_hidden_state.shape == want.shape
        np.testing.assert_allclose(out.last_hidden_state.numpy(), want, atol=FP32_TOLERANCE, rtol=0)
    assert runtime.config is encoder.config
    assert runtime.settings["precision"] == "fp32" and runtime.settings["inference_precision"] == "f32"
    # return_dict=False: a tuple, as the transformers encoders give.
    (hidden,) = runtime(**batches[1], return_dict=False)
    np.testing.assert_allclose(hidden.numpy(), torch_hidden(encoder, batches[1]), atol=FP32_TOLERANCE, rtol=0)


def test_missing_token_types_and_mask_default_as_in_torch(bert, exported):
    encoder, tokenizer = bert
    runtime = ov_runtime.load(exported, encoder.config, threads=1)
    batch = tokenizer(CORPUS[:2], padding=True, return_tensors="pt")
    got = runtime(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    want = torch_hidden(encoder, {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]})
    np.testing.assert_allclose(got.numpy(), want, atol=FP32_TOLERANCE, rtol=0)
    with pytest.raises(ValueError, match="needs input_ids"):
        runtime(inputs_embeds=torch.zeros(1, 3, 32))


def test_distilbert_without_token_types(tmp_path):
    from transformers import AutoModel, AutoTokenizer

    directory = make_tiny_model("distilbert")
    encoder, tokenizer = AutoModel.from_pretrained(directory).eval(), AutoTokenizer.from_pretrained(directory)
    runtime = ov_runtime.from_encoder(encoder, tmp_path / "cache", threads=1)
    assert runtime.input_names == ("input_ids", "attention_mask")
    batch = tokenizer(CORPUS, padding=True, return_tensors="pt")
    batch.pop("token_type_ids", None)
    # token_type_ids given anyway are dropped: the graph does not take them.
    got = runtime(**batch, token_type_ids=torch.zeros_like(batch["input_ids"])).last_hidden_state
    np.testing.assert_allclose(got.numpy(), torch_hidden(encoder, batch), atol=FP32_TOLERANCE, rtol=0)


def test_threads_calling_at_once_get_their_own_answers(bert, exported):
    encoder, tokenizer = bert
    # Two threads each, unpinned: requests in flight at once share the cores.
    runtime = ov_runtime.load(exported, encoder.config, threads=2, pinning=False)
    assert runtime.settings["pinning"] is False
    # Different sentences and lengths per thread: a shared request would mix them up.
    inputs = [tokenizer(CORPUS[i : i + 1 + i % 3], padding=True, return_tensors="pt") for i in range(6)]
    wanted = [torch_hidden(encoder, batch) for batch in inputs]
    start = threading.Barrier(len(inputs))
    errors: list[str] = []

    def call(i):
        start.wait()
        for _ in range(5):
            got = runtime(**inputs[i]).last_hidden_state.numpy()
            if got.shape != wanted[i].shape or not np.allclose(got, wanted[i], atol=FP32_TOLERANCE, rtol=0):
                errors.append(f"thread {i}: got another answer")

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_int8_loads_and_stays_close(bert, exported, tmp_path):
    encoder, tokenizer = bert
    calibration = [
        dict(tokenizer(CORPUS[i : i + 2], padding=True, return_tensors="np")) for i in range(0, 8, 2)
    ]
    xml = ov_runtime.quantize_int8(exported, calibration, tmp_path / "int8")
    info = ov_runtime.read_info(xml.parent)
    assert info["precision"] == "int8" and info["calibration_batches"] == 4 and info["calibration_rows"] == 8
    assert info["source"] == ov_runtime.read_info(exported.parent)["fingerprint"]
    runtime = ov_runtime.load(xml, encoder.config, threads=1)
    assert runtime.settings["precision"] == "int8"
    batch = tokenizer(CORPUS, padding=True, return_tensors="pt")
    got = mean_pool(runtime(**batch).last_hidden_state.numpy(), batch["attention_mask"])
    want = mean_pool(torch_hidden(encoder, batch), batch["attention_mask"])
    cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() > INT8_MIN_COSINE
    # Really int8: the graph carries quantizers, and differs from fp32.
    fp32 = ov_runtime.load(exported, encoder.config, threads=1)(**batch).last_hidden_state.numpy()
    assert not np.allclose(runtime(**batch).last_hidden_state.numpy(), fp32, atol=1e-6)


def test_int8_keeps_ignored_layers_and_refuses_unknown_ones(bert, exported, tmp_path):
    import openvino

    encoder, tokenizer = bert
    layers = ov_runtime.linear_layers(exported)
    # 2 layers x (query, key, value, the attention, attention output, intermediate, output).
    assert len(layers) == 14 and "layer.0.attention.self.query" in layers[0]
    calibration = [dict(tokenizer(CORPUS, padding=True, return_tensors="np"))]
    xml = ov_runtime.quantize_int8(exported, calibration, tmp_path / "int8", ignored_layers=layers[:1])
    assert ov_runtime.read_info(xml.parent)["ignored_layers"] == layers[:1]
    model = openvino.Core().read_model(str(xml))
    kept = next(op for op in model.get_ordered_ops() if op.get_friendly_name() == layers[0])
    quantized = next(op for op in model.get_ordered_ops() if op.get_friendly_name() == layers[1])

    def feeds_from_quantizer(op) -> bool:
        return any(op.input_value(i).get_node().get_type_name() == "FakeQuantize" for i in range(2))

    assert not feeds_from_quantizer(kept) and feeds_from_quantizer(quantized)
    with pytest.raises(UserError, match="'no-such-layer' is not a linear layer"):
        ov_runtime.quantize_int8(exported, calibration, tmp_path / "other", ignored_layers=["no-such-layer"])


def test_bad_calibration_batches_are_refused(exported, tmp_path):
    with pytest.raises(UserError, match="at least one batch"):
        ov_runtime.quantize_int8(exported, [], tmp_path / "q")
    with pytest.raises(UserError, match=r"calibration batch 0: expected attention_mask"):
        ov_runtime.quantize_int8(exported, [{"input_ids": np.ones((1, 3))}], tmp_path / "q")
    bad = {"input_ids": np.ones((2, 3)), "attention_mask": np.ones((2, 4))}
    with pytest.raises(
        UserError, match=r"attention_mask must be \[batch, sequence\] like input_ids \(2, 3\)"
    ):
        ov_runtime.quantize_int8(exported, [bad], tmp_path / "q")


def test_export_is_reused_from_its_folder(bert, exported, monkeypatch):
    import openvino

    encoder, first = bert[0], exported
    written = first.stat().st_mtime_ns

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(openvino, "convert_model", no_conversion)
    # A fresh load of the same weights (another object) finds the export.
    again = type(encoder).from_pretrained(encoder.name_or_path).eval()
    assert ov_runtime.export_encoder(again, first.parent) == first
    runtime = ov_runtime.from_encoder(again, first.parent, threads=1)
    assert runtime.path == first and first.stat().st_mtime_ns == written
    assert sorted(p.name for p in first.parent.iterdir()) == [
        "encoder.bin",
        "encoder.xml",
        "encoder_info.json",
    ]


def test_an_export_of_other_weights_is_never_overwritten_silently(bert, exported, tmp_path):
    encoder = bert[0]
    xml = Path(shutil.copytree(exported.parent, tmp_path / "cache")) / "encoder.xml"
    before = xml.read_bytes()
    changed = type(encoder)(encoder.config).eval()
    changed.load_state_dict(encoder.state_dict())
    with torch.no_grad():
        changed.embeddings.word_embeddings.weight[5] += 1.0
    with pytest.raises(UserError, match="cache: expected an empty folder or the cached fp32 export"):
        ov_runtime.export_encoder(changed, tmp_path / "cache")
    assert xml.read_bytes() == before
    # overwrite=True replaces it with the graph of the changed weights.
    ov_runtime.export_encoder(changed, tmp_path / "cache", overwrite=True)
    assert ov_runtime.read_info(xml.parent)["fingerprint"] == ov_runtime.encoder_fingerprint(changed)
    ids = torch.tensor([[2, 5, 6, 3]])
    got = ov_runtime.load(xml, changed.config, threads=1)(ids).last_hidden_state.numpy()
    np.testing.assert_allclose(got, torch_hidden(changed, {"input_ids": ids}), atol=FP32_TOLERANCE, rtol=0)
    # Files of unknown origin are refused too.
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "encoder.xml").write_text("<net/>")
    with pytest.raises(UserError, match="without encoder_info.json"):
        ov_runtime.export_encoder(encoder, tmp_path / "foreign")


def test_load_refuses_bad_settings(bert, exported, tmp_path):
    config = bert[0].config
    with pytest.raises(UserError, match=r"expected an OpenVINO export \(encoder.xml"):
        ov_runtime.load(tmp_path, config)
    with pytest.raises(UserError, match="hint must be one of LATENCY, THROUGHPUT, found 'FAST'"):
        ov_runtime.load(exported, config, hint="FAST")
    with pytest.raises(UserError, match="precision must be one of f32, bf16, found 'fp8'"):
        ov_runtime.load(exported, config, precision="fp8")
    with pytest.raises(UserError, match="threads must be a whole number >= 1, found 0"):
        ov_runtime.load(exported, config, threads=0)


def test_a_layer_kept_in_fp32_keeps_its_attention_products_too(bert, exported, tmp_path):
    # Issue 28's guardrail: a layer "kept in fp32" whose attention still took int8 query and key
    # inputs was not kept. No quantizer feeds any op of the kept layer; the other layer's attention
    # inputs are quantized.
    import openvino

    encoder, tokenizer = bert
    layer0 = [name for name in ov_runtime.linear_layers(exported) if "layer.0." in name]
    calibration = [dict(tokenizer(CORPUS, padding=True, return_tensors="np"))]
    xml = ov_runtime.quantize_int8(exported, calibration, tmp_path / "int8", ignored_layers=layer0)
    model = openvino.Core().read_model(str(xml))

    def quantizers_of(layer: str) -> list[str]:  # the ops a FakeQuantize of that layer feeds
        return [
            target.get_node().get_friendly_name()
            for op in model.get_ordered_ops()
            if op.get_type_name() == "FakeQuantize"
            for out in op.outputs()
            for target in out.get_target_inputs()
            if layer in target.get_node().get_friendly_name()
        ]

    assert any("attention" in name for name in layer0 if "query" not in name and "key" not in name)
    assert quantizers_of("layer.0.") == []  # nothing of the kept layer reads int8: not its attention
    assert any("attention.self/" in name for name in quantizers_of("layer.1."))  # the other's does

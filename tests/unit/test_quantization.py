"""The int8 layer (:mod:`encoder_tasks.quantization.int8`): its output against a by-hand dynamic
quantization, no saturation, plain-tensor state that round-trips through safetensors, casts and
moves that keep it whole; the precision rules of an int8 model in the predict path."""

import copy

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from encoder_tasks.errors import UserError
from encoder_tasks.predict import _int8_precision, cast_encoder_for_inference
from encoder_tasks.quantization.int8 import (
    METHOD,
    Int8Linear,
    int8_skeleton,
    is_int8,
    linear_names,
    quantize_linears,
    reduce_range,
)


def emulate(layer: Int8Linear, x: torch.Tensor, reduce: bool) -> torch.Tensor:
    """Dynamic quantization by hand: the batch's uint8 range (7 bits with ``reduce``), the
    dequantized int8 weights, an fp32 product."""
    qmax = 127 if reduce else 255
    low, high = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = (high - low) / qmax
    zero = min(max(round(-low / scale), 0), qmax)
    x_dequantized = (torch.clamp(torch.round(x / scale) + zero, 0, qmax) - zero) * scale
    return x_dequantized @ layer.dequantized_weight().T + layer.bias


@pytest.fixture
def linear():
    torch.manual_seed(0)
    return nn.Linear(64, 16)


def test_weights_are_int8_per_output_channel(linear):
    layer = Int8Linear.from_float(linear)
    assert layer.weight_int8.dtype == torch.int8 and layer.weight_int8.shape == (16, 64)
    assert layer.weight_scale.dtype == torch.float32 and layer.weight_scale.shape == (16,)
    assert not layer.weight_zero_point.any()  # symmetric
    # Each channel's largest weight maps to +-127; the rest are within half a step of the original.
    assert (layer.weight_int8.abs().amax(dim=1) == 127).all()
    step = layer.weight_scale[:, None]
    assert ((layer.dequantized_weight() - linear.weight).abs() <= step / 2 + 1e-7).all()


def test_output_is_the_dynamic_quantization_by_hand(linear):
    layer = Int8Linear.from_float(linear)
    x = torch.randn(8, 64) * 3
    found = layer(x)
    assert torch.allclose(found, emulate(layer, x, reduce_range()), atol=1e-5)
    assert (found - linear(x)).abs().max() < 0.1  # and close to fp32


def test_int8_products_do_not_saturate():
    # 255 x -127 summed in pairs (-64,770) overflows the int16 of CPUs without VNNI: there the
    # layer quantizes activations to 7 bits (reduce_range), here to 8. Either way: exact sums.
    linear = nn.Linear(256, 4)
    nn.init.constant_(linear.weight, -1.0)
    nn.init.zeros_(linear.bias)
    x = torch.ones(2, 256)
    x[0, 0] = 0.0
    assert torch.allclose(Int8Linear.from_float(linear)(x), linear(x), atol=1e-3)


def test_state_is_plain_tensors_that_round_trip_through_safetensors(linear, tmp_path):
    layer = Int8Linear.from_float(linear)
    state = layer.state_dict()
    assert {k: v.dtype for k, v in state.items()} == {
        "weight_int8": torch.int8,
        "weight_scale": torch.float32,
        "weight_zero_point": torch.int32,
        "bias": torch.float32,
    }
    save_file(state, str(tmp_path / "w.safetensors"))
    loaded = Int8Linear(64, 16)
    loaded.load_state_dict(load_file(str(tmp_path / "w.safetensors")))
    x = torch.randn(3, 64)
    assert torch.equal(loaded(x), layer(x))  # repacked from the loaded tensors


def test_copies_casts_and_autocast_keep_the_layer_whole(linear):
    layer = Int8Linear.from_float(linear)
    x = torch.randn(3, 64)
    expected = layer(x)
    assert torch.equal(copy.deepcopy(layer)(x), expected)
    cast = copy.deepcopy(layer).to(torch.bfloat16)  # a cast must not round the scales or the bias
    assert cast.weight_scale.dtype == torch.float32 and cast.bias.dtype == torch.float32
    assert torch.equal(cast(x), expected)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x.bfloat16())
    assert out.dtype == torch.bfloat16 and torch.allclose(out.float(), expected, atol=0.05)


def test_without_bias(linear):
    plain = nn.Linear(64, 16, bias=False)
    layer = Int8Linear.from_float(plain)
    assert "bias" not in layer.state_dict()
    x = torch.randn(2, 64)
    assert (layer(x) - plain(x)).abs().max() < 0.1


def _model():
    model = nn.Module()
    model.encoder = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    model.classifier = nn.Linear(8, 2)
    return model


def test_layers_chosen_encoder_heads_and_skip():
    model = _model()
    assert linear_names(model) == ["encoder.0", "encoder.2"]
    assert linear_names(model, heads=True) == ["encoder.0", "encoder.2", "classifier"]
    assert linear_names(model, heads=True, skip=r"^encoder\.0$") == ["encoder.2", "classifier"]
    with pytest.raises(UserError, match=r"--skip '\(': not a regular expression"):
        linear_names(model, skip="(")


def test_quantize_then_skeleton_load_gives_the_same_model():
    torch.manual_seed(0)
    model = _model()
    quantize_linears(model, ["encoder.0", "encoder.2"])
    assert is_int8(model) and isinstance(model.classifier, nn.Linear)
    fresh = int8_skeleton(_model(), {"method": METHOD, "layers": ["encoder.0", "encoder.2"]}, "here")
    fresh.load_state_dict(model.state_dict())
    x = torch.randn(4, 8)
    assert torch.equal(fresh.classifier(fresh.encoder(x)), model.classifier(model.encoder(x)))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"method": "static-int4", "layers": []}, "here: quantization method 'static-int4' is not one"),
        (
            {"method": METHOD, "layers": ["encoder.1"]},
            "here: the quantized layer 'encoder.1' is not a linear",
        ),
    ],
)
def test_skeleton_refuses_records_it_cannot_load(record, message):
    with pytest.raises(UserError) as caught:
        int8_skeleton(_model(), record, "here")
    assert str(caught.value).startswith(message)


class _Args:
    model_dir = "runs/int8"

    def __init__(self, precision):
        self.precision = precision


def test_int8_models_predict_in_fp32():
    args = _Args("auto")
    _int8_precision(args)
    assert args.precision == "fp32"  # no bf16 autocast around int8 kernels
    with pytest.raises(UserError) as caught:
        _int8_precision(_Args("bf16"))
    assert str(caught.value) == (
        "--precision bf16: runs/int8 is an int8 model (encoder-tasks quantize), which computes in fp32 "
        "around its int8 matrix products; use --precision auto or fp32, or predict with the fp32 run in bf16"
    )
    model = quantize_linears(_model(), ["encoder.0"])
    cast_encoder_for_inference(model, "bf16")
    assert model.encoder[2].weight.dtype == torch.float32  # left alone: int8 models stay fp32


def test_an_int8_graph_slower_than_fp32_is_said_with_the_cpu_s_int8_instructions(caplog, monkeypatch):
    from encoder_tasks import devices
    from encoder_tasks.commands import quantize_runtime

    report = {
        "source": "run",
        "dest": "run-int8",
        "task": "embedding",
        "runtime": {"backend": "openvino", "method": "static", "excluded_layers": []},
        "size": {"fp32_bytes": 4e6, "int8_bytes": 1e6, "ratio": 0.25},
        "metric": {"name": "eval_cosine_spearman", "before": 0.8, "after": 0.8, "relative_change": 0.0},
        "speed": {"fp32": {"inputs_per_second": 300.0}, "int8": {"inputs_per_second": 240.0}, "speedup": 0.8},
    }
    monkeypatch.setattr(devices, "_cpu_flags", lambda: frozenset({"avx2", "fma"}))
    with caplog.at_level("INFO"):
        quantize_runtime._log(report)
    assert "the int8 graph ran 0.80x the fp32 model's speed on this CPU" in caplog.text
    assert "none of the int8 instructions avx512_vnni, avx_vnni, amx_int8" in caplog.text
    caplog.clear()
    monkeypatch.setattr(devices, "_cpu_flags", lambda: frozenset({"avx512_vnni"}))
    with caplog.at_level("INFO"):
        quantize_runtime._log({**report, "speed": {**report["speed"], "speedup": 1.4}})
    assert "int8 graph ran" not in caplog.text

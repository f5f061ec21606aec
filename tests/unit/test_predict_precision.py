import pytest
import torch

from encoder_tasks.errors import UserError
from encoder_tasks.predict import autocast_for


def test_precision_choices():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast_for("cpu", "bf16"):
        assert (a @ b).dtype == torch.bfloat16
    with autocast_for("cpu", "fp32"):
        assert (a @ b).dtype == torch.float32


def test_auto_follows_hardware(monkeypatch):
    from encoder_tasks import devices

    a = torch.randn(4, 4)
    # bf16 on a CPU only with AMX: AVX512-BF16 alone lost to fp32 (encoder_tasks.precision).
    for native, amx, dtype in (
        (True, True, torch.bfloat16),
        (True, False, torch.float32),
        (False, True, torch.float32),
    ):
        monkeypatch.setattr(devices, "native_bf16_available", lambda use_cpu=False, n=native: n)
        monkeypatch.setattr(devices, "cpu_has_amx", lambda a=amx: a)
        with autocast_for("cpu", "auto"):
            assert (a @ a).dtype == dtype


def test_bad_precision():
    with pytest.raises(UserError, match="--precision must be one of auto, fp32, bf16"):
        autocast_for("cpu", "fp8")


def test_prediction_stores_encoder_weights_in_bf16_only_when_it_computes_in_bf16(monkeypatch):
    from torch import nn

    from encoder_tasks import devices
    from encoder_tasks.heads import full_precision
    from encoder_tasks.predict import cast_encoder_for_inference

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.head = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x):
            return full_precision(self.head, self.encoder(x))

    torch.manual_seed(0)
    x = torch.randn(3, 4)
    reference = Model()
    want = reference(x)
    for precision, native, dtype in (
        ("fp32", True, torch.float32),
        ("auto", False, torch.float32),
        ("auto", True, torch.bfloat16),
        ("bf16", False, torch.bfloat16),
    ):
        monkeypatch.setattr(devices, "native_bf16_available", lambda use_cpu=False, n=native: n)
        monkeypatch.setattr(devices, "cpu_has_amx", lambda: True)
        model = Model()
        model.load_state_dict(reference.state_dict())
        cast_encoder_for_inference(model, precision)
        assert model.encoder.weight.dtype == dtype and model.head.weight.dtype == torch.float32
        with autocast_for("cpu", precision):
            got = model(x)
        # the output layer still computes in fp32, from bf16-rounded features at worst
        assert got.dtype == torch.float32
        assert torch.allclose(got, want, atol=0 if dtype == torch.float32 else 5e-2)

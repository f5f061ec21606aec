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
    from encoder_tasks import training_args

    a = torch.randn(4, 4)
    for native, dtype in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(training_args, "native_bf16_available", lambda use_cpu=False, n=native: n)
        with autocast_for("cpu", "auto"):
            assert (a @ a).dtype == dtype


def test_bad_precision():
    with pytest.raises(UserError, match="--precision must be one of auto, fp32, bf16"):
        autocast_for("cpu", "fp8")

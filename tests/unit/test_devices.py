"""Which device training and prediction use: the accelerator when there is one (CUDA, Apple MPS,
Intel XPU), the CPU without one or when ``--use_cpu true`` asks; and which precision
``--mixed_precision auto`` picks there. Availability is monkeypatched, and transformers' own
``__post_init__`` (which would open the patched device) is replaced by a no-op: these tests
check the toolkit's decisions, not torch's device support."""

import pytest
import torch
import transformers

from encoder_tasks import devices, training_args
from encoder_tasks.config import parse_args
from encoder_tasks.predict import autocast_for, inference_device
from encoder_tasks.training_args import EncoderTrainingArguments


@pytest.fixture
def machine(monkeypatch):
    """``machine("mps")`` makes torch report only that accelerator (``None``: none at all)."""
    monkeypatch.setattr(transformers.TrainingArguments, "__post_init__", lambda self: None)
    for name in ("ENCODER_TASKS_DEVICE", "ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(name, raising=False)
    clear_caches()

    def make(accelerator, bf16=True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: accelerator == "cuda")
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: accelerator == "mps")
        monkeypatch.setattr(torch.xpu, "is_available", lambda: accelerator == "xpu")
        monkeypatch.setattr(torch.xpu, "is_bf16_supported", lambda *a, **k: bf16)
        # The CPU's own bf16 support must not decide what an accelerator gets.
        monkeypatch.setattr(devices, "_cpu_has_bf16", lambda: False)
        clear_caches()

    yield make
    clear_caches()


def clear_caches():
    """Forget what bf16 support was found (it is cached per device type)."""
    for name in ("native_bf16_on", "native_bf16_available"):
        getattr(getattr(devices, name, None), "cache_clear", lambda: None)()


def train_args(*flags):
    (args,) = parse_args([EncoderTrainingArguments], ["--output_dir", "x", *flags])
    return args


@pytest.mark.parametrize("accelerator", ["mps", "xpu", "cuda"])
def test_an_accelerator_is_used_when_present(machine, accelerator):
    machine(accelerator)
    assert train_args().use_cpu is False  # was True whenever CUDA was absent
    assert inference_device().type == accelerator  # prediction finds the same one
    assert training_args.available_accelerator() == accelerator


def test_without_an_accelerator_the_cpu_is_used(machine):
    machine(None)
    assert train_args().use_cpu is True  # torchrun processes then join a gloo group
    assert inference_device().type == "cpu"
    assert training_args.available_accelerator() is None


@pytest.mark.parametrize("accelerator", ["mps", "xpu", "cuda", None])
def test_use_cpu_true_always_wins(machine, accelerator):
    machine(accelerator)
    assert train_args("--use_cpu", "true").use_cpu is True


def test_auto_precision_on_intel_xpu_follows_its_bf16_support(machine):
    machine("xpu", bf16=True)
    args = train_args()
    assert (args.mixed_precision, args.bf16, args.use_cpu) == ("bf16", True, False)
    machine("xpu", bf16=False)
    assert train_args().mixed_precision == "no"


def test_auto_precision_on_apple_mps_is_fp32_unless_asked(machine, caplog):
    machine("mps", bf16=True)  # even where MPS could run bf16
    with caplog.at_level("INFO", logger="encoder_tasks.training_args"):
        args = train_args()
    assert (args.mixed_precision, args.bf16, args.use_cpu) == ("no", False, False)
    assert "training on Apple MPS (fp32); --use_cpu true trains on the CPU" in caplog.text
    asked = train_args("--mixed_precision", "bf16")
    assert (asked.bf16, asked.use_cpu) == (True, False)  # asked for: bf16 on MPS, not a CPU run


def test_native_bf16_does_not_assume_cuda(machine):
    machine("xpu", bf16=True)
    assert training_args.native_bf16_available() is True  # the XPU's support, not CUDA's absence
    assert training_args.native_bf16_available(use_cpu=True) is False  # the CPU's (patched: none)
    machine("mps", bf16=True)
    assert training_args.native_bf16_available() is False
    machine("cuda", bf16=False)
    assert training_args.native_bf16_available() is False


def test_prediction_autocast_follows_the_device(machine):
    machine("xpu", bf16=True)
    assert isinstance(autocast_for("xpu", "auto"), torch.autocast)
    assert not isinstance(autocast_for("cpu", "auto"), torch.autocast)

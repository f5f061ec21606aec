"""Which precision an inference computes in: bf16 where asked or native, else fp32.

One small module so that ``predict`` and the backends (:mod:`encoder_tasks.runtimes`, which times
torch at the run's precision) read the same rule without importing each other.

Example:
    >>> uses_bf16("cpu", "fp32"), uses_bf16("cpu", "bf16")
    (False, True)
"""

from __future__ import annotations

import contextlib

import torch

from .errors import check_choice
from .training_args import native_bf16_available

#: ``--precision`` of every inference path.
PRECISIONS = ("auto", "fp32", "bf16")


def uses_bf16(device: torch.device | str, precision: str = "auto") -> bool:
    """Whether ``precision`` on ``device`` computes in bf16: ``bf16``, or ``auto`` where bf16 is
    native (a bf16 GPU or Intel XPU, a CPU with AVX512-BF16 or AMX; not Apple MPS: see
    :func:`encoder_tasks.training_args.native_bf16_available`).

    Example:
        >>> uses_bf16("cpu", "fp32"), uses_bf16("cpu", "bf16")
        (False, True)
    """
    check_choice("precision", precision, PRECISIONS)
    device = torch.device(device)
    return precision == "bf16" or (
        precision == "auto" and native_bf16_available(use_cpu=device.type == "cpu")
    )


def autocast_for(device: torch.device | str, precision: str = "auto"):
    """A context manager: bf16 autocast on ``device`` when ``precision`` asks for it
    (:func:`uses_bf16`); outputs are read back in fp32. What it gains is measured by
    ``benchmarks/bench_predict.py``.
    """
    device = torch.device(device)
    if not uses_bf16(device, precision):
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)

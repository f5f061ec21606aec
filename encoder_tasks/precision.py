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

from . import devices
from .errors import check_choice

#: ``--precision`` of every inference path.
PRECISIONS = ("auto", "fp32", "bf16")


def bf16_pays_off(device_type: str) -> bool:
    """Whether ``--precision auto`` predicts in bf16 on a device of this type.

    Where bf16 is native (:func:`encoder_tasks.devices.native_bf16_available`: a bf16 GPU or
    Intel XPU, a CPU with AVX512-BF16 or AMX), except a CPU without AMX: there bf16 matmuls run
    on AVX-512 and lost to fp32 in every measurement (MiniLM encode, torch bf16 autocast 0.72x
    fp32, ``benchmarks/results/backends-20261201-163838.json``; sentence-transformers bf16 0.62x,
    ``cpu-inference-full-20261201-164641.json``; OpenVINO bf16 0.87x,
    ``openvino-20261201-164304.json``), while with AMX the toolkit's bf16 predict was 2.2x its
    fp32 (``predict-20261130-135821.json``, on an AMX machine). That is torch's rule: on such a
    CPU ``--backend auto`` times OpenVINO in both precisions (bf16 won on an AMD EPYC,
    ``cpu-inference-full-20261204-040027.json``; :func:`encoder_tasks.runtimes._auto_candidates`).
    """
    if not devices.native_bf16_available(use_cpu=device_type == "cpu"):
        return False
    return device_type != "cpu" or devices.cpu_has_amx()


def uses_bf16(device: torch.device | str, precision: str = "auto") -> bool:
    """Whether ``precision`` on ``device`` computes in bf16: ``bf16``, or ``auto`` where bf16
    pays off (:func:`bf16_pays_off`).

    Example:
        >>> uses_bf16("cpu", "fp32"), uses_bf16("cpu", "bf16")
        (False, True)
    """
    check_choice("precision", precision, PRECISIONS)
    device = torch.device(device)
    return precision == "bf16" or (precision == "auto" and bf16_pays_off(device.type))


def autocast_for(device: torch.device | str, precision: str = "auto"):
    """A context manager: bf16 autocast on ``device`` when ``precision`` asks for it
    (:func:`uses_bf16`); outputs are read back in fp32. What it gains is measured by
    ``benchmarks/bench_predict.py``.
    """
    device = torch.device(device)
    if not uses_bf16(device, precision):
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)

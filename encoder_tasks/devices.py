"""Which accelerator torch can use here and where bf16 runs natively: the one device detection of
training (:mod:`encoder_tasks.training_args`) and prediction (:func:`encoder_tasks.predict.inference_device`,
:mod:`encoder_tasks.precision`).

A module of its own, importing torch only inside its functions and never transformers, so that
``predict`` finds its device without importing the Trainer (``transformers.TrainingArguments``
pulls in peft and ``transformers.generation``: about 3 s of a one-sentence ``ner predict``).

Example:
    >>> available_accelerator() in (None, "cuda", "mps", "xpu")
    True
"""

from __future__ import annotations

import functools

#: What the log says for each accelerator :func:`available_accelerator` finds.
ACCELERATOR_NAMES = {"cuda": "CUDA", "mps": "Apple MPS", "xpu": "Intel XPU"}


def available_accelerator() -> str | None:
    """The accelerator torch can use here: ``"cuda"``, ``"mps"`` (Apple), ``"xpu"`` (Intel), else None.

    The one place the toolkit looks for one: training uses it unless ``--use_cpu true``, and
    prediction (:func:`encoder_tasks.predict.inference_device`) too.

    Example:
        >>> available_accelerator() in (None, "cuda", "mps", "xpu")
        True
    """
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return "xpu"
    return None


def native_bf16_available(use_cpu: bool = False) -> bool:
    """True where ``--mixed_precision auto`` picks bf16 on the device a run uses.

    That device is the CPU when ``use_cpu``, else :func:`available_accelerator` (the CPU
    without one). bf16 counts as native on a CUDA GPU or Intel XPU that reports bf16 support,
    and on a CPU with AVX512-BF16 or AMX. Apple MPS stays fp32 under ``auto`` (bf16 there needs
    macOS 14, and is emulated in fp32 on M1/M2): ``--mixed_precision bf16`` asks for it.

    Example:
        >>> isinstance(native_bf16_available(), bool)
        True
        >>> native_bf16_available(use_cpu=True) == native_bf16_on("cpu")
        True
    """
    return native_bf16_on("cpu" if use_cpu else available_accelerator() or "cpu")


@functools.lru_cache(maxsize=8)
def native_bf16_on(device_type: str) -> bool:
    """Whether bf16 matmuls run natively on a device of this type (``cpu``, ``cuda``, ``mps``, ``xpu``).

    Example:
        >>> native_bf16_on("mps")  # fp32 on Apple GPUs unless the user asks for bf16
        False
    """
    import torch

    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device_type == "xpu":
        xpu = getattr(torch, "xpu", None)
        check = getattr(xpu, "is_bf16_supported", None)
        return bool(xpu is not None and xpu.is_available() and check is not None and check())
    return device_type == "cpu" and _cpu_has_bf16()


@functools.lru_cache(maxsize=1)
def _cpu_flags() -> frozenset[str]:
    """The CPU's flags from ``/proc/cpuinfo`` (empty where there is none to read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = next((line for line in handle if line.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(flags.split(":", 1)[-1].split())


#: The CPU instructions that multiply int8 faster than fp32 (VNNI's dot products, AMX's tiles).
INT8_INSTRUCTIONS = ("avx512_vnni", "avx_vnni", "amx_int8")


def cpu_int8_instructions() -> list[str]:
    """Which of :data:`INT8_INSTRUCTIONS` this CPU has (``/proc/cpuinfo``): without any, int8
    inference is often no faster than fp32.

    Example:
        >>> set(cpu_int8_instructions()) <= set(INT8_INSTRUCTIONS)
        True
    """
    return [flag for flag in INT8_INSTRUCTIONS if flag in _cpu_flags()]


def _cpu_has_bf16() -> bool:
    """AVX512-BF16 or AMX in ``/proc/cpuinfo`` (False where there is none to read)."""
    return bool(_cpu_flags() & {"avx512_bf16", "amx_bf16"})


def cpu_has_amx() -> bool:
    """AMX's bf16 tiles (``amx_bf16`` in ``/proc/cpuinfo``): where bf16 beats fp32 on a CPU.

    Example:
        >>> isinstance(cpu_has_amx(), bool)
        True
    """
    return "amx_bf16" in _cpu_flags()

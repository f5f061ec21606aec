"""The int8 layer and the swap of a model's ``nn.Linear`` layers for it.

:class:`Int8Linear` is dynamic quantization: weights stored in int8, one scale per output
channel (symmetric, zero points 0); activations quantized to uint8 per batch when the layer
runs (one scale over the batch); the product runs in torch's int8 CPU kernels
(``quantized::linear_dynamic``) and comes back in fp32. Its state is plain tensors
(``weight_int8``, ``weight_scale``, ``weight_zero_point``, ``bias``), so a model holding it
saves to safetensors as any other and loads without pickle; the kernel's packed form is
rebuilt from them after every load (:meth:`Int8Linear.pack`).

Why not torch's own ``torch.ao.nn.quantized.dynamic.Linear``: it always quantizes activations
to 7 bits (``reduce_range=True``), a guard for CPUs without VNNI, whose int8 dot products sum
pairs in int16 and can saturate. On a CPU with VNNI or AMX (Cascade Lake and later, Zen 4)
the 8th bit is safe, and it matters: on all-MiniLM-L6-v2 sentence embeddings the cosine to
fp32 was 0.980 with 7-bit activations and 0.994 with 8 (docs/quantization.md).
:func:`reduce_range` chooses at run time, so a model quantized here runs correctly anywhere.

Example:
    >>> import torch
    >>> from torch import nn
    >>> layer = nn.Linear(16, 4)
    >>> int8 = Int8Linear.from_float(layer)
    >>> int8.weight_int8.dtype, int8.weight_scale.shape
    (torch.int8, torch.Size([4]))
    >>> x = torch.randn(3, 16)
    >>> bool((int8(x) - layer(x)).abs().max() < 0.1)
    True
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings

import torch
from torch import nn

from ..errors import UserError

#: The ``method`` recorded in ``encoder_tasks.json`` (settings key ``quantization``).
METHOD = "dynamic-int8"
#: CPU flags of int8 dot products that accumulate in int32 (no int16 pair sums to saturate).
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


@functools.cache
def _cpu_flags() -> frozenset[str] | None:
    """The CPU's feature flags from ``/proc/cpuinfo`` (None where there is none to read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return frozenset(next((line for line in handle if line.startswith("flags")), "").split())
    except OSError:
        return None


def reduce_range() -> bool:
    """Whether activations must be quantized to 7 bits on this CPU (x86 without VNNI or AMX).

    ARM's qnnpack kernels widen before summing, so they take the full 8 bits too; an unknown x86
    CPU gets the safe 7.
    """
    if torch.backends.quantized.engine == "qnnpack":
        return False
    flags = _cpu_flags()
    return flags is None or not flags & set(VNNI_FLAGS)


def packing_engine() -> str:
    """The kernels the weights are packed for: oneDNN on a CPU with AMX-INT8 (fbgemm, behind
    torch's default ``x86`` engine, has no AMX kernels; oneDNN measured 1.05-1.8x faster on
    MiniLM there), else torch's default engine. The packed weights keep their kernels whatever
    the engine is later, so this is chosen per layer, at packing, without changing torch's."""
    flags = _cpu_flags() or frozenset()
    if "amx_int8" in flags and "onednn" in torch.backends.quantized.supported_engines:
        return "onednn"
    return torch.backends.quantized.engine


@contextlib.contextmanager
def _engine(name: str):
    before = torch.backends.quantized.engine
    if name != before:
        torch.backends.quantized.engine = name
    try:
        yield
    finally:
        if name != before:
            torch.backends.quantized.engine = before


@contextlib.contextmanager
def _quiet_deprecation():
    # torch 2.10+ warns that quantized tensors are deprecated; the packed weights of its int8
    # CPU kernels are still built from one (see docs/quantization.md, "if torch drops them").
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        yield


class Int8Linear(nn.Module):
    """``nn.Linear`` with int8 weights per output channel, fp32 in and out (see the module doc).

    On a device other than the CPU (the int8 kernels are CPU kernels) it multiplies by the
    dequantized weights instead: the same numbers, without the speed.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight_int8", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(out_features, dtype=torch.float32))
        self.register_buffer("weight_zero_point", torch.zeros(out_features, dtype=torch.int32))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)
        self._packed = None
        # Loaded tensors replace the buffers: the kernel's packed copy must follow them.
        self.register_load_state_dict_post_hook(_repack)

    @classmethod
    def from_float(cls, linear: nn.Linear) -> Int8Linear:
        """Quantize ``linear``'s weights: symmetric, one scale per output channel."""
        weight = linear.weight.detach().float().cpu()
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None)
        scale = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
        layer.weight_int8.copy_(torch.round(weight / scale[:, None]).clamp(-128, 127).to(torch.int8))
        layer.weight_scale.copy_(scale)
        if linear.bias is not None:
            layer.bias.copy_(linear.bias.detach().float().cpu())
        return layer.pack()

    def pack(self) -> Int8Linear:
        """Build the kernel's packed weights from the plain tensors (after a load or a change)."""
        self._packed = None
        if self.weight_int8.device.type == "cpu":
            with _quiet_deprecation(), _engine(packing_engine()):
                weight = torch._make_per_channel_quantized_tensor(
                    self.weight_int8, self.weight_scale.double(), self.weight_zero_point.long(), 0
                )
                bias = self.bias.float() if self.bias is not None else None
                self._packed = torch.ops.quantized.linear_prepack(weight, bias)
        return self

    def dequantized_weight(self) -> torch.Tensor:
        """The fp32 weights the int8 ones stand for ``[out_features, in_features]``."""
        zero = self.weight_zero_point.float()[:, None]
        return (self.weight_int8.float() - zero) * self.weight_scale.float()[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            bias = self.bias.to(x.dtype) if self.bias is not None else None
            return nn.functional.linear(x, self.dequantized_weight().to(x.dtype), bias)
        if self._packed is None:
            self.pack()
        # fp32 in: under an autocast the surrounding ops may hand over bf16.
        out = torch.ops.quantized.linear_dynamic(x.float(), self._packed, reduce_range=reduce_range())
        return out.to(x.dtype)

    def _apply(self, fn, recurse=True):
        # A move (``.to(device)``) replaces the buffers, and the packed copy follows them. A cast
        # (``.to(torch.bfloat16)``) must not round the scales and the bias: they stay fp32.
        kept = {name: getattr(self, name) for name in ("weight_scale", "bias")}
        result = super()._apply(fn, recurse)
        for name, before in kept.items():
            after = getattr(self, name)
            if after is not None and after.dtype != before.dtype:
                setattr(self, name, before.to(after.device))
        self.pack()
        return result

    def __getstate__(self):
        # The packed weights are a kernel object (no deepcopy, no pickle): rebuilt on demand.
        state = self.__dict__.copy()
        state["_packed"] = None
        return state

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per channel"


def _repack(module: Int8Linear, incompatible_keys) -> None:
    module.pack()


def linear_names(model: nn.Module, heads: bool = False, skip: str | None = None) -> list[str]:
    """Names of the ``nn.Linear`` layers to quantize: the encoder's, plus the head's with
    ``heads``, minus those whose name matches the regular expression ``skip``.

    Example:
        >>> model = nn.Module()
        >>> model.encoder = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
        >>> model.classifier = nn.Linear(2, 1)
        >>> linear_names(model), linear_names(model, heads=True, skip=r"^encoder\\.2$")
        (['encoder.0', 'encoder.2'], ['encoder.0', 'classifier'])
    """
    try:
        pattern = re.compile(skip) if skip else None
    except re.error as exc:
        raise UserError(f"--skip {skip!r}: not a regular expression ({exc})") from None
    return [
        name
        for name, module in model.named_modules()
        if type(module) is nn.Linear
        and (heads or name.startswith("encoder."))
        and not (pattern and pattern.search(name))
    ]


def _replace(model: nn.Module, name: str, make) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, make(getattr(parent, child)))


def quantize_linears(model: nn.Module, names: list[str]) -> nn.Module:
    """Replace the named ``nn.Linear`` layers of ``model`` (on the CPU) by :class:`Int8Linear`."""
    check_kernels()
    for name in names:
        _replace(model, name, Int8Linear.from_float)
    return model


def int8_skeleton(model: nn.Module, quantization: dict, where: str) -> nn.Module:
    """Swap in empty :class:`Int8Linear` layers where ``quantization`` (the saved record) says,
    before the saved tensors load into them (:meth:`EncoderWithHead.from_pretrained`)."""
    if quantization.get("method") != METHOD:
        raise UserError(
            f"{where}: quantization method {quantization.get('method')!r} is not one this version "
            f"loads ({METHOD}); upgrade encoder-tasks"
        )
    check_kernels()
    modules = dict(model.named_modules())
    for name in quantization.get("layers") or []:
        if not isinstance(modules.get(name), nn.Linear):
            raise UserError(f"{where}: the quantized layer {name!r} is not a linear layer of this model")
        _replace(model, name, _empty_like)
    return model


def _empty_like(linear: nn.Linear) -> Int8Linear:
    return Int8Linear(linear.in_features, linear.out_features, linear.bias is not None)


def is_int8(model: nn.Module) -> bool:
    """Whether ``model`` holds int8 layers (a model written by ``encoder-tasks quantize``)."""
    return any(isinstance(module, Int8Linear) for module in model.modules())


def check_kernels() -> None:
    """Refuse, in one line, a torch build without the int8 CPU kernels."""
    if not hasattr(torch.ops.quantized, "linear_dynamic") or torch.backends.quantized.engine == "none":
        raise UserError(
            "int8 models need torch's quantized CPU kernels (quantized::linear_dynamic), which this "
            f"torch {torch.__version__} build lacks; use the fp32 run"
        )

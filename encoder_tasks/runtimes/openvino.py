"""The OpenVINO backend: the encoder as an OpenVINO graph on the CPU, in fp32 or static int8.

Three steps, each usable alone:

- :func:`export_encoder` converts a torch ``AutoModel`` encoder with ``openvino.convert_model``
  (dynamic batch and sequence axes), checks the graph against torch on two batches (one with
  padding), and writes ``encoder.xml`` + ``encoder.bin`` + ``encoder_info.json`` to a folder.
  The folder is a cache: a second export of the same weights finds it and converts nothing.
- :func:`load` compiles it for the CPU and returns an :class:`OpenVINOEncoder`, which stands in
  for ``model.encoder`` (heads, tokenisation and post-processing stay torch).
- :func:`quantize_int8` makes a static int8 copy with nncf's post-training quantization,
  calibrated on batches the caller tokenised (its own data), optionally keeping named linear
  layers (:func:`linear_layers`) in fp32.

Precision: OpenVINO's CPU plugin computes in bf16 by default where the CPU has bf16 units
(``INFERENCE_PRECISION_HINT``); :func:`load` asks for ``f32`` unless told ``precision="bf16"``,
so the fp32 backend means fp32 and its records equal torch's.

Example:
    >>> from transformers import AutoModel
    >>> from encoder_tasks.testing import make_tiny_model
    >>> import tempfile, torch
    >>> encoder = AutoModel.from_pretrained(make_tiny_model("bert")).eval()
    >>> xml = export_encoder(encoder, tempfile.mkdtemp())     # doctest: +SKIP
    >>> runtime = load(xml, encoder.config, threads=1)        # doctest: +SKIP
    >>> ids, mask = torch.tensor([[2, 7, 8, 3]]), torch.ones(1, 4, dtype=torch.long)
    >>> runtime(ids, mask).last_hidden_state.shape            # doctest: +SKIP
    torch.Size([1, 4, 32])
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import queue
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..errors import UserError
from .base import EncoderRuntime

logger = logging.getLogger(__name__)

ENCODER_XML = "encoder.xml"
ENCODER_BIN = "encoder.bin"
#: What the folder holds (precision, the source encoder's fingerprint, parity, calibration);
#: written last, so a folder without it never counts as an export.
INFO_FILE = "encoder_info.json"
PRECISIONS = ("f32", "bf16")
HINTS = ("LATENCY", "THROUGHPUT")
#: One caller, MiniLM, batches of 64, 2 shared cores (benchmarks/results/openvino-20261201-164304.json):
#: LATENCY (every thread on one request) unpinned was the fastest fp32 setting, 1.25x torch,
#: where LATENCY pinned (OpenVINO's own default on Linux) was 0.81x and THROUGHPUT (streams,
#: for requests in flight at once) 1.14x. A pinned thread cannot leave a core that another
#: process keeps busy; on a machine of its own, try ``pinning=None``.
DEFAULT_HINT = "LATENCY"
DEFAULT_PINNING = False
#: |OpenVINO - torch| allowed at export, relative to (1 + the largest |torch| value).
TOLERANCE = 1e-4
#: (batch, length, padded) of the batches an export is checked on: the traced shape with padding,
#: and another size and length without (the dynamic axes, the mask-free path), longer than the
#: local-attention window of the tiny test ModernBERT (16).
PARITY_BATCHES = ((2, 8, True), (3, 37, False))
#: Config keys that change with the transformers version or the loading path, not the graph.
_VOLATILE = {"transformers_version", "_name_or_path", "architectures", "dtype", "torch_dtype"}
_INSTALL = "pip install 'encoder-tasks[openvino]'"


class ParityError(UserError):
    """The converted graph's hidden states differ from torch's by more than the tolerance."""


def _openvino():
    try:
        import openvino
    except ImportError:
        raise UserError(f"the OpenVINO backend needs openvino: {_INSTALL}") from None
    return openvino


def computes_bf16() -> bool:
    """Whether this CPU computes bf16 natively, as OpenVINO reports it (``BF16`` among the CPU's
    ``OPTIMIZATION_CAPABILITIES``); elsewhere a bf16 hint is emulated, slower than f32."""
    return "BF16" in _openvino().Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


# ---- export -----------------------------------------------------------------------------------
class _LastHidden(nn.Module):
    """The encoder with plain tensor inputs and its last hidden states as the one output."""

    def __init__(self, encoder: nn.Module, with_token_types: bool):
        super().__init__()
        self.encoder = encoder
        self.with_token_types = with_token_types

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.with_token_types:
            kwargs["token_type_ids"] = token_type_ids
        return self.encoder(**kwargs, return_dict=True).last_hidden_state


def encoder_inputs(encoder: nn.Module) -> tuple[str, ...]:
    """The inputs the graph takes: ``token_type_ids`` only where the encoder reads them.

    Example:
        >>> from transformers import AutoModel
        >>> from encoder_tasks.testing import make_tiny_model
        >>> encoder_inputs(AutoModel.from_pretrained(make_tiny_model("distilbert")))
        ('input_ids', 'attention_mask')
    """
    accepts = "token_type_ids" in inspect.signature(encoder.forward).parameters
    used = getattr(encoder.config, "type_vocab_size", 1) > 0  # DeBERTa-v2 may have none
    return ("input_ids", "attention_mask") + (("token_type_ids",) if accepts and used else ())


def example_inputs(config, names: Sequence[str], batch: int = 2, length: int = 8) -> dict[str, torch.Tensor]:
    """Seeded inputs to trace and check with; the last row is half padding, so the graph keeps
    the attention mask (transformers skips the mask of a batch without padding)."""
    generator = torch.Generator().manual_seed(0)
    vocab = int(config.vocab_size)
    low = min(5, vocab - 1)  # above the usual special tokens
    ids = torch.randint(low, vocab, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    if batch > 1:
        pad = getattr(config, "pad_token_id", None)
        mask[-1, length // 2 :] = 0
        ids[-1, length // 2 :] = pad if pad is not None else 0
    types = torch.zeros(batch, length, dtype=torch.long)
    if getattr(config, "type_vocab_size", 1) > 1:
        types[:, length // 2 :] = 1
    given = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    return {name: given[name] for name in names}


def encoder_fingerprint(encoder: nn.Module) -> str:
    """A digest of the encoder's class, settings and weights: what the exported graph computes.

    Example:
        >>> from transformers import AutoModel
        >>> from encoder_tasks.testing import make_tiny_model
        >>> a = AutoModel.from_pretrained(make_tiny_model("bert"))
        >>> b = AutoModel.from_pretrained(make_tiny_model("bert"))
        >>> encoder_fingerprint(a) == encoder_fingerprint(b)
        True
    """
    digest = hashlib.blake2b(digest_size=16)
    digest.update(type(encoder).__qualname__.encode())
    settings = {
        k: v for k, v in encoder.config.to_dict().items() if k not in _VOLATILE and not k.startswith("_")
    }
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for name, tensor in sorted(encoder.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def read_info(directory: str | os.PathLike) -> dict | None:
    """``encoder_info.json`` of an export folder, or None where there is none."""
    path = Path(directory) / INFO_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON ({err}); remove the folder to export again") from None


def _reusable(dest: Path, key: dict, overwrite: bool, what: str) -> bool:
    """True where ``dest`` already holds this very export; refuse to replace anything else."""
    info = read_info(dest)
    present = [name for name in (ENCODER_XML, ENCODER_BIN) if (dest / name).exists()]
    if info is not None and len(present) == 2 and all(info.get(k) == v for k, v in key.items()):
        return True
    if overwrite or (info is None and not present):
        return False
    if info is None:
        found = f"{', '.join(present)} without {INFO_FILE} (not written by encoder-tasks)"
    else:
        found = f"an export of something else ({', '.join(f'{k}={info.get(k)!r}' for k in key)})"
    raise UserError(
        f"{dest}: expected an empty folder or the cached {what} ({', '.join(f'{k}={v!r}' for k, v in key.items())}), "
        f"found {found}; choose another folder or pass overwrite=True"
    )


def _save(model, dest: Path, info: dict) -> Path:
    """Write the graph and its record via a temporary folder inside ``dest``: whole or not at all."""
    ov = _openvino()
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".openvino-tmp-", dir=dest))
    try:
        # compress_to_fp16 (the default) would round the weights: fp32 must stay fp32.
        ov.save_model(model, str(staging / ENCODER_XML), compress_to_fp16=False)
        (staging / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        for name in (ENCODER_BIN, ENCODER_XML, INFO_FILE):  # the record last
            os.replace(staging / name, dest / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest / ENCODER_XML


def export_encoder(encoder: nn.Module, dest_dir: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Convert ``encoder`` (a torch ``AutoModel``) to ``dest_dir/encoder.xml``; return its path.

    The graph takes int64 ``input_ids``, ``attention_mask`` (and ``token_type_ids`` where the
    encoder reads them) of any batch and length and returns ``last_hidden_state``. It is checked
    against torch before it is written (:class:`ParityError` past :data:`TOLERANCE`). Where
    ``dest_dir`` already holds the export of the same weights it is reused without converting;
    a folder holding anything else is refused unless ``overwrite``.
    """
    ov = _openvino()
    dest = Path(dest_dir)
    fingerprint = encoder_fingerprint(encoder)
    key = {"precision": "fp32", "fingerprint": fingerprint}
    if _reusable(dest, key, overwrite, "fp32 export of this encoder"):
        logger.info("%s: reusing the OpenVINO export of this encoder", dest)
        return dest / ENCODER_XML
    names = encoder_inputs(encoder)
    was_training = encoder.training
    encoder.eval()
    wrapper = _LastHidden(encoder, "token_type_ids" in names).eval()
    example = example_inputs(encoder.config, names)
    try:
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            # transformers' mask code branches on shapes (padding beyond the mask, causal
            # without a mask), constant for an encoder; _parity runs both cases to be sure.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            graph = ov.convert_model(wrapper, example_input=example)
        graph.outputs[0].get_tensor().set_names({"last_hidden_state"})
        diff, scale = _parity(graph, wrapper, encoder.config, names)
    finally:
        encoder.train(was_training)
    allowed = TOLERANCE * (1.0 + scale)
    if not diff <= allowed:
        raise ParityError(
            f"the OpenVINO graph of this {encoder.config.model_type} encoder differs from torch by "
            f"{diff:.3g} (tolerance {allowed:.3g}); not written to {dest}. Please report this with the model type"
        )
    info = {
        **key,
        "model_type": encoder.config.model_type,
        "inputs": list(names),
        "parity": {"max_abs_diff": diff, "tolerance": allowed},
        "openvino": ov.__version__,
    }
    return _save(graph, dest, info)


def _parity(graph, wrapper: nn.Module, config, names) -> tuple[float, float]:
    """``(largest |OpenVINO - torch|, largest |torch|)`` in f32 on :data:`PARITY_BATCHES`."""
    compiled = _openvino().Core().compile_model(graph, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    diff = scale = 0.0
    for batch, length, padded in PARITY_BATCHES:
        inputs = example_inputs(config, names, batch, length)
        if not padded:
            inputs["attention_mask"] = torch.ones_like(inputs["attention_mask"])
        with torch.no_grad():
            want = wrapper(**inputs).float().numpy()
        got = compiled({k: v.numpy() for k, v in inputs.items()})[0]
        diff = max(diff, float(np.abs(got - want).max()))
        scale = max(scale, float(np.abs(want).max()))
    return diff, scale


# ---- load -------------------------------------------------------------------------------------
def _resolve(path: str | os.PathLike) -> Path:
    path = Path(path)
    xml = path / ENCODER_XML if path.is_dir() else path
    if not xml.is_file() or xml.suffix != ".xml":
        raise UserError(f"{path}: expected an OpenVINO export ({ENCODER_XML} and {ENCODER_BIN}), found none")
    return xml


class OpenVINOEncoder(EncoderRuntime):
    """A compiled OpenVINO encoder standing in for ``model.encoder`` (see :func:`load`).

    Thread safe: each call takes an inference request from a pool (a new one when every pooled
    request is busy) and gives it back once its output is copied, so server threads calling at
    once each get their own answer.
    """

    backend = "openvino"

    def __init__(self, compiled, config, path: Path, settings: dict):
        super().__init__(config, [port.get_any_name() for port in compiled.inputs], path)
        self._compiled = compiled
        self._output = compiled.outputs[0]
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        #: What it was compiled with (precision, hint, threads) and what the export recorded.
        self.settings = settings

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        try:
            request = self._requests.get_nowait()
        except queue.Empty:
            request = self._compiled.create_infer_request()
        try:
            # share_outputs=False (the default): the result is a copy, safe once the request is reused.
            return request.infer(feeds, share_inputs=True)[self._output]
        finally:
            self._requests.put(request)

    def for_callers(self, callers: int, threads: int | None = None) -> OpenVINOEncoder:
        """Compiled again with ``callers`` streams (the THROUGHPUT hint: the cores split between
        requests in flight; under the LATENCY hint a second request waits for the first), each
        on ``threads`` threads (None: the cores' share)."""
        if callers <= 1 and threads is None:
            return self
        settings = self.settings
        # INFERENCE_NUM_THREADS is every stream's threads together
        total = threads * callers if threads is not None else settings.get("threads")
        several = callers > 1
        runtime = load(
            self.path,
            self.config,
            total,
            hint="THROUGHPUT" if several else settings.get("hint", DEFAULT_HINT),
            precision=settings.get("inference_precision", "f32"),
            pinning=settings.get("pinning", DEFAULT_PINNING),
            streams=callers if several else None,
        )
        runtime.precision = self.precision
        return runtime

    def extra_repr(self) -> str:
        return f"path={str(self.path)!r}, " + ", ".join(f"{k}={v!r}" for k, v in self.settings.items())


def load(
    path: str | os.PathLike,
    config,
    threads: int | None = None,
    *,
    hint: str = DEFAULT_HINT,
    precision: str = "f32",
    pinning: bool | None = DEFAULT_PINNING,
    streams: int | None = None,
    compiled_cache: str | os.PathLike | None = None,
) -> OpenVINOEncoder:
    """Compile an export (its folder or ``encoder.xml``) for the CPU; ``config``: the encoder's.

    ``threads`` sets ``INFERENCE_NUM_THREADS`` (None: OpenVINO's choice, all cores); ``hint``
    is the performance hint (``LATENCY``: every thread on one request; ``THROUGHPUT``: streams
    for requests in flight at once); ``precision`` the inference precision of what is not int8
    (``f32``, or ``bf16`` where the CPU has it: no longer equal to torch, and not always
    faster); ``pinning`` sets ``ENABLE_CPU_PINNING`` (default off, see :data:`DEFAULT_PINNING`;
    None: OpenVINO's choice, pinned on Linux); ``streams`` sets ``NUM_STREAMS`` (requests
    computed at once; None: the hint's choice). ``compiled_cache``: a folder where OpenVINO keeps
    the compiled model (its ``CACHE_DIR``), so a later load of the same graph with the same
    settings skips compiling (0.24 -> 0.08 s for MiniLM-L6).

    Example:
        >>> load("missing-folder", config=None)
        Traceback (most recent call last):
        ...
        encoder_tasks.errors.UserError: missing-folder: expected an OpenVINO export (encoder.xml and encoder.bin), found none
    """
    xml = _resolve(path)
    if hint not in HINTS:
        raise UserError(f"OpenVINO hint must be one of {', '.join(HINTS)}, found {hint!r}")
    if precision not in PRECISIONS:
        raise UserError(f"OpenVINO precision must be one of {', '.join(PRECISIONS)}, found {precision!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UserError(f"OpenVINO threads must be a whole number >= 1, found {threads!r}")
    ov = _openvino()
    properties = {"PERFORMANCE_HINT": hint, "INFERENCE_PRECISION_HINT": precision}
    if threads is not None:
        properties["INFERENCE_NUM_THREADS"] = threads
    if pinning is not None:
        properties["ENABLE_CPU_PINNING"] = bool(pinning)
    if streams is not None:
        properties["NUM_STREAMS"] = int(streams)
    core = ov.Core()
    if compiled_cache is not None:
        Path(compiled_cache).mkdir(parents=True, exist_ok=True)
        core.set_property({"CACHE_DIR": str(compiled_cache)})
    compiled = core.compile_model(str(xml), "CPU", properties)
    info = read_info(xml.parent) or {}
    settings = {
        "precision": info.get("precision", "unknown"),
        "inference_precision": precision,
        "hint": hint,
        "threads": threads,
        "pinning": pinning,
        **({"streams": streams} if streams is not None else {}),
    }
    return OpenVINOEncoder(compiled, config, xml, settings)


def from_encoder(encoder: nn.Module, cache_dir: str | os.PathLike, threads: int | None = None, **options):
    """:func:`export_encoder` into ``cache_dir`` (reused when it holds this encoder), then :func:`load`."""
    return load(export_encoder(encoder, cache_dir), encoder.config, threads, **options)


# ---- static int8 ------------------------------------------------------------------------------
#: The ops int8 quantizes the inputs of: the linear layers and eager attention's products
#: (MatMul), and the fused attention an SDPA export holds.
QUANTIZED_OPS = ("MatMul", "ScaledDotProductAttention")


def linear_layers(encoder_xml: str | os.PathLike) -> list[str]:
    """The names of the graph's ops int8 quantizes (:data:`QUANTIZED_OPS`), in graph order: what
    ``quantize_int8(..., ignored_layers=...)`` may keep in fp32. The linear layers (a MatMul on a
    weight) and the attention (its query and key enter it quantized): a layer kept in fp32 keeps
    both, else its attention still ran on int8 inputs."""
    model = _openvino().Core().read_model(str(_resolve(encoder_xml)))
    return _linear_layers(model)


def _linear_layers(model) -> list[str]:
    return [op.get_friendly_name() for op in model.get_ordered_ops() if op.get_type_name() in QUANTIZED_OPS]


def _check_batches(batches: list, names: Sequence[str]) -> str:
    """Refuse malformed calibration batches; return a digest of their contents."""
    if not batches:
        raise UserError("calibration_batches: expected at least one batch, found none")
    digest = hashlib.blake2b(digest_size=16)
    for i, batch in enumerate(batches):
        if not isinstance(batch, Mapping):
            raise UserError(f"calibration batch {i}: expected a dict of arrays, found {type(batch).__name__}")
        missing = [name for name in ("input_ids", "attention_mask") if name not in batch]
        if missing:
            raise UserError(
                f"calibration batch {i}: expected {', '.join(missing)}, found keys {sorted(batch)}"
            )
        shape = np.shape(batch["input_ids"])
        for name in names:
            if name in batch and (len(np.shape(batch[name])) != 2 or np.shape(batch[name]) != shape):
                raise UserError(
                    f"calibration batch {i}: {name} must be [batch, sequence] like input_ids {shape}, "
                    f"found {np.shape(batch[name])}"
                )
            if name in batch:
                digest.update(np.ascontiguousarray(batch[name], dtype=np.int64))
    return digest.hexdigest()


def quantize_int8(
    encoder_xml: str | os.PathLike,
    calibration_batches: Iterable[Mapping[str, np.ndarray]],
    dest_dir: str | os.PathLike,
    ignored_layers: Sequence[str] = (),
    *,
    smooth_quant: bool | float = False,
    overwrite: bool = False,
) -> Path:
    """Static int8 of an export with nncf, calibrated on ``calibration_batches``; return the new
    ``dest_dir/encoder.xml`` (:func:`load` runs it like the fp32 one).

    ``calibration_batches``: dicts of ``[batch, sequence]`` arrays (``input_ids``,
    ``attention_mask``, ``token_type_ids`` where the graph takes them) made with the model's
    own tokenisation from the user's data; every batch is used. ``ignored_layers``: names from
    :func:`linear_layers` that stay fp32 (the sensitive ones). nncf runs with
    ``ModelType.TRANSFORMER`` (no quantizers where int8 costs accuracy in transformers, such as
    the LayerNorms) but without its SmoothQuant pass unless ``smooth_quant``: on MiniLM's STS-B
    dev sentences SmoothQuant (nncf's alpha 0.95) moved 1% of the sentence vectors below cosine
    0.87 to fp32 (the lowest 0.70), against 0.985 (lowest 0.976) without it; alphas 0.25-0.75
    were in between (docs/quantization.md); a number is SmoothQuant's alpha for the MatMuls,
    ``True`` nncf's own. A ``dest_dir`` holding this very quantization (same
    source, calibration, ignored layers and SmoothQuant choice) is reused.
    """
    ov = _openvino()
    try:
        import nncf
    except ImportError:
        raise UserError(f"static int8 with OpenVINO needs nncf: {_INSTALL}") from None
    source = _resolve(encoder_xml)
    model = ov.Core().read_model(str(source))
    names = [port.get_any_name() for port in model.inputs]
    batches = list(calibration_batches)
    calibration = _check_batches(batches, names)
    ignored = list(dict.fromkeys(ignored_layers))
    known = _linear_layers(model)
    unknown = [name for name in ignored if name not in known]
    if unknown:
        raise UserError(
            f"ignored_layers: {unknown[0]!r} is not a linear layer of {source} "
            f"(expected names from linear_layers(), such as {known[0]!r})"
        )
    source_info = read_info(source.parent) or {}
    key = {
        "precision": "int8",
        "source": source_info.get("fingerprint")
        or hashlib.blake2b(source.read_bytes(), digest_size=16).hexdigest(),
        "calibration": calibration,
        "ignored_layers": ignored,
        "smooth_quant": smooth_quant,
    }
    dest = Path(dest_dir)
    if _reusable(dest, key, overwrite, "int8 copy"):
        logger.info("%s: reusing the int8 copy calibrated on these batches", dest)
        return dest / ENCODER_XML

    def feeds(batch):
        ids = np.asarray(batch["input_ids"], dtype=np.int64)
        return {
            name: np.asarray(batch[name], dtype=np.int64) if name in batch else np.zeros_like(ids)
            for name in names
        }

    quantized = nncf.quantize(
        model,
        nncf.Dataset(batches, feeds),
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=len(batches),  # nncf counts items, here batches: use them all
        ignored_scope=nncf.IgnoredScope(names=ignored) if ignored else None,
        advanced_parameters=_smooth_quant_parameters(smooth_quant),
    )
    info = {
        **key,
        "method": "nncf post-training static quantization (ModelType.TRANSFORMER"
        + (", SmoothQuant off)" if smooth_quant is False else ")"),
        "calibration_batches": len(batches),
        "calibration_rows": int(sum(np.shape(b["input_ids"])[0] for b in batches)),
        "model_type": source_info.get("model_type"),
        "inputs": names,
        "openvino": ov.__version__,
        "nncf": nncf.__version__,
    }
    return _save(quantized, dest, info)


def _smooth_quant_parameters(smooth_quant: bool | float):
    """nncf's advanced parameters for ``quantize_int8``'s ``smooth_quant``: None (nncf's own
    SmoothQuant) for True, else SmoothQuant's MatMul alpha (False: -1, which switches it off)."""
    if smooth_quant is True:
        return None
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
    )

    alpha = -1 if smooth_quant is False else float(smooth_quant)
    return AdvancedQuantizationParameters(smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=alpha))

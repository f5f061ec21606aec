"""Inference backends: the model's encoder runs in ONNX Runtime or OpenVINO instead of torch.

A backend replaces only ``model.encoder``: an :class:`EncoderRuntime` takes the encoder's inputs and
returns its last hidden states as an fp32 torch tensor, and keeps the encoder's ``config``. Every
task's head, tokenisation, windows and post-processing (NER's CRF decoding over words, QA spans,
MLM top-k, pooling) stay the toolkit's own torch code around it, so a record differs from torch's
only by what the encoder's numbers differ (checked by :func:`parity`).

``--backend`` (every ``predict``, ``encode``, ``retrieve``, ``evaluate`` through predict's loading,
``serve``, the Python API's ``load``, the Ray engine) takes

- ``torch``: the encoder as it is;
- ``onnx``: the encoder exported to ONNX and optimised by ONNX Runtime's transformer optimiser
  (fused attention, LayerNorm, GELU: :mod:`.onnx`), in an ``InferenceSession``;
- ``openvino``: the same graph compiled by OpenVINO (:mod:`.openvino`);
- ``auto``: the fastest installed backend that passed its parity check against torch on a few probe
  batches, timed on the same batches (:func:`apply_backend` logs which and why); never one that
  failed its check; on a GPU (or any device other than the CPU) torch.

Exported graphs are cached under :func:`cache_dir`, keyed by a hash of the encoder's weights, so a
second load of the same model skips the export. A run directory written by ``encoder-tasks quantize
--backend onnx`` records its own graph (settings key ``runtime``): it loads as that graph with no
flag.

Example:
    >>> check_backend("onnx")
    'onnx'
    >>> check_backend("tensorrt")
    Traceback (most recent call last):
    ...
    encoder_tasks.errors.UserError: --backend must be one of auto, torch, onnx, openvino, found 'tensorrt'
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import UserError, check_choice
from ..precision import uses_bf16
from .base import EncoderRuntime, usable_cores

logger = logging.getLogger(__name__)

#: Where the encoder can run. ``auto`` chooses among them (:func:`apply_backend`).
BACKENDS = ("torch", "onnx", "openvino")
CHOICES = ("auto", *BACKENDS)

#: backend -> the module that exports and loads it (two functions: ``export_encoder(encoder,
#: dest_dir) -> Path`` and ``load(path, config, threads=None) -> EncoderRuntime``; optionally
#: ``computes_bf16() -> bool``, for :data:`BF16_BACKENDS`), imported lazily.
RUNTIMES: dict[str, str] = {
    "onnx": "encoder_tasks.runtimes.onnx",
    "openvino": "encoder_tasks.runtimes.openvino",
}
#: backend -> (the package it imports, the extra that installs it).
PACKAGES: dict[str, tuple[str, str]] = {"onnx": ("onnxruntime", "onnx"), "openvino": ("openvino", "openvino")}

#: Largest |runtime - torch| over real tokens allowed by the parity check, relative to
#: ``1 + max |torch|`` (fp32 graphs differ from torch by ~1e-6 of that; a wrong graph by far more).
PARITY_TOLERANCE = 1e-3
#: ``auto`` keeps torch unless a runtime is at least this much faster on the probe batches: 1, the
#: fastest that passed its check wins. (It was 1.05, to stay out of the noise; on a quiet machine
#: the probes then put OpenVINO fp32 a little under 1.05x torch for MiniLM while real sentences
#: ran it far faster, and the margin kept the slower backend: docs/speed.md.)
MIN_GAIN = 1.0
#: A runtime computing in bf16 passes its check within this many times the difference torch's own
#: bf16 makes (all-MiniLM-L6-v2 on AMX: torch bf16 0.035 from fp32, OpenVINO bf16 0.042;
#: benchmarks/results/bf16-runtime-20261202-001542.json).
BF16_PARITY_FACTOR = 2.0
#: Runtimes whose probe time is within this factor of the fastest runtime's are tied, and the one
#: faster on the lone short probe input wins: what a request served at low load waits for. (On a
#: 2-core AVX2 CPU the probes put OpenVINO fp32 at 1.27x torch and ONNX Runtime at 1.24x; the two
#: encoded STS-B level, and a lone short input took 10.50 ms on OpenVINO against 6.94 ms:
#: benchmarks/results/cpu-inference-full-20261207-202824.json, docs/speed.md.)
TIE_MARGIN = 1.05
#: Passes over the lone short probe input per round when tied runtimes are timed on it.
LONE_INPUT_PASSES = 10
#: The version of what ``auto`` remembers: 2 added bf16 runtimes, 3 tries them on a CPU with native
#: bf16 but no AMX too, 4 breaks ties between runtimes on the lone input (older records are
#: measured again).
CHOICE_VERSION = 4
#: Environment variables: the default backend, and the cache of exported graphs.
BACKEND_ENV = "ENCODER_TASKS_BACKEND"
CACHE_ENV = "ENCODER_TASKS_CACHE"


def default_backend() -> str:
    """``$ENCODER_TASKS_BACKEND``, else ``auto`` (measured: docs/speed.md, "Backends")."""
    return os.environ.get(BACKEND_ENV) or "auto"


def check_backend(backend: str) -> str:
    """``backend`` if it is one of :data:`CHOICES`, else a :class:`~encoder_tasks.errors.UserError`."""
    check_choice("backend", backend, CHOICES)
    return backend


# ---- installation, export cache ------------------------------------------------------------------
def installed(backend: str) -> bool:
    """Whether ``backend`` can run here (torch always can)."""
    if backend == "torch":
        return True
    package = PACKAGES.get(backend, (backend, backend))[0]
    return (
        importlib.util.find_spec(package) is not None
        and importlib.util.find_spec(RUNTIMES[backend]) is not None
    )


def runtime_module(backend: str):
    """The module that exports and loads ``backend``; a clear error when it cannot run here."""
    check_backend(backend)
    if backend == "torch":
        raise ValueError("torch is no runtime module: the encoder runs as it is")
    package, extra = PACKAGES[backend]
    if importlib.util.find_spec(package) is None:
        raise UserError(
            f"--backend {backend} needs the {package} package, which is not installed: "
            f"pip install 'encoder-tasks[{extra}]'"
        )
    try:
        return importlib.import_module(RUNTIMES[backend])
    except ModuleNotFoundError as exc:
        if exc.name == RUNTIMES[backend]:
            raise UserError(
                f"--backend {backend}: this version of encoder-tasks has no {backend} backend"
            ) from exc
        raise


def cache_dir() -> Path:
    """Where exported graphs are kept: ``$ENCODER_TASKS_CACHE``, else
    ``$XDG_CACHE_HOME/encoder_tasks/runtimes`` (``~/.cache`` without it)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "encoder_tasks" / "runtimes"


def weights_key(encoder: nn.Module) -> str:
    """A hash of the encoder's weights and config: two encoders with one key export the same graph.

    Example:
        >>> a, b = nn.Linear(2, 2), nn.Linear(2, 2)
        >>> a.config = b.config = None
        >>> weights_key(a) == weights_key(a), weights_key(a) == weights_key(b)
        (True, False)
    """
    digest = hashlib.blake2b(digest_size=16)
    config = getattr(encoder, "config", None)
    if config is not None:
        digest.update(config.to_json_string(use_diff=False).encode())
    for name, tensor in sorted(encoder.state_dict().items()):
        digest.update(name.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _graph_folder(backend: str, key: str) -> Path:
    module = runtime_module(backend)
    return cache_dir() / backend / f"{key}-{getattr(module, 'GRAPH_VERSION', 1)}"


def cached_graph(backend: str, key: str) -> Path | None:
    """The graph exported for the encoder of :func:`weights_key` ``key``, if it is in the cache."""
    done = _graph_folder(backend, key) / "done"
    return done.parent / done.read_text(encoding="utf-8").strip() if done.is_file() else None


def exported(backend: str, encoder: nn.Module, key: str | None = None) -> Path:
    """The graph of ``encoder`` for ``backend``, from the cache or exported into it now (``key``:
    :func:`weights_key` of ``encoder``, when already known)."""
    key = key or weights_key(encoder)
    found = cached_graph(backend, key)
    if found is not None:
        return found
    module, folder = runtime_module(backend), _graph_folder(backend, key)
    folder.parent.mkdir(parents=True, exist_ok=True)
    import tempfile

    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=folder.parent))
    started = time.perf_counter()
    try:
        path = module.export_encoder(encoder, staging)
        (staging / "done").write_text(path.name, encoding="utf-8")
        try:
            staging.rename(folder)  # atomic: a reader sees no graph or a whole one
        except OSError:  # another process exported the same graph meanwhile: keep its copy
            pass
    finally:
        if staging.exists():
            import shutil

            shutil.rmtree(staging, ignore_errors=True)
    logger.info(
        "backend %s: exported the encoder in %.1f s (cached in %s)",
        backend,
        time.perf_counter() - started,
        folder,
    )
    return folder / (folder / "done").read_text(encoding="utf-8").strip()


#: Backends that can compute an fp32 graph in bf16 (OpenVINO's ``INFERENCE_PRECISION_HINT``).
BF16_BACKENDS = ("openvino",)


def load_runtime(
    backend: str,
    path: str | os.PathLike,
    config,
    threads: int | None = None,
    precision: str = "fp32",
    compute: str = "fp32",
):
    """``backend``'s :class:`EncoderRuntime` for the graph at ``path``; ``compute`` ``bf16``: an
    fp32 graph computed in bf16 (a backend of :data:`BF16_BACKENDS`; the runtime's precision is
    then ``bf16``)."""
    # OpenVINO keeps what it compiles in the cache: a later load skips compiling.
    options = {"compiled_cache": cache_dir() / "openvino-compiled"} if backend == "openvino" else {}
    if compute == "bf16":
        if backend not in BF16_BACKENDS:
            raise ValueError(f"the {backend} backend does not compute in bf16")
        options["precision"] = precision = "bf16"
    runtime = runtime_module(backend).load(Path(path), config, threads, **options)
    runtime.precision = precision
    return runtime


# ---- parity and timing on probe inputs -----------------------------------------------------------
def probe_batches(config, batch_size: int = 16, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """A few batches of random token ids with padding of various lengths (parity and timing).

    Example:
        >>> from transformers import BertConfig
        >>> batches = probe_batches(BertConfig(vocab_size=50, max_position_embeddings=512))
        >>> [tuple(b["input_ids"].shape) for b in batches]
        [(2, 7), (16, 16), (16, 48)]
    """
    generator = torch.Generator().manual_seed(seed)
    vocab = int(getattr(config, "vocab_size", 100) or 100)
    limit = int(getattr(config, "max_position_embeddings", 512) or 512)
    low = min(5, vocab - 1)  # past the special tokens of most vocabularies
    batches = []
    # A lone short input, a batch of sentence-length inputs (what most requests are), a longer batch.
    for rows, length in (
        (2, 7),
        (batch_size, min(16, max(8, limit - 2))),
        (batch_size, min(48, max(8, limit - 2))),
    ):
        ids = torch.randint(low, vocab, (rows, length), generator=generator)
        lengths = torch.randint(max(2, length // 3), length + 1, (rows,), generator=generator)
        lengths[0] = length
        mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
        pad = getattr(config, "pad_token_id", None) or 0
        ids = ids.masked_fill(mask == 0, pad)
        batches.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)})
    return batches


def forward_inputs(encoder, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The entries of ``batch`` that ``encoder.forward`` takes (a DistilBERT takes no segment ids)."""
    import inspect

    accepted = set(inspect.signature(encoder.forward).parameters)
    return {k: v for k, v in batch.items() if k in accepted}


@torch.inference_mode()
def parity(
    reference: nn.Module, runtime: nn.Module, batches, allowed: float | None = None
) -> dict[str, float]:
    """``{"max_abs_diff", "scale", "allowed", "passed"}``: ``runtime``'s hidden states against
    ``reference``'s (the torch encoder, fp32) over the real tokens of ``batches``; ``allowed``:
    the largest difference that passes (default :data:`PARITY_TOLERANCE` of the scale)."""
    diff = scale = 0.0
    for batch in batches:
        inputs = forward_inputs(reference, batch)
        want = reference(**inputs, return_dict=True).last_hidden_state.float()
        got = runtime(**batch, return_dict=True).last_hidden_state.float()
        real = batch["attention_mask"].bool()
        if got.shape != want.shape:
            return {"max_abs_diff": float("inf"), "scale": 0.0, "allowed": 0.0, "passed": False}
        diff = max(diff, float((got[real] - want[real]).abs().max()))
        scale = max(scale, float(want[real].abs().max()))
    allowed = max(allowed or 0.0, PARITY_TOLERANCE * (1.0 + scale))
    passed = bool(np.isfinite(diff) and diff <= allowed)
    return {"max_abs_diff": diff, "scale": scale, "allowed": allowed, "passed": passed}


@torch.inference_mode()
def timed_rounds(encoders: dict[str, tuple[nn.Module, Any]], batches, rounds: int = 5) -> dict[str, float]:
    """``{name: median seconds of one pass over batches}``, for ``encoders`` (``name -> (encoder,
    context factory)``) timed in interleaved rounds (each round runs every encoder once, after one
    warm-up pass each), so a load spike on a shared machine hits every contender alike."""
    inputs = {
        name: [forward_inputs(encoder, batch) for batch in batches] for name, (encoder, _) in encoders.items()
    }
    times: dict[str, list[float]] = {name: [] for name in encoders}
    for index in range(rounds + 1):
        for name, (encoder, context) in encoders.items():
            start = time.perf_counter()
            with context():
                for batch in inputs[name]:
                    encoder(**batch, return_dict=True)
            if index:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(found) for name, found in times.items()}


# ---- choosing and swapping -----------------------------------------------------------------------
def swap_encoder(model: nn.Module, runtime: EncoderRuntime) -> None:
    """Put ``runtime`` in place of ``model.encoder`` (the torch encoder's memory is freed)."""
    model.encoder = runtime
    if hasattr(model, "padding_free"):
        model.padding_free = False  # the graph takes padded batches
    model.cpu()


def share_between(model: nn.Module, callers: int, threads: int | None = None) -> str:
    """Set ``model``'s encoder up for ``callers`` threads running batches at once, each batch on
    ``threads`` intra-op threads (None: the cores' share): a runtime's
    :meth:`~encoder_tasks.runtimes.base.EncoderRuntime.for_callers`, or torch's intra-op threads
    (torch's thread count is the process's). Returns what it did.

    Example:
        >>> share_between(torch.nn.Linear(2, 2), 1)
        'torch: 1 batch at a time'
    """
    encoder = getattr(model, "encoder", None)
    backend = encoder.backend if isinstance(encoder, EncoderRuntime) else "torch"
    if callers <= 1 and threads is None:
        return f"{backend}: 1 batch at a time"
    batches = f"{callers} batch{'es' if callers > 1 else ''} at {'once' if callers > 1 else 'a time'}"
    if isinstance(encoder, EncoderRuntime):
        swap_encoder(model, encoder.for_callers(callers, threads))
        return f"{backend}: {batches} ({model.encoder.extra_repr()})"
    threads = threads or max(1, usable_cores() // callers)
    torch.set_num_threads(threads)
    each = " each" if callers > 1 else ""
    return f"torch: {batches}, {threads} intra-op thread{'s' if threads > 1 else ''}{each}"


def apply_backend(
    model: nn.Module,
    backend: str = "auto",
    *,
    threads: int | None = None,
    precision: str = "auto",
    batch_size: int = 16,
    runtime: dict | None = None,
    where: str | None = None,
    source: str | os.PathLike | None = None,
) -> str:
    """Run ``model``'s encoder on ``backend``; returns the backend chosen (``torch`` when nothing
    changed). ``model`` is a task model (:class:`~encoder_tasks.heads.EncoderWithHead`) in eval mode.
    ``source``: the saved model's directory, whose encoder ``model`` holds as loaded: ``auto``
    then notes which weights its files hold, for :func:`remembered_runtime`.

    ``runtime`` is the record of a graph saved in the model's directory (``encoder-tasks quantize
    --backend onnx``: ``{"backend", "file", "precision", ...}``) and ``where`` that directory: with
    ``auto`` (or its own backend) that graph is loaded as it is; another explicit backend runs the
    fp32 weights the directory also holds. ``precision`` is predict's: where it computes in bf16,
    ``auto`` times torch under bf16 autocast; the runtimes compute in fp32. ``threads`` is the
    runtimes' intra-op thread count (default: the cores this process may use).

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> from encoder_tasks.heads import EncoderWithHead
        >>> model = EncoderWithHead(load_encoder(make_tiny_model("bert"))).eval()
        >>> apply_backend(model, "torch")
        'torch'
    """
    check_backend(backend)
    if runtime and backend in ("auto", runtime.get("backend")):
        return _apply_saved(model, runtime, where, threads)
    if backend == "torch":
        return "torch"
    device = next(model.parameters()).device
    if backend == "auto" and device.type != "cpu":
        logger.info("backend auto: torch (the model runs on %s; the runtimes here are CPU ones)", device)
        return "torch"
    if _is_torch_int8(model):
        if backend == "auto":
            return "torch"
        raise UserError(
            f"--backend {backend}: this is a torch int8 model (encoder-tasks quantize --backend torch), which runs "
            f"in torch only; quantize the fp32 run with --backend {backend}, or use --backend torch"
        )
    reference = model.encoder.eval()
    batches = probe_batches(reference.config, batch_size=max(2, min(batch_size, 64)))
    wanted = [backend] if backend != "auto" else [b for b in BACKENDS if b != "torch" and installed(b)]
    if backend == "auto" and not wanted:
        logger.info("backend auto: torch (no runtime installed: pip install 'encoder-tasks[onnx]')")
        return "torch"
    key = weights_key(reference)
    if source is not None and backend == "auto":
        _remember_files(source, key)
    decision = _decision_file(key, wanted, threads, batches, precision) if backend == "auto" else None
    if decision is not None and decision.is_file():
        chosen = _apply_decision(model, reference, decision, wanted, key, threads)
        if chosen is not None:
            return chosen
    tried = _auto_candidates(wanted, device, precision) if backend == "auto" else [(backend, "fp32")]
    bf16_allowed = bf16_allowance(reference, batches, device) if any(c == "bf16" for _, c in tried) else None
    checked: dict[str, tuple[EncoderRuntime, dict]] = {}
    backend_of: dict[str, str] = {}
    for name, compute in tried:
        label = name if compute == "fp32" else f"{name} bf16"
        backend_of[label] = name
        try:
            graph = exported(name, reference, key)
            candidate = load_runtime(name, graph, reference.config, threads, compute=compute)
            checked[label] = (
                candidate,
                parity(reference, candidate, batches, bf16_allowed if compute == "bf16" else None),
            )
        except UserError:
            raise
        except Exception as exc:  # a family a runtime cannot export or run: auto skips it, loudly
            if backend != "auto":
                raise UserError(
                    f"--backend {name}: the encoder could not run there ({_first_line(exc)})"
                ) from exc
            logger.warning("backend auto: %s skipped: %s", name, _first_line(exc))
    if backend != "auto":
        candidate, check = checked[backend]
        if not check["passed"]:
            raise UserError(
                f"--backend {backend}: the encoder's outputs differ from torch's by {check['max_abs_diff']:.3g} "
                f"(allowed {check['allowed']:.3g}) on probe inputs; use --backend torch, and please report the model type"
            )
        swap_encoder(model, candidate)
        logger.info(
            "backend %s: the encoder runs in %s (parity with torch: max diff %.2g)",
            backend,
            backend,
            check["max_abs_diff"],
        )
        return backend
    return _choose(model, reference, checked, batches, precision, decision, backend_of)


def _auto_candidates(wanted: list[str], device, precision: str) -> list[tuple[str, str]]:
    """``(backend, compute)`` pairs ``auto`` checks and times against torch. Where torch computes
    in bf16 (a CPU with AMX), a runtime that can computes in bf16 too. Where the CPU computes
    bf16 natively without AMX and ``--precision`` is ``auto``, such a runtime is tried both in
    fp32 and in bf16: bf16 lost to fp32 on one such CPU (an Intel Xeon, OpenVINO 0.87x) and won
    on another (an AMD EPYC, OpenVINO 1.65x; docs/speed.md), so the machine decides.

    Example:
        >>> _auto_candidates(["onnx"], "cpu", "fp32")
        [('onnx', 'fp32')]
    """
    bf16_capable = [n for n in wanted if computes_bf16(n)]
    if uses_bf16(device, precision):
        return [(n, "bf16" if n in bf16_capable else "fp32") for n in wanted]
    pairs = [(n, "fp32") for n in wanted]
    if precision == "auto" and torch.device(device).type == "cpu":
        pairs += [(n, "bf16") for n in bf16_capable]
    return pairs


def computes_bf16(backend: str) -> bool:
    """Whether ``backend`` can compute an fp32 graph in bf16 on this CPU, natively."""
    if backend not in BF16_BACKENDS:
        return False
    return bool(getattr(runtime_module(backend), "computes_bf16", lambda: False)())


@torch.inference_mode()
def bf16_allowance(reference: nn.Module, batches, device) -> float:
    """:data:`BF16_PARITY_FACTOR` times the largest difference torch's own bf16 autocast makes to
    the encoder's fp32 hidden states on ``batches`` (real tokens): what a bf16 runtime may differ."""
    from ..precision import autocast_for

    diff = 0.0
    for batch in batches:
        inputs = forward_inputs(reference, batch)
        want = reference(**inputs, return_dict=True).last_hidden_state.float()
        with autocast_for(device, "bf16"):
            got = reference(**inputs, return_dict=True).last_hidden_state.float()
        real = batch["attention_mask"].bool()
        diff = max(diff, float((got[real] - want[real]).abs().max()))
    return BF16_PARITY_FACTOR * diff


def _decision_file(key: str, wanted, threads, batches, precision: str) -> Path:
    """Where ``auto`` keeps what it measured for this encoder on this machine: keyed by the weights,
    the runtimes and their versions, the CPU's flags, the threads, the probe and the precision."""
    from importlib import metadata

    digest = hashlib.blake2b(digest_size=12)
    digest.update(f"choice:{CHOICE_VERSION};".encode())
    for name in wanted:
        package = PACKAGES.get(name, (name, name))[0]
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "?"
        digest.update(f"{name}:{RUNTIMES.get(name)}:{version};".encode())
    digest.update(f"torch:{torch.__version__};{threads};{torch.get_num_threads()};{precision};".encode())
    digest.update(str([tuple(b["input_ids"].shape) for b in batches]).encode())
    digest.update(_cpu_flags().encode())
    return cache_dir() / "auto" / f"{key}-{digest.hexdigest()}.json"


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _read_decision(decision: Path) -> dict | None:
    """What ``auto`` remembered in ``decision`` (``{"backend", "reason", "compute", ...}``), or
    None where there is no usable record (none, or damaged: measure again)."""
    try:
        found = json.loads(decision.read_text(encoding="utf-8"))
        return found if isinstance(found, dict) and isinstance(found.get("backend"), str) else None
    except (OSError, ValueError):
        return None


def _log_remembered(found: dict, decision: Path) -> None:
    logger.info(
        "backend auto: %s (measured before on this machine: %s; delete %s to measure again)",
        found["backend"],
        found.get("reason", ""),
        decision,
    )


def _apply_decision(model, reference, decision: Path, wanted, key: str, threads) -> str | None:
    """``auto`` on an encoder it measured before on this machine: the backend it chose then
    (``None``: the record is unusable, measure again)."""
    found = _read_decision(decision)
    if found is None:
        return None
    best = found["backend"]
    if best != "torch":
        if best not in wanted:
            return None
        compute = found.get("compute", "fp32")
        graph = exported(best, reference, key)
        swap_encoder(model, load_runtime(best, graph, reference.config, threads, compute=compute))
    _log_remembered(found, decision)
    return best


# ---- a model auto measured before, opened without its torch encoder ------------------------------
def _files_fingerprint(model_dir: str | os.PathLike) -> str | None:
    """What identifies the weights a saved model's files hold: the weights file's path, size,
    inode and modification time, and the config's text (a file written again, as every save
    does by rename, gets another). None where the directory has no such files."""
    folder = Path(model_dir).resolve()
    try:
        stat = (folder / "model.safetensors").stat()
        config = (folder / "config.json").read_bytes()
    except OSError:
        return None
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{folder}|{stat.st_size}|{stat.st_ino}|{stat.st_mtime_ns}|".encode())
    digest.update(config)
    return digest.hexdigest()


def _remember_files(model_dir: str | os.PathLike, key: str) -> None:
    fingerprint = _files_fingerprint(model_dir)
    if fingerprint is None:
        return
    record = cache_dir() / "files" / f"{fingerprint}.json"
    if record.is_file():
        return
    _write_json(record, {"weights_key": key, "model_dir": str(model_dir)})


def remembered_runtime(
    model_dir: str | os.PathLike,
    config,
    *,
    threads: int | None = None,
    precision: str = "auto",
    batch_size: int = 16,
) -> EncoderRuntime | None:
    """``auto``'s earlier choice for the model in ``model_dir``, loaded without building its torch
    encoder: the runtime (its graph from the cache) when ``auto`` measured these very files on
    this machine before and chose a runtime, else None (load as usual; ``auto`` then measures).

    The parity check and the timing ran when the choice was made; what is reused is keyed as that
    choice was (the weights' hash, the runtimes and their versions, the CPU, threads, probes,
    precision), reached through the files' fingerprint (:func:`_files_fingerprint`) so that the
    weights need not be hashed, nor the encoder built, to find it. A one-sentence ``predict``
    spends most of its start-up importing transformers' model code and building the encoder.

    Example:
        >>> remembered_runtime("/nonexistent", None) is None
        True
    """
    fingerprint = _files_fingerprint(model_dir)
    if fingerprint is None:
        return None
    try:
        key = json.loads((cache_dir() / "files" / f"{fingerprint}.json").read_text(encoding="utf-8"))
        key = key["weights_key"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    wanted = [b for b in BACKENDS if b != "torch" and installed(b)]
    if not wanted:
        return None
    batches = probe_batches(config, batch_size=max(2, min(batch_size, 64)))
    decision = _decision_file(key, wanted, threads, batches, precision)
    found = _read_decision(decision)
    best = found["backend"] if found else None
    graph = cached_graph(best, key) if best in wanted else None
    if graph is None:
        return None
    runtime = load_runtime(best, graph, config, threads, compute=found.get("compute", "fp32"))
    _log_remembered(found, decision)
    return runtime


def _choose(
    model, reference, checked, batches, precision: str, decision: Path | None = None, backend_of=None
) -> str:
    """``auto``: time torch and every runtime that passed its check; swap in the fastest.
    ``checked``'s keys are labels (``openvino``, ``openvino bf16``), ``backend_of`` their backends."""
    backend_of = backend_of or {name: name for name in checked}
    from ..precision import autocast_for

    failed = {name: check for name, (_, check) in checked.items() if not check["passed"]}
    for name, check in failed.items():
        logger.warning(
            "%s failed its parity check against torch (max diff %.3g, allowed %.3g): auto does not use it",
            name,
            check["max_abs_diff"],
            check["allowed"],
        )
    device = next(model.parameters()).device
    contenders = {"torch": (reference, lambda: autocast_for(device, precision))}
    for name, (candidate, check) in checked.items():
        if check["passed"]:
            contenders[name] = (candidate, contextlib.nullcontext)
    times = timed_rounds(contenders, batches)
    fastest, tie = _fastest(contenders, times, batches)
    # torch is the reference: a runtime replaces it only when clearly faster, not within the noise
    best = fastest if times["torch"] >= MIN_GAIN * times[fastest] else "torch"
    computes = {name: getattr(runtime, "precision", "fp32") for name, (runtime, _) in checked.items()}
    speeds = ", ".join(f"{name} {times['torch'] / t:.2f}x" for name, t in times.items())
    skipped = f"; failed parity: {', '.join(failed)}" if failed else ""
    if tie:
        lone = ", ".join(
            f"{name} {seconds * 1000 / LONE_INPUT_PASSES:.2f} ms" for name, seconds in tie.items()
        )
        reason = (
            f"speed vs torch on probe batches: {speeds}{skipped}; {' and '.join(tie)} within "
            f"{TIE_MARGIN:.2f}x of each other there, so the faster on a lone short input ({lone})"
        )
    else:
        why = "the fastest" if best == fastest else f"no runtime {MIN_GAIN:.2f}x faster"
        reason = f"{why} on probe batches, speed vs torch: {speeds}{skipped}"
    logger.info("backend auto: %s (%s)", best, reason)
    chosen = backend_of.get(best, best)
    busy = _busy()
    if busy:
        logger.info("backend auto: not remembered, the machine was busy while timing (%s)", busy)
    if decision is not None and not busy:
        record = {"backend": chosen, "reason": reason, "seconds": times, "failed_parity": sorted(failed)}
        if tie:
            record["lone_input_seconds"] = tie
        if best != "torch":
            record["compute"] = computes[best]  # fp32, or bf16
        _write_json(decision, record)
    if best != "torch":
        swap_encoder(model, checked[best][0])
    return chosen


def _fastest(contenders: dict, times: dict[str, float], batches) -> tuple[str, dict]:
    """The contender fastest on the probes (``times``) and ``{}``; or, where runtimes tie (within
    :data:`TIE_MARGIN` of the fastest runtime, and faster than torch), the one faster on the lone
    short probe input (``batches[0]``) and ``{name: seconds}`` of :data:`LONE_INPUT_PASSES`
    passes over it."""
    fastest = min(times, key=times.get)
    if fastest == "torch" or not batches:  # torch leads: nothing to break
        return fastest, {}
    # Only runtimes that beat torch too: the tie never hands the choice back to torch.
    tied = sorted(
        name
        for name, t in times.items()
        if name != "torch" and t <= TIE_MARGIN * times[fastest] and times["torch"] >= MIN_GAIN * t
    )
    if len(tied) < 2:
        return fastest, {}
    lone = timed_rounds({name: contenders[name] for name in tied}, batches[:1] * LONE_INPUT_PASSES)
    return min(tied, key=lone.get), lone


def _write_json(path: Path, value: dict) -> None:
    """``value`` as JSON at ``path``, written beside it and renamed: a reader sees the old record
    or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(f".{os.getpid()}.tmp")
    staging.write_text(json.dumps(value, indent=2), encoding="utf-8")
    staging.replace(path)


def _busy() -> str | None:
    """Why timings taken now would not hold later (other work holding the cores: a one-minute load
    average above the core count), else None. A choice timed on a busy machine is used once, not
    remembered: remembered, it would decide every later load of the model."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        return None
    cores = os.cpu_count() or 1  # the load average is the whole machine's
    return f"load average {load:.1f} on {cores} cores" if load > cores else None


def _apply_saved(model, runtime: dict, where: str | None, threads: int | None) -> str:
    """Load the graph a run directory records (``encoder-tasks quantize --backend onnx``)."""
    backend, file = runtime.get("backend"), runtime.get("file")
    if backend not in BACKENDS or backend == "torch" or not file:
        raise UserError(
            f"{where}: the saved runtime {runtime!r} names no backend and graph this version loads"
        )
    path = Path(where or ".") / file
    if not path.is_file():
        raise UserError(f"{where}: the saved {backend} graph {file} is missing; the directory is incomplete")
    loaded = load_runtime(backend, path, model.encoder.config, threads, runtime.get("precision", "fp32"))
    swap_encoder(model, loaded)
    logger.info("backend %s: the saved %s graph %s", backend, runtime.get("precision", "fp32"), path)
    return backend


def _is_torch_int8(model) -> bool:
    from ..quantization.int8 import is_int8

    return is_int8(model)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def describe(model) -> dict[str, Any]:
    """Which backend ``model``'s encoder runs on, for logs and reports."""
    encoder = getattr(model, "encoder", None)
    if isinstance(encoder, EncoderRuntime):
        return {"backend": encoder.backend, "precision": encoder.precision, "path": str(encoder.path)}
    return {"backend": "torch"}

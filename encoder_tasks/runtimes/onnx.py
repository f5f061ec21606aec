"""The ONNX Runtime backend: the encoder exported to ONNX, optimised, run in an ``InferenceSession``.

:func:`export_encoder` traces the bare encoder (``AutoModel``: ``input_ids``, ``attention_mask``,
``token_type_ids`` where it reads them, in; ``last_hidden_state`` out) with dynamic batch and
sequence axes, in eager attention (the pattern ONNX Runtime's optimiser fuses), then runs ONNX
Runtime's transformer optimiser (``onnxruntime.transformers.optimizer.optimize_model``) for the
families it knows (BERT-like: fused attention, embedding LayerNorm, skip LayerNorm, bias GELU).
:func:`load` opens the graph with every graph optimisation on and one intra-op thread per core.

Example:
    >>> from encoder_tasks.testing import make_tiny_model
    >>> from encoder_tasks.backbone import load_encoder
    >>> import tempfile, torch
    >>> encoder = load_encoder(make_tiny_model("bert")).eval()
    >>> path = export_encoder(encoder, tempfile.mkdtemp())
    >>> runtime = load(path, encoder.config, threads=1)
    >>> ids = torch.tensor([[2, 5, 6, 3]])
    >>> got = runtime(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    >>> want = encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    >>> bool((got - want).abs().max() < 1e-4)
    True
"""

from __future__ import annotations

import inspect
import logging
import os
import warnings
from pathlib import Path

import numpy as np
import torch

from .base import EncoderRuntime, usable_cores

logger = logging.getLogger(__name__)

GRAPH_FILE = "encoder.onnx"
OPSET = 17
#: Bumped when the exported graph changes, so cached graphs of older versions are not reused.
GRAPH_VERSION = 1
#: Families ONNX Runtime's ``bert`` optimiser fuses (attention, LayerNorm, GELU).
OPTIMIZER_TYPES = {
    "bert": "bert",
    "roberta": "bert",
    "xlm-roberta": "bert",
    "camembert": "bert",
    "electra": "bert",
    "distilbert": "bert",
}


class _Traced(torch.nn.Module):
    """The encoder with plain tensor inputs and one output (what the exporter traces)."""

    def __init__(self, encoder, names):
        super().__init__()
        self.encoder = encoder
        self.names = names

    def forward(self, *tensors):
        return self.encoder(**dict(zip(self.names, tensors)), return_dict=True).last_hidden_state


def _sample(config, names) -> tuple[torch.Tensor, ...]:
    vocab = int(getattr(config, "vocab_size", 100) or 100)
    ids = torch.randint(min(5, vocab - 1), vocab, (2, 8), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # a padded row: the mask's path is traced as it runs on real batches
    given = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    return tuple(given[name] for name in names)


def export_encoder(encoder, dest_dir: str | os.PathLike) -> Path:
    """Write ``dest_dir/encoder.onnx``: ``encoder`` (an ``AutoModel``) as an optimised ONNX graph.

    The encoder is traced in eager attention (restored afterwards) and fp32; its weights are not
    changed. Returns the graph's path.
    """
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    accepted = set(inspect.signature(encoder.forward).parameters)
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in accepted]
    config = encoder.config
    previous = getattr(config, "_attn_implementation", None)
    raw = dest / "encoder.raw.onnx"
    dtype = next(encoder.parameters()).dtype
    try:
        if previous not in (None, "eager"):
            _set_attention(encoder, "eager")
        encoder.float()
        axes = {name: {0: "batch", 1: "sequence"} for name in [*names, "last_hidden_state"]}
        with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
            warnings.simplefilter("ignore")  # the tracer's notes on Python booleans: shapes stay dynamic
            torch.onnx.export(
                _Traced(encoder, names).eval(),
                _sample(config, names),
                str(raw),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )
    finally:
        encoder.eval()  # the exporter restores the wrapper's mode, not the encoder's
        encoder.to(dtype)
        if previous not in (None, "eager"):
            _set_attention(encoder, previous)
    path = dest / GRAPH_FILE
    if not _optimize(raw, path, config):
        raw.replace(path)
    raw.unlink(missing_ok=True)
    return path


def _set_attention(encoder, implementation: str) -> None:
    setter = getattr(encoder, "set_attn_implementation", None)
    if setter is not None:
        setter(implementation)
    else:
        encoder.config._attn_implementation = implementation


def _optimize(raw: Path, path: Path, config) -> bool:
    """ONNX Runtime's transformer fusions for the families it knows; False where none applied."""
    model_type = OPTIMIZER_TYPES.get(getattr(config, "model_type", ""))
    if model_type is None:
        return False
    try:
        from onnxruntime.transformers.optimizer import optimize_model
    except ImportError:  # an onnxruntime build without its transformers tools
        return False
    heads = int(getattr(config, "num_attention_heads", None) or getattr(config, "n_heads", 0) or 0)
    hidden = int(getattr(config, "hidden_size", None) or getattr(config, "dim", 0) or 0)
    quiet = logging.getLogger("onnxruntime.transformers")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        optimized = optimize_model(
            str(raw), model_type=model_type, num_heads=heads, hidden_size=hidden, opt_level=1, use_gpu=False
        )
    finally:
        quiet.setLevel(level)
    fused = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
    logger.info("onnx: fused %s", ", ".join(f"{v} {k}" for k, v in fused.items()) or "nothing")
    optimized.save_model_to_file(str(path))
    return True


def session_options(threads: int | None = None):
    """ONNX Runtime session options: every graph optimisation, ``threads`` intra-op threads
    (default: the cores this process may use), one inter-op thread (the toolkit runs one batch at
    a time per model); idle threads sleep under ``OMP_WAIT_POLICY=PASSIVE``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = int(threads or usable_cores())
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
        # As torch's OpenMP threads under the toolkit's default (encoder_tasks.runtime): idle threads
        # sleep rather than spin, so they never hold a core that another thread needs.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class OnnxEncoder(EncoderRuntime):
    """The encoder as an ONNX Runtime ``InferenceSession`` (see :class:`EncoderRuntime`)."""

    backend = "onnx"

    def __init__(self, session, config, path):
        super().__init__(config, [i.name for i in session.get_inputs()], path)
        self.session = session

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run(["last_hidden_state"], feeds)[0]

    def for_callers(self, callers: int, threads: int | None = None) -> OnnxEncoder:
        """A session with ``threads`` intra-op threads, by default the cores' share of one of
        ``callers`` (``run`` is thread safe; two sessions' thread pools on the same cores would
        fight for them)."""
        if callers <= 1 and threads is None:
            return self
        threads = threads or max(1, usable_cores() // callers)
        runtime = OnnxEncoder(_session(self.path, threads), self.config, self.path)
        runtime.precision = self.precision
        return runtime

    def extra_repr(self) -> str:
        threads = self.session.get_session_options().intra_op_num_threads if self.session else None
        return f"{super().extra_repr()}, intra_op_threads={threads}"

    def __getstate__(self):  # an InferenceSession does not pickle: rebuild it from the file
        state = self.__dict__.copy()
        state["session"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.session is None:
            self.session = _session(self.path, None)


def _session(path: Path, threads: int | None):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), session_options(threads), providers=["CPUExecutionProvider"])


def load(path: str | os.PathLike, config, threads: int | None = None) -> OnnxEncoder:
    """An :class:`OnnxEncoder` for the graph at ``path`` (written by :func:`export_encoder`, or its
    int8 copy by :mod:`encoder_tasks.quantization.onnx`), with the encoder's ``config``."""
    path = Path(path)
    return OnnxEncoder(_session(path, threads), config, path)

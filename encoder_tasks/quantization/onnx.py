"""int8 for the ONNX Runtime backend: dynamic or static (calibrated) quantization of the encoder's
graph, with the layers that cost the most accuracy kept in fp32.

- **dynamic** (``onnxruntime.quantization.quantize_dynamic``): weights int8 (one scale per output
  channel), activations quantized per batch as the graph runs; needs no data.
- **static** (``quantize_static``, QDQ format, per-channel weights): activation ranges calibrated on
  inputs the task's own tokenisation made of the calibration texts (:class:`FeedsReader`), so the
  graph runs int8 from end to end of each matrix product.

:func:`quantizable_nodes` maps the graph's matrix products (``MatMul``, fused ``Attention``) to their
encoder layer; :func:`layer_sensitivity` measures, per layer, how far the encoder's output moves
when that layer alone is quantized; the guardrail in :mod:`encoder_tasks.quantization` keeps the most
sensitive layers in fp32 (``nodes_to_exclude``), one at a time, until the task metric is within
``--max_metric_loss``.

Example:
    >>> import numpy as np
    >>> reader = FeedsReader([{"input_ids": np.ones((1, 3), dtype=np.int64)}])
    >>> reader.get_next()["input_ids"].shape, reader.get_next()
    ((1, 3), None)
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import UserError

logger = logging.getLogger(__name__)

METHODS = ("dynamic", "static")
#: The operators whose weights become int8.
QUANTIZED_OPS = ("MatMul", "Attention", "Gemm")
_LAYER = re.compile(r"layers?[._/](\d+)[./]")


def _onnxruntime_quantization():
    try:
        from onnxruntime import quantization
    except ImportError:
        raise UserError(
            "quantize --backend onnx needs onnxruntime, which is not installed: pip install 'encoder-tasks[onnx]'"
        ) from None
    return quantization


class FeedsReader:
    """ONNX Runtime's ``CalibrationDataReader`` over a list of graph feeds (dicts of int64 arrays).

    The calibrator calls :meth:`get_next` until it returns ``None``; :meth:`rewind` starts again.
    """

    def __init__(self, feeds: Sequence[dict[str, np.ndarray]]):
        self.feeds = list(feeds)
        self.position = 0

    def get_next(self):
        if self.position >= len(self.feeds):
            return None
        self.position += 1
        return self.feeds[self.position - 1]

    def rewind(self) -> None:
        self.position = 0

    def __len__(self) -> int:
        return len(self.feeds)


def graph_feeds(calls: Sequence[dict], input_names: Sequence[str], limit: int | None = None) -> list[dict]:
    """The encoder inputs of recorded model calls (:func:`.report.recorded_calls`) as graph feeds:
    int64 numpy arrays named as the graph's inputs (``token_type_ids`` zeros where a call had none).

    Example:
        >>> import torch
        >>> feeds = graph_feeds([{"input_ids": torch.ones(2, 4, dtype=torch.long),
        ...     "attention_mask": torch.ones(2, 4), "labels": torch.zeros(2)}], ["input_ids", "attention_mask"])
        >>> sorted(feeds[0]), feeds[0]["attention_mask"].dtype
        (['attention_mask', 'input_ids'], dtype('int64'))
    """
    feeds = []
    for call in calls:
        ids = call.get("input_ids")
        if ids is None:
            continue
        given = {
            "input_ids": ids,
            "attention_mask": call.get("attention_mask"),
            "token_type_ids": call.get("token_type_ids"),
        }
        feed = {}
        for name in input_names:
            value = given.get(name)
            array = np.ones_like(ids.numpy()) if name == "attention_mask" and value is None else None
            if value is None and array is None:
                array = np.zeros_like(ids.numpy())
            feed[name] = (array if array is not None else value.detach().cpu().numpy()).astype(np.int64)
        feeds.append(feed)
        if limit is not None and len(feeds) >= limit:
            break
    return feeds


def quantizable_nodes(path: str | os.PathLike) -> dict[str, int]:
    """``{node name: encoder layer}`` for every matrix product that quantization makes int8.

    Names from the torch exporter carry the layer (``/encoder/layer.3/output/dense/MatMul``); a
    fused node (``Attention_3``) belongs to the layer of the next named node after it (nodes are in
    topological order). Nodes outside every layer (a pooler) get ``-1``.
    """
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    found: dict[str, int] = {}
    pending: list[str] = []
    for node in graph.node:
        match = _LAYER.search(node.name)
        if match:
            layer = int(match.group(1))
            for name in pending:
                found[name] = layer
            pending = []
        if node.op_type not in QUANTIZED_OPS:
            continue
        if match:
            found[node.name] = int(match.group(1))
        else:
            pending.append(node.name)
    for name in pending:
        found[name] = -1
    return found


def quantize_graph(
    fp32_path: str | os.PathLike,
    dest: str | os.PathLike,
    method: str,
    calibration: Sequence[dict] | None = None,
    exclude: Sequence[str] = (),
    include: Sequence[str] | None = None,
) -> Path:
    """Write the int8 copy of the graph at ``fp32_path`` to ``dest``: ``method`` ``dynamic`` or
    ``static`` (calibrated on ``calibration``, a list of graph feeds), the nodes in ``exclude`` kept in
    fp32, only ``include`` quantized when given."""
    quantization = _onnxruntime_quantization()
    if method not in METHODS:
        raise UserError(f"--method must be one of {', '.join(METHODS)}, found {method!r}")
    dest = Path(dest)
    import onnx

    # Shape inference cannot type the outputs of ONNX Runtime's fused operators (Attention,
    # SkipLayerNormalization): they are fp32, as every tensor of the graph.
    nodes = {
        "nodes_to_exclude": list(exclude),
        "extra_options": {"DefaultTensorType": onnx.TensorProto.FLOAT},
    }
    if include is not None:
        nodes["nodes_to_quantize"] = list(include)
    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the quantizer logs every node it skips
    try:
        with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="encoder-tasks-int8-") as scratch:
            warnings.simplefilter("ignore")
            fp32_path = _with_shapes(fp32_path, Path(scratch) / "shaped.onnx")
            if method == "dynamic":
                quantization.quantize_dynamic(
                    str(fp32_path),
                    str(dest),
                    op_types_to_quantize=list(QUANTIZED_OPS),
                    per_channel=True,
                    weight_type=quantization.QuantType.QInt8,
                    **nodes,
                )
            else:
                if not calibration:
                    raise UserError(
                        "quantize --method static: no calibration inputs (the calibration file held none)"
                    )
                quantization.quantize_static(
                    str(fp32_path),
                    str(dest),
                    FeedsReader(calibration),
                    quant_format=quantization.QuantFormat.QDQ,
                    op_types_to_quantize=list(QUANTIZED_OPS),
                    per_channel=True,
                    activation_type=quantization.QuantType.QUInt8,
                    weight_type=quantization.QuantType.QInt8,
                    calibrate_method=quantization.CalibrationMethod.MinMax,
                    calibration_providers=["CPUExecutionProvider"],
                    **nodes,
                )
    finally:
        quiet.setLevel(level)
    return dest


def _with_shapes(path, dest: Path) -> Path:
    """The graph with every tensor's type and shape inferred, ONNX Runtime's fused operators
    included (symbolic shape inference knows them; ONNX's own does not): without them the
    quantizer cannot tell which inputs are fp32 and leaves those nodes unquantized."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    try:
        quant_pre_process(str(path), str(dest), skip_optimization=True, auto_merge=True)
    except Exception as exc:  # an operator symbolic inference does not know: quantize as it is
        logger.info("quantize: shape inference skipped (%s)", str(exc).splitlines()[0] if str(exc) else exc)
        return Path(path)
    return dest


def hidden_states(
    path: str | os.PathLike, feeds: Sequence[dict], threads: int | None = None
) -> list[np.ndarray]:
    """The graph's ``last_hidden_state`` for every feed."""
    from ..runtimes.onnx import _session

    session = _session(Path(path), threads)
    names = {i.name for i in session.get_inputs()}
    return [session.run(["last_hidden_state"], {k: v for k, v in f.items() if k in names})[0] for f in feeds]


def output_error(
    reference: Sequence[np.ndarray], found: Sequence[np.ndarray], feeds: Sequence[dict]
) -> float:
    """Relative squared error of ``found`` against ``reference`` over the real tokens of ``feeds``.

    Example:
        >>> import numpy as np
        >>> feeds = [{"attention_mask": np.array([[1, 0]])}]
        >>> output_error([np.ones((1, 2, 2))], [np.array([[[1.1, 1.1], [9.0, 9.0]]])], feeds)
        0.01
    """
    error = total = 0.0
    for want, got, feed in zip(reference, found, feeds):
        real = feed["attention_mask"].astype(bool)
        error += float(((got[real] - want[real]) ** 2).sum())
        total += float((want[real] ** 2).sum())
    return round(error / total, 10) if total else 0.0


def layer_sensitivity(
    fp32_path: str | os.PathLike,
    method: str,
    calibration: Sequence[dict],
    probe: Sequence[dict],
    nodes: dict[str, int],
) -> list[dict]:
    """Per encoder layer, how far the encoder's output moves (:func:`output_error` on ``probe``)
    when that layer's matrix products alone are int8; most sensitive first."""
    reference = hidden_states(fp32_path, probe)
    layers = sorted({layer for layer in nodes.values()})
    found = []
    with tempfile.TemporaryDirectory(prefix="encoder-tasks-sensitivity-") as scratch:
        for layer in layers:
            own = [name for name, at in nodes.items() if at == layer]
            path = quantize_graph(
                fp32_path, Path(scratch) / f"layer{layer}.onnx", method, calibration, include=own
            )
            error = output_error(reference, hidden_states(path, probe), probe)
            found.append({"layer": layer, "nodes": len(own), "output_error": error})
            logger.info("quantize: layer %d alone in int8 moves the encoder's output by %.3g", layer, error)
    return sorted(found, key=lambda row: -row["output_error"])

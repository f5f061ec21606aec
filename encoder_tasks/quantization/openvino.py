"""Static int8 for the OpenVINO backend, with the guardrail's per-layer pieces: the same shape as
:mod:`.onnx`, over :func:`encoder_tasks.runtimes.openvino.quantize_int8` (nncf post-training
quantization, ``ModelType.TRANSFORMER``).

- :func:`linear_nodes` maps the graph's MatMuls (the linear layers and the attention products) to
  their encoder layer;
- :func:`quantize_graph` writes the int8 copy calibrated on graph feeds (:func:`.onnx.graph_feeds`),
  the named linear layers kept in fp32 (nncf's ``ignored_scope``);
- :func:`layer_sensitivity` measures, per encoder layer, how far the encoder's output moves when
  that layer's linear layers alone are int8, so the guardrail keeps the most sensitive in fp32.

Only static int8 is offered: OpenVINO runs the int8 graph nncf writes (activations quantized with
calibrated ranges); a dynamic int8 graph is ONNX Runtime's (``--backend onnx --method dynamic``).

Example:
    >>> layer_of("__module.encoder.layer.3.attention.self.query/aten::linear/MatMul")
    3
    >>> layer_of("__module.pooler.dense/aten::linear/MatMul")
    -1
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .onnx import output_error

logger = logging.getLogger(__name__)

METHODS = ("static",)
#: ``layer.3.`` (BERT, DistilBERT's ``transformer.layer.3``), ``layers.3.`` (ModernBERT).
_LAYER = re.compile(r"layers?[._/](\d+)[./]")


def layer_of(name: str) -> int:
    """The encoder layer a node name belongs to, ``-1`` outside every layer."""
    match = _LAYER.search(name)
    return int(match.group(1)) if match else -1


def linear_nodes(encoder_xml: str | os.PathLike) -> dict[str, int]:
    """``{MatMul name: encoder layer}`` for every MatMul int8 quantizes: the linear layers and the
    attention products (a layer kept in fp32 keeps both; see
    :func:`encoder_tasks.runtimes.openvino.linear_layers`)."""
    from ..runtimes.openvino import linear_layers

    return {name: layer_of(name) for name in linear_layers(encoder_xml)}


def input_names(encoder_xml: str | os.PathLike) -> list[str]:
    """The graph's input names (``input_ids``, ``attention_mask``, ``token_type_ids`` where read)."""
    from ..runtimes.openvino import _openvino, _resolve

    model = _openvino().Core().read_model(str(_resolve(encoder_xml)))
    return [port.get_any_name() for port in model.inputs]


def quantize_graph(
    fp32_xml: str | os.PathLike,
    dest_dir: str | os.PathLike,
    calibration: Sequence[dict],
    exclude: Sequence[str] = (),
) -> Path:
    """Write the static int8 copy of ``fp32_xml`` into ``dest_dir`` (``encoder.xml``, ``encoder.bin``,
    ``encoder_info.json``, replacing an earlier copy there), the linear layers in ``exclude`` in fp32."""
    from ..errors import UserError
    from ..runtimes.openvino import quantize_int8

    if not calibration:
        raise UserError("quantize --backend openvino: no calibration inputs (the calibration file held none)")
    nncf_logger = logging.getLogger("nncf")
    level = nncf_logger.level
    nncf_logger.setLevel(logging.WARNING)  # nncf logs every statistics pass
    try:
        return quantize_int8(fp32_xml, calibration, dest_dir, ignored_layers=list(exclude), overwrite=True)
    finally:
        nncf_logger.setLevel(level)


def hidden_states(encoder_xml: str | os.PathLike, feeds: Sequence[dict]) -> list[np.ndarray]:
    """The graph's ``last_hidden_state`` for every feed (f32 inference, as the backend loads it)."""
    from ..runtimes.openvino import _openvino, _resolve

    compiled = (
        _openvino()
        .Core()
        .compile_model(str(_resolve(encoder_xml)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    )
    names = {port.get_any_name() for port in compiled.inputs}
    return [np.asarray(compiled({k: v for k, v in f.items() if k in names})[0]) for f in feeds]


def layer_sensitivity(
    fp32_xml: str | os.PathLike,
    calibration: Sequence[dict],
    probe: Sequence[dict],
    nodes: dict[str, int],
) -> list[dict]:
    """Per encoder layer, how far the encoder's output moves (:func:`.onnx.output_error` on
    ``probe``) when that layer's linear layers alone are int8 (every other linear layer ignored);
    most sensitive first."""
    reference = hidden_states(fp32_xml, probe)
    found = []
    with tempfile.TemporaryDirectory(prefix="encoder-tasks-sensitivity-") as scratch:
        for layer in sorted(set(nodes.values())):
            own = [name for name, at in nodes.items() if at == layer]
            others = [name for name, at in nodes.items() if at != layer]
            path = quantize_graph(fp32_xml, Path(scratch) / f"layer{layer}", calibration, exclude=others)
            error = output_error(reference, hidden_states(path, probe), probe)
            found.append({"layer": layer, "nodes": len(own), "output_error": error})
            logger.info("quantize: layer %d alone in int8 moves the encoder's output by %.3g", layer, error)
    return sorted(found, key=lambda row: -row["output_error"])

"""ONNX export: ``model.onnx`` with dynamic batch and sequence axes, checked against PyTorch.

The graph's outputs and their dynamic axes are the task's ``onnx_outputs`` (classification
``logits [batch, labels]``, tagging ``logits [batch, sequence, tags]``, QA start and end
logits, embedding ``embeddings [batch, hidden]``). Beside the graph the directory holds the
tokenizer, ``encoder_tasks.json`` (the model's settings, format 2, plus the graph's input and
output names) and, for a CRF tagger, ``crf.npz``: the CRF stays outside the graph and
:class:`~encoder_tasks.export.onnx_runtime.OnnxModel` runs it; :func:`encoder_tasks.tasks.ner.onnx.decode_tags`
decodes a tagger's tags with the NER task's own Viterbi.

Example:
    >>> from encoder_tasks.export.onnx import export_onnx             # doctest: +SKIP
    >>> export_onnx(model, tokenizer, "exported/onnx", TASKS["ner"])  # doctest: +SKIP
    {'format': 'onnx', 'opset': 17, 'parity': 'checked', 'max_abs_diff': 2.1e-06}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..artifact import SETTINGS_FORMAT, TASK_FILE
from ..data.writers import write_json
from . import ExportError
from .samples import sample_batches
from .staging import staged

logger = logging.getLogger(__name__)

#: ``export_info.json``'s ``parity`` where onnxruntime was missing.
PARITY_NOT_CHECKED = "not checked: onnxruntime not installed"


class OnnxGraph(nn.Module):
    """The model's forward with plain tensor inputs and outputs (what the ONNX exporter traces)."""

    def __init__(self, model, outputs: tuple[str, ...], with_token_types: bool):
        super().__init__()
        self.model = model
        self.outputs = outputs
        self.with_token_types = with_token_types

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.with_token_types:
            kwargs["token_type_ids"] = token_type_ids
        out = self.model(**kwargs)
        return tuple(getattr(out, name) for name in self.outputs)


def export_onnx(model, tokenizer, dest: str | Path, task, opset: int = 17, tolerance: float = 1e-4) -> dict:
    """Write ``model.onnx`` (+ tokenizer, settings, CRF scores) to ``dest``, checked against PyTorch.

    The graph takes ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the tokenizer
    makes them and the encoder reads them). Everything is written to a temporary folder inside
    ``dest`` and moves into ``dest`` once onnxruntime's outputs match PyTorch's (a mismatch
    raises :class:`~encoder_tasks.export.ExportError` and leaves no ``model.onnx``). Without
    onnxruntime the graph is written unchecked, and ``info["parity"]`` and a warning say so.
    """
    model = model.eval().float()
    with staged(dest) as staging:
        inputs, batches = _write(model, tokenizer, staging, task, opset)
        info = {"format": "onnx", "opset": opset}
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            info["parity"] = PARITY_NOT_CHECKED
            logger.warning(
                "%s: the ONNX graph's outputs were not compared with PyTorch's (parity %s; "
                "pip install 'encoder-tasks[onnx]' to check them)",
                dest,
                PARITY_NOT_CHECKED,
            )
            return info
        diff, scale = onnx_parity(model, staging, batches, inputs, tuple(task.onnx_outputs))
        allowed = tolerance * (1.0 + scale)
        if not diff <= allowed:
            raise ExportError(
                f"the ONNX graph's outputs differ from PyTorch's by {diff:.3g} (tolerance {allowed:.3g}); "
                "not written. Please report this with the model type"
            )
        info.update({"parity": "checked", "max_abs_diff": diff})
    return info


def _write(model, tokenizer, dest: Path, task, opset: int) -> tuple[list[str], list[dict]]:
    """The graph, tokenizer, settings and CRF scores in ``dest``; returns (graph inputs, sample batches)."""
    from .onnx_runtime import crf_arrays

    outputs: Mapping[str, tuple[str, ...]] = task.onnx_outputs
    batches = sample_batches(tokenizer)
    traced = batches[-1]  # the pairs: token type ids that vary
    with_types = "token_type_ids" in traced and "token_type_ids" in model._encoder_accepts
    inputs = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_types else [])
    graph = OnnxGraph(model, tuple(outputs), with_types).eval()
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs}
    axes.update({name: dict(enumerate(names)) for name, names in outputs.items()})
    path = dest / "model.onnx"
    with torch.inference_mode(False), torch.no_grad():
        torch.onnx.export(
            graph,
            tuple(traced[name] for name in inputs),
            str(path),
            input_names=inputs,
            output_names=list(outputs),
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
    model.eval()  # the exporter restores the wrapper's mode, not the model's
    # The exporter drops inputs the graph never reads (DeBERTa-v2 without token types).
    inputs = _graph_inputs(path, inputs)
    tokenizer.save_pretrained(dest)
    write_json(
        dest / TASK_FILE,
        {
            "format_version": SETTINGS_FORMAT,
            "task": task.name,
            "head_class": f"{type(model).__module__}:{type(model).__qualname__}",
            "head_config": model.head_config,
            "settings": model.settings.to_dict() if model.settings is not None else None,
            "onnx": {"inputs": inputs, "outputs": list(outputs)},
        },
    )
    crf = getattr(model, "crf", None)  # a CRF decodes outside the graph
    if crf is not None:
        np.savez(dest / "crf.npz", **crf_arrays(crf))
    return inputs, batches


def _graph_inputs(path: Path, fallback: list[str]) -> list[str]:
    try:
        import onnx
    except ImportError:
        return fallback
    return [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]


@torch.inference_mode()
def onnx_parity(model, dest, batches, inputs, outputs) -> tuple[float, float]:
    """``(largest |onnxruntime - PyTorch|, largest |PyTorch|)`` over every output and batch."""
    from .onnx_runtime import OnnxModel

    session = OnnxModel(dest).session
    graph = OnnxGraph(model.eval(), outputs, "token_type_ids" in inputs).eval()
    diff = scale = 0.0
    for batch in batches:
        got = session.run(list(outputs), {name: batch[name].numpy().astype(np.int64) for name in inputs})
        want = graph(*(batch[name] for name in inputs))
        for mine, theirs in zip(got, want):
            theirs = theirs.float().numpy()
            diff = max(diff, float(np.abs(mine - theirs).max()))
            scale = max(scale, float(np.abs(np.clip(theirs, -1e4, 1e4)).max()))
    return diff, scale

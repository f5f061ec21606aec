"""Export a trained model to the stock transformers layout, a layout of the task's own, or ONNX.

    encoder-tasks export RUN_DIR DEST                       # --format auto
    encoder-tasks export RUN_DIR DEST --format onnx         # model.onnx + tokenizer + settings

``--format auto`` writes the task's own layout when it has one (embedding:
sentence-transformers), else the stock transformers layout: an ``AutoModelFor*`` that
``transformers.pipeline`` serves, with no custom code, except for sequence heads no stock class
can express (mean or max pooling, the default; ModernBERT), which ship ``modeling_encoder_tasks.py``
and load with ``trust_remote_code=True`` (``remote_code.py``).

============== ======================================= =========================================
task           exported as                             condition
============== ======================================= =========================================
classification ``AutoModelForSequenceClassification``  always; remote code unless ``--pooling cls``
pair           ``AutoModelForSequenceClassification``  as classification (``tasks/classification/stock.py``)
ner            ``AutoModelForTokenClassification``     no CRF (a CRF goes to ONNX + numpy Viterbi)
qa             ``AutoModelForQuestionAnswering``       always (transformers 5 has no QA pipeline)
mlm            ``AutoModelForMaskedLM``                a stock head of the same shape (checked)
embedding      sentence-transformers directory          always
============== ======================================= =========================================

Each task converts its own head (its ``stock_model`` and ``extra_layouts`` hooks, in
``encoder_tasks/tasks/<task>/stock.py``); this package holds what they share:

- ``stock.py``: helpers for the stock layouts and the checked export;
- ``onnx.py``: the ONNX graph, its outputs and dynamic axes from the task's ``onnx_outputs``;
- ``onnx_runtime.py``: :class:`OnnxModel` (serving with onnxruntime; a CRF tagger's paths are
  decoded by the NER task's own Viterbi, :func:`encoder_tasks.tasks.ner.onnx.decode_tags`);
- ``samples.py``: the sample inputs both checks score;
- ``remote_code.py`` and ``modeling_encoder_tasks.py``: the pooled sequence classifier shipped as
  remote code;
- ``staging.py``: the temporary folder an export is written and checked in.

Every export is checked before it lands: it is written to a temporary folder inside the
destination (``staging.py``), the exported model and the toolkit model score the same sample
inputs there, and a difference above the tolerance refuses the export and removes the
temporary folder; only a checked export moves into the destination. ONNX is checked with
onnxruntime; without it the export says so (``"parity": "not checked: onnxruntime not
installed"`` in ``export_info.json``, and a warning). ModernBERT's stock heads end in a
LayerNorm (not invertible), so its token and span heads export to ONNX only.

This package is the library (tasks import it, so it never looks a task up); the command,
``export_model`` and its flags, is :mod:`encoder_tasks.commands.export`. It stays light: torch
loads when an export runs.

Example:
    >>> from encoder_tasks.commands.export import export_model
    >>> info = export_model("runs/sst2-cls", "exported/sst2")  # doctest: +SKIP
    >>> from transformers import pipeline                            # doctest: +SKIP
    >>> pipeline("text-classification", model="exported/sst2")("a fine film")  # doctest: +SKIP
"""

from __future__ import annotations

from ..errors import UserError

EXPORT_INFO = "export_info.json"
#: Formats every task has; a task adds its own through ``extra_layouts``.
SHARED_FORMATS = ("transformers", "onnx")
#: Public names served from the submodules, imported when first used (they need torch).
_LAZY = {
    "OnnxModel": "onnx_runtime",
    "crf_arrays": "onnx_runtime",
    "export_onnx": "onnx",
    "export_transformers": "stock",
    "hidden_bound": "stock",
    "compare_outputs": "samples",
}


class ExportError(UserError):
    """The model cannot be written in the requested layout (the message says why and what works)."""


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

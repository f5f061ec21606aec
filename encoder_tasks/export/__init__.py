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
- ``onnx_runtime.py``: :class:`OnnxModel` (serving with onnxruntime) and the numpy Viterbi;
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

This module stays light (the CLI imports it); torch loads when an export runs.

Example:
    >>> info = export_model("runs/sst2-cls", "exported/sst2")  # doctest: +SKIP
    >>> from transformers import pipeline                            # doctest: +SKIP
    >>> pipeline("text-classification", model="exported/sst2")("a fine film")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from ..errors import UserError

logger = logging.getLogger(__name__)

EXPORT_INFO = "export_info.json"
#: Formats every task has; a task adds its own through ``extra_layouts``.
SHARED_FORMATS = ("transformers", "onnx")
#: Public names served from the submodules, imported when first used (they need torch).
_LAZY = {
    "OnnxModel": "onnx_runtime",
    "viterbi_numpy": "onnx_runtime",
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


def export_model(
    model_dir: str | Path, dest: str | Path, fmt: str = "auto", opset: int = 17, overwrite: bool = False
) -> dict:
    """Export the run in ``model_dir`` to ``dest``; writes ``export_info.json`` there too.

    ``fmt``: ``auto`` (the task's own layout if it has one, else ``transformers``),
    ``transformers``, ``onnx``, or a layout the task adds (``sentence-transformers``).
    """
    from ..backbone import TASK_FILE, load_tokenizer, read_task_metadata, resolve_model_path
    from ..data.writers import write_json
    from ..registry import TASKS

    model_dir = resolve_model_path(str(model_dir))
    metadata = read_task_metadata(model_dir)
    if metadata is None:
        raise UserError(f"export: {model_dir} is not a model saved by encoder-tasks (no {TASK_FILE})")
    task = TASKS.get(metadata.get("task"))
    if task is None:
        raise UserError(
            f"export: {model_dir}/{TASK_FILE}: unknown task {metadata.get('task')!r}; "
            f"expected one of {', '.join(TASKS)}"
        )
    from .staging import leftovers, staged

    dest = Path(dest)
    for folder in leftovers(dest):  # an interrupted export's temporary folder: never an export
        shutil.rmtree(folder, ignore_errors=True)
        logger.info("removed %s: the temporary folder of an interrupted export", folder)
    if dest.exists() and any(dest.iterdir()) and not overwrite:
        raise UserError(f"export: {dest} already holds files; choose another destination or pass --overwrite")
    if Path(model_dir).resolve() == dest.resolve():
        raise UserError("export: the destination must differ from the model directory")
    layouts = task.extra_layouts()
    if fmt == "auto":
        fmt = next(iter(layouts), "transformers")
    if fmt not in layouts and fmt not in SHARED_FORMATS:
        known = ", ".join(["auto", *SHARED_FORMATS, *layouts])
        raise UserError(f"export: --format {fmt!r}: a {task.name} model exports as one of {known}")
    # Written and checked in a temporary folder, moved into dest only when every check passed.
    with staged(dest) as staging:
        if fmt in layouts:
            info = layouts[fmt](model_dir, staging)
        else:
            from ..heads import EncoderWithHead

            model = EncoderWithHead.from_pretrained(model_dir)
            tokenizer = load_tokenizer(model_dir)
            if fmt == "transformers":
                from .stock import export_transformers

                info = export_transformers(model, tokenizer, staging, task)
            else:
                from .onnx import export_onnx

                info = export_onnx(model, tokenizer, staging, task, opset=opset)
        info.update({"source": str(model_dir), "task": task.name})
        write_json(staging / EXPORT_INFO, info)
    return info


def main(argv: list[str]) -> int:
    """``encoder-tasks export RUN_DIR DEST [--format F] [--opset N] [--overwrite]``."""
    from ..config import ArgumentParser
    from ..registry import TASKS

    own = {layout: task.name for task in TASKS.values() for layout in task.extra_layouts()}
    parser = ArgumentParser(prog="encoder-tasks export", description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="A run directory saved by encoder-tasks.")
    parser.add_argument("dest", help="Where to write the exported model.")
    parser.add_argument(
        "--format",
        default="auto",
        choices=["auto", *SHARED_FORMATS, *own],
        help="auto: the task's own layout if it has one ("
        + ", ".join(f"{task}: {layout}" for layout, task in own.items())
        + "), else the stock transformers layout. onnx: any model.",
    )
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset version.")
    parser.add_argument("--overwrite", action="store_true", help="Write into a non-empty destination.")
    args = parser.parse_args(argv)
    info = export_model(args.model_dir, args.dest, args.format, args.opset, args.overwrite)
    if "max_abs_diff" in info:
        checked = f" (checked: max |diff| {info['max_abs_diff']:.2e})"
    else:
        checked = f" (parity {info['parity']})" if "parity" in info else ""
    logger.info("exported %s model to %s as %s%s", info["task"], args.dest, info["format"], checked)
    return 0

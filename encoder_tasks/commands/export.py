"""``encoder-tasks export RUN_DIR DEST``: a saved run in another layout (the library is
:mod:`encoder_tasks.export`; see its docstring for the layouts and how each loads).

Example:
    >>> info = export_model("runs/sst2", "exported/sst2")  # doctest: +SKIP
    >>> info["format"]  # doctest: +SKIP
    'transformers'
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from ..backbone import load_tokenizer
from ..config import ArgumentParser
from ..data.writers import write_json
from ..errors import UserError
from ..export import EXPORT_INFO, SHARED_FORMATS
from ..export.staging import leftovers, staged
from ..registry import TASKS
from ..saved import open_saved

logger = logging.getLogger(__name__)

_EXPORT_DOC = "Export a trained model to the stock transformers layout, a layout of the task's own, or ONNX."


def export_model(
    model_dir: str | Path, dest: str | Path, fmt: str = "auto", opset: int = 17, overwrite: bool = False
) -> dict:
    """Export the run in ``model_dir`` to ``dest``; writes ``export_info.json`` there too.

    ``fmt``: ``auto`` (the task's own layout if it has one, else ``transformers``),
    ``transformers``, ``onnx``, or a layout the task adds (``sentence-transformers``).
    """
    try:
        opened = open_saved(model_dir, plain_encoders=False)
    except UserError as error:
        raise UserError(f"export: {error}") from None
    model_dir, task = opened.path, opened.task
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
            from ..heads import EncoderWithHead  # torch loads when an export runs

            model = EncoderWithHead.from_pretrained(model_dir)
            tokenizer = load_tokenizer(model_dir)
            if fmt == "transformers":
                from ..export.stock import export_transformers

                info = export_transformers(model, tokenizer, staging, task)
            else:
                from ..export.onnx import export_onnx

                info = export_onnx(model, tokenizer, staging, task, opset=opset)
        info.update({"source": str(model_dir), "task": task.name})
        write_json(staging / EXPORT_INFO, info)
    return info


def main(argv: list[str]) -> int:
    """``encoder-tasks export RUN_DIR DEST [--format F] [--opset N] [--overwrite]``."""
    own = {layout: task.name for task in TASKS.values() for layout in task.extra_layouts()}
    parser = ArgumentParser(prog="encoder-tasks export", description=_EXPORT_DOC)
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

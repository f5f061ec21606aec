"""A run's output directory: never clobber an earlier run, fail early on a full or read-only
disk, and find the checkpoint a ``--resume`` continues from."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from .errors import UserError

logger = logging.getLogger(__name__)

WRITE_PROBE = ".write-test-"


def check_output_dir(args) -> None:
    """Refuse to clobber an earlier run; find an unwritable or full disk before training."""
    if not args.output_dir:
        raise UserError("--output_dir is required (where the model and metrics are written)")
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--output_dir {out}: exists and is a file, not a directory")
    if int(os.environ.get("RANK", "0")) != 0:
        # Under several processes only the main one checks (and writes): another rank would
        # see the main one's write probe and mistake the folder for an earlier run.
        return
    existing = (
        sorted(p.name for p in out.iterdir() if not p.name.startswith(WRITE_PROBE)) if out.is_dir() else []
    )
    if existing and not (args.overwrite_output_dir or args.resume):
        shown = ", ".join(existing[:5]) + (", ..." if len(existing) > 5 else "")
        raise UserError(
            f"--output_dir {out} already holds a run ({shown}); choose another --output_dir, "
            "pass --resume to continue it, or --overwrite_output_dir to replace it"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=WRITE_PROBE):
            pass
    except OSError as exc:
        raise UserError(f"--output_dir {out}: cannot write there ({exc.strerror or exc})") from None


def checkpoint_bytes(model, args=None) -> tuple[int, str]:
    """Disk bytes a run needs at its peak, and how that was counted.

    A checkpoint holds the weights plus AdamW's two moments (3x the weights); while the
    newest is written the older ones still exist, so with ``save_total_limit`` N the peak is
    N + 1 checkpoints, plus the final model.
    """
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    strategy = getattr(args, "save_strategy", "epoch")
    strategy = getattr(strategy, "value", strategy)  # an enum once TrainingArguments parsed it
    if strategy == "no":
        return weights + (50 << 20), "the final model"
    limit = getattr(args, "save_total_limit", None)
    count = limit + 1 if limit and limit > 0 else 2  # unlimited: at least two (and it grows)
    size = weights if getattr(args, "save_only_model", False) else 3 * weights
    needed = count * size + weights + (50 << 20)
    return needed, f"{count} checkpoints of {size >> 20} MiB + the final model"


def check_free_space(output_dir: str, model, args=None) -> None:
    """Refuse to start a run whose checkpoints cannot fit on the output directory's disk."""
    needed, how = checkpoint_bytes(model, args)
    free = shutil.disk_usage(output_dir).free
    if free < needed:
        raise UserError(
            f"--output_dir {output_dir}: {free >> 20} MiB free, the run needs about {needed >> 20} MiB "
            f"({how}); free space, choose another --output_dir or lower --save_total_limit"
        )


def find_resume_checkpoint(args) -> str:
    """The newest complete checkpoint in ``args.output_dir`` (half-written ones are skipped)."""
    from .checkpoints import last_complete_checkpoint, remove_leftovers

    if args.should_save:
        for name in remove_leftovers(args.output_dir):
            logger.info("removed %s: a checkpoint whose save was interrupted", name)
    found = last_complete_checkpoint(args.output_dir)
    if found is None:
        raise UserError(
            f"--resume: no complete checkpoint-* folder in {args.output_dir} to resume from; "
            "drop --resume (and pass --overwrite_output_dir) to start again"
        )
    logger.info("resuming from %s", found)
    return str(found)

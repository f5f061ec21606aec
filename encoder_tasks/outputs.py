"""A run's output directory: never clobber an earlier run, fail early on a full or read-only
disk, and find the checkpoint a ``--resume`` continues from.

``--overwrite_output_dir`` starts a new run in an output directory that holds one: the earlier
run (checkpoints, ``log.jsonl``, ``eval/``, plots) moves, whole, to a folder beside it,
``<output_dir>.replaced-<YYYYmmdd-HHMMSS>``, and a log line says where. Nothing is deleted,
and nothing that reads the run directory (``--resume``, the plots, the checkpoint finder)
sees the earlier run again. With ``--resume`` as well, the run is continued and nothing moves.

Example:
    >>> import tempfile, pathlib
    >>> run = pathlib.Path(tempfile.mkdtemp()) / "run"
    >>> _ = run.mkdir(), (run / "log.jsonl").write_text("{}")
    >>> moved = move_aside(run)
    >>> moved.name.startswith("run.replaced-"), (moved / "log.jsonl").is_file(), run.exists()
    (True, True, False)
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from .errors import UserError

logger = logging.getLogger(__name__)

WRITE_PROBE = ".write-test-"
#: Between the output directory's name and the time an earlier run was moved aside.
REPLACED = ".replaced-"


def check_output_dir(args) -> None:
    """Refuse to clobber an earlier run; find an unwritable or full disk before training."""
    if not args.output_dir:
        raise UserError("--output_dir is required (where the model and metrics are written)")
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--output_dir {out}: exists and is a file, not a directory")
    # The process that writes the run checks it: the first of all (RANK), or with
    # --save_on_each_node the first of each machine (LOCAL_RANK), whose disk gets its own copy.
    writer = "LOCAL_RANK" if getattr(args, "save_on_each_node", False) else "RANK"
    if int(os.environ.get(writer, "0")) != 0:
        # Under several processes only the main one checks (and writes): another rank would
        # see the main one's write probe and mistake the folder for an earlier run.
        return
    # (The other processes write nothing there before training ends, so they need not wait
    # for an earlier run to be moved aside.)
    existing = _run_files(out)
    if existing and not (args.overwrite_output_dir or args.resume):
        shown = ", ".join(existing[:5]) + (", ..." if len(existing) > 5 else "")
        raise UserError(
            f"--output_dir {out} already holds a run ({shown}); choose another --output_dir, "
            "pass --resume to continue it, or --overwrite_output_dir to replace it"
        )
    if existing and args.overwrite_output_dir:
        if args.resume:
            logger.info("--resume continues the run in %s; --overwrite_output_dir moves nothing", out)
        else:
            moved = move_aside(out)
            logger.warning(
                "--overwrite_output_dir: moved the earlier run in %s to %s (nothing deleted; remove it "
                "when no longer needed)",
                out,
                moved,
            )
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=WRITE_PROBE):
            pass
    except OSError as exc:
        raise UserError(f"--output_dir {out}: cannot write there ({exc.strerror or exc})") from None


def _run_files(out: Path) -> list[str]:
    """The names in ``out`` (write probes aside): an earlier run when not empty."""
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir() if not p.name.startswith(WRITE_PROBE))


def move_aside(out: str | os.PathLike) -> Path:
    """Move the run in ``out`` to a new folder beside it, ``<name>.replaced-<time>``; return that folder.

    The folder moves in one rename; where it cannot (it is the working directory or holds it,
    a mount point, or a symbolic link, which must stay), its entries move one by one and
    ``out`` stays, empty.
    """
    out = Path(out)
    real = out.resolve()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = real.with_name(f"{real.name}{REPLACED}{stamp}")
    for n in range(2, 1000):
        if not target.exists():
            break
        target = real.with_name(f"{real.name}{REPLACED}{stamp}-{n}")
    cwd = Path.cwd().resolve()
    whole = not (out.is_symlink() or real == cwd or real in cwd.parents or os.path.ismount(real))
    try:
        if whole:
            os.rename(real, target)
        else:
            target.mkdir()
            for name in _run_files(real):
                os.rename(real / name, target / name)
    except OSError as exc:
        raise UserError(
            f"--overwrite_output_dir: cannot move the earlier run in {out} aside to {target} "
            f"({exc.strerror or exc}); move or delete it yourself, or choose another --output_dir"
        ) from None
    return target


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

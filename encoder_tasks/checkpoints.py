"""Checkpoints that survive a kill at any moment.

transformers' ``Trainer`` writes ``checkpoint-N`` in place: a kill mid-save leaves a
folder under the real name with some files missing or truncated, and ``--resume`` then
loads it. Here a checkpoint is written to ``tmp-checkpoint-N``, flushed to disk, and
renamed to ``checkpoint-N`` in one step (a rename within a directory is atomic on POSIX
file systems and on Windows), so ``checkpoint-N`` is always whole. Resuming picks the
newest *complete* checkpoint and skips anything else.

Example:
    >>> import tempfile, pathlib
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> staging = staging_path(run / "checkpoint-4")
    >>> staging.name
    'tmp-checkpoint-4'
    >>> _ = staging.mkdir(), (staging / "trainer_state.json").write_text('{"global_step": 4}')
    >>> publish(staging, run / "checkpoint-4")
    >>> last_complete_checkpoint(run).name
    'checkpoint-4'
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

logger = logging.getLogger(__name__)

#: transformers' checkpoint folder prefix (``checkpoint-<global step>``).
PREFIX = "checkpoint"
#: A checkpoint being written; never matched by ``checkpoint-*`` globs or resumed from.
STAGING_PREFIX = "tmp-"
#: A replaced checkpoint on its way out (only between two renames).
TRASH_PREFIX = "old-"
#: The stock Trainer writes this file last: its presence (parsable, with the right step)
#: marks a folder written to the end, also for folders written by plain transformers.
STATE_FILE = "trainer_state.json"

_CHECKPOINT = re.compile(rf"^{PREFIX}-(\d+)$")


def staging_path(final: str | os.PathLike) -> Path:
    """Where ``final`` (``.../checkpoint-N``) is written before it is renamed into place."""
    final = Path(final)
    return final.with_name(STAGING_PREFIX + final.name)


def _fsync(path: Path, directory: bool = False) -> None:
    # A kill (even SIGKILL) loses nothing the kernel has; fsync guards against power loss,
    # so that after the rename the data is on disk, not just the name.
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # e.g. directories cannot be opened on Windows
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def publish(staging: str | os.PathLike, final: str | os.PathLike) -> None:
    """Flush ``staging`` to disk and rename it to ``final`` (replacing an older ``final``)."""
    staging, final = Path(staging), Path(final)
    for root, _dirs, files in os.walk(staging):
        for name in files:
            _fsync(Path(root) / name)
        _fsync(Path(root), directory=True)
    if final.exists():
        # Same step saved again (a resume from an earlier checkpoint, or an overwritten run):
        # the old folder leaves by rename first, so a kill in between loses only it.
        trash = final.with_name(TRASH_PREFIX + final.name)
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(final, trash)
        os.replace(staging, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(staging, final)
    _fsync(final.parent, directory=True)


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The step number of a ``checkpoint-N`` folder name, else None."""
    match = _CHECKPOINT.match(Path(path).name)
    return int(match.group(1)) if match else None


def incomplete_reason(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be resumed from, or None when it is a complete checkpoint."""
    path = Path(path)
    state_file = path / STATE_FILE
    if not state_file.is_file():
        return f"no {STATE_FILE} (the save did not finish)"
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{STATE_FILE} is damaged ({exc})"
    step = checkpoint_step(path)
    if not isinstance(state, dict) or (step is not None and state.get("global_step") != step):
        return f"{STATE_FILE} does not describe step {step}"
    return None


def last_complete_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The newest complete ``checkpoint-N`` in ``output_dir``; incomplete ones are skipped with a warning."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    candidates = sorted(
        (p for p in output_dir.iterdir() if p.is_dir() and checkpoint_step(p) is not None),
        key=checkpoint_step,
        reverse=True,
    )
    for candidate in candidates:
        reason = incomplete_reason(candidate)
        if reason is None:
            return candidate
        logger.info("skipping incomplete checkpoint %s: %s", candidate, reason)
    return None


def remove_leftovers(output_dir: str | os.PathLike) -> list[str]:
    """Delete staging and replaced folders a killed save left behind; return their names."""
    output_dir = Path(output_dir)
    removed = []
    if not output_dir.is_dir():
        return removed
    for path in output_dir.iterdir():
        name = path.name
        for prefix in (STAGING_PREFIX, TRASH_PREFIX):
            if name.startswith(prefix) and checkpoint_step(name[len(prefix) :]) is not None:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(name)
    return sorted(removed)

"""Exports appear whole or not at all.

An export is written to a temporary folder inside the destination, ``DEST/.export-tmp-XXXX``,
checked there, and only then moved into ``DEST`` (renames within one file system). A failed
check or an error removes the temporary folder: the destination never holds a ``model.onnx``
or weights that did not pass, nor half of a layout. The model file moves after the files that
describe it, and ``export_info.json`` last, so a kill during the moves leaves no export that
looks complete. With ``--overwrite`` an earlier export in ``DEST`` is replaced file by file,
and only once the new one has passed its check.

Example:
    >>> import tempfile, pathlib
    >>> dest = pathlib.Path(tempfile.mkdtemp()) / "exported"
    >>> with staged(dest) as staging:
    ...     _ = (staging / "model.onnx").write_bytes(b"graph")
    ...     (dest / "model.onnx").exists()  # not before the block ends
    False
    >>> sorted(p.name for p in dest.iterdir())
    ['model.onnx']
    >>> try:
    ...     with staged(dest / "failed") as staging:
    ...         _ = (staging / "model.onnx").write_bytes(b"graph")
    ...         raise ValueError("parity check failed")
    ... except ValueError:
    ...     pass
    >>> (dest / "failed").exists()
    False
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: The temporary folder's name starts with this; such folders are never part of an export.
PREFIX = ".export-tmp-"
#: Moved last, in this order: the model once what describes it is in place, the record last.
LAST = ("model.onnx", "model.safetensors", "export_info.json")


def leftovers(dest: str | os.PathLike) -> list[Path]:
    """Temporary folders an interrupted export left in ``dest``."""
    dest = Path(dest)
    return sorted(p for p in dest.iterdir() if p.name.startswith(PREFIX)) if dest.is_dir() else []


@contextlib.contextmanager
def staged(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder inside ``dest``; move its files into ``dest`` if the block succeeds.

    On an error the temporary folder is removed, and ``dest`` too if this call created it and
    it is still empty; the error is raised again.
    """
    dest = Path(dest)
    created = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=PREFIX, dir=dest))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                dest.rmdir()  # only when empty
        raise
    entries = sorted(staging.iterdir(), key=lambda p: (LAST.index(p.name) if p.name in LAST else -1, p.name))
    for entry in entries:
        _move(entry, dest / entry.name)
    staging.rmdir()


def _move(source: Path, target: Path) -> None:
    # A folder over an existing one (``--overwrite`` of an earlier export) merges into it.
    if source.is_dir() and target.is_dir() and not target.is_symlink():
        for child in sorted(source.iterdir()):
            _move(child, target / child.name)
        source.rmdir()
    else:
        os.replace(source, target)

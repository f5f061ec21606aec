"""Every JSON and JSON-lines file the toolkit writes goes through here: atomically, and never
over an existing file unless the user said so."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import UserError


def check_new_file(path: str | os.PathLike, overwrite: bool = False, flag: str = "--output_file") -> Path:
    """Refuse to replace an existing file unless ``overwrite``; returns the path.

    Example:
        >>> import tempfile
        >>> existing = tempfile.NamedTemporaryFile(suffix=".jsonl").name
        >>> _ = open(existing, "w").close()
        >>> check_new_file(existing)
        Traceback (most recent call last):
        ...
        encoder_tasks.errors.UserError: --output_file ... already exists; choose another or pass --overwrite_output
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise UserError(f"{flag} {path} already exists; choose another or pass --overwrite_output")
    return path


def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write JSON atomically (temporary name, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> int:
    """Write JSON lines atomically (temporary name, then rename); returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    count = 0
    with tmp.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    os.replace(tmp, path)
    return count


def unique_path(path: Path) -> Path:
    """``path`` if free, else ``name-2.json``, ``name-3.json``...: results are never overwritten."""
    if not path.exists():
        return path
    for n in range(2, 10_000):
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise UserError(f"{path.parent}: too many result files")

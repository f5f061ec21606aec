"""The outputs of a Ray run, written by the driver as rows arrive (in input order), never held whole.

The files are those the local commands write (:func:`encoder_tasks.predict.write_predictions`,
``embedding encode``): JSON lines, or a float32 ``.npy`` matrix with its ``.ids.json``. Each is
written under a temporary name and renamed at the end, after checking again that no file
appeared at the output's path meanwhile; a failed run leaves nothing behind.

Example:
    >>> import tempfile, pathlib, numpy as np
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "v.npy"
    >>> with VectorFiles(out, "runs/emb") as files:
    ...     files.add(["a", "b"], np.eye(2, 3, dtype=np.float32), normalized=True)
    ...     files.add(["c"], np.ones((1, 3), dtype=np.float32), normalized=True)
    >>> np.load(out).tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    >>> import json; json.loads(ids_path(out).read_text())["ids"]
    ['a', 'b', 'c']
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..data.writers import check_new_file

#: ``embedding encode`` names the id file of ``vectors.npy`` ``vectors.ids.json`` (flag as it says it).
ID_FILE_FLAG = "--output_file's id file"
#: Bytes kept for the ``.npy`` header: written first with a guess, rewritten with the row count.
_NPY_HEADER_BYTES = 128


def ids_path(output_file: str | os.PathLike) -> Path:
    """Where the ids of ``vectors.npy`` go: ``vectors.ids.json`` (as ``embedding encode`` writes them)."""
    path = Path(output_file)
    return path.with_name(path.stem + ".ids.json")


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


def write_lines(path: str | os.PathLike, lines: Iterable[str], overwrite: bool = False) -> int:
    """Write JSON lines (already encoded) to ``path`` as they come; returns the count."""
    path = check_new_file(path, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, count = _temporary(path), 0
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            for line in lines:
                handle.write(line + "\n")
                count += 1
        check_new_file(path, overwrite)  # again: a file may have appeared while the model ran
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return count


def _npy_header(rows: int, dim: int) -> bytes:
    """A version-1.0 ``.npy`` header for a C-order float32 ``[rows, dim]`` matrix, padded to a fixed size."""
    text = repr({"descr": "<f4", "fortran_order": False, "shape": (rows, dim)})
    text = text.ljust(_NPY_HEADER_BYTES - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


class VectorFiles:
    """``vectors.npy`` (float32, one row per text) and ``vectors.ids.json``, appended batch by batch."""

    def __init__(self, output_file: str | os.PathLike, model: str, overwrite: bool = False):
        self.paths = (Path(output_file), ids_path(output_file))
        self.model, self.overwrite = str(model), overwrite
        self.rows, self.dim = 0, None
        self._vectors = self._ids = None
        check_new_file(self.paths[0], overwrite)
        check_new_file(self.paths[1], overwrite, flag=ID_FILE_FLAG)

    def __enter__(self) -> VectorFiles:
        return self

    def add(self, ids: list[str], vectors: np.ndarray, normalized: bool) -> None:
        if self._vectors is None:  # the first batch says the width and whether vectors are normalised
            self.paths[0].parent.mkdir(parents=True, exist_ok=True)
            self.dim = vectors.shape[1]
            self._vectors = _temporary(self.paths[0]).open("wb")
            self._vectors.write(_npy_header(0, self.dim))
            self._ids = _temporary(self.paths[1]).open("w", encoding="utf-8")
            head = {"model": self.model, "normalized": bool(normalized)}
            self._ids.write(json.dumps(head, indent=2, ensure_ascii=False)[:-2] + ',\n  "ids": [')
        self._vectors.write(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
        for identifier in ids:
            separator = ",\n    " if self.rows else "\n    "
            self._ids.write(separator + json.dumps(identifier, ensure_ascii=False))
            self.rows += 1

    def __exit__(self, kind, error, trace) -> None:
        temporaries = [_temporary(p) for p in self.paths]
        try:
            if self._vectors is not None:
                self._vectors.seek(0)
                self._vectors.write(_npy_header(self.rows, self.dim))
                self._vectors.close()
                self._ids.write("\n  ]\n}\n" if self.rows else "]\n}\n")
                self._ids.close()
                if error is None:
                    check_new_file(self.paths[0], self.overwrite)  # again, as the local command does
                    check_new_file(self.paths[1], self.overwrite, flag=ID_FILE_FLAG)
                    for tmp, path in zip(temporaries, self.paths):
                        os.replace(tmp, path)
        finally:
            for tmp in temporaries:
                tmp.unlink(missing_ok=True)

"""Plain input files streamed by Ray Data, each row with the line ``predict`` names it by.

Ray's own CSV and JSON readers infer column types (a text column of numbers becomes numbers),
quote tab-separated text and number nothing, so the rows of ``predict``'s plain formats are read
here, in Ray's read tasks, the way :mod:`encoder_tasks.data.readers` reads them: CSV/TSV with a
header row (tab-separated text unquoted), JSON lines, or one text per non-blank line; the same
line numbers, the same errors. A file is read line by line, never whole: a read task holds one
block of rows at a time.

:func:`plan_inputs` says which files ``--input_file`` names (a file, a folder, a glob) and how
each streams (:meth:`encoder_tasks.task.Task.input_format`). Each row of the dataset is ``{"file", "line", "index", "row"}``: the file as the user named it,
the line (1-based), the row's place among the file's rows (0-based) and the row itself as JSON
(a table row ``{column: text}``, a JSON-lines object, or ``{"text": line}``), so records of any
shape pass through Arrow untouched.

Example:
    >>> rows = list(table_rows(iter(["text,label\\n", "good,pos\\n", "\\n", "bad,neg\\n"]), "d.csv"))
    >>> [(line, index, row) for line, index, row in rows]
    [(2, 0, {'text': 'good', 'label': 'pos'}), (4, 1, {'text': 'bad', 'label': 'neg'})]
"""

from __future__ import annotations

import glob
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..data.readers import jsonl_rows, plain_lines, table_rows, text_lines
from ..errors import UserError

#: Rows per block a read task hands on (small blocks keep the driver's memory flat too).
BLOCK_ROWS = 1024


def check_encoding(encoding: str) -> None:
    """Refuse encodings that cannot be cut at ``\\n`` bytes (UTF-16/32): lines are decoded one by one."""
    try:
        sample = "ab\n".encode(encoding)
    except LookupError:
        raise UserError(f"--encoding {encoding!r}: unknown text encoding") from None
    if not sample.endswith(b"ab\n"):
        raise UserError(
            f"--encoding {encoding}: --engine ray reads files line by line, in encodings where a line ends "
            "at a newline byte (utf-8, latin-1, cp1252...); re-save the file as UTF-8"
        )


def read_rows(stream, shown: str, fmt: str, delimiter="auto", column_names=None, encoding="utf-8"):
    """The rows of one file in format ``fmt`` (``table``, ``jsonl`` or ``lines``)."""
    lines = text_lines(stream, shown, encoding)
    if fmt == "table":
        return table_rows((text for _, text in lines), shown, delimiter, column_names)
    return {"jsonl": jsonl_rows, "lines": plain_lines}[fmt](lines, shown)


def plain_files_datasource(
    files: dict[str, tuple[str, str]], delimiter, column_names, encoding, block_rows: int = BLOCK_ROWS
):
    """A Ray datasource over ``files`` (``{absolute path: (path as named, format)}``), in order,
    in blocks of ``block_rows`` rows (a block goes to one replica call: no bigger than a call)."""
    import pyarrow as pa
    from ray.data.datasource import FileBasedDatasource

    class PlainFiles(FileBasedDatasource):
        def _read_stream(self, f, path: str):
            shown, fmt = files.get(path) or files[os.path.abspath(path)]
            rows = read_rows(f, shown, fmt, delimiter, column_names, encoding)
            while True:
                block = list(itertools.islice(rows, block_rows))
                if not block:
                    return
                yield pa.table(
                    {
                        "file": [shown] * len(block),
                        "line": pa.array([line for line, _, _ in block], pa.int64()),
                        "index": pa.array([index for _, index, _ in block], pa.int64()),
                        "row": [json.dumps(row, ensure_ascii=False) for _, _, row in block],
                    }
                )

    return PlainFiles(list(files))


@dataclass
class Inputs:
    """The input files: ``(absolute path, path as named, format)`` each, or none when the task's
    own reader reads ``--input_file`` whole; ``several``: a folder or a glob (records name their file)."""

    files: list[tuple[str, str, str]]
    several: bool = False


def plan_inputs(task, args) -> Inputs:
    """Which files ``--input_file`` names (a file, a folder of files, a glob) and how each streams."""
    named, path = args.input_file, Path(args.input_file)
    if any(c in named for c in "*?[") and not path.exists():
        files = sorted(f for f in glob.glob(named, recursive=True) if Path(f).is_file())
        if not files:
            raise UserError(f"--input_file {named}: no file matches")
    elif path.is_dir():
        files = sorted(str(p) for p in path.iterdir() if p.is_file() and not p.name.startswith((".", "_")))
        if not files:
            raise UserError(f"--input_file {named}: the folder holds no files")
    elif path.is_file():
        files = [named]
    else:
        raise UserError(f"{named}: no such file")
    formats = [task.input_format(f, args) for f in files]
    if all(fmt is None for fmt in formats) and (path.is_dir() or len(files) == 1):
        return Inputs([])  # a saved dataset, a SQuAD folder, CoNLL...: the task reads it whole
    if None in formats:
        odd = files[formats.index(None)]
        raise UserError(
            f"{odd}: {task.name} reads this format whole, one file at a time; --engine ray streams a folder or "
            "glob of .jsonl/.csv/.tsv files (move this one out, or give it as --input_file alone)"
        )
    check_encoding(args.encoding)
    output = Path(args.output_file).resolve()
    if any(Path(f).resolve() == output for f in files):
        raise UserError("--output_file must differ from every input file (input files are never modified)")
    several = len(files) > 1 or path.is_dir() or not path.exists()
    return Inputs([(os.path.abspath(f), f, fmt) for f, fmt in zip(files, formats)], several)

"""An input file read a chunk of rows at a time, for ``predict``: memory flat in the file's size.

:func:`read_chunks` yields the rows of one file as :class:`~encoder_tasks.data.Split` chunks of
at most :func:`chunk_rows` rows, in file order. JSON lines and CSV/TSV tables are read line by
line (:func:`~encoder_tasks.data.readers.text_lines`), never whole: a chunk is parsed, predicted
and written before the next is read. Formats that cannot be cut into rows before being parsed
whole (a JSON array, SQuAD JSON, a ``save_to_disk`` folder, a task's own format read by its
``reader``) are read whole, then handed on in chunks all the same (the prediction, the larger part
of the memory, still goes chunk by chunk).

The rows, line numbers and errors are those of the whole-file readers
(:func:`~encoder_tasks.data.read_file`): a column whose rows hold different kinds of value is
refused naming both lines even when they fall in different chunks, and every chunk holds every
column seen so far (a row missing a field is an empty value on its own line, not a missing
column). A chunk's ``first_index`` is the place of its first row in the file, so rows without a
line (a JSON array) are still named by their row number.

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "in.jsonl"
    >>> _ = p.write_text("".join(f'{{"text": "row {i}"}}\\n' for i in range(5)))
    >>> [(c.first_index, list(c.dataset["_line"])) for c in read_chunks(p, rows=2)]
    [(0, [1, 2]), (2, [3, 4]), (4, [5])]
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from ..errors import UserError
from .loading import Split
from .readers import (
    JSONL_SUFFIXES,
    LINE_COLUMN,
    TABLE_SUFFIXES,
    _kind,
    jsonl_rows,
    newline_is_a_byte,
    read_file,
    rows_to_dataset,
    table_rows,
    text_lines,
)

#: Rows read, predicted and written at a time by default (``$ENCODER_TASKS_CHUNK_ROWS`` sets
#: another): large enough that length-sorted batches of the usual sizes waste little on padding,
#: small enough that a chunk's tokens, features and records are a few tens of megabytes.
CHUNK_ROWS = 4096

#: The suffixes streamed line by line: JSON lines and delimited tables.
STREAMED_SUFFIXES = frozenset(JSONL_SUFFIXES | TABLE_SUFFIXES | {""})


def chunk_rows() -> int:
    """Rows per chunk: ``$ENCODER_TASKS_CHUNK_ROWS``, else :data:`CHUNK_ROWS`.

    Example:
        >>> chunk_rows() > 0
        True
    """
    given = os.environ.get("ENCODER_TASKS_CHUNK_ROWS")
    if not given:
        return CHUNK_ROWS
    try:
        rows = int(given)
    except ValueError:
        rows = 0
    if rows < 1:
        raise UserError(f"$ENCODER_TASKS_CHUNK_ROWS must be a whole number of at least 1, found {given!r}")
    return rows


def read_chunks(
    path: str | os.PathLike,
    delimiter: str = "auto",
    column_names: list[str] | None = None,
    encoding: str = "utf-8",
    reader: Callable | None = None,
    streamed: Collection[str] = STREAMED_SUFFIXES,
    rows: int | None = None,
    source: str | None = None,
) -> Iterator[Split]:
    """The rows of ``path`` in chunks of ``rows`` (default :func:`chunk_rows`), each a ``Split``
    named ``predict`` whose ``source`` is ``source`` (default: ``path`` as given).

    A file whose suffix is in ``streamed`` (JSON lines, CSV/TSV) is read line by line, as the
    chunks are taken (a named pipe too: its rows are predicted as they arrive); any other input is
    read whole by ``reader`` (default :func:`~encoder_tasks.data.read_file`; a task's
    own format reader) and handed on in chunks.
    """
    rows = rows or chunk_rows()
    shown = str(path) if source is None else source
    path = Path(path)
    suffix = path.suffix.lower()
    readable = path.exists() and not path.is_dir()  # a file, or a pipe (/dev/stdin, a FIFO)
    if readable and suffix in streamed and newline_is_a_byte(encoding):
        fmt = "jsonl" if suffix in JSONL_SUFFIXES else "table"
        yield from _streamed_chunks(path, shown, fmt, delimiter, column_names, encoding, rows)
        return
    dataset = (reader or read_file)(path, delimiter, column_names, encoding)
    for start in range(0, len(dataset), rows):
        end = min(start + rows, len(dataset))
        part = dataset if (start, end) == (0, len(dataset)) else dataset.select(range(start, end))
        yield Split("predict", shown, part, first_index=start)


def _streamed_chunks(path: Path, shown: str, fmt: str, delimiter, column_names, encoding, rows: int):
    with open(path, "rb") as handle:
        lines = text_lines(handle, str(path), encoding)
        if fmt == "table":
            parsed = table_rows((text for _, text in lines), str(path), delimiter, column_names)
        else:
            parsed = jsonl_rows(lines, str(path))
        kinds = _ColumnKinds(str(path))
        columns: dict[str, None] = {}  # every column seen so far, in order of appearance
        while True:
            block = list(itertools.islice(parsed, rows))
            if not block:
                return
            records = [{**row, LINE_COLUMN: line} for line, _, row in block]
            kinds.check(records)
            columns.update(dict.fromkeys(key for record in records for key in record))
            records[0] = {key: records[0].get(key) for key in columns}  # every column, in order
            yield Split("predict", shown, rows_to_dataset(records, str(path)), first_index=block[0][1])


class _ColumnKinds:
    """The kind of value each column first held, and where: a later row of another kind is refused
    with the whole-file reader's message (:func:`~encoder_tasks.data.readers.rows_to_dataset`),
    whichever chunk it falls in."""

    def __init__(self, source: str):
        self.source = source
        self.first_seen: dict[str, tuple[str, int | None]] = {}

    def check(self, records: list[dict]) -> None:
        for record in records:
            for key, value in record.items():
                if key == LINE_COLUMN or value is None:
                    continue
                kind = _kind(value)
                seen = self.first_seen.get(key)
                if seen is None:
                    self.first_seen[key] = (kind, record[LINE_COLUMN])
                elif seen[0] != kind and {seen[0], kind} != {"a number", "a boolean"}:
                    raise UserError(
                        f"{self.source}: column {key!r} holds {seen[0]} at line {seen[1]} but {kind} at line "
                        f"{record[LINE_COLUMN]}; every row must hold the same kind of value in a column"
                    )

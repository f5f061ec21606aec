"""CoNLL-style column files: one token per line, columns split by tabs or spaces, a blank
line between sentences, ``-DOCSTART-`` lines between documents.

Read as published (CoNLL-2003, WNUT-17, WikiANN, the Chinese BMES corpora): a line with a
tab is split on tabs (tokens may then hold spaces), any other line on runs of whitespace.
Lines holding only whitespace end a sentence. Each sentence becomes one row whose columns
are lists, one entry per token, plus ``_line``: the line its first token is on (token
``i`` is on line ``_line + i``).

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "train.conll"
    >>> _ = p.write_text("-DOCSTART- O\\n\\nJohn B-PER\\nlives O\\n\\nParis B-LOC\\n")
    >>> ds = read_conll(p)
    >>> list(ds["tokens"]), list(ds["tags"]), list(ds["_line"])
    ([['John', 'lives'], ['Paris']], [['B-PER', 'O'], ['B-LOC']], [3, 6])
"""

from __future__ import annotations

import os
from pathlib import Path

from ...data.readers import LINE_COLUMN, read_text, rows_to_dataset
from ...errors import UserError

DOCSTART = "-DOCSTART-"


def _split_line(line: str, delimiter: str) -> list[str]:
    if delimiter == "auto":
        return line.split("\t") if "\t" in line else line.split()
    if delimiter in ("tab", "\\t", "\t"):
        return line.split("\t")
    if delimiter in ("space", " ", "whitespace"):
        return line.split()
    return line.split(delimiter)


def default_column_names(n_columns: int) -> list[str]:
    """``tokens`` first, ``tags`` last, ``column_2``... in between (CoNLL-2003's 4 columns
    become ``tokens, column_2, column_3, tags``)."""
    if n_columns == 1:
        return ["tokens"]
    return ["tokens", *[f"column_{i}" for i in range(2, n_columns)], "tags"]


def read_conll(
    path: str | os.PathLike,
    delimiter: str = "auto",
    column_names: list[str] | None = None,
    encoding: str = "utf-8",
):
    """Read a CoNLL column file into a ``datasets.Dataset`` of sentences.

    ``column_names`` names the columns (extra columns in the file are ignored); by default
    the first is ``tokens`` and the last ``tags``. Every token line must have the same
    number of columns as the first one (or at least as many as are named).
    """
    path = Path(path)
    text = read_text(path, encoding)
    rows = list(conll_sentences(enumerate(text.splitlines(), start=1), str(path), delimiter, column_names))
    return rows_to_dataset(rows, str(path))


def stream_conll(
    path: str | os.PathLike,
    delimiter: str = "auto",
    column_names: list[str] | None = None,
    encoding: str = "utf-8",
):
    """The sentences of :func:`read_conll`, one row dict at a time, the file read line by line
    (``predict``: memory flat in the file's size). Lines are numbered as :func:`read_conll` numbers
    them (``str.splitlines``: a form feed or U+2028 inside a ``\\n`` line also ends a line).

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "in.conll"
        >>> _ = p.write_text("John\\nlives\\n\\nParis\\n")
        >>> [(row["tokens"], row["_line"]) for row in stream_conll(p)]
        [(['John', 'lives'], 1), (['Paris'], 4)]
    """
    from ...data.readers import file_lines

    path = Path(path)

    def lines():
        number = 0
        for _, raw in file_lines(path, encoding):
            for line in raw.splitlines() or [""]:
                number += 1
                yield number, line

    yield from conll_sentences(lines(), str(path), delimiter, column_names)


def conll_sentences(lines, shown: str, delimiter: str = "auto", column_names: list[str] | None = None):
    """Sentence rows (``{column: [value per token]}`` plus ``_line``) of numbered CoNLL lines."""
    names = list(column_names) if column_names else None
    width: int | None = None
    current: list[list[str]] = []
    first_line = 0
    found = False

    def sentence():
        row = {name: [fields[i] for fields in current] for i, name in enumerate(names)}
        row[LINE_COLUMN] = first_line
        current.clear()
        return row

    for number, raw in lines:
        line = raw.rstrip("\r\n")
        if not line.strip():
            if current:
                found = True
                yield sentence()
            continue
        fields = _split_line(line, delimiter)
        if fields[0].strip() == DOCSTART:
            if current:
                found = True
                yield sentence()
            continue
        # Surrounding spaces are layout, not token text (tab-separated files keep inner spaces).
        fields = [f.strip() for f in fields]
        if width is None:
            width = len(fields)
            if names is None:
                names = default_column_names(width)
            elif len(names) > width:
                raise UserError(
                    f"{shown} line {number}: --column_names names {len(names)} columns ({', '.join(names)}) "
                    f"but the line has {width}"
                )
        expected = width if column_names is None else len(names)
        if len(fields) != width and (column_names is None or len(fields) < expected):
            raise UserError(
                f"{shown} line {number}: expected {width} columns like the first token line, found "
                f"{len(fields)} ({line!r}); columns are separated by tabs, or by spaces in a line without tabs"
            )
        if any(not f for f in fields[: len(names)]):
            raise UserError(f"{shown} line {number}: empty column in {line!r}")
        if not current:
            first_line = number
        current.append(fields)
    if current:
        found = True
        yield sentence()
    if not found:
        raise UserError(
            f"{shown}: no sentences (expected one token per line, a blank line between sentences)"
        )

"""Readers for local files: CSV/TSV tables, JSON, JSONL and ``save_to_disk`` folders.

Every reader returns a ``datasets.Dataset`` with one extra column, ``_line``: the line (or
record) the row came from, so later checks can name the exact place of a problem.
Problems in the file itself (bad bytes, bad JSON, ragged rows, empty files) raise
:class:`~encoder_tasks.errors.UserError` naming the file and line. Files are only read.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import UserError

#: Column holding each row's line number in its source file (1-based).
LINE_COLUMN = "_line"
#: Column of an input row (``predict --engine ray``) holding, as JSON text, fields written after
#: its prediction: what the input itself says (NER's gold tags), as ``predict`` writes them.
AFTER_COLUMN = "_after"

TABLE_SUFFIXES = {".csv", ".tsv", ".txt"}
JSON_SUFFIXES = {".json"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
#: Bytes read at a time by :func:`text_lines`.
_CHUNK_BYTES = 1 << 20


def row_location(source: str, line: int | None, index: int) -> str:
    """Human description of a row: ``train.csv line 12`` or ``train split row 12``."""
    if line is None:
        return f"{source} row {index + 1}"
    return f"{source} line {line}"


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """Read a whole text file, reporting undecodable bytes by line and column."""
    raw = path.read_bytes()
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise UserError(
            f"{path} line {line}, column {column}: byte 0x{raw[exc.start]:02x} is not valid {encoding}; "
            f"re-save the file as UTF-8 or pass --encoding (e.g. latin-1)"
        ) from None
    except LookupError:
        raise UserError(f"--encoding {encoding!r}: unknown text encoding") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise UserError(f"{path}: the file is empty")
    return text


def _detect_delimiter(path: Path, text: str, delimiter: str) -> str:
    if delimiter in ("tab", "\\t", "\t"):
        return "\t"
    if delimiter != "auto":
        if len(delimiter) != 1:
            raise UserError(f"--delimiter must be one character, 'tab' or 'auto', found {delimiter!r}")
        return delimiter
    if path.suffix.lower() == ".tsv":
        return "\t"
    first = text.split("\n", 1)[0]
    # Several published "CSV" files (STS-B) are tab-separated; trust what the file shows.
    return "\t" if "\t" in first else ","


def read_table(path: Path, delimiter: str = "auto", column_names: list[str] | None = None, encoding="utf-8"):
    """Read a delimited text table into a list of row dicts.

    With ``column_names`` the file has no header row and columns past the named ones are
    ignored; otherwise the first line is the header and every row must match its width.
    """
    text = read_text(path, encoding)
    lines = io.StringIO(text, newline="")
    return [
        {**row, LINE_COLUMN: line} for line, _, row in table_rows(lines, str(path), delimiter, column_names)
    ]


def table_rows(lines, shown: str, delimiter: str = "auto", column_names: list[str] | None = None):
    """``(line, index, {column: text})`` of a CSV/TSV table given as an iterable of lines (header
    row, or ``column_names``): what :func:`read_table` reads, streamed (``predict --engine ray``)."""
    lines = iter(lines)
    first = next(lines, "")
    sep = _detect_delimiter(Path(shown), first, delimiter)
    # Tab-separated NLP corpora (GLUE) contain bare quotes inside sentences; they are text.
    quoting = csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(itertools.chain([first], lines), delimiter=sep, quoting=quoting)
    header, index = column_names, 0
    try:
        for fields in reader:
            line = reader.line_num
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue
            if header is None:
                header = [name.strip() for name in fields]
                if len(set(header)) != len(header):
                    raise UserError(f"{shown} line {line}: the header repeats a column name: {header}")
                continue
            if len(fields) < len(header) or (column_names is None and len(fields) > len(header)):
                raise UserError(
                    f"{shown} line {line}: expected {len(header)} fields separated by {sep!r}, found {len(fields)}"
                )
            yield line, index, dict(zip(header, fields[: len(header)]))
            index += 1
    except csv.Error as exc:
        raise UserError(f"{shown} line {reader.line_num}: {exc}") from None
    if not index:
        raise UserError(f"{shown}: no data rows (only a header?)")


def jsonl_rows(lines, shown: str):
    """``(line, index, object)`` of JSON lines given as ``(line number, text)`` pairs, blank lines
    skipped but still counted: what :func:`read_jsonl` reads, streamed (``predict --engine ray``).

    Example:
        >>> list(jsonl_rows([(1, '{"a": 1}\\n'), (2, "\\n"), (3, '{"a": 2}')], "f.jsonl"))
        [(1, 0, {'a': 1}), (3, 1, {'a': 2})]
    """
    index = 0
    for number, text in lines:
        text = text.rstrip("\r\n")
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(
                f"{shown} line {number}: not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(record, dict):
            raise UserError(f"{shown} line {number}: expected a JSON object, found {type(record).__name__}")
        yield number, index, record
        index += 1
    if not index:
        raise UserError(f"{shown}: no records")


def text_lines(stream, shown: str, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """``(line number, text with its line ending)`` of a binary stream; undecodable bytes are
    reported by line and column, as :func:`encoder_tasks.data.readers.read_text` reports them.

    Example:
        >>> import io
        >>> list(text_lines(io.BytesIO(b"a\\n\\nb"), "f.txt"))
        [(1, 'a\\n'), (2, '\\n'), (3, 'b')]
    """
    number, pending, content = 0, b"", False
    # read1: what is there, up to the size (read would wait for all of it on a pipe: the lines
    # of a piped input are handed on as they arrive).
    read = getattr(stream, "read1", stream.read)
    while True:
        chunk = read(_CHUNK_BYTES)
        if chunk:  # complete lines keep their newline; the rest waits for the next chunk
            *complete, pending = (pending + chunk).split(b"\n")
            raws = [piece + b"\n" for piece in complete]
        else:  # the end of the file: a last line without a newline
            raws, pending = ([pending] if pending else []), b""
        for raw in raws:
            number += 1
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as exc:
                raise UserError(
                    f"{shown} line {number}, column {exc.start + 1}: byte 0x{raw[exc.start]:02x} is not valid "
                    f"{encoding}; re-save the file as UTF-8 or pass --encoding (e.g. latin-1)"
                ) from None
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            content = content or bool(text.strip())
            yield number, text
        if not chunk:
            break
    if not content:
        raise UserError(f"{shown}: the file is empty")


def file_lines(path: str | os.PathLike, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """:func:`text_lines` of a file, read as they are taken; in an encoding whose newline is not
    the byte ``\\n`` (UTF-16/32) or an unknown one, the file is read whole by :func:`read_text`
    (its messages) and cut at ``\\n``.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "f.txt"
        >>> _ = p.write_bytes(b"a\\nb")
        >>> list(file_lines(p))
        [(1, 'a\\n'), (2, 'b')]
    """
    if newline_is_a_byte(encoding):
        with open(path, "rb") as handle:
            yield from text_lines(handle, str(path), encoding)
        return
    pieces = read_text(Path(path), encoding).split("\n")
    for number, piece in enumerate(pieces, start=1):
        if number < len(pieces):
            yield number, piece + "\n"
        elif piece:
            yield number, piece


def newline_is_a_byte(encoding: str) -> bool:
    """Lines can be cut at ``\\n`` bytes before decoding (utf-8, latin-1...; not UTF-16/32, nor an
    unknown encoding, which the whole-file reader names).

    Example:
        >>> newline_is_a_byte("utf-8"), newline_is_a_byte("utf-16")
        (True, False)
    """
    try:
        return "ab\n".encode(encoding).endswith(b"ab\n")
    except LookupError:
        return False


def plain_lines(lines, shown: str, **_):
    """``(line, index, {"text": line})`` of every non-blank line (NER's ``.txt`` input)."""
    index = 0
    for number, text in lines:
        text = text.rstrip("\r\n")
        if text.strip():
            yield number, index, {"text": text}
            index += 1


def read_jsonl(path: Path, encoding="utf-8"):
    """A JSON-lines file: one object per non-blank line, each with its line number."""
    # Lines end at "\n" only (JSON Lines; CRLF's "\r" is stripped): str.splitlines would also cut
    # at U+2028 and other separators that json.dumps(ensure_ascii=False) leaves inside strings.
    lines = enumerate(read_text(path, encoding).split("\n"), start=1)
    return [{**record, LINE_COLUMN: line} for line, _, record in jsonl_rows(lines, str(path))]


def read_json(path: Path, encoding="utf-8", records_key: str = "data"):
    """A JSON array of objects, or an object holding that array under ``records_key``."""
    text = read_text(path, encoding)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        # A .json file that is really JSON Lines is common; read it as such.
        if exc.msg == "Extra data":
            return read_jsonl(path, encoding)
        raise UserError(
            f"{path} line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
        ) from None
    if isinstance(data, dict) and isinstance(data.get(records_key), list):
        data = data[records_key]
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a JSON array of records (or {{'{records_key}': [...]}})")
    rows = []
    for index, record in enumerate(data):
        if not isinstance(record, dict):
            raise UserError(
                f"{path} record {index + 1}: expected a JSON object, found {type(record).__name__}"
            )
        rows.append({**record, LINE_COLUMN: None})
    if not rows:
        raise UserError(f"{path}: no records")
    return rows


def _kind(value) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _first_mixed_column(rows: list[dict]) -> str | None:
    """Name the first column whose rows hold different kinds of value, and two such rows."""
    first_seen: dict[str, tuple[str, int]] = {}
    for index, row in enumerate(rows):
        for key, value in row.items():
            if key == LINE_COLUMN or value is None:
                continue
            kind = _kind(value)
            if key not in first_seen:
                first_seen[key] = (kind, index)
            elif first_seen[key][0] != kind and {first_seen[key][0], kind} != {"a number", "a boolean"}:
                seen_kind, seen_index = first_seen[key]

                def where(i):
                    line = rows[i].get(LINE_COLUMN)
                    return f"line {line}" if line is not None else f"record {i + 1}"

                return f"column {key!r} holds {seen_kind} at {where(seen_index)} but {kind} at {where(index)}"
    return None


def rows_to_dataset(rows: list[dict], source: str):
    import datasets

    # Dataset.from_list takes its columns from the first record only; a field that first
    # appears later would be dropped silently. Collect every field, in order of appearance.
    columns = list(dict.fromkeys(key for row in rows for key in row))
    try:
        return datasets.Dataset.from_dict({key: [row.get(key) for row in rows] for key in columns})
    except Exception as exc:  # pyarrow type errors for columns of mixed types
        detail = _first_mixed_column(rows) or str(exc).splitlines()[0]
        raise UserError(
            f"{source}: {detail}; every row must hold the same kind of value in a column"
        ) from None


def read_file(
    path: str | os.PathLike,
    delimiter: str = "auto",
    column_names: list[str] | None = None,
    encoding: str = "utf-8",
    split: str | None = None,
):
    """Read one local data file (or ``save_to_disk`` folder) into a ``datasets.Dataset``.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "train.csv"
        >>> _ = p.write_text("text,label\\ngood film,pos\\nbad film,neg\\n")
        >>> ds = read_file(p)
        >>> list(ds["text"]), list(ds["_line"])
        (['good film', 'bad film'], [2, 3])
    """
    path = Path(path)
    if path.is_dir():
        return _read_saved_dataset(path, split)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        rows = read_jsonl(path, encoding)
    elif suffix in JSON_SUFFIXES:
        rows = read_json(path, encoding)
    elif suffix in TABLE_SUFFIXES or suffix == "":
        rows = read_table(path, delimiter, column_names, encoding)
    else:
        raise UserError(f"{path}: unknown format {suffix!r}; expected .csv, .tsv, .json, .jsonl or a folder")
    return rows_to_dataset(rows, str(path))


def _read_saved_dataset(path: Path, split: str | None):
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as exc:
        raise UserError(f"{path}: not a folder written by datasets' save_to_disk ({exc})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split is None or split not in loaded:
            raise UserError(f"{path}: holds splits {list(loaded)}; no split {split!r}")
        loaded = loaded[split]
    if LINE_COLUMN not in loaded.column_names:
        loaded = loaded.add_column(LINE_COLUMN, [None] * len(loaded))
    return loaded

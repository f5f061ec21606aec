"""Inputs given from Python as JSON records: strings, records, ``datasets.Dataset``, DataFrames.

:func:`to_records` turns whatever a user holds into the JSON input records every task's
``parse_input`` checks (fixed field names: ``text``, ``text_pair``, ``tokens``, ``question``,
``context``). :func:`data_file` does the same for training and evaluation data: a path stays a
path; anything held in memory is written to a JSON-lines file in a folder the caller owns, which
the task's own reader then reads exactly as it reads a file given on the command line.

Example:
    >>> to_records("a fine film")
    ([{'text': 'a fine film'}], True)
    >>> to_records([("a", "b"), {"text": "c"}])
    ([{'text': 'a', 'text_pair': 'b'}, {'text': 'c'}], False)
    >>> to_records([{"sentence": "ok", "label": 1}], columns={"sentence": "text"})
    ([{'text': 'ok'}], False)
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..inputs import InputError, describe

#: The column the toolkit's readers add (the line of each row in its file): never an input field.
LINE_COLUMN = "_line"

#: What the input functions accept, in words (for error messages and docs).
ACCEPTED = "a string, a list of strings or records, a datasets.Dataset or a pandas DataFrame"


def _is_dataframe(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "pandas" and hasattr(value, "to_dict")


def _is_dataset(value: Any) -> bool:
    datasets = sys.modules.get("datasets")  # never imported just to check
    return datasets is not None and isinstance(value, datasets.Dataset)


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as Python values; a pandas missing value (NaN) as None."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return _plain(value.tolist())
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _record(item: Any) -> Any:
    """One item of a list as a record; anything else is left for the task's check to refuse."""
    if isinstance(item, str):
        return {"text": item}
    if isinstance(item, tuple) and len(item) == 2 and all(isinstance(t, str) for t in item):
        return {"text": item[0], "text_pair": item[1]}
    if isinstance(item, Mapping):
        return {k: _plain(v) for k, v in item.items() if k != LINE_COLUMN}
    return item


def _rename(records: list[Any], columns: Mapping[str, str], where: str) -> list[Any]:
    """Keep only the ``columns`` named, under their new names (``{"sentence": "text"}``)."""
    out = []
    for index, record in enumerate(records):
        if not isinstance(record, Mapping):
            out.append(record)  # refused by the task's check, with its position
            continue
        missing = [name for name in columns if name not in record]
        if missing:
            raise InputError(
                f"{where}[{index}]",
                f"no column {missing[0]!r} (columns maps {', '.join(map(repr, columns))}); "
                f"found {', '.join(map(repr, record)) or 'none'}",
            )
        out.append({new: record[old] for old, new in columns.items()})
    return out


def to_records(
    inputs: Any, columns: Mapping[str, str] | None = None, where: str = "inputs"
) -> tuple[list[Any], bool]:
    """``(records, single)``: the inputs as JSON records, and whether one input was given.

    A string is one ``{"text"}``; a ``(text, text_pair)`` tuple one pair; a dict one record;
    a list holds any of these; a ``datasets.Dataset`` or a pandas DataFrame gives one record
    per row, its columns as fields. ``columns`` keeps only the columns it names, renamed
    (``{"sentence": "text"}``). Fields are checked later, by the task.
    """
    single = isinstance(inputs, (str, Mapping)) or (
        isinstance(inputs, tuple) and len(inputs) == 2 and all(isinstance(t, str) for t in inputs)
    )
    if single:
        records = [_record(inputs)]
    elif _is_dataframe(inputs):
        records = [_record(row) for row in inputs.to_dict(orient="records")]
    elif _is_dataset(inputs):
        records = [_record(row) for row in inputs.to_list()]
    elif isinstance(inputs, (list, tuple)):
        records = [_record(item) for item in inputs]
    else:
        raise InputError(where, f"expected {ACCEPTED}, found {describe(inputs)}")
    if columns:
        records = _rename(records, columns, where)
    return records, single


def data_file(value: Any, folder: Path, name: str, where: str | None = None) -> str:
    """A path to data for a ``*_file`` setting: a path as given, else the records written to
    ``folder/<name>.jsonl`` (the task's reader reads it as it reads any JSON-lines file);
    ``where`` names the data in errors (the setting: ``train_file``).

    Example:
        >>> import tempfile
        >>> path = data_file([{"text": "ok", "label": "pos"}], Path(tempfile.mkdtemp()), "train")
        >>> Path(path).name, Path(path).read_text()
        ('train.jsonl', '{"text": "ok", "label": "pos"}\\n')
    """
    if isinstance(value, (str, os.PathLike)):
        return str(value)
    where = where or name
    records, _ = to_records(value, where=where)
    if not records:
        raise InputError(where, "no records: the data is empty")
    bad = next((i for i, r in enumerate(records) if not isinstance(r, Mapping)), None)
    if bad is not None:
        raise InputError(
            f"{where}[{bad}]", f"expected a record (a dict of columns), found {describe(records[bad])}"
        )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return str(path)

"""Unlabelled text in a task's training shape: helpers the task distillers share.

Example:
    >>> first_name("sentence1|text1")
    'sentence1'
"""

from __future__ import annotations

from ..data import Split, column_texts, resolve_column


def first_name(spec: str) -> str:
    """The first of a ``a|b|c`` column spec: the name a made-up table uses."""
    return spec.split("|")[0].strip()


def texts(split: Split, spec: str | None, what: str) -> list[str]:
    """The texts of ``split``'s column ``spec``, or of its ``text`` column (a ``.txt`` file)."""
    spec = f"{spec}|text" if spec else "text"
    return column_texts(split, resolve_column(split, spec, what, flag="--unlabelled_file"))


def as_split(split: Split, columns: dict[str, list]) -> Split:
    """A split with ``columns`` instead of ``split``'s, keeping its source (and line numbers)."""
    import datasets

    if "_line" in split.dataset.column_names:
        columns = {**columns, "_line": list(split.dataset["_line"])}
    return Split(split.name, split.source, datasets.Dataset.from_dict(columns))

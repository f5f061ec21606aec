"""Column resolution, once for every task: ``--text_column "sentence|text"`` picks the first
name present, and a missing column is one error naming the file and the columns found."""

from __future__ import annotations

from .readers import LINE_COLUMN


def name_list(spec: str | None) -> list[str]:
    """A comma-separated flag (``--column_names``, ``--negative_columns``...) as its names, blanks
    dropped; ``[]`` for none.

    Example:
        >>> name_list(" negative_1, negative_2,")
        ['negative_1', 'negative_2']
        >>> name_list(None)
        []
    """
    return [name.strip() for name in (spec or "").split(",") if name.strip()]


def resolve_column(split, spec: str | None, what: str, required: bool = True, flag: str | None = None):
    """The first of ``a|b|c`` present in ``split``; ``None`` for no spec (or an absent optional one).

    Example:
        >>> import datasets
        >>> from encoder_tasks.data import Split
        >>> split = Split("train", "train.csv", datasets.Dataset.from_dict({"sentence": ["hi"]}))
        >>> resolve_column(split, "text|sentence", "text")
        'sentence'
        >>> resolve_column(split, "label", "label")
        Traceback (most recent call last):
        ...
        encoder_tasks.errors.UserError: train.csv: no label column 'label'; found columns ['sentence']. Pass --label_column with one of them (or --column_names for a file without a header)
    """
    from ..errors import UserError

    if spec is None:
        return None
    names = split.dataset.column_names
    for name in spec.split("|"):
        if name in names:
            return name
    if not required:
        return None
    found = [c for c in names if c != LINE_COLUMN]
    flag = flag or f"--{what}_column"
    header_hint = (
        " (or --column_names for a file without a header)" if split.source.endswith((".csv", ".tsv")) else ""
    )
    raise UserError(
        f"{split.source}: no {what} column {spec!r}; found columns {found}. Pass {flag} with one of them"
        + header_hint
    )


def column_texts(split, column: str) -> list[str]:
    """The texts of ``column``, each required to be non-empty (the error names the line).

    Example:
        >>> import datasets
        >>> from encoder_tasks.data import Split
        >>> split = Split("train", "train.csv", datasets.Dataset.from_dict({"text": ["hi", " "]}))
        >>> column_texts(split, "text")
        Traceback (most recent call last):
        ...
        encoder_tasks.errors.UserError: train.csv row 2: column 'text' is empty; every row needs text
    """
    from ..errors import UserError

    texts = split.dataset[column]
    for index, text in enumerate(texts):
        if text is None or not str(text).strip():
            raise UserError(f"{split.location(index)}: column {column!r} is empty; every row needs text")
    return [str(t) for t in texts]

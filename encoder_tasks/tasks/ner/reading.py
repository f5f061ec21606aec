"""Sentences for tagging from any source: CoNLL columns, JSON/JSONL records, ``save_to_disk``
folders and Hub datasets (``ClassLabel`` tags), validated, with tags normalised to IOB2.

Every problem names its place: ``train.conll line 12`` for a CoNLL token (one token per
line), ``train.jsonl line 3, token 2`` for a record.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ...data.columns import resolve_column
from ...data.loading import Split
from ...data.readers import JSON_SUFFIXES, JSONL_SUFFIXES
from ...errors import UserError
from .schemes import InvalidTagSequence, to_iob2

logger = logging.getLogger(__name__)

#: Files read as records (a token list and a tag list per record); any other file is CoNLL.
RECORD_SUFFIXES = JSON_SUFFIXES | JSONL_SUFFIXES


def read_split(path, delimiter="auto", column_names=None, encoding="utf-8", split=None):
    """JSON/JSONL and ``save_to_disk`` folders as records, anything else as CoNLL columns."""
    from ...data import read_file
    from .conll import read_conll

    path = Path(path)
    if path.is_dir() or path.suffix.lower() in RECORD_SUFFIXES:
        return read_file(path, delimiter, column_names, encoding, split)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    return read_conll(path, delimiter, column_names, encoding)


def _word_location(split: Split, row: int, position: int) -> str:
    """``file line N`` of a token (CoNLL rows: one token per line), else the record and token."""
    line = split.dataset[row]["_line"] if "_line" in split.dataset.column_names else None
    conll = line is not None and Path(split.source).suffix.lower() not in RECORD_SUFFIXES
    if conll:
        return f"{split.source} line {line + position}"
    return f"{split.location(row)}, token {position + 1}"


def _tag_names(split: Split, column: str) -> list[str] | None:
    """Names of ``ClassLabel`` tags (Hub datasets store tag ids)."""
    import datasets

    feature = split.dataset.features.get(column)
    inner = getattr(feature, "feature", None)
    if isinstance(inner, datasets.ClassLabel):
        return list(inner.names)
    return None


def read_sentences(
    split: Split, tokens_column: str, tags_column: str | None = None, token_prefix: str | None = None
) -> tuple[list[list[str]], list[list[str]] | None]:
    """Tokens (``token_prefix`` stripped) and raw tags of every sentence, validated.

    ``tokens_column``/``tags_column`` are column specs (``"tokens|words"``); without a tags
    column (prediction input) the tags are ``None``.

    Example:
        >>> import datasets
        >>> ds = datasets.Dataset.from_dict({"words": [["en:Paris"]], "tags": [["B-LOC"]]})
        >>> read_sentences(Split("train", "d.jsonl", ds), "tokens|words", "tags", "en:")
        ([['Paris']], [['B-LOC']])
    """
    tok_col = resolve_column(split, tokens_column, "tokens")
    tag_col = resolve_column(split, tags_column, "tags") if tags_column else None
    names = _tag_names(split, tag_col) if tag_col else None
    all_tokens = split.dataset[tok_col]
    all_tags = split.dataset[tag_col] if tag_col else [None] * len(all_tokens)
    sentences, tag_lists = [], []
    for row, (tokens, tags) in enumerate(zip(all_tokens, all_tags)):
        if isinstance(tokens, str) or not isinstance(tokens, (list, tuple)):
            raise UserError(
                f"{split.location(row)}: column {tok_col!r} must hold a list of tokens, found {type(tokens).__name__}"
            )
        if not tokens:
            raise UserError(f"{split.location(row)}: column {tok_col!r} holds an empty sentence")
        words = []
        for position, token in enumerate(tokens):
            if not isinstance(token, str) or not token.strip():
                raise UserError(
                    f"{_word_location(split, row, position)}: token {token!r} is not a non-empty string"
                )
            if token_prefix and token.startswith(token_prefix) and len(token) > len(token_prefix):
                token = token[len(token_prefix) :]
            words.append(token)
        sentences.append(words)
        if tag_col is None:
            continue
        if not isinstance(tags, (list, tuple)):
            raise UserError(
                f"{split.location(row)}: column {tag_col!r} must hold a list of tags, found {tags!r}"
            )
        if len(tags) != len(tokens):
            raise UserError(
                f"{split.location(row)}: {len(tokens)} tokens but {len(tags)} tags; every token needs one tag"
            )
        if names is not None:
            tags = [names[t] for t in tags]
        for position, tag in enumerate(tags):
            if not isinstance(tag, str) or not tag.strip():
                raise UserError(
                    f"{_word_location(split, row, position)}: tag {tag!r} is not a tag name (strings, or "
                    "ids of a ClassLabel feature)"
                )
        tag_lists.append([t.strip() for t in tags])
    return sentences, tag_lists if tag_col else None


def warn_token_prefix(sentences: list[list[str]], source: str) -> None:
    """Every token starting with the same ``xx:`` looks like WikiANN's language prefix."""
    sample = [w for words in sentences[:200] for w in words]
    heads = {w.split(":", 1)[0] + ":" for w in sample if ":" in w[1:]}
    if sample and len(heads) == 1 and all(w.startswith(next(iter(heads))) for w in sample):
        logger.warning(
            "%s: every token starts with %r; pass --token_prefix %s to strip it", source, *heads, *heads
        )


def normalise_tags(
    split: Split, tag_lists: list[list[str]], scheme: str, invalid: str
) -> tuple[list[list[str]], int]:
    """All sentences' tags in IOB2; invalid sequences stop with the line, or are counted and repaired."""
    out, repairs = [], 0
    for row, tags in enumerate(tag_lists):
        try:
            iob2, fixed = to_iob2(tags, scheme, repair=invalid == "repair")
        except InvalidTagSequence as exc:
            raise UserError(
                f"{_word_location(split, row, exc.position)}: {exc}. Fix the data, check --tag_scheme "
                f"(read as {scheme}), or pass --invalid_tags repair"
            ) from None
        out.append(iob2)
        repairs += fixed
    if repairs:
        logger.warning(
            "%s: repaired %d invalid %s tag sequences (--invalid_tags repair)",
            split.source,
            repairs,
            scheme.upper(),
        )
    return out, repairs

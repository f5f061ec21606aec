"""Inputs held in memory, one JSON record each: what the server, Ray and the Python API predict on.

A file given to ``predict`` is read by the task's own reader (columns named by flags, CoNLL,
SQuAD JSON...); inputs that arrive as JSON (an HTTP request, a row of a Ray dataset) use fixed
field names instead: ``text``, ``text_pair``, ``tokens``, ``question``, ``context``. Each task
checks its records with :meth:`encoder_tasks.task.Task.parse_input`, built on the checks below, so
every bad record fails the same way: where it is, which field, what was expected, what was found.

Example:
    >>> require_text({"text": 3}, "text", "inputs[0]")
    Traceback (most recent call last):
    ...
    encoder_tasks.inputs.InputError: inputs[0].text: expected a string, found 3 (int)
    >>> require_text({"text": "  "}, "text", "inputs[0]")
    Traceback (most recent call last):
    ...
    encoder_tasks.inputs.InputError: inputs[0].text: expected a non-empty text, found '  '
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import UserError


class InputError(UserError):
    """A bad input record; ``field`` is its path (``inputs[2].text``), for a 4xx reply that names it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def describe(value: Any) -> str:
    """A short account of a value found where something else was expected.

    Example:
        >>> describe("x" * 100), describe([1, 2]), describe(None)
        ('a string of 100 characters', 'a list of 2 items', 'null')
    """
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a string of {len(value)} characters"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} items"
    if isinstance(value, Mapping):
        return f"an object with fields {sorted(value)}"
    return f"{value!r} ({type(value).__name__})"


def check_record(record: Any, where: str, allowed: Iterable[str]) -> Mapping[str, Any]:
    """Refuse anything but an object, and fields outside ``allowed`` (a typo must not be ignored).

    Example:
        >>> check_record({"txt": "a"}, "inputs[1]", ("text", "text_pair"))
        Traceback (most recent call last):
        ...
        encoder_tasks.inputs.InputError: inputs[1].txt: unknown field; expected text, text_pair
    """
    allowed = tuple(allowed)
    if not isinstance(record, Mapping):
        raise InputError(where, f"expected an object with {', '.join(allowed)}, found {describe(record)}")
    for name in record:
        if name not in allowed:
            raise InputError(f"{where}.{name}", f"unknown field; expected {', '.join(allowed)}")
    return record


def require_text(record: Mapping[str, Any], name: str, where: str, required: bool = True) -> str | None:
    """The string field ``name`` of ``record`` (``None`` when absent and not required)."""
    value = record.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        found = "nothing" if name not in record else describe(value)
        raise InputError(f"{where}.{name}", f"expected a string, found {found}")
    if not value.strip():  # as predict refuses an empty row: a model has nothing to read
        raise InputError(f"{where}.{name}", f"expected a non-empty text, found {describe(value)}")
    return value


def require_tokens(record: Mapping[str, Any], name: str, where: str) -> list[str]:
    """A non-empty list of non-blank token strings."""
    value = record.get(name)
    if not isinstance(value, list) or not value:
        raise InputError(
            f"{where}.{name}", f"expected a non-empty list of token strings, found {describe(value)}"
        )
    for i, token in enumerate(value):
        if not isinstance(token, str) or not token.strip():
            raise InputError(
                f"{where}.{name}[{i}]", f"expected a non-blank token string, found {describe(token)}"
            )
    return list(value)


def record_texts(record: Mapping[str, Any]) -> list[str]:
    """The texts of a checked record (token lists joined), to count its tokens for a batch budget.

    Example:
        >>> record_texts({"question": "who?", "context": "Ann.", "tokens": ["a", "b"]})
        ['who?', 'Ann.', 'a b']
    """
    texts = []
    for value in record.values():
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, list):
            texts.append(" ".join(value))
    return texts

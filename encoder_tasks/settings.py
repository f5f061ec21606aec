"""Settings resolved once: given on the command line > saved with the model > default.

Every action that works on a saved model (evaluate, predict, export, a task's own actions)
calls :func:`resolve` on its argument dataclasses before it uses them. A field the user gave
(a flag or a recipe key: ``parse_args`` records which in ``given_fields``) is kept; a field
the user left at its default takes the model's saved value when the model saved one; the
rest keep their defaults. So a model trained at ``max_length`` 128 evaluates and predicts at
128, with the columns, label names and window sizes it was trained with, unless a flag says
otherwise.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Flags:
    ...     max_length: int = 256
    ...     text_column: str = "text"
    >>> flags = Flags(text_column="sentence")   # built in Python: non-defaults count as given
    >>> resolve(flags, {"max_length": 128, "text_column": "review"})
    {'max_length': 128}
    >>> flags
    Flags(max_length=128, text_column='sentence')
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)


def given_fields(args) -> frozenset[str]:
    """The fields of ``args`` the user chose.

    ``parse_args`` records the flags and recipe keys it saw; for a dataclass built in Python,
    every field whose value differs from its default counts as chosen.
    """
    recorded = getattr(args, "given_fields", None)
    if recorded is not None:
        return frozenset(recorded)
    chosen = set()
    for f in dataclasses.fields(args):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            chosen.add(f.name)
            continue
        if getattr(args, f.name) != default:
            chosen.add(f.name)
    return frozenset(chosen)


def _saved_values(saved) -> Mapping[str, Any]:
    if saved is None:
        return {}
    if isinstance(saved, Mapping):
        return saved
    return saved.to_dict()


def resolve(args, saved, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Fill each field of ``args`` the user did not give from ``saved``; returns what changed.

    ``saved`` is a :class:`~encoder_tasks.task.TaskSettings` (or a dict of the same keys); a
    saved value of ``None`` means "not saved" and leaves the default. ``skip`` names fields a
    caller resolves in a way of its own.
    """
    values = _saved_values(saved)
    given = given_fields(args)
    changed = {}
    for f in dataclasses.fields(args):
        name = f.name
        if name in given or name in skip or name not in values or values[name] is None:
            continue
        if getattr(args, name) != values[name]:
            object.__setattr__(args, name, values[name])
            changed[name] = values[name]
    if changed:
        logger.debug("settings from the saved model: %s", changed)
    return changed


def resolve_all(arg_objects, saved, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """:func:`resolve` over several argument dataclasses (model, data, task, predict...)."""
    changed: dict[str, Any] = {}
    for args in arg_objects:
        if args is not None and dataclasses.is_dataclass(args):
            changed.update(resolve(args, saved, skip=skip))
    return changed

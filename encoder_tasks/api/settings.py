"""Keyword settings to the command line's flags, through the command line's own parser.

A Python call's settings are the CLI's flag names (recipe keys are the same names). They are
turned into the flags the CLI would receive and parsed by :func:`encoder_tasks.config.parse_args`,
so a setting given from Python is checked, converted and recorded as given (``given_fields``:
given > saved > default) exactly as the same flag on the command line.

Example:
    >>> from encoder_tasks.config import DataArguments, ModelArguments
    >>> to_argv([ModelArguments, DataArguments], {"max_length": 64, "train_file": "t.csv"}, "train")
    ['--max_length', '64', '--train_file', 't.csv']
    >>> to_argv([DataArguments], {"max_lenght": 64}, "train")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    encoder_tasks.errors.UserError: train: unknown setting 'max_lenght' (did you mean 'max_length'?); ...
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import UserError

#: Parser entries that are not settings: ``config`` is the recipe argument of every call.
NOT_SETTINGS = frozenset({"help", "config"})


def setting_names(dataclass_types: Sequence[type]) -> list[str]:
    """Every setting the dataclasses take (the CLI's flag names without ``--``)."""
    import dataclasses

    return [f.name for cls in dataclass_types for f in dataclasses.fields(cls) if f.init]


def check_names(names, known: Sequence[str], action: str, help_command: str) -> None:
    """Refuse unknown setting names, naming the closest known one."""
    for name in names:
        if name in known and name not in NOT_SETTINGS:
            continue
        close = difflib.get_close_matches(str(name), [k for k in known if k not in NOT_SETTINGS], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(
            f"{action}: unknown setting {name!r}{hint}; settings are the command line's flag names "
            f"(`{help_command} --help` lists them)"
        )


def to_argv(
    dataclass_types: Sequence[type],
    settings: Mapping[str, Any],
    action: str,
    help_command: str = "encoder-tasks <task> <action>",
) -> list[str]:
    """The flags that give ``settings``; ``None`` leaves a setting unset (its default, or the
    value saved with the model). Values are checked as recipe values are."""
    from ..parsing import _yaml_to_argv, build_parser

    check_names(settings, setting_names(dataclass_types), action, help_command)
    parser = build_parser(list(dataclass_types))
    # The recipe converter checks types and choices; its messages name the "file" it is given.
    return _yaml_to_argv(action, dict(settings), parser)  # type: ignore[arg-type]


def parse(
    dataclass_types: Sequence[type],
    settings: Mapping[str, Any],
    action: str,
    config: str | None = None,
    help_command: str = "encoder-tasks <task> <action>",
) -> tuple[list[str], tuple]:
    """``(argv, dataclasses)``: the settings parsed as the CLI parses its flags (plus a recipe)."""
    from ..config import parse_args

    argv = to_argv(dataclass_types, settings, action, help_command)
    if config is not None:
        argv = ["--config", str(config), *argv]
    return argv, parse_args(list(dataclass_types), argv, prog=action)

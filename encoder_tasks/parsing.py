"""Flags and flat YAML recipes into the dataclasses a command takes.

Every recipe key is a field name of one of the dataclasses; the recipe is read first, then
command-line flags override it. Errors (an unknown key or flag, a value of the wrong type)
are :class:`~encoder_tasks.errors.UserError` naming the recipe or the flag. The dataclasses
themselves are in :mod:`encoder_tasks.config`, which re-exports these names.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Steps:
    ...     max_steps: int = 1
    >>> parse_args([Steps], ["--max_steps", "3"])[0].max_steps
    3
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
from pathlib import Path

import yaml

from .errors import UserError


def _yaml_to_argv(recipe: Path, values: dict, parser: argparse.ArgumentParser) -> list[str]:
    """Turn recipe entries into flags, checking each key and value first."""
    actions = {a.dest: a for a in parser._actions}
    argv: list[str] = []
    for key, value in values.items():
        action = actions.get(key)
        if action is None or key in ("help", "config"):
            close = difflib.get_close_matches(str(key), list(actions), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UserError(f"{recipe}: unknown key {key!r}{hint}; `--help` lists the valid keys")
        if value is None:
            continue
        if isinstance(value, list) and action.nargs not in ("+", "*"):
            kind = getattr(action.type, "__name__", "one value")
            raise UserError(f"{recipe}: key {key!r} expects a single {kind}, found a list {value!r}")
        items = value if isinstance(value, list) else [value]
        strings = []
        for item in items:
            if isinstance(item, dict):
                text = json.dumps(item)
            elif isinstance(item, bool):
                text = "true" if item else "false"
            else:
                text = str(item)
            if action.type is not None and not isinstance(item, dict):
                try:
                    action.type(text)
                except (TypeError, ValueError, argparse.ArgumentTypeError):
                    kind = getattr(action.type, "__name__", str(action.type))
                    raise UserError(f"{recipe}: key {key!r} expects {kind}, found {item!r}") from None
            if action.choices and text not in [str(c) for c in action.choices]:
                raise UserError(
                    f"{recipe}: key {key!r} must be one of {', '.join(map(str, action.choices))}, found {item!r}"
                )
            strings.append(text)
        if isinstance(action, argparse._StoreTrueAction):
            if strings == ["true"]:
                argv.append(action.option_strings[0])
            continue
        argv.append(f"--{key}")
        argv.extend(strings)
    return argv


def load_recipe(path: str | os.PathLike) -> dict:
    """Read a flat YAML recipe into a dict, with clear errors for a wrong file."""
    recipe = Path(path)
    if not recipe.is_file():
        raise UserError(f"recipe {recipe}: no such file")
    try:
        values = yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"recipe {recipe}{where}: not valid YAML ({problem})") from None
    if not isinstance(values, dict):
        raise UserError(f"recipe {recipe}: expected a mapping of field: value, found {type(values).__name__}")
    return values


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises :class:`UserError` instead of exiting, so the CLI formats it
    (the parser of the commands that are not a task: export, plot, recipes)."""

    def error(self, message):
        raise UserError(f"{self.prog}: {message}")


def build_parser(dataclass_types, prog: str | None = None, description: str | None = None):
    from transformers import HfArgumentParser

    class Parser(HfArgumentParser):
        def error(self, message):
            raise UserError(f"{self.prog}: {message}")

    parser = Parser(dataclass_types, prog=prog, description=description)
    _accept_none(parser, dataclass_types)
    parser.add_argument("--config", default=None, help="YAML recipe; its keys are the flags below.")
    if "--debug" not in parser._option_string_actions:  # TrainingArguments has its own --debug
        parser.add_argument(
            "--debug", action="store_true", help="Show tracebacks instead of one-line errors."
        )
    return parser


def _accept_none(parser, dataclass_types) -> None:
    """Let ``none`` set an optional number flag to None (``--head_learning_rate none``), as
    its help says; argparse alone would read it as a bad number."""
    optional = {
        f.name
        for cls in dataclass_types
        for f in dataclasses.fields(cls)
        # HfArgumentParser has already replaced ``float | None`` by ``float`` in f.type
        if f.default is None or "None" in str(f.type) or "Optional" in str(f.type)
    }
    optional |= {name for cls in dataclass_types for name in _optional_annotations(cls)}
    for action in parser._actions:
        if action.dest in optional and action.type in (int, float):
            number = action.type

            def convert(value: str, number=number):
                return None if value.strip().lower() == "none" else number(value)

            convert.__name__ = number.__name__  # argparse names the type in its error messages
            action.type = convert


def _optional_annotations(cls) -> set[str]:
    """Fields annotated ``X | None`` (read from the class source annotations, untouched)."""
    names = set()
    for klass in cls.__mro__:
        for name, annotation in getattr(klass, "__annotations__", {}).items():
            if "None" in str(annotation) or "Optional" in str(annotation):
                names.add(name)
    return names


def parse_args(dataclass_types, argv: list[str] | None = None, prog: str | None = None, description=None):
    """Parse ``--config recipe.yaml`` plus flags into instances of ``dataclass_types``.

    Flags given on the command line win over the recipe.
    """
    parser = build_parser(dataclass_types, prog=prog, description=description)
    argv = list(argv or [])
    pre = ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    recipe_argv: list[str] = []
    if known.config:
        recipe_argv = _yaml_to_argv(Path(known.config), load_recipe(known.config), parser)
    try:
        *outputs, unused = parser.parse_args_into_dataclasses(
            args=recipe_argv + argv, look_for_args_file=False, return_remaining_strings=True
        )
    except ValueError as exc:
        # Dataclass checks report bad values as ValueError.
        raise UserError(f"{parser.prog}: {exc}") from exc
    if unused:
        raise UserError(f"{parser.prog}: {_unknown_flags_message(unused, parser)}")
    # After the dataclasses comes the namespace holding --config/--debug.
    parsed = tuple(outputs[: len(dataclass_types)])
    given = given_fields(parser, recipe_argv + argv)
    for obj in parsed:
        # Which settings the user chose (recipe or flag), so a default can adapt to the data
        # where the user left it to us (see training_args.resolve_batch_size).
        object.__setattr__(obj, "given_fields", given)
    return parsed


def given_fields(parser, argv: list[str]) -> frozenset[str]:
    """The dataclass fields named in ``argv`` (``--name value`` or ``--name=value``)."""
    actions = parser._option_string_actions
    names = set()
    for arg in argv:
        if arg.startswith("--"):
            action = actions.get(arg.split("=", 1)[0])
            if action is not None:
                names.add(action.dest)
    return frozenset(names)


def _unknown_flags_message(unused: list[str], parser) -> str:
    flags = [arg.split("=", 1)[0] for arg in unused if arg.startswith("-")] or unused[:1]
    known = [option for action in parser._actions for option in action.option_strings]
    close = difflib.get_close_matches(flags[0], known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown flag {flags[0]}{hint}; `--help` lists every flag (unused: {' '.join(unused)})"

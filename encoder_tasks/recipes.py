"""``encoder-tasks recipes``: list the ready-made recipes, copy one out to edit, validate one.

    encoder-tasks recipes                                 # table: name, task, model, data
    encoder-tasks recipes ls [TASK]                       # the same, for one task
    encoder-tasks recipes cp classification/default my.yaml
    encoder-tasks recipes validate my.yaml [--task classification]

A recipe is a flat YAML file whose keys are the field names of the dataclasses the task's
``train`` command parses; ``validate`` parses it exactly as ``train --config`` would, and then
checks that the data files it names exist.

The recipes are the checkout's top-level ``recipes/`` folder, installed with the package as
``encoder_tasks.recipes_data`` (``pyproject.toml``), so :func:`recipes_root` finds them with
``importlib.resources`` whether encoder-tasks runs from a wheel or an editable install.

Example:
    >>> rows = list_recipes()
    >>> "classification/default" in [r["name"] for r in rows]
    True
    >>> all({"name", "task", "model", "data"} <= set(r) for r in rows)
    True
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from .errors import UserError

logger = logging.getLogger(__name__)

#: The package the recipes are installed as (``pyproject.toml`` maps it to ``recipes/``).
RECIPES_PACKAGE = "encoder_tasks.recipes_data"
SKIP_DIRS = ("accelerate",)
USAGE = (
    "usage: encoder-tasks recipes [ls [TASK]]\n"
    "       encoder-tasks recipes cp NAME DEST          (NAME as listed, e.g. classification/default)\n"
    "       encoder-tasks recipes validate FILE [--task TASK]"
)


def _summary(path: Path) -> str:
    """The recipe's first comment line (what it is), without the leading '#'."""
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("#"):
            return line.lstrip("#").strip()
        if line:
            break
    return ""


def recipes_root() -> Path:
    """The folder of the packaged recipes (the ``recipes/`` folder of the checkout it was built from).

    Example:
        >>> (recipes_root() / "classification" / "default.yaml").is_file()
        True
    """
    from importlib import resources

    try:
        root = resources.files(RECIPES_PACKAGE)
    except ModuleNotFoundError:
        raise UserError(
            f"the recipes ({RECIPES_PACKAGE}) are not installed with this copy of encoder-tasks; "
            "install it (`pip install encoder-tasks`, or `make install` in a checkout)"
        ) from None
    if not isinstance(root, Path):  # a zipped install: no folder to list or copy from
        raise UserError(f"the recipes are inside {root}, not a folder; install encoder-tasks unzipped")
    return root


def list_recipes(root: Path | None = None, task: str | None = None) -> list[dict]:
    """Recipes under ``<root>/<task>/`` (any depth): name, task, model, data, summary, path.

    ``root`` defaults to the packaged recipes (:func:`recipes_root`).
    """
    import yaml

    root = root or recipes_root()
    found = []
    for path in sorted(root.rglob("*.yaml")):
        rel = path.relative_to(root)
        if rel.parts[0] in SKIP_DIRS or len(rel.parts) < 2:
            continue
        if task and rel.parts[0] != task:
            continue
        try:
            values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError:
            values = {}
        if not isinstance(values, dict):
            values = {}
        found.append(
            {
                "name": str(rel.with_suffix("")),
                "task": rel.parts[0],
                "model": values.get("model_name_or_path", "-"),
                "data": values.get("train_file") or values.get("dataset_name") or "-",
                "summary": _summary(path),
                "path": str(path),
            }
        )
    return found


def find_recipe(name: str, root: Path | None = None) -> Path:
    """A recipe by listed name (``classification/default``), file name, or path."""
    direct = Path(name)
    if direct.is_file():
        return direct
    root = root or recipes_root()
    for candidate in (root / name, root / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    names = [r["name"] for r in list_recipes(root)]
    import difflib

    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `encoder-tasks recipes` lists them"
    raise UserError(f"recipe {name!r} not found{hint}")


def copy_recipe(name: str, dest: str, root: Path | None = None) -> Path:
    """Copy a recipe out for editing; ``dest`` may be a file or an existing folder. Never overwrites."""
    source = find_recipe(name, root)
    target = Path(dest)
    if target.is_dir():
        target = target / source.name
    if target.suffix not in (".yaml", ".yml"):
        raise UserError(f"recipes cp: destination {dest!r} should end in .yaml (or be an existing folder)")
    if target.exists():
        raise UserError(f"recipes cp: {target} already exists; choose another destination")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target


def _task_of(path: Path, task: str | None) -> list[str]:
    from .registry import TASKS
    from .saved import task_named

    if task:
        return [task_named(task, where="--task").name]
    for part in reversed(path.resolve().parts[:-1]):
        if part in TASKS:
            return [part]
    return list(TASKS)


def validate_recipe(file: str, task: str | None = None) -> dict:
    """Parse ``file`` as ``<task> train --config file`` would; check the data files it names.

    Returns ``{"task": ..., "problems": [...]}``; raises :class:`UserError` when no task
    accepts the recipe's keys and values.
    """
    from .config import DataArguments, ModelArguments, load_recipe, parse_args
    from .registry import TASKS
    from .training_args import EncoderTrainingArguments

    path = Path(file)
    values = load_recipe(path)  # clear errors for a missing or non-YAML file
    if "compute_environment" in values or "distributed_type" in values:
        return _validate_accelerate(path)
    errors = {}
    for name in _task_of(path, task):
        try:
            _, data_args, _, _ = parse_args(
                [ModelArguments, DataArguments, TASKS[name].Arguments, EncoderTrainingArguments],
                ["--config", str(path)],
                prog=f"encoder-tasks {name} train",
            )
        except UserError as exc:
            errors[name] = str(exc)
            continue
        return {"task": name, "problems": _data_problems(data_args)}
    if len(errors) == 1:
        raise UserError(next(iter(errors.values())))
    detail = "; ".join(f"{k}: {v}" for k, v in errors.items())
    raise UserError(f"{path}: no task accepts this recipe (pass --task to see one task's errors): {detail}")


def _validate_accelerate(path: Path) -> dict:
    """An accelerate launch config (``recipes/accelerate/*.yaml``), read as ``accelerate launch`` reads it."""
    from accelerate.commands.config.config_args import load_config_from_file

    try:
        config = load_config_from_file(str(path))
    except (ValueError, TypeError, KeyError) as exc:
        raise UserError(f"{path}: not a valid accelerate config ({exc})") from None
    return {
        "task": f"accelerate ({getattr(config.distributed_type, 'value', config.distributed_type)}, {config.num_processes} processes)",
        "problems": [],
    }


def _data_problems(data_args) -> list[str]:
    problems = []
    base = Path(data_args.data_dir) if data_args.data_dir else Path(".")
    for key in ("train_file", "validation_file", "test_file"):
        value = getattr(data_args, key, None)
        if not value:
            continue
        candidates = [Path(value), base / value]
        if not any(c.exists() for c in candidates):
            fallback = " (the Hub dataset will be used)" if data_args.dataset_name else ""
            problems.append(f"{key}: {value} not found (looked in {base}){fallback}")
    return problems


def _table(rows: list[dict]) -> str:
    """The listing: one aligned row per recipe (recipe, task, model, data)."""
    header = {"name": "recipe", "task": "task", "model": "model", "data": "data"}
    widths = {k: max(len(str(r[k])) for r in [header, *rows]) for k in ("name", "task", "model")}
    lines = [
        "  ".join(f"{str(r[k]):<{widths[k]}}" for k in ("name", "task", "model")) + f"  {r['data']}"
        for r in [header, *rows]
    ]
    return "\n".join(lines)


def _ls(rest: list[str]) -> int:
    rows = list_recipes(task=rest[0] if rest else None)
    if not rows:
        logger.info("no recipes found%s", f" for task {rest[0]!r}" if rest else "")
        return 0
    logger.info(
        "%d recipes\n%s\n\ncopy one to edit: encoder-tasks recipes cp <recipe> <my.yaml>",
        len(rows),
        _table(rows),
    )
    return 0


def _cp(rest: list[str]) -> int:
    if len(rest) != 2:
        raise UserError(
            "recipes cp: expected NAME DEST, e.g. `encoder-tasks recipes cp classification/default my.yaml`"
        )
    target = copy_recipe(*rest)
    tasks = _task_of(find_recipe(rest[0]), None)
    task = tasks[0] if len(tasks) == 1 else "<task>"
    logger.info("copied to %s; edit it, then run: encoder-tasks %s train --config %s", target, task, target)
    return 0


def _validate(rest: list[str]) -> int:
    task = None
    if "--task" in rest:
        at = rest.index("--task")
        if at + 1 >= len(rest):
            raise UserError("recipes validate: --task needs a task name")
        task = rest[at + 1]
        rest = rest[:at] + rest[at + 2 :]
    if len(rest) != 1:
        raise UserError("recipes validate: expected one FILE, e.g. `encoder-tasks recipes validate my.yaml`")
    result = validate_recipe(rest[0], task)
    for problem in result["problems"]:
        logger.warning("%s", problem)
    kind = "config" if result["task"].startswith("accelerate") else "recipe"
    warnings = f" ({len(result['problems'])} warnings)" if result["problems"] else ""
    logger.info("%s: valid %s %s%s", rest[0], result["task"], kind, warnings)
    return 0


COMMANDS = {"ls": _ls, "list": _ls, "cp": _cp, "validate": _validate}


def main(argv: list[str]) -> int:
    """``encoder-tasks recipes ...``; returns the exit status."""
    if argv and argv[0] in ("-h", "--help"):
        logger.info("%s", USAGE)
        return 0
    command = argv[0] if argv else "ls"
    if command not in COMMANDS:
        raise UserError(f"recipes: unknown command {command!r}\n{USAGE}")
    return COMMANDS[command](argv[1:])

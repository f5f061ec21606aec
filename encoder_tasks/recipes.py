"""``encoder-tasks recipes``: list the ready-made recipes, copy one out to edit, validate one.

    encoder-tasks recipes                                 # table: name, task, model, data
    encoder-tasks recipes ls [TASK]                       # the same, for one task
    encoder-tasks recipes cp classification/default my.yaml
    encoder-tasks recipes validate my.yaml [--task classification]

A recipe is a flat YAML file whose keys are the field names of the dataclasses the task's
``train`` command parses; ``validate`` parses it exactly as ``train --config`` would, and then
checks that the data files it names exist.

Example:
    >>> rows = list_recipes()
    >>> all({"name", "task", "model", "data"} <= set(r) for r in rows)
    True
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .errors import UserError

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
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


def list_recipes(root: Path = RECIPES_DIR, task: str | None = None) -> list[dict]:
    """Recipes under ``recipes/<task>/`` (any depth): name, task, model, data, summary, path."""
    import yaml

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


def find_recipe(name: str, root: Path = RECIPES_DIR) -> Path:
    """A recipe by listed name (``classification/default``), file name, or path."""
    direct = Path(name)
    if direct.is_file():
        return direct
    for candidate in (root / name, root / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    names = [r["name"] for r in list_recipes(root)]
    import difflib

    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `encoder-tasks recipes` lists them"
    raise UserError(f"recipe {name!r} not found{hint}")


def copy_recipe(name: str, dest: str, root: Path = RECIPES_DIR) -> Path:
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

    if task:
        if task not in TASKS:
            raise UserError(f"--task {task!r}: unknown task; choose one of {', '.join(TASKS)}")
        return [task]
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
        module = TASKS[name].load()
        try:
            _, data_args, _, _ = parse_args(
                [ModelArguments, DataArguments, module.Arguments, EncoderTrainingArguments],
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


def main(argv: list[str]) -> int:
    """``encoder-tasks recipes ...``; returns the exit status."""
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command = argv[0] if argv else "ls"
    rest = argv[1:]
    if command in ("ls", "list"):
        rows = list_recipes(task=rest[0] if rest else None)
        if not rows:
            print("no recipes found" + (f" for task {rest[0]!r}" if rest else ""))
            return 0
        widths = [
            max(len(str(r[k])) for r in rows + [{"name": "recipe", "task": "task", "model": "model"}])
            for k in ("name", "task", "model")
        ]
        print(f"{'recipe':<{widths[0]}}  {'task':<{widths[1]}}  {'model':<{widths[2]}}  data")
        for r in rows:
            print(
                f"{r['name']:<{widths[0]}}  {r['task']:<{widths[1]}}  {r['model']:<{widths[2]}}  {r['data']}"
            )
        print("\ncopy one to edit: encoder-tasks recipes cp <recipe> <my.yaml>")
        return 0
    if command == "cp":
        if len(rest) != 2:
            raise UserError(
                "recipes cp: expected NAME DEST, e.g. `encoder-tasks recipes cp classification/default my.yaml`"
            )
        target = copy_recipe(*rest)
        tasks = _task_of(find_recipe(rest[0]), None)
        task = tasks[0] if len(tasks) == 1 else "<task>"
        print(f"copied to {target}; edit it, then run: encoder-tasks {task} train --config {target}")
        return 0
    if command == "validate":
        task = None
        if "--task" in rest:
            at = rest.index("--task")
            if at + 1 >= len(rest):
                raise UserError("recipes validate: --task needs a task name")
            task = rest[at + 1]
            rest = rest[:at] + rest[at + 2 :]
        if len(rest) != 1:
            raise UserError(
                "recipes validate: expected one FILE, e.g. `encoder-tasks recipes validate my.yaml`"
            )
        result = validate_recipe(rest[0], task)
        for problem in result["problems"]:
            print(f"warning: {problem}")
        kind = "config" if result["task"].startswith("accelerate") else "recipe"
        print(
            f"{rest[0]}: valid {result['task']} {kind}"
            + (f" ({len(result['problems'])} warnings)" if result["problems"] else "")
        )
        return 0
    raise UserError(f"recipes: unknown command {command!r}\n{USAGE}")

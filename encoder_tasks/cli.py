"""Command line: ``encoder-tasks <task> train|evaluate|predict [--config recipe.yaml] [--flags]``.

``encoder-tasks recipes`` lists the ready-made recipes. Errors a user can fix print one line
and exit with status 2 (``--debug`` shows the traceback).
"""

from __future__ import annotations

# Runtime defaults must be in the environment before torch (and its OpenMP) loads.
from .runtime import configure_cpu_runtime

configure_cpu_runtime()

import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from .errors import UserError  # noqa: E402
from .registry import TASKS  # noqa: E402

ACTIONS = ("train", "evaluate", "predict")
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


def _usage() -> str:
    lines = [
        "usage: encoder-tasks <task> {train,evaluate,predict} [--config RECIPE.yaml] [--flag value ...]",
        "       encoder-tasks recipes",
        "",
        "tasks:",
    ]
    lines += [f"  {name:<16} {spec.summary}" for name, spec in TASKS.items()]
    lines += ["", "`encoder-tasks <task> <action> --help` lists every flag (recipe keys are the same names)."]
    return "\n".join(lines)


def list_recipes(root: Path = RECIPES_DIR) -> list[dict]:
    """Recipes under ``recipes/<task>/``: path, task, model and training data."""
    import yaml

    found = []
    for path in sorted(root.glob("*/*.yaml")):
        if path.parent.name == "accelerate":
            continue
        values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        found.append(
            {
                "recipe": str(path.relative_to(root.parent)),
                "task": path.parent.name,
                "model": values.get("model_name_or_path", "-"),
                "data": values.get("train_file") or values.get("dataset_name") or "-",
            }
        )
    return found


def _run(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] == "recipes":
        for row in list_recipes():
            print(f"{row['recipe']:<48} {row['task']:<15} {row['model']:<42} {row['data']}")
        return 0
    task_name, rest = argv[0], argv[1:]
    if task_name not in TASKS:
        raise UserError(f"unknown task {task_name!r}; choose one of: {', '.join(TASKS)}")
    if not rest or rest[0] not in ACTIONS:
        found = rest[0] if rest else "nothing"
        raise UserError(f"{task_name}: expected an action ({', '.join(ACTIONS)}), found {found!r}")
    action, flags = rest[0], rest[1:]
    prog = f"encoder-tasks {task_name} {action}"
    task = TASKS[task_name].load()
    from .config import DataArguments, ModelArguments, parse_args

    if action == "predict":
        (predict_args,) = parse_args([task.PredictArguments], flags, prog=prog)
        task.predict_file(predict_args)
        return 0
    from . import run
    from .training_args import EncoderTrainingArguments

    model_args, data_args, task_args, training_args = parse_args(
        [ModelArguments, DataArguments, task.Arguments, EncoderTrainingArguments], flags, prog=prog
    )
    getattr(run, action)(task_name, model_args, data_args, task_args, training_args)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``encoder-tasks`` command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get("ENCODER_TASKS_DEBUG") == "1"
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(levelname)s: %(message)s")
    for noisy in ("httpx", "urllib3", "filelock", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return _run(argv)
    except UserError as exc:
        if debug:
            raise
        print(f"encoder-tasks: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("encoder-tasks: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

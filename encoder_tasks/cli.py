"""Command line: ``encoder-tasks <task> train|evaluate|predict [--config recipe.yaml] [--flags]``.

``encoder-tasks recipes`` lists the ready-made recipes. Errors a user can fix print one line
and exit with status 2, unexpected ones print one line and exit with 1 (``--debug`` shows the
traceback).
"""

from __future__ import annotations

# Runtime defaults must be in the environment before torch (and its OpenMP) loads.
from .runtime import configure_cpu_runtime

configure_cpu_runtime()

import importlib  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from .errors import UserError  # noqa: E402
from .registry import TASKS  # noqa: E402
from .saved import task_named  # noqa: E402

ACTIONS = ("train", "evaluate", "predict", "search", "distill")
TOOLS = {
    "recipes": ("encoder_tasks.recipes", "main"),
    "export": ("encoder_tasks.commands.export", "main"),
    "plot": ("encoder_tasks.reporting.plots", "main"),
    "serve": ("encoder_tasks.serving.cli", "main"),
    "quantize": ("encoder_tasks.commands.quantize", "main"),
    "code": ("encoder_tasks.commands.code", "main"),
}


def _usage() -> str:
    lines = [
        "usage: encoder-tasks <task> {train,evaluate,predict,search,distill} [--config RECIPE.yaml] [--flag value ...]",
        "       encoder-tasks recipes [ls [TASK] | cp NAME DEST | validate FILE]",
        "       encoder-tasks export RUN_DIR DEST [--format auto|transformers|sentence-transformers|onnx]",
        "       encoder-tasks plot RUN_DIR",
        "       encoder-tasks serve RUN_DIR [NAME=RUN_DIR ...] [--host 127.0.0.1] [--port 8080]",
        "       encoder-tasks quantize RUN_DIR DEST [--validation_file FILE]",
        "       encoder-tasks code extract SRC [SRC ...] OUT_DIR [--packages a,b] [--split_by package|file]",
        "",
        "tasks:",
    ]
    lines += [f"  {name:<16} {task.summary}" for name, task in TASKS.items()]
    own = [
        f"`encoder-tasks {name} {'|'.join(task.extra_actions())}`"
        for name, task in TASKS.items()
        if task.extra_actions()
    ]
    if own:
        lines += ["", "Task actions of their own: " + ", ".join(own) + "."]
    lines += [
        "",
        "`encoder-tasks <task> <action> --help` lists the task's flags first (`--help-all`: every flag;",
        "recipe keys are the same names).",
    ]
    return "\n".join(lines)


#: The Trainer flags most runs set, named in the short help (``--help-all`` lists all of them).
COMMON_TRAINER_FLAGS = (
    "output_dir",
    "num_train_epochs",
    "learning_rate",
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "seed",
    "bf16",
    "eval_strategy",
    "save_strategy",
    "report_to",
    "resume",
)
#: Terminal width the short help is cut to.
HELP_WIDTH = 100


def _first_sentence(text: str) -> str:
    text = " ".join(str(text or "").split())
    masked = text.replace("e.g. ", "e.g._").replace("i.e. ", "i.e._")
    end = masked.find(". ")
    return text if end < 0 else text[: end + 1]


def short_help(prog: str, groups: list[tuple[str, type]]) -> str:
    """One line per flag of ``groups`` (title, dataclass), cut to :data:`HELP_WIDTH`, then the
    Trainer's most used flags by name: the help of a training action that fits a screen, built
    without importing transformers (the full list, ``--help-all``, needs it).

    Example:
        >>> from encoder_tasks.config import ModelArguments
        >>> print(short_help("encoder-tasks ner train", [("model", ModelArguments)]).splitlines()[2])
        model:
    """
    import dataclasses

    lines = [f"usage: {prog} [--config RECIPE.yaml] [--flag value ...]", ""]
    for title, cls in groups:
        lines.append(f"{title}:")
        for f in dataclasses.fields(cls):
            if not f.init or f.name.startswith("_"):
                continue
            default = f.default if f.default is not dataclasses.MISSING else None
            flag = f"--{f.name}" if default in (None, "", False) else f"--{f.name}={default}"
            entry = f"  {flag:<34} {_first_sentence(f.metadata.get('help', ''))}"
            lines.append(entry if len(entry) <= HELP_WIDTH else entry[: HELP_WIDTH - 3] + "...")
        lines.append("")
    import textwrap

    common = ", ".join(f"--{name}" for name in COMMON_TRAINER_FLAGS) + ", ..."
    lines += [
        "Trainer flags (transformers' TrainingArguments: optimiser, schedule, precision, logging, saving):",
        *textwrap.wrap(common, HELP_WIDTH, initial_indent="  ", subsequent_indent="  "),
        "",
        f"`{prog} --help-all`: every flag, with its full help.",
        "Recipe keys (--config) are the same names.",
    ]
    return "\n".join(lines)


def _help_groups(task, action: str) -> list[tuple[str, type]]:
    from .config import DataArguments, ModelArguments

    groups = [(f"{task.name} flags", task.Arguments), ("model", ModelArguments), ("data", DataArguments)]
    if action == "distill":
        from .distillation import DistillArguments

        groups.insert(1, ("distillation", DistillArguments))
    return groups


def _run(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] in TOOLS:  # commands that are not a task: recipes, export, plot, serve, quantize, code
        module_name, function = TOOLS[argv[0]]
        return getattr(importlib.import_module(module_name), function)(argv[1:])
    task_name, rest = argv[0], argv[1:]
    task = task_named(task_name)
    own_actions = {k: v for k, v in task.extra_actions().items() if k not in ACTIONS}  # shared ones win
    if not rest or (rest[0] not in ACTIONS and rest[0] not in own_actions):
        found = rest[0] if rest else "nothing"
        known = ", ".join([*ACTIONS, *own_actions])
        raise UserError(f"{task_name}: expected an action ({known}), found {found!r}")
    action, flags = rest[0], rest[1:]
    prog = f"encoder-tasks {task_name} {action}"
    if action in ("train", "evaluate", "search", "distill"):
        if "-h" in flags or "--help" in flags:  # a screen, fast: task flags first, no transformers
            print(short_help(prog, _help_groups(task, action)))
            return 0
        flags = ["--help" if f == "--help-all" else f for f in flags]
    from .config import DataArguments, ModelArguments, parse_args

    if action in own_actions:
        from .config import PredictArguments

        arguments_class, function = own_actions[action]
        (action_args,) = parse_args([arguments_class], flags, prog=prog)
        if isinstance(action_args, PredictArguments) and action_args.check_engine() == "ray":
            from .engines import run_on_ray  # embedding encode on a Ray cluster

            run_on_ray(task, action, action_args)
        else:
            function(action_args)
        return 0
    if action == "predict":
        (predict_args,) = parse_args([task.PredictArguments], flags, prog=prog)
        if predict_args.check_engine() == "ray":
            from .engines import predict_on_ray  # an actor pool of replicas over the streamed input

            predict_on_ray(task, predict_args)
        else:
            task.predict(predict_args)
        return 0
    if action == "search":
        from .hpo import main as search_main

        return search_main(task_name, flags, prog)
    if action == "evaluate":
        from .reporting.compare import evaluate_many, split_files

        files, others = split_files(flags)
        if len(files) > 1:  # several datasets: one table side by side
            evaluate_many(task_name, files, others, prog)
            return 0
    from . import run
    from .training_args import EncoderTrainingArguments

    if action == "distill":
        from .distillation import DistillArguments
        from .distillation.run import distill

        model_args, data_args, task_args, distill_args, training_args = parse_args(
            [ModelArguments, DataArguments, task.Arguments, DistillArguments, EncoderTrainingArguments],
            flags,
            prog=prog,
        )
        distill(task_name, model_args, data_args, task_args, distill_args, training_args)
        return 0

    model_args, data_args, task_args, training_args = parse_args(
        [ModelArguments, DataArguments, task.Arguments, EncoderTrainingArguments], flags, prog=prog
    )
    action_function = run.train if action == "train" else run.evaluate
    action_function(task_name, model_args, data_args, task_args, training_args)
    return 0


def _take_debug_flag(argv: list[str]) -> tuple[list[str], bool]:
    """Remove a bare ``--debug`` (ours: show tracebacks) from ``argv``.

    ``--debug VALUE`` (a value not starting with ``-``) is transformers' own training option
    (e.g. ``underflow_overflow``) and is left for the parser.
    """
    kept, debug = [], False
    for index, arg in enumerate(argv):
        following = argv[index + 1] if index + 1 < len(argv) else None
        if arg == "--debug" and (following is None or following.startswith("-")):
            debug = True
            continue
        kept.append(arg)
    return kept, debug


def _describe_unexpected(exc: BaseException) -> tuple[str, int]:
    """One line and an exit status for an exception no check anticipated."""
    import errno

    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        where = f" writing {exc.filename}" if exc.filename else ""
        return (
            f"no space left on the device{where}; free some space (or choose another --output_dir) and "
            "continue with --resume: complete checkpoints are kept",
            2,
        )
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return (
            f"out of memory ({first or type(exc).__name__}); lower --per_device_train_batch_size or "
            "--max_tokens_per_batch (raising --gradient_accumulation_steps keeps the effective batch) or "
            "--max_length",
            1,
        )
    name = type(exc).__name__
    return (
        f"unexpected {name}: {first or '(no message)'}. This is probably a bug in encoder-tasks or a problem "
        "with the installation; rerun with --debug to see the traceback",
        1,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``encoder-tasks`` command; returns the exit status.

    Every failure ends in one line on stderr: problems the user can fix (bad data, a bad
    recipe, a full disk) exit with 2, anything unexpected with 1, an interrupt with 130.
    ``--debug`` (or ``ENCODER_TASKS_DEBUG=1``) raises instead, showing the traceback.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    argv, debug = _take_debug_flag(argv)
    debug = debug or os.environ.get("ENCODER_TASKS_DEBUG") == "1"
    from .log import configure_logging

    configure_logging()
    try:
        status = _run(argv)
        _leave_process_group(wait_for_others=status == 0)
        return status
    except UserError as exc:
        if debug:
            raise
        print(f"encoder-tasks: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        print(
            "encoder-tasks: interrupted (complete checkpoints are kept; continue with --resume)",
            file=sys.stderr,
        )
        return 130
    except Exception as exc:
        if debug:
            raise
        message, status = _describe_unexpected(exc)
        print(f"encoder-tasks: error: {message}", file=sys.stderr)
        return status
    finally:
        _leave_process_group(wait_for_others=False)


def _leave_process_group(wait_for_others: bool) -> None:
    """Leave the process group of an ``accelerate launch`` run before the interpreter exits.

    A process that exits while its gloo group is alive can take a peer still tearing down its
    connections with it ("terminate called without an active exception", SIGABRT), so a
    successful run waits for the others, then every run destroys its group. Nothing happens
    when torch was never imported or no group was started.
    """
    distributed = sys.modules.get("torch.distributed")
    if distributed is None or not distributed.is_available() or not distributed.is_initialized():
        return
    try:
        if wait_for_others:
            distributed.barrier()
        distributed.destroy_process_group()
    except Exception as exc:  # leaving must never hide the run's own outcome
        logging.getLogger(__name__).warning("could not leave the process group cleanly: %s", exc)


def run() -> None:
    """The ``encoder-tasks`` script: :func:`main`, then exit with its status.

    What the command built stays alive until the process ends (models, tokenizers, the libraries'
    own objects: millions), and the interpreter's last garbage collection would walk them all
    only to free memory the exit frees anyway: 0.4 s of a 3 s one-sentence ``predict``. They are
    frozen out of its reach first (``gc.freeze``); files are closed and logs flushed before, as
    always. Only here, when the process ends, never in :func:`main`, which tests call in-process.
    """
    status = main()
    import gc

    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    run()

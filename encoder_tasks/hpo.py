"""Hyperparameter search: ``encoder-tasks <task> search --config recipe.yaml --n_trials 20``.

The Trainer's own search API (``Trainer.hyperparameter_search`` with the Optuna backend, the
``search`` extra) drives it: every trial builds a fresh model from the pretrained encoder
through ``model_init``, trains with the trial's settings, and is scored on the validation
set. The search space is set with flags (ranges are ``low,high``; choices ``a,b,c``):

    --search_learning_rate 1e-5,1e-4      (log-uniform)
    --search_batch_size 16,32             (categorical)
    --search_epochs 1,2,3                 (categorical; omitted: the recipe's value)
    --search_warmup 0.0,0.2               (uniform; omitted: the recipe's value)
    --search_weight_decay 0.0,0.1         (uniform; omitted: the recipe's value)

Results: ``<output_dir>/search_results.json`` (every trial: number, value, settings, state)
and a table; the best settings are printed as the flags that train with them.

Example:
    >>> space = parse_space(SearchArguments(search_learning_rate="1e-5,1e-4", search_batch_size="8,16"))
    >>> space["learning_rate"], space["per_device_train_batch_size"]
    (('float_log', 1e-05, 0.0001), ('categorical', [8, 16]))
"""

from __future__ import annotations

import logging
import math
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from .data.writers import write_json
from .errors import UserError
from .metrics import lower_is_better

logger = logging.getLogger(__name__)

#: Objective metrics tried in order when ``--search_metric`` is not given.
OBJECTIVES = (
    "eval_accuracy",
    "eval_f1",
    "eval_overall_f1",
    "eval_macro_f1",
    "eval_exact_match",
    "eval_spearman",
    "eval_cosine_spearman",
    "eval_pearson",
    "eval_perplexity",
    "eval_loss",
)


@dataclass
class SearchArguments:
    """Settings of ``<task> search`` (the search space and budget)."""

    n_trials: int = field(default=10, metadata={"help": "Number of trials (each one full training run)."})
    search_metric: str | None = field(
        default=None,
        metadata={
            "help": "Evaluation metric to optimise, e.g. eval_accuracy (default: the task's main metric, "
            "else eval_loss)."
        },
    )
    search_direction: str | None = field(
        default=None,
        metadata={
            "help": "maximize or minimize (default: minimize for losses/perplexity/errors, else maximize)."
        },
    )
    search_learning_rate: str | None = field(
        default="1e-5,1e-4", metadata={"help": "Learning-rate range low,high (log-uniform); empty: fixed."}
    )
    search_batch_size: str | None = field(
        default=None, metadata={"help": "Training batch sizes to choose from, e.g. 16,32."}
    )
    search_epochs: str | None = field(
        default=None, metadata={"help": "Epoch counts to choose from, e.g. 1,2,3."}
    )
    search_warmup: str | None = field(default=None, metadata={"help": "Warm-up fraction range low,high."})
    search_weight_decay: str | None = field(default=None, metadata={"help": "Weight-decay range low,high."})
    search_timeout: float | None = field(
        default=None, metadata={"help": "Stop starting trials after this many seconds."}
    )
    search_seed: int = field(default=42, metadata={"help": "Seed of the Optuna sampler (TPE)."})

    def __post_init__(self):
        if self.n_trials < 1:
            raise UserError(f"--n_trials must be at least 1, found {self.n_trials}")
        if self.search_direction not in (None, "maximize", "minimize"):
            raise UserError(
                f"--search_direction must be maximize or minimize, found {self.search_direction!r}"
            )


def _numbers(flag: str, text: str, kind=float) -> list:
    try:
        values = [kind(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise UserError(f"--{flag}: expected numbers separated by commas, found {text!r}") from None
    if not values:
        raise UserError(f"--{flag}: no values in {text!r}")
    return values


def _range(flag: str, text: str) -> tuple[float, float]:
    values = _numbers(flag, text)
    if len(values) != 2 or values[0] > values[1]:
        raise UserError(f"--{flag}: expected a range low,high with low <= high, found {text!r}")
    return values[0], values[1]


def parse_space(args: SearchArguments) -> dict:
    """``{training argument: (kind, ...)}`` from the ``--search_*`` flags."""
    space: dict = {}
    if args.search_learning_rate:
        low, high = _range("search_learning_rate", args.search_learning_rate)
        if low <= 0:
            raise UserError("--search_learning_rate: a log-uniform range needs low > 0")
        space["learning_rate"] = ("float_log", low, high)
    if args.search_batch_size:
        space["per_device_train_batch_size"] = (
            "categorical",
            _numbers("search_batch_size", args.search_batch_size, int),
        )
    if args.search_epochs:
        space["num_train_epochs"] = ("categorical", _numbers("search_epochs", args.search_epochs))
    if args.search_warmup:
        low, high = _range("search_warmup", args.search_warmup)
        if not (0 <= low and high < 1):
            raise UserError("--search_warmup: a warm-up fraction range must lie in [0, 1)")
        space["warmup_steps"] = ("float", low, high)
    if args.search_weight_decay:
        space["weight_decay"] = ("float", *_range("search_weight_decay", args.search_weight_decay))
    if not space:
        raise UserError("search: the search space is empty; give at least one --search_* range")
    return space


def hp_space_function(space: dict):
    """The ``hp_space(trial)`` the Trainer calls, sampling every entry of ``space``."""

    def hp_space(trial) -> dict:
        params = {}
        for name, spec in space.items():
            kind = spec[0]
            if kind == "float_log":
                params[name] = trial.suggest_float(name, spec[1], spec[2], log=True)
            elif kind == "float":
                params[name] = trial.suggest_float(name, spec[1], spec[2])
            else:
                params[name] = trial.suggest_categorical(name, spec[1])
        return params

    return hp_space


def pick_metric(metrics: dict, wanted: str | None) -> str:
    if wanted:
        key = wanted if wanted.startswith("eval_") else f"eval_{wanted}"
        if key not in metrics:
            found = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)))
            raise UserError(f"--search_metric {wanted!r}: not among the evaluation metrics {found}")
        return key
    for name in OBJECTIVES:
        if isinstance(metrics.get(name), (int, float)):
            return name
    raise UserError("search: the evaluation returned no metric to optimise; pass --search_metric")


def direction_for(metric: str, wanted: str | None) -> str:
    if wanted:
        return wanted
    return "minimize" if lower_is_better(metric) else "maximize"


def search(task_name: str, model_args, data_args, task_args, training_args, search_args) -> dict:
    """Run the search; returns ``{"best": {...}, "trials": [...]}`` (also written as JSON)."""
    try:
        import optuna
    except ImportError:
        raise UserError("search needs optuna: pip install 'encoder-tasks[search]'") from None
    from .outputs import check_output_dir
    from .reporting.training_log import JsonLinesLogger
    from .run import build_training, make_trainer
    from .saved import task_named

    task = task_named(task_name)
    space = parse_space(search_args)
    if "per_device_train_batch_size" in space and getattr(training_args, "max_tokens_per_batch", None):
        raise UserError(
            "search: --search_batch_size has no effect with --max_tokens_per_batch (the token budget sets "
            "every training batch); search one or the other"
        )
    check_output_dir(training_args)
    # Trials compare settings; their checkpoints would only fill the disk.
    training_args.save_strategy = "no"
    # The same set-up as `train` (data, settings, batch size, model factory with LoRA and
    # padding-free); the Trainer seeds and calls model_init at the start of every trial.
    setup = build_training(task, model_args, data_args, task_args, training_args)
    if setup.prepared.eval is None:
        raise UserError("search: needs --validation_file (trials are scored on it)")
    trainer = make_trainer(
        task,
        training_args,
        setup.prepared,
        setup.tokenizer,
        task_args,
        model_init=setup.model_init,
        callbacks=[JsonLinesLogger()],
    )
    chosen: dict = {}

    def objective(metrics: dict) -> float:
        if "metric" not in chosen:
            wanted = search_args.search_metric
            if wanted is None:  # the task's own objective, as far as this run reports it
                wanted = next((m for m in task.objectives if m in metrics), None)
            chosen["metric"] = pick_metric(metrics, wanted)
        value = float(metrics[chosen["metric"]])
        return value if math.isfinite(value) else float("nan")

    # The direction must be known before the first trial: it follows the named metric, or
    # the first of OBJECTIVES the task is known to report (looked up from a dry evaluation
    # would cost a pass; the metric names are stable per task).
    metric_hint = search_args.search_metric or task.objectives[0]
    direction = direction_for(metric_hint, search_args.search_direction)
    storage = optuna.storages.InMemoryStorage()
    study_name = f"encoder-tasks-{task_name}"
    start = time.perf_counter()
    best = trainer.hyperparameter_search(
        hp_space=hp_space_function(space),
        compute_objective=objective,
        n_trials=search_args.n_trials,
        direction=direction,
        backend="optuna",
        timeout=search_args.search_timeout,
        storage=storage,
        study_name=study_name,
        sampler=optuna.samplers.TPESampler(seed=search_args.search_seed),
    )
    study = optuna.load_study(study_name=study_name, storage=storage)
    trials = [
        {
            "trial": t.number,
            "value": t.value,
            "state": t.state.name,
            "params": t.params,
            "seconds": t.duration.total_seconds() if t.duration else None,
        }
        for t in study.trials
    ]
    result = {
        "task": task_name,
        "metric": chosen.get("metric", metric_hint),
        "direction": direction,
        "n_trials": len(trials),
        "wall_seconds": time.perf_counter() - start,
        "space": {k: list(v) for k, v in space.items()},
        "best": {"trial": int(best.run_id), "value": best.objective, "params": best.hyperparameters},
        "trials": trials,
    }
    out = Path(training_args.output_dir)
    write_json(out / "search_results.json", result)
    _log_table(result)
    flags = " ".join(f"--{k} {shlex.quote(_fmt(v))}" for k, v in best.hyperparameters.items())
    logger.info("best trial %s: %s = %.4f", best.run_id, result["metric"], best.objective)
    logger.info("train with it: encoder-tasks %s train --config <recipe> %s", task_name, flags)
    logger.info("all trials: %s", out / "search_results.json")
    return result


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _log_table(result: dict) -> None:
    names = list(result["space"])
    header = ["trial", result["metric"], *names]
    rows = [
        [
            str(t["trial"]),
            _fmt(t["value"]) if t["value"] is not None else t["state"],
            *(_fmt(t["params"].get(n)) for n in names),
        ]
        for t in result["trials"]
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    logger.info("trials\n%s", "\n".join(lines))


def main(task_name: str, flags: list[str], prog: str) -> int:
    """``encoder-tasks <task> search``: parse the flags (recipe keys too) and run the search."""
    from .config import DataArguments, ModelArguments, parse_args
    from .saved import task_named
    from .training_args import EncoderTrainingArguments

    task = task_named(task_name)
    parsed = parse_args(
        [ModelArguments, DataArguments, task.Arguments, EncoderTrainingArguments, SearchArguments],
        flags,
        prog=prog,
    )
    search(task_name, *parsed)
    return 0

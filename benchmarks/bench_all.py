"""The training benchmark: every task, every contender, every seed, one script, one result file.

    python -m benchmarks.bench_all                                  # standard sizes, all 5 tasks, 3 seeds
    python -m benchmarks.bench_all --size quick --tasks classification --seeds 1   # a smoke run
    python -m benchmarks.bench_all --variant "toolkit-tokens=--max_tokens_per_batch 256" \
        --variant "toolkit-tokens@qa=--max_tokens_per_batch 4096"      # one budget per task
    python -m benchmarks.bench_all --resume /tmp/bench_all-training-standard-<stamp>.partial

For each task (``benchmarks/suite/<task>.py``: its data, splits, sizes and stock setup) it
trains every contender of ``common.CONTENDERS`` once per seed of ``common.SEEDS``:

- ``stock``: ``AutoModelFor<Task>`` + ``transformers.Trainer`` as the task's example script
  sets it up, at TrainingArguments defaults, with dynamic padding;
- ``stock-tuned``: the same plus bf16 autocast (where native) and length-grouped sampling;
- ``toolkit-same-batch``: the toolkit's defaults at the stock batch size;
- ``toolkit``: the toolkit's defaults, its batch rule included;
- ``stock-lr-sweep`` (classification, NER, pair, QA): the ``stock`` setup at each learning rate
  of ``common.STOCK_SWEEP_RATES`` (rows ``stock-lr-1e-05``...) on the first seed, as a user
  sweeps (one run per rate); the rate with the best VALIDATION score there (the ``stock`` row's
  own 5e-5 is one more candidate) then runs on every seed, and the sweep's row is that rate's
  mean and spread, test score included; its cost is the train time of every candidate's run;
- opt-in variants (``--variant NAME=FLAGS``): toolkit runs with extra flags, as extra rows.

Every run is its own process (``common.worker_env()``; toolkit contenders apply the toolkit's
CPU runtime defaults before torch loads, as the CLI does), one after the other, never two at
once. Within a task the order is seed-major (seed 1: every contender, then seed 2, ...), so a
machine that slowly drifts slows every contender alike. Each run is saved as it finishes, one
file per run in a partial folder (its path is printed first; ``harness.cached``); ``--resume``
continues one, skipping the runs that succeeded. A failed run is recorded with the tail of its log and the benchmark goes
on. The result file, ``benchmarks/results/training-<size>-<timestamp>.json``, holds the
command, the sizes and datasets, every run, a per task x contender summary (mean and spread
over seeds) and the ``training``, ``time-shares`` and ``targets`` tables the docs cite
(``benchmarks/tables.py``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    CONTENDERS,
    SEEDS,
    STOCK_SWEEP,
    STOCK_SWEEP_RATES,
    mean_spread,
    save_results,
    sweep_contender,
    sweep_learning_rate,
    worker_env,
)
from benchmarks.harness import REPO, cached, invocation, module_command
from benchmarks.tables import render_markdown

TASKS = ("classification", "ner", "pair", "qa", "mlm")
#: The tasks the stock learning-rate sweep runs on (issue 31).
SWEEP_TASKS = ("classification", "ner", "pair", "qa")
#: What the summary gives mean and spread for, per task x contender.
SUMMARISED = (
    "validation_metric",
    "test_metric",
    "train_real_tokens_per_s",
    "train_mfu",
    "outside_forward_backward_share",
    "peak_rss_mib",
    "train_seconds",
)
#: Targets of issue 15: speed ratios the toolkit must reach.
SAME_BATCH_TARGET = 1.3  # toolkit-same-batch / stock-tuned
DEFAULTS_TARGET = 2.0  # toolkit / stock
LOG_TAIL = 4000


# ---- one run, in a fresh process ---------------------------------------------------------------
def worker(task: str, contender: str, seed: int, size: str, extra_flags: list[str], result: Path) -> None:
    """Train one contender once in this process and write its result dict to ``result``."""
    if contender.startswith("toolkit"):
        # What the encoder-tasks CLI does before torch loads: its runtime defaults where the
        # user has not chosen (OpenMP reads them once, when torch loads).
        from encoder_tasks.runtime import configure_cpu_runtime

        configure_cpu_runtime()
    # torch next, so nothing a suite module imports later changes a stock run's environment.
    import torch  # noqa: F401

    from encoder_tasks.log import configure_logging

    configure_logging()  # the suite's and the toolkit's progress lines go to the run's log

    suite = importlib.import_module(f"benchmarks.suite.{task}")
    work = Path(tempfile.mkdtemp(prefix=f"bench-all-{task}-{contender}-{seed}-"))
    try:
        kwargs = {"extra_flags": extra_flags} if extra_flags else {}
        row = suite.run(contender, seed, size, work, **kwargs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.write_text(json.dumps(row, default=str))


def describe_worker(task: str, size: str, result: Path) -> None:
    """Write the task's sizes, dataset line and stock script to ``result`` (in its own process,
    so the parent never loads torch while the contenders run)."""
    suite = importlib.import_module(f"benchmarks.suite.{task}")
    info = {"describe": suite.describe(size), "dataset": suite.DATASET, "stock_script": suite.STOCK_SCRIPT}
    result.write_text(json.dumps(info, default=str))


def _subprocess(args: list[str], log: Path) -> tuple[int, float]:
    start = time.perf_counter()
    with log.open("w") as output:
        done = subprocess.run(
            module_command("bench_all", *args),
            cwd=REPO,
            env=worker_env(),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    return done.returncode, time.perf_counter() - start


def launch(task: str, contender: str, seed: int, size: str, flags: list[str], logs: Path) -> dict:
    """One run in a fresh process; its result dict, or an error record with the log's tail."""
    log = logs / f"{task}-{contender}-seed{seed}.log"
    result = log.with_suffix(".json")
    args = ["--worker", f"{task}:{contender}:{seed}", "--size", size, "--result", str(result)]
    args.append(f"--extra_flags={json.dumps(flags)}")
    print(f"[bench_all] {task} {contender} seed {seed} (log: {log}) ...", flush=True)
    code, wall = _subprocess(args, log)
    if code != 0 or not result.is_file():
        tail = log.read_text(errors="replace")[-LOG_TAIL:]
        print(f"[bench_all]   FAILED (exit status {code}); see {log}", flush=True)
        return {
            "task": task,
            "contender": contender,
            "seed": seed,
            "size": size,
            "extra_flags": flags,
            "error": f"exit status {code}",
            "log_tail": tail,
            "wall_seconds": wall,
        }
    row = json.loads(result.read_text())
    row.update(extra_flags=flags, wall_seconds=wall)
    row.setdefault("task", task)
    row.setdefault("contender", contender)
    row.setdefault("seed", seed)
    print(
        f"[bench_all]   {row.get('metric_name')} validation {_num(row.get('validation_metric'))}, "
        f"test {_num(row.get('test_metric'))}, {_num(row.get('train_real_tokens_per_s'))} real tok/s "
        f"({wall:.0f} s)",
        flush=True,
    )
    return row


def task_sizes(task: str, size: str, logs: Path) -> dict:
    """The suite module's ``describe(size)``, dataset line and stock script (from its own process)."""
    log = logs / f"{task}-describe.log"
    result = log.with_suffix(".json")
    code, _ = _subprocess(["--describe", task, "--size", size, "--result", str(result)], log)
    if code != 0 or not result.is_file():
        return {"error": f"exit status {code}", "log_tail": log.read_text(errors="replace")[-LOG_TAIL:]}
    return json.loads(result.read_text())


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"


# ---- summary, targets, tables ------------------------------------------------------------------
def summarise(runs: list[dict]) -> dict:
    """``{task: {contender: {...}}}``: mean and spread over the successful seeds of each key in
    :data:`SUMMARISED`, the time shares, and the settings the runs had (batch, precision...)."""
    summary: dict = {}
    for run in runs:
        summary.setdefault(run["task"], {}).setdefault(run["contender"], [])
        summary[run["task"]][run["contender"]].append(run)
    out = {
        task: {contender: _summary(group) for contender, group in by.items()} for task, by in summary.items()
    }
    for task, by in out.items():
        if (sweep := sweep_summary(by, [r for r in runs if r["task"] == task])) is not None:
            by[STOCK_SWEEP] = sweep
    return out


def lower_is_better(metric_name) -> bool:
    from encoder_tasks.metrics import lower_is_better as by_name  # the toolkit's own rule

    return by_name(str(metric_name))


def sweep_choice(runs: list[dict], task: str, seed: int) -> str | None:
    """The stock contender (``stock`` or a swept ``stock-lr-*``) with the best VALIDATION score
    on ``task`` at ``seed``: how a user picks a learning rate, one run per rate. None where no
    swept rate has run there."""
    found = {
        r["contender"]: r
        for r in runs
        if r["task"] == task and r["seed"] == seed and "error" not in r and r.get("validation_metric") is not None
        and (r["contender"] == "stock" or sweep_learning_rate(r["contender"]) is not None)
    }  # fmt: skip
    if not any(sweep_learning_rate(c) is not None for c in found):
        return None
    sign = -1 if lower_is_better(next(iter(found.values())).get("metric_name")) else 1
    return max(found, key=lambda c: sign * found[c]["validation_metric"])


def sweep_summary(by: dict, runs: list[dict]) -> dict | None:
    """The stock sweep's row of one task (``runs``: that task's runs): every rate (the
    ``stock`` row's default 5e-5 among them) runs on the first seed, the best on validation
    there (:func:`sweep_choice`) runs on every seed and is reported, as its summary, plus
    ``chosen``, ``choice_seed``, ``candidates`` (contender -> learning rate, validation score and
    train seconds on that seed) and ``sweep_train_seconds`` (their train time together: what the
    search costs a user). None where no swept rate ran.

    Example:
        >>> run = lambda c, lr, v: {"task": "t", "contender": c, "seed": 1, "learning_rate": lr,
        ...     "metric_name": "accuracy", "validation_metric": v, "train_seconds": 10.0}
        >>> runs = [run("stock", 5e-5, 0.8), run("stock-lr-0.0001", 1e-4, 0.9)]
        >>> found = sweep_summary({"stock": {"seeds": [1]}, "stock-lr-0.0001": {"seeds": [1]}}, runs)
        >>> found["chosen"], found["sweep_train_seconds"]
        ('stock-lr-0.0001', 20.0)
    """
    swept = [r for r in runs if sweep_learning_rate(r["contender"]) is not None and "error" not in r]
    if not swept:
        return None
    seed = min(r["seed"] for r in swept)
    chosen = sweep_choice(runs, swept[0]["task"], seed)
    at_seed = [
        r for r in runs
        if r["seed"] == seed and "error" not in r and (r["contender"] == "stock" or r in swept)
    ]  # fmt: skip
    candidates = {
        r["contender"]: {
            "learning_rate": r.get("learning_rate"),
            "validation_metric": r["validation_metric"],
            "train_seconds": r.get("train_seconds"),
        }
        for r in at_seed
    }
    seconds = [c["train_seconds"] for c in candidates.values() if c["train_seconds"] is not None]
    return {
        **by[chosen],
        "chosen": chosen,
        "choice_seed": seed,
        "candidates": candidates,
        "sweep_train_seconds": sum(seconds) if seconds else None,
    }


def _summary(group: list[dict]) -> dict:
    ok = [r for r in group if "error" not in r]
    out: dict = {
        "seeds": sorted(r["seed"] for r in ok),
        "failed_seeds": sorted(r["seed"] for r in group if "error" in r),
    }
    for key in ("metric_name", "batch_size", "learning_rate", "epochs", "precision", "extra_flags"):
        values = list(dict.fromkeys(json.dumps(r.get(key), default=str) for r in ok))
        out[key] = json.loads(values[0]) if len(values) == 1 else [json.loads(v) for v in values]
    for key in SUMMARISED:
        values = [r[key] for r in ok if r.get(key) is not None]
        out[key] = mean_spread(values) if values else None
    shares = {"forward_backward": [], "optimizer": [], "other": []}
    for r in ok:
        if r.get("train_seconds"):
            for part in shares:
                shares[part].append(100 * r[f"{part}_s"] / r["train_seconds"])
    for part, values in shares.items():
        out[f"{part}_percent"] = mean_spread(values) if values else None
    return out


def _mean(summary: dict, task: str, contender: str, key: str) -> float | None:
    found = summary.get(task, {}).get(contender, {}).get(key)
    return found["mean"] if found else None


def speed_ratio(summary: dict, task: str, contender: str, base: str) -> float | None:
    """Mean real training tokens/s of ``contender`` over that of ``base`` (None if either lacks)."""
    a = _mean(summary, task, contender, "train_real_tokens_per_s")
    b = _mean(summary, task, base, "train_real_tokens_per_s")
    return a / b if a is not None and b else None


def compare_metric(ours: dict | None, theirs: dict | None, lower_is_better: bool = False) -> str | None:
    """``"higher"``, ``"equal"`` or ``"lower"`` (better, as good, worse; None without data).

    Equal: the difference of the means is within the larger of the two standard deviations.

    Example:
        >>> compare_metric({"mean": 0.80, "std": 0.01}, {"mean": 0.805, "std": 0.004})
        'equal'
    """
    if not ours or not theirs:
        return None
    difference = ours["mean"] - theirs["mean"]
    if lower_is_better:
        difference = -difference
    if abs(difference) <= max(ours["std"], theirs["std"]):
        return "equal"
    return "higher" if difference > 0 else "lower"


def targets(summary: dict) -> dict:
    """Per task, issue 15's three training targets: each with its measured value and met or not
    (None where a contender has no successful run)."""
    out = {}
    for task, by in summary.items():
        same = speed_ratio(summary, task, "toolkit-same-batch", "stock-tuned")
        defaults = speed_ratio(summary, task, "toolkit", "stock")
        name = (by.get("toolkit") or by.get("stock-tuned") or {}).get("metric_name") or ""
        lower = lower_is_better(name)
        ours = by.get("toolkit", {}).get("test_metric")
        theirs = by.get("stock-tuned", {}).get("test_metric")
        verdict = compare_metric(ours, theirs, lower)
        out[task] = sweep_targets(by, lower)
        out[task][:0] = [
            {
                "target": f"toolkit-same-batch / stock-tuned speed >= {SAME_BATCH_TARGET}x",
                "value": same,
                "met": None if same is None else same >= SAME_BATCH_TARGET,
            },
            {
                "target": f"toolkit / stock speed >= {DEFAULTS_TARGET:g}x",
                "value": defaults,
                "met": None if defaults is None else defaults >= DEFAULTS_TARGET,
            },
            {
                "target": "toolkit test metric at least stock-tuned's",
                "value": verdict,
                "toolkit": ours,
                "stock-tuned": theirs,
                "met": None if verdict is None else verdict in ("higher", "equal"),
            },
        ]
    return out


def sweep_targets(by: dict, lower: bool) -> list[dict]:
    """Issue 31's two targets where the stock sweep ran: the toolkit's one default run scores
    at least the sweep's best on test (within the larger spread counts), at no more train time
    than one stock run."""
    sweep, toolkit, stock = by.get(STOCK_SWEEP), by.get("toolkit"), by.get("stock")
    if not sweep:
        return []
    ours, theirs = (toolkit or {}).get("test_metric"), sweep.get("test_metric")
    verdict = compare_metric(ours, theirs, lower)
    cost = None
    if toolkit and stock and toolkit.get("train_seconds") and stock.get("train_seconds"):
        cost = toolkit["train_seconds"]["mean"] / stock["train_seconds"]["mean"]
    return [
        {
            "target": "toolkit test metric at least stock-lr-sweep's (best rate on validation)",
            "value": verdict,
            "toolkit": ours,
            "stock-lr-sweep": theirs,
            "met": None if verdict is None else verdict in ("higher", "equal"),
        },
        {
            "target": "toolkit train time <= one stock run's",
            "value": cost,
            "met": None if cost is None else cost <= 1.0,
        },
    ]


def fmt_spread(found: dict | None, digits: int | None = None) -> str:
    """``0.823 ± 0.004``; 3 decimals below 10, 1 from 10 (QA's F1 is 0-100); ``-`` without data.
    One seed has no spread: its value alone."""
    if not found:
        return "-"
    if digits is None:
        digits = 3 if abs(found["mean"]) < 10 else 1
    if found.get("n", 2) < 2:
        return f"{found['mean']:.{digits}f}"
    return f"{found['mean']:.{digits}f} ± {found['std']:.{digits}f}"


def fmt_speed(found: dict | None) -> str:
    """``1,905 ± 40`` tokens/s (one seed: ``1,905``)."""
    if not found:
        return "-"
    return f"{found['mean']:,.0f}" + (f" ± {found['std']:,.0f}" if found.get("n", 2) > 1 else "")


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _setting(value) -> str:
    if isinstance(value, list):
        return "/".join("-" if v is None else str(v) for v in value)
    return "-" if value is None else str(value)


def _metric_name(name) -> str:
    return _setting(name).removeprefix("eval_").removeprefix("test_")


def _metric_cell(entry: dict, key: str) -> str:
    cell = fmt_spread(entry.get(key))
    if not entry["seeds"]:
        return f"failed (all {len(entry['failed_seeds'])} seeds)"
    if entry["failed_seeds"]:
        cell += f" ({len(entry['seeds'])} of {len(entry['seeds']) + len(entry['failed_seeds'])} seeds)"
    return cell


def dataset_label(task: str, info: dict) -> str:
    """``classification (AG News)``: the task and its dataset's name (the dataset line up to its
    first comma, colon or parenthesis; the whole line is in the result file's ``sizes``)."""
    line = str(info.get("dataset") or "")
    short = line.split(",")[0].split(":")[0].split("(")[0].strip()
    return f"{task} ({short})" if short else task


def training_table(summary: dict, sizes: dict) -> dict:
    columns = [
        "task (dataset)",
        "contender",
        "batch",
        "precision",
        "validation metric",
        "test metric",
        "train real tok/s",
        "x stock",
        "x stock-tuned",
        "train MFU",
        "peak RSS MiB",
    ]
    rows, notes = [], []
    for task, by in summary.items():
        label = dataset_label(task, sizes.get(task, {}))
        names = {_metric_name(e.get("metric_name")) for e in by.values() if e.get("metric_name")}
        if names:
            label += ", " + "/".join(sorted(names))
        for i, (contender, entry) in enumerate(by.items()):
            rss = entry.get("peak_rss_mib")
            mfu = entry.get("train_mfu")
            rows.append(
                [
                    label if i == 0 else "",
                    contender,
                    _setting(entry.get("batch_size")),
                    _setting(entry.get("precision")),
                    _metric_cell(entry, "validation_metric"),
                    _metric_cell(entry, "test_metric") if entry["seeds"] else "",
                    fmt_speed(entry.get("train_real_tokens_per_s")),
                    fmt_ratio(speed_ratio(summary, task, contender, "stock")),
                    fmt_ratio(speed_ratio(summary, task, contender, "stock-tuned")),
                    fmt_spread(mfu, 3) if mfu else "-",
                    f"{rss['mean']:,.0f}" if rss else "-",
                ]
            )
            if entry.get("extra_flags"):
                notes.append(f"{task} {contender}: toolkit defaults + {shlex.join(entry['extra_flags'])}")
        if sizes.get(task, {}).get("dataset"):
            notes.append(f"{task}: {sizes[task]['dataset']}")
    return {"columns": columns, "rows": rows, "notes": "\n".join(notes)}


def shares_table(summary: dict) -> dict:
    columns = ["task", "contender", "forward+backward %", "optimiser %", "other (data, scheduler, logging) %"]
    rows = []
    for task, by in summary.items():
        for i, (contender, entry) in enumerate(by.items()):
            rows.append(
                [
                    task if i == 0 else "",
                    contender,
                    fmt_spread(entry.get("forward_backward_percent"), 1),
                    fmt_spread(entry.get("optimizer_percent"), 1),
                    fmt_spread(entry.get("other_percent"), 1),
                ]
            )
    return {
        "columns": columns,
        "rows": rows,
        "notes": "share of trainer.train() wall time, mean ± std over seeds (benchmarks/common.py StepTimer)",
    }


def targets_table(found: dict) -> dict:
    columns = ["task", "target", "measured", "met"]
    rows = []
    for task, items in found.items():
        for i, item in enumerate(items):
            value = item["value"]
            if isinstance(value, float):
                measured = fmt_ratio(value)
            elif value is None:
                measured = "no data"
            else:
                other = "stock-lr-sweep" if "stock-lr-sweep" in item else "stock-tuned"
                measured = f"{fmt_spread(item['toolkit'])} vs {fmt_spread(item[other])} ({value})"
            met = "no data" if item["met"] is None else "met" if item["met"] else "not met"
            rows.append([task if i == 0 else "", item["target"], measured, met])
    return {
        "columns": columns,
        "rows": rows,
        "notes": "speed: ratio of mean real training tokens/s; metric: equal when the difference "
        "of the means is within the larger standard deviation",
    }


def variants_table(summary: dict) -> dict:
    """Each toolkit variant against the toolkit's defaults on the VALIDATION metric (how a
    default is checked without a test split), with its speed ratio; the test metric is left out
    on purpose (it is in the training table, never used for a choice)."""
    columns = ["task", "variant", "extra flags", "batch", "validation: defaults", "validation: variant"]
    columns += ["variant vs defaults", "speed vs defaults"]
    rows = []
    for task, by in summary.items():
        defaults = by.get("toolkit")
        for contender, entry in by.items():
            if contender in CONTENDERS or not contender.startswith("toolkit-") or not defaults:
                continue
            lower = "perplexity" in str(entry.get("metric_name")) or "loss" in str(entry.get("metric_name"))
            verdict = compare_metric(entry.get("validation_metric"), defaults.get("validation_metric"), lower)
            rows.append(
                [
                    task,
                    contender,
                    shlex.join(entry.get("extra_flags") or []),
                    f"{_setting(defaults.get('batch_size'))} / {_setting(entry.get('batch_size'))}",
                    _metric_cell(defaults, "validation_metric"),
                    _metric_cell(entry, "validation_metric"),
                    {"higher": "better", "lower": "worse", "equal": "within the spread"}.get(verdict, "-"),
                    fmt_ratio(speed_ratio(summary, task, contender, "toolkit")),
                ]
            )
    return {"columns": columns, "rows": rows}


def sweep_table(summary: dict) -> dict:
    """Per task: every swept rate's mean validation score, the rate chosen on it, the sweep's
    test score against the toolkit's one default run, and what each costs in train time."""
    columns = ["task", "validation by learning rate (first seed)", "chosen", "stock-lr-sweep test"]
    columns += ["toolkit test"]
    columns += ["toolkit vs sweep", "sweep train s (one run per rate)", "toolkit train s"]
    rows = []
    for task, by in summary.items():
        sweep, toolkit = by.get(STOCK_SWEEP), by.get("toolkit") or {}
        if not sweep:
            continue
        lower = lower_is_better(sweep.get("metric_name"))
        verdict = compare_metric(toolkit.get("test_metric"), sweep.get("test_metric"), lower)
        candidates = sorted(sweep["candidates"].values(), key=lambda c: c["learning_rate"])
        digits = 3 if all(abs(c["validation_metric"]) < 10 for c in candidates) else 1
        seconds = toolkit.get("train_seconds")
        rows.append(
            [
                f"{task}, {_metric_name(sweep.get('metric_name'))}",
                ", ".join(f"{c['learning_rate']:g}: {c['validation_metric']:.{digits}f}" for c in candidates),
                f"{sweep['learning_rate']:g}",
                _metric_cell(sweep, "test_metric"),
                _metric_cell(toolkit, "test_metric") if toolkit else "-",
                {"higher": "higher", "lower": "lower", "equal": "within the spread"}.get(verdict, "-"),
                f"{sweep['sweep_train_seconds']:.0f}" if sweep.get("sweep_train_seconds") else "-",
                f"{seconds['mean']:.0f}" if seconds else "-",
            ]
        )
    return {
        "columns": columns,
        "rows": rows,
        "notes": "one run per rate on the first seed; the rate is chosen on its validation score "
        "there, never on test, and then run on every seed; the stock row's own 5e-5 is a candidate "
        "too; test: mean ± std over seeds; within the spread: "
        "the difference of the means is within the larger standard deviation",
    }


def build_tables(summary: dict, sizes: dict, found_targets: dict) -> dict:
    tables = {
        "training": training_table(summary, sizes),
        "time-shares": shares_table(summary),
        "targets": targets_table(found_targets),
        "variants": variants_table(summary),
    }
    if any(STOCK_SWEEP in by for by in summary.values()):
        tables["stock-sweep"] = sweep_table(summary)
    return tables


# ---- the driver --------------------------------------------------------------------------------
def parse_variants(specs: list[str]) -> tuple[dict[str, list[str] | None], dict[str, dict[str, list[str]]]]:
    """Variant rows: ``NAME=FLAGS`` for every task, ``NAME@TASK=FLAGS`` for one task (it wins
    there; a name given only with ``@TASK`` runs only for those tasks).

    ``["toolkit-tokens=--max_tokens_per_batch 256", "toolkit-tokens@qa=--max_tokens_per_batch 4096"]``
    -> ``({"toolkit-tokens": [...256]}, {"toolkit-tokens": {"qa": [...4096]}})``.
    """
    variants: dict[str, list[str] | None] = {}
    per_task: dict[str, dict[str, list[str]]] = {}
    for spec in specs:
        target, sep, flags = spec.partition("=")
        name, _, task = target.strip().partition("@")
        if not sep or not name.startswith("toolkit-") or name in CONTENDERS or (task and task not in TASKS):
            raise SystemExit(
                f"--variant {spec!r}: want NAME=FLAGS or NAME@TASK=FLAGS with a new name starting 'toolkit-'"
            )
        if task:
            per_task.setdefault(name, {})[task] = shlex.split(flags)
            variants.setdefault(name, None)
        else:
            variants[name] = shlex.split(flags)
    return variants, per_task


def chosen_contenders(names: str, rates: str, tasks: list[str]) -> tuple[dict, dict]:
    """``--contenders`` and ``--sweep_rates`` as ``(contenders, per_task)`` in
    :func:`parse_variants`' shapes: ``stock-lr-sweep`` becomes one stock contender per rate,
    run on the sweep's tasks only.

    Example:
        >>> chosen_contenders("stock,stock-lr-sweep", "1e-4", ["ner", "mlm"])
        ({'stock': [], 'stock-lr-0.0001': None}, {'stock-lr-0.0001': {'ner': []}})
    """
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = sorted(set(wanted) - {*CONTENDERS, STOCK_SWEEP})
    if unknown:
        raise SystemExit(
            f"--contenders: unknown {', '.join(unknown)}; choose from {', '.join((*CONTENDERS, STOCK_SWEEP))}"
        )
    contenders: dict = {c: [] for c in CONTENDERS if c in wanted}
    per_task: dict = {}
    if STOCK_SWEEP in wanted:
        try:
            swept = [float(r) for r in rates.split(",") if r.strip()]
        except ValueError:
            raise SystemExit(
                f"--sweep_rates {rates!r}: expected comma-separated numbers such as 1e-5,3e-5"
            ) from None
        for rate in swept:
            name = sweep_contender(rate)
            contenders[name] = None  # runs only where per_task names the task
            per_task[name] = {t: [] for t in tasks if t in SWEEP_TASKS}
    return contenders, per_task


def flags_for(contenders: dict, per_task: dict, contender: str, task: str) -> list[str] | None:
    """The extra flags of ``contender`` on ``task``; None where it does not run."""
    return per_task.get(contender, {}).get(task, contenders[contender])


def plan(tasks: list[str], seeds: list[int], contenders: dict, per_task: dict | None = None) -> list[tuple]:
    """(task, contender, seed) in running order: task by task, seed-major within a task."""
    per_task = per_task or {}
    return [
        (t, c, s)
        for t in tasks
        for s in seeds
        for c in contenders
        if flags_for(contenders, per_task, c, t) is not None
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tasks", default=",".join(TASKS), help="comma-separated subset of " + ", ".join(TASKS)
    )
    parser.add_argument("--size", choices=("quick", "standard"), default="standard")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument(
        "--contenders",
        default=",".join((*CONTENDERS, STOCK_SWEEP)),
        help=f"comma-separated subset of {', '.join((*CONTENDERS, STOCK_SWEEP))} (variants come on top)",
    )
    parser.add_argument(
        "--sweep_rates",
        default=",".join(f"{r:g}" for r in STOCK_SWEEP_RATES),
        help="the learning rates of the stock-lr-sweep contender",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=FLAGS",
        help='an extra toolkit row, e.g. "toolkit-tokens=--max_tokens_per_batch 4096" (repeatable)',
    )
    parser.add_argument(
        "--resume", type=Path, help="a partial file of an interrupted run: skip its done runs"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--describe", help=argparse.SUPPRESS)
    parser.add_argument("--extra_flags", default="[]", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        task, contender, seed = args.worker.split(":")
        worker(task, contender, int(seed), args.size, json.loads(args.extra_flags), args.result)
        return
    if args.describe:
        describe_worker(args.describe, args.size, args.result)
        return

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        sys.exit(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    variants, per_task = parse_variants(args.variant)
    contenders, sweep_tasks = chosen_contenders(args.contenders, args.sweep_rates, tasks)
    per_task |= sweep_tasks
    contenders |= variants
    stamp = time.strftime("%Y%m%d-%H%M%S")
    partial = Path(tempfile.gettempdir()) / f"bench_all-training-{args.size}-{stamp}.partial"
    if args.resume:
        previous = cached(args.resume / "run.json")
        if previous is None:
            sys.exit(
                f"--resume {args.resume}: expected the partial folder of a run (with run.json), found none"
            )
        if previous["size"] != args.size:
            sys.exit(f"{args.resume} is a --size {previous['size']} run, not {args.size}")
        partial = args.resume
    logs = Path(tempfile.mkdtemp(prefix=f"bench_all-{stamp}-"))
    print(f"[bench_all] partial results: {partial}\n[bench_all] logs: {logs}", flush=True)
    begin = time.perf_counter()
    sizes = {task: task_sizes(task, args.size, logs) for task in tasks}
    command = invocation("bench_all", argv)
    cached(partial / "run.json", lambda: {"command": command, "size": args.size})  # what --resume checks
    # One file per run, written as it finishes (a crash loses nothing); a failed run is run again.
    planned = plan(tasks, seeds, contenders, per_task)
    runs: list[dict] = []
    for task, contender, seed in planned:
        # A swept rate runs on the first seed; after it, only the rate chosen there runs on.
        if seed != seeds[0] and sweep_learning_rate(contender) is not None:
            if contender != sweep_choice(runs, task, seeds[0]):
                continue
        runs.append(
            cached(
                partial / f"{task}-{contender}-seed{seed}.json",
                lambda t=task, c=contender, s=seed: launch(
                    t, c, s, args.size, flags_for(contenders, per_task, c, t), logs
                ),
                keep=lambda row: "error" not in row,
            )
        )
    # Runs a resumed folder holds beyond this plan (other tasks or seeds) come after its rows.
    names = {f"{t}-{c}-seed{s}.json" for t, c, s in planned}
    for path in sorted(partial.glob("*-seed*.json")):
        if path.name not in names and "error" not in (row := cached(path)):
            runs.append(row)
    summary = summarise(runs)
    found_targets = targets(summary)
    tables = build_tables(summary, sizes, found_targets)
    path = save_results(
        f"training-{args.size}",
        {
            "command": command,
            "size": args.size,
            "tasks": tasks,
            "seeds": seeds,
            "contenders": contenders,
            "variant_flags_per_task": per_task,
            "sizes": sizes,
            "runs": runs,
            "summary": summary,
            "targets": found_targets,
            "tables": tables,
            "total_seconds": time.perf_counter() - begin,
        },
    )
    for name, table in tables.items():
        print(f"\n{name}\n\n{render_markdown(table)}")
        if table.get("notes"):
            print("\n" + table["notes"])
    failed = [r for r in runs if "error" in r]
    if failed:
        print(
            f"\n{len(failed)} run(s) failed: "
            + ", ".join(f"{r['task']} {r['contender']} seed {r['seed']}" for r in failed)
        )
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()

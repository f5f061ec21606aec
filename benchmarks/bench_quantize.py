"""int8 against fp32 for every task: the task metric on validation data, and prediction speed.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python -m benchmarks.bench_quantize --work /tmp/bench-quantize
    .venv/bin/python -m benchmarks.bench_quantize --size quick --work /tmp/bench-quantize-quick   # smoke

Per task, one MiniLM-L6 run (``sentence-transformers/all-MiniLM-L6-v2``) is trained with the
toolkit's defaults on a training subset of the task's suite module (``benchmarks/suite/<task>.py``:
the same files, splits and seed-0 subsets as ``bench_all.py``; embedding trains on the pair suite's
STS-B files), then ``encoder-tasks quantize`` writes its int8 copy, and

- **metric**: both models are scored on the **validation** split (never test) by the report of
  ``encoder-tasks quantize`` (the task's ``evaluate`` path, both in fp32 on the CPU): the task's
  own metric (MLM: the masked-token loss, lower is better), and its change relative to fp32;
- **speed**: the ``predict`` path itself (:class:`encoder_tasks.inference.Predictor`: tokenising,
  batching, the model, decoding) over the validation split's inputs as JSON records, at the same
  batch size (``--batch_size``, 64): the fp32 run in fp32, the int8 run (fp32 around its int8
  layers), and the fp32 run at ``--precision auto`` (bf16 where the CPU runs it natively: this
  machine's default, for context). One warm-up pass, then the median of ``--repeats`` (3) timed
  passes. Also kept: the report's forward-only speed-up (the model on the evaluation's batches);
- **agreement**: the share of int8 records equal to the fp32 records in everything but their
  numbers (labels, tags, entity spans, answers, MLM candidates), and the largest number difference.

Rows: the six tasks, plus ``mlm-heads``: the same MLM run quantized with ``--heads`` (its
vocabulary projection in int8 too), which shows whether the head is worth quantizing.

Trained runs, int8 copies and each finished task are kept under ``--work`` (keyed by size), so an
interrupted run continues where it stopped (``--redo`` measures finished tasks again, reusing
the trained runs). Time only on a quiet machine: the result file records threads and versions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from encoder_tasks.runtime import configure_cpu_runtime

configure_cpu_runtime()  # before torch loads, as the CLI does (OpenMP reads it once)

from benchmarks.common import print_table, save_results  # noqa: E402
from benchmarks.harness import cached, invocation, timed  # noqa: E402
from benchmarks.suite import classification, mlm, ner, pair, qa  # noqa: E402
from benchmarks.suite.toolkit_run import suite_flags, train_toolkit  # noqa: E402

SEED = 1
TASKS = ("classification", "ner", "pair", "qa", "embedding", "mlm")
#: Rows: every task, plus MLM with its vocabulary projection in int8 too (``quantize --heads``).
ROWS = (*TASKS, "mlm-heads")
#: The suite size each task trains and validates on. QA's ``standard`` suite size (80 training
#: questions) leaves a model too weak to show what int8 costs; this script adds a bigger one.
qa.SIZES.setdefault("quantize", {"train": 800, "validation": 300, "test": 16, "epochs": 2})
SIZES = {
    "quick": {"suite": {t: "quick" for t in TASKS}, "inputs": 48},
    "standard": {"suite": {**{t: "standard" for t in TASKS}, "qa": "quantize"}, "inputs": 1000},
}


@dataclass(frozen=True)
class Setup:
    """One task of this benchmark: its data, how it trains and how its inputs read."""

    task: str
    dataset: str
    module: object  # the suite module whose splits() writes the files
    #: Flags for ``<task> train`` beyond the data files (columns, length, epochs).
    train_flags: tuple[str, ...]
    #: Flags ``<task> evaluate`` needs to read the validation file beyond the saved settings.
    read_flags: tuple[str, ...] = ()
    metric: str | None = None  # None: the task's own objective
    predict_flags: dict = field(default_factory=dict)
    #: ``quantize --heads``: the head's linear layers in int8 too.
    heads: bool = False


SETUPS = {
    "classification": Setup(
        "classification",
        "SST-2 (1,000 sentences of train.tsv held out)",
        classification,
        (*classification.SST2.toolkit_flags, "--max_length", "128"),
    ),
    "ner": Setup("ner", "WikiANN-en dev (seed-0 sample)", ner, ("--max_length", "128")),
    "pair": Setup("pair", "STS-B dev", pair, (*pair.STSB.toolkit_flags, "--max_length", "128")),
    "qa": Setup(
        "qa",
        "SQuADShifts Amazon (seed-0 sample)",
        qa,
        ("--max_length", str(qa.MAX_LENGTH), "--doc_stride", str(qa.DOC_STRIDE), "--learning_rate", "5e-4"),
    ),
    "embedding": Setup(
        "embedding",
        "STS-B dev",
        pair,
        ("--text_column", "sentence1", "--text_pair_column", "sentence2", "--score_column", "score"),
        ("--text_column", "sentence1", "--text_pair_column", "sentence2", "--score_column", "score"),
    ),
    "mlm": Setup(
        "mlm", "WikiText-2 (6 held-out articles)", mlm, ("--max_length", "128", "--mask_rate", "0.15")
    ),
}
SETUPS["mlm-heads"] = replace(SETUPS["mlm"], heads=True)


# ---- data and inputs ----------------------------------------------------------------------------
def split_files(setup: Setup, suite_size: str, work: Path) -> dict[str, Path]:
    files = setup.module.splits(suite_size, work)
    return files[0] if isinstance(files, tuple) else files  # mlm also returns its sizes


def records_for(task: str, path: Path, limit: int) -> list[dict]:
    """The validation split's inputs as the JSON records ``predict`` and the server take."""
    from encoder_tasks.data import read_file

    if task == "classification":
        return [{"text": s} for s in list(read_file(path)["sentence"])[:limit]]
    if task in ("pair", "embedding"):
        rows = read_file(path)
        return [
            {"text": a, "text_pair": b} for a, b in zip(rows["sentence1"][:limit], rows["sentence2"][:limit])
        ]
    if task == "ner":
        words, _ = ner.read_sentences(path)
        return [{"tokens": w} for w in words[:limit]]
    if task == "qa":
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        questions = [
            {"id": q["id"], "question": q["question"], "context": p["context"]}
            for article in data
            for p in article["paragraphs"]
            for q in p["qas"]
        ]
        return questions[:limit]
    # mlm: the validation text in pieces of 48 words, every 7th word masked (about 15%).
    words = path.read_text(encoding="utf-8").split()
    pieces = [words[i : i + 48] for i in range(0, len(words), 48)]
    return [
        {"text": " ".join("[MASK]" if i % 7 == 3 else w for i, w in enumerate(piece))}
        for piece in pieces[:limit]
    ]


# ---- the steps ------------------------------------------------------------------------------------
def trained_run(setup: Setup, files: dict[str, Path], suite_size: str, work: Path) -> Path:
    """The task's MiniLM run (trained once per size; reused from ``work`` when complete)."""
    run_dir = work / "runs" / f"{setup.task}-{suite_size}"
    if (run_dir / "model.safetensors").exists() and (run_dir / "metrics.json").exists():
        print(f"[quantize] {setup.task}: reusing {run_dir}", flush=True)
        return run_dir
    shutil.rmtree(run_dir, ignore_errors=True)
    flags = suite_flags(files, setup.module.SIZES[suite_size]["epochs"], *setup.train_flags)
    print(f"[quantize] {setup.task}: training {run_dir}", flush=True)
    train_toolkit(setup.task, flags, SEED, run_dir)
    return run_dir


def agreement(found: list, expected: list) -> tuple[float, float]:
    """(share of records equal but for their numbers, largest number difference)."""
    largest = 0.0

    def same(a, b) -> bool:
        nonlocal largest
        if isinstance(b, dict):
            return isinstance(a, dict) and a.keys() == b.keys() and all([same(a[k], b[k]) for k in b])
        if isinstance(b, list):
            return isinstance(a, list) and len(a) == len(b) and all([same(x, y) for x, y in zip(a, b)])
        if isinstance(b, float):
            largest = max(largest, abs(a - b))
            return True
        return a == b

    equal = sum(same(a, b) for a, b in zip(found, expected))
    return equal / len(expected), largest


def predict_speeds(setup: Setup, run_dir: Path, int8_dir: Path, records: list, args) -> dict:
    """The predict path's speed for fp32, int8 and bf16 (auto) on the same records and batch."""
    from encoder_tasks.inference import Predictor
    from encoder_tasks.predict import uses_bf16

    flags = {"batch_size": args.batch_size, **setup.predict_flags}
    contenders = {
        "fp32": (run_dir, {"precision": "fp32"}),
        "int8": (int8_dir, {}),
        "bf16": (run_dir, {"precision": "auto"}),
    }
    rows, outputs = {}, {}
    for name, (folder, precision) in contenders.items():
        predictor = Predictor.load(folder, **flags, **precision)
        parsed = predictor.parse(records)
        tokens = sum(predictor.count_tokens(parsed))
        print(
            f"[quantize] {setup.task}{' --heads' if setup.heads else ''}: predicting {len(parsed)} inputs with the {name} model",
            flush=True,
        )
        median, seconds, outputs[name] = timed(lambda p=predictor, x=parsed: p.predict(x), args.repeats)
        rows[name] = {
            "precision": predictor.args.precision,
            "seconds": median,
            "seconds_all": seconds,
            "inputs_per_s": len(parsed) / median,
            "real_tokens_per_s": tokens / median,
        }
    rows["bf16"]["computes_in"] = "bf16" if uses_bf16("cpu", "auto") else "fp32"
    share, largest = agreement(outputs["int8"], outputs["fp32"])
    return {
        "inputs": len(records),
        "batch_size": args.batch_size,
        "rows": rows,
        "int8_x_fp32": rows["fp32"]["seconds"] / rows["int8"]["seconds"],
        "bf16_x_fp32": rows["fp32"]["seconds"] / rows["bf16"]["seconds"],
        "int8_records_equal_to_fp32": share,
        "int8_largest_number_difference": largest,
    }


def bench_task(name: str, args, work: Path) -> dict:
    """One row: train (or reuse) the task's run, quantize it, time the predict path (a row
    measured before at this size is read from ``work/results``, unless ``--redo``)."""
    done = work / "results" / f"{name}-{args.size}.json"
    if done.is_file() and not args.redo:
        print(f"[quantize] {name}: already measured ({done})", flush=True)
    return cached(done, lambda: measure_row(name, args, work), redo=args.redo)


def measure_row(name: str, args, work: Path) -> dict:
    """Train (or reuse) the row's run, quantize it, time the predict path."""
    from encoder_tasks.commands.quantize import quantize_run

    setup = SETUPS[name]
    task = setup.task
    suite_size = SIZES[args.size]["suite"][task]
    files = split_files(setup, suite_size, work)
    run_dir = trained_run(setup, files, suite_size, work)
    int8_dir = work / "int8" / f"{name}-{suite_size}"
    report = quantize_run(
        run_dir,
        int8_dir,
        heads=setup.heads,
        overwrite=True,
        validation_file=str(files["validation"]),
        eval_flags=list(setup.read_flags),
        batch_size=args.batch_size,
        repeats=args.repeats,
        metric=setup.metric,
    )
    records = records_for(task, files["validation"], SIZES[args.size]["inputs"])
    result = {
        "row": name,
        "task": task,
        "heads_quantized": setup.heads,
        "dataset": setup.dataset,
        "suite_size": suite_size,
        "suite_sizes": setup.module.SIZES[suite_size],
        "run_dir": str(run_dir),
        "int8_dir": str(int8_dir),
        "report": report,
        "predict": predict_speeds(setup, run_dir, int8_dir, records, args),
    }
    return result


# ---- tables -----------------------------------------------------------------------------------
def quantize_tables(results: dict, args) -> dict:
    """The ``quantize`` table (docs/quantization.md renders it with benchmarks/tables.py)."""
    columns = [
        "task (validation data)",
        "metric",
        "fp32",
        "int8",
        "relative change",
        "fp32 inputs/s",
        "int8 inputs/s",
        "int8 x fp32",
        "bf16 inputs/s",
        "bf16 x fp32",
        "forward only: int8 x fp32",
        "weights MB fp32 / int8",
        "int8 records equal to fp32",
    ]
    rows = []
    for r in results.values():
        metric, speed, size = r["report"]["metric"], r["predict"], r["report"]["size"]
        rows.append(
            [
                f"{r['task']}{' (--heads)' if r.get('heads_quantized') else ''} ({r['dataset']})",
                metric["name"].removeprefix("eval_")
                + ("" if metric["higher_is_better"] else " (lower is better)"),
                f"{metric['before']:.4f}",
                f"{metric['after']:.4f}",
                f"{metric['relative_change']:+.2%}",
                f"{speed['rows']['fp32']['inputs_per_s']:,.1f}",
                f"{speed['rows']['int8']['inputs_per_s']:,.1f}",
                f"{speed['int8_x_fp32']:.2f}x",
                f"{speed['rows']['bf16']['inputs_per_s']:,.1f}",
                f"{speed['bf16_x_fp32']:.2f}x",
                f"{r['report']['speed']['speedup']:.2f}x",
                f"{size['fp32_bytes'] / 1e6:.1f} / {size['int8_bytes'] / 1e6:.1f}",
                f"{speed['int8_records_equal_to_fp32']:.3f}",
            ]
        )
    notes = [
        f"batch {args.batch_size}, median of {args.repeats} timed passes after a warm-up; "
        "targets: <= 1% relative metric loss, >= 1.5x fp32 throughput",
        *(
            f"{name}: {r['predict']['inputs']} inputs; {len(r['report']['quantization']['layers'])} int8 layers, "
            f"{r['report']['quantization']['engine']} kernels"
            for name, r in results.items()
        ),
    ]
    return {"quantize": {"columns": columns, "rows": rows, "notes": notes}}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size", choices=sorted(SIZES), default="standard", help="quick: a smoke run, not a measurement"
    )
    parser.add_argument("--tasks", default=",".join(ROWS), help=f"rows to measure, from {', '.join(ROWS)}")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes after the warm-up (median kept)")
    parser.add_argument(
        "--work", required=True, help="where the data, trained runs and finished tasks are kept"
    )
    parser.add_argument(
        "--redo", action="store_true", help="measure finished tasks again (trained runs are reused)"
    )
    args = parser.parse_args()
    work = Path(args.work)
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = sorted(set(tasks) - set(ROWS))
    if unknown:
        sys.exit(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(ROWS)}")
    results = {task: bench_task(task, args, work) for task in tasks}
    tables = quantize_tables(results, args)
    print(f"\nint8 against fp32, MiniLM-L6, {args.size} sizes")
    table = tables["quantize"]
    print_table([dict(zip(table["columns"], row)) for row in table["rows"]], table["columns"])
    path = save_results(
        "quantize",
        {
            "command": invocation("bench_quantize"),
            "size": args.size,
            "sizes": SIZES[args.size],
            "args": vars(args),
            "results": results,
            "tables": tables,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()

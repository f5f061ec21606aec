"""[CLS] against mean pooling for the sequence head, on validation data, over several seeds.

    .venv/bin/python -m benchmarks.bench_pooling                                   # 2,000 x 2 epochs, 18 runs
    .venv/bin/python -m benchmarks.bench_pooling --train_samples 1000 --epochs 1   # the smaller setting
    .venv/bin/python -m benchmarks.bench_pooling --datasets sst2 --seeds 1 --train_samples 500  # a smoke run
    .venv/bin/python -m benchmarks.bench_pooling --sets all --train_samples 1000 --epochs 1   # per head type

``--sets``: issue 31's re-decision on four datasets per head type (single-label, regression
pair, classification pair; :mod:`benchmarks.derived_sets`), scored on each set's validation
split; the result file carries a ``pooling-by-head`` table and its per-head summary.

18 runs of about 2 minutes on the idle 2-core machine (2,000 x 2). Results and the decision they
led to: docs/ecosystem.md, "How the default pooling was chosen".

Why: ``--pooling`` decides whether a classifier exports to the plain stock
``AutoModelForSequenceClassification`` layout (``cls``) or needs the small modeling file shipped
with the export (``mean``, ``max``). This script measures what the choice costs in accuracy, so the
default is picked from numbers (docs/ecosystem.md, "How defaults were chosen").

Every run is ``encoder-tasks <task> train`` with the toolkit's defaults (the task's quick-start
recipe where there is one) on MiniLM-L6 (``sentence-transformers/all-MiniLM-L6-v2``), the same
training subset, epochs and batch size for both poolings, one run after the other on this machine,
each in its own process. Only ``--pooling`` and ``--seed`` change. Scores are on VALIDATION data,
never a test split:

- ``sst2-val``: SST-2 sentiment (2 classes), scored on 1,000 sentences carved from ``train.tsv``
  (fixed seed 0, never trained on); accuracy. SST-2's dev set (872) is the benchmark suite's test
  split (``benchmarks/suite/classification.py``), so no choice may read it.
- ``sst2``: the same, scored on the dev set: kept only to reproduce the first study's results file
  (``pooling-20261130-091821.json``), whose SST-2 rows read dev.tsv; not in the default set.
- ``topic``: which of 35 Wikipedia articles a SQuAD v2 question was asked about (the questions of
  ``qa/squad-v2-dev``); it has no validation split, so ``--topic_validation`` questions are held
  out of it (fixed seed 0, the same for every run) and scored; accuracy.
- ``stsb``: STS-B similarity (cross-encoder regression, the ``pair`` task), scored on its dev set
  (1,500 pairs); Spearman.

The training subset is ``--max_train_samples`` drawn with the run's seed, so pooling ``mean`` and
``cls`` with the same seed see the same examples (a paired comparison); the seed also draws the
head's initial weights and the batch order. The table gives, per dataset and pooling, the mean
and the sample standard deviation over the seeds, and the paired difference cls - mean.
Results are written after every run to ``benchmarks/results/pooling-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import DATA, MINILM, RESULTS, print_table, require_data, worker_env
from benchmarks.derived_sets import DERIVED_SETS
from benchmarks.harness import REPO, describe

SQUAD = "qa/squad-v2-dev/dev-v2.0.json"
#: dataset -> (task, recipe or None, validation metric, what it is)
DATASETS = {
    "sst2": ("classification", "recipes/classification/default.yaml", "eval_accuracy", "SST-2 dev (872)"),
    "sst2-val": ("classification", None, "eval_accuracy", "SST-2, 1,000 sentences held out of train.tsv"),
    "topic": ("classification", None, "eval_accuracy", "SQuAD-v2 question topic, 35 classes, held-out"),
    "stsb": ("pair", "recipes/pair/default.yaml", "eval_spearman", "STS-B dev (1,500)"),
}
NEEDS = {
    "sst2": ["cls/sst2/train.tsv", "cls/sst2/dev.tsv"],
    "sst2-val": ["cls/sst2/train.tsv"],
    "topic": [SQUAD],
    "stsb": ["pair/stsb/sts-dev.csv"],
}


def write_topic_set(folder: Path, n_validation: int) -> tuple[Path, Path, int]:
    """``train.jsonl`` and ``validation.jsonl`` of (question, article title), carved with seed 0."""
    articles = json.loads((DATA / SQUAD).read_text())["data"]
    rows = [
        {"text": qa["question"].strip(), "label": article["title"]}
        for article in articles
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    random.Random(0).shuffle(rows)
    folder.mkdir(parents=True, exist_ok=True)
    train, validation = folder / "train.jsonl", folder / "validation.jsonl"
    for path, part in ((validation, rows[:n_validation]), (train, rows[n_validation:])):
        path.write_text("".join(json.dumps(r) + "\n" for r in part))
    return train, validation, len({r["label"] for r in rows})


def write_sst2_validation_set(folder: Path, n_validation: int) -> tuple[Path, Path]:
    """``train.jsonl`` and ``validation.jsonl`` of SST-2 ``train.tsv``, split with seed 0."""
    from encoder_tasks.data import read_file

    rows = [{"text": r["sentence"], "label": int(r["label"])} for r in read_file(DATA / "cls/sst2/train.tsv")]
    random.Random(0).shuffle(rows)
    folder.mkdir(parents=True, exist_ok=True)
    train, validation = folder / "train.jsonl", folder / "validation.jsonl"
    for path, part in ((validation, rows[:n_validation]), (train, rows[n_validation:])):
        path.write_text("".join(json.dumps(r) + "\n" for r in part))
    return train, validation


def train_flags(dataset: str, args, out: Path, carved: tuple[Path, Path] | None) -> list[str]:
    task, recipe, _, _ = DATASETS[dataset]
    flags = [task, "train"]
    if dataset in args.derived:
        derived = DERIVED_SETS[dataset]
        flags += ["--model_name_or_path", MINILM, "--train_file", str(carved[0])]
        flags += ["--validation_file", str(carved[1]), "--max_length", "128", *derived.flags]
    elif recipe:
        flags += ["--config", str(REPO / recipe), "--data_dir", str(DATA)]
    else:
        flags += ["--model_name_or_path", MINILM, "--train_file", str(carved[0])]
        flags += ["--validation_file", str(carved[1]), "--max_length", "128"]
    flags += ["--output_dir", str(out), "--max_train_samples", str(args.train_samples)]
    flags += ["--num_train_epochs", str(args.epochs), "--seed", str(args.seed_value)]
    flags += ["--pooling", args.pooling_value, "--save_strategy", "no", "--disable_tqdm", "true"]
    if args.batch_size:
        flags += ["--per_device_train_batch_size", str(args.batch_size)]
    return flags


def one_run(dataset: str, pooling: str, seed: int, args, carved) -> dict:
    """Train once in a fresh process; return the validation metric and timings."""
    _, _, metric, _ = DATASETS[dataset]
    args.seed_value, args.pooling_value = seed, pooling
    work = Path(tempfile.mkdtemp(prefix="bench-pooling-"))
    out = work / "run"
    cmd = [sys.executable, "-m", "encoder_tasks.cli", *train_flags(dataset, args, out, carved.get(dataset))]
    start = time.perf_counter()
    log = work / "log.txt"
    with log.open("w") as handle:
        done = subprocess.run(cmd, env=worker_env(), cwd=REPO, stdout=handle, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        tail = log.read_text()[-3000:]
        shutil.rmtree(work, ignore_errors=True)
        raise SystemExit(f"run {dataset}/{pooling}/seed {seed} failed:\n{tail}")
    metrics = json.loads((out / "metrics.json").read_text())
    shutil.rmtree(work, ignore_errors=True)
    return {
        "dataset": dataset,
        "pooling": pooling,
        "seed": seed,
        "metric_name": metric,
        "metric": metrics[metric],
        "eval_metrics": {k: v for k, v in metrics.items() if k.startswith("eval_") and isinstance(v, float)},
        "train_runtime": metrics.get("train_train_runtime") or metrics.get("train_runtime"),
        "wall_seconds": wall,
    }


def derived_entry(name: str) -> tuple:
    """A :mod:`benchmarks.derived_sets` set as a :data:`DATASETS` entry."""
    found = DERIVED_SETS[name]
    return (found.task, None, found.metric, found.description)


def head_tables(rows: list[dict], sets: list[str]) -> dict:
    """The ``pooling-by-head`` table: per derived set, its head type, both poolings, the paired
    difference (same seed, same examples) and two verdicts: the unpaired rule of the first study
    ([CLS] within the larger std of mean pooling) and the paired one ([CLS] worse or better than
    mean by more than the paired differences' std); then per head type, how often each held."""
    from benchmarks.tables import plus_minus

    table, held = [], {}
    for name in sets:
        found = {r["pooling"]: r for r in rows if r["dataset"] == name}
        if not {"mean", "cls"} <= set(found):
            continue
        mean, cls = found["mean"], found["cls"]
        ok = cls["mean"] >= mean["mean"] - max(cls["std"], mean["std"])
        diff, spread = cls["minus_mean_pooling"], cls["paired_std"]
        if diff is None or spread is None:
            paired_verdict, paired = "-", "-"
        else:
            paired = plus_minus(diff, spread, sign=True)
            paired_verdict = "cls worse" if diff < -spread else "cls better" if diff > spread else "within"
        head = DERIVED_SETS[name].head
        entry = held.setdefault(head, {"unpaired": 0, "worse": 0, "sets": 0})
        entry["sets"] += 1
        entry["unpaired"] += ok
        entry["worse"] += paired_verdict == "cls worse"
        table.append([
            head.replace("_", " "), name, mean["metric"], plus_minus(mean["mean"], mean["std"]),
            plus_minus(cls["mean"], cls["std"]), paired, "yes" if ok else "no", paired_verdict,
        ])  # fmt: skip
    summary = [
        [head.replace("_", " "), f"{e['unpaired']} of {e['sets']}", f"{e['worse']} of {e['sets']}"]
        for head, e in held.items()
    ]
    return {
        "pooling-by-head": {
            "columns": ["head", "dataset", "metric", "mean pooling", "[CLS]", "cls - mean (paired)",
                        "[CLS] within the unpaired spread", "paired verdict"],
            "rows": table,
            "notes": "validation splits only; mean ± std over seeds; unpaired: mean(cls) >= mean(mean) - "
            "the larger std; paired: the mean of the per-seed differences against their std",
        },
        "pooling-by-head-summary": {
            "columns": ["head", "[CLS] within the unpaired spread on", "[CLS] worse beyond the paired spread on"],
            "rows": summary,
        },
    }  # fmt: skip


def summarise(runs: list[dict], poolings: list[str]) -> list[dict]:
    """Per dataset and pooling: mean, sample std, min, max over seeds; paired difference vs mean."""
    rows = []
    for dataset in dict.fromkeys(r["dataset"] for r in runs):
        by_pooling = {
            p: {r["seed"]: r["metric"] for r in runs if r["dataset"] == dataset and r["pooling"] == p}
            for p in poolings
        }
        base = by_pooling.get("mean", {})
        for pooling, scores in by_pooling.items():
            if not scores:
                continue
            values = list(scores.values())
            paired = [scores[s] - base[s] for s in scores if s in base] if pooling != "mean" else []
            rows.append(
                {
                    "dataset": dataset,
                    "metric": DATASETS[dataset][2].removeprefix("eval_"),
                    "pooling": pooling,
                    "seeds": len(values),
                    "mean": statistics.fmean(values),
                    "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                    "min": min(values),
                    "max": max(values),
                    "minus_mean_pooling": statistics.fmean(paired) if paired else None,
                    "paired_std": statistics.stdev(paired) if len(paired) > 1 else None,
                }
            )
    return rows


def verdict(rows: list[dict]) -> dict:
    """Per dataset: is [CLS] at least as good as mean, within the seeds' spread?

    "Within the spread": mean(cls) >= mean(mean) - max(std(cls), std(mean)).
    """
    out = {}
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        found = {r["pooling"]: r for r in rows if r["dataset"] == dataset}
        if "cls" in found and "mean" in found:
            spread = max(found["cls"]["std"], found["mean"]["std"])
            out[dataset] = found["cls"]["mean"] >= found["mean"]["mean"] - spread
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default="sst2-val,topic,stsb")
    parser.add_argument("--poolings", default="mean,cls")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--train_samples", type=int, default=2000)
    parser.add_argument("--epochs", type=float, default=2)
    parser.add_argument("--batch_size", type=int, default=None, help="default: the toolkit's")
    parser.add_argument("--topic_validation", type=int, default=1000)
    parser.add_argument(
        "--sets",
        default="",
        help="comma-separated sets of benchmarks/derived_sets.py (or 'all') instead of --datasets: "
        "the per-head study, with a pooling-by-head table",
    )
    args = parser.parse_args()
    args.derived = [] if not args.sets else list(DERIVED_SETS) if args.sets == "all" else args.sets.split(",")
    unknown = sorted(set(args.derived) - set(DERIVED_SETS))
    if unknown:
        raise SystemExit(f"--sets: unknown {', '.join(unknown)}; choose from {', '.join(DERIVED_SETS)}")
    for name in args.derived:
        DATASETS[name] = derived_entry(name)
        NEEDS[name] = list(DERIVED_SETS[name].needs)
    datasets = args.derived or args.datasets.split(",")
    poolings = args.poolings.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    for name in datasets:
        require_data(*NEEDS[name])
    carved: dict[str, tuple[Path, Path]] = {}  # dataset -> (train, validation) files carved here
    info = {name: DATASETS[name][3] for name in datasets}
    folder = Path(tempfile.mkdtemp(prefix="bench-pooling-data-"))
    for name in args.derived:
        files = DERIVED_SETS[name].files(folder)
        carved[name] = (files["train"], files["validation"])  # test is never read here
    if "topic" in datasets and not args.derived:
        train, validation, n_classes = write_topic_set(folder / "topic", args.topic_validation)
        carved["topic"] = (train, validation)
        info["topic"] = (
            f"SQuAD-v2 question -> article ({n_classes} classes), {args.topic_validation} held out"
        )
    if "sst2-val" in datasets and not args.derived:
        carved["sst2-val"] = write_sst2_validation_set(folder / "sst2", 1000)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"pooling-{time.strftime('%Y%m%d-%H%M%S')}.json"
    runs: list[dict] = []
    record = {
        "environment": describe(),
        "model": MINILM,
        "args": vars(args),
        "datasets": info,
        "runs": runs,
    }
    # Seed outermost and poolings side by side: a machine that slows down mid-way slows both alike.
    for seed in seeds:
        for dataset in datasets:
            for pooling in poolings:
                print(f"[bench] {dataset} pooling={pooling} seed={seed} ...", flush=True)
                result = one_run(dataset, pooling, seed, args, carved)
                runs.append(result)
                print(
                    f"[bench]   {result['metric_name']} {result['metric']:.4f} ({result['wall_seconds']:.0f} s)",
                    flush=True,
                )
                record["summary"] = summarise(runs, poolings)
                path.write_text(json.dumps(record, indent=2, default=str))
    rows = summarise(runs, poolings)
    record["summary"], record["cls_at_least_as_good"] = rows, verdict(rows)
    if args.derived:
        record["tables"] = head_tables(rows, args.derived)
    path.write_text(json.dumps(record, indent=2, default=str))
    print(f"\nMiniLM-L6, {args.train_samples} training examples x {args.epochs} epochs, seeds {args.seeds}")
    print_table(rows, list(rows[0]))
    print("cls at least as good as mean (within the seeds' spread):", record["cls_at_least_as_good"])
    print("results:", path)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

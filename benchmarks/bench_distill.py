"""Distillation: a 3-layer student of each task's MiniLM-L6 quick-start run, against the ablation.

    python -m benchmarks.bench_distill --size standard --phase accuracy --work /tmp/distill-standard
    python -m benchmarks.bench_distill --size standard --phase speed --work /tmp/distill-standard
    python -m benchmarks.bench_distill --size quick --work /tmp/distill-quick   # a smoke run (minutes)

For SST-2 (classification), WNUT-17 (NER), STS-B (pair) and QA, per task (sizes in :data:`SIZES`):

1. the teacher: ``<task> train --config recipes/<task>/default.yaml`` (MiniLM-L6, the quick start's
   recipe: learning rate, batch, max_length, seed), on the split files below;
2. per seed, the distilled student: ``<task> distill`` with the same recipe, ``--teacher <teacher>
   --student_num_layers 3`` (teacher layers 0, 3, 5, its embeddings and head; T = 2, alpha = 0.5,
   the defaults: nothing is tuned);
3. per seed, the ablation: the same student, same start, data, epochs and seed, trained on the
   labels alone (``--distill_alpha 1``: the teacher never runs);
4. every model scored on validation (the metric of the table) and once on a test split no choice
   was made on; ``--phase speed`` times prediction (below).

Splits (files written once under ``--work``, data seed 0, the same for every run seed, so the
seeds change only the order of batches and dropout):

- SST-2: validation = 1,000 sentences carved from ``train.tsv`` (seed-0 permutation, as
  benchmarks/suite/classification.py does); training = the next sentences of that permutation;
  test = the official dev set (``dev.tsv``);
- WNUT-17: training = a seed-0 sample of ``wnut17train.conll``; validation = ``emerging.dev.conll``;
  test = ``emerging.test.annotated``;
- STS-B: training = a seed-0 sample of ``sts-train.csv``; validation = ``sts-dev.csv``; test =
  ``sts-test.csv``;
- QA: training = a seed-0 sample of SQuADShifts Reddit questions (the quick start's); validation =
  a seed-0 sample of SQuADShifts Amazon questions (the quick start chose its learning rate there);
  test = XQuAD-en (the quick start's evaluation set).

Speed (``--phase speed``, for a quiet machine): ``Predictor.load(run, precision=...)`` once per
model, a warm-up pass, then the median of 3 timed passes of ``predictor.predict`` over the same
validation inputs (parsed once, same batch size for both models): prediction only, no loading or
process start. fp32 and bf16. Every finished run, score and timing is kept in ``--work``, so a
rerun continues where an interrupted one stopped, and ``--phase speed`` reuses the trained runs.
Results go to ``benchmarks/results/distill-<size>-<time>.json`` with ``tables`` in
``benchmarks/tables.py``'s format (speed columns ``pending`` until measured).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common import DATA, REPO, print_table, require_data, save_results
from benchmarks.harness import cached, timed

#: task: metric in metrics.json, and the source files (train, validation, test) under DATA
TASKS = {
    "classification": ("eval_accuracy", ("cls/sst2/train.tsv", None, "cls/sst2/dev.tsv")),
    "ner": (
        "eval_f1_strict",
        (
            "ner/wnut17/wnut17train.conll",
            "ner/wnut17/emerging.dev.conll",
            "ner/wnut17/emerging.test.annotated",
        ),
    ),
    "pair": ("eval_spearman", ("pair/stsb/sts-train.csv", "pair/stsb/sts-dev.csv", "pair/stsb/sts-test.csv")),
    "qa": (
        "eval_f1",
        (
            "qa/squadshifts/squadshifts_reddit_v1.0.json",
            "qa/squadshifts/squadshifts_amazon_reviews_v1.0.json",
            "qa/xquad-en-dev/xquad.en.articles00-23.json",
        ),
    ),
}
#: SST-2's validation: the head of the seed-0 permutation of train.tsv; training comes after it.
SST2_CARVED = 1000
DATA_SEED = 0
#: Sentence separator of a CoNLL file (wnut17train.conll's blank lines hold a tab).
BLANK_LINE = re.compile(r"\n[ \t]*\n")


def _sizes(train, epochs, validation, test) -> dict:
    return {"train": train, "epochs": epochs, "validation": validation, "test": test}


SIZES = {
    # quick: a smoke run of the whole pipeline on a sliver of each data set.
    "quick": {"seeds": [1], "tasks": {t: _sizes(32, 1, 32, 32) for t in TASKS}},
    # standard: sized to run the accuracy phase of all four tasks in about 45 minutes on 2 busy CPU
    # cores (two workers). One epoch everywhere; QA on a small slice (its windows are 384 tokens).
    # None = the whole file.
    "standard": {
        "seeds": [1, 2, 3],
        "tasks": {
            "classification": _sizes(2000, 1, SST2_CARVED, None),
            "ner": _sizes(1000, 2, 300, 500),
            "pair": _sizes(1200, 2, 500, 500),
            "qa": _sizes(500, 1, 150, 300),
        },
    },
    # full: the quick-start recipes' own training sizes and epochs (~5 h on 2 CPU cores).
    "full": {
        "seeds": [1, 2, 3],
        "tasks": {
            "classification": _sizes(4000, 2, SST2_CARVED, None),
            "ner": _sizes(1000, 2, None, None),
            "pair": _sizes(2000, 2, None, None),
            "qa": _sizes(1500, 1, 300, None),
        },
    },
}
COMMON = ["--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true"]
#: Reading flags ``evaluate`` does not take from the saved run (STS-B files have no header).
EVALUATE_FLAGS = {"pair": ["--column_names", "genre,source,year,id,score,sentence1,sentence2"]}
SPEED_BATCH = 32
SPEED_PRECISIONS = ("fp32", "bf16")


def cli(argv: list[str]) -> None:
    from encoder_tasks.cli import main

    status = main(argv)
    if status != 0:
        sys.exit(f"failed ({status}): encoder-tasks {' '.join(argv)}")


# ---- split files ------------------------------------------------------------------------------
def write_splits(task: str, sizes: dict, folder: Path) -> dict[str, Path]:
    """Write (once) and return the task's ``train``, ``validation`` and ``test`` files."""
    suffix = {"classification": ".jsonl", "ner": ".conll", "pair": ".csv", "qa": ".json"}[task]
    files = {name: folder / f"{name}{suffix}" for name in ("train", "validation", "test")}
    if all(p.is_file() for p in files.values()):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    train, valid, test = (DATA / f if f else None for f in TASKS[task][1])
    n_train, n_valid, n_test = sizes["train"], sizes["validation"], sizes["test"]
    if task == "classification":
        from encoder_tasks.data import read_file
        from encoder_tasks.data.writers import write_jsonl

        def write(path, rows, column):
            write_jsonl(path, ({"sentence": s, "label": int(y)} for s, y in zip(rows[column], rows["label"])))

        shuffled = read_file(train).shuffle(seed=DATA_SEED)
        write(files["validation"], shuffled.select(range(min(n_valid, SST2_CARVED))), "sentence")
        write(files["train"], shuffled.select(range(SST2_CARVED, SST2_CARVED + n_train)), "sentence")
        dev = read_file(test)
        write(files["test"], dev.select(range(min(n_test or len(dev), len(dev)))), "content")
    elif task in ("ner", "pair"):
        # CoNLL: one sentence per blank-line block; STS-B: one pair per line (no header).
        def units(path):
            text = path.read_text(encoding="utf-8")
            if task == "pair":
                return [line for line in text.splitlines() if line.strip()]
            return [b.strip("\n") for b in BLANK_LINE.split(text) if b.strip()]

        def write(path, items):
            sep = "\n" if task == "pair" else "\n\n"
            path.write_text(sep.join(items) + "\n", encoding="utf-8")

        pool = units(train)
        write(files["train"], random.Random(DATA_SEED).sample(pool, min(n_train, len(pool))))
        write(files["validation"], units(valid)[:n_valid])
        write(files["test"], units(test)[:n_test])
    else:
        _write_squad(train, files["train"], n_train, sample=True)
        _write_squad(valid, files["validation"], n_valid, sample=True)
        _write_squad(test, files["test"], n_test, sample=False)
    return files


def _write_squad(source: Path, target: Path, limit: int | None, sample: bool) -> None:
    """``limit`` questions of a SQuAD file (a seed-0 sample, or the first ones), same layout."""
    squad = json.loads(source.read_text(encoding="utf-8"))
    ids = [qa["id"] for article in squad["data"] for p in article["paragraphs"] for qa in p["qas"]]
    if limit is not None and limit < len(ids):
        ids = random.Random(DATA_SEED).sample(ids, limit) if sample else ids[:limit]
    keep = set(ids)
    for article in squad["data"]:
        for p in article["paragraphs"]:
            p["qas"] = [qa for qa in p["qas"] if qa["id"] in keep]
        article["paragraphs"] = [p for p in article["paragraphs"] if p["qas"]]
    squad["data"] = [a for a in squad["data"] if a["paragraphs"]]
    target.write_text(json.dumps(squad), encoding="utf-8")


def count_examples(task: str, path: Path) -> int:
    if task == "qa":
        squad = json.loads(path.read_text(encoding="utf-8"))
        return sum(len(p["qas"]) for a in squad["data"] for p in a["paragraphs"])
    text = path.read_text(encoding="utf-8")
    return len([b for b in BLANK_LINE.split(text) if b.strip()]) if task == "ner" else len(text.splitlines())


# ---- runs -------------------------------------------------------------------------------------
def ensure_run(argv: list[str], out: Path, kept_only: bool) -> dict:
    """Run ``argv`` into ``out`` unless an earlier call finished it (resumable)."""
    done = cached(out / "metrics.json")  # the CLI writes it last: the run finished
    if done is not None:
        print(f"kept: {out}", flush=True)
        return done
    if kept_only:
        sys.exit(f"{out} has not been trained: run --phase accuracy first (same --size and --work)")
    start = time.perf_counter()
    cli([*argv, "--output_dir", str(out), "--overwrite_output_dir"])
    print(f"trained {out} in {time.perf_counter() - start:.0f} s", flush=True)
    return cached(out / "metrics.json")


def test_score(task: str, run: Path, test: Path, metric: str, kept_only: bool) -> float:
    """The run's ``metric`` on the test file (``<task> evaluate``, once; kept in the run)."""

    def evaluate() -> dict:
        if kept_only:
            sys.exit(f"{run} has no test score: run --phase accuracy first")
        argv = [task, "evaluate", "--model_name_or_path", str(run), "--validation_file", str(test), *COMMON]
        cli(argv + EVALUATE_FLAGS.get(task, []))
        written = max((run / "eval").glob(f"{test.stem}*.json"), key=lambda p: p.stat().st_mtime)
        return json.loads(written.read_text())

    return cached(run / "test-metrics.json", evaluate)[metric]


def bench_task(task: str, size: dict, work: Path, phase: str) -> dict:
    metric = TASKS[task][0]
    sizes = size["tasks"][task]
    folder = work / task
    files = write_splits(task, sizes, folder / "data")
    recipe = REPO / "recipes" / task / "default.yaml"
    base = ["--config", str(recipe), "--data_dir", str(DATA), *COMMON]
    base += ["--train_file", str(files["train"]), "--validation_file", str(files["validation"])]
    # Every example of the split file (the recipe's own max_train_samples would draw a subset).
    base += ["--max_train_samples", str(count_examples(task, files["train"]))]
    base += ["--num_train_epochs", str(sizes["epochs"])]
    speed_only = phase == "speed"
    runs = {"teacher": folder / "teacher"}
    scores: dict[str, list] = {"teacher": [], "distilled": [], "ablation": []}
    tests: dict[str, list] = {"teacher": [], "distilled": [], "ablation": []}

    def score(kind: str, argv: list[str], out: Path) -> None:
        scores[kind].append(ensure_run(argv, out, speed_only)[metric])
        tests[kind].append(test_score(task, out, files["test"], metric, speed_only))

    score("teacher", [task, "train", *base], runs["teacher"])
    for seed in size["seeds"]:
        student = [task, "distill", *base, "--teacher", str(runs["teacher"]), "--student_num_layers", "3"]
        student += ["--seed", str(seed)]
        score("distilled", student, folder / f"distilled-{seed}")
        score("ablation", [*student, "--distill_alpha", "1"], folder / f"ablation-{seed}")
    runs["student"] = folder / f"distilled-{size['seeds'][0]}"
    measure = (lambda: measure_speed(task, runs, files["validation"])) if phase in ("speed", "all") else None
    speed = cached(folder / "speed.json", measure)
    return {
        "task": task,
        "metric": metric,
        "sizes": sizes,
        "examples": {name: count_examples(task, path) for name, path in files.items()},
        "validation": scores,
        "test": tests,
        "speed": speed or "pending",
    }


# ---- speed ------------------------------------------------------------------------------------
def records_of(task: str, path: Path) -> list[dict]:
    """The validation inputs as ``Predictor`` records (see encoder_tasks.inference)."""
    text = path.read_text(encoding="utf-8")
    if task == "classification":
        return [{"text": json.loads(line)["sentence"]} for line in text.splitlines()]
    if task == "pair":  # genre, source, year, id, score, sentence1, sentence2 (tab-separated)
        return [{"text": c[5], "text_pair": c[6]} for c in (line.split("\t") for line in text.splitlines())]
    if task == "ner":
        return [
            {"tokens": [line.split()[0] for line in b.splitlines()]}
            for b in BLANK_LINE.split(text)
            if b.strip()
        ]
    squad = json.loads(text)
    return [
        {"question": qa["question"], "context": p["context"], "id": qa["id"]}
        for a in squad["data"]
        for p in a["paragraphs"]
        for qa in p["qas"]
    ]


def measure_speed(task: str, runs: dict[str, Path], validation: Path) -> dict:
    """Seconds of ``predict`` over the validation inputs: median of 3 passes after a warm-up."""
    from encoder_tasks.inference import Predictor

    records = records_of(task, validation)
    out = {"inputs": len(records), "batch_size": SPEED_BATCH, "passes": 3}
    for precision in SPEED_PRECISIONS:
        for name in ("teacher", "student"):
            predictor = Predictor.load(runs[name], precision=precision, batch_size=SPEED_BATCH)
            parsed = predictor.parse(records)
            out[f"{name}_{precision}_s"], _, _ = timed(lambda p=predictor, x=parsed: p.predict(x), 3)
            print(f"{task} {name} {precision}: {out[f'{name}_{precision}_s']:.2f} s", flush=True)
        out[f"speedup_{precision}"] = out[f"teacher_{precision}_s"] / out[f"student_{precision}_s"]
    return out


# ---- the table ----------------------------------------------------------------------------------
def mean_std(values: list[float], sign: bool = False) -> str:
    if not values:
        return "-"
    text = f"{statistics.fmean(values):{'+' if sign else ''}.4f}"
    return f"{text} ± {statistics.pstdev(values):.4f}" if len(values) > 1 else text


def table_rows(result: dict) -> list[list]:
    """Two rows per task: validation (the figures the targets read) and test (scored once)."""
    rows = []
    speed = result["speed"]
    for split in ("validation", "test"):
        s = result[split]
        teacher = s["teacher"][0]
        shares = [v / teacher for v in s["distilled"]] if teacher else []
        gaps = [d - a for d, a in zip(s["distilled"], s["ablation"])]
        share_ok = bool(shares) and statistics.fmean(shares) >= 0.97
        spread = (
            max(statistics.pstdev(s["distilled"]), statistics.pstdev(s["ablation"])) if len(gaps) > 1 else 0
        )
        beats_ok = bool(gaps) and statistics.fmean(gaps) > spread
        if split == "validation" and speed != "pending":
            fast = f"{speed['speedup_fp32']:.2f}x (bf16 {speed['speedup_bf16']:.2f}x)"
            fast_ok = "yes" if speed["speedup_fp32"] >= 1.8 else "no"
        else:
            fast, fast_ok = ("pending", "pending") if split == "validation" else ("", "")
        verdict = f"{'yes' if share_ok else 'no'} / {'yes' if beats_ok else 'no'}"
        rows.append(
            [
                result["task"],
                f"{result['metric'].removeprefix('eval_')}, {split} ({result['examples'][split]})",
                f"{teacher:.4f}",
                mean_std(s["distilled"]),
                f"{100 * statistics.fmean(shares):.1f}%" if shares else "-",
                mean_std(s["ablation"]),
                mean_std(gaps, sign=True),
                fast,
                verdict + (f" / {fast_ok}" if fast_ok else ""),
            ]
        )
    return rows


COLUMNS = [
    "task",
    "metric, split (examples)",
    "teacher (6 layers)",
    "distilled (3 layers)",
    "share of teacher",
    "ablation (3 layers, labels only)",
    "distilled - ablation",
    "speed-up (student/teacher, fp32)",
    "targets: share >= 97% / beats ablation by > spread / speed-up >= 1.8x",
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="standard")
    parser.add_argument("--phase", choices=("accuracy", "speed", "all"), default="all")
    parser.add_argument("--work", required=True, help="Folder that keeps every finished run (resumable).")
    parser.add_argument(
        "--tasks", default=",".join(TASKS), help="Comma-separated subset of " + ",".join(TASKS)
    )
    parser.add_argument(
        "--seeds",
        help="Comma-separated subset of the size's student seeds: lets several processes share the work "
        "(after the teacher exists); a last run without it assembles the file from the kept runs.",
    )
    args = parser.parse_args(argv)
    tasks = args.tasks.split(",")
    require_data(*(f for t in tasks for f in TASKS[t][1] if f))
    size = SIZES[args.size]
    if args.seeds:
        size = {**size, "seeds": [int(s) for s in args.seeds.split(",")]}
    work = Path(args.work) / args.size
    start = time.perf_counter()
    results = [bench_task(task, size, work, args.phase) for task in tasks]
    rows = [row for r in results for row in table_rows(r)]
    print_table([dict(zip(COLUMNS, row)) for row in rows], COLUMNS)
    notes = (
        f"size {args.size}; student seeds {size['seeds']} (mean ± population std); teacher: MiniLM-L6 with "
        "recipes/<task>/default.yaml on the split files (sizes and epochs in 'results'); student: teacher layers "
        "0,3,5 + embeddings + head, T=2, alpha=0.5 (defaults, untuned); ablation: the same student, labels only "
        "(--distill_alpha 1); targets read on validation rows; test rows scored once, no choice made on them; "
        f"speed-up: median of 3 passes of Predictor.predict over the validation inputs after a warm-up, batch "
        f"{SPEED_BATCH}, loading excluded"
    )
    path = save_results(
        f"distill-{args.size}",
        {
            "size": args.size,
            "phase": args.phase,
            "seconds": time.perf_counter() - start,
            "results": results,
            "tables": {"distill": {"columns": COLUMNS, "rows": rows, "notes": notes}},
        },
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

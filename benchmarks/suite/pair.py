"""STS-B similarity (a cross-encoder regressing the 0-5 score): the four contenders, Spearman.

Splits: ``train`` is a seed-0 sample of ``sts-train.csv`` (the same for every run seed),
``validation`` the official dev set (``sts-dev.csv``), ``test`` the official test set
(``sts-test.csv``, never used for a choice). The files have no header and some rows carry two
extra trailing columns; the first seven are read (genre, source, year, id, score, sentence1,
sentence2) and written as JSON lines under ``work`` (``sentence1``, ``sentence2``, ``score``).

The stock contender is run_glue.py's STS-B setup: ``num_labels=1`` (regression, MSE loss),
dynamic padding, TrainingArguments defaults (batch 8, lr 5e-5, fp32), max length 128. The
code is the classification module's (:func:`benchmarks.suite.classification.run_glue`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.common import require_data
from benchmarks.suite.classification import MAX_LENGTH, GlueBenchmark, run_glue
from benchmarks.suite.toolkit_run import describe_sizes, split_paths

TASK = "pair"
TRAIN = "pair/stsb/sts-train.csv"
DEV = "pair/stsb/sts-dev.csv"
TEST = "pair/stsb/sts-test.csv"
COLUMNS = ["genre", "source", "year", "id", "score", "sentence1", "sentence2"]
DATASET = (
    "STS-B: train = a seed-0 sample of pair/stsb/sts-train.csv; validation = sts-dev.csv "
    "(official dev); test = sts-test.csv (official test); Spearman of the predicted score"
)
STOCK_SCRIPT = "run_glue.py"
#: The seed of the training subset: the data never depends on the run seed.
DATA_SEED = 0
SIZES = {
    "quick": {"train": 200, "validation": 200, "test": 200, "epochs": 1},
    "standard": {"train": 1000, "validation": 1500, "test": 1379, "epochs": 1},
}

STSB = GlueBenchmark(
    task=TASK,
    text_columns=("sentence1", "sentence2"),
    label_column="score",
    num_labels=1,
    metric="spearman",
    toolkit_flags=(
        "--text_column",
        "sentence1",
        "--text_pair_column",
        "sentence2",
        "--label_column",
        "score",
        "--problem_type",
        "regression",
    ),
)


def splits(size: str, work: Path) -> dict[str, Path]:
    """Write (once) and return the ``train``, ``validation`` and ``test`` files for ``size``."""
    from encoder_tasks.data import read_file

    sizes = SIZES[size]
    files, written = split_paths(TASK, size, work, ".jsonl")
    if written:
        return files
    train_path, dev_path, test_path = require_data(TRAIN, DEV, TEST)
    train = read_file(train_path, column_names=COLUMNS).shuffle(seed=DATA_SEED)
    sources = {"train": train, "validation": read_file(dev_path, column_names=COLUMNS)}
    sources["test"] = read_file(test_path, column_names=COLUMNS)
    for name, rows in sources.items():
        _write(files[name], rows.select(range(min(sizes[name], len(rows)))))
    return files


def _write(path: Path, rows) -> None:
    from encoder_tasks.data.writers import write_jsonl

    write_jsonl(
        path,
        (
            {"sentence1": a, "sentence2": b, "score": float(score)}
            for a, b, score in zip(rows["sentence1"], rows["sentence2"], rows["score"])
        ),
    )


def describe(size: str) -> dict:
    """The sizes, epochs and max length of ``size`` (goes in the result file)."""
    return describe_sizes(sys.modules[__name__], size, max_length=MAX_LENGTH, metric=STSB.metric)


def run(contender: str, seed: int, size: str, work: Path, extra_flags=()) -> dict:
    """Train ``contender`` once on STS-B at ``size`` with ``seed``; the suite's result row."""
    return run_glue(STSB, splits(size, work), contender, seed, size, SIZES[size]["epochs"], work, extra_flags)

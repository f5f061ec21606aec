"""SST-2 sentiment: the four contenders on the same sentences, scored on validation and test.

Splits: ``test`` is the official dev set (872 sentences), never used for a choice.
``validation`` is 1,000 sentences carved from ``train.tsv`` with seed 0; the training subset
is drawn from the rest of the same seed-0 permutation, so it is disjoint from validation and
the same for every run seed. The splits are written as JSON lines under ``work`` (columns
``sentence``, ``label`` in every file) and both contenders read those files.

The stock contender follows run_glue.py: ``AutoModelForSequenceClassification``,
``DataCollatorWithPadding`` (dynamic padding), TrainingArguments defaults (batch 8, lr 5e-5,
no warm-up, fp32), ``max_seq_length`` 128, ``set_seed`` before the model. The pair module
runs the same code on STS-B (:class:`GlueBenchmark` holds what differs).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import MINILM, real_tokens, require_data
from benchmarks.suite.toolkit_run import (
    describe_sizes,
    is_toolkit,
    new_run_dir,
    result_row,
    split_paths,
    stock_training_args,
    toolkit_contender,
    train_stock,
)

logger = logging.getLogger(__name__)

TASK = "classification"
TRAIN = "cls/sst2/train.tsv"
DEV = "cls/sst2/dev.tsv"
DATASET = (
    "SST-2 (GLUE): train = a seed-0 sample of cls/sst2/train.tsv; validation = 1,000 other "
    "sentences of train.tsv (seed 0, disjoint from train); test = the official dev set (dev.tsv, 872)"
)
STOCK_SCRIPT = "run_glue.py"
MAX_LENGTH = 128
#: The seed of every carve and subset: the data never depends on the run seed.
DATA_SEED = 0
VALIDATION_CARVED = 1000
SIZES = {
    "quick": {"train": 200, "validation": 200, "test": 200, "epochs": 1},
    "standard": {"train": 2000, "validation": VALIDATION_CARVED, "test": 872, "epochs": 1},
}


@dataclass(frozen=True)
class GlueBenchmark:
    """What a run_glue-style benchmark (one text or a pair in, a label or a score out) sets."""

    task: str
    #: Text columns of the split files: one (classification) or two (a pair).
    text_columns: tuple[str, ...]
    label_column: str
    #: 1 for regression (run_glue's is_regression), else the number of classes.
    num_labels: int
    #: The ``eval_<metric>`` both contenders report.
    metric: str
    #: Flags the toolkit needs to read the split files (columns, problem type).
    toolkit_flags: tuple[str, ...]


SST2 = GlueBenchmark(
    task=TASK,
    text_columns=("sentence",),
    label_column="label",
    num_labels=2,
    metric="accuracy",
    toolkit_flags=("--text_column", "sentence", "--label_column", "label"),
)


def splits(size: str, work: Path) -> dict[str, Path]:
    """Write (once) and return the ``train``, ``validation`` and ``test`` files for ``size``."""
    from encoder_tasks.data import read_file

    sizes = SIZES[size]
    files, written = split_paths(TASK, size, work, ".jsonl")
    if written:
        return files
    train_path, dev_path = require_data(TRAIN, DEV)
    # One seed-0 permutation: validation is its head, training comes from the rest.
    shuffled = read_file(train_path).shuffle(seed=DATA_SEED)
    validation = shuffled.select(range(sizes["validation"]))
    train = shuffled.select(range(VALIDATION_CARVED, VALIDATION_CARVED + sizes["train"]))
    test = read_file(dev_path)
    test = test.select(range(min(sizes["test"], len(test))))
    _write(files["train"], train["sentence"], train["label"])
    _write(files["validation"], validation["sentence"], validation["label"])
    _write(files["test"], test["content"], test["label"])
    return files


def _write(path: Path, sentences, labels) -> None:
    from encoder_tasks.data.writers import write_jsonl

    write_jsonl(path, ({"sentence": s, "label": int(y)} for s, y in zip(sentences, labels)))


def describe(size: str) -> dict:
    """The sizes, epochs and max length of ``size`` (goes in the result file)."""
    return describe_sizes(sys.modules[__name__], size, max_length=MAX_LENGTH, metric=SST2.metric)


def run(contender: str, seed: int, size: str, work: Path, extra_flags=()) -> dict:
    """Train ``contender`` once on SST-2 at ``size`` with ``seed``; the suite's result row."""
    return run_glue(SST2, splits(size, work), contender, seed, size, SIZES[size]["epochs"], work, extra_flags)


def encode(bench: GlueBenchmark, tokenizer, path: Path):
    """A split file tokenised as run_glue does (no padding, cut at MAX_LENGTH), with labels."""
    import datasets

    from encoder_tasks.data import read_file

    rows = read_file(path)
    texts = [list(rows[column]) for column in bench.text_columns]
    encoded = dict(tokenizer(*texts, max_length=MAX_LENGTH, truncation=True))
    cast = float if bench.num_labels == 1 else int
    encoded["label"] = [cast(y) for y in rows[bench.label_column]]
    return datasets.Dataset.from_dict(encoded)


def run_glue(
    bench: GlueBenchmark,
    files: dict[str, Path],
    contender: str,
    seed: int,
    size: str,
    epochs: float,
    work: Path,
    extra_flags=(),
) -> dict:
    """One contender on a run_glue-style benchmark: train, score validation and test, time it.

    Real tokens (training and test) are the attention-mask sums of the same tokenisation for
    every contender; the toolkit's own preprocessing tokenises the same way.
    """
    from transformers import AutoTokenizer

    from encoder_tasks.backbone import resolve_model_path

    run_dir = new_run_dir(work, bench.task, contender, seed)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    encoded = {name: encode(bench, tokenizer, path) for name, path in files.items()}
    metric_key = f"eval_{bench.metric}"
    if is_toolkit(contender):
        task_flags = [*bench.toolkit_flags, "--max_length", str(MAX_LENGTH)]
        training, test = toolkit_contender(
            bench.task, contender, seed, files, epochs, run_dir, task_flags, extra_flags
        )
        validation_metric = training["metrics"][metric_key]
        test_metric, eval_seconds = test["metrics"][metric_key], test["seconds"]
        # The toolkit's own count (non-padding tokens): a cross-check of train_real_tokens.
        extra = {
            "toolkit_flags": training["flags"],
            "toolkit_tokens_seen": training["metrics"].get("train_num_input_tokens_seen"),
        }
    else:
        training, trainer = _train_stock(bench, encoded, contender, seed, epochs, run_dir, tokenizer)
        validation_metric = trainer.evaluate()[metric_key]
        test = trainer.evaluate(encoded["test"])
        test_metric, eval_seconds = test[metric_key], test["eval_runtime"]
        extra = {}
    row = result_row(
        task=bench.task,
        contender=contender,
        seed=seed,
        size=size,
        training=training,
        train_examples=len(encoded["train"]),
        metric_name=bench.metric,
        validation_metric=validation_metric,
        test_metric=test_metric,
        eval_real_tokens=real_tokens(encoded["test"]),
        eval_seconds=eval_seconds,
        **extra,
    )
    # Every contender trains on the same tokens: the counted ones must match the data's.
    expected = real_tokens(encoded["train"]) * epochs
    if row["train_real_tokens"] != expected:
        logger.warning(
            "%s: %d real training tokens counted, %d in the data x epochs",
            contender,
            row["train_real_tokens"],
            expected,
        )
    return row


def _train_stock(bench: GlueBenchmark, encoded: dict, contender: str, seed: int, epochs, run_dir, tokenizer):
    """run_glue's model, collator and Trainer at its defaults (plus the contender's switches)."""
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer, set_seed

    from encoder_tasks.backbone import resolve_model_path
    from encoder_tasks.tasks.classification.args import ClassificationSettings
    from encoder_tasks.tasks.classification.metrics import ClassificationMetrics

    if bench.num_labels == 1:
        settings = ClassificationSettings(problem_type="regression", label_names=[bench.label_column])
    else:
        settings = ClassificationSettings(label_names=[str(i) for i in range(bench.num_labels)])
    # As run_glue does: seed before the model, whose new head is drawn at random.
    set_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(
        resolve_model_path(MINILM), num_labels=bench.num_labels
    )
    trainer = Trainer(
        model=model,
        args=stock_training_args(contender, seed, run_dir / "stock", epochs),
        train_dataset=encoded["train"],
        eval_dataset=encoded["validation"],
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        # The toolkit's metric function, so both contenders are scored by the same code.
        compute_metrics=ClassificationMetrics(settings),
    )
    return train_stock(trainer), trainer

"""WikiANN-en NER: the four contenders on the same sentences, scored on validation and test.

Splits: ``validation`` is a seed-0 sample of the published ``dev`` file (1,000 sentences),
``test`` a seed-0 sample of ``test`` (1,000), never used for a choice; the training subset is
a seed-0 sample of ``train``, the same for every run seed. Every token of the published files
carries the language prefix ``en:``; the toolkit's reader strips it (``--token_prefix en:``,
as recipes/ner/wikiann-en.yaml reads the files) and the subsets are written as plain CoNLL
(``word<TAB>tag``), which both contenders read, so they see byte-identical sentences.

The stock contender follows run_ner.py: ``AutoModelForTokenClassification``, the label on a
word's first sub-token only (-100 on the rest, ``label_all_tokens=False``), labels sorted as
``get_label_list`` sorts them, ``DataCollatorForTokenClassification`` (dynamic padding),
TrainingArguments defaults (batch 8, lr 5e-5, no warm-up, fp32), ``set_seed`` before the
model, argmax predictions. Inputs are cut at ``MAX_LENGTH`` for both contenders (the toolkit
windows the few longer sentences instead). Both are scored by the toolkit's own metric
function (seqeval strict IOB2 entity F1, micro) on every word of every sentence; a word the
stock run cut off counts as ``O``.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
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

TASK = "ner"
FILES = {"train": "ner/wikiann-en/train", "validation": "ner/wikiann-en/dev", "test": "ner/wikiann-en/test"}
TOKEN_PREFIX = "en:"
DATASET = (
    "WikiANN-en (PER/LOC/ORG): train = a seed-0 sample of ner/wikiann-en/train; validation = a "
    "seed-0 sample of ner/wikiann-en/dev; test = a seed-0 sample of ner/wikiann-en/test"
)
STOCK_SCRIPT = "run_ner.py"
#: Sub-tokens per input for every contender (recipes/ner/wikiann-en.yaml's). 8 of the 20,000
#: training sentences are longer, none in the subsets: no contender cuts or windows a sentence.
MAX_LENGTH = 128
#: The seed of every subset: the data never depends on the run seed.
DATA_SEED = 0
METRIC = "f1_strict"
SIZES = {
    "quick": {"train": 200, "validation": 200, "test": 200, "epochs": 1},
    "standard": {"train": 2000, "validation": 1000, "test": 1000, "epochs": 1},
}


# ---- data ---------------------------------------------------------------------------------------
def splits(size: str, work: Path) -> dict[str, Path]:
    """Write (once) and return the ``train``, ``validation`` and ``test`` CoNLL files for ``size``."""
    sizes = SIZES[size]
    files, written = split_paths(TASK, size, work, ".conll")
    if written:
        return files
    files["train"].parent.mkdir(parents=True, exist_ok=True)
    sources = dict(zip(FILES, require_data(*FILES.values())))
    for name, source in sources.items():
        words, tags = read_sentences(source, TOKEN_PREFIX, seed=DATA_SEED, limit=sizes[name])
        _write_conll(files[name], words, tags)
    return files


def read_sentences(
    path: Path, token_prefix: str | None = None, seed: int | None = None, limit: int | None = None
) -> tuple[list[list[str]], list[list[str]]]:
    """Words and tags of a CoNLL file as the toolkit reads them (``seed``: a shuffled sample
    of ``limit`` sentences, as ``--max_train_samples`` draws one)."""
    from encoder_tasks.data import Split
    from encoder_tasks.tasks.ner.conll import read_conll
    from encoder_tasks.tasks.ner.reading import read_sentences as read_toolkit

    dataset = read_conll(path)
    if seed is not None:
        dataset = dataset.shuffle(seed=seed)
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    return read_toolkit(Split("data", str(path), dataset), "tokens", "tags", token_prefix)


def _write_conll(path: Path, words: list[list[str]], tags: list[list[str]]) -> None:
    """``word<TAB>tag`` lines, a blank line after each sentence; written whole or not at all
    (another process may be reading the folder)."""
    text = "".join(
        "".join(f"{w}\t{t}\n" for w, t in zip(sentence, sentence_tags)) + "\n"
        for sentence, sentence_tags in zip(words, tags)
    )
    handle, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(scratch, path)


def describe(size: str) -> dict:
    """The sizes, epochs and max length of ``size`` (goes in the result file)."""
    return describe_sizes(sys.modules[__name__], size, max_length=MAX_LENGTH, metric=METRIC)


# ---- one run ------------------------------------------------------------------------------------
def run(contender: str, seed: int, size: str, work: Path, extra_flags=()) -> dict:
    """Train ``contender`` once on WikiANN-en at ``size`` with ``seed``; the suite's result row.

    Real tokens (training and test) are the attention-mask sums of run_ner's tokenisation for
    every contender; the toolkit counts its own batches, which match unless it windows a
    sentence over ``MAX_LENGTH`` (a warning says so).
    """
    from transformers import AutoTokenizer

    from encoder_tasks.backbone import resolve_model_path

    files = splits(size, work)
    epochs = SIZES[size]["epochs"]
    run_dir = new_run_dir(work, TASK, contender, seed)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    sentences = {name: read_sentences(path) for name, path in files.items()}
    # run_ner's get_label_list: the training tags, sorted.
    labels = sorted({t for tags in sentences["train"][1] for t in tags})
    encoded = {name: encode(tokenizer, *split, labels) for name, split in sentences.items()}
    metric_key = f"eval_{METRIC}"
    if is_toolkit(contender):
        task_flags = ["--max_length", str(MAX_LENGTH)]
        training, test = toolkit_contender(
            TASK, contender, seed, files, epochs, run_dir, task_flags, extra_flags
        )
        validation_metric = training["metrics"][metric_key]
        test_metric, eval_seconds = test["metrics"][metric_key], test["seconds"]
        extra = {"toolkit_flags": training["flags"]}
    else:
        training, trainer = _train_stock(
            encoded, sentences, labels, contender, seed, epochs, run_dir, tokenizer
        )
        validation_metric = trainer.evaluate()[metric_key]
        trainer.compute_metrics = StockTagMetrics(encoded["test"], sentences["test"][1], labels)
        test = trainer.evaluate(encoded["test"].remove_columns("word_ids"))
        test_metric, eval_seconds = test[metric_key], test["eval_runtime"]
        extra = {}
    row = result_row(
        task=TASK,
        contender=contender,
        seed=seed,
        size=size,
        training=training,
        train_examples=len(encoded["train"]),
        metric_name="strict entity F1 (seqeval, IOB2, micro)",
        validation_metric=validation_metric,
        test_metric=test_metric,
        eval_real_tokens=real_tokens(encoded["test"]),
        eval_seconds=eval_seconds,
        labels=len(labels),
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


# ---- the stock contender (run_ner.py) -----------------------------------------------------------
def encode(tokenizer, words: list[list[str]], tags: list[list[str]], labels: list[str]):
    """run_ner's ``tokenize_and_align_labels``: no padding, cut at MAX_LENGTH, each word's tag
    on its first sub-token and -100 elsewhere (a tag training never saw is -100 too: run_ner
    would fail on it). Keeps ``word_ids`` for scoring whole sentences."""
    import datasets

    encoded = tokenizer(words, truncation=True, max_length=MAX_LENGTH, is_split_into_words=True)
    index = {name: i for i, name in enumerate(labels)}
    all_labels, all_word_ids = [], []
    for row, sentence_tags in enumerate(tags):
        word_ids = encoded.word_ids(row)
        previous, row_labels = None, []
        for word in word_ids:
            first = word is not None and word != previous
            row_labels.append(index.get(sentence_tags[word], -100) if first else -100)
            previous = word
        all_labels.append(row_labels)
        all_word_ids.append([-1 if word is None else word for word in word_ids])
    columns = dict(encoded)
    columns["labels"] = all_labels
    columns["word_ids"] = all_word_ids
    return datasets.Dataset.from_dict(columns)


class StockTagMetrics:
    """run_ner's ``compute_metrics`` (argmax of each word's first sub-token), scored on every
    word of every sentence by the toolkit's own metric function (words the cut input lost
    are ``O``), so both contenders are scored by the same code on the same words."""

    def __init__(self, encoded, references: list[list[str]], labels: list[str]):
        self.word_ids = encoded["word_ids"]
        self.references = references
        self.labels = labels

    def decode(self, logits) -> list[list[str]]:
        import numpy as np

        best = np.argmax(logits, axis=-1)
        predictions = []
        for row, (word_ids, gold) in enumerate(zip(self.word_ids, self.references)):
            words, previous = ["O"] * len(gold), -1
            for position, word in enumerate(word_ids):
                if word >= 0 and word != previous:
                    words[word] = self.labels[int(best[row, position])]
                previous = word
            predictions.append(words)
        return predictions

    def __call__(self, eval_pred) -> dict:
        from encoder_tasks.tasks.ner.metrics import entity_metrics

        metrics = entity_metrics(self.references, self.decode(eval_pred.predictions))
        metrics.pop("per_type")  # nested: the stock Trainer logs flat numbers
        return metrics


def _train_stock(encoded, sentences, labels, contender: str, seed: int, epochs, run_dir, tokenizer):
    """run_ner's model, collator and Trainer at its defaults (plus the contender's switches)."""
    from transformers import (
        AutoModelForTokenClassification,
        DataCollatorForTokenClassification,
        Trainer,
        set_seed,
    )

    from encoder_tasks.backbone import resolve_model_path

    model_inputs = {name: data.remove_columns("word_ids") for name, data in encoded.items()}
    # As run_ner does: seed before the model, whose new head is drawn at random.
    set_seed(seed)
    model = AutoModelForTokenClassification.from_pretrained(
        resolve_model_path(MINILM),
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
    )
    trainer = Trainer(
        model=model,
        args=stock_training_args(contender, seed, run_dir / "stock", epochs),
        train_dataset=model_inputs["train"],
        eval_dataset=model_inputs["validation"],
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        compute_metrics=StockTagMetrics(encoded["validation"], sentences["validation"][1], labels),
    )
    return train_stock(trainer), trainer

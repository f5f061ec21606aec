"""Extractive QA: the four contenders on the same questions, scored on validation and test.

Splits (every subset drawn with seed 0, the same for every run seed, written as SQuAD v1.1
JSON under ``work`` with the articles and paragraphs of the kept questions, so both
contenders read the same files): ``train`` is a sample of SQuADShifts Reddit questions,
``validation`` a sample of SQuADShifts Amazon reviews (another domain than training, and
the only split any choice may look at), ``test`` a sample of XQuAD-en (SQuAD v1.1 dev
articles 0-23: Wikipedia, never used for a choice).

The stock contender follows run_qa.py: ``AutoModelForQuestionAnswering``, its
``prepare_train_features`` / ``prepare_validation_features`` (max_seq_length 384,
doc_stride 128, the question's leading whitespace stripped) with ``--pad_to_max_length
False`` (windows padded per batch by ``DataCollatorWithPadding``), TrainingArguments
defaults (batch 8, lr 5e-5, no warm-up, fp32), ``set_seed`` before the model, and
``utils_qa.postprocess_qa_predictions`` (n_best 20, max_answer_length 30), ported below (the
example scripts are not part of the installed package). Both contenders' answers are scored
by the toolkit's official SQuAD v1.1 scoring (:mod:`encoder_tasks.tasks.qa.evaluation`).
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
from collections import defaultdict
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

TASK = "qa"
FILES = {
    "train": "qa/squadshifts/squadshifts_reddit_v1.0.json",
    "validation": "qa/squadshifts/squadshifts_amazon_reviews_v1.0.json",
    "test": "qa/xquad-en-dev/xquad.en.articles00-23.json",
}
DATASET = (
    "SQuAD v1.1-style QA: train = a seed-0 sample of SQuADShifts Reddit questions; validation = a "
    "seed-0 sample of SQuADShifts Amazon reviews; test = a seed-0 sample of XQuAD-en (SQuAD v1.1 dev "
    "articles 0-23)"
)
STOCK_SCRIPT = "run_qa.py"
#: run_qa.py's defaults, for every contender (MiniLM's tokenizer allows 512).
MAX_LENGTH = 384
DOC_STRIDE = 128
#: run_qa.py's postprocessing defaults (the toolkit's are the same numbers).
N_BEST = 20
MAX_ANSWER_LENGTH = 30
#: The seed of every subset: the data never depends on the run seed.
DATA_SEED = 0
METRIC = "f1"
SIZES = {
    "quick": {"train": 16, "validation": 16, "test": 16, "epochs": 1},
    "standard": {"train": 80, "validation": 60, "test": 100, "epochs": 1},
}


# ---- the splits ------------------------------------------------------------------------------
def splits(size: str, work: Path) -> dict[str, Path]:
    """Write (once) and return the ``train``, ``validation`` and ``test`` files for ``size``."""
    sizes = SIZES[size]
    files, written = split_paths(TASK, size, work, ".json")
    if written:
        return files
    sources = dict(zip(FILES, require_data(*FILES.values())))
    for name, source in sources.items():
        _write_subset(source, files[name], sizes[name])
    return files


def _write_subset(source: Path, target: Path, questions: int) -> None:
    """A seed-0 sample of ``questions`` questions of a SQuAD JSON file, as SQuAD JSON.

    The kept questions stay in their articles and paragraphs, in file order; paragraphs and
    articles left without a question are dropped.
    """
    from encoder_tasks.data.writers import write_json

    data = json.loads(source.read_text(encoding="utf-8"))
    ids = [qa["id"] for article in data["data"] for p in article["paragraphs"] for qa in p["qas"]]
    keep = set(random.Random(DATA_SEED).sample(ids, min(questions, len(ids))))
    articles = []
    for article in data["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            qas = [qa for qa in paragraph["qas"] if qa["id"] in keep]
            if qas:
                paragraphs.append({**paragraph, "qas": qas})
        if paragraphs:
            articles.append({**article, "paragraphs": paragraphs})
    write_json(target, {"version": data.get("version", "1.1"), "data": articles})


def describe(size: str) -> dict:
    """The sizes, epochs and window settings of ``size`` (goes in the result file)."""
    return describe_sizes(
        sys.modules[__name__],
        size,
        max_length=MAX_LENGTH,
        doc_stride=DOC_STRIDE,
        metric=f"SQuAD v1.1 {METRIC} (0-100)",
    )


# ---- stock: run_qa.py, ported ----------------------------------------------------------------
def _windows(tokenizer, examples: dict):
    """run_qa's tokenisation of question + context into overlapping windows, unpadded."""
    pad_on_right = tokenizer.padding_side == "right"
    questions = [q.lstrip() for q in examples["question"]]
    return tokenizer(
        questions if pad_on_right else examples["context"],
        examples["context"] if pad_on_right else questions,
        truncation="only_second" if pad_on_right else "only_first",
        max_length=MAX_LENGTH,
        stride=DOC_STRIDE,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=False,  # --pad_to_max_length False: DataCollatorWithPadding pads per batch
    )


def prepare_train_features(examples: dict, tokenizer):
    """run_qa's ``prepare_train_features``: windows labelled with the first answer's tokens
    (the CLS position where the answer is not wholly inside a window)."""
    pad_on_right = tokenizer.padding_side == "right"
    tokenized = _windows(tokenizer, examples)
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    offset_mapping = tokenized.pop("offset_mapping")
    tokenized["start_positions"] = []
    tokenized["end_positions"] = []
    for i, offsets in enumerate(offset_mapping):
        input_ids = tokenized["input_ids"][i]
        if tokenizer.cls_token_id in input_ids:
            cls_index = input_ids.index(tokenizer.cls_token_id)
        elif tokenizer.bos_token_id in input_ids:
            cls_index = input_ids.index(tokenizer.bos_token_id)
        else:
            cls_index = 0
        sequence_ids = tokenized.sequence_ids(i)
        answers = examples["answers"][sample_mapping[i]]
        if len(answers["answer_start"]) == 0:
            tokenized["start_positions"].append(cls_index)
            tokenized["end_positions"].append(cls_index)
            continue
        start_char = answers["answer_start"][0]
        end_char = start_char + len(answers["text"][0])
        token_start_index = 0
        while sequence_ids[token_start_index] != (1 if pad_on_right else 0):
            token_start_index += 1
        token_end_index = len(input_ids) - 1
        while sequence_ids[token_end_index] != (1 if pad_on_right else 0):
            token_end_index -= 1
        if not (offsets[token_start_index][0] <= start_char and offsets[token_end_index][1] >= end_char):
            tokenized["start_positions"].append(cls_index)
            tokenized["end_positions"].append(cls_index)
        else:
            while token_start_index < len(offsets) and offsets[token_start_index][0] <= start_char:
                token_start_index += 1
            tokenized["start_positions"].append(token_start_index - 1)
            while offsets[token_end_index][1] >= end_char:
                token_end_index -= 1
            tokenized["end_positions"].append(token_end_index + 1)
    return tokenized


def prepare_validation_features(examples: dict, tokenizer):
    """run_qa's ``prepare_validation_features``: windows with their question id and the
    character offsets of context tokens only (None elsewhere)."""
    context_index = 1 if tokenizer.padding_side == "right" else 0
    tokenized = _windows(tokenizer, examples)
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    tokenized["example_id"] = []
    for i in range(len(tokenized["input_ids"])):
        sequence_ids = tokenized.sequence_ids(i)
        tokenized["example_id"].append(examples["id"][sample_mapping[i]])
        tokenized["offset_mapping"][i] = [
            (o if sequence_ids[k] == context_index else None)
            for k, o in enumerate(tokenized["offset_mapping"][i])
        ]
    return tokenized


def postprocess_qa_predictions(examples: dict, features, start_logits, end_logits) -> dict[str, str]:
    """``utils_qa.postprocess_qa_predictions`` for SQuAD v1.1: each question's best span over
    its windows among the top-``N_BEST`` starts x top-``N_BEST`` ends of each window."""
    import numpy as np

    example_id_to_index = {k: i for i, k in enumerate(examples["id"])}
    features_per_example = defaultdict(list)
    for i, example_id in enumerate(list(features["example_id"])):
        features_per_example[example_id_to_index[example_id]].append(i)
    all_offsets = list(features["offset_mapping"])
    predictions = {}
    for example_index, (qid, context) in enumerate(zip(examples["id"], examples["context"])):
        prelim = []
        for feature_index in features_per_example[example_index]:
            starts, ends = start_logits[feature_index], end_logits[feature_index]
            offset_mapping = all_offsets[feature_index]
            start_indexes = np.argsort(starts)[-1 : -N_BEST - 1 : -1].tolist()
            end_indexes = np.argsort(ends)[-1 : -N_BEST - 1 : -1].tolist()
            for start_index in start_indexes:
                for end_index in end_indexes:
                    # Out of the window (batch padding), or not context tokens.
                    if (
                        start_index >= len(offset_mapping)
                        or end_index >= len(offset_mapping)
                        or offset_mapping[start_index] is None
                        or len(offset_mapping[start_index]) < 2
                        or offset_mapping[end_index] is None
                        or len(offset_mapping[end_index]) < 2
                    ):
                        continue
                    if end_index < start_index or end_index - start_index + 1 > MAX_ANSWER_LENGTH:
                        continue
                    prelim.append(
                        (
                            starts[start_index] + ends[end_index],
                            offset_mapping[start_index][0],
                            offset_mapping[end_index][1],
                        )
                    )
        best = sorted(prelim, key=lambda p: p[0], reverse=True)[:N_BEST]
        texts = [context[start:end] for _, start, end in best]
        # run_qa answers "empty" when no valid span was found
        predictions[qid] = texts[0] if texts and not (len(texts) == 1 and texts[0] == "") else "empty"
    return predictions


def _stock_split(path: Path, tokenizer, train: bool):
    """A split file read flat and cut into run_qa's windows: ``(columns, features)``."""
    import datasets

    from encoder_tasks.tasks.qa.reading import read_squad

    rows = read_squad(path)
    columns = {k: list(rows[k]) for k in ("id", "question", "context", "answers")}
    prepare = prepare_train_features if train else prepare_validation_features
    return columns, datasets.Dataset.from_dict(dict(prepare(columns, tokenizer)))


def _stock_score(trainer, columns: dict, features) -> tuple[float, float]:
    """run_qa's evaluation of one split: predict, extract answers, score; ``(f1, seconds)``."""
    import numpy as np

    from encoder_tasks.tasks.qa.evaluation import squad_v1_scores

    start = time.perf_counter()
    inputs = features.remove_columns(["example_id", "offset_mapping"])
    start_logits, end_logits = trainer.predict(inputs).predictions[:2]
    answers = postprocess_qa_predictions(columns, features, np.asarray(start_logits), np.asarray(end_logits))
    golds = {qid: list(a["text"]) for qid, a in zip(columns["id"], columns["answers"])}
    f1 = squad_v1_scores(golds, answers)[METRIC]
    return f1, time.perf_counter() - start


def _train_stock(contender: str, seed: int, epochs: float, run_dir: Path, tokenizer, train_features):
    """run_qa's model, collator and Trainer at its defaults (plus the contender's switches)."""
    from transformers import AutoModelForQuestionAnswering, DataCollatorWithPadding, Trainer, set_seed

    from encoder_tasks.backbone import resolve_model_path

    args = stock_training_args(contender, seed, run_dir / "stock", epochs)
    # As run_qa does: seed before the model, whose span head is drawn at random.
    set_seed(seed)
    model = AutoModelForQuestionAnswering.from_pretrained(resolve_model_path(MINILM))
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_features,
        processing_class=tokenizer,
        # run_qa without --pad_to_max_length (multiples of 8 only under fp16)
        data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8 if args.fp16 else None),
    )
    return train_stock(trainer), trainer


# ---- one run ---------------------------------------------------------------------------------
def run(contender: str, seed: int, size: str, work: Path, extra_flags=()) -> dict:
    """Train ``contender`` once on the QA splits at ``size`` with ``seed``; the suite's result row.

    Real tokens are counted from the batches trained on (:class:`TokenCounter`) for every
    contender and checked against run_qa's windows of the training file (the toolkit cuts the
    same windows: same tokenizer, max length and stride; it cuts questions only past 64 tokens).
    """
    from transformers import AutoTokenizer

    from encoder_tasks.backbone import resolve_model_path

    files = splits(size, work)
    epochs = SIZES[size]["epochs"]
    run_dir = new_run_dir(work, TASK, contender, seed)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    train_columns, train_features = _stock_split(files["train"], tokenizer, train=True)
    test_columns, test_features = _stock_split(files["test"], tokenizer, train=False)
    metric_key = f"eval_{METRIC}"
    if is_toolkit(contender):
        task_flags = ["--max_length", str(MAX_LENGTH), "--doc_stride", str(DOC_STRIDE)]
        training, test = toolkit_contender(
            TASK, contender, seed, files, epochs, run_dir, task_flags, extra_flags
        )
        validation_metric = training["metrics"][metric_key]
        test_metric, eval_seconds = test["metrics"][metric_key], test["seconds"]
        extra = {"toolkit_flags": training["flags"]}
    else:
        training, trainer = _train_stock(contender, seed, epochs, run_dir, tokenizer, train_features)
        validation_columns, validation_features = _stock_split(files["validation"], tokenizer, train=False)
        validation_metric, _ = _stock_score(trainer, validation_columns, validation_features)
        test_metric, eval_seconds = _stock_score(trainer, test_columns, test_features)
        extra = {}
    row = result_row(
        task=TASK,
        contender=contender,
        seed=seed,
        size=size,
        training=training,
        # result_row's mean sequence length (MFU's attention term) is per trained sequence: a window
        train_examples=len(train_features),
        metric_name=METRIC,
        validation_metric=validation_metric,
        test_metric=test_metric,
        eval_real_tokens=real_tokens(test_features),
        eval_seconds=eval_seconds,
        **extra,
    )
    row.update(train_examples=len(train_columns["id"]), train_windows=len(train_features))
    expected = real_tokens(train_features) * epochs
    if row["train_real_tokens"] != expected:
        logger.warning(
            "%s: %d real training tokens counted, %d in run_qa's windows x epochs",
            contender,
            row["train_real_tokens"],
            expected,
        )
    return row

"""Reading and tokenising classification data: columns, labels, the prepared datasets.

Example:
    >>> import datasets
    >>> from encoder_tasks.data import Split
    >>> from encoder_tasks.config import DataArguments
    >>> from encoder_tasks.testing import make_tiny_tokenizer
    >>> rows = datasets.Dataset.from_dict({"text": ["good", "bad"], "label": ["pos", "neg"]})
    >>> prepared = prepare({"train": Split("train", "t.csv", rows)}, make_tiny_tokenizer(),
    ...                    ClassificationArguments(), DataArguments(max_length=32))
    >>> prepared.settings.label_names, list(prepared.train["labels"])
    (['neg', 'pos'], [1, 0])
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ...collators import PaddingCollator
from ...data import Split, column_texts, resolve_column
from ...errors import UserError
from ...task import Prepared
from .args import ClassificationArguments, ClassificationSettings, resolve_pooling
from .labels import (
    check_known_labels,
    encode_labels,
    infer_problem_type,
    parse_class_weights,
    read_labels,
    sort_labels,
)
from .metrics import ClassificationMetrics, warn_if_evaluating_on_tuning_data

logger = logging.getLogger(__name__)


def tokenize_split(split: Split, tokenizer, task_args, max_length: int, label_ids=None):
    """Tokenise a split into a ``datasets.Dataset`` with ``length`` (for batching) and labels;
    returns it and how many inputs were truncated."""
    import datasets

    text_col = resolve_column(split, task_args.text_column, "text")
    pair_col = resolve_column(split, task_args.text_pair_column, "text_pair")
    first = column_texts(split, text_col)
    second = column_texts(split, pair_col) if pair_col else None
    encoded = tokenizer(first, second, truncation=True, max_length=max_length)
    full = tokenizer(first, second, truncation=False, add_special_tokens=True)["input_ids"]
    truncated = sum(len(ids) > max_length for ids in full)
    if truncated:
        logger.warning(
            "%s: %d of %d inputs are longer than max_length=%d and were truncated for training/evaluation",
            split.source,
            truncated,
            len(first),
            max_length,
        )
    columns: dict[str, Any] = {key: encoded[key] for key in encoded.keys()}
    columns["length"] = [len(ids) for ids in encoded["input_ids"]]
    if label_ids is not None:
        columns["labels"] = label_ids
    return datasets.Dataset.from_dict(columns), truncated


def new_settings(split: Split, task_args: ClassificationArguments, data_args) -> ClassificationSettings:
    """The settings of a model about to be trained on ``split``: problem type and label names
    from its labels, columns and head options from the flags."""
    label_col = resolve_column(split, task_args.label_column, "label")
    problem_type = task_args.problem_type
    if problem_type == "auto":
        problem_type = infer_problem_type(split.dataset[label_col], task_args.label_separator)
    labels = read_labels(split, label_col, problem_type, task_args.label_separator)
    if problem_type == "regression":
        label_names = ["score"]
    else:
        names = {v for value in labels for v in (value if isinstance(value, list) else [value])}
        label_names = sort_labels(names)
        if problem_type == "single_label" and len(label_names) < 2:
            raise UserError(
                f"{split.source}: column {label_col!r} holds a single label {label_names}; classification "
                "needs at least two (use --problem_type regression for scores)"
            )
    pair = resolve_column(split, task_args.text_pair_column, "text_pair") is not None
    pooling = resolve_pooling(task_args.pooling, pair)
    if task_args.pooling == "auto":
        reads = "a pair of texts" if pair else "one text"
        logger.info("pooling %s (--pooling auto: the head reads %s; --pooling chooses)", pooling, reads)
    return ClassificationSettings(
        problem_type=problem_type,
        label_names=label_names,
        text_column=task_args.text_column,
        text_pair_column=task_args.text_pair_column,
        label_column=task_args.label_column,
        label_separator=task_args.label_separator,
        max_length=data_args.max_length,
        thresholds=[0.5] * len(label_names) if problem_type == "multi_label" else None,
        pooling=pooling,
        classifier_dropout=task_args.classifier_dropout,
    )


def prepare(
    splits: dict[str, Split],
    tokenizer,
    task_args: ClassificationArguments,
    data_args,
    saved: ClassificationSettings | None = None,
) -> Prepared:
    """Validate and tokenise the splits. ``saved`` (a saved model's settings) fixes the problem
    type and the labels; columns and ``max_length`` come from the (already resolved) flags.
    Evaluating a multi-label model on the data its thresholds were tuned on warns."""
    train, evaluation = splits.get("train"), splits.get("validation")
    for split in (train, evaluation):  # every column problem is reported before any label problem
        if split is not None:
            resolve_column(split, task_args.text_column, "text")
            resolve_column(split, task_args.text_pair_column, "text_pair")
            resolve_column(split, task_args.label_column, "label")
    settings = saved if saved is not None else new_settings(train or evaluation, task_args, data_args)
    problem_type, label_names = settings.problem_type, settings.label_names

    datasets_out, label_lists = {}, {}
    for name, split in (("train", train), ("validation", evaluation)):
        if split is None:
            continue
        col = resolve_column(split, task_args.label_column, "label")
        labels = read_labels(split, col, problem_type, task_args.label_separator)
        check_known_labels(split, labels, label_names, problem_type)
        label_lists[name] = labels
        datasets_out[name], _ = tokenize_split(
            split,
            tokenizer,
            task_args,
            data_args.max_length,
            encode_labels(labels, label_names, problem_type),
        )

    weights = None
    if "train" in label_lists:
        weights = parse_class_weights(
            task_args.class_weights, label_lists["train"], label_names, problem_type
        )
    if saved is not None and evaluation is not None:
        warn_if_evaluating_on_tuning_data(saved, evaluation.source)
    label_dtype = torch.long if problem_type == "single_label" else torch.float32
    return Prepared(
        train=datasets_out.get("train"),
        eval=datasets_out.get("validation"),
        settings=settings,
        collator=lambda pad: PaddingCollator(tokenizer, pad_to_multiple_of=pad, label_dtype=label_dtype),
        compute_metrics=ClassificationMetrics(
            settings, evaluation.source if evaluation is not None else None
        ),
        training_head={"class_weights": weights},
    )

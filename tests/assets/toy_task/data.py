"""Reading and tokenising: the label is computed from the text, so any text file trains."""

from __future__ import annotations

import datasets
import numpy as np

from encoder_tasks.collators import PaddingCollator
from encoder_tasks.data import resolve_column
from encoder_tasks.task import Prepared

from .args import ToySettings


def tokenize(texts, tokenizer, max_length, keyword):
    encoded = tokenizer(texts, truncation=True, max_length=max_length)
    columns = {key: encoded[key] for key in encoded.keys()}
    columns["labels"] = [int(keyword in text.split()) for text in texts]
    return datasets.Dataset.from_dict(columns)


def accuracy(eval_pred) -> dict:
    predicted = np.asarray(eval_pred.predictions).argmax(-1)
    return {"accuracy": float((predicted == np.asarray(eval_pred.label_ids)).mean())}


def prepare(splits, tokenizer, task_args, data_args, saved=None) -> Prepared:
    settings = saved or ToySettings(
        text_column=task_args.text_column, keyword=task_args.keyword, max_length=data_args.max_length
    )
    out = {}
    for name in ("train", "validation"):
        if name in splits:
            split = splits[name]
            column = resolve_column(split, task_args.text_column, "text")
            texts = list(split.dataset[column])
            out[name] = tokenize(texts, tokenizer, data_args.max_length, settings.keyword)
    return Prepared(
        train=out.get("train"),
        eval=out.get("validation"),
        settings=settings,
        collator=lambda pad: PaddingCollator(tokenizer, pad_to_multiple_of=pad),
        compute_metrics=accuracy,
    )

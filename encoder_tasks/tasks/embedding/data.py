"""Reading (anchor, positive[, negatives][, score]) pairs, tokenising them for training, and
the collator that pads each text group on its own.

Training rows are tokenised; evaluation rows stay raw text (evaluation encodes every distinct
text once, see :mod:`.evaluation`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import torch

from ...data import LINE_COLUMN, Split, column_texts, name_list, resolve_column
from ...errors import UserError
from ...task import Prepared
from .args import SCORED_LOSSES, EmbeddingSettings, parse_dims, score_spec

logger = logging.getLogger(__name__)


def _scores(split: Split, column: str) -> list[float]:
    values = []
    for index, value in enumerate(split.dataset[column]):
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            raise UserError(f"{split.location(index)}: column {column!r} expected a number, found {value!r}")
        values.append(number)
    return values


def read_pairs(split: Split, columns, need_scores: bool = False) -> dict[str, Any]:
    """Texts, optional hard negatives and optional scores of a split, validated.

    ``columns`` is anything with the column fields (the task's arguments or saved settings).
    """
    anchors = column_texts(split, resolve_column(split, columns.text_column, "text"))
    positives = column_texts(split, resolve_column(split, columns.text_pair_column, "text_pair"))
    negatives = [
        column_texts(split, resolve_column(split, name, "negative", flag="--negative_columns"))
        for name in name_list(columns.negative_columns)
    ]
    spec = score_spec(columns.score_column)
    score_col = resolve_column(split, spec, "score", required=need_scores)
    if need_scores and score_col is None:  # scores switched off with --score_column none
        raise UserError(
            f"{split.source}: scored losses and STS evaluation need a score per pair (--score_column)"
        )
    scores = _scores(split, score_col) if score_col else None
    names = split.dataset.column_names
    lines = split.dataset[LINE_COLUMN] if LINE_COLUMN in names else [None] * len(anchors)
    return {"anchor": anchors, "positive": positives, "negatives": negatives, "score": scores, "line": lines}


def _tokenize_group(tokenizer, texts: list[str], max_length: int, prefix: str) -> dict[str, list]:
    encoded = tokenizer(texts, truncation=True, max_length=max_length)
    return {
        f"{prefix}_input_ids": encoded["input_ids"],
        f"{prefix}_attention_mask": encoded["attention_mask"],
    }


@dataclass
class BiEncoderCollator:
    """Pad each text group (anchor, positive, negative_i) of a batch on its own.

    Example:
        >>> from encoder_tasks.testing import make_tiny_tokenizer
        >>> collate = BiEncoderCollator(make_tiny_tokenizer(), num_negatives=0)
        >>> batch = collate([{"anchor_input_ids": [2, 5, 3], "anchor_attention_mask": [1, 1, 1],
        ...                   "positive_input_ids": [2, 3], "positive_attention_mask": [1, 1]}])
        >>> batch["anchor"]["input_ids"].shape, batch["positive"]["input_ids"].shape
        (torch.Size([1, 3]), torch.Size([1, 2]))
    """

    tokenizer: Any
    num_negatives: int = 0
    pad_to_multiple_of: int | None = None

    def _pad(self, features: list[dict], prefix: str) -> dict[str, torch.Tensor]:
        rows = [
            {"input_ids": f[f"{prefix}_input_ids"], "attention_mask": f[f"{prefix}_attention_mask"]}
            for f in features
        ]
        padded = self.tokenizer.pad(
            rows, padding=True, pad_to_multiple_of=self.pad_to_multiple_of or None, return_tensors="pt"
        )
        return {"input_ids": padded["input_ids"], "attention_mask": padded["attention_mask"]}

    def __call__(self, features: list[dict]) -> dict[str, Any]:
        batch: dict[str, Any] = {
            "anchor": self._pad(features, "anchor"),
            "positive": self._pad(features, "positive"),
        }
        if self.num_negatives:
            batch["negatives"] = [self._pad(features, f"negative_{i}") for i in range(self.num_negatives)]
        if features[0].get("labels") is not None:
            batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.float32)
        return batch


#: Settings the flags decide whenever data is prepared: the columns read and the evaluation.
_DATA_FLAGS = (
    "text_column",
    "text_pair_column",
    "negative_columns",
    "score_column",
    "positive_min_score",
    "evaluation",
    "retrieval_k",
)
#: Settings of the head and its training, fixed once a model is trained.
_TRAINING_FLAGS = (
    "temperature",
    "symmetric",
    "gather_across_devices",
    "pooling",
    "normalize",
    "batch_sampler",
    "model_type",
    "sparse_regularizer",
    "sparse_weight",
    "inference_free_queries",
)


def _from_flags(task_args, data_args, names=_DATA_FLAGS) -> dict[str, Any]:
    return {**{name: getattr(task_args, name) for name in names}, "max_length": data_args.max_length}


def _training_settings(train: Split, task_args, data_args) -> EmbeddingSettings:
    """Settings of a new model: ``--loss auto`` resolved, and the score range for scaling."""
    if task_args.loss in SCORED_LOSSES and task_args.negative_columns:
        raise UserError(f"--negative_columns is for --loss mnrl, not {task_args.loss}")
    probe = read_pairs(train, task_args, need_scores=task_args.loss in SCORED_LOSSES)
    scores = probe["score"]
    loss = task_args.loss
    if loss == "auto":
        loss = "cosent" if scores is not None and not task_args.negative_columns else "mnrl"
    return EmbeddingSettings(
        **_from_flags(task_args, data_args, _DATA_FLAGS + _TRAINING_FLAGS),
        loss="mnrl" if loss == "infonce" else loss,
        score_range=[min(scores), max(scores)] if scores else None,
        matryoshka_dims=parse_dims(task_args.matryoshka_dims),
    )


def prepare(splits, tokenizer, task_args, data_args, saved: EmbeddingSettings | None = None) -> Prepared:
    """Tokenised training rows and raw evaluation pairs, with the settings saved with the model.

    ``saved`` (evaluating a saved model) keeps the trained loss and score range; this run's
    (already resolved) flags decide the columns and the evaluation.

    Example:
        >>> prepared = prepare(splits, tokenizer, EmbeddingArguments(), DataArguments())  # doctest: +SKIP
    """
    train, evaluation = splits.get("train"), splits.get("validation")
    if saved is None:
        if train is None:
            raise UserError("no training data: give --train_file")
        settings = _training_settings(train, task_args, data_args)
    else:
        settings = saved.replace(**_from_flags(task_args, data_args))

    train_dataset = _training_rows(train, tokenizer, settings) if train is not None else None
    eval_dataset = None
    if evaluation is not None:
        eval_dataset, mode = _evaluation_rows(evaluation, settings)
        settings = settings.replace(evaluation_mode=mode)
    num_negatives = len(name_list(settings.negative_columns))
    return Prepared(
        train=train_dataset,
        eval=eval_dataset,
        settings=settings,
        collator=lambda pad: BiEncoderCollator(tokenizer, num_negatives, pad),
    )


def _evaluation_rows(split: Split, settings: EmbeddingSettings):
    """Raw text pairs (and scores) of the evaluation split, and the evaluation it gets."""
    import datasets

    pairs = read_pairs(split, settings, need_scores=settings.evaluation in ("sts", "both"))
    mode = settings.evaluation
    if mode == "auto":
        mode = "sts" if pairs["score"] is not None else "retrieval"
    if mode in ("retrieval", "both") and pairs["score"] is not None and settings.positive_min_score is None:
        raise UserError(
            f"{split.source}: retrieval on scored pairs needs --positive_min_score (which pairs are "
            "query -> relevant)"
        )
    columns = {"anchor": pairs["anchor"], "positive": pairs["positive"], LINE_COLUMN: pairs["line"]}
    if pairs["score"] is not None:
        columns["score"] = pairs["score"]
    return datasets.Dataset.from_dict(columns), mode


def _training_rows(split: Split, tokenizer, settings: EmbeddingSettings):
    import datasets

    loss, max_length = settings.loss, settings.max_length
    pairs = read_pairs(split, settings, need_scores=loss in SCORED_LOSSES)
    keep = list(range(len(pairs["anchor"])))
    min_score = settings.positive_min_score
    if loss == "mnrl" and pairs["score"] is not None and min_score is not None:
        keep = [i for i in keep if pairs["score"][i] >= min_score]
        logger.info(
            "%s: %d of %d pairs have score >= %s (positives)",
            split.source,
            len(keep),
            len(pairs["anchor"]),
            min_score,
        )
        if len(keep) < 2:
            raise UserError(
                f"{split.source}: only {len(keep)} pairs have a score >= {min_score}; in-batch negatives need more"
            )
    elif loss == "mnrl" and pairs["score"] is not None:
        logger.warning(
            "%s: --loss mnrl treats every pair as a positive, whatever its score; pass "
            "--positive_min_score to keep only the similar pairs",
            split.source,
        )

    def pick(values):
        return [values[i] for i in keep]

    columns: dict[str, list] = {}
    columns.update(_tokenize_group(tokenizer, pick(pairs["anchor"]), max_length, "anchor"))
    columns.update(_tokenize_group(tokenizer, pick(pairs["positive"]), max_length, "positive"))
    for n, texts in enumerate(pairs["negatives"]):
        columns.update(_tokenize_group(tokenizer, pick(texts), max_length, f"negative_{n}"))
    if loss in SCORED_LOSSES:
        low, high = settings.score_range
        # CoSENT only uses the order; the cosine loss regresses onto [0, 1].
        columns["labels"] = [(s - low) / (high - low) if high > low else 1.0 for s in pick(pairs["score"])]
    return datasets.Dataset.from_dict(columns)


def duplicate_keys(dataset, negatives: bool | None = None) -> list[tuple]:
    """The texts of every training row, as token-id tuples (equal texts, equal keys): all of
    them, or with ``negatives`` True only the mined negatives' and False all but those."""
    groups = [
        c
        for c in dataset.column_names
        if c.endswith("_input_ids") and (negatives is None or c.startswith("negative_") == negatives)
    ]
    columns = [dataset[c] for c in groups]
    return [tuple(tuple(col[i]) for col in columns) for i in range(len(dataset))]

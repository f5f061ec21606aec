"""Text classification: single-label, multi-label and regression, on one text or a pair.

Shape shared by every task module:
- ``ClassificationArguments``: the task's settings (recipe keys / CLI flags),
- ``SequenceClassifier``: the head on top of any encoder,
- ``prepare``: validated, tokenised datasets plus the metadata stored with the model,
- ``compute_metrics`` via :func:`metrics_function`,
- ``predict``: a saved model over a file, written as JSONL.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput

from ..collators import PaddingCollator
from ..config import PredictArguments
from ..data.loading import Split
from ..errors import UserError
from ..heads import EncoderWithHead, Pooler, full_precision, head_dropout
from ..inference import autocast_for
from ..metrics import classification_metrics, multilabel_metrics, regression_metrics, tune_thresholds

logger = logging.getLogger(__name__)

PROBLEM_TYPES = ("auto", "single_label", "multi_label", "regression")


@dataclass
class ClassificationArguments:
    """Settings of the classification task."""

    text_column: str = field(
        default="text",
        metadata={
            "help": "Column with the text. Several names separated by '|' are tried in order per file."
        },
    )
    text_pair_column: str | None = field(
        default=None,
        metadata={"help": "Optional second text column (sentence pairs); '|' alternatives allowed."},
    )
    label_column: str = field(default="label", metadata={"help": "Column with the label (or score)."})
    problem_type: str = field(
        default="auto",
        metadata={
            "help": "single_label, multi_label (sigmoid, per-label thresholds), regression, or auto "
            "(lists -> multi_label, non-integer numbers -> regression, else single_label)."
        },
    )
    label_separator: str | None = field(
        default=None,
        metadata={"help": "Multi-label given as one string, e.g. 'sports|politics': the separator."},
    )
    pooling: str = field(default="mean", metadata={"help": "Sequence pooling: mean (default), cls or max."})
    classifier_dropout: float | None = field(
        default=None, metadata={"help": "Dropout before the classifier (default: the encoder's own)."}
    )
    class_weights: str | None = field(
        default=None,
        metadata={
            "help": "Loss weights for imbalanced data: 'balanced' or comma-separated weights in label order."
        },
    )
    long_text: str = field(
        default="window",
        metadata={
            "help": "At prediction, texts over max_length: window (overlapping windows, logits averaged) or "
            "truncate (cut, counted in a warning)."
        },
    )
    window_stride: int = field(default=64, metadata={"help": "Tokens shared by neighbouring windows."})
    tune_thresholds: bool = field(
        default=True, metadata={"help": "Multi-label: tune each label's threshold on the validation set."}
    )

    def __post_init__(self):
        if self.problem_type not in PROBLEM_TYPES:
            raise UserError(
                f"--problem_type must be one of {', '.join(PROBLEM_TYPES)}, found {self.problem_type!r}"
            )
        if self.long_text not in ("window", "truncate"):
            raise UserError(f"--long_text must be window or truncate, found {self.long_text!r}")


class SequenceClassifier(EncoderWithHead):
    """Pooling, dropout and a linear layer on any encoder.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = SequenceClassifier(load_encoder(make_tiny_model("bert")), num_labels=3)
        >>> out = model(input_ids=torch.tensor([[2, 5, 6, 3]]), attention_mask=torch.ones(1, 4))
        >>> tuple(out.logits.shape)
        (1, 3)
    """

    task = "classification"

    def __init__(
        self,
        encoder,
        num_labels: int,
        problem_type: str = "single_label",
        pooling: str = "mean",
        dropout: float | None = None,
        class_weights: list[float] | None = None,
    ):
        super().__init__(
            encoder,
            num_labels=num_labels,
            problem_type=problem_type,
            pooling=pooling,
            dropout=dropout,
            class_weights=class_weights,
        )
        self.problem_type = problem_type
        self.pooler = Pooler(pooling)
        self.dropout = nn.Dropout(head_dropout(encoder.config, dropout))
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        std = getattr(encoder.config, "initializer_range", 0.02)
        nn.init.normal_(self.classifier.weight, std=std)
        nn.init.zeros_(self.classifier.bias)
        weights = torch.tensor(class_weights, dtype=torch.float32) if class_weights else None
        self.register_buffer("class_weights", weights, persistent=False)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encode(input_ids, attention_mask, token_type_ids, **kwargs)
        pooled = self.pooler(hidden, attention_mask)
        logits = full_precision(self.classifier, self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = self.loss(logits.float(), labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        # Losses run in fp32 even under bf16 autocast.
        if self.problem_type == "regression":
            return nn.functional.mse_loss(logits.squeeze(-1), labels.float())
        if self.problem_type == "multi_label":
            return nn.functional.binary_cross_entropy_with_logits(
                logits, labels.float(), pos_weight=self.class_weights
            )
        return nn.functional.cross_entropy(logits, labels.long(), weight=self.class_weights)


# ---- labels -----------------------------------------------------------------------------------
def _is_number(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


def infer_problem_type(values: list, label_separator: str | None) -> str:
    """Guess the problem type from the raw label values (see ``--problem_type auto``)."""
    present = [v for v in values if v is not None]
    if any(isinstance(v, (list, tuple)) for v in present) or label_separator:
        return "multi_label"
    if present and all(_is_number(v) for v in present):
        floats = [float(v) for v in present]
        if any(not math.isfinite(f) or f != int(f) for f in floats):
            return "regression"
    return "single_label"


def _label_key(value) -> str:
    """Labels are stored as strings: 1, 1.0 and "1" are the same class."""
    if _is_number(value) and float(value) == int(float(value)):
        return str(int(float(value)))
    return str(value).strip()


def _sort_labels(labels: set[str]) -> list[str]:
    if all(_is_number(v) for v in labels):
        return sorted(labels, key=float)
    return sorted(labels)


def _split_multi(value, separator: str | None) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [_label_key(v) for v in value]
    if value is None or str(value).strip() == "":
        return []
    if separator is None:
        return [_label_key(value)]
    return [_label_key(v) for v in str(value).split(separator) if v.strip()]


def resolve_column(split: Split, spec: str | None, what: str) -> str | None:
    """Pick the first of ``a|b|c`` present in the split, or fail naming the columns found."""
    if spec is None:
        return None
    found = [c for c in split.dataset.column_names if c != "_line"]
    for name in spec.split("|"):
        if name in split.dataset.column_names:
            return name
    raise UserError(
        f"{split.source}: no {what} column {spec!r}; found columns {found}. "
        f"Pass --{what}_column with one of them"
        + (
            " (or --column_names for a file without a header)"
            if split.source.endswith((".csv", ".tsv"))
            else ""
        )
    )


def read_labels(split: Split, column: str, problem_type: str, separator: str | None) -> list:
    """Raw labels of a split, validated (no missing values, numeric where needed)."""
    values = split.dataset[column]
    labels = []
    for index, value in enumerate(values):
        if problem_type == "regression":
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise UserError(
                    f"{split.location(index)}: column {column!r} expected a number, found {value!r}"
                ) from None
            if not math.isfinite(number):
                raise UserError(
                    f"{split.location(index)}: column {column!r} expected a finite number, found {value!r}"
                )
            labels.append(number)
        elif problem_type == "multi_label":
            labels.append(_split_multi(value, separator))
        else:
            if value is None or (isinstance(value, str) and not value.strip()):
                raise UserError(
                    f"{split.location(index)}: column {column!r} is empty; every row needs a label"
                )
            labels.append(_label_key(value))
    return labels


def _check_known_labels(split: Split, labels: list, known: list[str], problem_type: str) -> None:
    if problem_type == "regression":
        return
    known_set = set(known)
    for index, value in enumerate(labels):
        unknown = [v for v in (value if isinstance(value, list) else [value]) if v not in known_set]
        if unknown:
            raise UserError(
                f"{split.location(index)}: label {unknown[0]!r} never appears in the training data "
                f"(known labels: {', '.join(known[:20])})"
            )


def encode_labels(labels: list, label_names: list[str], problem_type: str) -> list:
    if problem_type == "regression":
        return [float(v) for v in labels]
    index = {name: i for i, name in enumerate(label_names)}
    if problem_type == "multi_label":
        encoded = []
        for value in labels:
            row = [0.0] * len(label_names)
            for name in value:
                row[index[name]] = 1.0
            encoded.append(row)
        return encoded
    return [index[v] for v in labels]


def parse_class_weights(spec: str | None, labels: list, label_names: list[str], problem_type: str):
    """``balanced`` (inverse frequency, as scikit-learn) or explicit weights in label order."""
    if not spec:
        return None
    if problem_type == "regression":
        raise UserError("--class_weights applies to classification, not regression")
    if spec == "balanced":
        if problem_type == "multi_label":
            counts = np.sum(encode_labels(labels, label_names, problem_type), axis=0)
            negatives = len(labels) - counts
            return [float(n / max(c, 1.0)) for n, c in zip(negatives, counts)]
        from sklearn.utils.class_weight import compute_class_weight

        ids = np.array(encode_labels(labels, label_names, problem_type))
        present = np.unique(ids)
        weights = np.ones(len(label_names))
        weights[present] = compute_class_weight("balanced", classes=present, y=ids)
        return [float(w) for w in weights]
    try:
        weights = [float(w) for w in spec.split(",")]
    except ValueError:
        raise UserError(
            f"--class_weights: expected 'balanced' or numbers separated by commas, found {spec!r}"
        ) from None
    if len(weights) != len(label_names):
        raise UserError(
            f"--class_weights: {len(weights)} weights given for {len(label_names)} labels ({', '.join(label_names)})"
        )
    return weights


# ---- preprocessing ----------------------------------------------------------------------------
def _texts(split: Split, column: str) -> list[str]:
    texts = split.dataset[column]
    for index, text in enumerate(texts):
        if text is None or not str(text).strip():
            raise UserError(f"{split.location(index)}: column {column!r} is empty; every row needs text")
    return [str(t) for t in texts]


def tokenize_split(split: Split, tokenizer, task_args, max_length: int, label_ids=None):
    """Tokenise a split into a ``datasets.Dataset`` with ``length`` (for batching) and labels."""
    import datasets

    text_col = resolve_column(split, task_args.text_column, "text")
    pair_col = resolve_column(split, task_args.text_pair_column, "text_pair")
    first = _texts(split, text_col)
    second = _texts(split, pair_col) if pair_col else None
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


@dataclass
class Prepared:
    """What a task hands to the shared training loop."""

    train: Any
    eval: Any
    metadata: dict
    collator: Any
    compute_metrics: Any
    head_kwargs: dict


def prepare(
    splits: dict[str, Split], tokenizer, task_args: ClassificationArguments, data_args, metadata=None
):
    """Validate and tokenise the splits. ``metadata`` (from a saved model) fixes the labels."""
    train, evaluation = splits.get("train"), splits.get("validation")
    first = train or evaluation
    for split in (train, evaluation):  # every column problem is reported before any label problem
        if split is not None:
            resolve_column(split, task_args.text_column, "text")
            resolve_column(split, task_args.text_pair_column, "text_pair")
            resolve_column(split, task_args.label_column, "label")
    label_col = resolve_column(first, task_args.label_column, "label")
    if metadata is None:
        raw = first.dataset[label_col]
        problem_type = task_args.problem_type
        if problem_type == "auto":
            problem_type = infer_problem_type(raw, task_args.label_separator)
        labels = read_labels(first, label_col, problem_type, task_args.label_separator)
        if problem_type == "regression":
            label_names = ["score"]
        else:
            names = {v for value in labels for v in (value if isinstance(value, list) else [value])}
            label_names = _sort_labels(names)
            if problem_type == "single_label" and len(label_names) < 2:
                raise UserError(
                    f"{first.source}: column {label_col!r} holds a single label {label_names}; classification "
                    "needs at least two (use --problem_type regression for scores)"
                )
        metadata = {
            "problem_type": problem_type,
            "label_names": label_names,
            "text_column": task_args.text_column,
            "text_pair_column": task_args.text_pair_column,
            "label_column": task_args.label_column,
            "label_separator": task_args.label_separator,
            "max_length": data_args.max_length,
            "thresholds": [0.5] * len(label_names) if problem_type == "multi_label" else None,
        }
    problem_type, label_names = metadata["problem_type"], metadata["label_names"]

    datasets_out = {}
    label_lists = {}
    for name, split in (("train", train), ("validation", evaluation)):
        if split is None:
            continue
        col = resolve_column(split, task_args.label_column, "label")
        labels = read_labels(split, col, problem_type, metadata.get("label_separator"))
        _check_known_labels(split, labels, label_names, problem_type)
        label_lists[name] = labels
        dataset, _ = tokenize_split(
            split,
            tokenizer,
            task_args,
            data_args.max_length,
            encode_labels(labels, label_names, problem_type),
        )
        datasets_out[name] = dataset

    weights = None
    if "train" in label_lists:
        weights = parse_class_weights(
            task_args.class_weights, label_lists["train"], label_names, problem_type
        )
    label_dtype = torch.long if problem_type == "single_label" else torch.float32
    head_kwargs = {
        "num_labels": len(label_names),
        "problem_type": problem_type,
        "pooling": task_args.pooling,
        "dropout": task_args.classifier_dropout,
        "class_weights": weights,
    }
    return Prepared(
        train=datasets_out.get("train"),
        eval=datasets_out.get("validation"),
        metadata=metadata,
        collator=lambda pad: PaddingCollator(tokenizer, pad_to_multiple_of=pad, label_dtype=label_dtype),
        compute_metrics=metrics_function(metadata),
        head_kwargs=head_kwargs,
    )


def build_model(encoder, head_kwargs: dict) -> SequenceClassifier:
    return SequenceClassifier(encoder, **head_kwargs)


def metrics_function(metadata: dict):
    """``compute_metrics`` for the Trainer, for the model's problem type."""
    problem_type, label_names = metadata["problem_type"], metadata["label_names"]

    def compute(eval_pred) -> dict:
        logits = np.asarray(eval_pred.predictions, dtype=np.float32)
        references = np.asarray(eval_pred.label_ids)
        # How many examples were scored: under several processes, each exactly once.
        counted = {"examples": len(references)}
        if problem_type == "regression":
            return {**regression_metrics(logits.reshape(-1), references), **counted}
        if problem_type == "multi_label":
            probs = 1.0 / (1.0 + np.exp(-logits))
            thresholds = np.asarray(metadata.get("thresholds") or [0.5] * len(label_names))
            predicted = (probs >= thresholds).astype(int)
            return {**multilabel_metrics(predicted, references.astype(int), label_names), **counted}
        return {**classification_metrics(logits.argmax(-1), references, label_names), **counted}

    return compute


def after_training(trainer, prepared: Prepared) -> dict:
    """Multi-label: tune per-label thresholds on the validation set and store them."""
    meta = prepared.metadata
    if (
        meta["problem_type"] != "multi_label"
        or prepared.eval is None
        or not getattr(trainer, "tune_thresholds", True)
    ):
        return {}
    output = trainer.predict(prepared.eval)
    probs = 1.0 / (1.0 + np.exp(-np.asarray(output.predictions, dtype=np.float32)))
    meta["thresholds"] = tune_thresholds(probs, np.asarray(output.label_ids).astype(int))
    return {"thresholds": dict(zip(meta["label_names"], meta["thresholds"]))}


# ---- prediction -------------------------------------------------------------------------------
@torch.inference_mode()
def predict_texts(
    model: SequenceClassifier,
    tokenizer,
    texts,
    pairs=None,
    batch_size=64,
    max_length=None,
    long_text="window",
    stride=64,
    precision="auto",
    disable_tqdm: bool | None = None,
) -> tuple[list[dict], int]:
    """Predict labels for texts; returns one result per text in input order, and how many
    texts were longer than ``max_length`` (windowed or truncated).

    Batches are sorted by length so little compute goes to padding.
    """
    meta = model.metadata
    max_length = max_length or meta.get("max_length") or tokenizer.model_max_length
    use_windows = long_text == "window" and pairs is None
    enc = tokenizer(
        list(texts),
        list(pairs) if pairs is not None else None,
        truncation=True,
        max_length=max_length,
        return_overflowing_tokens=use_windows,
        stride=stride if use_windows else 0,
    )
    owners = enc["overflow_to_sample_mapping"] if use_windows else list(range(len(texts)))
    counts = np.bincount(owners, minlength=len(texts))
    if use_windows:
        long_count = int((counts > 1).sum())
    else:
        full = tokenizer(list(texts), list(pairs) if pairs is not None else None)["input_ids"]
        long_count = sum(len(ids) > max_length for ids in full)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    order = sorted(range(len(owners)), key=lambda i: len(enc["input_ids"][i]))
    device = model.device
    logits_per_feature: list[np.ndarray | None] = [None] * len(owners)
    from ..tracking import progress

    batches = range(0, len(order), batch_size)
    for start in progress(batches, desc="predicting", unit="batch", disable=disable_tqdm):
        chunk = order[start : start + batch_size]
        batch = tokenizer.pad([{k: enc[k][i] for k in keys} for i in chunk], return_tensors="pt")
        with autocast_for(device, precision):
            out = model(**{k: v.to(device) for k, v in batch.items()})
        for i, row in zip(chunk, out.logits.float().cpu().numpy()):
            logits_per_feature[i] = row
    # Aggregate windows: the mean of window logits per text.
    sums = np.zeros((len(texts), logits_per_feature[0].shape[-1]), dtype=np.float64)
    for owner, row in zip(owners, logits_per_feature):
        sums[owner] += row
    logits = sums / counts[:, None]
    return [describe_prediction(row, meta, int(n)) for row, n in zip(logits, counts)], long_count


def describe_prediction(logits: np.ndarray, meta: dict, windows: int = 1) -> dict:
    problem_type, names = meta["problem_type"], meta["label_names"]
    result: dict[str, Any] = {}
    if problem_type == "regression":
        result["score"] = float(logits[0])
    elif problem_type == "multi_label":
        probs = 1.0 / (1.0 + np.exp(-logits))
        thresholds = meta.get("thresholds") or [0.5] * len(names)
        result["labels"] = [n for n, p, t in zip(names, probs, thresholds) if p >= t]
        result["probabilities"] = {n: round(float(p), 6) for n, p in zip(names, probs)}
    else:
        shifted = np.exp(logits - logits.max())
        probs = shifted / shifted.sum()
        best = int(probs.argmax())
        result["label"] = names[best]
        result["score"] = round(float(probs[best]), 6)
        result["probabilities"] = {n: round(float(p), 6) for n, p in zip(names, probs)}
    if windows > 1:
        result["windows"] = windows
    return result


@dataclass
class ClassificationPredictArguments(PredictArguments):
    """Prediction settings for classification (columns default to the ones used in training)."""

    text_column: str | None = field(default=None, metadata={"help": "Text column (default: as in training)."})
    text_pair_column: str | None = field(
        default=None, metadata={"help": "Second text column, for pair models."}
    )
    long_text: str = field(
        default="window",
        metadata={"help": "window (average overlapping windows) or truncate (cut, with a count)."},
    )
    window_stride: int = field(default=64, metadata={"help": "Tokens shared by neighbouring windows."})


def predict_file(args: ClassificationPredictArguments) -> dict:
    """Predict every row of ``input_file``; write JSONL (input order); return a summary.

    Example:
        >>> predict_file(ClassificationPredictArguments(model_dir="runs/sst2", input_file="new.tsv",
        ...              output_file="preds.jsonl"))  # doctest: +SKIP
    """
    from ..backbone import load_tokenizer
    from ..run import write_jsonl

    args.check()
    model = SequenceClassifier.from_pretrained(args.model_dir)
    tokenizer = load_tokenizer(args.model_dir)
    split = Split("predict", args.input_file, args.read_input())
    meta = model.metadata
    text_col = resolve_column(split, args.text_column or meta["text_column"], "text")
    pair_spec = args.text_pair_column or meta.get("text_pair_column")
    pair_col = resolve_column(split, pair_spec, "text_pair") if pair_spec else None
    texts = _texts(split, text_col)
    pairs = _texts(split, pair_col) if pair_col else None
    if torch.cuda.is_available():
        model.cuda()
    results, long_count = predict_texts(
        model,
        tokenizer,
        texts,
        pairs,
        batch_size=args.batch_size,
        max_length=args.max_length,
        long_text=args.long_text,
        stride=args.window_stride,
        disable_tqdm=args.disable_tqdm,
        precision=args.precision,
    )
    if long_count:
        how = (
            "split into overlapping windows" if args.long_text == "window" and pairs is None else "truncated"
        )
        logger.warning("%d of %d inputs were longer than max_length and were %s", long_count, len(texts), how)
    lines = split.dataset["_line"]
    records = [{"line": line, "text": text, **result} for line, text, result in zip(lines, texts, results)]
    write_jsonl(args.output_file, records)
    print(
        f"[encoder-tasks] wrote {len(records)} predictions to {args.output_file}"
        + (
            f" ({long_count} long inputs {'windowed' if args.long_text == 'window' else 'truncated'})"
            if long_count
            else ""
        )
    )
    return {"predictions": len(records), "long_inputs": long_count}


Arguments = ClassificationArguments
PredictArguments = ClassificationPredictArguments

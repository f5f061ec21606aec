"""Metrics computed with scikit-learn and scipy directly (no Hub-hosted ``evaluate`` scripts)."""

from __future__ import annotations

import numpy as np


def classification_metrics(predictions, references, label_names: list[str]) -> dict:
    """Accuracy, macro/micro F1 and a per-class report for single-label classification.

    Example:
        >>> m = classification_metrics([0, 1, 1], [0, 1, 0], ["neg", "pos"])
        >>> round(m["accuracy"], 4), round(m["macro_f1"], 4)
        (0.6667, 0.6667)
    """
    from sklearn.metrics import accuracy_score, classification_report, f1_score

    labels = list(range(len(label_names)))
    report = classification_report(
        references, predictions, labels=labels, target_names=label_names, output_dict=True, zero_division=0
    )
    per_class = {name: {k: float(v) for k, v in report[name].items()} for name in label_names}
    return {
        "accuracy": float(accuracy_score(references, predictions)),
        "macro_f1": float(f1_score(references, predictions, labels=labels, average="macro", zero_division=0)),
        "micro_f1": float(f1_score(references, predictions, labels=labels, average="micro", zero_division=0)),
        "per_class": per_class,
    }


def multilabel_metrics(predicted: np.ndarray, references: np.ndarray, label_names: list[str]) -> dict:
    """Micro/macro F1, subset accuracy and per-label scores for multi-hot arrays."""
    from sklearn.metrics import accuracy_score, f1_score, precision_recall_fscore_support

    precision, recall, f1, support = precision_recall_fscore_support(
        references, predicted, average=None, zero_division=0
    )
    return {
        "subset_accuracy": float(accuracy_score(references, predicted)),
        "micro_f1": float(f1_score(references, predicted, average="micro", zero_division=0)),
        "macro_f1": float(f1_score(references, predicted, average="macro", zero_division=0)),
        "per_class": {
            name: {"precision": float(p), "recall": float(r), "f1-score": float(f), "support": int(s)}
            for name, p, r, f, s in zip(label_names, precision, recall, f1, support)
        },
    }


def regression_metrics(predictions, references) -> dict:
    """Pearson, Spearman and mean squared error.

    Example:
        >>> m = regression_metrics([1.0, 2.0, 3.0], [1.0, 2.0, 4.0])
        >>> round(m["spearman"], 3), round(m["mse"], 3)
        (1.0, 0.333)
    """
    from scipy.stats import pearsonr, spearmanr

    predictions = np.asarray(predictions, dtype=np.float64).reshape(-1)
    references = np.asarray(references, dtype=np.float64).reshape(-1)
    constant = np.ptp(predictions) == 0 or np.ptp(references) == 0
    return {
        "pearson": 0.0 if constant else float(pearsonr(predictions, references)[0]),
        "spearman": 0.0 if constant else float(spearmanr(predictions, references)[0]),
        "mse": float(np.mean((predictions - references) ** 2)),
    }

"""Metrics computed with scikit-learn and scipy directly (no Hub-hosted ``evaluate`` scripts).

Macro averages are over the labels present in the references or the predictions (what
scikit-learn does when it is not given a label list): a label the model was trained on that
neither occurs in the evaluation data nor is predicted there has no F1 to average, rather
than an F1 of 0. The per-label reports still list every label.
"""

from __future__ import annotations

import numpy as np


def classification_metrics(predictions, references, label_names: list[str]) -> dict:
    """Accuracy, macro/micro F1 and a per-class report for single-label classification.

    ``predictions`` and ``references`` are label indices; a reference outside ``label_names``
    (a tag the model never saw) counts against accuracy and is left out of the F1 scores.

    Example:
        >>> m = classification_metrics([0, 1, 1], [0, 1, 0], ["neg", "pos"])
        >>> round(m["accuracy"], 4), round(m["macro_f1"], 4)
        (0.6667, 0.6667)
        >>> m = classification_metrics([0, 1], [0, 1], ["a", "b", "c"])  # "c" neither occurs nor is predicted
        >>> m["macro_f1"], sorted(m["per_class"]), m["per_class"]["c"]["support"]
        (1.0, ['a', 'b', 'c'], 0.0)
    """
    from sklearn.metrics import accuracy_score, classification_report, f1_score

    labels = list(range(len(label_names)))
    report = classification_report(
        references, predictions, labels=labels, target_names=label_names, output_dict=True, zero_division=0
    )
    per_class = {name: {k: float(v) for k, v in report[name].items()} for name in label_names}
    # How often each class was predicted: a model that predicts one class only is told apart
    # (encoder_tasks.diagnosis) from one that is merely inaccurate.
    predicted_ids = np.ravel(predictions).astype(int)
    for i, name in enumerate(label_names):
        per_class[name]["predicted"] = int(np.sum(predicted_ids == i))
    known = set(labels)
    present = sorted(known & {int(v) for v in np.concatenate([np.ravel(references), np.ravel(predictions)])})
    macro = (
        f1_score(references, predictions, labels=present, average="macro", zero_division=0)
        if present
        else 0.0
    )
    return {
        "accuracy": float(accuracy_score(references, predictions)),
        "macro_f1": float(macro),
        "micro_f1": float(f1_score(references, predictions, labels=labels, average="micro", zero_division=0)),
        "per_class": per_class,
    }


def multilabel_metrics(predicted: np.ndarray, references: np.ndarray, label_names: list[str]) -> dict:
    """Micro/macro F1, subset accuracy and per-label scores for multi-hot arrays.

    Macro F1 averages the labels that occur in ``references`` or ``predicted`` (0 when none does).

    Example:
        >>> refs = np.array([[1, 0, 0], [0, 1, 0]])
        >>> m = multilabel_metrics(refs.copy(), refs, ["x", "y", "z"])  # "z" never occurs
        >>> m["macro_f1"], m["subset_accuracy"], sorted(m["per_class"])
        (1.0, 1.0, ['x', 'y', 'z'])
    """
    from sklearn.metrics import accuracy_score, f1_score, precision_recall_fscore_support

    predicted, references = np.asarray(predicted), np.asarray(references)
    precision, recall, f1, support = precision_recall_fscore_support(
        references, predicted, average=None, zero_division=0
    )
    present = (references.sum(axis=0) + predicted.sum(axis=0)) > 0
    return {
        "subset_accuracy": float(accuracy_score(references, predicted)),
        "micro_f1": float(f1_score(references, predicted, average="micro", zero_division=0)),
        "macro_f1": float(np.mean(f1[present])) if present.any() else 0.0,
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
        # A model that predicts (nearly) a constant is told apart (encoder_tasks.diagnosis).
        "prediction_mean": float(np.mean(predictions)) if len(predictions) else 0.0,
        "prediction_std": float(np.std(predictions)) if len(predictions) else 0.0,
        "reference_std": float(np.std(references)) if len(references) else 0.0,
    }

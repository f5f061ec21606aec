"""Classification metrics for the Trainer, and the multi-label thresholds tuned after training.

The metric functions themselves (accuracy and F1, multi-label F1, Pearson and Spearman) are
shared with other tasks and live in :mod:`encoder_tasks.metrics`.

Example:
    >>> import numpy as np
    >>> from encoder_tasks.tasks.classification.args import ClassificationSettings
    >>> compute = ClassificationMetrics(ClassificationSettings(label_names=["neg", "pos"]))
    >>> pred = type("P", (), {"predictions": np.array([[0.9, 0.1], [0.2, 0.8]]), "label_ids": np.array([0, 0])})
    >>> compute(pred)["accuracy"], compute(pred)["examples"]
    (0.5, 2)
"""

from __future__ import annotations

import numpy as np

from ...metrics import classification_metrics, multilabel_metrics, regression_metrics
from .args import ClassificationSettings


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-logits))


def tune_thresholds(probabilities: np.ndarray, references: np.ndarray, grid=None) -> list[float]:
    """Per-label decision threshold maximising that label's F1 on held-out data.

    Example:
        >>> probs = np.array([[0.3], [0.2], [0.1]])
        >>> tune_thresholds(probs, np.array([[1], [1], [0]]))
        [0.15]
    """
    from sklearn.metrics import f1_score

    grid = np.linspace(0.05, 0.95, 19) if grid is None else np.asarray(grid)
    thresholds = []
    for j in range(references.shape[1]):
        scores = [f1_score(references[:, j], probabilities[:, j] >= t, zero_division=0) for t in grid]
        thresholds.append(round(float(grid[int(np.argmax(scores))]), 6))
    return thresholds


class ClassificationMetrics:
    """``compute_metrics`` for the Trainer, for the model's problem type.

    It holds the settings (not a copy of the thresholds) so that thresholds tuned after
    training (:func:`tune_after_training`) score the final evaluation.
    """

    def __init__(self, settings: ClassificationSettings):
        self.settings = settings

    def __call__(self, eval_pred) -> dict:
        problem_type, label_names = self.settings.problem_type, self.settings.label_names
        logits = np.asarray(eval_pred.predictions, dtype=np.float32)
        references = np.asarray(eval_pred.label_ids)
        # How many examples were scored: under several processes, each exactly once.
        counted = {"examples": len(references)}
        if problem_type == "regression":
            return {**regression_metrics(logits.reshape(-1), references), **counted}
        if problem_type == "multi_label":
            thresholds = np.asarray(self.settings.thresholds or [0.5] * len(label_names))
            predicted = (sigmoid(logits) >= thresholds).astype(int)
            return {**multilabel_metrics(predicted, references.astype(int), label_names), **counted}
        return {**classification_metrics(logits.argmax(-1), references, label_names), **counted}


def tune_after_training(trainer, prepared, task_args) -> dict:
    """Multi-label with ``--tune_thresholds`` (the default) and validation data: tune each
    label's threshold there; the new thresholds go into ``prepared.settings`` (saved with the
    model) and score the final evaluation. Returns ``{"thresholds": {label: value}}``."""
    settings = prepared.settings
    if settings.problem_type != "multi_label" or prepared.eval is None or not task_args.tune_thresholds:
        return {}
    output = trainer.predict(prepared.eval)
    probs = sigmoid(np.asarray(output.predictions, dtype=np.float32))
    thresholds = tune_thresholds(probs, np.asarray(output.label_ids).astype(int))
    prepared.settings = settings.replace(thresholds=thresholds)
    if isinstance(prepared.compute_metrics, ClassificationMetrics):
        prepared.compute_metrics.settings = prepared.settings
    return {"thresholds": dict(zip(settings.label_names, thresholds))}

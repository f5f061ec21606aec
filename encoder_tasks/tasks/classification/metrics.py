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

import logging

import numpy as np

from ...data.fingerprint import data_fingerprint, warn_if_tuned_on
from ...metrics import (
    binary_calibration_metrics,
    calibration_metrics,
    classification_metrics,
    fit_temperature,
    multilabel_metrics,
    regression_metrics,
    softmax,
)
from .args import ClassificationSettings

logger = logging.getLogger(__name__)

#: Metrics reported for the tuned thresholds (``tuned_<name>`` in ``metrics.json``).
TUNED_METRICS = ("micro_f1", "macro_f1", "subset_accuracy")


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

    Multi-label predictions are cut at the thresholds of the ``settings`` it was built with:
    0.5 in training (the thresholds tuned after training do not score the final evaluation,
    whose data they were tuned on; :func:`tune_after_training` reports them apart), the saved
    ones when ``evaluate`` scores a saved model. ``source`` names the evaluation data.

    Calibration (``ece``, ``brier``, ``nll``, ``reliability``): single-label from the softmax
    (after the settings' temperature, as ``predict`` gives it), multi-label from each label's
    sigmoid as a yes/no event. Regression has no probabilities to judge.
    """

    def __init__(self, settings: ClassificationSettings, source: str | None = None):
        self.settings = settings
        self.source = source

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
            probs = sigmoid(logits)
            predicted = (probs >= thresholds).astype(int)
            calibration = binary_calibration_metrics(probs, references.astype(int))
            return {
                **multilabel_metrics(predicted, references.astype(int), label_names),
                **calibration,
                **counted,
            }
        probs = softmax(logits, self.settings.temperature or 1.0)
        return {
            **classification_metrics(logits.argmax(-1), references, label_names),
            **calibration_metrics(probs, references),
            **counted,
        }


def tune_after_training(trainer, prepared, task_args) -> dict:
    """What the task tunes on validation data after training: the multi-label thresholds
    (:func:`tune_multilabel_thresholds`) and the ``--calibrate temperature`` of a single-label
    model (:func:`fit_calibration`). Returns what ``train`` reports as ``tuned_*``."""
    return {
        **tune_multilabel_thresholds(trainer, prepared, task_args),
        **fit_calibration(trainer, prepared, task_args),
    }


def _source(prepared):
    metrics = prepared.compute_metrics
    return metrics.source if isinstance(metrics, ClassificationMetrics) else None


def tune_multilabel_thresholds(trainer, prepared, task_args) -> dict:
    """Multi-label with ``--tune_thresholds`` (the default) and validation data: tune each
    label's threshold there and save them (``prepared.settings``, with the data they were tuned
    on); the final evaluation's ``eval_*`` stay at 0.5.

    Returns what ``train`` reports as ``tuned_*``: ``thresholds`` ({label: value}), ``on`` (the
    data), the scores with the tuned thresholds on that same data (optimistic) and a ``note``
    saying so.
    """
    settings = prepared.settings
    if settings.problem_type != "multi_label" or prepared.eval is None or not task_args.tune_thresholds:
        return {}
    output = trainer.predict(prepared.eval)
    probs = sigmoid(np.asarray(output.predictions, dtype=np.float32))
    references = np.asarray(output.label_ids).astype(int)
    thresholds = tune_thresholds(probs, references)
    source = _source(prepared)
    tuned_on = data_fingerprint(source) if source else None
    prepared.settings = settings.replace(thresholds=thresholds, thresholds_tuned_on=tuned_on)
    scores = multilabel_metrics(
        (probs >= np.asarray(thresholds)).astype(int), references, settings.label_names
    )
    where = tuned_on["path"] if tuned_on else "the validation data"
    note = (
        f"thresholds tuned on {where}; tuned_* are scored with them on that same data, so they are "
        "optimistic; eval_* are scored at 0.5"
    )
    logger.info(
        "multi-label thresholds tuned on %s and saved with the model (predict and evaluate use them); "
        "metrics: eval_* are scored at 0.5, tuned_* (micro F1 %.4f) with the tuned thresholds on the data "
        "they were tuned on, so they are optimistic",
        where,
        scores["micro_f1"],
    )
    return {
        "thresholds": dict(zip(settings.label_names, thresholds)),
        "on": where,
        **{name: scores[name] for name in TUNED_METRICS},
        "note": note,
    }


def fit_calibration(trainer, prepared, task_args) -> dict:
    """``--calibrate temperature``: fit one temperature on the validation set's logits
    (:func:`encoder_tasks.metrics.fit_temperature`) and save it in ``prepared.settings`` (with
    the data it was fitted on), so ``predict``, ``serve``, ``evaluate`` and a reranker divide the
    logits by it before the softmax. The run's ``eval_*`` stay at T = 1, as trained.

    Returns ``temperature``, the ECE/NLL/Brier before and after on that same data (in-sample: the
    figures to trust come from data the temperature has not seen) and a ``note`` saying so.
    Without validation data, or for a model that is not single-label, nothing is fitted and a
    warning says why.
    """
    if getattr(task_args, "calibrate", "none") != "temperature":
        return {}
    settings = prepared.settings
    why = None
    if settings.problem_type != "single_label":
        why = f"the model is {settings.problem_type} (temperature scaling calibrates a single-label softmax)"
    elif prepared.eval is None:
        why = "there is no validation data to fit it on (give --validation_file)"
    if why:
        logger.warning("--calibrate temperature: nothing fitted: %s", why)
        return {"calibration_note": f"--calibrate temperature: nothing fitted: {why}"}
    output = trainer.predict(prepared.eval)
    logits = np.asarray(output.predictions, dtype=np.float64)
    references = np.asarray(output.label_ids).reshape(-1)
    temperature = round(fit_temperature(logits, references), 6)
    source = _source(prepared)
    fitted_on = data_fingerprint(source) if source else None
    prepared.settings = settings.replace(temperature=temperature, temperature_fitted_on=fitted_on)
    before = calibration_metrics(softmax(logits), references)
    after = calibration_metrics(softmax(logits, temperature), references)
    where = fitted_on["path"] if fitted_on else "the validation data"
    logger.info(
        "temperature %.4f fitted on %s and saved with the model (predict, serve and evaluate use it): "
        "ECE %.4f -> %.4f, NLL %.4f -> %.4f there (in-sample)",
        temperature,
        where,
        before["ece"],
        after["ece"],
        before["nll"],
        after["nll"],
    )
    return {
        "temperature": temperature,
        "temperature_on": where,
        **{
            f"{name}_{when}": scores[name]
            for name in ("ece", "nll", "brier")
            for when, scores in (("before", before), ("after", after))
        },
        "calibration_note": (
            f"temperature fitted on {where}; tuned_*_before/after are measured on that same data "
            "(in-sample); eval_* are at T = 1, as trained"
        ),
    }


def warn_if_evaluating_on_tuning_data(settings: ClassificationSettings, source: str) -> bool:
    """``evaluate`` scores a model with what it saved after training (as ``predict`` uses it):
    warn when ``source`` is the data that was tuned on (multi-label thresholds, the
    ``--calibrate temperature`` of a single-label model)."""
    if settings.problem_type == "single_label":
        return warn_if_tuned_on(
            settings.temperature_fitted_on,
            source,
            "the model's temperature (--calibrate temperature)",
            "its ECE/NLL/Brier there are in-sample; evaluate on data the model has not seen",
        )
    if settings.problem_type != "multi_label":
        return False
    return warn_if_tuned_on(
        settings.thresholds_tuned_on,
        source,
        "the model's multi-label thresholds",
        "evaluate on data the model has not seen; the training run's eval_* in metrics.json are scored at 0.5",
    )


def evaluation_records(split, settings: ClassificationSettings, predictions, label_ids) -> list[dict]:
    """``evaluate --write_predictions``: per row of ``split``, its text (and pair), the gold label
    and the predicted one (multi-label: the label lists; regression: the scores and the error).

    Example:
        >>> import datasets
        >>> from encoder_tasks.data import Split
        >>> split = Split("validation", "dev.csv", datasets.Dataset.from_dict({"text": ["good", "bad"]}))
        >>> settings = ClassificationSettings(label_names=["neg", "pos"], text_column="text")
        >>> evaluation_records(split, settings, np.array([[0.1, 0.9], [0.2, 0.8]]), np.array([1, 0]))[1]
        {'text': 'bad', 'gold': 'neg', 'prediction': 'pos', 'correct': False}
    """
    from ...data import resolve_column

    logits = np.asarray(predictions[0] if isinstance(predictions, tuple) else predictions, dtype=np.float32)
    references = np.asarray(label_ids)
    if len(logits) != len(split.dataset):
        raise ValueError(f"{len(logits)} predictions for {len(split.dataset)} rows of {split.source}")
    text_col = resolve_column(split, settings.text_column, "text")
    pair_col = (
        resolve_column(split, settings.text_pair_column, "text_pair") if settings.text_pair_column else None
    )
    names = settings.label_names
    records = []
    for i in range(len(logits)):
        record = {"text": split.dataset[i][text_col]}
        if pair_col:
            record["text_pair"] = split.dataset[i][pair_col]
        if settings.problem_type == "regression":
            gold, predicted = float(references[i]), float(logits[i].reshape(-1)[0])
            record.update(gold=gold, prediction=round(predicted, 6), error=round(predicted - gold, 6))
        elif settings.problem_type == "multi_label":
            thresholds = np.asarray(settings.thresholds or [0.5] * len(names))
            chosen = sigmoid(logits[i]) >= thresholds
            gold = [n for n, on in zip(names, references[i]) if on]
            predicted = [n for n, on in zip(names, chosen) if on]
            record.update(gold=gold, prediction=predicted, correct=gold == predicted)
        else:
            gold, predicted = names[int(references[i])], names[int(logits[i].argmax())]
            record.update(gold=gold, prediction=predicted, correct=gold == predicted)
        records.append(record)
    return records

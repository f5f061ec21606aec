"""Metrics computed with scikit-learn and scipy directly (no Hub-hosted ``evaluate`` scripts).

Macro averages are over the labels present in the references or the predictions (what
scikit-learn does when it is not given a label list): a label the model was trained on that
neither occurs in the evaluation data nor is predicted there has no F1 to average, rather
than an F1 of 0. The per-label reports still list every label.
"""

from __future__ import annotations

import numpy as np

#: Words in a metric's name that mean lower is better (a loss, an error, a perplexity).
LOWER_IS_BETTER = ("loss", "perplexity", "mse", "mae", "rmse", "error")


def lower_is_better(metric: str) -> bool:
    """Whether a smaller ``metric`` is the better one, by its name (the rule early stopping and
    ``search`` share; transformers' own ``greater_is_better`` knows "loss" only).

    Example:
        >>> lower_is_better("eval_loss"), lower_is_better("eval_perplexity"), lower_is_better("eval_f1")
        (True, True, False)
    """
    return any(word in metric for word in LOWER_IS_BETTER)


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


# ---- calibration ------------------------------------------------------------------------------
#: Equal-width confidence bins of the expected calibration error (Guo et al., 2017).
CALIBRATION_BINS = 15
#: Probabilities are clipped to [EPS, 1 - EPS] in the log-losses, so one confident mistake
#: costs a large but finite amount rather than making the mean infinite.
EPS = 1e-12


def reliability_bins(confidence, outcome, bins: int = CALIBRATION_BINS) -> dict:
    """Confidences cut into ``bins`` equal-width bins ``(i/bins, (i+1)/bins]`` (0 falls in the
    first): per bin the mean confidence, the observed frequency of ``outcome`` and the count
    (bins with no example give ``None``). What a reliability diagram draws.

    Example:
        >>> r = reliability_bins([0.95, 0.9, 0.2], [1, 0, 0], bins=2)
        >>> r["count"], r["accuracy"], [round(c, 3) for c in r["confidence"]]
        ([1, 2], [0.0, 0.5], [0.2, 0.925])
    """
    confidence = np.asarray(confidence, dtype=np.float64).reshape(-1)
    outcome = np.asarray(outcome, dtype=np.float64).reshape(-1)
    index = np.clip(np.ceil(confidence * bins).astype(int) - 1, 0, bins - 1)
    count = np.bincount(index, minlength=bins)
    sums = np.bincount(index, weights=confidence, minlength=bins)
    hits = np.bincount(index, weights=outcome, minlength=bins)
    return {
        "count": [int(c) for c in count],
        "confidence": [float(s / c) if c else None for s, c in zip(sums, count)],
        "accuracy": [float(h / c) if c else None for h, c in zip(hits, count)],
    }


def expected_calibration_error(confidence, outcome, bins: int = CALIBRATION_BINS) -> float:
    """``sum_b n_b / n * |frequency_b - confidence_b|`` over equal-width bins (0 for no data).

    ``confidence`` is the probability given to an event, ``outcome`` whether it happened
    (top-label ECE: the top probability and whether the top label was right).

    Example:
        >>> round(expected_calibration_error([0.9, 0.9, 0.6, 0.6], [1, 0, 1, 1]), 4)  # |0.5 - 0.9| / 2 + |1.0 - 0.6| / 2
        0.4
    """
    table = reliability_bins(confidence, outcome, bins)
    total = sum(table["count"])
    if not total:
        return 0.0
    gaps = [
        n / total * abs(a - c) for n, a, c in zip(table["count"], table["accuracy"], table["confidence"]) if n
    ]
    return float(sum(gaps))


def softmax(logits, temperature: float = 1.0) -> np.ndarray:
    """Softmax over the last axis of ``logits / temperature``, in float64.

    Example:
        >>> softmax(np.array([0.0, np.log(3.0)])).round(4).tolist()
        [0.25, 0.75]
    """
    scaled = np.asarray(logits, dtype=np.float64) / float(temperature)
    shifted = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def calibration_metrics(probabilities, references, bins: int = CALIBRATION_BINS) -> dict:
    """How far to trust a single-label classifier's probabilities ``[n, classes]``:

    - ``ece``: top-label expected calibration error (``bins`` equal-width bins);
    - ``brier``: the multi-class Brier score, ``mean_i sum_k (p_ik - [y_i = k])^2`` (0 best, 2 worst);
    - ``nll``: the mean negative log-likelihood of the true label;
    - ``reliability``: the bins of the top-label reliability diagram (:func:`reliability_bins`).

    A reference outside ``0..classes-1`` (a label the model never saw) has no probability and
    is left out (``calibration_examples`` says how many were scored).

    Example:
        >>> m = calibration_metrics(np.array([[0.8, 0.2], [0.3, 0.7]]), [0, 0])
        >>> round(m["brier"], 4), round(m["nll"], 4), round(m["ece"], 4)
        (0.53, 0.7136, 0.45)
    """
    probabilities = np.asarray(probabilities, dtype=np.float64)
    references = np.asarray(references).reshape(-1).astype(np.int64)
    known = (references >= 0) & (references < probabilities.shape[-1])
    probabilities, references = probabilities[known], references[known]
    if not len(references):
        return {"ece": 0.0, "brier": 0.0, "nll": 0.0, "calibration_examples": 0}
    rows = np.arange(len(references))
    onehot = np.zeros_like(probabilities)
    onehot[rows, references] = 1.0
    top = probabilities.argmax(-1)
    confidence, correct = probabilities[rows, top], (top == references).astype(np.float64)
    return {
        "ece": expected_calibration_error(confidence, correct, bins),
        "brier": float(np.mean(np.sum((probabilities - onehot) ** 2, axis=-1))),
        "nll": float(np.mean(-np.log(np.clip(probabilities[rows, references], EPS, 1.0)))),
        "calibration_examples": int(len(references)),
        "reliability": reliability_bins(confidence, correct, bins),
    }


def binary_calibration_metrics(probability, outcome, bins: int = CALIBRATION_BINS) -> dict:
    """Calibration of probabilities given to yes/no events (an entity is right; a label applies):
    ``ece`` over ``bins`` bins of the probability, ``brier`` ``mean (p - y)^2``, ``nll`` the mean
    binary log-loss, ``reliability`` the diagram's bins, ``calibration_examples`` the count.

    Example:
        >>> m = binary_calibration_metrics([0.9, 0.6], [1, 0])
        >>> round(m["brier"], 4), round(m["nll"], 4), round(m["ece"], 4)
        (0.185, 0.5108, 0.35)
    """
    probability = np.asarray(probability, dtype=np.float64).reshape(-1)
    outcome = np.asarray(outcome, dtype=np.float64).reshape(-1)
    if not len(probability):
        return {"ece": 0.0, "brier": 0.0, "nll": 0.0, "calibration_examples": 0}
    clipped = np.clip(probability, EPS, 1.0 - EPS)
    return {
        "ece": expected_calibration_error(probability, outcome, bins),
        "brier": float(np.mean((probability - outcome) ** 2)),
        "nll": float(np.mean(-(outcome * np.log(clipped) + (1 - outcome) * np.log(1 - clipped)))),
        "calibration_examples": int(len(probability)),
        "reliability": reliability_bins(probability, outcome, bins),
    }


def fit_temperature(logits, references, bounds: tuple[float, float] = (0.05, 20.0)) -> float:
    """The temperature ``T`` minimising the NLL of ``softmax(logits / T)`` on held-out data
    (temperature scaling, Guo et al., 2017): one parameter, so the predicted label never changes.

    The NLL is convex in ``1/T``; the search is a bounded scalar minimisation over ``log T``.
    References outside the classes are left out; with none left, ``T`` is 1.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> refs = rng.integers(0, 2, 400)
        >>> clean = np.where(rng.random(400) < 0.8, refs, 1 - refs)  # 80% right
        >>> logits = np.eye(2)[clean] * 8.0  # but ~100% sure: overconfident
        >>> fit_temperature(logits, refs) > 2.0
        True
    """
    from scipy.optimize import minimize_scalar

    logits = np.asarray(logits, dtype=np.float64)
    references = np.asarray(references).reshape(-1).astype(np.int64)
    known = (references >= 0) & (references < logits.shape[-1])
    logits, references = logits[known], references[known]
    if not len(references):
        return 1.0
    rows = np.arange(len(references))

    def nll(log_t: float) -> float:
        scaled = logits / np.exp(log_t)
        top = scaled.max(axis=-1, keepdims=True)
        log_z = np.log(np.exp(scaled - top).sum(axis=-1)) + top[:, 0]
        return float(np.mean(log_z - scaled[rows, references]))

    low, high = np.log(bounds[0]), np.log(bounds[1])
    found = minimize_scalar(nll, bounds=(low, high), method="bounded", options={"xatol": 1e-5})
    best = float(found.x)
    # The bounded search may stop near, not at, a better end or T=1: keep the lowest NLL seen.
    best = min((best, 0.0, low, high), key=nll)
    return float(np.exp(best))

"""Labels: the problem type guessed from the raw values, label names, encoding, class weights.

Labels are kept as strings (``1``, ``1.0`` and ``"1"`` are the same class), sorted numerically
when every label is a number.

Example:
    >>> infer_problem_type(["pos", "neg"], None), infer_problem_type([0.5, 4.2], None)
    ('single_label', 'regression')
    >>> encode_labels([["x", "y"], []], ["x", "y"], "multi_label")
    [[1.0, 1.0], [0.0, 0.0]]
"""

from __future__ import annotations

import math

import numpy as np

from ...data import Split
from ...errors import UserError


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


def sort_labels(labels: set[str]) -> list[str]:
    """Label names in a stable order: numerically when all are numbers, else alphabetically.

    Example:
        >>> sort_labels({"10", "2", "1"})
        ['1', '2', '10']
    """
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


def check_known_labels(split: Split, labels: list, known: list[str], problem_type: str) -> None:
    """Fail on the first label the model was not trained on, naming its line."""
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
    """Model targets: class ids, multi-hot rows or floats."""
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
    """``balanced`` (inverse frequency, as scikit-learn) or explicit weights in label order.

    Example:
        >>> parse_class_weights("balanced", ["a", "a", "a", "b"], ["a", "b"], "single_label")
        [0.6666666666666666, 2.0]
    """
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

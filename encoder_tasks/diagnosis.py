""" "Learned nothing" detection: after training and after ``evaluate``, a model whose predictions
show it has not learned the task yet (one class for every example, only ``O`` tags, a constant
score, an abstention on every question, one token for every mask) gets a warning saying so and
what to try. Read from the evaluation metrics every task reports (no task is imported here):

- ``per_class`` / ``per_type`` with ``predicted`` counts (classification, pair, plain tags);
- ``predicted_entities`` / ``gold_entities`` (NER);
- ``prediction_std`` / ``reference_std`` / ``prediction_mean`` (regression, embedding similarity);
- ``answered`` / ``questions`` (QA); ``distinct_predictions`` / ``masked_tokens`` (MLM).

Example:
    >>> per_class = {"neg": {"support": 5.0, "predicted": 10}, "pos": {"support": 5.0, "predicted": 0}}
    >>> print(learned_nothing({"eval_per_class": per_class}))
    the model predicts only 'neg' for all 10 examples (the data has 2 classes)
    >>> learned_nothing({"eval_predicted_entities": 3, "eval_gold_entities": 5}) is None
    True
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

#: A spread of predictions below this fraction of the references' spread counts as constant.
CONSTANT_FRACTION = 1e-3


def _get(metrics: dict[str, Any], name: str, prefix: str) -> Any:
    return metrics.get(prefix + name, metrics.get(name))


def learned_nothing(metrics: dict[str, Any], prefix: str = "eval_") -> str | None:
    """What shows the model learned nothing, in words, or None (metrics with or without ``prefix``)."""
    table = _get(metrics, "per_class", prefix) or _get(metrics, "per_type", prefix)
    if (
        isinstance(table, dict)
        and table
        and all(isinstance(r, dict) and "predicted" in r for r in table.values())
    ):
        predicted = {name: int(r["predicted"]) for name, r in table.items() if r["predicted"]}
        gold = [name for name, r in table.items() if r.get("support", 0)]
        if len(predicted) == 1 and len(gold) > 1:
            name, count = next(iter(predicted.items()))
            return f"the model predicts only {name!r} for all {count} examples (the data has {len(gold)} classes)"
    found, gold_entities = _get(metrics, "predicted_entities", prefix), _get(metrics, "gold_entities", prefix)
    if found == 0 and gold_entities:
        return f"the model predicts only 'O': no entity found, where the data has {gold_entities}"
    spread, reference = _get(metrics, "prediction_std", prefix), _get(metrics, "reference_std", prefix)
    if spread is not None and reference and spread <= CONSTANT_FRACTION * reference:
        mean = _get(metrics, "prediction_mean", prefix) or 0.0
        return (
            f"the model predicts a constant: {mean:.4g} for every example (spread {spread:.2g}, "
            f"against {reference:.2g} in the data)"
        )
    answered, questions = _get(metrics, "answered", prefix), _get(metrics, "questions", prefix)
    if answered == 0 and questions:
        return f"the model abstains on every question ({questions} questions, none answered)"
    distinct, masked = _get(metrics, "distinct_predictions", prefix), _get(metrics, "masked_tokens", prefix)
    if distinct == 1 and masked and masked > 1:
        return f"the model predicts the same token for all {masked} masked tokens"
    return None


def hint(steps: int | None = None, learning_rate: float | None = None) -> str:
    """What usually causes it, with the run's own numbers where known."""
    few = (
        f"too few optimiser steps ({steps}): train longer (--num_train_epochs) or on more data"
        if steps
        else ("too little training: more epochs (--num_train_epochs) or more data")
    )
    rate = f"--learning_rate {learning_rate:g}" if learning_rate is not None else "--learning_rate"
    return (
        f"likely causes: {few}; a learning rate too high or too low ({rate}; 2e-5 to 5e-5 suits most "
        "fine-tuning); or labels that do not follow from the inputs (check the label column and the data)"
    )


def warn_if_learned_nothing(
    metrics: dict[str, Any], where: str, steps: int | None = None, learning_rate: float | None = None
) -> str | None:
    """Log a warning when :func:`learned_nothing` finds something; returns the message."""
    found = learned_nothing(metrics)
    if found is None:
        return None
    advice = hint(steps, learning_rate)
    message = f"{where}: {found}; it has learned nothing useful yet. {advice[0].upper()}{advice[1:]}"
    logger.warning(message)
    return message


#: Columns of the per-label table, in order, as the metrics name them.
_COLUMNS = (
    ("precision", "precision"),
    ("recall", "recall"),
    ("f1-score", "f1"),
    ("f1", "f1"),
    ("support", "support"),
    ("predicted", "predicted"),
)


def metric_tables(metrics: dict[str, Any]) -> list[str]:
    """The per-label (per-class, per-type) scores and the NER errors by kind, as text lines.

    Example:
        >>> rows = {"PER": {"precision": 0.5, "recall": 1.0, "f1": 0.6667, "support": 2}}
        >>> print("\\n".join(metric_tables({"eval_per_type": rows,
        ...     "eval_errors": {"correct": 2, "missed": 0, "spurious": 2, "wrong_type": 0, "wrong_boundary": 0}})))
          per type     precision    recall        f1   support
          PER             0.5000    1.0000    0.6667         2
          errors: correct 2, missed 0, spurious 2, wrong type 0, wrong boundary 0
    """
    lines: list[str] = []
    for key, value in metrics.items():
        name = key.removeprefix("eval_")
        if name in ("per_class", "per_type") and isinstance(value, dict) and value:
            rows = {label: r for label, r in value.items() if isinstance(r, dict)}
            if not rows:
                continue
            first = next(iter(rows.values()))
            columns = [(k, title) for k, title in _COLUMNS if k in first]
            columns = [c for i, c in enumerate(columns) if c[1] not in [t for _, t in columns[:i]]]
            width = max(12, *(len(str(label)) + 2 for label in rows))
            lines.append(f"  {name.replace('_', ' '):<{width}}" + "".join(f"{t:>10}" for _, t in columns))
            for label, row in rows.items():
                cells = "".join(
                    f"{row.get(k, 0):>10.4f}"
                    if k not in ("support", "predicted")
                    else f"{int(row.get(k, 0)):>10d}"
                    for k, _ in columns
                )
                lines.append(f"  {str(label):<{width}}{cells}")
        elif name == "errors" and isinstance(value, dict):
            lines.append("  errors: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in value.items()))
    return lines

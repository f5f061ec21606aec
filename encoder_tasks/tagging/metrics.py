"""Entity-level scores with seqeval: strict IOB2 and the default (lenient, conlleval-like)
mode, micro precision/recall/F1, per-type scores, and token accuracy.

Strict mode counts an entity only when its exact IOB2 tags match; lenient mode (seqeval's
default, as ``run_ner.py`` reports it) also reads ill-formed sequences such as ``O I-PER``
as entities. Gold tags are valid IOB2 here, so the two differ only on predictions.

Example:
    >>> m = entity_metrics([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]])
    >>> m["f1_strict"], m["f1_lenient"], m["per_type"]["PER"]["f1"]
    (1.0, 1.0, 1.0)
    >>> entity_metrics([["B-PER", "I-PER"]], [["O", "I-PER"]])["f1_lenient"]
    0.0
"""

from __future__ import annotations

import numpy as np


def entity_metrics(references: list[list[str]], predictions: list[list[str]]) -> dict:
    """seqeval scores of IOB2 predictions against IOB2 references."""
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    strict = {"mode": "strict", "scheme": IOB2}
    report = classification_report(references, predictions, output_dict=True, zero_division=0, **strict)
    per_type = {
        name: {
            "precision": float(row["precision"]),
            "recall": float(row["recall"]),
            "f1": float(row["f1-score"]),
            "support": int(row["support"]),
        }
        for name, row in report.items()
        if not name.endswith(" avg")
    }
    flat_ref = [t for s in references for t in s]
    flat_pred = [t for s in predictions for t in s]
    accuracy = float(np.mean([a == b for a, b in zip(flat_ref, flat_pred)])) if flat_ref else 0.0
    return {
        "f1_strict": float(f1_score(references, predictions, zero_division=0, **strict)),
        "precision_strict": float(precision_score(references, predictions, zero_division=0, **strict)),
        "recall_strict": float(recall_score(references, predictions, zero_division=0, **strict)),
        "f1_lenient": float(f1_score(references, predictions, zero_division=0)),
        "precision_lenient": float(precision_score(references, predictions, zero_division=0)),
        "recall_lenient": float(recall_score(references, predictions, zero_division=0)),
        "accuracy": accuracy,
        "per_type": per_type,
    }


def plain_tag_metrics(
    references: list[list[str]], predictions: list[list[str]], label_names: list[str]
) -> dict:
    """Token accuracy and macro/micro F1 for tags without spans (POS tagging)."""
    from ..metrics import classification_metrics

    index = {name: i for i, name in enumerate(label_names)}
    unknown = len(label_names)  # tags the model never saw count as errors
    ref = [index.get(t, unknown) for s in references for t in s]
    pred = [index[t] for s in predictions for t in s]
    metrics = classification_metrics(pred, ref, label_names)
    metrics["per_type"] = metrics.pop("per_class")
    return metrics

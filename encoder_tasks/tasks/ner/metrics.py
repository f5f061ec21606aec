"""Tagging metrics: entity-level scores with seqeval (strict IOB2 and the default lenient,
conlleval-like mode: micro precision/recall/F1, per-type scores, token accuracy), plain-tag
scores for POS, and :class:`TaggingMetrics`, the Trainer's ``compute_metrics`` over whole
sentences.

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

from typing import Any

import numpy as np

from ...metrics import binary_calibration_metrics
from .args import NerSettings
from .decoding import cpu_crf_copy, decode, decoding_mode, entity_probabilities
from .features import stitch
from .schemes import spans_from_iob2


def entity_errors(references: list[list[str]], predictions: list[list[str]]) -> dict[str, int]:
    """Entity errors by kind, sentence by sentence: a gold entity predicted nowhere near
    (``missed``), with the right span but another type (``wrong_type``), or overlapping a
    prediction with other boundaries (``wrong_boundary``, whatever its type); a predicted entity
    overlapping no gold one (``spurious``). Exact matches are ``correct``.

    Example:
        >>> gold = [["B-PER", "I-PER", "O", "B-LOC", "O", "O"]]
        >>> pred = [["B-ORG", "I-ORG", "O", "B-LOC", "I-LOC", "B-PER"]]
        >>> entity_errors(gold, pred)
        {'correct': 0, 'missed': 0, 'spurious': 1, 'wrong_type': 1, 'wrong_boundary': 1}
    """
    from seqeval.metrics.sequence_labeling import get_entities

    counts = dict.fromkeys(("correct", "missed", "spurious", "wrong_type", "wrong_boundary"), 0)
    for gold_tags, pred_tags in zip(references, predictions):
        gold = {(k, s, e) for k, s, e in get_entities(list(gold_tags))}
        pred = {(k, s, e) for k, s, e in get_entities(list(pred_tags))}

        def overlaps(a, others):
            return [o for o in others if o[1] <= a[2] and a[1] <= o[2]]

        for entity in gold:
            near = overlaps(entity, pred)
            if entity in pred:
                counts["correct"] += 1
            elif not near:
                counts["missed"] += 1
            elif any((o[1], o[2]) == (entity[1], entity[2]) for o in near):
                counts["wrong_type"] += 1
            else:
                counts["wrong_boundary"] += 1
        counts["spurious"] += sum(1 for entity in pred if not overlaps(entity, gold))
    return counts


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
    from seqeval.metrics.sequence_labeling import get_entities

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
        # A model that tags everything O is told apart (encoder_tasks.diagnosis).
        "predicted_entities": len(get_entities(predictions)),
        "gold_entities": len(get_entities(references)),
        "errors": entity_errors(references, predictions),
    }


def plain_tag_metrics(
    references: list[list[str]], predictions: list[list[str]], label_names: list[str]
) -> dict:
    """Token accuracy and macro/micro F1 for tags without spans (POS tagging).

    Macro F1 averages the tags that occur in the references or the predictions; ``per_type``
    lists every tag of ``label_names``.

    Example:
        >>> m = plain_tag_metrics([["NOUN", "VERB"]], [["NOUN", "VERB"]], ["ADJ", "NOUN", "VERB"])
        >>> m["macro_f1"], sorted(m["per_type"])
        (1.0, ['ADJ', 'NOUN', 'VERB'])
    """
    from ...metrics import classification_metrics

    index = {name: i for i, name in enumerate(label_names)}
    unknown = len(label_names)  # tags the model never saw count as errors
    ref = [index.get(t, unknown) for s in references for t in s]
    pred = [index[t] for s in predictions for t in s]
    metrics = classification_metrics(pred, ref, label_names)
    metrics["per_type"] = metrics.pop("per_class")
    return metrics


class TaggingMetrics:
    """``compute_metrics`` over whole sentences: window scores are put back in place by
    ``feature_index``, stitched, decoded (CRF Viterbi, or constrained Viterbi/argmax as
    ``settings.decoding`` says) and scored against the gold IOB2 tags.

    The CRF's transition scores are read from the model at call time: the NER trainer binds
    itself with :meth:`bind`.

    Example:
        >>> from transformers import EvalPrediction
        >>> settings = NerSettings(label_names=["O", "B-X", "I-X"])
        >>> metrics = TaggingMetrics([{"example_index": 0, "word_offset": 0, "word_index": [1, 2]}],
        ...                          [["B-X", "I-X"]], settings)
        >>> logits = np.log(np.array([[[0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]], dtype=np.float32))
        >>> metrics(EvalPrediction(predictions=(logits, np.array([0])), label_ids=None))["f1_strict"]
        1.0
    """

    def __init__(self, features: list[dict], references: list[list[str]], settings: NerSettings):
        self.features = [
            {
                "example_index": f["example_index"],
                "word_offset": f["word_offset"],
                "n_words": len(f["word_index"]),
            }
            for f in features
        ]
        self.references = references
        self.settings = settings
        self.trainer = None

    def bind(self, trainer) -> None:
        self.trainer = trainer

    def _crf(self):
        if self.trainer is None:
            if self.settings.crf:
                raise RuntimeError(
                    "TaggingMetrics of a CRF model must be bound to its trainer (the NER trainer does it)"
                )
            return None
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        return cpu_crf_copy(model)

    def decode(self, predictions) -> list[list[str]]:
        """IOB2 tags per sentence from the evaluation loop's ``(logits, feature_index)``."""
        return self.decode_scored(predictions)[0]

    def decode_scored(
        self, predictions
    ) -> tuple[list[list[str]], list[np.ndarray], list[list[tuple]] | None]:
        """``(tags, each chosen tag's probability, each entity's probability)`` per sentence
        (entities: span schemes only, :func:`~.decoding.entity_probabilities`)."""
        logits, feature_index = predictions if isinstance(predictions, (tuple, list)) else (predictions, None)
        logits = np.asarray(logits, dtype=np.float32)
        order = np.arange(len(logits)) if feature_index is None else np.asarray(feature_index).reshape(-1)
        per_feature: list[Any] = [None] * len(self.features)
        for row, index in enumerate(order.tolist()):
            per_feature[index] = logits[row, : self.features[index]["n_words"]]
        emissions = stitch(self.features, per_feature, [len(r) for r in self.references])
        crf = self._crf()
        tags, probs = decode(emissions, self.settings.label_names, crf, decoding_mode(self.settings))
        if self.settings.tag_scheme == "none":
            return tags, probs, None
        return tags, probs, entity_probabilities(emissions, tags, self.settings.label_names, crf)

    def __call__(self, eval_pred) -> dict:
        predictions, probs, scored = self.decode_scored(eval_pred.predictions)
        if self.settings.tag_scheme == "none":
            # Plain tags: how far to trust each word's tag probability.
            confidence = np.concatenate([np.asarray(p, dtype=np.float64) for p in probs]) if probs else []
            correct = [a == b for ref, pred in zip(self.references, predictions) for a, b in zip(ref, pred)]
            calibration = binary_calibration_metrics(confidence, correct)
            return {
                **plain_tag_metrics(self.references, predictions, self.settings.label_names),
                **{f"tag_{k}": v for k, v in calibration.items()},
            }
        return {**entity_metrics(self.references, predictions), **entity_calibration(self.references, scored)}


def evaluation_records(split, metrics: TaggingMetrics, predictions) -> list[dict]:
    """``evaluate --write_predictions``: per sentence of ``split`` its tokens, the gold and
    predicted tags (IOB2), whether every tag is right, and its entity errors by kind."""
    from seqeval.metrics.sequence_labeling import get_entities

    from .reading import read_sentences

    settings = metrics.settings
    tokens, _ = read_sentences(split, settings.tokens_column, None, settings.token_prefix)
    predicted = metrics.decode(predictions)
    records = []
    for words, gold, tags in zip(tokens, metrics.references, predicted):
        errors = entity_errors([gold], [tags])
        records.append(
            {
                "tokens": list(words),
                "gold": list(gold),
                "prediction": list(tags),
                "correct": list(gold) == list(tags),
                "gold_entities": [[k, s, e + 1] for k, s, e in get_entities(list(gold))],
                "predicted_entities": [[k, s, e + 1] for k, s, e in get_entities(list(tags))],
                "errors": {k: v for k, v in errors.items() if v and k != "correct"},
            }
        )
    return records


def entity_calibration(references: list[list[str]], scored: list[list[tuple]]) -> dict:
    """Calibration of the predicted entities' probabilities: each predicted entity is a yes/no
    event (its type and boundaries match a gold entity exactly), so ``entity_ece``,
    ``entity_brier``, ``entity_nll`` and ``entity_reliability`` judge the ``score`` that
    ``predict`` gives. Missed gold entities have no score and do not count (they show in recall).

    Example:
        >>> m = entity_calibration([["B-X", "O", "B-Y"]], [[("X", 0, 1, 0.9), ("X", 2, 3, 0.2)]])
        >>> round(m["entity_brier"], 4), m["entity_calibration_examples"]
        (0.025, 2)
    """
    confidence, correct = [], []
    for gold, found in zip(references, scored):
        truth = set(spans_from_iob2(gold))
        for kind, start, end, p in found or ():
            confidence.append(p)
            correct.append((kind, start, end) in truth)
    return {f"entity_{k}": v for k, v in binary_calibration_metrics(confidence, correct).items()}

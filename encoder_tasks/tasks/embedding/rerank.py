"""Retrieve, then re-rank: a cross-encoder (a ``pair`` run) orders the bi-encoder's best results.

A bi-encoder embeds query and passage apart, so it is fast but coarse; a cross-encoder reads
them together and judges better, but costs one forward pass per (query, passage). The usual
pipeline retrieves ``rerank_top_k`` candidates with the bi-encoder and lets the cross-encoder
order them. Train the cross-encoder with ``embedding mine --output_format labeled-pair``
rows (a query with its positive, label 1, and its mined negatives, label 0) and ``pair train``.

The relevance of a pair is the model's probability of the positive label (``1``, else the last
label name) for a classifier, or its score for a regression model. Scores are compared as the
model's predictions give them (6 decimals); equal scores keep the bi-encoder's order.

Example:
    >>> scorer = CrossEncoderScorer.load("runs/reranker")  # doctest: +SKIP
    >>> scorer.scores([("who wrote it?", "It was written by Ann."), ("who wrote it?", "Rain.")])  # doctest: +SKIP
    array([0.98, 0.03])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import UserError

#: Label names read as "relevant" in a classifier's probabilities, in this order.
POSITIVE_LABELS = ("1", "true", "relevant", "positive", "yes")


class CrossEncoderScorer:
    """A saved pair (or pair-trained classification) model as a relevance scorer.

    It runs through the pair task's own inference hooks (``load_for_inference``, ``parse_input``,
    ``predict_inputs``), so its scores are the ones ``pair predict`` writes.
    """

    def __init__(self, task, model, tokenizer, args):
        self.task, self.model, self.tokenizer, self.args = task, model, tokenizer, args

    @classmethod
    def load(cls, run_dir: str, **flags) -> CrossEncoderScorer:
        """Load ``run_dir`` (``flags``: its predict flags, e.g. ``batch_size=32``)."""
        from pathlib import Path

        from ...artifact import read_task_metadata
        from ..classification import ClassificationTask
        from ..pair import PairTask

        if not Path(run_dir).is_dir():
            raise UserError(f"--rerank {run_dir}: no such directory (expected a pair run)")
        metadata = read_task_metadata(run_dir) or {}
        kinds = {"pair": PairTask, "classification": ClassificationTask}
        if metadata.get("task") not in kinds:
            found = f"a {metadata['task']!r} model" if metadata.get("task") else "no encoder-tasks run"
            raise UserError(f"{run_dir} holds {found}; a reranker is a pair (cross-encoder) model")
        task = kinds[metadata["task"]]()
        args = task.PredictArguments(model_dir=str(run_dir), **flags)
        object.__setattr__(args, "given_fields", frozenset(flags))  # given flags win over saved ones
        model, tokenizer = task.load_for_inference(args, check=False)
        if not model.settings.get("text_pair_column"):
            raise UserError(f"{run_dir}: its model reads one text, a reranker reads (query, passage) pairs")
        return cls(task, model, tokenizer, args)

    @staticmethod
    def relevance(record: dict) -> float:
        """The relevance in one prediction record (see the module docstring)."""
        probabilities = record.get("probabilities")
        if probabilities:
            for name in POSITIVE_LABELS:
                if name in probabilities:
                    return float(probabilities[name])
            return float(list(probabilities.values())[-1])
        return float(record["score"])

    def scores(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Relevance of each ``(query, passage)``."""
        if not pairs:
            return np.zeros(0, dtype=np.float64)
        settings = self.model.settings
        inputs = [
            self.task.parse_input({"text": q, "text_pair": p}, f"pairs[{i}]", settings)
            for i, (q, p) in enumerate(pairs)
        ]
        records = self.task.predict_inputs(self.model, self.tokenizer, inputs, self.args)
        return np.array([self.relevance(r) for r in records], dtype=np.float64)


def rerank(
    scorer: CrossEncoderScorer,
    queries: Sequence[str],
    candidates: np.ndarray,
    corpus_texts: Sequence[str],
    top_k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Re-order each query's ``candidates`` (corpus rows, best first; -1 = none) by the scorer;
    returns the best ``top_k`` rows and their relevance (-1 / -inf where fewer were given).

    Every (query, candidate) pair of the batch is scored in one call, so the predictor batches
    them by length across queries.
    """
    pairs, owners = [], []
    for q, row in enumerate(candidates):
        for c in row:
            if c >= 0:
                pairs.append((queries[q], corpus_texts[c]))
                owners.append((q, int(c)))
    relevance = scorer.scores(pairs)
    indices = np.full((len(queries), top_k), -1, dtype=np.int64)
    scores = np.full((len(queries), top_k), -np.inf, dtype=np.float64)
    per_query: list[list[tuple[float, int]]] = [[] for _ in queries]
    for (q, c), r in zip(owners, relevance):
        per_query[q].append((r, c))
    for q, found in enumerate(per_query):
        # sorted() is stable: equal relevance keeps the bi-encoder's order.
        best = sorted(found, key=lambda rc: -rc[0])[:top_k]
        for j, (r, c) in enumerate(best):
            indices[q, j], scores[q, j] = c, r
    return indices, scores

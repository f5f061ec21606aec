"""Exact nearest-neighbour search and retrieval metrics (recall@k, MRR@10, nDCG@10).

Search is one matrix product per block of queries, then a stable sort: exact, and ties go
to the lower corpus index, so results are reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def exact_search(
    queries: np.ndarray,
    corpus: np.ndarray,
    top_k: int,
    exclude: Sequence[set[int]] | None = None,
    block: int = 1024,
) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores (dot product) of the ``top_k`` corpus rows for every query.

    ``exclude[q]`` holds corpus rows query ``q`` may not return (e.g. the query itself).
    Queries with fewer than ``top_k`` candidates get index -1 and score -inf at the end.

    Example:
        >>> idx, scores = exact_search(np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32), 1)
        >>> idx.tolist(), scores.tolist()
        ([[0], [1]], [[1.0], [1.0]])
    """
    queries = np.asarray(queries, dtype=np.float32)
    corpus = np.asarray(corpus, dtype=np.float32)
    if queries.ndim != 2 or corpus.ndim != 2 or queries.shape[1] != corpus.shape[1]:
        raise ValueError(f"shapes do not match: queries {queries.shape}, corpus {corpus.shape}")
    k = min(top_k, corpus.shape[0])
    indices = np.full((len(queries), top_k), -1, dtype=np.int64)
    scores = np.full((len(queries), top_k), -np.inf, dtype=np.float32)
    from ...reporting.tracking import progress

    starts = range(0, len(queries), block)
    for start in progress(starts, desc="searching", total=len(starts), unit="block"):
        sims = queries[start : start + block] @ corpus.T
        if exclude is not None:
            for row in range(sims.shape[0]):
                banned = list(exclude[start + row])
                if banned:
                    sims[row, banned] = -np.inf
        # Stable sort on the negated scores: equal scores keep corpus order.
        order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        top = np.take_along_axis(sims, order, axis=1)
        order = np.where(np.isinf(top), -1, order)
        indices[start : start + len(sims), :k] = order
        scores[start : start + len(sims), :k] = top
    return indices, scores


def retrieval_metrics(
    ranked: np.ndarray, relevant: Sequence[set[int]], ks: Sequence[int] = (1, 5, 10)
) -> dict[str, float]:
    """recall@k for each k, MRR@10 and nDCG@10 (binary relevance), averaged over queries.

    ``ranked[q]`` lists corpus indices best first (at least ``max(ks + (10,))`` of them).

    Example:
        >>> m = retrieval_metrics(np.array([[2, 0, 1]]), [{0}], ks=(1, 2))
        >>> m["recall@1"], m["recall@2"], m["mrr@10"]
        (0.0, 1.0, 0.5)
    """
    depth = max([*ks, 10])
    ranked = np.asarray(ranked)[:, :depth]
    hits = np.array([[doc in rel for doc in row] for row, rel in zip(ranked, relevant)], dtype=bool)
    if hits.size == 0:
        return {**{f"recall@{k}": 0.0 for k in ks}, "mrr@10": 0.0, "ndcg@10": 0.0}
    counts = np.array([max(len(rel), 1) for rel in relevant], dtype=np.float64)
    out = {f"recall@{k}": float(np.mean(hits[:, :k].sum(1) / counts)) for k in ks}
    first = np.where(hits[:, :10].any(1), hits[:, :10].argmax(1) + 1, 0)
    out["mrr@10"] = float(np.mean(np.where(first > 0, 1.0 / np.maximum(first, 1), 0.0)))
    discounts = 1.0 / np.log2(np.arange(2, 12))
    width = min(10, hits.shape[1])
    dcg = (hits[:, :width] * discounts[:width]).sum(1)
    ideal = np.array([discounts[: min(len(rel), 10)].sum() for rel in relevant])
    out["ndcg@10"] = float(np.mean(np.where(ideal > 0, dcg / np.maximum(ideal, 1e-12), 0.0)))
    return out

"""Compressed embedding indexes: int8 (4x smaller than float32) and binary (32x smaller).

- :class:`Int8Index`: every dimension mapped onto 256 levels between its lowest and highest
  value in the corpus (or a calibration set). Queries stay float: a score is the float query
  times the de-quantised corpus vector, computed from the int8 codes block by block.
- :class:`BinaryIndex`: one bit per dimension (its sign), packed 8 to a byte. Search ranks by
  Hamming distance between the signs of query and corpus, then **rescores** the best
  ``top_k x rescore_multiplier`` candidates with the float query against the ±1 corpus vectors,
  which recovers most of the float ranking at the cost of a few more dot products.

Search is exact within each index (every corpus row scored), blocked so memory stays bounded,
and ties go to the lower corpus row as in :func:`.retrieval.exact_search`.

Example:
    >>> rng = np.random.default_rng(0)
    >>> corpus = rng.normal(size=(100, 64)).astype(np.float32)
    >>> index = BinaryIndex.build(corpus)
    >>> index.nbytes, corpus.nbytes // index.nbytes
    (800, 32)
    >>> idx, _ = index.search(corpus[:3], top_k=1)
    >>> idx[:, 0].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Corpus rows scored per matrix product (bounds the memory of a de-quantised block).
BLOCK = 4096
#: Queries rescored at once by :meth:`BinaryIndex.search`.
QUERY_BLOCK = 256


def _top_k(sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(sims, order, axis=1)


def _scores_blocked(queries: np.ndarray, rows: int, block_scores) -> np.ndarray:
    sims = np.empty((len(queries), rows), dtype=np.float32)
    for start in range(0, rows, BLOCK):
        sims[:, start : start + BLOCK] = block_scores(start, min(start + BLOCK, rows))
    return sims


@dataclass
class Int8Index:
    """int8 codes ``[n, d]`` with each dimension's ``low`` value and ``scale`` (float32 ``[d]``)."""

    codes: np.ndarray
    low: np.ndarray
    scale: np.ndarray

    @classmethod
    def build(cls, corpus: np.ndarray, calibration: np.ndarray | None = None) -> Int8Index:
        """Quantise ``corpus`` with ranges taken from ``calibration`` (default: the corpus)."""
        corpus = np.asarray(corpus, dtype=np.float32)
        ref = corpus if calibration is None else np.asarray(calibration, dtype=np.float32)
        low, high = ref.min(0), ref.max(0)
        scale = np.maximum(high - low, 1e-12) / 255.0
        codes = np.clip(np.rint((corpus - low) / scale), 0, 255) - 128
        return cls(codes.astype(np.int8), low.astype(np.float32), scale.astype(np.float32))

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes)

    def dequantize(self, rows=slice(None)) -> np.ndarray:
        return (self.codes[rows].astype(np.float32) + 128) * self.scale + self.low

    def scores(self, queries: np.ndarray) -> np.ndarray:
        """``queries @ dequantize().T`` without de-quantising the whole corpus at once."""
        queries = np.asarray(queries, dtype=np.float32)
        return _scores_blocked(
            queries, len(self.codes), lambda a, b: queries @ self.dequantize(slice(a, b)).T
        )

    def search(self, queries: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        return _top_k(self.scores(queries), min(top_k, len(self.codes)))


@dataclass
class BinaryIndex:
    """Sign bits ``[n, ceil(d / 8)]`` (``np.packbits``) of ``dim``-dimensional vectors."""

    bits: np.ndarray
    dim: int

    @classmethod
    def build(cls, corpus: np.ndarray) -> BinaryIndex:
        corpus = np.asarray(corpus, dtype=np.float32)
        return cls(np.packbits(corpus > 0, axis=1), corpus.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)

    def signs(self, rows=slice(None)) -> np.ndarray:
        """Corpus rows as ±1 float vectors."""
        unpacked = np.unpackbits(self.bits[rows], axis=1, count=self.dim).astype(np.float32)
        return unpacked * 2 - 1

    def hamming_scores(self, queries: np.ndarray) -> np.ndarray:
        """``dim - 2 x Hamming distance`` (higher is nearer) between the signs of queries and corpus."""
        signs = np.where(np.asarray(queries) > 0, 1.0, -1.0).astype(np.float32)
        return _scores_blocked(signs, len(self.bits), lambda a, b: signs @ self.signs(slice(a, b)).T)

    def search(
        self, queries: np.ndarray, top_k: int, rescore_multiplier: int | None = 4
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top ``top_k`` by Hamming distance among all rows, then (``rescore_multiplier``) the best
        ``top_k x rescore_multiplier`` re-ordered by the float query's dot product with their ±1
        vectors; ``None`` returns the Hamming order with its scores."""
        queries = np.asarray(queries, dtype=np.float32)
        k = min(top_k, len(self.bits))
        if not rescore_multiplier or len(queries) == 0:
            return _top_k(self.hamming_scores(queries), k)
        indices, scores = [], []
        for start in range(0, len(queries), QUERY_BLOCK):  # bounds the candidates' ±1 vectors
            block = queries[start : start + QUERY_BLOCK]
            pool, _ = _top_k(self.hamming_scores(block), min(k * rescore_multiplier, len(self.bits)))
            candidates = self.signs(pool.ravel()).reshape(*pool.shape, self.dim)
            order, top = _top_k(np.einsum("qd,qkd->qk", block, candidates), k)
            indices.append(np.take_along_axis(pool, order, axis=1))
            scores.append(top)
        return np.concatenate(indices), np.concatenate(scores)


def build_index(kind: str, corpus: np.ndarray):
    """``None`` for ``float`` (exact search on the vectors themselves), else the compressed index."""
    if kind == "int8":
        return Int8Index.build(corpus)
    if kind == "binary":
        return BinaryIndex.build(corpus)
    return None


def search(kind: str, queries: np.ndarray, corpus: np.ndarray, top_k: int, rescore_multiplier: int = 4):
    """Indices and scores of the ``top_k`` corpus rows per query in index ``kind`` (float, int8, binary)."""
    from .retrieval import exact_search

    index = build_index(kind, corpus)
    if index is None:
        return exact_search(queries, corpus, top_k)
    if isinstance(index, BinaryIndex):
        return index.search(queries, top_k, rescore_multiplier)
    return index.search(queries, top_k)

"""Compressed indexes (int8, binary with rescoring) and Matryoshka cuts, against brute force."""

import numpy as np
import pytest
import torch

from encoder_tasks.errors import UserError
from encoder_tasks.tasks.embedding.losses import MultipleNegativesRankingLoss
from encoder_tasks.tasks.embedding.matryoshka import MatryoshkaLoss, check_dims, truncate
from encoder_tasks.tasks.embedding.quantized_index import BinaryIndex, Int8Index, search
from encoder_tasks.tasks.embedding.retrieval import exact_search, normalize, retrieval_metrics


def _clustered(seed=0, n=2000, queries=200, dim=64):
    """Unit vectors around 100 centres; each query is a noisy copy of one corpus row."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(100, dim))
    corpus = normalize(centres[rng.integers(0, 100, n)] + 0.6 * rng.normal(size=(n, dim)))
    targets = rng.integers(0, n, queries)
    return normalize(corpus[targets] + 0.15 * rng.normal(size=(queries, dim))), corpus, targets


def _recall(found, targets, k=10):
    return np.mean([t in f[:k] for f, t in zip(found, targets)])


def _recall_vs_exact(found, exact, k=10):
    return np.mean([len(set(f[:k]) & set(e[:k])) / k for f, e in zip(found, exact)])


def test_int8_scores_close_and_recall_kept():
    queries, corpus, targets = _clustered()
    index = Int8Index.build(corpus)
    assert index.codes.dtype == np.int8 and index.nbytes * 4 == corpus.nbytes
    assert np.abs(index.scores(queries) - queries @ corpus.T).max() < 0.02
    exact, _ = exact_search(queries, corpus, 10)
    found, _ = index.search(queries, 10)
    assert _recall_vs_exact(found, exact) > 0.95


def test_binary_rescoring_recall_vs_brute_force():
    queries, corpus, targets = _clustered(dim=256)  # MiniLM: 384 bits
    index = BinaryIndex.build(corpus)
    assert index.nbytes * 32 == corpus.nbytes
    exact, _ = exact_search(queries, corpus, 10)
    hamming, _ = index.search(queries, 10, rescore_multiplier=None)
    rescored, scores = index.search(queries, 10, rescore_multiplier=4)
    full, plain, rescue = (_recall(f, targets) for f in (exact, hamming, rescored))
    # recall@10 of each query's own row: rescoring keeps >= 95% of float (the target)
    assert rescue >= plain and rescue >= 0.95 * full, (full, plain, rescue)
    # the rescored scores are the float query against the corpus rows' signs, best first
    signs = np.where(corpus > 0, 1.0, -1.0)
    assert np.allclose(scores, np.take_along_axis(queries @ signs.T, rescored, axis=1), atol=1e-4)
    assert (np.diff(scores, axis=1) <= 1e-6).all()


def test_binary_hamming_is_sign_agreement():
    rng = np.random.default_rng(1)
    corpus, queries = rng.normal(size=(50, 20)), rng.normal(size=(5, 20))  # 20 bits: a partial byte
    index = BinaryIndex.build(corpus)
    disagree = ((queries[:, None, :] > 0) != (corpus[None, :, :] > 0)).sum(-1)
    assert np.array_equal(index.hamming_scores(queries), 20 - 2 * disagree)
    # a rescoring pool of the whole corpus orders exactly by float query . signs
    found, _ = index.search(queries, 50, rescore_multiplier=1)
    expected = np.argsort(-(queries @ np.where(corpus > 0, 1.0, -1.0).T), axis=1, kind="stable")
    assert np.array_equal(found, expected)


def test_search_dispatch_and_metrics_shape():
    queries, corpus, _ = _clustered(n=300, queries=20)
    relevant = [{int(r)} for r in exact_search(queries, corpus, 1)[0][:, 0]]
    for kind in ("float", "int8", "binary"):
        found, _ = search(kind, queries, corpus, 10)
        assert found.shape == (20, 10)
        assert retrieval_metrics(found, relevant)["recall@10"] > 0.8


def test_truncate_and_matryoshka_loss():
    v = np.array([[3.0, 4.0, 12.0]])
    assert np.allclose(truncate(v, 2), [[0.6, 0.8]]) and np.allclose(truncate(v, None), v)
    with pytest.raises(UserError, match="expected 1 to 3"):
        truncate(v, 4)
    assert check_dims([8, 4], 16) == [4, 8, 16]
    with pytest.raises(UserError, match="larger than the model's embedding size 16"):
        check_dims([32], 16)
    base = MultipleNegativesRankingLoss(temperature=0.5)
    torch.manual_seed(0)
    a, p = torch.randn(6, 16), torch.randn(6, 16)
    loss = MatryoshkaLoss(lambda g: base(g[0], g[1]), [4, 8], 16)([a, p])
    expected = sum(base(a[:, :d], p[:, :d]) for d in (4, 8, 16))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)

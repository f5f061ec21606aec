"""Losses, pooling, the duplicate-free sampler, gather (in one process; two processes in
tests/multiprocess/test_embedding_two_processes.py and test_embedding_global_batch.py), retrieval
metrics."""

import math
import random

import numpy as np
import pytest
import torch

from encoder_tasks.errors import UserError
from encoder_tasks.heads import Pooler
from encoder_tasks.tasks.embedding.distributed import gather_with_grad
from encoder_tasks.tasks.embedding.losses import (
    CoSENTLoss,
    CosineSimilarityLoss,
    MultipleNegativesRankingLoss,
    build_loss,
)
from encoder_tasks.tasks.embedding.retrieval import exact_search, retrieval_metrics
from encoder_tasks.tasks.embedding.samplers import DuplicateFreeBatchSampler

R = 1 / math.sqrt(2)
A = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
P = torch.tensor([[1.0, 1.0], [0.0, 3.0]])  # cosines: a1.p1 = R, a1.p2 = 0, a2.p1 = R, a2.p2 = 1


def ce(scores, target):
    """-log softmax(scores)[target], written out."""
    return -scores[target] + math.log(sum(math.exp(s) for s in scores))


def test_mnrl_matches_hand_computation():
    t = 0.5
    expected = (ce([R / t, 0 / t], 0) + ce([R / t, 1 / t], 1)) / 2
    assert MultipleNegativesRankingLoss(t)(A, P).item() == pytest.approx(expected, abs=1e-5)


def test_mnrl_hard_negatives_join_the_candidates():
    t = 0.5
    negatives = torch.tensor([[-1.0, 0.0], [2.0, 0.0]])  # cos with a1: -1, 1; with a2: 0, 0
    row0 = [R / t, 0.0, -1 / t, 1 / t]
    row1 = [R / t, 1 / t, 0.0, 0.0]
    expected = (ce(row0, 0) + ce(row1, 1)) / 2
    loss = MultipleNegativesRankingLoss(t)(A, P, [negatives])
    assert loss.item() == pytest.approx(expected, abs=1e-5)


def test_mnrl_symmetric_averages_both_directions():
    t = 1.0
    forward = (ce([R, 0.0], 0) + ce([R, 1.0], 1)) / 2
    backward = (ce([R, R], 0) + ce([0.0, 1.0], 1)) / 2  # positive i ranks all anchors
    loss = MultipleNegativesRankingLoss(t, symmetric=True)(A, P)
    assert loss.item() == pytest.approx((forward + backward) / 2, abs=1e-5)


def test_cosent_matches_hand_computation():
    t = 0.1
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = torch.tensor([[0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    cos = [0.0, R, 1.0]
    scores = torch.tensor([2.0, 0.5, 4.0])  # order: pair 1 < pair 0 < pair 2
    pairs = [(1, 0), (1, 2), (0, 2)]  # (i, j) with y_i < y_j: penalise cos_i > cos_j
    expected = math.log(1 + sum(math.exp((cos[i] - cos[j]) / t) for i, j in pairs))
    assert CoSENTLoss(t)(a, b, scores).item() == pytest.approx(expected, rel=1e-5)
    # equal scores give no pair: log(1) = 0
    assert CoSENTLoss(t)(a, b, torch.ones(3)).item() == pytest.approx(0.0)


def test_cosine_similarity_loss_is_mse_of_cosines():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    b = torch.tensor([[1.0, 1.0], [0.0, 2.0]])
    expected = ((R - 0.5) ** 2 + (0.0 - 0.2) ** 2) / 2
    assert CosineSimilarityLoss()(a, b, torch.tensor([0.5, 0.2])).item() == pytest.approx(expected, abs=1e-6)


def test_loss_names_and_bad_values():
    assert isinstance(build_loss("infonce"), MultipleNegativesRankingLoss)
    with pytest.raises(UserError, match="--loss must be one of"):
        build_loss("triplet")
    with pytest.raises(UserError, match="--temperature must be positive"):
        build_loss("mnrl", temperature=0)


def test_pooling_ignores_padding():
    states = torch.tensor([[[1.0, 5.0], [3.0, -1.0], [100.0, 100.0]], [[9.0, 9.0], [2.0, 4.0], [6.0, 0.0]]])
    right = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert Pooler("mean")(states, right).flatten().tolist() == pytest.approx([2.0, 2.0, 17 / 3, 13 / 3])
    assert Pooler("max")(states, right).tolist() == [[3.0, 5.0], [9.0, 9.0]]
    assert Pooler("cls")(states, right).tolist() == [[1.0, 5.0], [9.0, 9.0]]
    left = torch.tensor([[0, 1, 1], [1, 1, 1]])  # left padding: cls is the first real token
    assert Pooler("cls")(states, left).tolist() == [[3.0, -1.0], [9.0, 9.0]]


def test_sampler_keeps_duplicates_out_and_covers_every_row():
    rng = random.Random(1)
    keys = [(f"q{rng.randrange(15)}", f"d{rng.randrange(25)}") for _ in range(200)]
    sampler = DuplicateFreeBatchSampler(keys, batch_size=8, seed=3)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(200))
    for batch in batches:
        texts = [t for i in batch for t in keys[i]]
        assert len(texts) == len(set(texts))
    assert sum(len(b) == 8 for b in batches) >= len(batches) - 3  # most batches are full
    assert list(sampler) != batches  # a new order every epoch
    sampler.set_epoch(0)
    assert list(sampler) == batches  # reproducible per epoch
    assert len(sampler) == len(list(sampler))


def test_sampler_with_shared_negatives_fills_batches_without_false_negatives():
    # Mined negatives gather on a few popular texts, as on CMRC's paragraphs; some popular
    # negatives are also other rows' positives.
    rng = random.Random(2)
    popular = [f"d{i}" for i in range(4)]
    keys = [(f"q{i}", f"d{i}") for i in range(120)]
    negatives = [(rng.choice([d for d in popular if d != f"d{i}"]),) for i in range(120)]
    strict = DuplicateFreeBatchSampler([k + n for k, n in zip(keys, negatives)], batch_size=16, seed=0)
    shared = DuplicateFreeBatchSampler(keys, batch_size=16, seed=0, shared=negatives)
    batches = list(shared)
    assert sorted(i for b in batches for i in b) == list(range(120))
    assert len(batches) < len(strict)  # fuller batches: fewer of them
    assert sum(len(b) > 1 and len({negatives[i] for i in b}) < len(b) for b in batches) > 0  # shared
    for batch in batches:
        owned = [t for i in batch for t in keys[i]]
        assert len(owned) == len(set(owned))  # queries and positives still once a batch
        # a shared negative is never the positive (or query) of a row of its batch
        assert not {t for i in batch for t in negatives[i]} & set(owned)


def test_sampler_refuses_shared_texts_of_another_length():
    with pytest.raises(ValueError, match="shared holds 1 rows, keys 2"):
        DuplicateFreeBatchSampler([("a",), ("b",)], 2, shared=[("n",)])


def test_sampler_never_leaves_a_process_without_rows():
    # the last rows all share a text: one-row leftover batches, which two processes cannot split
    keys = [(f"a{i}", f"b{i}") for i in range(4)] + [("same", f"c{i}") for i in range(3)]
    for epoch in range(5):
        per_rank = []
        for rank in range(2):
            sampler = DuplicateFreeBatchSampler(keys, 2, seed=0, rank=rank, world_size=2)
            sampler.set_epoch(epoch)
            per_rank.append(list(sampler))
        assert len(per_rank[0]) == len(per_rank[1]) and all(b for batches in per_rank for b in batches)
    full = DuplicateFreeBatchSampler(keys, 3, drop_last=True, seed=0)
    assert all(len(b) == 3 for b in full)


def test_sampler_slices_global_batches_per_process():
    keys = [(f"t{i % 37}", f"u{i}") for i in range(101)]
    per_rank = [list(DuplicateFreeBatchSampler(keys, 4, seed=0, rank=r, world_size=2)) for r in range(2)]
    global_batches = DuplicateFreeBatchSampler(keys, 4, seed=0, world_size=2).global_batches(0)
    assert len(per_rank[0]) == len(per_rank[1]) == len(global_batches)
    for b0, b1, whole in zip(*per_rank, global_batches):
        assert sorted(b0 + b1) == sorted(whole) and b0 and b1
        texts = [t for i in whole for t in keys[i]]
        assert len(texts) == len(set(texts))  # no duplicate across the two processes either


def test_gather_is_identity_in_one_process():
    x = torch.randn(3, 2, requires_grad=True)
    out, offset, total = gather_with_grad(x)
    assert out is x and offset == 0 and total == 3


def _brute_force(scores, relevant, exclude, ks):
    out = {f"recall@{k}": [] for k in ks} | {"mrr@10": [], "ndcg@10": []}
    for q, row in enumerate(scores):
        candidates = [c for c in range(len(row)) if c not in exclude[q]]
        ranked = sorted(candidates, key=lambda c: (-row[c], c))
        for k in ks:
            out[f"recall@{k}"].append(len(set(ranked[:k]) & relevant[q]) / len(relevant[q]))
        first = next((r for r, c in enumerate(ranked[:10], 1) if c in relevant[q]), None)
        out["mrr@10"].append(1 / first if first else 0.0)
        dcg = sum(1 / math.log2(r + 1) for r, c in enumerate(ranked[:10], 1) if c in relevant[q])
        idcg = sum(1 / math.log2(r + 1) for r in range(1, min(len(relevant[q]), 10) + 1))
        out["ndcg@10"].append(dcg / idcg)
    return {k: float(np.mean(v)) for k, v in out.items()}


def test_search_and_metrics_match_brute_force():
    rng = np.random.default_rng(0)
    queries, corpus = rng.normal(size=(30, 8)).astype(np.float32), rng.normal(size=(60, 8)).astype(np.float32)
    corpus[7] = corpus[3]  # a tie: the lower index ranks first
    relevant = [set(rng.choice(60, size=rng.integers(1, 4), replace=False).tolist()) for _ in range(30)]
    exclude = [{int(rng.integers(60))} - relevant[q] for q in range(30)]
    ranked, scores = exact_search(queries, corpus, 12, exclude, block=7)
    full = queries @ corpus.T
    for q in range(30):
        allowed = sorted((c for c in range(60) if c not in exclude[q]), key=lambda c: (-full[q, c], c))
        assert ranked[q].tolist() == allowed[:12]
        assert np.allclose(scores[q], full[q, allowed[:12]], atol=1e-5)
    got = retrieval_metrics(ranked, relevant, ks=(1, 3, 10))
    want = _brute_force(full, relevant, exclude, (1, 3, 10))
    assert got == pytest.approx(want, abs=1e-9)


def test_search_with_fewer_candidates_than_k():
    idx, scores = exact_search(np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32), 3, [{0}, set()])
    assert idx.tolist() == [[1, -1, -1], [1, 0, -1]]
    assert np.isinf(scores[0, 1:]).all()

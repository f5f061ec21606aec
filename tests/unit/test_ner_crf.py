"""The CRF against brute-force enumeration of every tag path on small random cases."""

import itertools

import pytest
import torch

from encoder_tasks.tasks.ner.crf import FORBIDDEN, LinearChainCRF, constraint_scores, viterbi
from encoder_tasks.tasks.ner.schemes import allowed_transitions


def brute_force(emissions, length, trans, start, end):
    """(log Z, best path, best score) over all tag paths of one sequence."""
    n_tags = emissions.shape[-1]
    scores = {}
    for path in itertools.product(range(n_tags), repeat=length):
        s = start[path[0]] + emissions[0, path[0]]
        for t in range(1, length):
            s = s + trans[path[t - 1], path[t]] + emissions[t, path[t]]
        scores[path] = s + end[path[-1]]
    values = torch.stack(list(scores.values()))
    best = max(scores, key=lambda p: scores[p].item())
    return torch.logsumexp(values, 0), list(best), scores[best]


def random_crf(n_tags, constrained, seed):
    torch.manual_seed(seed)
    allowed = start_ok = None
    if constrained:
        # Random constraints, but every tag keeps some allowed predecessor so paths exist.
        allowed = torch.rand(n_tags, n_tags) > 0.35
        allowed[:, 0] = True
        allowed[0, :] = True
        start_ok = torch.rand(n_tags) > 0.3
        start_ok[0] = True
    crf = LinearChainCRF(n_tags, allowed, start_ok)
    with torch.no_grad():
        crf.transitions.normal_()
        crf.start_transitions.normal_()
        crf.end_transitions.normal_()
    return crf


@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_partition_best_path_and_nll_match_brute_force(constrained, seed):
    n_tags, max_len, batch = 3, 4, 5
    crf = random_crf(n_tags, constrained, seed)
    emissions = torch.randn(batch, max_len, n_tags) * 2
    lengths = torch.tensor([4, 1, 3, 2, 4])
    mask = torch.arange(max_len).unsqueeze(0) < lengths.unsqueeze(1)
    trans, start, end = (s.detach() for s in crf.scores())
    paths, best_scores = crf.decode(emissions, mask)
    tags = torch.randint(0, n_tags, (batch, max_len))
    nll = crf.nll(emissions, tags, mask)
    marginals = crf.marginals(emissions, mask)
    for b in range(batch):
        n = int(lengths[b])
        log_z, best, best_score = brute_force(emissions[b], n, trans, start, end)
        assert paths[b, :n].tolist() == best
        assert (paths[b, n:] == -1).all()
        assert best_scores[b].item() == pytest.approx(best_score.item(), abs=1e-4)
        gold = tags[b, :n].tolist()
        gold_score = start[gold[0]] + emissions[b, 0, gold[0]] + end[gold[-1]]
        for t in range(1, n):
            gold_score = gold_score + trans[gold[t - 1], gold[t]] + emissions[b, t, gold[t]]
        assert nll[b].item() == pytest.approx((log_z - gold_score).item(), rel=1e-4, abs=1e-3)
        # Marginals: brute-force probability mass of paths through each (position, tag).
        n_paths = list(itertools.product(range(n_tags), repeat=n))
        weights = {}
        for p in n_paths:
            s = start[p[0]] + emissions[b, 0, p[0]] + end[p[-1]]
            for t in range(1, n):
                s = s + trans[p[t - 1], p[t]] + emissions[b, t, p[t]]
            weights[p] = torch.exp(s - log_z)
        for t in range(n):
            for j in range(n_tags):
                expected = sum(w for p, w in weights.items() if p[t] == j)
                assert marginals[b, t, j].item() == pytest.approx(float(expected), abs=1e-4)
        assert marginals[b, n:].abs().sum() == 0


def test_constrained_decoding_never_uses_a_forbidden_transition():
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    allowed, start = allowed_transitions(labels)
    crf = LinearChainCRF(len(labels), allowed, start)
    torch.manual_seed(0)
    emissions = torch.randn(64, 7, len(labels)) * 3
    emissions[:, :, 2] += 4  # push hard towards I-PER everywhere
    paths, _ = crf.decode(emissions)
    allowed_t = torch.tensor(allowed)
    assert all(start[p] for p in paths[:, 0].tolist())
    assert allowed_t[paths[:, :-1], paths[:, 1:]].all()


def test_softmax_viterbi_equals_argmax_without_constraints():
    torch.manual_seed(1)
    log_probs = torch.log_softmax(torch.randn(3, 5, 4), -1)
    mask = torch.ones(3, 5, dtype=torch.bool)
    trans, start = constraint_scores(None, None, 4)
    paths, _ = viterbi(log_probs, mask, trans, start, torch.zeros(4))
    assert torch.equal(paths, log_probs.argmax(-1))


def test_per_row_start_constraint_for_windows():
    crf = LinearChainCRF(3, allowed_start=[True, True, False])
    emissions = torch.randn(2, 3, 3)
    tags = torch.tensor([[2, 2, 0], [2, 2, 0]])  # starts with a tag forbidden at a sentence start
    nll = crf.nll(emissions, tags, constrain_start=torch.tensor([True, False]))
    assert nll[0] > -FORBIDDEN / 2  # the gold path itself is forbidden there
    assert nll[1] < 50


def test_fp32_under_autocast_and_empty_rows():
    crf = LinearChainCRF(4)
    emissions = torch.randn(2, 3, 4, dtype=torch.bfloat16)
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]], dtype=torch.bool)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        nll = crf.nll(emissions, torch.zeros(2, 3, dtype=torch.long), mask)
        paths, scores = crf.decode(emissions, mask)
    assert nll.dtype == torch.float32 and scores.dtype == torch.float32
    assert nll[1].item() == 0.0 and (paths[1] == -1).all()
    nll.sum().backward()
    assert crf.transitions.grad is not None and torch.isfinite(crf.transitions.grad).all()

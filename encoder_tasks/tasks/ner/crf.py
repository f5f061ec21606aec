"""A batched, vectorised linear-chain CRF: log-space forward algorithm, Viterbi, marginals.

Shapes: ``emissions [batch, length, tags]``, ``tags [batch, length]``, ``mask [batch, length]``
(True for real positions; each row's real positions come first). All arithmetic runs in
fp32 with autocast switched off, so bf16/fp16 training never loses the partition function
to rounding. The device is taken from the inputs.

Transition constraints (``allowed[i, j]``: tag j may follow tag i; ``allowed_start``) are
applied as a large negative score, so forbidden paths get (numerically) zero probability
and are never decoded.

Example:
    >>> crf = LinearChainCRF(3)
    >>> emissions = torch.randn(2, 4, 3)
    >>> mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    >>> crf.nll(emissions, torch.zeros(2, 4, dtype=torch.long), mask).shape
    torch.Size([2])
    >>> paths, scores = crf.decode(emissions, mask)
    >>> paths.shape, bool((paths[1, 2:] == -1).all())
    (torch.Size([2, 4]), True)
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import nn

#: Score given to a forbidden transition: far below any real path, yet finite (no NaN).
FORBIDDEN = -10000.0


def _no_autocast(tensor: torch.Tensor):
    if torch.is_autocast_enabled(tensor.device.type):
        return torch.autocast(tensor.device.type, enabled=False)
    return nullcontext()


def _prefix_mask(mask: torch.Tensor | None, emissions: torch.Tensor) -> torch.Tensor:
    if mask is None:
        return torch.ones(emissions.shape[:2], dtype=torch.bool, device=emissions.device)
    return mask.to(device=emissions.device, dtype=torch.bool)


def log_partition(
    emissions: torch.Tensor,
    mask: torch.Tensor,
    transitions: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
) -> torch.Tensor:
    """``log Z`` per sequence: the log-sum-exp of the scores of all tag paths ``[batch]``.

    Rows with no real position get 0.
    """
    with _no_autocast(emissions):
        emissions, transitions = emissions.float(), transitions.float()
        mask = _prefix_mask(mask, emissions)
        alpha = start.float() + emissions[:, 0]  # [batch, tags]
        for t in range(1, emissions.size(1)):
            # alpha_j = logsumexp_i(alpha_i + trans_ij) + emit_j, only where position t is real.
            step = torch.logsumexp(alpha.unsqueeze(2) + transitions.unsqueeze(0), dim=1) + emissions[:, t]
            alpha = torch.where(mask[:, t : t + 1], step, alpha)
        log_z = torch.logsumexp(alpha + end.float(), dim=1)
        return torch.where(mask.any(dim=1), log_z, torch.zeros_like(log_z))


def path_score(
    emissions: torch.Tensor,
    tags: torch.Tensor,
    mask: torch.Tensor,
    transitions: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
) -> torch.Tensor:
    """Score of the given tag paths ``[batch]`` (emissions plus start, transition, end)."""
    with _no_autocast(emissions):
        emissions = emissions.float()
        mask = _prefix_mask(mask, emissions)
        tags = tags.long().clamp(min=0) * mask  # padding positions (-100) point at tag 0, masked below
        maskf = mask.float()
        emit = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # [batch, length]
        score = (emit * maskf).sum(dim=1)
        trans = transitions.float()[tags[:, :-1], tags[:, 1:]]  # [batch, length - 1]
        score = score + (trans * maskf[:, 1:]).sum(dim=1)
        lengths = mask.long().sum(dim=1)
        last = tags.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        start = start.float()
        first = start[tags[:, 0]] if start.dim() == 1 else start.gather(1, tags[:, :1]).squeeze(1)
        score = score + first + end.float()[last]
        return torch.where(lengths > 0, score, torch.zeros_like(score))


def viterbi(
    emissions: torch.Tensor,
    mask: torch.Tensor,
    transitions: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Best path per sequence: ``(paths [batch, length] with -1 at padding, scores [batch])``.

    Works for any scores: a CRF's, or a softmax head's log-probabilities with zero
    transitions and :data:`FORBIDDEN` where a constraint forbids a transition.
    """
    with _no_autocast(emissions):
        emissions, transitions = emissions.float(), transitions.float()
        mask = _prefix_mask(mask, emissions)
        batch, length, n_tags = emissions.shape
        score = start.float() + emissions[:, 0]
        identity = torch.arange(n_tags, device=emissions.device).expand(batch, n_tags)
        history = []
        for t in range(1, length):
            candidates = score.unsqueeze(2) + transitions.unsqueeze(0)  # [batch, from, to]
            best, backpointer = candidates.max(dim=1)
            real = mask[:, t : t + 1]
            score = torch.where(real, best + emissions[:, t], score)
            # Past a row's end the path stays put, so backtracking walks through padding unchanged.
            history.append(torch.where(real, backpointer, identity))
        score = score + end.float()
        best_score, last = score.max(dim=1)
        path = [last]
        for backpointer in reversed(history):
            last = backpointer.gather(1, last.unsqueeze(1)).squeeze(1)
            path.append(last)
        paths = torch.stack(path[::-1], dim=1)
        paths = paths.masked_fill(~mask, -1)
        return paths, torch.where(mask.any(dim=1), best_score, torch.zeros_like(best_score))


def forward_backward(
    emissions: torch.Tensor,
    mask: torch.Tensor,
    transitions: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward and backward log-scores ``[batch, length, tags]`` and ``log Z [batch]``.

    ``alpha[b, t, j]``: log-sum of the scores of every path prefix that ends in tag j at t (its
    emission included); ``beta[b, t, j]``: log-sum of every suffix after t given tag j at t (the
    end score included, t's emission not). So ``alpha + beta`` at any real position log-sums to
    ``log Z``, and the probability of any tag segment follows from the two (what entity scores
    need). Values at padding are meaningless.
    """
    with _no_autocast(emissions):
        emissions, transitions = emissions.float(), transitions.float()
        mask = _prefix_mask(mask, emissions)
        batch, length, n_tags = emissions.shape
        alphas = [start.float() + emissions[:, 0]]
        for t in range(1, length):
            step = (
                torch.logsumexp(alphas[-1].unsqueeze(2) + transitions.unsqueeze(0), dim=1) + emissions[:, t]
            )
            alphas.append(torch.where(mask[:, t : t + 1], step, alphas[-1]))
        lengths = mask.long().sum(dim=1)
        end = end.float().expand(batch, n_tags)
        betas: list[torch.Tensor] = [end] * length
        beta = end
        for t in range(length - 2, -1, -1):
            # beta_t(i) = logsumexp_j(trans_ij + emit_{t+1}(j) + beta_{t+1}(j)) where t+1 is real.
            step = torch.logsumexp(
                transitions.unsqueeze(0) + (emissions[:, t + 1] + beta).unsqueeze(1), dim=2
            )
            beta = torch.where(mask[:, t + 1 : t + 2], step, end)
            betas[t] = beta
        alpha, beta = torch.stack(alphas, dim=1), torch.stack(betas, dim=1)
        last = (lengths - 1).clamp(min=0)
        final = alpha.gather(1, last.view(-1, 1, 1).expand(-1, 1, n_tags)).squeeze(1)
        log_z = torch.logsumexp(final + end, dim=1)
        return alpha, beta, torch.where(lengths > 0, log_z, torch.zeros_like(log_z))


def constraint_scores(
    allowed: torch.Tensor | None, allowed_start: torch.Tensor | None, n_tags: int, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive scores for constraints: 0 where allowed, :data:`FORBIDDEN` where not."""
    trans = torch.zeros(n_tags, n_tags, device=device)
    start = torch.zeros(n_tags, device=device)
    if allowed is not None:
        trans = trans.masked_fill(~allowed.to(device=device, dtype=torch.bool), FORBIDDEN)
    if allowed_start is not None:
        start = start.masked_fill(~allowed_start.to(device=device, dtype=torch.bool), FORBIDDEN)
    return trans, start


class LinearChainCRF(nn.Module):
    """Learned start, transition and end scores over ``num_tags`` tags.

    ``allowed``/``allowed_start`` (bool) forbid transitions: forbidden transitions are
    excluded from training's partition function and from decoding. ``constrain_start``
    in :meth:`nll` (a bool, or one per row) is turned off for windows that begin
    mid-sentence, where an ``I-`` tag may legitimately come first.
    """

    def __init__(self, num_tags: int, allowed=None, allowed_start=None):
        super().__init__()
        self.num_tags = num_tags
        self.start_transitions = nn.Parameter(torch.zeros(num_tags))
        self.end_transitions = nn.Parameter(torch.zeros(num_tags))
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))
        nn.init.uniform_(self.transitions, -0.1, 0.1)
        nn.init.uniform_(self.start_transitions, -0.1, 0.1)
        nn.init.uniform_(self.end_transitions, -0.1, 0.1)
        # Constraints are rebuilt from the label names on reload, so they are not saved.
        allowed = torch.as_tensor(allowed, dtype=torch.bool) if allowed is not None else None
        allowed_start = (
            torch.as_tensor(allowed_start, dtype=torch.bool) if allowed_start is not None else None
        )
        self.register_buffer("allowed", allowed, persistent=False)
        self.register_buffer("allowed_start", allowed_start, persistent=False)

    def scores(self, constrain_start=True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(transitions, start, end)`` in fp32 with the constraints applied.

        ``constrain_start`` may be a bool tensor ``[batch]``; ``start`` is then ``[batch, tags]``.
        """
        penalty, start_penalty = constraint_scores(
            self.allowed, self.allowed_start, self.num_tags, self.transitions.device
        )
        start = self.start_transitions.float()
        if isinstance(constrain_start, torch.Tensor):
            rows = constrain_start.to(device=start.device, dtype=torch.bool).unsqueeze(1)
            start = start + torch.where(rows, start_penalty, torch.zeros_like(start_penalty))
        elif constrain_start:
            start = start + start_penalty
        return self.transitions.float() + penalty, start, self.end_transitions.float()

    def nll(self, emissions, tags, mask=None, constrain_start=True) -> torch.Tensor:
        """Negative log-likelihood of the gold paths, per sequence ``[batch]``."""
        trans, start, end = self.scores(constrain_start)
        mask = _prefix_mask(mask, emissions)
        return log_partition(emissions, mask, trans, start, end) - path_score(
            emissions, tags, mask, trans, start, end
        )

    def decode(self, emissions, mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Viterbi: best allowed paths (``-1`` at padding) and their scores."""
        trans, start, end = self.scores()
        return viterbi(emissions, _prefix_mask(mask, emissions), trans, start, end)

    def marginals(self, emissions, mask=None) -> torch.Tensor:
        """``P(tag_t = j | x)`` per position ``[batch, length, tags]`` (0 at padding).

        The gradient of ``log Z`` with respect to the emissions is exactly the marginals
        (forward-backward), so autograd computes them.
        """
        trans, start, end = (s.detach() for s in self.scores())
        mask = _prefix_mask(mask, emissions)
        with torch.enable_grad():
            leaf = emissions.detach().float().clone().requires_grad_(True)
            log_z = log_partition(leaf, mask, trans, start, end)
            (grad,) = torch.autograd.grad(log_z.sum(), leaf)
        return grad * mask.unsqueeze(2)

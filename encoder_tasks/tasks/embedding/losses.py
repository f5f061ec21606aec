"""Bi-encoder losses as ``nn.Module``s over embeddings.

- :class:`MultipleNegativesRankingLoss` (InfoNCE): (anchor, positive) pairs, every other
  positive in the batch (across all processes) and optional hard negatives as negatives.
- :class:`CoSENTLoss`: scored pairs; only the order of the scores matters.
- :class:`CosineSimilarityLoss`: scored pairs; cosine regressed onto scores in [0, 1].

Unlike sentence-transformers, the losses take embeddings, not the model: the model computes
the embeddings once and the same loss works under any wrapper (DDP, FSDP).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import UserError
from .args import LOSSES
from .distributed import gather_with_grad, world


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every row of ``a`` with every row of ``b`` (``[len(a), len(b)]``)."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


class MultipleNegativesRankingLoss(nn.Module):
    """InfoNCE over in-batch negatives: anchor ``i`` must pick positive ``i`` among all candidates.

    Candidates are the positives of the (global) batch plus every hard-negative column.
    ``scores = cos(anchor, candidate) / temperature``; the loss is their cross-entropy with
    the true positive. ``symmetric`` adds the reverse direction (positive ``i`` must pick
    anchor ``i`` among all anchors) and averages the two.

    With ``gather_across_devices`` (default) under several processes, the candidates are
    gathered from every process with their gradient (:func:`.distributed.gather_with_grad`),
    so N processes train exactly as one process on the global batch (same loss, same
    gradients after DDP's averaging); without it each process ranks its own batch only.

    Example:
        >>> loss = MultipleNegativesRankingLoss(temperature=1.0)
        >>> a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> round(loss(a, a).item(), 4)  # log(1 + e^-1)
        0.3133
    """

    def __init__(
        self, temperature: float = 0.05, symmetric: bool = False, gather_across_devices: bool = True
    ):
        super().__init__()
        if temperature <= 0:
            raise UserError(f"--temperature must be positive, found {temperature}")
        self.temperature = temperature
        self.symmetric = symmetric
        self.gather_across_devices = gather_across_devices

    def _gather(self, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        return gather_with_grad(x) if self.gather_across_devices else (x, 0, x.shape[0])

    def forward(
        self, anchors: torch.Tensor, positives: torch.Tensor, negatives: Sequence[torch.Tensor] = ()
    ) -> torch.Tensor:
        anchors, positives = anchors.float(), positives.float()
        all_positives, offset, total = self._gather(positives)
        candidates = [all_positives] + [self._gather(n.float())[0] for n in negatives]
        scores = cosine_matrix(anchors, torch.cat(candidates)) / self.temperature
        targets = torch.arange(anchors.shape[0], device=anchors.device) + offset
        # DDP (and the Trainer's logged loss) average over processes: this process's summed
        # terms times processes / global rows make that average the mean over the global
        # batch, even when processes hold different row counts. One process: the plain mean.
        share = (world()[1] if self.gather_across_devices else 1) / total
        loss = F.cross_entropy(scores, targets, reduction="sum") * share
        if self.symmetric:
            all_anchors = self._gather(anchors)[0]
            backward = cosine_matrix(positives, all_anchors) / self.temperature
            loss = (loss + F.cross_entropy(backward, targets, reduction="sum") * share) / 2
        return loss


class CoSENTLoss(nn.Module):
    """CoSENT: for every two pairs with scores ``y_i < y_j``, penalise ``cos_i > cos_j``.

    ``loss = log(1 + sum over (i, j) with y_i < y_j of exp((cos_i - cos_j) / temperature))``.

    Pairs are compared within each process's batch only (as sentence-transformers does): under
    several processes the step's loss is the mean of the per-process losses, not the loss of
    the global batch (a log-sum-exp over all pairs does not split into per-process parts).

    Example:
        >>> loss = CoSENTLoss(temperature=1.0)
        >>> a = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
        >>> b = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> round(loss(a, b, torch.tensor([0.0, 1.0])).item(), 4)  # log(1 + e^(1 - 0))
        1.3133
    """

    def __init__(self, temperature: float = 0.05):
        super().__init__()
        if temperature <= 0:
            raise UserError(f"--temperature must be positive, found {temperature}")
        self.temperature = temperature

    def forward(self, a: torch.Tensor, b: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        cos = F.cosine_similarity(a.float(), b.float(), dim=-1) / self.temperature
        diff = cos[:, None] - cos[None, :]
        ordered = scores[:, None] < scores[None, :]
        diff = diff.masked_fill(~ordered, float("-inf"))
        # The zero is the "1 +" inside the log; it also keeps the result finite with no pair.
        return torch.logsumexp(torch.cat([diff.new_zeros(1), diff.flatten()]), dim=0)


class CosineSimilarityLoss(nn.Module):
    """Mean squared error between ``cos(a, b)`` and the pair's score (scaled to [0, 1]).

    Example:
        >>> loss = CosineSimilarityLoss()
        >>> a = torch.tensor([[1.0, 0.0]])
        >>> round(loss(a, a, torch.tensor([0.5])).item(), 4)  # (1 - 0.5)^2
        0.25
    """

    def forward(self, a: torch.Tensor, b: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        cos = F.cosine_similarity(a.float(), b.float(), dim=-1)
        return F.mse_loss(cos, scores.float())


def build_loss(
    name: str, temperature: float = 0.05, symmetric: bool = False, gather: bool = True
) -> nn.Module:
    """The loss module for ``--loss`` (``infonce`` is another name for ``mnrl``)."""
    name = "mnrl" if name == "infonce" else name
    if name == "mnrl":
        return MultipleNegativesRankingLoss(temperature, symmetric, gather)
    if name == "cosent":
        return CoSENTLoss(temperature)
    if name == "cosine":
        return CosineSimilarityLoss()
    raise UserError(f"--loss must be one of auto, {', '.join(LOSSES)}, infonce; found {name!r}")

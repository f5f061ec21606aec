"""Matryoshka embeddings: train so that the first N dimensions of a vector work on their own.

Training sums the loss over prefixes of the embeddings (every ``--matryoshka_dims`` size and
the full one), so the leading dimensions carry the most information (Kusupati et al., 2022).
A vector cut to a prefix is re-normalised before use; the losses compare by cosine, so a cut
needs no normalisation inside training.

Example:
    >>> import numpy as np
    >>> [round(float(x), 4) for x in truncate(np.array([[3.0, 4.0, 12.0]]), 2)[0]]
    [0.6, 0.8]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from ...errors import UserError
from .retrieval import normalize


def truncate(vectors: np.ndarray, dimensions: int | None, renormalize: bool = True) -> np.ndarray:
    """The first ``dimensions`` columns of ``vectors`` (re-normalised to unit length)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if dimensions is None or dimensions == vectors.shape[1]:
        return vectors
    if not 1 <= dimensions <= vectors.shape[1]:
        raise UserError(f"--dimensions {dimensions}: expected 1 to {vectors.shape[1]} (the vectors' size)")
    cut = vectors[:, :dimensions]
    return normalize(cut) if renormalize else np.ascontiguousarray(cut)


def check_dims(dims: Sequence[int] | None, hidden: int) -> list[int]:
    """The prefix sizes a loss sums over: the given ones below ``hidden``, then ``hidden``."""
    dims = list(dims or [])
    too_big = [d for d in dims if d > hidden]
    if too_big:
        raise UserError(f"--matryoshka_dims {too_big}: larger than the model's embedding size {hidden}")
    return sorted({*dims, hidden})


class MatryoshkaLoss(torch.nn.Module):
    """``loss_of(groups)`` summed over prefixes of every group's embeddings.

    ``loss_of`` takes the list of embedding groups (anchors, positives, negatives...) and
    returns the loss; each prefix size gets weight 1, as sentence-transformers' default.

    Example:
        >>> from encoder_tasks.tasks.embedding.losses import MultipleNegativesRankingLoss
        >>> base = MultipleNegativesRankingLoss(temperature=1.0)
        >>> loss = MatryoshkaLoss(lambda g: base(g[0], g[1]), dims=[1], hidden=2)
        >>> a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> round(loss([a, a]).item(), 4)  # full size 0.3133 + first dimension (0.3133 + log 2) / 2
        0.8165
    """

    def __init__(
        self, loss_of: Callable[[list[torch.Tensor]], torch.Tensor], dims: Sequence[int], hidden: int
    ):
        super().__init__()
        self.loss_of = loss_of
        self.dims = check_dims(dims, hidden)

    def forward(self, groups: list[torch.Tensor]) -> torch.Tensor:
        return sum(self.loss_of([g[:, :d] for g in groups]) for d in self.dims)

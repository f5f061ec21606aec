"""Distillation losses: what the student is asked to match, each in fp32 whatever the autocast.

- :func:`kl_loss`: ``T^2 * KL(softmax(teacher / T) || softmax(student / T))`` per row, averaged
  over the rows a mask keeps (Hinton et al. 2015; the ``T^2`` keeps gradient sizes comparable
  across temperatures);
- :func:`soft_bce_loss`: the same for independent labels (multi-label), per label;
- :func:`mse_loss`: regression scores and embedding vectors;
- :func:`margin_mse_loss`: the differences between scores of two pairs (MarginMSE,
  Hofstätter et al. 2020): the student learns the teacher's ranking margins, not its scale;
- :func:`hidden_loss`: layer outputs, over real tokens only;
- :func:`mix`: ``alpha * hard + (1 - alpha) * soft``.

Example:
    >>> import torch
    >>> same = torch.tensor([[1.0, 2.0, 3.0]])
    >>> float(kl_loss(same, same, 2.0))
    0.0
    >>> float(mix(torch.tensor(1.0), torch.tensor(3.0), alpha=0.25))
    2.5
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _rows(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over the rows ``mask`` keeps (0 when it keeps none)."""
    if mask is None:
        return values.mean() if values.numel() else values.sum()
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def kl_loss(
    student: torch.Tensor, teacher: torch.Tensor, temperature: float, mask: torch.Tensor | None = None
):
    """Temperature-scaled KL over the last dimension, averaged over rows (``mask``: rows kept)."""
    t = temperature
    log_p_student = F.log_softmax(student.float() / t, dim=-1)
    log_p_teacher = F.log_softmax(teacher.float() / t, dim=-1)
    per_row = (log_p_teacher.exp() * (log_p_teacher - log_p_student)).sum(dim=-1)
    return _rows(per_row, mask) * t * t


def soft_bce_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """Independent labels: binary cross-entropy against the teacher's ``sigmoid(logit / T)`` (its
    gradient is the binary KL's), times ``T^2``."""
    t = temperature
    target = torch.sigmoid(teacher.float() / t)
    return F.binary_cross_entropy_with_logits(student.float() / t, target) * t * t


def mse_loss(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Squared distance per row (summed over the last dimension of vectors), averaged over rows."""
    diff = (student.float() - teacher.float()) ** 2
    per_row = diff.sum(dim=-1) if diff.dim() > 1 else diff
    return _rows(per_row, mask)


def margin_mse_loss(student_scores: torch.Tensor, teacher_scores: torch.Tensor) -> torch.Tensor:
    """MSE between the student's and the teacher's score margins.

    ``*_scores`` are ``[rows]`` (margins between every two rows of a batch) or ``[rows, k]``
    (margins between column 0, the positive, and each other column, the negatives).

    Example:
        >>> import torch
        >>> round(float(margin_mse_loss(torch.tensor([0.9, 0.1]), torch.tensor([0.8, 0.0]))), 6)  # same margin
        0.0
    """
    s, t = student_scores.float(), teacher_scores.float()
    if s.dim() == 1:
        s_margin, t_margin = s[:, None] - s[None, :], t[:, None] - t[None, :]
    else:
        s_margin, t_margin = s[:, :1] - s[:, 1:], t[:, :1] - t[:, 1:]
    return F.mse_loss(s_margin, t_margin)


def hidden_loss(
    student: torch.Tensor, teacher: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    """Mean squared error of layer outputs ``[batch, seq, hidden]`` over real tokens (per token,
    averaged over hidden units)."""
    diff = ((student.float() - teacher.float()) ** 2).mean(dim=-1)
    if attention_mask is not None and attention_mask.shape == diff.shape:
        return _rows(diff, attention_mask)
    return diff.mean()


def mix(hard: torch.Tensor | None, soft: torch.Tensor, alpha: float) -> torch.Tensor:
    """``alpha * hard + (1 - alpha) * soft``; a batch without a hard loss gets the soft one alone.
    ``alpha == 1`` returns ``hard`` itself (plain fine-tuning, bit for bit)."""
    if hard is None:
        return soft
    if alpha == 1.0:
        return hard
    return alpha * hard + (1.0 - alpha) * soft

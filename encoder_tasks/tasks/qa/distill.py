"""What a QA student learns from its teacher: the start and end logits over each window's tokens.

Temperature-scaled KL between the student's and the teacher's start distributions, and the
same for the ends (averaged). Padding positions carry :data:`~.model.MASKED_LOGIT` on both sides.

Example:
    >>> import torch
    >>> d = QADistiller()
    >>> inputs = {"input_ids": torch.zeros(1, 4, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 1, 0]])}
    >>> rows = d.split_rows({"start_logits": torch.ones(1, 4), "end_logits": torch.ones(1, 4)}, inputs)
    >>> d.join_rows(rows, inputs, "cpu")["start_logits"].tolist()
    [[1.0, 1.0, 1.0, -10000.0]]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...distillation.distiller import Distiller
from ...distillation.losses import kl_loss
from .model import MASKED_LOGIT

KEYS = ("start_logits", "end_logits")


class QADistiller(Distiller):
    task = "qa"
    label_keys = ("start_positions", "end_positions")
    no_unlabelled_reason = "a QA example is a question with its context, and plain text has neither"

    def targets(self, teacher_output, inputs):
        return {key: getattr(teacher_output, key) for key in KEYS}

    def split_rows(self, targets, inputs):
        lengths = inputs["attention_mask"].sum(dim=1).tolist()
        return [{key: targets[key][i, :n] for key in KEYS} for i, n in enumerate(lengths)]

    def join_rows(self, rows, inputs, device):
        width = inputs["input_ids"].shape[1]
        return {
            key: torch.stack(
                [F.pad(row[key], (0, width - row[key].shape[0]), value=MASKED_LOGIT) for row in rows]
            ).to(device)
            for key in KEYS
        }

    def soft_loss(self, outputs, targets, inputs, temperature):
        start = kl_loss(outputs.start_logits, targets["start_logits"], temperature)
        end = kl_loss(outputs.end_logits, targets["end_logits"], temperature)
        return (start + end) / 2

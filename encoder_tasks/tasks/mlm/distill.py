"""What an MLM student learns from its teacher: the vocabulary distribution at masked positions.

The teacher sees the same masked batch as the student (masks are drawn per batch by the
collator) and both heads run at the masked positions only, in the same order; the student
matches the teacher's distributions by temperature-scaled KL. Masks change every epoch, so the
teacher's outputs are never cached. The student's head starts as the teacher's (no warm-up).

Example:
    >>> import torch
    >>> d = MLMDistiller()
    >>> logits = torch.randn(1, 3, 5)
    >>> d.targets(type("Out", (), {"logits": logits}), {"labels": torch.tensor([[-100, 2, -100]])})["logits"].shape
    torch.Size([1, 5])
"""

from __future__ import annotations

from ...distillation.distiller import Distiller
from ...distillation.losses import kl_loss
from .masking import IGNORE_INDEX


def _masked(logits, inputs):
    """Logits at the masked positions ``[masked tokens, vocab]``, whichever way the head ran."""
    if logits.dim() == 3:
        return logits[inputs["labels"] != IGNORE_INDEX]
    return logits


class MLMDistiller(Distiller):
    task = "mlm"
    cacheable = False
    no_unlabelled_reason = "the MLM training file is unlabelled text already: add the text to --train_file"

    def run_teacher(self, teacher, inputs):
        return teacher(**inputs)  # with the labels: the head then runs at the masked positions only

    def targets(self, teacher_output, inputs):
        return {"logits": _masked(teacher_output.logits, inputs)}

    def soft_loss(self, outputs, targets, inputs, temperature):
        return kl_loss(_masked(outputs.logits, inputs), targets["logits"], temperature)

    def init_student(self, student, teacher):
        copied = super().init_student(student, teacher)
        student.head_source = "run"  # a trained head: no frozen warm-up phase
        return copied

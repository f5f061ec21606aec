"""The flags of ``encoder-tasks <task> distill`` (beside the usual training flags).

Names carry a ``distill_`` prefix where a task already owns the plain name (the embedding task's
``--temperature`` is the temperature of its own contrastive loss).

Example:
    >>> args = DistillArguments(teacher="runs/sst2", student_num_layers=3)
    >>> args.distill_temperature, args.distill_alpha
    (2.0, 0.5)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UserError


@dataclass
class DistillArguments:
    """Which teacher, which student, and how the two losses mix."""

    teacher: str | None = field(
        default=None,
        metadata={
            "help": "Run directory of the teacher: a model trained by `encoder-tasks <task> train` (required)."
        },
    )
    student_num_layers: int | None = field(
        default=None,
        metadata={
            "help": "Student = the teacher's embeddings and this many of its layers, evenly spread (first and "
            "last kept)."
        },
    )
    student_layers: str | None = field(
        default=None,
        metadata={
            "help": "Student = the teacher's embeddings and exactly these layers, e.g. 0,2,4 (0-based)."
        },
    )
    student_model: str | None = field(
        default=None,
        metadata={
            "help": "Student = another encoder (Hub id or directory) with the same tokenizer as the teacher; its "
            "head starts new."
        },
    )
    distill_temperature: float = field(
        default=2.0, metadata={"help": "Softmax temperature of the KL loss on logits (scaled by T^2)."}
    )
    distill_alpha: float = field(
        default=0.5,
        metadata={
            "help": "Weight of the hard-label loss: loss = alpha * hard + (1 - alpha) * distillation. 1 = plain "
            "fine-tuning, 0 = the teacher alone."
        },
    )
    distill_hidden_weight: float = field(
        default=0.0,
        metadata={
            "help": "Weight of an extra MSE between the student's layer outputs and the teacher's layers they "
            "came from (needs equal hidden sizes)."
        },
    )
    unlabelled_file: str | None = field(
        default=None,
        metadata={
            "help": "Extra text without labels (.txt: one text per line, or a table with the text columns); "
            "each training step also matches the teacher on one batch of it."
        },
    )
    teacher_cache_mb: float = field(
        default=1024.0,
        metadata={
            "help": "Keep the teacher's outputs in memory (computed once, reused every epoch) when they fit in "
            "this many MB; 0 = never."
        },
    )

    def __post_init__(self):
        chosen = [
            name
            for name in ("student_num_layers", "student_layers", "student_model")
            if getattr(self, name) not in (None, "")
        ]
        if len(chosen) > 1:
            raise UserError(
                f"distill: give one of --student_num_layers, --student_layers, --student_model, found {len(chosen)}: {', '.join('--' + n for n in chosen)}"
            )
        if self.distill_temperature <= 0:
            raise UserError(f"--distill_temperature must be positive, found {self.distill_temperature}")
        if not 0.0 <= self.distill_alpha <= 1.0:
            raise UserError(f"--distill_alpha must be between 0 and 1, found {self.distill_alpha}")
        if self.distill_hidden_weight < 0:
            raise UserError(f"--distill_hidden_weight must be 0 or more, found {self.distill_hidden_weight}")

    def check(self) -> None:
        """The checks that need every flag parsed (a missing teacher or student)."""
        if not self.teacher:
            raise UserError("distill: --teacher is required (the run directory of a trained model)")
        if not (self.student_num_layers or self.student_layers or self.student_model):
            raise UserError(
                "distill: choose the student with --student_num_layers N, --student_layers 0,2,4 or --student_model NAME"
            )

"""What a classification (or pair) student learns from its teacher: the class logits.

Single-label: temperature-scaled KL on the logits; multi-label: each label's probability
(binary cross-entropy on ``sigmoid(logit / T)``); regression: the teacher's score (MSE).
The student's head starts as the teacher's (same hidden size) or new.

Example:
    >>> import torch
    >>> from encoder_tasks.tasks.classification.args import ClassificationSettings
    >>> d = ClassificationDistiller(ClassificationSettings(problem_type="regression", label_names=["score"]))
    >>> out = type("Out", (), {"logits": torch.tensor([[1.0], [2.0]])})
    >>> float(d.soft_loss(out, {"logits": torch.tensor([[1.0], [4.0]])}, {}, 2.0))
    2.0
"""

from __future__ import annotations

from ...distillation.distiller import Distiller
from ...distillation.losses import kl_loss, mse_loss, soft_bce_loss
from ...distillation.unlabelled import as_split, first_name, texts


class ClassificationDistiller(Distiller):
    task = "classification"
    supports_unlabelled = True

    def __init__(self, settings=None):
        self.settings = settings

    def soft_loss(self, outputs, targets, inputs, temperature):
        student, teacher = outputs.logits, targets["logits"]
        problem = self.settings.problem_type if self.settings is not None else "single_label"
        if problem == "regression":
            return mse_loss(student.squeeze(-1), teacher.squeeze(-1))
        if problem == "multi_label":
            return soft_bce_loss(student, teacher, temperature)
        return kl_loss(student, teacher, temperature)

    def unlabelled_split(self, split, task_args, settings):
        """Texts (and second texts for pairs) with a placeholder label the loss never sees."""
        self.settings = settings
        columns = {first_name(task_args.text_column): texts(split, task_args.text_column, "text")}
        if task_args.text_pair_column:
            columns[first_name(task_args.text_pair_column)] = texts(
                split, task_args.text_pair_column, "text_pair"
            )
        count = len(next(iter(columns.values())))
        placeholder = {"regression": 0.0, "multi_label": ""}.get(
            settings.problem_type, settings.label_names[0]
        )
        columns[first_name(task_args.label_column)] = [placeholder] * count
        return as_split(split, columns)

"""Knowledge distillation for every task: ``encoder-tasks <task> distill --teacher RUN ...``.

What every task shares lives here; what differs per task (which outputs are distilled and how)
is each task's :class:`Distiller` (``encoder_tasks/tasks/<task>/distill.py``, returned by
``Task.distiller()``).

- ``args.py``: the flags (:class:`DistillArguments`);
- ``students.py``: a layer subset of the teacher's encoder, or another encoder with the same tokenizer;
- ``losses.py``: temperature-scaled KL, MSE, MarginMSE, layer outputs, the ``alpha`` mix;
- ``distiller.py``: the per-task seam and the teacher's output cache;
- ``trainer.py``: the task's own trainer with the teacher in its loss;
- ``run.py``: the ``distill`` action, through :func:`encoder_tasks.run.train`.

docs/distillation.md is the user's guide. Only the light modules are imported here.

Example:
    >>> from encoder_tasks.distillation import DistillArguments
    >>> DistillArguments(teacher="runs/t", student_layers="0,2").student_layers
    '0,2'
"""

from __future__ import annotations

from .args import DistillArguments

__all__ = ["DistillArguments"]

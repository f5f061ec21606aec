"""The distillation trainer: any task's trainer, with the teacher's targets added to its loss.

:func:`distillation_trainer` subclasses the task's own trainer (``NerTrainer``, ``QATrainer``...)
with :class:`DistillationMixin`, so everything a task's trainer does (its optimiser groups, its
evaluation, its samplers) stays as it is; only the training loss changes:

``loss = alpha * hard + (1 - alpha) * soft  [+ hidden_weight * hidden]  [+ (1 - alpha) * soft on one unlabelled batch]``

The teacher runs under ``torch.inference_mode`` in eval mode (no dropout), inside the same
``accelerator.autocast()`` as the student, so ``--bf16``/``--fp16`` apply to both. Evaluation is
the student's own (its plain ``eval_loss`` and metrics).

Example:
    >>> from encoder_tasks.trainer import EncoderTaskTrainer
    >>> cls = distillation_trainer(EncoderTaskTrainer, teacher_model=None, distiller=None, options=None)
    >>> cls.__name__, issubclass(cls, EncoderTaskTrainer)
    ('DistillingEncoderTaskTrainer', True)
"""

from __future__ import annotations

import logging

import torch

from .distiller import TeacherCache
from .losses import hidden_loss, mix
from .students import layer_list

logger = logging.getLogger(__name__)


class DistillationMixin:
    """Adds the teacher to a task trainer's ``compute_loss`` (class attributes are bound by
    :func:`distillation_trainer`)."""

    teacher_model = None
    distiller = None
    options = None  # DistillArguments
    #: Teacher layer behind each student layer, for --distill_hidden_weight.
    layer_map: list[int] | None = None
    unlabelled = None  # datasets.Dataset in the training rows' shape

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher = self.teacher_model.to(self.args.device).eval()
        self.teacher.requires_grad_(False)
        examples = (len(self.train_dataset) if self.train_dataset is not None else 0) + (
            len(self.unlabelled) if self.unlabelled is not None else 0
        )
        budget = self.options.teacher_cache_mb if self.distiller.cacheable else 0
        self.teacher_cache = TeacherCache(budget, examples)
        self._unlabelled_batches = None
        self._states: dict[str, dict[int, torch.Tensor]] = {"student": {}, "teacher": {}}
        self._capture = False
        if self.options.distill_hidden_weight > 0:
            self._hook_layers()

    # ---- the teacher -----------------------------------------------------------------------
    def teacher_targets(self, inputs) -> dict[str, torch.Tensor]:
        """The teacher's targets for a batch: from the cache, or from one teacher pass."""
        distiller = self.distiller
        keys = (
            distiller.row_keys(inputs)
            if distiller.cacheable and self.teacher_cache.enabled is not False
            else None
        )
        if keys is not None and not self._capture:
            rows = self.teacher_cache.get(keys)
            if rows is not None:
                return distiller.join_rows(rows, inputs, self.args.device)
        with torch.inference_mode(), self.accelerator.autocast():
            output = distiller.run_teacher(self.teacher, inputs)
            targets = distiller.targets(output, inputs)
        # Inference tensors cannot take part in autograd: plain copies for the loss.
        targets = {k: v.clone() for k, v in targets.items()}
        if keys is not None:
            self.teacher_cache.put(keys, distiller.split_rows(targets, inputs))
        return targets

    # ---- the loss --------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        options = self.options
        if not model.training or (
            options.distill_alpha == 1.0 and options.distill_hidden_weight == 0 and self.unlabelled is None
        ):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        temperature, alpha = options.distill_temperature, options.distill_alpha
        distiller = self.distiller
        self._start_capture()
        targets = self.teacher_targets(inputs)

        def stock():
            return super(DistillationMixin, self).compute_loss(
                model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
            )

        hard, outputs = distiller.student_outputs(model, inputs, stock)
        soft = distiller.soft_loss(outputs, targets, inputs, temperature)
        loss = mix(hard, soft, alpha) + self._hidden_term(inputs)
        if self.unlabelled is not None and alpha < 1.0:
            batch = self._next_unlabelled()
            self._start_capture()
            extra_targets = self.teacher_targets(batch)
            extra = distiller.soft_loss(
                distiller.unlabelled_outputs(model, batch), extra_targets, batch, temperature
            )
            loss = loss + (1.0 - alpha) * extra + self._hidden_term(batch)
        self._capture = False
        return (loss, outputs) if return_outputs else loss

    # ---- unlabelled rows -------------------------------------------------------------------
    def _next_unlabelled(self):
        if self._unlabelled_batches is not None:
            batch = next(self._unlabelled_batches, None)
            if batch is not None:
                return self._prepare_inputs(batch)
        from torch.utils.data import DataLoader

        dataset = self.unlabelled
        if self.distiller.prune_columns:
            dataset = self._remove_unused_columns(dataset, description="unlabelled")
        epoch = int(self.state.epoch or 0)
        loader = DataLoader(
            dataset,
            batch_size=self._train_batch_size,
            shuffle=True,
            generator=torch.Generator().manual_seed(self.args.seed + epoch),
            collate_fn=self.data_collator,
        )
        self._unlabelled_batches = iter(loader)
        return self._prepare_inputs(next(self._unlabelled_batches))

    # ---- hidden states ---------------------------------------------------------------------
    def _hook_layers(self) -> None:
        student = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        for side, encoder in (("student", student.encoder), ("teacher", self.teacher.encoder)):
            for index, layer in enumerate(layer_list(encoder)[1]):
                layer.register_forward_hook(self._keeper(side, index))

    def _keeper(self, side: str, index: int):
        def keep(module, args, output):
            if self._capture:
                self._states[side][index] = output[0] if isinstance(output, tuple) else output

        return keep

    def _start_capture(self) -> None:
        if self.options.distill_hidden_weight > 0:
            self._states = {"student": {}, "teacher": {}}
            self._capture = True

    def _hidden_term(self, inputs) -> torch.Tensor | float:
        weight = self.options.distill_hidden_weight
        if weight <= 0:
            return 0.0
        student, teacher = self._states["student"], self._states["teacher"]
        mask = inputs.get("attention_mask")
        terms = [
            hidden_loss(student[k], teacher[j].clone(), mask)
            for k, j in enumerate(self.layer_map or [])
            if k in student and j in teacher and student[k].shape == teacher[j].shape
        ]
        return weight * torch.stack(terms).mean() if terms else 0.0


def distillation_trainer(base: type, **bound) -> type:
    """``base`` (a task's trainer class) with the teacher in its loss; ``bound``: the
    :class:`DistillationMixin` attributes (teacher_model, distiller, options, layer_map, unlabelled)."""
    return type(f"Distilling{base.__name__}", (DistillationMixin, base), dict(bound))

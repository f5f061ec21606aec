"""The MLM trainer: random masks for training, fixed seeded masks for evaluation, masked-token
metrics, and a frozen encoder while a new head warms up (:class:`HeadWarmup`).

Its options come from the task's flags (``task_args``: ``head_warmup_steps``,
``evaluate_before_training``), never from the model.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

from transformers import TrainerCallback

from ...trainer import EncoderTaskTrainer
from .metrics import masked_predictions

if TYPE_CHECKING:  # pragma: no cover
    from .model import MaskedLanguageModel

logger = logging.getLogger(__name__)


class HeadWarmup(TrainerCallback):
    """Keep the encoder frozen while a new head learns (the first ``steps`` optimizer steps).

    ``steps`` in (0, 1) is a fraction of the run's optimizer steps.

    Example:
        >>> from types import SimpleNamespace
        >>> warm = HeadWarmup(model=None, steps=0.1)
        >>> warm.on_train_begin(None, SimpleNamespace(max_steps=20), None)
        >>> warm.steps
        2
    """

    def __init__(self, model: MaskedLanguageModel, steps: float):
        self.model, self.steps, self.frozen = model, steps, False

    def _set(self, frozen: bool) -> None:
        if frozen != self.frozen:
            for parameter in self.model.encoder.parameters():
                parameter.requires_grad_(not frozen)
            self.frozen = frozen

    def on_train_begin(self, args, state, control, **kwargs):
        if 0 < self.steps < 1:
            self.steps = int(math.ceil(self.steps * state.max_steps))
        self.steps = int(self.steps)
        if self.steps:
            logger.info("new MLM head: encoder frozen for the first %d steps", self.steps)

    def on_step_begin(self, args, state, control, **kwargs):
        self._set(state.global_step < self.steps)

    def on_train_end(self, args, state, control, **kwargs):
        self._set(False)


class MLMTrainer(EncoderTaskTrainer):
    """Random masks for training, fixed seeded masks for evaluation; masked-token metrics.

    Reads ``head_warmup`` and ``evaluate_before_training`` from ``task_args``
    (:class:`~encoder_tasks.tasks.mlm.args.MLMArguments`).

    Example:
        >>> trainer = MLMTrainer(model=model, args=training_args, task_args=MLMArguments(),
        ...                      train_dataset=blocks, data_collator=collator)  # doctest: +SKIP
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.preprocess_logits_for_metrics is None:
            self.preprocess_logits_for_metrics = masked_predictions
        model = self.accelerator.unwrap_model(self.model)
        options = self.task_args  # MLMArguments; None for a trainer built without the task's flags
        warmup = options.head_warmup if options is not None else 0
        if warmup and getattr(model, "head_source", "new") == "new":
            if self.args.world_size > 1:
                # DDP expects a gradient for every parameter in every step: no frozen phase.
                logger.warning("head warm-up is skipped with %d processes (DDP)", self.args.world_size)
            else:
                self.add_callback(HeadWarmup(model, warmup))
        self.evaluate_before_training = options is not None and options.evaluate_before_training

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        for column in ("word_starts", "identifiers"):  # read by the masking collator
            if column not in self._signature_columns:
                self._signature_columns = [*self._signature_columns, column]

    def get_eval_dataloader(self, eval_dataset=None):
        collator = self.data_collator
        if hasattr(collator, "for_evaluation"):
            self.data_collator = collator.for_evaluation()
        try:
            return super().get_eval_dataloader(eval_dataset)
        finally:
            self.data_collator = collator

    def train(self, *args, **kwargs):
        initial = {}
        if self.evaluate_before_training and self.eval_dataset is not None:
            initial = self.evaluate(metric_key_prefix="initial")
        result = super().train(*args, **kwargs)
        result.metrics.update(initial)
        return result

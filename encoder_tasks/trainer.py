"""``EncoderTaskTrainer``: the base ``transformers.Trainer`` for every task.

It overrides only what differs from the stock Trainer:
- saving: heads are plain modules, so checkpoints are written with the head's own
  ``save_pretrained`` (config, weights, label names), and every checkpoint reloads;
- evaluation batches are sorted by length (less padding, same metrics);
- a NaN/inf training loss stops the run with a clear message.
"""

from __future__ import annotations

import math
import os

import torch
from transformers import Trainer, TrainerCallback

from .errors import UserError
from .heads import EncoderWithHead


class NonFiniteLossError(UserError):
    """Training produced a NaN or infinite loss."""


class StopOnNonFiniteLoss(TrainerCallback):
    """Stop as soon as a logged loss is NaN/inf; the last good checkpoint stays on disk."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            raise NonFiniteLossError(
                f"training loss became {loss} at step {state.global_step}; lower --learning_rate or check the "
                f"labels. Checkpoints written before this step are kept in {args.output_dir}"
            )


class LengthSortedEvalMixin:
    """Evaluate in length-sorted order: far less padding, and metrics are order-free."""

    length_column = "length"

    def _get_eval_sampler(self, eval_dataset):
        if (
            self.args.world_size <= 1
            and hasattr(eval_dataset, "column_names")
            and self.length_column in eval_dataset.column_names
        ):
            lengths = eval_dataset[self.length_column]
            return sorted(range(len(lengths)), key=lengths.__getitem__)
        return super()._get_eval_sampler(eval_dataset)


class EncoderTaskTrainer(LengthSortedEvalMixin, Trainer):
    """Trainer for :class:`~encoder_tasks.heads.EncoderWithHead` models.

    Example:
        >>> from encoder_tasks import EncoderTaskTrainer
        >>> issubclass(EncoderTaskTrainer, Trainer)
        True
    """

    def __init__(self, *args, **kwargs):
        callbacks = list(kwargs.pop("callbacks", None) or [])
        callbacks.append(StopOnNonFiniteLoss())
        super().__init__(*args, callbacks=callbacks, **kwargs)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        if not isinstance(model, EncoderWithHead):
            return super()._save(output_dir, state_dict)
        if not self.args.should_save:
            return
        os.makedirs(output_dir, exist_ok=True)
        model.save_pretrained(output_dir, state_dict=state_dict)
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)
        torch.save(self.args, os.path.join(output_dir, "training_args.bin"))

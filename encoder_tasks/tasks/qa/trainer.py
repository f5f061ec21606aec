"""The QA trainer: evaluation that puts windows back together per question, and the v2.0
null threshold tuned after each evaluation."""

from __future__ import annotations

from ...heads import EncoderWithHead
from ...trainer import EncoderTaskTrainer


class QATrainer(EncoderTaskTrainer):
    """Trainer whose evaluation puts windows back together per question.

    Each evaluation row carries its window index (``feature_index``) past the model and out
    as the row's label, so :class:`~encoder_tasks.tasks.qa.metrics.QAEvaluator` never relies
    on the order rows come back in (length-sorted batches here, sharded and gathered ones on
    several processes). On v2.0 data (``task_settings.version_2_with_negative``) with
    ``--tune_null_threshold`` (``task_args``), each evaluation's best-F1 null threshold goes to
    ``task_settings`` and the model's settings, so the saved model predicts with it.
    """

    bookkeeping_columns = ("feature_index", "length")

    @property
    def tunes_null_threshold(self) -> bool:
        settings, args = self.task_settings, self.task_args
        return bool(
            settings is not None
            and settings.get("version_2_with_negative")
            and getattr(args, "tune_null_threshold", False)
        )

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        # Keep the window index (and length, for length-sorted batches) through column pruning;
        # the collator passes neither to the model.
        extra = [c for c in self.bookkeeping_columns if c not in self._signature_columns]
        self._signature_columns = list(self._signature_columns) + extra

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        window_ids = inputs.pop("feature_index", None)
        loss, logits, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        if window_ids is not None and not prediction_loss_only:
            labels = window_ids.to(logits[0].device if isinstance(logits, tuple) else window_ids.device)
        return loss, logits, labels

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        metrics = super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        threshold = metrics.get(f"{metric_key_prefix}_best_f1_thresh")
        if threshold is not None and self.tunes_null_threshold:
            self.task_settings = self.task_settings.replace(null_threshold=float(threshold))
            model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
            if isinstance(model, EncoderWithHead):
                # The model's settings may hold more (base model, LoRA): change the threshold only.
                current = model.settings if model.settings is not None else self.task_settings
                model.settings = current.replace(null_threshold=float(threshold))
        return metrics

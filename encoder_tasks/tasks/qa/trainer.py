"""The QA trainer: evaluation that puts windows back together per question, and the v2.0
null threshold tuned after each evaluation."""

from __future__ import annotations

import logging

from ...data.fingerprint import data_fingerprint
from ...heads import EncoderWithHead
from ...trainer import EncoderTaskTrainer

logger = logging.getLogger(__name__)


class QATrainer(EncoderTaskTrainer):
    """Trainer whose evaluation puts windows back together per question.

    Each evaluation row carries its window index (``feature_index``) past the model and out
    as the row's label, so :class:`~encoder_tasks.tasks.qa.metrics.QAEvaluator` never relies
    on the order rows come back in (length-sorted batches here, sharded and gathered ones on
    several processes). On v2.0 data (``task_settings.version_2_with_negative``) with
    ``--tune_null_threshold`` (``task_args``), each evaluation's best-F1 null threshold goes to
    ``task_settings`` and the model's settings, so the saved model predicts with it, with the
    data it was tuned on (``null_threshold_tuned_on``: ``evaluate`` warns on that same data).
    The evaluation's ``exact``/``f1`` stay scored at the threshold in use; ``best_*`` are the
    tuned ones, on the data they were tuned on (optimistic).
    """

    bookkeeping_columns = ("feature_index", "length")
    #: Whether the log has said which data the threshold is tuned on (once per training run).
    said_tuning_data = False

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
            tuned = {"null_threshold": float(threshold), "null_threshold_tuned_on": self._tuning_data()}
            self.task_settings = self.task_settings.replace(**tuned)
            model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
            if isinstance(model, EncoderWithHead):
                # The model's settings may hold more (base model, LoRA): change the threshold only.
                current = model.settings if model.settings is not None else self.task_settings
                model.settings = current.replace(**tuned)
        return metrics

    def _tuning_data(self) -> dict | None:
        """The fingerprint of the evaluation data (said once per training run, in the log)."""
        source = getattr(self.compute_metrics, "source", None)
        if not source:
            return None
        record = data_fingerprint(source)
        if self.train_dataset is not None and not self.said_tuning_data:
            self.said_tuning_data = True
            logger.info(
                "v2.0 null threshold: tuned on %s at each evaluation and saved with the model (predict and "
                "evaluate use it); eval_best_f1/eval_best_exact are scored on that same data, so they are "
                "optimistic; eval_f1/eval_exact use the threshold in use (%g)",
                record["path"],
                self.task_settings.null_threshold,
            )
        return record

"""Text classification: single-label, multi-label and regression, on one text or a pair.

The package repeats every task's file set: ``args.py`` (flags and saved settings),
``labels.py`` (problem type, label names, class weights), ``model.py`` (the head),
``data.py`` (columns, tokenising, :func:`~.data.prepare`), ``metrics.py`` (``compute_metrics``
and the multi-label thresholds tuned after training), ``predict.py`` (windows for long texts),
``stock.py`` (the stock transformers layout). This module holds only the task object and
imports the heavy modules inside its hooks, so ``encoder-tasks --help`` starts without torch.

Example:
    >>> task = ClassificationTask()
    >>> task.name, task.Arguments().text_column
    ('classification', 'text')
    >>> task.load_settings({"format_version": 2, "settings": {"label_names": ["neg", "pos"]}}).label_names
    ['neg', 'pos']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...task import Task
from .args import ClassificationArguments, ClassificationPredictArguments, ClassificationSettings

__all__ = [
    "ClassificationArguments",
    "ClassificationPredictArguments",
    "ClassificationSettings",
    "ClassificationTask",
]


class ClassificationTask(Task):
    """``encoder-tasks classification ...``: the hooks of :class:`~encoder_tasks.task.Task`."""

    name = "classification"
    summary = "Single-label, multi-label and regression on one text or a pair of texts."
    Arguments = ClassificationArguments
    PredictArguments = ClassificationPredictArguments
    Settings = ClassificationSettings
    auto_batch_size = True  # the batch only sets the optimiser's noise
    objectives = ("eval_accuracy", "eval_micro_f1", "eval_spearman")
    onnx_outputs = {"logits": ("batch",)}

    def head_class(self) -> type:
        """The head this task builds (the pair task saves the same head under its own name)."""
        from .model import SequenceClassifier

        return SequenceClassifier

    def prepare(self, splits, tokenizer, task_args, data_args, saved=None):
        from .data import prepare

        return prepare(splits, tokenizer, task_args, data_args, saved)

    def build_model(self, encoder, settings, training: Mapping[str, Any] | None = None):
        return self.head_class().from_settings(encoder, settings, training)

    def after_training(self, trainer, prepared, task_args) -> dict[str, Any]:
        from .metrics import tune_after_training

        return tune_after_training(trainer, prepared, task_args)

    def evaluation_records(self, split, prepared, predictions, label_ids):
        from .metrics import evaluation_records

        return evaluation_records(split, prepared.settings, predictions, label_ids)

    def predict(self, args) -> dict[str, Any]:
        from .predict import predict_file

        return predict_file(args, self.name)

    def parse_input(self, record, where, settings):
        from .predict import parse_input

        return parse_input(record, where, settings)

    def predict_inputs(self, model, tokenizer, inputs, args):
        from .predict import predict_inputs

        return predict_inputs(model, tokenizer, inputs, args)

    def distiller(self):
        from .distill import ClassificationDistiller

        return ClassificationDistiller()

    def input_records(self, split, args, settings, first_index=0):
        """``{"text"}`` (and ``"text_pair"``) from the columns ``predict`` reads (as in training)."""
        from ...data import resolve_column
        from ...data.columns import column_texts

        texts = column_texts(split, resolve_column(split, args.text_column or "text", "text"))
        pair_column = resolve_column(split, args.text_pair_column, "text_pair")
        if pair_column is None:
            return [{"text": t} for t in texts]
        return [{"text": t, "text_pair": p} for t, p in zip(texts, column_texts(split, pair_column))]

    def stock_model(self, model):
        from .stock import to_stock

        return to_stock(model)

"""Extractive question answering (SQuAD v1.1 / v2.0, CMRC 2018): start/end spans on any encoder.

The package, one file per concern:

- ``args.py``: :class:`QAArguments` (flags), :class:`QAPredictArguments`, :class:`QASettings`
  (what a model saves);
- ``model.py``: :class:`~.model.ExtractiveQuestionAnswering`, a start/end head on any encoder;
- ``reading.py``: SQuAD JSON (nested or flat) read and flattened, answers checked against
  their contexts, the by-article split;
- ``windows.py``: question + context cut into overlapping windows (``doc_stride``) with
  character offsets kept, and span labels;
- ``scoring.py``: exact n-best span search per question over all its windows, v2.0 "no answer";
- ``evaluation.py``: the official SQuAD v1.1/v2.0 and CMRC 2018 scorers, ported;
- ``metrics.py``: the evaluator (windows back into questions, scored once each);
- ``data.py``: ``prepare`` for training and evaluation; ``trainer.py``: evaluation that carries
  window indices through the model and tunes the null threshold; ``predict.py``.

Example:
    >>> task = QATask()
    >>> task.name, task.objectives[0], sorted(task.onnx_outputs)
    ('qa', 'eval_f1', ['end_logits', 'start_logits'])
"""

from __future__ import annotations

from ...task import Task
from .args import QAArguments, QAPredictArguments, QASettings

__all__ = ["QAArguments", "QAPredictArguments", "QASettings", "QATask"]


class QATask(Task):
    """The ``qa`` task: hooks of :class:`~encoder_tasks.task.Task`, heavy modules imported when called."""

    name = "qa"
    summary = "Extractive question answering (SQuAD v1.1/v2.0, CMRC 2018): answer spans from a context."
    Arguments = QAArguments
    PredictArguments = QAPredictArguments
    Settings = QASettings
    auto_batch_size = True  # the batch only sets the optimiser's noise
    objectives = ("eval_f1", "eval_exact")  # the names QAEvaluator reports
    onnx_outputs = {"start_logits": ("batch", "sequence"), "end_logits": ("batch", "sequence")}

    def read_split(self, path, delimiter="auto", column_names=None, encoding="utf-8", split=None):
        from .reading import read_squad

        return read_squad(path, delimiter, column_names, encoding, split=split)

    def derive_splits(self, splits, task_args):
        from .data import derive_splits

        return derive_splits(splits, task_args)

    def hold_out(self, train, fraction, task_args):
        from .data import hold_out_articles

        return hold_out_articles(train, fraction, task_args)

    def prepare(self, splits, tokenizer, task_args, data_args, saved=None):
        from .data import prepare

        return prepare(splits, tokenizer, task_args, data_args, saved=saved)

    def evaluation_records(self, split, prepared, predictions, label_ids):
        from .metrics import evaluation_records

        return evaluation_records(prepared.compute_metrics, predictions, label_ids)

    def build_model(self, encoder, settings, training=None):
        from .model import ExtractiveQuestionAnswering

        model = ExtractiveQuestionAnswering(encoder)
        model.settings = settings
        return model

    def trainer_class(self):
        from .trainer import QATrainer

        return QATrainer

    def predict(self, args):
        from .predict import predict_file

        return predict_file(args)

    def parse_input(self, record, where, settings):
        from .predict import parse_input

        return parse_input(record, where, settings)

    def predict_inputs(self, model, tokenizer, inputs, args):
        from .predict import predict_inputs

        return predict_inputs(model, tokenizer, inputs, args)

    def distiller(self):
        from .distill import QADistiller

        return QADistiller()

    def input_format(self, path, args):
        """SQuAD JSON is read whole on the driver; JSON lines and tables stream."""
        from pathlib import Path

        return None if Path(path).suffix.lower() == ".json" else super().input_format(path, args)

    def input_records(self, split, args, settings, first_index=0):
        """``{"id", "question", "context"}`` as ``predict`` reads them (questions' leading spaces
        cut); without an id column the id is the row's place in its file, from 0."""
        from ...data import resolve_column
        from .data import read_examples

        examples = read_examples(split, args, need_answers=False)
        ids = examples.ids
        if resolve_column(split, args.id_column, "id", required=False) is None:
            ids = [str(first_index + i) for i in range(len(ids))]
        return [
            {"id": i, "question": q, "context": c}
            for i, q, c in zip(ids, examples.questions, examples.contexts)
        ]

    def stock_model(self, model):
        from .stock import to_stock

        return to_stock(model)

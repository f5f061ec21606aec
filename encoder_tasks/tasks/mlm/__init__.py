"""Masked-language-model pretraining: adapt an encoder to a domain, or build one from scratch.

One file per concern:
- ``args.py``: the flags (:class:`MLMArguments`, :class:`MLMPredictArguments`) and the
  settings saved with the model (:class:`MLMSettings`);
- ``text.py``: reading ``.txt``/JSON corpora as documents, and cutting them into blocks;
- ``masking.py``: which tokens to predict (BERT's 80/10/10, whole words, Chinese words);
- ``data.py``: ``prepare`` (blocks, the held-out split, the masking collator);
- ``model.py``: the head (BERT's, tied to the input embeddings) and where a new one starts from;
- ``metrics.py``: masked-token accuracy, loss and perplexity;
- ``trainer.py``: fixed evaluation masks, the head warm-up;
- ``tokenizer.py``: tokenizers trained on the user's text and fresh encoders (``--from_scratch``);
- ``predict.py``: fill-mask over a file.

Only ``args`` is imported here: the hooks import the rest when called, so the CLI starts
without torch.

Example:
    >>> task = MLMTask()
    >>> task.name, task.objectives
    ('mlm', ('eval_loss',))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...task import Task
from .args import MLMArguments, MLMPredictArguments, MLMSettings

__all__ = ["MLMArguments", "MLMPredictArguments", "MLMSettings", "MLMTask"]


class MLMTask(Task):
    """The ``mlm`` task: continued pretraining of an encoder, or pretraining from scratch."""

    name = "mlm"
    summary = "Masked-language-model pretraining: adapt an encoder to a domain, or pretrain one from scratch."
    Arguments = MLMArguments
    PredictArguments = MLMPredictArguments
    Settings = MLMSettings
    objectives = ("eval_loss",)
    onnx_outputs = {"logits": ("batch", "sequence")}

    def read_split(self, path, delimiter="auto", column_names=None, encoding="utf-8", split=None):
        from .text import read_split

        return read_split(path, delimiter, column_names, encoding, split)

    def prepare(self, splits, tokenizer, task_args, data_args, saved=None):
        from .data import prepare

        return prepare(splits, tokenizer, task_args, data_args, saved)

    def prepare_model(self, model_args, data_args, task_args, training_args) -> None:
        if task_args.from_scratch:
            from .tokenizer import prepare_scratch_model

            prepare_scratch_model(model_args, data_args, task_args, training_args)

    def build_model(self, encoder, settings, training: Mapping[str, Any] | None = None):
        from .model import build_model

        return build_model(encoder, settings, training)

    def trainer_class(self) -> type:
        from .trainer import MLMTrainer

        return MLMTrainer

    def evaluation_records(self, split, prepared, predictions, label_ids):
        """Per masked position: :func:`.metrics.evaluation_records` (the tokenizer is the one the
        prepared collator masks with)."""
        from .metrics import evaluation_records

        tokenizer = prepared.collator(None).tokenizer
        return evaluation_records(prepared.eval, tokenizer, predictions, label_ids)

    def predict(self, args) -> dict[str, Any]:
        from .predict import predict_file

        return predict_file(args)

    def parse_input(self, record, where, settings):
        from .predict import parse_input

        return parse_input(record, where, settings)

    def predict_inputs(self, model, tokenizer, inputs, args):
        from .predict import predict_inputs

        return predict_inputs(model, tokenizer, inputs, args)

    def distiller(self):
        from .distill import MLMDistiller

        return MLMDistiller()

    def input_format(self, path, args):
        """Text corpora (documents: lines, or blank-line paragraphs) and SQuAD contexts are read
        whole, by the task's reader; JSON lines and tables stream."""
        from pathlib import Path

        if Path(path).suffix.lower() in (".txt", ".text", ".raw", "", ".json"):
            return None
        return super().input_format(path, args)

    def input_records(self, split, args, settings, first_index=0):
        """``{"text"}`` from ``--text_column``, as ``predict`` reads it (a missing text is empty)."""
        from ...data import resolve_column

        column = resolve_column(split, args.text_column, "text")
        return [{"text": "" if t is None else str(t)} for t in split.dataset[column]]

    def stock_model(self, model):
        from .stock import to_stock

        return to_stock(model)

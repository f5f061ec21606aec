"""A toy task, the smallest complete one: does a text mention a keyword (default ``good``)?

It exists to prove the contract of ``docs/architecture.md``: a package with the usual file set
plus one registry line (``TASKS["toy"] = ToyTask()``) gives train, evaluate, predict and search
through the shared code, with nothing else changed.
"""

from __future__ import annotations

from encoder_tasks.task import Task

from .args import ToyArguments, ToyPredictArguments, ToySettings


class ToyTask(Task):
    name = "toy"
    summary = "Toy: does a text mention the keyword?"
    Arguments = ToyArguments
    PredictArguments = ToyPredictArguments
    Settings = ToySettings
    objectives = ("eval_accuracy",)

    def prepare(self, splits, tokenizer, task_args, data_args, saved=None):
        from .data import prepare

        return prepare(splits, tokenizer, task_args, data_args, saved)

    def build_model(self, encoder, settings, training=None):
        from .model import KeywordHead

        model = KeywordHead(encoder)
        model.settings = settings
        return model

    def predict(self, args):
        from .predict import predict

        return predict(args)

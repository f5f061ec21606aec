"""The building blocks of a task for a training loop of your own: data, head, collator, metrics.

:func:`prepare` reads and tokenises a task's data exactly as ``<task> train`` does (the task's
reader, its checks, label names, alignment, windows) and returns :class:`TaskData`: the
tokenised datasets, the settings the model will be saved with, the collator, the metrics and the
Trainer subclass. Any ``transformers.Trainer``-style loop can use them; a model trained this way
and saved with ``trainer.save_model(dir)`` is a run directory that ``predict``, ``evaluate``,
``export`` and ``serve`` accept (docs/python-api.md has one example per task).

Example:
    >>> from encoder_tasks.testing import make_tiny_model
    >>> from encoder_tasks import load_tokenizer
    >>> data = prepare("classification", load_tokenizer(make_tiny_model("bert")),
    ...                train_file=[{"text": "good", "label": "pos"}, {"text": "bad", "label": "neg"}])
    >>> data.settings.label_names, len(data.train)
    (['neg', 'pos'], 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError


@dataclass
class TaskData:
    """A task's data prepared for training (see :func:`prepare`)."""

    task: Any  # encoder_tasks.task.Task
    tokenizer: Any
    prepared: Any  # encoder_tasks.task.Prepared
    data_args: Any  # encoder_tasks.config.DataArguments
    task_args: Any  # the task's Arguments: trainers read their options here (task_args=...)

    @property
    def train(self) -> Any:
        """The tokenised training set (``datasets.Dataset``), or None."""
        return self.prepared.train

    @property
    def eval(self) -> Any:
        """The tokenised evaluation set, or None."""
        return self.prepared.eval

    @property
    def settings(self) -> Any:
        """What the model is saved with (label names, columns, ``max_length``): ``task_settings=``."""
        return self.prepared.settings

    @property
    def compute_metrics(self) -> Any:
        """``EvalPrediction -> {name: value}``, the Trainer's ``compute_metrics``."""
        return self.prepared.compute_metrics

    def collator(self, pad_to_multiple_of: int | None = None) -> Any:
        """The task's data collator (``data_collator=``)."""
        return self.prepared.collator(pad_to_multiple_of)

    def build_model(self, encoder: Any) -> Any:
        """The task's head on ``encoder`` (from :func:`encoder_tasks.load_encoder`), built from
        :attr:`settings`, which it saves with its weights."""
        return self.task.build_model(encoder, self.prepared.settings, self.prepared.training_head)

    @property
    def trainer_class(self) -> type:
        """The task's :class:`~encoder_tasks.EncoderTaskTrainer` subclass."""
        return self.task.trainer_class()


def prepare(
    task: str, tokenizer: Any, *, config: str | Path | None = None, seed: int = 42, **settings: Any
) -> TaskData:
    """Read and tokenise ``train_file`` (and ``validation_file``) as ``<task> train`` does.

    ``tokenizer`` is a tokenizer or a model name/path (loaded with
    :func:`encoder_tasks.load_tokenizer`); ``settings`` are the data and task flags of
    ``<task> train`` (``max_length``, ``text_column``, ``crf``, ``doc_stride``...); the data may
    be a path, a ``datasets.Dataset``, a pandas DataFrame or a list of records. ``seed`` draws
    the ``max_train_samples`` subset, as ``--seed`` does.
    """
    from ..backbone import load_tokenizer
    from ..config import DataArguments
    from ..run import load_task_splits
    from .actions import _data_files, _task
    from .settings import parse

    task_obj = _task(task)
    if settings.get("train_file") is None and settings.get("validation_file") is None:
        raise UserError(f"{task} prepare: give train_file (and validation_file), as paths or records")
    if isinstance(tokenizer, str | Path):
        tokenizer = load_tokenizer(str(tokenizer))
    with _data_files(settings) as resolved:
        _, (data_args, task_args) = parse(
            [DataArguments, task_obj.Arguments],
            resolved,
            f"{task} prepare",
            config,
            f"encoder-tasks {task} train",
        )
        required = ("train",) if data_args.train_file else ("validation",)
        splits = load_task_splits(task_obj, data_args, task_args, required, seed)
        prepared = task_obj.prepare(splits, tokenizer, task_args, data_args)
    return TaskData(task_obj, tokenizer, prepared, data_args, task_args)

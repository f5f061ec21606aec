"""encoder-tasks: fine-tune encoder-only transformers on classification, tagging, QA, pairs,
embeddings and MLM.

``__all__`` is the supported public surface (docs/python-api.md); anything else may change.
Public names load lazily, so ``import encoder_tasks`` and ``encoder-tasks --help`` start
without importing torch.

Example:
    >>> import encoder_tasks
    >>> encoder_tasks.__version__
    '0.1.0'
    >>> run = encoder_tasks.train("classification", model_name_or_path="bert-base-uncased",
    ...                           train_file="train.csv", output_dir="runs/cls")  # doctest: +SKIP
    >>> encoder_tasks.load(run.path).predict("a fine film")  # doctest: +SKIP
    {'text': 'a fine film', 'label': 'pos', 'score': 0.93, 'probabilities': {...}}
"""

from __future__ import annotations

import importlib
import types
from typing import Any

__version__ = "0.1.0"

#: Public name -> the module that defines it, or ``module:name`` (imported on first use).
_EXPORTS = {
    # one call per action (encoder_tasks/api/)
    "train": "encoder_tasks.api",
    "evaluate": "encoder_tasks.api",
    "load": "encoder_tasks.api",
    "predict_file": "encoder_tasks.api",
    "prepare": "encoder_tasks.api",
    "Run": "encoder_tasks.api",
    "Model": "encoder_tasks.api",
    "TaskData": "encoder_tasks.api",
    "Predictor": "encoder_tasks.inference",
    # building blocks
    "EncoderTaskTrainer": "encoder_tasks.trainer",
    "EncoderTrainingArguments": "encoder_tasks.training_args",
    "EncoderWithHead": "encoder_tasks.heads",
    "Pooler": "encoder_tasks.heads",
    "ModelArguments": "encoder_tasks.config",
    "DataArguments": "encoder_tasks.config",
    "parse_args": "encoder_tasks.config",
    # a checkpoint, or the fine-tuned encoder inside a saved run
    "load_encoder": "encoder_tasks.heads:load_starting_encoder",
    "load_tokenizer": "encoder_tasks.backbone",
    "read_file": "encoder_tasks.data",
    "TASKS": "encoder_tasks.registry",
    "Task": "encoder_tasks.task",
    "TaskSettings": "encoder_tasks.task",
    "Prepared": "encoder_tasks.task",
    "SequenceClassifier": "encoder_tasks.tasks.classification.model",
    "ClassificationArguments": "encoder_tasks.tasks.classification.args",
    # errors
    "UserError": "encoder_tasks.errors",
    "InputError": "encoder_tasks.inputs",
}

__all__ = ["__version__", "export", *_EXPORTS]


class _CallableModule(types.ModuleType):
    """``encoder_tasks.export`` is both the export package and the export action: Python binds a
    subpackage to its parent's attribute when it is imported, so a function of that name would be
    replaced by the package the first time anything imports it. Calling the package runs
    :func:`encoder_tasks.api.export` instead."""

    def __call__(self, run_dir: Any, dest: Any, format: str = "auto", **options: Any) -> dict[str, Any]:
        from .api import export as export_run

        return export_run(run_dir, dest, format, **options)


from . import export  # noqa: E402  (light: torch loads when an export runs)

export.__class__ = _CallableModule


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module, _, attribute = _EXPORTS[name].partition(":")
        return getattr(importlib.import_module(module), attribute or name)
    raise AttributeError(f"module 'encoder_tasks' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""encoder-tasks: fine-tune encoder-only transformers on classification, tagging, QA, pairs,
embeddings and MLM.

Public names load lazily, so ``encoder-tasks --help`` starts without importing torch.

Example:
    >>> import encoder_tasks
    >>> encoder_tasks.__version__
    '0.1.0'
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "EncoderTaskTrainer": "encoder_tasks.trainer",
    "EncoderTrainingArguments": "encoder_tasks.training_args",
    "EncoderWithHead": "encoder_tasks.heads",
    "Pooler": "encoder_tasks.heads",
    "ModelArguments": "encoder_tasks.config",
    "DataArguments": "encoder_tasks.config",
    "parse_args": "encoder_tasks.config",
    "load_encoder": "encoder_tasks.backbone",
    "load_tokenizer": "encoder_tasks.backbone",
    "read_file": "encoder_tasks.data",
    "UserError": "encoder_tasks.errors",
    "TASKS": "encoder_tasks.registry",
    "Task": "encoder_tasks.task",
    "TaskSettings": "encoder_tasks.task",
    "Prepared": "encoder_tasks.task",
    "SequenceClassifier": "encoder_tasks.tasks.classification.model",
    "ClassificationArguments": "encoder_tasks.tasks.classification.args",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'encoder_tasks' has no attribute {name!r}")

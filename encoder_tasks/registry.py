"""Every task the toolkit knows, in one literal dict (grep finds everything).

A task module exposes the same names:
``Arguments`` (dataclass of task settings), ``PredictArguments``, ``prepare(splits, tokenizer,
task_args, data_args, metadata=None) -> Prepared``, ``build_model(encoder, head_kwargs)``,
``predict_file(predict_args)``, optionally ``after_training(trainer, prepared)``, ``Trainer``
(a subclass of :class:`~encoder_tasks.trainer.EncoderTaskTrainer`) and ``read_split`` (a
reader for formats of its own).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskSpec:
    name: str
    module: str
    summary: str

    def load(self):
        """Import the task module (lazily: the CLI starts fast and torch loads only when needed)."""
        return importlib.import_module(self.module)


TASKS: dict[str, TaskSpec] = {
    "classification": TaskSpec(
        "classification",
        "encoder_tasks.tasks.classification",
        "Single-label, multi-label and regression on one text or a pair of texts.",
    ),
    "pair": TaskSpec(
        "pair",
        "encoder_tasks.tasks.pair",
        "Cross-encoder: a label (paraphrase, NLI) or a similarity score for a pair of texts.",
    ),
    "embedding": TaskSpec(
        "embedding",
        "encoder_tasks.tasks.embedding",
        "Bi-encoder: text to vector (in-batch negatives, CoSENT); encode a corpus and retrieve from it.",
    ),
    "qa": TaskSpec(
        "qa",
        "encoder_tasks.tasks.qa",
        "Extractive question answering (SQuAD v1.1/v2.0, CMRC 2018): answer spans from a context.",
    ),
    "ner": TaskSpec(
        "ner",
        "encoder_tasks.tasks.ner",
        "Token tagging (NER, POS, slots): IOB1/IOB2/BIOES/BMES, softmax or CRF, English and Chinese.",
    ),
    "mlm": TaskSpec(
        "mlm",
        "encoder_tasks.tasks.mlm",
        "Masked-language-model pretraining: adapt an encoder to a domain, or pretrain one from scratch.",
    ),
}

"""A saved model of any task, loaded once, predicting on JSON inputs held in memory.

:class:`Predictor` is what the server (:mod:`encoder_tasks.serving`), the Ray engine
(:mod:`encoder_tasks.engines`) and Python code use: it loads a run directory (or an export, or
an int8 model) through the task's own loader, resolves ``predict``'s flags against the saved
settings exactly as ``<task> predict`` does, and answers lists of input records with the records
``predict`` writes (without ``line``), through :meth:`encoder_tasks.task.Task.predict_inputs`.

Example:
    >>> predictor = Predictor.load("runs/sst2")  # doctest: +SKIP
    >>> predictor([{"text": "a fine film"}])  # doctest: +SKIP
    [{'text': 'a fine film', 'label': 'pos', 'score': 0.97, 'probabilities': {...}}]
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from .errors import UserError
from .inputs import InputError, record_texts

logger = logging.getLogger(__name__)


def task_of(model_dir: str | Path) -> str:
    """The task a saved model was trained for; a folder without ``encoder_tasks.json`` that
    holds a sentence-transformers model or a bare encoder serves as an embedding model.

    Example:
        >>> task_of("runs/sst2")  # doctest: +SKIP
        'classification'
    """
    from .backbone import resolve_model_path
    from .settings import read_saved_settings

    path = resolve_model_path(str(model_dir))
    task_name, _ = read_saved_settings(path)
    if task_name is not None:
        return task_name
    if (Path(path) / "config.json").is_file():
        return "embedding"  # the embedding task loads any encoder (mean pooling) or ST folder
    raise UserError(f"{model_dir}: not a saved model (no encoder_tasks.json and no config.json)")


@dataclasses.dataclass
class Predictor:
    """One loaded model: ``predictor(records)`` checks and predicts; see the module docstring."""

    task: Any  # encoder_tasks.task.Task
    model: Any
    tokenizer: Any
    args: Any  # the task's PredictArguments, resolved against the saved settings
    model_dir: str

    @classmethod
    def load(cls, model_dir: str | Path, task: str | None = None, **flags: Any) -> Predictor:
        """Load ``model_dir``; ``flags`` are ``predict``'s flags (``batch_size=32``,
        ``precision="fp32"``, ``top_k=3``), unknown ones refused by name."""
        from .registry import TASKS

        task_name = task or task_of(model_dir)
        if task_name not in TASKS:
            raise UserError(f"unknown task {task_name!r}; choose one of: {', '.join(TASKS)}")
        task_obj = TASKS[task_name]
        known = {f.name for f in dataclasses.fields(task_obj.PredictArguments)}
        unknown = sorted(set(flags) - known)
        if unknown:
            raise UserError(
                f"{task_name} predict has no flag {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        args = task_obj.PredictArguments(model_dir=str(model_dir), **flags)
        # What is given wins over the saved settings, as a flag does on the command line.
        object.__setattr__(args, "given_fields", frozenset(flags))
        model, tokenizer = task_obj.load_for_inference(args, check=False)
        return cls(task_obj, model, tokenizer, args, str(model_dir))

    @property
    def settings(self):
        return self.model.settings

    def parse(self, records: Any, where: str = "inputs") -> list[dict[str, Any]]:
        """Check a list of JSON input records; the first bad one raises :class:`InputError`."""
        if not isinstance(records, list):
            raise InputError(where, f"expected a list of input objects, found {type(records).__name__}")
        return [self.task.parse_input(r, f"{where}[{i}]", self.settings) for i, r in enumerate(records)]

    def predict(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Records for inputs already checked by :meth:`parse` (input order)."""
        if not inputs:
            return []
        return self.task.predict_inputs(self.model, self.tokenizer, inputs, self.args)

    def __call__(self, records: Any) -> list[dict[str, Any]]:
        return self.predict(self.parse(records))

    def count_tokens(self, inputs: list[dict[str, Any]]) -> list[int]:
        """Tokens per input (all its texts, special tokens included): what a batch budget counts."""
        counts = []
        for record in inputs:
            texts = record_texts(record)
            ids = self.tokenizer(texts, add_special_tokens=True)["input_ids"] if texts else []
            counts.append(sum(len(x) for x in ids))
        return counts

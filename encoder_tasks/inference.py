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
from .saved import open_saved, task_named

logger = logging.getLogger(__name__)


def task_of(model_dir: str | Path) -> str:
    """The task a saved model was trained for; a folder without ``encoder_tasks.json`` that
    holds a sentence-transformers model or a bare encoder serves as an embedding model
    (:func:`encoder_tasks.saved.open_saved`).

    Example:
        >>> task_of("runs/sst2")  # doctest: +SKIP
        'classification'
    """
    return open_saved(model_dir).task.name


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
        task_obj = task_named(task) if task else open_saved(model_dir).task
        task_name = task_obj.name
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

    def predict(self, inputs: list[dict[str, Any]], **overrides: Any) -> list[dict[str, Any]]:
        """Records for inputs already checked by :meth:`parse` (input order); ``overrides``
        replace predict flags for this call only (``top_k=3``; see :meth:`check_overrides`)."""
        if not inputs:
            return []
        args = dataclasses.replace(self.args, **overrides) if overrides else self.args
        if overrides:  # replace() builds a new object: keep the record of what was given
            object.__setattr__(
                args, "given_fields", frozenset(getattr(self.args, "given_fields", ())) | set(overrides)
            )
        return self.task.predict_inputs(self.model, self.tokenizer, inputs, args)

    #: Flags a single call may not change: they fix the loaded model or how it was loaded.
    FIXED_FLAGS = frozenset(
        {
            "model_dir",
            "input_file",
            "output_file",
            "overwrite_output",
            "delimiter",
            "column_names",
            "encoding",
            "precision",
            "disable_tqdm",
            "batch_size",
            "engine",
            "backend",
        }
    )

    def _check_max_length(self, value: int, where: str) -> None:
        from .backbone import position_limit

        limit = position_limit(self.model.config) if hasattr(self.model, "config") else None
        if value < 8 or (limit is not None and value > limit):
            expected = f"8 to {limit}" if limit is not None else "at least 8"
            raise InputError(where, f"expected {expected} tokens (the encoder's positions), found {value}")

    #: Flags that say how to read an input file (no file is read here).
    FILE_FLAGS = frozenset({"question", "context", "input_format"})

    def check_overrides(self, overrides: Any, where: str = "parameters") -> dict[str, Any]:
        """Refuse per-call flags that do not exist, are fixed at load, or have the wrong type.

        Example:
            >>> Predictor.load("runs/qa").check_overrides({"top_k": "3"})  # doctest: +SKIP
            Traceback (most recent call last):
            ...
            encoder_tasks.inputs.InputError: parameters.top_k: expected an integer, found '3'
        """
        if not isinstance(overrides, dict):
            raise InputError(where, f"expected an object of predict flags, found {type(overrides).__name__}")
        fields = {f.name: f for f in dataclasses.fields(self.args)}
        # Columns and file formats describe files, not JSON inputs; the rest fix the loaded model.
        allowed = sorted(
            name
            for name in fields
            if name not in self.FIXED_FLAGS
            and name not in self.FILE_FLAGS
            and not name.endswith("_column")
            and not name.startswith("ray_")  # where a batch job runs, not how an input is read
        )
        checked = {}
        for name, value in overrides.items():
            if name not in allowed:
                raise InputError(
                    f"{where}.{name}", f"not a flag a request may set; expected one of {', '.join(allowed)}"
                )
            kind = _flag_type(fields[name])
            wrong = (
                (kind is bool and not isinstance(value, bool))
                or (kind is int and (isinstance(value, bool) or not isinstance(value, int)))
                or (kind is float and (isinstance(value, bool) or not isinstance(value, int | float)))
                or (kind is str and not isinstance(value, str))
            )
            if wrong:
                names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
                raise InputError(f"{where}.{name}", f"expected {names[kind]}, found {value!r}")
            checked[name] = value
        if "max_length" in checked:
            self._check_max_length(checked["max_length"], f"{where}.max_length")
        if checked:
            # The task's own checks (choices, ranges) run on the replaced arguments.
            try:
                dataclasses.replace(self.args, **checked)
            except UserError as error:
                raise InputError(where, str(error)) from None
        return checked

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


def _flag_type(field: dataclasses.Field) -> type:
    """The value type of a flag (``int | None`` -> ``int``), from its annotation."""
    annotation = str(field.type)
    for kind in (bool, int, float, str):
        if kind.__name__ in annotation.replace("None", "").split("|")[0].strip() or annotation.startswith(
            kind.__name__
        ):
            return kind
    return str

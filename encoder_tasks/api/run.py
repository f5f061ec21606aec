"""What the Python calls return: a trained :class:`Run`, and a loaded :class:`Model` that predicts.

Example:
    >>> run = Run.open("runs/sst2")  # doctest: +SKIP
    >>> run.task, run.metrics["eval_accuracy"]  # doctest: +SKIP
    ('classification', 0.91)
    >>> run.load().predict(["a fine film", "a dull film"])  # doctest: +SKIP
    [{'text': 'a fine film', 'label': 'pos', ...}, {'text': 'a dull film', 'label': 'neg', ...}]
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .inputs import to_records


class Model:
    """A saved run loaded for prediction: :meth:`predict` takes strings, records, a
    ``datasets.Dataset`` or a pandas DataFrame and returns the records ``<task> predict``
    writes (without ``line``). Built on :class:`encoder_tasks.inference.Predictor`
    (:attr:`predictor`), which the server and the Ray engine use too.
    """

    def __init__(self, predictor: Any):
        self.predictor = predictor

    @property
    def task(self) -> str:
        """The task's name (``"ner"``)."""
        return self.predictor.task.name

    @property
    def path(self) -> str:
        return self.predictor.model_dir

    @property
    def settings(self) -> Any:
        """The settings saved with the model (label names, columns, ``max_length``...)."""
        return self.predictor.settings

    @property
    def model(self) -> Any:
        """The torch module (an :class:`~encoder_tasks.heads.EncoderWithHead`, in eval mode)."""
        return self.predictor.model

    @property
    def tokenizer(self) -> Any:
        return self.predictor.tokenizer

    def predict(
        self, inputs: Any, *, columns: Mapping[str, str] | None = None, **flags: Any
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """Predict ``inputs``: one record for one input (a string, a ``(text, text_pair)``
        tuple, a dict), else a list in input order.

        Fields are the JSON input fields of the task (``text``, ``text_pair``, ``tokens``,
        ``question``, ``context``); ``columns`` maps other names (``{"sentence": "text"}``) and
        keeps only the columns it names. ``flags`` change predict flags for this call
        (``top_k=3``). A bad input raises :class:`encoder_tasks.inputs.InputError` naming it.
        """
        records, single = to_records(inputs, columns)
        overrides = self.predictor.check_overrides(flags, where="flags") if flags else {}
        results = self.predictor.predict(self.predictor.parse(records), **overrides)
        return results[0] if single else results

    __call__ = predict

    def __repr__(self) -> str:
        return f"<encoder_tasks.Model {self.task} from {self.path}>"


@dataclass
class Run:
    """A trained run: its directory, task and final metrics (``metrics.json``)."""

    path: Path
    task: str
    metrics: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, path: str | Path) -> Run:
        """The run saved in ``path`` (by :func:`encoder_tasks.train` or the CLI)."""
        from ..inference import task_of

        metrics_file = Path(path) / "metrics.json"
        metrics = json.loads(metrics_file.read_text(encoding="utf-8")) if metrics_file.is_file() else {}
        return cls(Path(path), task_of(path), metrics)

    def load(self, **flags: Any) -> Model:
        """The model, loaded for prediction (``flags``: ``predict``'s, e.g. ``batch_size=32``)."""
        from .actions import load

        return load(self.path, task=self.task, **flags)

    @property
    def model(self) -> Any:
        """The trained torch module, loaded from the run (:class:`~encoder_tasks.heads.EncoderWithHead`)."""
        from ..heads import EncoderWithHead

        return EncoderWithHead.from_pretrained(self.path)

    def evaluate(self, **settings: Any) -> dict[str, Any]:
        """:func:`encoder_tasks.evaluate` on this run."""
        from .actions import evaluate

        return evaluate(self.path, **settings)

    def export(self, dest: str | Path, format: str = "auto", **options: Any) -> dict[str, Any]:
        """:func:`encoder_tasks.export` of this run."""
        from .actions import export

        return export(self.path, dest, format, **options)

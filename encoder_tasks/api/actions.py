"""One call per action: train, evaluate, load, predict_file, export: the CLI's actions from Python,
and what they return: a trained :class:`Run`, and a loaded :class:`Model` that predicts.

Each call takes the CLI's flag names as keyword settings (and ``config=`` a recipe), parses them
with the CLI's own parser and runs the CLI's own code (:mod:`encoder_tasks.run`, the task's
``predict``, :func:`encoder_tasks.commands.export.export_model`), so a run made from Python and one made
by ``encoder-tasks <task> train`` with the same settings are the same run: the same files, the
same metrics for the same seed, the same predictions. Errors are
:class:`~encoder_tasks.errors.UserError` with the CLI's one-line message.

Data given as a ``datasets.Dataset``, a pandas DataFrame or a list of records (instead of a
path) is written to ``train.jsonl`` / ``validation.jsonl`` / ``test.jsonl`` in a temporary
folder the call owns and removes when it returns; ``run_config.json`` records that path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..log import report_like_the_cli
from .inputs import data_file, to_records

logger = logging.getLogger(__name__)

#: Settings that name data, and the file name in-memory data is written to.
DATA_SETTINGS = {"train_file": "train", "validation_file": "validation", "test_file": "test"}
#: predict's flags that name files: arguments of predict_file, not settings of a loaded model.
FILE_FLAGS = ("model_dir", "input_file", "output_file", "overwrite_output")


def _task(name: str):
    from ..saved import task_named

    return task_named(name)


@contextlib.contextmanager
def _data_files(settings: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``settings`` with in-memory data replaced by paths to JSON-lines files, removed on exit."""
    in_memory = [
        k for k in DATA_SETTINGS if settings.get(k) is not None and not isinstance(settings[k], str | Path)
    ]
    if not in_memory:
        yield settings
        return
    with tempfile.TemporaryDirectory(prefix="encoder-tasks-data-") as folder:
        out = dict(settings)
        for key in in_memory:
            out[key] = data_file(settings[key], Path(folder), DATA_SETTINGS[key], where=key)
        yield out


@contextlib.contextmanager
def _command(words: list[str]) -> Iterator[None]:
    """``sys.argv`` reads as the equivalent command line while the action runs: the run's
    ``run_config.json`` and model card record a command that repeats the run."""
    saved = sys.argv
    sys.argv = ["encoder-tasks", *words]
    try:
        yield
    finally:
        sys.argv = saved


def _training_types(task) -> list[type]:
    from ..config import DataArguments, ModelArguments
    from ..training_args import EncoderTrainingArguments

    return [ModelArguments, DataArguments, task.Arguments, EncoderTrainingArguments]


def train(task: str, *, config: str | Path | None = None, **settings: Any) -> Run:
    """Fine-tune a model, as ``encoder-tasks <task> train``; returns the :class:`Run`.

    ``settings`` are the CLI's flags by name (``model_name_or_path``, ``train_file``,
    ``output_dir``, ``crf=True``, ``num_train_epochs=1``...); ``config`` a recipe whose keys they
    override. ``train_file``/``validation_file``/``test_file`` may be paths, ``datasets.Dataset``s,
    pandas DataFrames or lists of records.

    Example:
        >>> run = train("ner", model_name_or_path="bert-base-cased", train_file="train.conll",
        ...             output_dir="runs/ner", crf=True)  # doctest: +SKIP
        >>> run.metrics["eval_f1"], run.load().predict("John lives in Paris")  # doctest: +SKIP
    """
    report_like_the_cli()
    from .. import run as runner

    task_obj = _task(task)
    with _data_files(settings) as resolved:
        types = _training_types(task_obj)
        argv, parsed = _parse(types, resolved, f"{task} train", config)
        with _command([task, "train", *argv]):
            metrics = runner.train(task, *parsed)
    return Run(Path(parsed[-1].output_dir), task, metrics)


def evaluate(run_dir: str | Path, *, config: str | Path | None = None, **settings: Any) -> dict[str, Any]:
    """Score a saved run on ``validation_file``, as ``encoder-tasks <task> evaluate``; returns
    the metrics (also written to ``<run_dir>/eval/<file>.json``, never overwritten).

    Settings left out take the values the model was trained with (``max_length``, columns).

    Example:
        >>> evaluate("runs/ner", validation_file="dev.conll")["eval_f1"]  # doctest: +SKIP
        0.91
    """
    report_like_the_cli()
    from .. import run as runner
    from ..inference import task_of

    if "model_name_or_path" in settings:
        raise UserError("evaluate: the run directory is the first argument; do not give model_name_or_path")
    task = task_of(run_dir)
    task_obj = _task(task)
    with _data_files({"model_name_or_path": str(run_dir), **settings}) as resolved:
        argv, parsed = _parse(_training_types(task_obj), resolved, f"{task} evaluate", config)
        with _command([task, "evaluate", *argv]):
            return runner.evaluate(task, *parsed)


def load(run_dir: str | Path, *, task: str | None = None, **flags: Any) -> Model:
    """Load a saved run for prediction; ``flags`` are ``predict``'s (``batch_size=32``,
    ``top_k=3``...). ``task`` is read from the run (a bare encoder loads as ``embedding``).

    Example:
        >>> model = load("runs/sst2")  # doctest: +SKIP
        >>> model.predict("a fine film")["label"]  # doctest: +SKIP
        'pos'
    """
    from ..inference import Predictor, task_of
    from .settings import check_names, setting_names

    report_like_the_cli()
    name = task or task_of(run_dir)
    task_obj = _task(name)
    # The run is the first argument; files are predict_file's.
    known = [n for n in setting_names([task_obj.PredictArguments]) if n not in FILE_FLAGS]
    check_names(flags, known, "load", f"encoder-tasks {name} predict")
    return Model(Predictor.load(run_dir, task=name, **flags))


def predict_file(
    run_dir: str | Path, input_file: str | Path, output_file: str | Path, **flags: Any
) -> dict[str, Any]:
    """Predict every input of a file into JSON lines, as ``encoder-tasks <task> predict``;
    returns the task's summary.

    Example:
        >>> predict_file("runs/sst2", "reviews.csv", "predictions.jsonl")  # doctest: +SKIP
    """
    from ..inference import task_of

    report_like_the_cli()
    task = task_of(run_dir)
    task_obj = _task(task)
    given = {
        "model_dir": str(run_dir),
        "input_file": str(input_file),
        "output_file": str(output_file),
        **flags,
    }
    argv, (args,) = _parse([task_obj.PredictArguments], given, f"{task} predict", None)
    with _command([task, "predict", *argv]):
        return task_obj.predict(args)


def export(
    run_dir: str | Path, dest: str | Path, format: str = "auto", *, opset: int = 17, overwrite: bool = False
) -> dict[str, Any]:
    """Export a run, as ``encoder-tasks export``: ``format`` is ``auto`` (the task's own layout,
    else stock transformers), ``transformers``, ``onnx`` or a task's layout
    (``sentence-transformers``). Returns what ``export_info.json`` records.

    Example:
        >>> export("runs/sst2", "exported/sst2", format="onnx")["format"]  # doctest: +SKIP
        'onnx'
    """
    from ..commands.export import export_model

    report_like_the_cli()
    return export_model(run_dir, dest, format, opset=opset, overwrite=overwrite)


def _parse(types, settings: Mapping[str, Any], action: str, config) -> tuple[list[str], tuple]:
    from .settings import parse

    return parse(types, settings, action, config, help_command=f"encoder-tasks {action}")


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
        return load(self.path, task=self.task, **flags)

    @property
    def model(self) -> Any:
        """The trained torch module, loaded from the run (:class:`~encoder_tasks.heads.EncoderWithHead`)."""
        from ..heads import EncoderWithHead

        return EncoderWithHead.from_pretrained(self.path)

    def evaluate(self, **settings: Any) -> dict[str, Any]:
        """:func:`encoder_tasks.evaluate` on this run."""
        return evaluate(self.path, **settings)

    def export(self, dest: str | Path, format: str = "auto", **options: Any) -> dict[str, Any]:
        """:func:`encoder_tasks.export` of this run."""
        return export(self.path, dest, format, **options)

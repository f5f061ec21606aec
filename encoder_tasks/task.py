"""The Task contract: every hook a task provides, each with its default.

A task is one package under ``encoder_tasks/tasks/`` that defines a subclass of :class:`Task`
and one instance of it, listed in :data:`encoder_tasks.registry.TASKS`. The shared code
(``run.py``, ``cli.py``, ``hpo.py``, ``predict.py``, ``export/``) calls only the hooks below; it
never probes a task for optional names and never imports a task's internals.

One run, hook by hook (``docs/architecture.md`` draws the same flow)::

    train:    prepare_model -> read_split (per file) -> derive_splits -> prepare -> build_model
              -> trainer_class(...).train() -> after_training -> save (settings in encoder_tasks.json)
    evaluate: load model + settings -> settings.resolve (flag > saved > default) -> read_split
              -> derive_splits -> prepare(saved=settings) -> trainer_class(...).evaluate()
    predict:  predict(args)  (built on encoder_tasks.predict: load, device, precision, read, write)
    distill:  train's flow with the teacher's settings; distiller() says what is distilled and how
    serve:    load_for_prediction -> parse_input (per JSON input) -> predict_inputs (micro-batches)
    ray:      input_settings -> input_format (per file) -> streamed rows, or read_input_split
              -> input_records -> (replicas) parse_input -> predict_inputs
    export:   stock_model(model) for the transformers layout; extra_layouts() for others

Every task package repeats the same file set: ``args.py`` (the user's settings and the saved
settings), ``model.py`` (the head), ``data.py`` (reading and tokenising), ``metrics.py``,
``predict.py``, plus files only that task needs; ``__init__.py`` holds the Task subclass, whose
hooks import the heavy modules when called so ``encoder-tasks --help`` starts without torch.

Example:
    >>> from encoder_tasks.registry import TASKS
    >>> task = TASKS["classification"]
    >>> isinstance(task, Task), task.name
    (True, 'classification')
    >>> task.Settings(label_names=["neg", "pos"], max_length=128).to_dict()["label_names"]
    ['neg', 'pos']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from .artifact import FILE_KEYS, SETTINGS_FORMAT, TaskSettings, load_settings, read_task_metadata
from .errors import UserError

# The settings schema and its file format live with the artifact (the bottom layer), so heads
# and exports read a saved model without the contract; they are named here too, for tasks.
__all__ = ["FILE_KEYS", "SETTINGS_FORMAT", "MetricsFunction", "Prepared", "Task", "TaskSettings"]

if TYPE_CHECKING:  # pragma: no cover
    from .data import Split
    from .heads import EncoderWithHead


class MetricsFunction(Protocol):
    """What every task's ``compute_metrics`` is: the Trainer's ``EvalPrediction`` in, flat
    ``{name: number}`` out (the Trainer prefixes ``eval_``)."""

    def __call__(self, eval_pred: Any) -> dict[str, float]: ...


@dataclass
class Prepared:
    """What :meth:`Task.prepare` hands to the shared loop (one type for every task)."""

    train: Any  # datasets.Dataset, or None when evaluating
    eval: Any  # datasets.Dataset, or None without evaluation data
    settings: TaskSettings
    #: ``pad_to_multiple_of -> collator``: the loop knows the padding multiple, the task the collator.
    collator: Callable[[int | None], Callable]
    compute_metrics: MetricsFunction | None = None
    #: Head inputs that matter for training only and are not saved (class weights).
    training_head: Mapping[str, Any] = field(default_factory=dict)


class Task:
    """Base class of every task; override what differs. Hooks without a default raise.

    Class attributes (data, so ``grep`` finds them):

    - ``name``, ``summary``: the CLI's task name and one-line help;
    - ``Arguments``: dataclass of the task's flags for train/evaluate/search (recipe keys);
    - ``PredictArguments``: dataclass of ``predict``'s flags (a subclass of
      :class:`encoder_tasks.config.PredictArguments`);
    - ``Settings``: the :class:`TaskSettings` subclass saved with the model;
    - ``objectives``: the evaluation metrics ``search`` optimises, most specific first;
    - ``onnx_outputs``: the ONNX graph's outputs, each with its dynamic axes;
    - ``auto_batch_size``: ``--auto_batch_size`` may lower the batch on small data (the batch
      only sets the optimiser's noise; not so where batches are each other's negatives, or
      for MLM's packed blocks). Why a task refuses ``--max_tokens_per_batch`` is its trainer's
      ``token_budget_refusal``.
    - ``narrow_learning_rate``: the peak rate the task's encoder trains at, where the user names
      none, for an encoder of MiniLM's width (384) or narrower; a wider encoder gets it scaled
      by 384 / width (BERT-base: half of it), never more (None: the training default, 5e-5).
      :func:`encoder_tasks.training_args.resolve_learning_rate` applies it.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Arguments: ClassVar[type] = object
    PredictArguments: ClassVar[type] = object
    Settings: ClassVar[type[TaskSettings]] = TaskSettings
    objectives: ClassVar[tuple[str, ...]] = ("eval_loss",)
    onnx_outputs: ClassVar[Mapping[str, tuple[str, ...]]] = {"logits": ("batch", "sequence")}
    auto_batch_size: ClassVar[bool] = False
    narrow_learning_rate: ClassVar[float | None] = None

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    # ---- data ------------------------------------------------------------------------------
    def read_split(self, path, delimiter="auto", column_names=None, encoding="utf-8", split=None):
        """Read one local file into a ``datasets.Dataset``; a task with formats of its own
        (CoNLL, SQuAD JSON, plain text) overrides it."""
        from .data import read_file

        return read_file(path, delimiter, column_names, encoding, split=split)

    def derive_splits(self, splits: dict[str, Split], task_args) -> dict[str, Split]:
        """Derive splits from the loaded ones, before any subsetting (QA holds out articles)."""
        return splits

    def hold_out(self, train: Split, fraction: float, task_args) -> tuple[Split, Split]:
        """``(kept, held)``: a validation split held out of ``train`` where a run needs one and
        none is given (``--early_stopping_patience``); rows by default, a task whose rows share
        a source overrides it (QA: whole articles)."""
        from .data.holdout import hold_out

        return hold_out(train, fraction)

    def prepare(
        self, splits: dict[str, Split], tokenizer, task_args, data_args, saved: TaskSettings | None = None
    ) -> Prepared:
        """Validate and tokenise ``splits``; ``saved`` (a saved model's settings) fixes the labels."""
        raise NotImplementedError(f"task {self.name!r} does not implement prepare")

    # ---- model -----------------------------------------------------------------------------
    def prepare_model(self, model_args, data_args, task_args, training_args) -> None:
        """Make the model the run starts from, if the task makes one (MLM ``--from_scratch``)."""

    def build_model(
        self, encoder, settings: TaskSettings, training: Mapping[str, Any] | None = None
    ) -> EncoderWithHead:
        """The head on ``encoder``, built from the saved settings (``training``: class weights...)."""
        raise NotImplementedError(f"task {self.name!r} does not implement build_model")

    def load_settings(self, metadata: Mapping[str, Any]) -> TaskSettings:
        """The typed settings from an ``encoder_tasks.json`` of any format version."""
        return load_settings(self.Settings, metadata)

    # ---- training --------------------------------------------------------------------------
    def trainer_class(self) -> type:
        """The :class:`~encoder_tasks.trainer.EncoderTaskTrainer` subclass the task trains with."""
        from .trainer import EncoderTaskTrainer

        return EncoderTaskTrainer

    def after_training(self, trainer, prepared: Prepared, task_args) -> dict[str, Any]:
        """Runs once training ends, before the final evaluation; may replace
        ``prepared.settings`` (tuned thresholds) and returns figures to report."""
        return {}

    # ---- use -------------------------------------------------------------------------------
    def evaluation_records(self, split, prepared: Prepared, predictions, label_ids) -> list[dict[str, Any]]:
        """``--write_predictions``: one record per example of the evaluation ``split`` (``input``,
        ``gold``, ``prediction``, ``correct``), from the evaluation loop's ``predictions`` and
        ``label_ids`` in dataset order (``prepared.compute_metrics`` has seen them)."""
        raise UserError(
            f"{self.name}: --write_predictions is not available for this task; `{self.name} predict` "
            "writes its predictions on any file"
        )

    def predict(self, args) -> dict[str, Any]:
        """``encoder-tasks <task> predict``: a saved model over ``args.input_file``, JSON lines out."""
        raise NotImplementedError(f"task {self.name!r} does not implement predict")

    def load_for_inference(self, args, check: bool = True):
        """``(model, tokenizer)`` for ``predict``, the server and Ray: the saved model on the
        inference device, ``args`` resolved against its settings (a task that also loads models
        it did not save overrides this: embedding)."""
        from .predict import load_for_prediction

        return load_for_prediction(args, self.name, check=check)

    def parse_input(self, record: Any, where: str, settings: TaskSettings) -> dict[str, Any]:
        """Check one input given as JSON (an HTTP request, a Ray row) against ``settings`` (a pair
        model needs ``text_pair``) and return it normalised. Raises
        :class:`encoder_tasks.inputs.InputError` naming ``where`` and the field
        (:mod:`encoder_tasks.inputs` holds the checks)."""
        raise NotImplementedError(f"task {self.name!r} does not implement parse_input")

    def predict_inputs(self, model, tokenizer, inputs: list[dict[str, Any]], args) -> list[dict[str, Any]]:
        """The in-memory core of ``predict``: inputs checked by :meth:`parse_input` in, one record
        per input out, in input order and in the shape ``predict`` writes (without ``line``).

        ``args`` is the task's ``PredictArguments`` resolved against the model (batch size,
        precision, the task's own flags). The server and the Ray engine call only this.
        """
        raise NotImplementedError(f"task {self.name!r} does not implement predict_inputs")

    def distiller(self):
        """What ``<task> distill`` makes the student match of the teacher's outputs, and how: an
        :class:`encoder_tasks.distillation.Distiller` (the task's ``distill.py``)."""
        raise UserError(f"{self.name}: distillation is not supported for this task")

    # ---- batch inference over files (``--engine ray``: :mod:`encoder_tasks.engines`) -----------
    def input_settings(self, args) -> TaskSettings | None:
        """Fill the file flags of ``args`` left unset (columns) from the saved settings, without
        loading the model (the driver of a Ray run reads files, the replicas hold the model);
        returns the saved settings, ``None`` for a model saved elsewhere."""
        from .backbone import resolve_model_path
        from .settings import resolve

        metadata = read_task_metadata(resolve_model_path(args.model_dir))
        settings = self.load_settings(metadata) if metadata is not None else None
        if settings is not None:
            resolve(args, settings)
        return settings

    def input_format(self, path, args) -> str | None:
        """How one input file streams, by the rows ``predict`` reads from it: ``"table"``
        (CSV/TSV, a header row), ``"jsonl"`` (one object per line) or ``"lines"`` (one text per
        non-blank line, as column ``text``); ``None`` for a format of the task's own, read whole
        on the driver by :meth:`read_input_split`."""
        from pathlib import Path

        from .data.readers import JSONL_SUFFIXES, TABLE_SUFFIXES

        suffix = Path(path).suffix.lower()
        if suffix in JSONL_SUFFIXES:
            return "jsonl"
        return "table" if suffix in TABLE_SUFFIXES or suffix == "" else None

    def input_records(
        self, split: Split, args, settings: TaskSettings | None, first_index: int = 0
    ) -> list[dict]:
        """The JSON input records (what :meth:`parse_input` checks) of the rows of ``split`` (rows
        of ``args.input_file`` with their ``_line``; ``first_index``: the first row's place in
        its file), read as ``predict`` reads them: the same columns, the same checks and messages."""
        raise UserError(
            f"{self.name}: --engine ray is not supported for this task (it reads no input records)"
        )

    def read_input_split(self, args, settings: TaskSettings | None) -> Split:
        """A whole ``args.input_file`` in a format of the task's own (:meth:`input_format` is
        ``None``: CoNLL, SQuAD JSON, a ``save_to_disk`` folder), read on the driver as ``predict``
        reads it; :meth:`input_records` makes its rows inputs."""
        from .data import Split

        return Split("predict", args.input_file, args.read_input(self.read_split))

    def extra_actions(self) -> dict[str, tuple[type, Callable[[Any], Any]]]:
        """Actions of the task's own, ``{"encode": (ArgumentsClass, function)}``; the shared
        actions (train, evaluate, predict, search) always win."""
        return {}

    def stock_model(self, model: EncoderWithHead):
        """The stock transformers model with the same weights (``export --format transformers``)."""
        raise UserError(f"{self.name}: no stock transformers layout for this task")

    def extra_layouts(self) -> dict[str, Callable[..., dict]]:
        """Export layouts of the task's own, ``{"sentence-transformers": export(run_dir, dest)}``."""
        return {}

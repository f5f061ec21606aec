"""``encoder-tasks <task> distill``: train a student on a teacher's outputs, through ``run.train``.

The action adds no training loop of its own. It checks the teacher, builds the student's
encoder (saved to a scratch folder with the teacher's tokenizer, so ``run.build_training`` loads
it like any starting model), and runs :func:`encoder_tasks.run.train` with the task wrapped in
:class:`DistillingTask`, which changes four hooks only:

- ``prepare``: the data is prepared with the teacher's saved settings (its labels, columns,
  ``max_length``, CRF...): the student's outputs must mean what the teacher's mean;
- ``build_model``: the student's head starts from the teacher's (:meth:`Distiller.init_student`);
- ``trainer_class``: the task's trainer with the teacher in its loss (:mod:`.trainer`);
- ``after_training``: records in the saved settings that the model was distilled, and from what.

So the result is an ordinary run directory: ``evaluate``, ``predict``, ``export``, ``quantize``
and ``serve`` work on it unchanged.

Example:
    >>> distill("classification", model_args, data_args, task_args, distill_args, training_args)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..task import Task

logger = logging.getLogger(__name__)

#: Key of the distillation record in a student's saved settings (``encoder_tasks.json``).
RECORD_KEY = "distillation"


class DistillingTask(Task):
    """``task`` with a teacher: the hooks named in the module docstring, the rest delegated."""

    def __init__(
        self, task: Task, teacher, distiller, options, record: dict, layer_map, unlabelled_split=None
    ):
        self.task, self.teacher, self.task_distiller, self.options = task, teacher, distiller, options
        self.record, self.layer_map, self.unlabelled_split = record, layer_map, unlabelled_split
        self.unlabelled = None
        self.name, self.summary = task.name, task.summary
        self.Arguments, self.PredictArguments, self.Settings = (
            task.Arguments,
            task.PredictArguments,
            task.Settings,
        )
        self.objectives, self.onnx_outputs = task.objectives, task.onnx_outputs

    def read_split(self, *args, **kwargs):
        return self.task.read_split(*args, **kwargs)

    def derive_splits(self, splits, task_args):
        return self.task.derive_splits(splits, task_args)

    def prepare(self, splits, tokenizer, task_args, data_args, saved=None):
        teacher = self.teacher.settings
        # The student's settings start as the teacher's, less what describes the teacher's own making.
        extra = {k: v for k, v in teacher.extra.items() if k != RECORD_KEY}
        settings = teacher.replace(lora=None, lora_merged=None, extra=extra)
        prepared = self.task.prepare(splits, tokenizer, task_args, data_args, saved=settings)
        self.task_distiller.bind(prepared.settings)
        if self.unlabelled_split is not None:
            extra = self.task_distiller.unlabelled_split(self.unlabelled_split, task_args, prepared.settings)
            self.unlabelled = self.task.prepare(
                {"train": extra}, tokenizer, task_args, data_args, saved=prepared.settings
            ).train
            logger.info(
                "%s: %d unlabelled rows, one batch of them per training step",
                extra.source,
                len(self.unlabelled),
            )
        return prepared

    def prepare_model(self, model_args, data_args, task_args, training_args) -> None:
        pass  # the student is made by distill(); MLM's --from_scratch does not apply

    def build_model(self, encoder, settings, training=None):
        model = self.task.build_model(encoder, settings, training)
        if training is not None:
            copied = self.task_distiller.init_student(model, self.teacher)
            logger.info("student head: %d tensors copied from the teacher", len(copied))
        return model

    def load_settings(self, metadata):
        return self.task.load_settings(metadata)

    def trainer_class(self) -> type:
        from .trainer import distillation_trainer

        return distillation_trainer(
            self.task.trainer_class(),
            teacher_model=self.teacher,
            distiller=self.task_distiller,
            options=self.options,
            layer_map=self.layer_map,
            unlabelled=self.unlabelled,
        )

    def after_training(self, trainer, prepared, task_args) -> dict[str, Any]:
        extra = self.task.after_training(trainer, prepared, task_args)
        cache = getattr(trainer, "teacher_cache", None)
        record = {
            **self.record,
            "teacher_cache": None if cache is None else {"used": bool(cache.enabled), "hits": cache.hits},
        }
        settings = prepared.settings
        prepared.settings = settings.replace(
            base_model=self.teacher.settings.base_model or self.record["teacher"],
            extra={**settings.extra, RECORD_KEY: record},
        )
        return extra

    # Everything else is the task's own.
    def predict(self, args):
        return self.task.predict(args)

    def parse_input(self, record, where, settings):
        return self.task.parse_input(record, where, settings)

    def predict_inputs(self, model, tokenizer, inputs, args):
        return self.task.predict_inputs(model, tokenizer, inputs, args)

    def stock_model(self, model):
        return self.task.stock_model(model)

    def extra_layouts(self):
        return self.task.extra_layouts()

    def distiller(self):
        return self.task_distiller


def load_teacher(task_name: str, path: str):
    """The teacher run, checked: it exists, it is a run of ``task_name``."""
    from ..artifact import read_task_metadata
    from ..heads import EncoderWithHead

    folder = Path(path)
    if not folder.is_dir():
        raise UserError(f"--teacher {path}: no such directory")
    metadata = read_task_metadata(folder)
    if metadata is None:
        raise UserError(f"--teacher {path}: not a run directory of encoder-tasks (no encoder_tasks.json)")
    if metadata.get("task") != task_name:
        raise UserError(
            f"--teacher {path} holds a {metadata.get('task')!r} model; distil it with "
            f"`encoder-tasks {metadata.get('task')} distill`"
        )
    return EncoderWithHead.from_pretrained(folder)


def build_student(
    teacher, teacher_dir: str, options, model_args, scratch: str
) -> tuple[dict, list[int] | None]:
    """Make the student's starting encoder and point ``model_args`` at it; returns
    ``(record, layer map)``: what the student is, and the teacher layer behind each of its layers."""
    from ..backbone import load_config, load_tokenizer
    from .students import choose_layers, layer_list, layer_subset, parse_layers, tokenizer_difference

    tokenizer = load_tokenizer(teacher_dir)
    total = teacher.encoder.config.num_hidden_layers
    if options.student_model:
        other = load_tokenizer(options.student_model, trust_remote_code=model_args.trust_remote_code)
        why = tokenizer_difference(tokenizer, other)
        if why is not None:
            raise UserError(
                f"--student_model {options.student_model}: its tokenizer differs from the teacher's ({why}); "
                "distillation needs the same tokenizer, because token-level outputs and logits over positions "
                "do not line up across tokenizers: not supported"
            )
        config = load_config(options.student_model, trust_remote_code=model_args.trust_remote_code)
        model_args.model_name_or_path = options.student_model
        model_args.tokenizer_name = teacher_dir
        layers = None
        depth = config.num_hidden_layers
        hidden_map = [round((k + 1) * total / depth) - 1 for k in range(depth)]
        if options.distill_hidden_weight > 0 and config.hidden_size != teacher.encoder.config.hidden_size:
            raise UserError(
                f"--distill_hidden_weight: the student's hidden size ({config.hidden_size}) differs from the "
                f"teacher's ({teacher.encoder.config.hidden_size}); layer outputs can only be matched at equal sizes"
            )
        student = {"student_model": options.student_model}
    else:
        if options.student_layers:
            layers = parse_layers(options.student_layers, total)
        else:
            layers = choose_layers(options.student_num_layers, total)
        layer_list(teacher.encoder)  # a family we cannot cut says so before any work
        encoder = layer_subset(teacher.encoder, layers)
        encoder.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        model_args.model_name_or_path = scratch
        model_args.tokenizer_name = None
        hidden_map = layers
        student = {"student_layers": layers}
        logger.info("student: layers %s of the teacher's %d, with its embeddings", layers, total)
    record = {
        "teacher": str(Path(teacher_dir).resolve()),
        "teacher_layers": total,
        **student,
        "temperature": options.distill_temperature,
        "alpha": options.distill_alpha,
        "hidden_weight": options.distill_hidden_weight,
        "unlabelled_file": options.unlabelled_file,
    }
    return record, hidden_map


def read_unlabelled(path: str, data_args):
    """``--unlabelled_file``: a ``.txt`` file is one text per line (column ``text``); anything
    else is read like a training file."""
    import datasets

    from ..data import Split, read_file
    from ..data.loading import resolve_data_path

    file = resolve_data_path(path, data_args.data_dir)
    if file.suffix.lower() == ".txt":
        if not file.is_file():
            raise UserError(f"--unlabelled_file {path}: no such file")
        lines = [
            (n, line.strip())
            for n, line in enumerate(file.read_text(encoding=data_args.encoding).splitlines(), 1)
        ]
        lines = [(n, text) for n, text in lines if text]
        dataset = datasets.Dataset.from_dict({"text": [t for _, t in lines], "_line": [n for n, _ in lines]})
    else:
        dataset = read_file(file, data_args.delimiter, None, data_args.encoding)
    if len(dataset) == 0:
        raise UserError(f"--unlabelled_file {path}: no text found")
    return Split("unlabelled", str(file), dataset)


def distill(task_name: str, model_args, data_args, task_args, options, training_args) -> dict:
    """Train a student of the ``--teacher`` run on ``task_name``; returns the final metrics."""
    from .. import run
    from ..saved import task_named
    from ..settings import resolve_all

    options.check()
    if "model_name_or_path" in getattr(model_args, "given_fields", ()):
        # A training recipe names its model; distill keeps the recipe's data and settings only.
        logger.warning(
            "--model_name_or_path %s is not used by distill: the student comes from --teacher (--student_layers, "
            "--student_num_layers) or --student_model",
            model_args.model_name_or_path,
        )
    task = task_named(task_name)
    distiller = task.distiller()
    teacher = load_teacher(task_name, options.teacher)
    # The teacher's settings fill every flag the user did not give (columns, max_length, labels...).
    resolve_all([data_args, task_args], teacher.settings)
    unlabelled = None
    if options.unlabelled_file:
        if not distiller.supports_unlabelled:
            raise UserError(
                f"{task_name}: --unlabelled_file is not supported: {distiller.no_unlabelled_reason}"
            )
        unlabelled = read_unlabelled(options.unlabelled_file, data_args)
    with tempfile.TemporaryDirectory(prefix="encoder-tasks-student-") as scratch:
        record, layer_map = build_student(teacher, options.teacher, options, model_args, scratch)
        wrapped = DistillingTask(task, teacher, distiller, options, record, layer_map, unlabelled)
        return run.train(wrapped, model_args, data_args, task_args, training_args)

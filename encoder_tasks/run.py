"""Train, evaluate and search through one trainer-building path.

Each task supplies its hooks (:class:`encoder_tasks.task.Task`); this module does the rest once:
output-directory checks, data loading, the model, the Trainer, resuming and the metrics files.
:func:`build_training` sets up a training run for both :func:`train` and
:func:`encoder_tasks.hpo.search`, and :func:`make_trainer` is the one place a Trainer is built
(train, evaluate and search), so the three cannot drift apart.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .data.writers import unique_path, write_json, write_jsonl
from .diagnosis import metric_tables, warn_if_learned_nothing
from .errors import UserError
from .outputs import check_free_space, check_output_dir, find_resume_checkpoint
from .task import Prepared, Task

logger = logging.getLogger(__name__)

#: Said once per run trained without validation data: nothing measures the model.
NO_VALIDATION = (
    "no validation data (--validation_file, or a dataset with a validation split): the model is "
    "not evaluated, and the final metrics are training's only; score it later with `evaluate`"
)

METRICS_FILE = "metrics.json"


def log_metrics(title: str, metrics: dict) -> None:
    """The numeric metrics as an aligned table, one record per line, then the per-label table."""
    flat = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    lines = [title] + [
        f"  {key:<40} {value:.4f}" if isinstance(value, float) else f"  {key:<40} {value}"
        for key, value in flat.items()
    ]
    lines += metric_tables(metrics)  # per label / per type, and NER's errors by kind
    logger.info("\n".join(lines))
    sys.stdout.flush()


# ---- data -------------------------------------------------------------------------------------
def load_task_splits(
    task: Task, data_args, task_args, required: tuple[str, ...], seed: int, holdout: float | None = None
) -> dict:
    """Read the task's splits, let the task derive more, hold out a validation split where
    ``holdout`` asks for one and none is given, then apply ``--max_*_samples``."""
    from .data import Split, load_splits

    splits = load_splits(data_args, reader=task.read_split, required=required)
    # Derived before any subsetting (QA holds out whole articles of the training file).
    splits = task.derive_splits(splits, task_args)
    out = dict(splits)
    if holdout and out.get("validation") is None and out.get("train") is not None:
        out["train"], out["validation"] = task.hold_out(out["train"], holdout, task_args)
        logger.info(
            "no validation data: %d of %s's rows held out to evaluate on (--holdout_fraction %g)",
            len(out["validation"].dataset),
            out["train"].source,
            holdout,
        )
    limits = {"train": (data_args.max_train_samples, True), "validation": (data_args.max_eval_samples, False)}
    for name, (limit, shuffle) in limits.items():
        split = out.get(name)
        if split is None or limit is None or limit >= len(split.dataset):
            continue
        dataset = split.dataset.shuffle(seed=seed) if shuffle else split.dataset
        out[name] = Split(split.name, split.source, dataset.select(range(limit)))
    return out


# ---- the one trainer --------------------------------------------------------------------------
def make_trainer(
    task: Task,
    training_args,
    prepared: Prepared,
    tokenizer,
    task_args,
    *,
    model=None,
    model_init: Callable | None = None,
    compute_metrics=None,
    callbacks=(),
):
    """The task's Trainer over ``prepared``: every action builds its Trainer here."""
    from .reporting.tracking import bars_hidden

    if bars_hidden() and "disable_tqdm" not in getattr(training_args, "given_fields", ()):
        # The Trainer's bars would fill a log file or a pipe with carriage returns.
        training_args.disable_tqdm = True
    return task.trainer_class()(
        model=model,
        model_init=model_init,
        args=training_args,
        train_dataset=prepared.train,
        eval_dataset=prepared.eval,
        data_collator=prepared.collator(training_args.pad_to_multiple_of),
        processing_class=tokenizer,
        compute_metrics=compute_metrics if compute_metrics is not None else prepared.compute_metrics,
        callbacks=list(callbacks),
        task_settings=prepared.settings,
        task_args=task_args,
        objectives=task.objectives,
    )


@dataclass
class TrainingSetup:
    """Everything a training run (or a search trial) starts from."""

    task: Task
    tokenizer: Any
    prepared: Prepared
    #: Builds a fresh model from the prepared settings; seeded by the caller.
    model_init: Callable[..., Any]


def fit_max_length(data_args, model_args) -> None:
    """Keep ``--max_length`` within the encoder's positions: the default is lowered to fit (the
    saved setting then fits every later ``predict`` and ``serve``); a value the user gave that
    does not fit is refused, before any work."""
    from .backbone import load_config, position_limit
    from .settings import given_fields

    limit = position_limit(
        load_config(model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code)
    )
    if limit is None or data_args.max_length <= limit:
        return
    if "max_length" in given_fields(data_args):
        raise UserError(
            f"--max_length {data_args.max_length} is longer than the {limit} positions of "
            f"{model_args.model_name_or_path}; choose at most {limit}"
        )
    logger.info("max_length %d -> %d: the encoder has %d positions", data_args.max_length, limit, limit)
    object.__setattr__(data_args, "max_length", limit)


def encoder_width(name_or_path: str, trust_remote_code: bool = False) -> int | None:
    """The hidden size of the encoder a run starts from (its ``config.json``; a run this
    toolkit saved keeps its encoder's there), or None where no config says."""
    from transformers import AutoConfig

    from .backbone import resolve_model_path

    try:
        config = AutoConfig.from_pretrained(
            resolve_model_path(name_or_path), trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError):
        return None
    return getattr(config, "hidden_size", None)


def build_training(task: Task, model_args, data_args, task_args, training_args) -> TrainingSetup:
    """Data, settings and the model factory of a training run: shared by train and search."""
    from transformers import set_seed

    from .adapters import apply_lora
    from .backbone import load_tokenizer
    from .heads import load_starting_encoder
    from .padding_free import configure_padding_free
    from .training_args import resolve_batch_size, resolve_learning_rate

    set_seed(training_args.seed)
    # A task may make the model it starts from (MLM --from_scratch) and point model_args at it.
    task.prepare_model(model_args, data_args, task_args, training_args)
    tokenizer = load_tokenizer(
        model_args.tokenizer_name or model_args.model_name_or_path,
        trust_remote_code=model_args.trust_remote_code,
    )
    fit_max_length(data_args, model_args)
    # --early_stopping_patience evaluates during training: on data held out when none is given.
    holdout = (
        training_args.holdout_fraction if getattr(training_args, "early_stopping_patience", None) else None
    )
    splits = load_task_splits(task, data_args, task_args, ("train",), training_args.seed, holdout)
    prepared = task.prepare(splits, tokenizer, task_args, data_args)
    if holdout and prepared.eval is None:
        raise UserError(f"--early_stopping_patience: the {task.name} task has no evaluation data to watch")
    prepared.settings = prepared.settings.replace(base_model=model_args.model_name_or_path)
    resolve_batch_size(  # --auto_batch_size
        training_args,
        task.name,
        len(prepared.train),
        auto_batch=task.auto_batch_size,
        token_budget_refusal=task.trainer_class().token_budget_refusal,
    )
    if task.narrow_learning_rate is not None:
        resolve_learning_rate(
            training_args,
            task.name,
            task.narrow_learning_rate,
            encoder_width(model_args.model_name_or_path, model_args.trust_remote_code),
        )

    def model_init(trial=None):
        encoder = load_starting_encoder(
            model_args.model_name_or_path,
            trust_remote_code=model_args.trust_remote_code,
            attn_implementation=model_args.attn_implementation,
        )
        model = task.build_model(encoder, prepared.settings, prepared.training_head)
        apply_lora(model, model_args)  # no-op unless --lora_r
        configure_padding_free(model, training_args)  # off unless safe (GPU + FlashAttention)
        # Training's own draws (dropout) start from the seed, whatever building the model drew:
        # `train`'s Trainer seeds again when it is created, after the model; a search trial's
        # Trainer seeds only before calling this.
        set_seed(training_args.seed)
        return model

    return TrainingSetup(task, tokenizer, prepared, model_init)


# ---- actions ----------------------------------------------------------------------------------
def train(task_name: str | Task, model_args, data_args, task_args, training_args) -> dict:
    """Fine-tune ``model_args.model_name_or_path`` on a task; returns the final metrics.

    Example:
        >>> from encoder_tasks.run import train  # doctest: +SKIP
        >>> train("classification", model_args, data_args, task_args, training_args)  # doctest: +SKIP

    ``task_name`` is a registered name or a :class:`~encoder_tasks.task.Task` object.
    """
    from transformers import set_seed

    from .adapters import merge_model_lora
    from .reporting.run_report import report_run
    from .reporting.tracking import PredictionRecorder
    from .reporting.training_log import JsonLinesLogger
    from .saved import task_named

    # A Task object trains as itself (distillation wraps the registered task's hooks).
    task = task_name if isinstance(task_name, Task) else task_named(task_name)
    task_name = task.name
    if data_args.write_predictions:
        raise UserError(
            f"--write_predictions is for evaluate: after training, run `encoder-tasks {task.name} evaluate "
            f"--model_name_or_path {training_args.output_dir} --validation_file FILE --write_predictions "
            f"{data_args.write_predictions}`"
        )
    check_output_dir(training_args)
    resume_from = find_resume_checkpoint(training_args) if training_args.resume else None
    setup = build_training(task, model_args, data_args, task_args, training_args)
    prepared = setup.prepared
    if prepared.eval is None:
        logger.info(NO_VALIDATION)
    set_seed(training_args.seed)  # the same RNG state a search trial's model_init sees
    model = setup.model_init()
    if training_args.should_save:
        # Only the processes that write measure the disk: on several machines with their own
        # disks, the others have no output directory (machine 0's first process writes the run;
        # with --save_on_each_node, each machine's first process keeps its own copy).
        check_free_space(training_args.output_dir, model, training_args)
    # Keeps the last evaluation's predictions for the plots (no extra pass over the data).
    recorder = PredictionRecorder(prepared.compute_metrics) if prepared.compute_metrics else None
    trainer = make_trainer(
        task,
        training_args,
        prepared,
        setup.tokenizer,
        task_args,
        model=model,
        compute_metrics=recorder,
        callbacks=[JsonLinesLogger()],
    )
    start = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=resume_from)
    metrics = {k if k.startswith("train_") else f"train_{k}": v for k, v in result.metrics.items()}
    if resume_from is not None:
        # transformers' train_loss covers the steps of this call only: say where it started.
        from .checkpoints import checkpoint_step

        metrics["train_resumed_from_step"] = checkpoint_step(resume_from)
    tokens = trainer.state.num_input_tokens_seen
    if tokens and result.metrics.get("train_runtime"):
        metrics["train_real_tokens_per_second"] = tokens / result.metrics["train_runtime"]
    if trainer.early_stopping is not None:
        metrics.update(trainer.early_stopping.summary())
    extra = task.after_training(trainer, prepared, task_args)
    # The task may have tuned its settings (thresholds): the model and trainer save those,
    # and the model keeps the record of its LoRA adapters (merged below).
    model.settings = trainer.task_settings = prepared.settings.replace(lora=model.settings.lora)
    if prepared.eval is not None:
        metrics.update(trainer.evaluate())
    metrics.update({f"tuned_{k}": v for k, v in extra.items()})
    metrics["wall_seconds"] = time.perf_counter() - start
    merge_model_lora(model)  # the final model is plain: it reloads and exports without peft
    trainer.save_model(training_args.output_dir)
    if trainer.is_world_process_zero():
        model_dir = Path(training_args.output_dir)
        write_json(model_dir / METRICS_FILE, metrics)
        write_json(
            model_dir / "run_config.json",
            {
                "task": task_name,
                "command": " ".join(sys.argv),
                "model_args": _plain(model_args),
                "data_args": _plain(data_args),
                "task_args": _plain(task_args),
            },
        )
        log_metrics(f"{task_name}: final metrics (saved to {model_dir / METRICS_FILE})", metrics)
        warn_if_learned_nothing(
            metrics, f"{task_name}: after training", trainer.state.global_step, training_args.learning_rate
        )
        report_run(
            model_dir, task_name, model, metrics, recorder, (model_args, data_args, task_args, training_args)
        )
    if training_args.should_save:
        done = finish_run_folder(
            Path(training_args.output_dir), keep_checkpoints=training_args.keep_checkpoints
        )
        logger.info(done["said"])
    return metrics


def _size(path: Path) -> int:
    return (
        sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        if path.is_dir()
        else path.stat().st_size
    )


def finish_run_folder(output_dir: Path, keep_checkpoints: bool = False) -> dict[str, Any]:
    """A finished run keeps its final model: the ``checkpoint-*`` folders (each with the optimizer
    state, twice the model's size with AdamW) are removed unless ``keep_checkpoints``. Returns the
    bytes kept and removed, and ``said``: the line saying so (the folder's size).

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> _ = (run / "model.safetensors").write_bytes(b"0" * 10)
        >>> (run / "checkpoint-2").mkdir(); _ = (run / "checkpoint-2" / "optimizer.pt").write_bytes(b"0" * 20)
        >>> done = finish_run_folder(run)
        >>> done["kept"], done["removed"], sorted(p.name for p in run.iterdir())
        (10, 20, ['model.safetensors'])
    """
    import shutil

    checkpoints = [p for p in output_dir.glob("checkpoint-*") if p.is_dir()]
    removed = 0
    if not keep_checkpoints:
        for folder in checkpoints:
            removed += _size(folder)
            shutil.rmtree(folder)
    kept = _size(output_dir)
    mib = 1024 * 1024
    model = sum(_size(p) for p in output_dir.glob("*.safetensors"))
    if removed:
        said = (
            f"run folder {output_dir}: {kept / mib:.1f} MiB (the model {model / mib:.1f} MiB); removed "
            f"{len(checkpoints)} checkpoint(s) with their optimizer state ({removed / mib:.1f} MiB): training "
            "finished, --keep_checkpoints keeps them"
        )
    else:
        held = sum(_size(p) for p in checkpoints)
        extra = f", checkpoints {held / mib:.1f} MiB" if checkpoints else ""
        said = f"run folder {output_dir}: {kept / mib:.1f} MiB (the model {model / mib:.1f} MiB{extra})"
    return {"kept": kept, "removed": removed, "said": said}


def evaluate(task_name: str, model_args, data_args, task_args, training_args) -> dict:
    """Score a saved model on ``--validation_file``; results go to ``<model>/eval/`` (never overwritten).

    Settings the user does not give (``max_length``, columns, window sizes...) are the ones the
    model was trained with (:mod:`encoder_tasks.settings`).
    """
    from .backbone import load_tokenizer, resolve_model_path
    from .heads import EncoderWithHead
    from .saved import task_named
    from .settings import resolve_all

    task = task_named(task_name)
    model_dir = resolve_model_path(model_args.model_name_or_path)
    model = EncoderWithHead.from_pretrained(model_dir)
    if model.task != task_name:
        raise UserError(
            f"{model_dir} holds a {model.task!r} model; use `encoder-tasks {model.task} evaluate`"
        )
    resolve_all([data_args, task_args], model.settings)
    if model.settings is not None and model.settings.get("quantization"):
        # An int8 model computes in fp32 around its int8 products, as predict runs it.
        training_args.bf16 = training_args.fp16 = False
    if model.settings is not None and model.settings.get("runtime"):
        # A graph written by `quantize --backend onnx`: evaluate scores that graph, as predict runs it.
        from .runtimes import apply_backend

        apply_backend(model, "auto", runtime=model.settings.get("runtime"), where=model_dir)
        training_args.bf16 = training_args.fp16 = False
    tokenizer = load_tokenizer(model_dir)
    splits = load_task_splits(task, data_args, task_args, ("validation",), training_args.seed)
    splits.pop("train", None)
    prepared = task.prepare(splits, tokenizer, task_args, data_args, saved=model.settings)
    written = Path(data_args.write_predictions) if data_args.write_predictions else None
    if written is not None and written.exists():
        raise UserError(f"--write_predictions {written}: the file exists; choose another name or remove it")
    recorder = None
    if written is not None:
        from .reporting.tracking import PredictionRecorder

        recorder = PredictionRecorder(prepared.compute_metrics)
    with tempfile.TemporaryDirectory(prefix="encoder-tasks-eval-") as scratch:
        training_args.output_dir = training_args.output_dir or scratch
        trainer = make_trainer(
            task, training_args, prepared, tokenizer, task_args, model=model, compute_metrics=recorder
        )
        trainer.sort_eval = written is None  # predictions in dataset order, one per row
        metrics = trainer.evaluate()
    if written is not None and trainer.is_world_process_zero():
        records = task.evaluation_records(
            splits["validation"], prepared, recorder.predictions, recorder.label_ids
        )
        write_jsonl(written, records)
        wrong = sum(1 for r in records if r.get("correct") is False)
        logger.info("wrote %d predictions (%d wrong) to %s", len(records), wrong, written)
    if trainer.is_world_process_zero():
        source = splits["validation"].source
        target = unique_path(Path(model_dir) / "eval" / f"{Path(source).stem or 'eval'}.json")
        write_json(target, {"data": source, **metrics})
        log_metrics(f"{task_name}: evaluation of {model_dir} on {source} (saved to {target})", metrics)
        warn_if_learned_nothing(metrics, f"{task_name}: evaluation of {model_dir}")
    return metrics


def _plain(args) -> dict:
    """An argument dataclass as JSON-able values (the record of what a run was given)."""
    return json.loads(json.dumps({k: v for k, v in vars(args).items() if k != "given_fields"}, default=str))

"""The shared train / evaluate flow every task goes through.

Each task supplies its arguments, preprocessing, head and metrics (see
:mod:`encoder_tasks.registry`); this module does the rest once: output-directory checks,
model loading, the Trainer, resuming, metrics files.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .errors import UserError

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"


WRITE_PROBE = ".write-test-"


def check_output_dir(args) -> None:
    """Refuse to clobber an earlier run; find an unwritable or full disk before training."""
    if not args.output_dir:
        raise UserError("--output_dir is required (where the model and metrics are written)")
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--output_dir {out}: exists and is a file, not a directory")
    if int(os.environ.get("RANK", "0")) != 0:
        # Under several processes only the main one checks (and writes): another rank would
        # see the main one's write probe and mistake the folder for an earlier run.
        return
    existing = (
        sorted(p.name for p in out.iterdir() if not p.name.startswith(WRITE_PROBE)) if out.is_dir() else []
    )
    if existing and not (args.overwrite_output_dir or args.resume):
        shown = ", ".join(existing[:5]) + (", ..." if len(existing) > 5 else "")
        raise UserError(
            f"--output_dir {out} already holds a run ({shown}); choose another --output_dir, "
            "pass --resume to continue it, or --overwrite_output_dir to replace it"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=WRITE_PROBE):
            pass
    except OSError as exc:
        raise UserError(f"--output_dir {out}: cannot write there ({exc.strerror or exc})") from None


def checkpoint_bytes(model, args=None) -> tuple[int, str]:
    """Disk bytes a run needs at its peak, and how that was counted.

    A checkpoint holds the weights plus AdamW's two moments (3x the weights); while the
    newest is written the older ones still exist, so with ``save_total_limit`` N the peak is
    N + 1 checkpoints, plus the final model.
    """
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    strategy = getattr(args, "save_strategy", "epoch")
    strategy = getattr(strategy, "value", strategy)  # an enum once TrainingArguments parsed it
    if strategy == "no":
        return weights + (50 << 20), "the final model"
    limit = getattr(args, "save_total_limit", None)
    count = limit + 1 if limit and limit > 0 else 2  # unlimited: at least two (and it grows)
    size = weights if getattr(args, "save_only_model", False) else 3 * weights
    needed = count * size + weights + (50 << 20)
    return needed, f"{count} checkpoints of {size >> 20} MiB + the final model"


def check_free_space(output_dir: str, model, args=None) -> None:
    """Refuse to start a run whose checkpoints cannot fit on the output directory's disk."""
    needed, how = checkpoint_bytes(model, args)
    free = shutil.disk_usage(output_dir).free
    if free < needed:
        raise UserError(
            f"--output_dir {output_dir}: {free >> 20} MiB free, the run needs about {needed >> 20} MiB "
            f"({how}); free space, choose another --output_dir or lower --save_total_limit"
        )


def find_resume_checkpoint(args) -> str:
    """The newest complete checkpoint in ``args.output_dir`` (half-written ones are skipped)."""
    from .checkpoints import last_complete_checkpoint, remove_leftovers

    if args.should_save:
        for name in remove_leftovers(args.output_dir):
            print(f"[encoder-tasks] removed {name}: a checkpoint whose save was interrupted")
    found = last_complete_checkpoint(args.output_dir)
    if found is None:
        raise UserError(
            f"--resume: no complete checkpoint-* folder in {args.output_dir} to resume from; "
            "drop --resume (and pass --overwrite_output_dir) to start again"
        )
    print(f"[encoder-tasks] resuming from {found}")
    return str(found)


def write_json(path: str | Path, data: dict) -> None:
    """Write JSON atomically (temporary name, then rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_jsonl(path: str | Path, records: list[dict]) -> None:
    """Write JSON lines atomically (temporary name, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def unique_path(path: Path) -> Path:
    """``path`` if free, else ``name-2.json``, ``name-3.json``...: results are never overwritten."""
    if not path.exists():
        return path
    for n in range(2, 10_000):
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise UserError(f"{path.parent}: too many result files")


def print_metrics(title: str, metrics: dict) -> None:
    flat = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    print(f"\n[encoder-tasks] {title}")
    for key, value in flat.items():
        print(f"  {key:<40} {value:.4f}" if isinstance(value, float) else f"  {key:<40} {value}")
    sys.stdout.flush()


def _load_data(task, data_args, required, task_args=None):
    from .data import load_splits

    reader = getattr(task, "read_split", None)
    splits = (
        load_splits(data_args, reader=reader, required=required)
        if reader
        else load_splits(data_args, required=required)
    )
    # A task may derive splits from the loaded ones before any subsetting (QA: hold out whole
    # articles of the training file as the evaluation set).
    derive = getattr(task, "derive_splits", None)
    return derive(splits, task_args) if derive is not None and task_args is not None else splits


def _subset(dataset, n, seed, shuffle):
    if dataset is None or n is None or n >= len(dataset):
        return dataset
    return dataset.shuffle(seed=seed).select(range(n)) if shuffle else dataset.select(range(n))


def _limit_splits(splits, data_args, seed):
    from .data import Split

    out = dict(splits)
    if "train" in out:
        s = out["train"]
        out["train"] = Split(s.name, s.source, _subset(s.dataset, data_args.max_train_samples, seed, True))
    if "validation" in out:
        s = out["validation"]
        out["validation"] = Split(
            s.name, s.source, _subset(s.dataset, data_args.max_eval_samples, seed, False)
        )
    return out


def _trainer_class(task):
    from .trainer import EncoderTaskTrainer

    return getattr(task, "Trainer", EncoderTaskTrainer)


def train(task_name: str, model_args, data_args, task_args, training_args) -> dict:
    """Fine-tune ``model_args.model_name_or_path`` on a task; returns the final metrics.

    Example:
        >>> from encoder_tasks.run import train  # doctest: +SKIP
        >>> train("classification", model_args, data_args, task_args, training_args)  # doctest: +SKIP
    """
    from transformers import set_seed

    from .adapters import apply_lora, merge_model_lora
    from .backbone import load_encoder, load_tokenizer
    from .padding_free import configure_padding_free
    from .registry import TASKS
    from .run_report import report_run
    from .tracking import JsonLinesLogger, PredictionRecorder
    from .training_args import resolve_batch_size

    task = TASKS[task_name].load()
    check_output_dir(training_args)
    resume_from = find_resume_checkpoint(training_args) if training_args.resume else None
    set_seed(training_args.seed)
    # A task may make the model it starts from (MLM --from_scratch: train a tokenizer, write a
    # fresh encoder) and point model_args at it.
    if hasattr(task, "prepare_model"):
        task.prepare_model(model_args, data_args, task_args, training_args)
    tokenizer = load_tokenizer(
        model_args.tokenizer_name or model_args.model_name_or_path,
        trust_remote_code=model_args.trust_remote_code,
    )
    splits = _limit_splits(_load_data(task, data_args, ("train",), task_args), data_args, training_args.seed)
    prepared = task.prepare(splits, tokenizer, task_args, data_args)
    resolve_batch_size(training_args, task_name, len(prepared.train))  # --auto_batch_size
    encoder = load_encoder(
        model_args.model_name_or_path,
        trust_remote_code=model_args.trust_remote_code,
        attn_implementation=getattr(model_args, "attn_implementation", None),
    )
    model = task.build_model(encoder, prepared.head_kwargs)
    model.metadata.update(prepared.metadata)
    model.metadata["base_model"] = model_args.model_name_or_path
    apply_lora(model, model_args)  # no-op unless --lora_r
    configure_padding_free(model, training_args)  # --padding_free: off unless safe (GPU + FlashAttention)
    check_free_space(training_args.output_dir, model, training_args)
    # Keeps the last evaluation's predictions for the plots (no extra pass over the data).
    recorder = PredictionRecorder(prepared.compute_metrics) if prepared.compute_metrics else None

    trainer = _trainer_class(task)(
        model=model,
        args=training_args,
        train_dataset=prepared.train,
        eval_dataset=prepared.eval,
        data_collator=prepared.collator(training_args.pad_to_multiple_of),
        processing_class=tokenizer,
        compute_metrics=recorder,
        callbacks=[JsonLinesLogger()],
    )
    start = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=resume_from)
    metrics = {f"train_{k}" if not k.startswith("train_") else k: v for k, v in result.metrics.items()}
    if resume_from is not None:
        # transformers' train_loss covers the steps of this call only: say where it started.
        from .checkpoints import checkpoint_step

        metrics["train_resumed_from_step"] = checkpoint_step(resume_from)
    tokens = trainer.state.num_input_tokens_seen
    if tokens and result.metrics.get("train_runtime"):
        metrics["train_real_tokens_per_second"] = tokens / result.metrics["train_runtime"]
    extra = task.after_training(trainer, prepared) if hasattr(task, "after_training") else {}
    model.metadata.update(prepared.metadata)
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
                "model_args": vars(model_args),
                "data_args": vars(data_args),
                "task_args": vars(task_args),
            },
        )
        print_metrics(f"{task_name}: final metrics (saved to {model_dir / METRICS_FILE})", metrics)
        report_run(
            model_dir, task_name, model, metrics, recorder, (model_args, data_args, task_args, training_args)
        )
    return metrics


def evaluate(task_name: str, model_args, data_args, task_args, training_args) -> dict:
    """Score a saved model on ``--validation_file``; results go to ``<model>/eval/`` (never overwritten)."""
    from .backbone import load_tokenizer, resolve_model_path
    from .heads import EncoderWithHead
    from .registry import TASKS

    task = TASKS[task_name].load()
    model_dir = resolve_model_path(model_args.model_name_or_path)
    model = EncoderWithHead.from_pretrained(model_dir)
    if model.task != task_name:
        raise UserError(
            f"{model_dir} holds a {model.task!r} model; use `encoder-tasks {model.task} evaluate`"
        )
    tokenizer = load_tokenizer(model_dir)
    splits = _limit_splits(
        _load_data(task, data_args, ("validation",), task_args), data_args, training_args.seed
    )
    splits.pop("train", None)
    prepared = task.prepare(splits, tokenizer, task_args, data_args, metadata=model.metadata)
    scratch = tempfile.mkdtemp(prefix="encoder-tasks-eval-")
    training_args.output_dir = training_args.output_dir or scratch
    trainer = _trainer_class(task)(
        model=model,
        args=training_args,
        eval_dataset=prepared.eval,
        data_collator=prepared.collator(training_args.pad_to_multiple_of),
        processing_class=tokenizer,
        compute_metrics=prepared.compute_metrics,
    )
    metrics = trainer.evaluate()
    shutil.rmtree(scratch, ignore_errors=True)
    if trainer.is_world_process_zero():
        source = splits["validation"].source
        target = unique_path(Path(model_dir) / "eval" / f"{Path(source).stem or 'eval'}.json")
        target.parent.mkdir(parents=True, exist_ok=True)
        write_json(target, {"data": source, **metrics})
        print_metrics(f"{task_name}: evaluation of {model_dir} on {source} (saved to {target})", metrics)
    return metrics

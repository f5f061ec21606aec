"""The quantization report: the task metric before and after, the speed of both, the sizes.

**Metric.** Both models are scored on the validation file by :func:`encoder_tasks.run.evaluate`,
the path of ``<task> evaluate``, with the same flags, in fp32 on the CPU (``--mixed_precision
no --use_cpu``): the report measures what int8 changes, not what bf16 changes. Each model is
evaluated from a temporary folder of links to its files, so the evaluation's own record
(``<model>/eval/*.json``) never lands in the source run or in ``DEST``. The metric compared is
``--metric`` or the task's own objective (:attr:`encoder_tasks.task.Task.objectives`).

**Speed.** Both models are timed on the same batches: the inputs of every call the fp32
evaluation made to its model, recorded as it ran (:func:`recorded_calls`: the Trainer's batches
at ``--batch_size``, QA windows, the embedding task's sentence batches, MLM blocks with their
fixed masks), replayed on each model: one warm-up pass, then ``--repeats`` timed passes, the
median kept. Only the model's forward passes are timed (no reading, tokenising or scoring), so
the figure is the model's own throughput on the file; ``benchmarks/bench_quantize.py`` times
the ``predict`` path end to end. ``--max_eval_samples N`` (an evaluate flag) bounds both.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "fp32").write_bytes(bytes(400)), (folder / "int8").write_bytes(bytes(110))
    >>> describe_sizes(folder / "fp32", folder / "int8")
    {'fp32_bytes': 400, 'int8_bytes': 110, 'ratio': 0.275}
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import UserError

logger = logging.getLogger(__name__)

#: The issue's targets: at most 1% relative loss of the task metric, at least 1.5x fp32 throughput.
MAX_RELATIVE_LOSS = 0.01
MIN_SPEEDUP = 1.5


def describe_sizes(fp32_file: Path, int8_file: Path) -> dict:
    """Sizes on disk of both weight files, and their ratio (int8 / fp32)."""
    fp32, int8 = Path(fp32_file).stat().st_size, Path(int8_file).stat().st_size
    return {"fp32_bytes": fp32, "int8_bytes": int8, "ratio": round(int8 / fp32, 4)}


@contextlib.contextmanager
def linked_copy(model_dir: str | Path) -> Iterator[str]:
    """A temporary folder of links to ``model_dir``'s files: evaluating it writes nothing there."""
    with tempfile.TemporaryDirectory(prefix="encoder-tasks-quantize-") as folder:
        for entry in Path(model_dir).iterdir():
            if entry.is_file():
                link = Path(folder) / entry.name
                try:
                    link.symlink_to(entry.resolve())
                except OSError:  # no symlinks here (some Windows setups): a copy does the same
                    shutil.copy2(entry, link)
        yield folder


def _arguments(task, model_dir, validation_file: str, flags: list[str], batch_size: int):
    """``<task> evaluate``'s arguments for ``model_dir``: the user's flags, then ours (which win)."""
    from ..config import DataArguments, ModelArguments, parse_args
    from ..training_args import EncoderTrainingArguments

    argv = [
        *flags,
        "--model_name_or_path",
        str(model_dir),
        "--validation_file",
        str(validation_file),
        "--per_device_eval_batch_size",
        str(batch_size),
        "--mixed_precision",
        "no",
        "--use_cpu",
        "true",
        "--report_to",
        "none",
    ]
    classes = [ModelArguments, DataArguments, task.Arguments, EncoderTrainingArguments]
    return parse_args(classes, argv, prog="encoder-tasks quantize")


@contextlib.contextmanager
def recorded_calls() -> Iterator[list[dict]]:
    """Record the inputs of every call of a task model (:class:`~encoder_tasks.heads.EncoderWithHead`)
    made inside the block: the evaluation's own batches, whatever the task evaluates with (the
    Trainer's loop, QA windows, the embedding task's encoding of sentences)."""
    from ..heads import EncoderWithHead

    calls: list[dict] = []
    own = EncoderWithHead.__dict__.get("__call__")
    inherited = EncoderWithHead.__call__

    def recording(module, *args, **kwargs):
        if not args:  # every evaluation calls its model with keyword inputs
            calls.append(dict(kwargs))
        return inherited(module, *args, **kwargs)

    EncoderWithHead.__call__ = recording
    try:
        yield calls
    finally:
        if own is None:
            del EncoderWithHead.__call__
        else:
            EncoderWithHead.__call__ = own


def _rows_and_tokens(calls: list[dict]) -> tuple[int, int]:
    rows = tokens = 0
    for call in calls:
        ids, mask = call.get("input_ids"), call.get("attention_mask")
        if ids is not None:
            rows += len(ids)
            tokens += int(mask.sum()) if mask is not None else ids.numel()
    return rows, tokens


def time_model(model, calls: list[dict], repeats: int) -> dict:
    """One warm-up pass over the recorded ``calls``, then ``repeats`` timed ones: the median and
    every pass's seconds."""
    import torch

    @torch.inference_mode()
    def one_pass() -> None:
        for call in calls:
            model(**call)

    one_pass()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        one_pass()
        seconds.append(time.perf_counter() - start)
    return {"seconds": statistics.median(seconds), "seconds_all": seconds}


def headline_metric(task, before: dict, after: dict, wanted: str | None) -> dict:
    """The compared metric: ``wanted`` or the task's objective, with its relative change."""
    from ..hpo import direction_for

    if wanted:
        name = wanted if wanted.startswith("eval_") else f"eval_{wanted}"
        if name not in before:
            found = sorted(k for k, v in before.items() if isinstance(v, (int, float)))
            raise UserError(f"quantize: --metric {wanted!r} is not among the evaluation metrics {found}")
    else:
        name = next((m for m in task.objectives if isinstance(before.get(m), (int, float))), "eval_loss")
    higher = direction_for(name, None) == "maximize"
    old, new = float(before[name]), float(after[name])
    change = (new - old) / abs(old) if old else 0.0
    loss = -change if higher else change  # how much worse, as a fraction of the fp32 figure
    return {
        "name": name,
        "before": old,
        "after": new,
        "relative_change": change,
        "higher_is_better": higher,
        "relative_loss": loss,
        "within_target": loss <= MAX_RELATIVE_LOSS,
    }


def evaluate_and_time(
    task_name: str,
    model_dir: str,
    int8_dir: Path,
    validation_file: str,
    flags: list[str],
    batch_size: int,
    repeats: int,
    metric: str | None,
) -> dict:
    """The ``metric``, ``metrics`` and ``speed`` parts of the report (see the module docstring)."""
    import torch

    from .. import run
    from ..heads import EncoderWithHead
    from ..saved import task_named

    task = task_named(task_name)
    metrics, calls = {}, []
    for name, folder in (("fp32", model_dir), ("int8", int8_dir)):
        logger.info("quantize: evaluating the %s model on %s", name, validation_file)
        with linked_copy(folder) as view, recorded_calls() as recorded:
            found = run.evaluate(task_name, *_arguments(task, view, validation_file, flags, batch_size))
        calls = calls or recorded  # the fp32 evaluation's batches: both models are timed on them
        metrics[name] = {k: v for k, v in found.items() if isinstance(v, (int, float))}
    inputs, tokens = _rows_and_tokens(calls)
    speed = {"batch_size": batch_size, "inputs": inputs, "real_tokens": tokens, "repeats": repeats}
    speed["threads"] = torch.get_num_threads()
    for name, folder in (("fp32", model_dir), ("int8", int8_dir)):
        logger.info("quantize: timing the %s model (%d inputs, %d passes)", name, inputs, repeats + 1)
        timed = time_model(EncoderWithHead.from_pretrained(folder).cpu(), calls, repeats)
        timed["inputs_per_second"] = inputs / timed["seconds"]
        timed["real_tokens_per_second"] = tokens / timed["seconds"]
        speed[name] = timed
    speed["speedup"] = speed["fp32"]["seconds"] / speed["int8"]["seconds"]
    speed["within_target"] = speed["speedup"] >= MIN_SPEEDUP
    return {
        "validation_file": str(validation_file),
        "metric": headline_metric(task, metrics["fp32"], metrics["int8"], metric),
        "metrics": metrics,
        "speed": speed,
        "targets": {"max_relative_metric_loss": MAX_RELATIVE_LOSS, "min_speedup": MIN_SPEEDUP},
    }


def table_lines(report: dict) -> list[str]:
    """The report as a few aligned lines (the log, the README): sizes, and with a validation file
    the metric and the speed. A report of an int8 graph (``--backend onnx|openvino``: it has a
    ``runtime`` record) sizes the encoder's graph, not the model's weights."""
    size = report["size"]
    lines = [f"{'':<22} {'fp32':>12} {'int8':>12} {'change':>10}"]
    if "runtime" in report:
        size_label, speed_label, digits = "encoder graph (MB)", "inputs/s (model)", 3
    else:
        size_label, speed_label = "weights (MB)", "inputs/s"
        digits = 1 if size["fp32_bytes"] >= 10e6 else 3
    lines.append(
        f"{size_label:<22} {size['fp32_bytes'] / 1e6:>12.{digits}f} {size['int8_bytes'] / 1e6:>12.{digits}f} "
        f"{size['ratio']:>9.2f}x"
    )
    if "metric" in report:
        m, s = report["metric"], report["speed"]
        lines.append(
            f"{m['name']:<22} {m['before']:>12.4f} {m['after']:>12.4f} {m['relative_change']:>+10.2%}"
        )
        lines.append(
            f"{speed_label:<22} {s['fp32']['inputs_per_second']:>12.1f} {s['int8']['inputs_per_second']:>12.1f} "
            f"{s['speedup']:>9.2f}x"
        )
    return lines


def log_report(report: dict) -> None:
    lines = [f"quantize: {report['source']} -> {report['dest']} ({report['task']})", *table_lines(report)]
    if "metric" in report:
        m, s = report["metric"], report["speed"]
        lines.append(
            f"targets: metric loss <= {MAX_RELATIVE_LOSS:.0%}: {'met' if m['within_target'] else 'MISSED'} "
            f"({m['relative_loss']:+.2%}); speed-up >= {MIN_SPEEDUP}x: "
            f"{'met' if s['within_target'] else 'MISSED'} ({s['speedup']:.2f}x, batch {s['batch_size']}, "
            f"{s['threads']} threads)"
        )
    logger.info("\n".join(lines))


def write_readme(path: Path, report: dict) -> None:
    """A short model card: what this is, how to use it, the report's figures (both ``quantize``
    paths: torch's dynamic int8 weights, and a ``runtime`` record's int8 graph)."""
    task = report["task"]
    title, about = _card_about(report)
    text = [
        title,
        "",
        about,
        "",
        *(["Use it as any run directory:", ""] if "runtime" not in report else []),
        "```bash",
        f"encoder-tasks {task} predict --model_dir . --input_file INPUTS --output_file predictions.jsonl",
        "encoder-tasks serve .",
        "```",
        "",
        "```text",
        *table_lines(report),
        "```",
        "",
        "`quantization_report.json` holds every figure; docs/quantization.md says how to read it.",
        "",
    ]
    path.write_text("\n".join(text), encoding="utf-8")


def _card_about(report: dict) -> tuple[str, str]:
    """The model card's title and the paragraph saying what was quantized and how."""
    task = report["task"]
    runtime = report.get("runtime")
    if runtime is None:
        layers = len(report["quantization"]["layers"])
        return f"# int8 {task} model", (
            f"The int8 copy of `{report['source']}`, written by `encoder-tasks quantize`: {layers} linear "
            "layers hold int8 weights (one scale per output channel) and quantize their inputs per batch "
            "as they run (dynamic quantization); embeddings, layer norms and everything else stay fp32. "
            "It runs on the CPU."
        )
    engine, graph = {
        "onnx": ("ONNX Runtime", "an ONNX graph"),
        "openvino": ("OpenVINO", "an OpenVINO graph"),
    }[runtime["backend"]]
    return f"# int8 {task} model ({engine})", (
        f"The int8 copy of `{report['source']}`, written by `encoder-tasks quantize --backend {runtime['backend']} "
        f"--method {runtime['method']}`: `{runtime['file']}` is the encoder as {graph} whose matrix products are "
        f"int8 ({runtime['quantized_nodes']} of them); encoder layers kept in fp32 by the metric guardrail: "
        f"{runtime['excluded_layers'] or 'none'}. The task's head and post-processing run in torch around it; "
        "`model.safetensors` keeps the fp32 weights (`--backend torch` runs them)."
    )

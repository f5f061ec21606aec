"""The model card (``README.md``) written into every training output directory.

It says what a reader of a run directory needs, in the Hub's model-card layout (YAML front
matter, then prose): base model, task and labels, training/evaluation data, the
hyperparameters that matter, the final metrics, the command that reproduces the run, how to
load and serve the model, and the files beside it (plots, logs).

Example:
    >>> import tempfile
    >>> out = tempfile.mkdtemp()
    >>> path = write_model_card(out, task="classification", metadata={"base_model": "bert-base-uncased"},
    ...                         metrics={"eval_accuracy": 0.9}, command=["encoder-tasks", "classification", "train"])
    >>> "eval_accuracy" in open(path).read()
    True
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

CARD_FILE = "README.md"

#: Training settings shown in the card (all of them are in ``run_config.json``).
HYPERPARAMETERS = (
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "max_tokens_per_batch",
    "gradient_accumulation_steps",
    "warmup_steps",
    "weight_decay",
    "lr_scheduler_type",
    "seed",
    "bf16",
    "fp16",
    "train_sampling_strategy",
)
DATA_KEYS = ("train_file", "validation_file", "test_file", "dataset_name", "dataset_config_name", "data_dir")
DATA_LIMITS = ("max_length", "max_train_samples", "max_eval_samples")


def reproduce_command(argv: list[str] | None = None) -> str:
    """The command line of this process as a user would type it (``encoder-tasks ...``)."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ""
    head = Path(argv[0]).name
    if head in ("encoder-tasks", "cli.py", "__main__.py") or argv[0].endswith("encoder_tasks/cli.py"):
        argv = ["encoder-tasks", *argv[1:]]
    return shlex.join(argv)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _flat_metrics(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _per_class(metrics: dict) -> dict:
    for key in ("eval_per_class", "eval_per_type", "per_class", "per_type"):
        value = metrics.get(key)
        if isinstance(value, dict) and value:
            return value
    return {}


def _tuned_notes(metadata: dict, metrics: dict) -> list[str]:
    """Settings tuned on the evaluation data after training (saved as ``<name>_tuned_on``):
    which data, and that scores with them on that same data are optimistic.

    Example:
        >>> record = {"path": "/d/dev.json", "sha256": "ab" * 32}
        >>> (note,) = _tuned_notes({"null_threshold": -1.5, "null_threshold_tuned_on": record}, {})
        >>> note[:52]
        '- `null_threshold` (-1.5) was tuned on `/d/dev.json`'
        >>> "optimistic" in note
        True
    """
    notes = []
    for key, record in metadata.items():
        if not key.endswith("_tuned_on") or not isinstance(record, dict):
            continue
        name = key[: -len("_tuned_on")]
        value = metadata.get(name)
        shown = f" ({_fmt(value)})" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
        digest = f" (sha256 `{record['sha256'][:12]}`)" if record.get("sha256") else ""
        notes.append(
            f"- `{name}`{shown} was tuned on `{record.get('path')}`{digest} after training: scores computed "
            "with it on that same data (`tuned_*`, `best_*`) are optimistic. `predict` and `evaluate` use it; "
            "`evaluate` warns when given that same data."
        )
    if notes and isinstance(metrics.get("tuned_note"), str):
        notes.append(f"- {metrics['tuned_note']}.")
    return notes


def render_model_card(
    task: str,
    metadata: dict,
    metrics: dict,
    command: list[str] | str | None = None,
    model_args: dict | None = None,
    data_args: dict | None = None,
    task_args: dict | None = None,
    training_args: dict | None = None,
    files: list[str] | None = None,
    name: str | None = None,
) -> str:
    """The card as Markdown text (see :func:`write_model_card`)."""
    model_args, data_args = model_args or {}, data_args or {}
    task_args, training_args = task_args or {}, training_args or {}
    base = metadata.get("base_model") or model_args.get("model_name_or_path") or "unknown"
    datasets = [data_args[k] for k in ("dataset_name",) if data_args.get(k)]
    command = command if isinstance(command, str) else reproduce_command(command)
    flat = _flat_metrics(metrics)
    lines = [
        "---",
        "library_name: encoder-tasks",
        f"base_model: {base}",
        "tags:",
        "- encoder-tasks",
        f"- {task}",
    ]
    if datasets:
        lines += ["datasets:"] + [f"- {d}" for d in datasets]
    lines += ["---", "", f"# {name or task + ' model'}", ""]
    lines += [
        f"A **{task}** model fine-tuned from `{base}` with encoder-tasks (the encoder plus a small task head).",
        "",
    ]
    labels = metadata.get("label_names")
    if labels:
        shown = ", ".join(f"`{label}`" for label in labels[:30]) + (" ..." if len(labels) > 30 else "")
        lines += [f"Labels ({len(labels)}): {shown}", ""]
    if metadata.get("problem_type"):
        lines += [f"Problem type: `{metadata['problem_type']}`", ""]
    if metadata.get("lora_merged"):
        lines += [
            f"Trained with LoRA adapters ({metadata['lora_merged']}), merged into the weights on save.",
            "",
        ]

    lines += ["## Data", ""]
    rows = [(k, data_args[k]) for k in DATA_KEYS if data_args.get(k)]
    rows += [(k, data_args[k]) for k in DATA_LIMITS if data_args.get(k) is not None]
    lines += _table(["setting", "value"], rows) if rows else ["(not recorded)"]
    lines += [""]

    lines += ["## Training hyperparameters", ""]
    rows = [(k, training_args[k]) for k in HYPERPARAMETERS if k in training_args]
    rows += [(f"task: {k}", v) for k, v in task_args.items() if v is not None and not str(k).startswith("_")]
    rows += [(k, v) for k, v in model_args.items() if str(k).startswith("lora_") and v]
    lines += _table(["setting", "value"], rows) if rows else ["(not recorded)"]
    lines += [""]

    lines += ["## Results", ""]
    if flat:
        lines += _table(["metric", "value"], [(k, _fmt(v)) for k, v in flat.items()])
    else:
        lines += ["No evaluation data was given, so there are no metrics."]
    per_class = _per_class(metrics)
    if per_class:
        keys = [
            k
            for k in ("precision", "recall", "f1-score", "f1", "support")
            if k in next(iter(per_class.values()))
        ]
        lines += ["", "Per class:", ""]
        lines += _table(
            ["class", *keys],
            [
                (name, *(_fmt(scores.get(k)) for k in keys))
                for name, scores in per_class.items()
                if isinstance(scores, dict)
            ],
        )
    tuned = _tuned_notes(metadata, metrics)
    if tuned:
        lines += ["", "Tuned on the evaluation data:", "", *tuned]
    lines += [""]

    lines += ["## Reproduce", "", "```bash", command or "(command not recorded)", "```", ""]
    lines += [
        "Every resolved setting is in `run_config.json`; the training log is `log.jsonl`.",
        "",
        "## Use",
        "",
        "```bash",
        f"encoder-tasks {task} predict --model_dir <this directory> --input_file inputs.csv --output_file preds.jsonl",
        f"encoder-tasks {task} evaluate --model_name_or_path <this directory> --validation_file other.csv",
        "encoder-tasks export <this directory> <dest>            # stock transformers / sentence-transformers layout",
        "encoder-tasks export <this directory> <dest> --format onnx",
        "```",
        "",
        "```python",
        "from encoder_tasks import EncoderWithHead",
        'model = EncoderWithHead.from_pretrained("<this directory>")',
        "```",
        "",
    ]
    if files:
        lines += ["## Files", ""] + [f"- `{f}`" for f in files] + [""]
    return "\n".join(lines)


def _table(header: list[str], rows) -> list[str]:
    def cell(v):
        return str(v).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out


def write_model_card(output_dir: str | os.PathLike, **kwargs) -> Path:
    """Render the card (keyword arguments of :func:`render_model_card`) to ``output_dir/README.md``."""
    output_dir = Path(output_dir)
    if kwargs.get("files") is None:
        kwargs["files"] = sorted(
            p.name
            for p in output_dir.iterdir()
            if p.is_file() and not p.name.startswith(".") and p.name != CARD_FILE
        ) + sorted(f"{p.name}/" for p in output_dir.iterdir() if p.is_dir())
    path = output_dir / CARD_FILE
    tmp = path.with_name(f".{CARD_FILE}.tmp")
    tmp.write_text(render_model_card(**kwargs), encoding="utf-8")
    os.replace(tmp, path)
    return path

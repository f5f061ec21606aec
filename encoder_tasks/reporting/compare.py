"""Evaluate one saved model on several datasets in one call, with a side-by-side table.

    encoder-tasks classification evaluate --model_name_or_path runs/sst2 \\
        --validation_file dev.tsv other.csv hard.jsonl

Each file is scored by the task's usual ``evaluate`` (results in ``<model>/eval/<file>.json``
as for one file); the table (rows: metrics, columns: files) is printed and written to
``<model>/eval/comparison.md`` and ``comparison.json`` (never overwritten).

Example:
    >>> split_files(["--model_name_or_path", "m", "--validation_file", "a.csv", "b.csv", "--seed", "1"])
    (['a.csv', 'b.csv'], ['--model_name_or_path', 'm', '--seed', '1'])
"""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)

FLAG = "--validation_file"


def split_files(flags: list[str]) -> tuple[list[str], list[str]]:
    """The values after ``--validation_file`` (up to the next flag) and the other flags."""
    if FLAG not in flags:
        return [], list(flags)
    at = flags.index(FLAG)
    end = at + 1
    while end < len(flags) and not flags[end].startswith("--"):
        end += 1
    return flags[at + 1 : end], flags[:at] + flags[end:]


def comparison_table(results: dict[str, dict]) -> list[list[str]]:
    """Rows ``[metric, value per file]`` for every numeric metric any file reports."""
    names: list[str] = []
    for metrics in results.values():
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in names:
                if not key.endswith(("_runtime", "_per_second")):
                    names.append(key)
    rows = []
    for name in names:
        row = [name]
        for metrics in results.values():
            value = metrics.get(name)
            row.append(f"{value:.4f}" if isinstance(value, float) else ("-" if value is None else str(value)))
        rows.append(row)
    return rows


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def evaluate_many(task_name: str, files: list[str], flags: list[str], prog: str) -> dict[str, dict]:
    """Run ``evaluate`` once per file; print and save the side-by-side table."""
    import copy

    from .. import run
    from ..backbone import resolve_model_path
    from ..config import DataArguments, ModelArguments, parse_args
    from ..data.writers import unique_path, write_json
    from ..saved import task_named
    from ..training_args import EncoderTrainingArguments

    task = task_named(task_name)
    results: dict[str, dict] = {}
    parsed = parse_args(
        [ModelArguments, DataArguments, task.Arguments, EncoderTrainingArguments], flags, prog=prog
    )
    model_args = parsed[0]
    for file in files:
        model_args_i, data_args, task_args, training_args = (copy.deepcopy(p) for p in parsed)
        data_args.validation_file = file
        results[file] = run.evaluate(task_name, model_args_i, data_args, task_args, training_args)
    header = ["metric", *[Path(f).name for f in files]]
    rows = comparison_table(results)
    text = markdown(header, rows)
    widths = [
        max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i])
        for i in range(len(header))
    ]
    table = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    table += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    logger.info("side by side\n%s", "\n".join(table))
    out_dir = Path(resolve_model_path(model_args.model_name_or_path)) / "eval"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = unique_path(out_dir / "comparison.md")
    target.write_text(text, encoding="utf-8")
    write_json(target.with_suffix(".json"), {"files": files, "results": results})
    logger.info("table saved to %s", target)
    return results

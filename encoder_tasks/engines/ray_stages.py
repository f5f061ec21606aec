"""The stages of a Ray run that execute in Ray's workers: file rows to inputs, inputs to predictions.

- :func:`to_inputs` runs in the read tasks (Ray fuses it with reading): a block of file rows
  becomes the task's JSON input records (:meth:`encoder_tasks.task.Task.input_records`, the same
  columns and checks as ``predict``) and the fields written before each prediction (``line``,
  plus ``file`` when the input is several files; ``id`` for ``encode``).
- :class:`Replica` is one actor of the pool: it loads the model once
  (:class:`encoder_tasks.inference.Predictor`), checks each record
  (:meth:`~encoder_tasks.task.Task.parse_input`, the failing row named by file and line) and
  predicts a batch with :meth:`~encoder_tasks.inference.Predictor.predict`.

Rows travel as Arrow columns of JSON text (``input``, ``lead``), so records of any shape pass.

Example:
    >>> import datasets
    >>> from encoder_tasks.data import Split
    >>> from encoder_tasks.registry import TASKS
    >>> mlm = TASKS["mlm"]
    >>> split = Split("predict", "in.jsonl", datasets.Dataset.from_dict({"text": ["a [MASK]"], "_line": [3]}))
    >>> columns = input_columns(mlm, mlm.PredictArguments(text_column="text"), None, split)
    >>> columns["input"], columns["lead"]
    (['{"text": "a [MASK]"}'], ['{"line": 3}'])
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

from ..data import AFTER_COLUMN, LINE_COLUMN, Split, resolve_column
from ..data.readers import row_location, rows_to_dataset
from ..errors import UserError


def _ids(split: Split, args, lines: list, first_index: int, prefix: str | None) -> list[str]:
    """``encode``'s ids: ``--id_column``, else the line (the row number where there is none),
    prefixed by the file when the input is several files."""
    if args.id_column:
        return [str(v) for v in split.dataset[resolve_column(split, args.id_column, "id")]]
    numbers = [str(line) if line is not None else str(first_index + i + 1) for i, line in enumerate(lines)]
    return [f"{prefix}:{n}" for n in numbers] if prefix else numbers


def input_columns(
    task, args, settings, split: Split, first_index: int = 0, several: bool = False, ids: bool = False
) -> dict[str, list]:
    """The columns the replicas read for the rows of ``split`` (one file's rows, in order);
    ``ids``: ``encode``'s ids lead each record instead of the line."""
    records = task.input_records(split, args, settings, first_index)
    count = len(records)
    names = split.dataset.column_names
    lines = list(split.dataset[LINE_COLUMN]) if LINE_COLUMN in names else [None] * count
    if ids:
        leads = [{"id": i} for i in _ids(split, args, lines, first_index, split.source if several else None)]
    else:
        leads = [{"file": split.source, "line": line} if several else {"line": line} for line in lines]
    if AFTER_COLUMN in names:  # fields of the input written after its prediction (NER's gold tags)
        for lead, after in zip(leads, split.dataset[AFTER_COLUMN]):
            lead[AFTER_COLUMN] = json.loads(after) if after else {}
    return {
        "file": [split.source] * count,
        "line": lines,
        "index": list(range(first_index, first_index + count)),
        "input": [json.dumps(r, ensure_ascii=False) for r in records],
        "lead": [json.dumps(lead, ensure_ascii=False) for lead in leads],
    }


def to_table(columns: dict[str, list]):
    import pyarrow as pa

    return pa.table({**columns, "line": pa.array(columns["line"], pa.int64())})


def to_inputs(batch, task, args, settings, several: bool, ids: bool):
    """A block of rows streamed from files (:mod:`.ray_files`) as the replicas' input columns."""
    merged: dict[str, list] = {}
    for shown, group in itertools.groupby(batch.to_pylist(), key=lambda r: r["file"]):
        group = list(group)
        rows = [{**json.loads(r["row"]), LINE_COLUMN: r["line"]} for r in group]
        split = Split("predict", shown, rows_to_dataset(rows, shown))
        columns = input_columns(task, args, settings, split, group[0]["index"], several, ids)
        for name, values in columns.items():
            merged.setdefault(name, []).extend(values)
    return to_table(merged)


class Replica:
    """One model replica of the actor pool: loads the model once, then predicts batch after batch."""

    def __init__(
        self, model_dir: str, task_name: str, flags: dict[str, Any], vectors: bool = False, gpus: float = 0
    ):
        from ..inference import Predictor

        if not gpus:  # Ray hides no GPU from a replica that reserved none: keep it off them
            os.environ["ENCODER_TASKS_DEVICE"] = "cpu"
        self.predictor = Predictor.load(model_dir, task=task_name, **flags)
        self.vectors = vectors

    def __call__(self, batch):
        import pyarrow as pa

        rows = batch.to_pylist()
        task, settings = self.predictor.task, self.predictor.settings
        inputs = []
        for row in rows:
            where = row_location(row["file"], row["line"], row["index"])
            try:
                inputs.append(task.parse_input(json.loads(row["input"]), where, settings))
            except UserError as error:  # a plain UserError: it crosses back to the driver intact
                raise UserError(str(error)) from None
        predictions = self.predictor.predict(inputs)
        leads = [json.loads(row["lead"]) for row in rows]
        afters = [lead.pop(AFTER_COLUMN, {}) for lead in leads]
        if not self.vectors:
            lines = [
                json.dumps({**lead, **p, **after}, ensure_ascii=False)
                for lead, p, after in zip(leads, predictions, afters)
            ]
            return pa.table({"json": lines})
        normalized = bool(settings.get("normalize", True)) if settings is not None else True
        return pa.table(
            {
                "id": [lead["id"] for lead in leads],
                "embedding": pa.array([p["embedding"] for p in predictions], pa.list_(pa.float32())),
                "normalized": [normalized] * len(rows),
            }
        )

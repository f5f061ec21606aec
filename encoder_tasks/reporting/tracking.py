"""Training, seen: metrics as JSON lines, the last evaluation's predictions, progress bars.

- :class:`~encoder_tasks.reporting.training_log.JsonLinesLogger` (a module of its own: it is a
  transformers ``TrainerCallback``, and ``predict``'s progress bars must not import the Trainer)
  appends every Trainer log (loss, learning rate, eval metrics) to ``<output_dir>/log.jsonl``, one JSON object per line, readable while the run goes on
  (``tail -f``) and by :mod:`encoder_tasks.reporting.plots` afterwards. TensorBoard, W&B, MLflow...
  are the Trainer's own integrations: ``--report_to tensorboard`` (with the ``tensorboard``
  extra installed) writes event files under ``<output_dir>/runs``.
- :class:`PredictionRecorder` wraps a task's ``compute_metrics`` and keeps the last
  evaluation's predictions, so plots (confusion matrix, score distribution) cost no extra
  pass over the data.
- :func:`progress` is tqdm for the toolkit's own long loops (prediction over files,
  encoding): hidden when stderr is not a terminal or when asked (``--disable_tqdm``).

Example:
    >>> rows = list(progress(range(3), desc="demo", disable=True))
    >>> rows
    [0, 1, 2]
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np

LOG_FILE = "log.jsonl"
PREDICTIONS_FILE = "eval_predictions.npz"
# Predictions bigger than this (token-level logits of a large set) are not kept on disk.
MAX_SAVED_VALUES = 2_000_000


def _jsonable(value):
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def read_log(run_dir: str | os.PathLike) -> list[dict]:
    """The records of ``log.jsonl`` (or, for runs without one, ``trainer_state.json``'s history)."""
    run_dir = Path(run_dir)
    log = run_dir / LOG_FILE
    if log.is_file():
        records = []
        for line in log.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by a kill mid-write
        return records
    states = sorted(run_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: p.stat().st_mtime)
    for state in [run_dir / "trainer_state.json", *reversed(states)]:
        if state.is_file():
            return json.loads(state.read_text(encoding="utf-8")).get("log_history", [])
    return []


class PredictionRecorder:
    """``compute_metrics`` wrapper that keeps the last evaluation's predictions and labels.

    Example:
        >>> from transformers import EvalPrediction
        >>> rec = PredictionRecorder(lambda p: {"n": len(p.label_ids)})
        >>> rec(EvalPrediction(predictions=np.zeros((2, 3)), label_ids=np.array([0, 1])))
        {'n': 2}
        >>> rec.predictions.shape
        (2, 3)
    """

    def __init__(self, compute_metrics):
        self.compute_metrics = compute_metrics
        self.predictions = None
        self.label_ids = None

    def __getattr__(self, name):
        # Tasks reach into their metrics object (QA's ``tune_null_threshold``, NER's ``bind``):
        # everything not defined here is the wrapped object's.
        if name.startswith("__") or name == "compute_metrics":
            raise AttributeError(name)
        return getattr(self.__dict__["compute_metrics"], name)

    def __call__(self, eval_pred):
        preds = eval_pred.predictions
        self.predictions = preds[0] if isinstance(preds, tuple) and len(preds) == 1 else preds
        self.label_ids = eval_pred.label_ids
        return self.compute_metrics(eval_pred)

    def save(self, path: str | os.PathLike) -> bool:
        """Write ``predictions``/``label_ids`` as ``.npz`` when they are plain, small arrays."""
        arrays = {}
        for name in ("predictions", "label_ids"):
            value = getattr(self, name)
            if value is None or isinstance(value, (tuple, list, dict)):
                return False
            value = np.asarray(value)
            if value.dtype == object or value.size > MAX_SAVED_VALUES:
                return False
            arrays[name] = value
        np.savez_compressed(path, **arrays)
        return True


def bars_hidden() -> bool:
    """Progress bars are off: stderr is not a terminal (a log file, a pipe, a server) or
    ``ENCODER_TASKS_DISABLE_TQDM=1`` (what ``--disable_tqdm`` sets)."""
    return os.environ.get("ENCODER_TASKS_DISABLE_TQDM") == "1" or not sys.stderr.isatty()


def progress(
    iterable=None,
    desc: str | None = None,
    total: int | None = None,
    disable: bool | None = None,
    unit: str = "it",
):
    """A tqdm bar on stderr; hidden when stderr is not a terminal, when ``disable`` is True,
    or when ``ENCODER_TASKS_DISABLE_TQDM=1``."""
    from tqdm.auto import tqdm

    hidden = bool(disable) or bars_hidden()
    return tqdm(iterable, desc=desc, total=total, unit=unit, disable=hidden, leave=False, dynamic_ncols=True)

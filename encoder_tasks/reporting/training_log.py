"""The Trainer callback that appends every log to ``<output_dir>/log.jsonl``.

Kept apart from :mod:`encoder_tasks.reporting.tracking` because a ``TrainerCallback`` imports
transformers' Trainer stack (``transformers.training_args``, peft): the progress bars there are
on every ``predict`` path, which must not pay for it.

Example:
    >>> JsonLinesLogger().filename
    'log.jsonl'
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import TrainerCallback

from .tracking import LOG_FILE, _jsonable


class JsonLinesLogger(TrainerCallback):
    """Append each Trainer log to ``<output_dir>/log.jsonl`` (main process only).

    Every line holds ``step``, ``epoch``, ``time`` (seconds since the run started) and the
    logged values, e.g. ``{"step": 50, "epoch": 0.4, "loss": 0.61, "learning_rate": 4e-05}``.
    A resumed run appends to the same file.
    """

    def __init__(self, filename: str = LOG_FILE):
        self.filename = filename
        self._start = None

    def on_train_begin(self, args, state, control, **kwargs):
        import time

        self._start = time.time()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not args.output_dir or not logs:
            return
        import time

        record = {"step": state.global_step, "epoch": state.epoch}
        if self._start is not None:
            record["time"] = round(time.time() - self._start, 3)
        record.update(_jsonable(logs))
        path = Path(args.output_dir) / self.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")

"""The Python API: one call per action, with the command line's settings (docs/python-api.md).

- :func:`train`, :func:`evaluate`, :func:`predict_file`, :func:`export`: the CLI's actions, with
  its flag names as keyword settings, run through its own code;
- :func:`load` -> :class:`Model`, whose ``predict`` takes strings, records, a
  ``datasets.Dataset`` or a pandas DataFrame and returns what ``<task> predict`` writes;
- :func:`prepare` -> :class:`TaskData`: a task's data, head, collator, metrics and Trainer class
  for a training loop of your own.

All of them are importable from ``encoder_tasks`` directly (``encoder_tasks.train``).
"""

from __future__ import annotations

from .actions import Model, Run, evaluate, export, load, predict_file, train
from .blocks import TaskData, prepare

__all__ = ["Model", "Run", "TaskData", "evaluate", "export", "load", "predict_file", "prepare", "train"]

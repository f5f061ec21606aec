"""Open a saved model and find its task: the one place above the registry that does it.

Everything below the registry reads a saved model without knowing the tasks
(:mod:`encoder_tasks.artifact` names the files and reads the metadata;
:meth:`encoder_tasks.heads.EncoderWithHead.from_pretrained` rebuilds the model from the head
class the metadata records). The application (the commands, the server, the Python API, Ray)
needs one more thing: which :class:`~encoder_tasks.task.Task` to run a saved model with. That
is :func:`open_saved`, and :func:`task_named` for a task given by name; both say the same thing
for a task this version does not know.

Example:
    >>> task_named("ner").name
    'ner'
    >>> task_named("nre")
    Traceback (most recent call last):
    ...
    encoder_tasks.errors.UserError: unknown task 'nre' (did you mean 'ner'?); choose one of: classification, pair, embedding, qa, ner, mlm
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .artifact import TASK_FILE, TaskSettings, read_task_metadata
from .backbone import resolve_model_path
from .errors import UserError
from .registry import TASKS
from .task import Task

#: The task that opens a folder without ``encoder_tasks.json`` (a sentence-transformers folder or a
#: bare encoder): its ``load_for_inference`` takes any encoder (mean pooling).
PLAIN_ENCODER_TASK = "embedding"


def task_named(name: Any, where: str = "") -> Task:
    """The registered task called ``name``; one message, with the closest name, otherwise.

    ``where`` names the file the name was read from, for the message.
    """
    task = TASKS.get(name) if isinstance(name, str) else None
    if task is not None:
        return task
    close = difflib.get_close_matches(str(name), list(TASKS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    prefix = f"{where}: " if where else ""
    raise UserError(f"{prefix}unknown task {name!r}{hint}; choose one of: {', '.join(TASKS)}")


@dataclass(frozen=True)
class SavedModel:
    """A saved model folder, opened: its task, and (for a run of this toolkit) its settings."""

    path: str
    task: Task
    #: The typed settings of ``encoder_tasks.json``; ``None`` for a folder saved elsewhere.
    settings: TaskSettings | None
    metadata: dict | None


def open_saved(model_dir: str | Path, *, plain_encoders: bool = True) -> SavedModel:
    """Open ``model_dir`` (a run, an export, an int8 model; a Hub id a local package mirrors)
    and find its task, without loading weights.

    A folder without ``encoder_tasks.json`` that holds a transformers config (a
    sentence-transformers folder, a bare encoder) opens as an embedding model when
    ``plain_encoders`` is set; otherwise, and for a folder that is no model, the message says
    what was expected and what was found.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> open_saved(make_tiny_model("bert")).task.name
        'embedding'
    """
    path = resolve_model_path(str(model_dir))
    metadata = read_task_metadata(path) if Path(path).is_dir() else None
    if metadata is not None:
        task = task_named(metadata.get("task"), where=f"{path}/{TASK_FILE}")
        return SavedModel(path, task, task.load_settings(metadata), metadata)
    if not Path(path).is_dir():
        raise UserError(f"{model_dir}: no such directory (expected a saved model)")
    if plain_encoders and (Path(path) / "config.json").is_file():
        return SavedModel(path, TASKS[PLAIN_ENCODER_TASK], None, None)
    if plain_encoders:
        raise UserError(f"{model_dir}: not a saved model (no {TASK_FILE} and no config.json)")
    raise UserError(f"{model_dir} is not a model saved by encoder-tasks (no {TASK_FILE})")


def read_saved_settings(path: str | Path) -> tuple[str | None, TaskSettings | None]:
    """``(task name, typed settings)`` of the run saved in ``path`` without building the model;
    ``(None, None)`` where ``path`` holds no run of this toolkit."""
    metadata = read_task_metadata(path)
    if metadata is None:
        return None, None
    opened = open_saved(path, plain_encoders=False)
    return opened.task.name, opened.settings

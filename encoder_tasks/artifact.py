"""A saved model's files, read and written without knowing any task: the bottom of the layers.

A run directory (``docs/architecture.md``, "The saved model") holds ``config.json``,
``model.safetensors``, the tokenizer files and ``encoder_tasks.json``: the task, the head class
and the task's typed settings (:class:`TaskSettings`, format :data:`SETTINGS_FORMAT`; format 1
still loads). This module names those files, reads the metadata and turns it into typed
settings of a given class. Finding the *task* of a saved model is the application's job
(:func:`encoder_tasks.saved.open_saved`, above the registry); loading the model is the head's
(:meth:`encoder_tasks.heads.EncoderWithHead.from_pretrained`, by the class the file records).

Example:
    >>> s = TaskSettings(max_length=128).replace(base_model="bert-base-uncased")
    >>> load_settings(TaskSettings, {"format_version": SETTINGS_FORMAT, "settings": s.to_dict()}) == s
    True
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError

#: Metadata file written beside every model this toolkit saves.
TASK_FILE = "encoder_tasks.json"
#: The weights of encoder and head, one safetensors file.
WEIGHTS_FILE = "model.safetensors"

#: Version of the ``encoder_tasks.json`` schema written by this code. Version 1 (a flat dict of
#: metadata plus ``head_config``) still loads: see :meth:`TaskSettings.from_format1`.
SETTINGS_FORMAT = 2

#: Keys of ``encoder_tasks.json`` that describe the file, not the task's settings.
FILE_KEYS = ("format_version", "task", "head_class", "head_config", "settings")


@dataclass(frozen=True)
class TaskSettings:
    """The settings saved with a model: the typed schema of ``encoder_tasks.json``.

    Each task subclasses it with its own fields (label names, columns, window sizes, head
    settings). A field that mirrors a command-line flag has the flag's name, so
    :func:`encoder_tasks.settings.resolve` can fill every flag the user left unset from the
    saved model. Instances are frozen: a change (a tuned threshold) makes a new one with
    :meth:`replace`.

    Example:
        >>> s = TaskSettings(max_length=128).replace(base_model="bert-base-uncased")
        >>> TaskSettings.from_dict(s.to_dict()) == s
        True
    """

    max_length: int | None = None
    #: The encoder the run started from (a Hub id or a path).
    base_model: str | None = None
    #: LoRA adapters stored apart from the encoder (a checkpoint of a ``--lora_r`` run).
    lora: dict | None = None
    #: After training the adapters are merged in; this records how.
    lora_merged: str | None = None
    #: Keys this version does not know (a newer writer): kept, so re-saving loses nothing.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (``extra`` flattened back in)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**dict(self.extra), **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskSettings:
        """Build from a saved dict; unknown keys go to :attr:`extra`."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names and k not in FILE_KEYS}
        return cls(**known, extra=extra)

    @classmethod
    def from_format1(cls, metadata: Mapping[str, Any]) -> TaskSettings:
        """Read a format-1 file: flat metadata plus the head's constructor arguments.

        A task whose head arguments were named differently from its settings overrides this.
        """
        return cls.from_dict({**dict(metadata.get("head_config") or {}), **dict(metadata)})

    def replace(self, **changes: Any) -> TaskSettings:
        return dataclasses.replace(self, **changes)

    def get(self, name: str, default: Any = None) -> Any:
        """A setting by name, whether a field or an unknown key kept in :attr:`extra`."""
        if name in {f.name for f in dataclasses.fields(self)} - {"extra"}:
            return getattr(self, name)
        return self.extra.get(name, default)


def read_task_metadata(path: str | os.PathLike) -> dict | None:
    """Return the toolkit metadata of a saved run directory, or None for a plain checkpoint."""
    meta = Path(path) / TASK_FILE
    if not meta.is_file():
        return None
    try:
        metadata = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{meta}: not readable as JSON ({exc}); the model directory is damaged") from exc
    if not isinstance(metadata, dict):
        raise UserError(
            f"{meta}: expected a JSON object, found {type(metadata).__name__}; the model directory is damaged"
        )
    return metadata


def load_settings(settings_class: type[TaskSettings], metadata: Mapping[str, Any]) -> TaskSettings:
    """Typed settings of ``settings_class`` from an ``encoder_tasks.json`` of any format version."""
    version = metadata.get("format_version", 1)
    if version == 1:
        return settings_class.from_format1(metadata)
    if version == SETTINGS_FORMAT:
        return settings_class.from_dict(metadata.get("settings") or {})
    raise UserError(
        f"encoder_tasks.json format {version!r} is newer than this version of encoder-tasks "
        f"reads (up to {SETTINGS_FORMAT}); upgrade encoder-tasks"
    )


def settings_dict(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of an ``encoder_tasks.json`` as a flat dict, from either format.

    Format 2 keeps them under ``settings``; format 1 (exports written before it) keeps them
    flat. Either way the head's arguments (the tagger's ``label_names``) under ``head_config``
    fill what the settings leave out.

    Example:
        >>> settings_dict({"format_version": 2, "settings": {"label_names": ["O"]}})["label_names"]
        ['O']
        >>> settings_dict({"head_config": {"label_names": ["O"]}, "max_length": 64})["label_names"]
        ['O']
    """
    if metadata.get("format_version", 1) >= 2:
        settings = dict(metadata.get("settings") or {})
    else:
        settings = {k: v for k, v in metadata.items() if k not in ("head_config", "onnx")}
    return {**dict(metadata.get("head_config") or {}), **{k: v for k, v in settings.items() if v is not None}}

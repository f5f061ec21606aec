"""The toy task's flags and the settings it saves (field names mirror the flags)."""

from __future__ import annotations

from dataclasses import dataclass, field

from encoder_tasks.config import PredictArguments
from encoder_tasks.task import TaskSettings


@dataclass
class ToyArguments:
    text_column: str = field(default="text", metadata={"help": "Column with the text."})
    keyword: str = field(default="good", metadata={"help": "The word whose presence is the label."})


@dataclass
class ToyPredictArguments(PredictArguments):
    text_column: str | None = field(default=None, metadata={"help": "Text column (default: as trained)."})


@dataclass(frozen=True)
class ToySettings(TaskSettings):
    text_column: str = "text"
    keyword: str = "good"

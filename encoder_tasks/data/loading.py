"""Resolve a run's data: local files (under ``data_dir``) first, the Hub as fallback."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from .columns import name_list
from .readers import LINE_COLUMN, read_file

logger = logging.getLogger(__name__)


@dataclass
class Split:
    """One split of data and where it came from (for error messages)."""

    name: str
    source: str
    dataset: object  # datasets.Dataset
    #: The place of the dataset's first row in its file (a chunk of a file read in chunks,
    #: :mod:`encoder_tasks.data.chunks`), so rows without a line are still named by their row.
    first_index: int = 0

    def location(self, index: int) -> str:
        line = self.dataset[index][LINE_COLUMN] if LINE_COLUMN in self.dataset.column_names else None
        if line is not None:
            return f"{self.source} line {line}"
        return f"{self.source} row {self.first_index + index + 1}"


def resolve_data_path(path: str, data_dir: str | None) -> Path:
    """A path as given if it exists, else under ``data_dir``; returned either way."""
    candidate = Path(path).expanduser()
    if candidate.is_absolute() or candidate.exists() or not data_dir:
        return candidate
    return Path(data_dir).expanduser() / candidate


def load_splits(data_args, reader=read_file, required=("train",)) -> dict[str, Split]:
    """Load train/validation/test from local files, falling back to ``dataset_name`` on the Hub.

    ``reader(path, ...)`` reads one local file; tasks with their own formats (CoNLL, SQuAD)
    pass their reader. A split whose file is missing falls back to the Hub only when the
    recipe names a dataset there, and says so.
    """
    wanted = {
        "train": (data_args.train_file, data_args.train_split),
        "validation": (data_args.validation_file, data_args.validation_split),
        "test": (data_args.test_file, data_args.test_split),
    }
    splits: dict[str, Split] = {}
    column_names = name_list(data_args.column_names) or None
    for name, (file, hub_split) in wanted.items():
        if file:
            path = resolve_data_path(file, data_args.data_dir)
            if path.exists():
                dataset = reader(
                    path,
                    delimiter=data_args.delimiter,
                    column_names=column_names,
                    encoding=data_args.encoding,
                    split=hub_split,
                )
                splits[name] = Split(name, str(path), dataset)
                continue
            if not data_args.dataset_name:
                raise UserError(f"--{name}_file {file}: no such file (looked in {path.parent or '.'})")
            logger.warning("%s not found: using Hub dataset %r instead", path, data_args.dataset_name)
        if data_args.dataset_name and hub_split:
            splits[name] = Split(
                name, f"{data_args.dataset_name}[{hub_split}]", load_hub_split(data_args, hub_split)
            )
    for name in required:
        if name not in splits:
            raise UserError(f"no {name} data: give --{name}_file (or --dataset_name for a Hub dataset)")
    return splits


def load_hub_split(data_args, split: str):
    """Load one split of a Hub dataset (needs network access, or the local datasets cache)."""
    import datasets

    try:
        dataset = datasets.load_dataset(data_args.dataset_name, data_args.dataset_config_name, split=split)
    except Exception as exc:  # network, missing split, unknown dataset: all are the user's to fix
        offline = " (offline: HF_HUB_OFFLINE is set)" if os.environ.get("HF_HUB_OFFLINE") else ""
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"Hub dataset {data_args.dataset_name!r} split {split!r} could not be loaded{offline}: {first}. "
            "Point --train_file/--validation_file (or --data_dir) at local files instead."
        ) from None
    if LINE_COLUMN not in dataset.column_names:
        dataset = dataset.add_column(LINE_COLUMN, [None] * len(dataset))
    return dataset

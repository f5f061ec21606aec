"""Data in and out: readers with validation (tables, JSON, JSONL, saved datasets, the Hub),
column resolution, and the JSON writers."""

from .columns import column_texts, name_list, resolve_column
from .loading import Split, load_splits, resolve_data_path
from .readers import AFTER_COLUMN, LINE_COLUMN, read_file, row_location
from .writers import check_new_file, unique_path, write_json, write_jsonl

__all__ = [
    "AFTER_COLUMN",
    "LINE_COLUMN",
    "Split",
    "check_new_file",
    "column_texts",
    "load_splits",
    "name_list",
    "read_file",
    "resolve_column",
    "resolve_data_path",
    "row_location",
    "unique_path",
    "write_json",
    "write_jsonl",
]

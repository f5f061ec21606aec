"""Data readers with validation: tables, JSON, JSONL, saved datasets and the Hub."""

from .loading import Split, load_splits, resolve_data_path
from .readers import LINE_COLUMN, read_file, row_location

__all__ = ["LINE_COLUMN", "Split", "load_splits", "read_file", "resolve_data_path", "row_location"]

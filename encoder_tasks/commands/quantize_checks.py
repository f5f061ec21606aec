"""What ``encoder-tasks quantize`` refuses before it loads anything: the source and the destination.

Example:
    >>> from pathlib import Path
    >>> check_source("runs/sst2", Path("runs/sst2-int8"), overwrite=False)  # doctest: +SKIP
    ('runs/sst2', {'format_version': 2, 'task': 'classification', ...})
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..saved import open_saved

REPORT_FILE = "quantization_report.json"


def check_source(
    model_dir: str, dest: Path, overwrite: bool, bare_embedding: bool = True
) -> tuple[str, dict | None]:
    """``(resolved model_dir, its saved metadata)``; refuses what cannot be quantized, before loading.

    With ``bare_embedding``, a folder without ``encoder_tasks.json`` that holds an encoder (any
    ``config.json`` checkpoint, or a sentence-transformers folder) is an embedding model: metadata
    ``None``.
    """
    try:
        opened = open_saved(model_dir, plain_encoders=bare_embedding)
    except UserError as error:
        raise UserError(f"quantize: {error}") from None
    path, metadata, settings = opened.path, opened.metadata, opened.settings
    if metadata is None:  # a bare encoder or sentence-transformers folder
        _check_dest(path, dest, overwrite)
        return path, None
    if settings.get("quantization"):
        source = settings.get("quantization").get("source")
        raise UserError(
            f"quantize: {model_dir} is already an int8 model (from {source}); quantize the fp32 run"
        )
    if settings.lora:
        raise UserError(
            f"quantize: {model_dir} holds unmerged LoRA adapters (a checkpoint of a --lora_r run); "
            "quantize the finished run, whose adapters are merged"
        )
    if settings.get("runtime"):
        raise UserError(
            f"quantize: {model_dir} already holds an int8 {settings.get('runtime').get('backend')} graph; "
            "quantize the fp32 run"
        )
    _check_dest(path, dest, overwrite)
    return path, metadata


def _check_dest(path: str, dest: Path, overwrite: bool) -> None:
    if dest.exists() and not dest.is_dir():
        raise UserError(f"quantize: {dest} is a file; choose a directory")
    if dest.is_dir() and Path(path).resolve() == dest.resolve():
        raise UserError("quantize: the destination must differ from the model directory")
    if dest.is_dir() and any(dest.iterdir()) and not overwrite:
        raise UserError(
            f"quantize: {dest} already holds files; choose another destination or pass --overwrite"
        )

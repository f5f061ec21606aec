"""A run directory checked before the server listens: a damaged one is a one-line error, not a
server that stays up answering 503 for ever.

:func:`check_model_dir` reads only headers (fast: no weights are loaded): ``config.json`` is a
JSON object; ``model.safetensors`` is there, its header parses and its size is what the header
says (an empty or truncated file is named); the embedding matrix has the shape ``config.json``
gives (a config of another model is named); a tokenizer is saved with the model (else the base
model's would be loaded without a word); and a task run that lost ``encoder_tasks.json``, the
file that says its task, is refused instead of being served as an embedding model.

Example:
    >>> check_model_dir("runs/sst2")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ..errors import UserError

#: Files of a training run (what ``train`` writes next to the model).
RUN_FILES = ("run_config.json", "training_args.bin", "metrics.json", "log.jsonl")
#: Tensor name prefixes of a task head (a bare encoder or a sentence-transformers model has none).
HEAD_PREFIXES = ("classifier.", "qa_outputs.", "crf.", "cls.", "lm_head.", "head.", "score.")
#: A tokenizer saved with the model: any one of these.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")
_MAX_HEADER = 100 * 2**20


def safetensors_header(path: Path) -> dict:
    """The header of a safetensors file, checked against the file's size (UserError if damaged)."""
    size = path.stat().st_size
    if size < 8:
        raise UserError(f"{path}: the weights file is empty or truncated ({size} bytes)")
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > min(size - 8, _MAX_HEADER):
            raise UserError(
                f"{path}: truncated or not a safetensors file (a header of {length} bytes in {size})"
            )
        try:
            header = json.loads(handle.read(length))
        except ValueError:
            raise UserError(f"{path}: damaged: its header is not JSON") from None
    if not isinstance(header, dict):
        raise UserError(f"{path}: damaged: its header is not a JSON object")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    try:
        end = max((int(t["data_offsets"][1]) for t in tensors.values()), default=0)
    except (TypeError, KeyError, IndexError, ValueError):
        raise UserError(f"{path}: damaged: a tensor without data offsets in its header") from None
    if 8 + length + end != size:
        raise UserError(
            f"{path}: expected {8 + length + end} bytes (from its header), found {size}: truncated or damaged"
        )
    return tensors


def check_model_dir(model_dir: str | Path) -> None:
    """Refuse (UserError) a model folder that could not be served correctly; see the module docstring."""
    path = Path(model_dir)
    if not path.is_dir():
        return  # a package mirror or a name: the loader says what is wrong
    has_task = (path / "encoder_tasks.json").is_file()
    config_path = path / "config.json"
    if not config_path.is_file():
        if has_task:
            raise UserError(f"{path}: no config.json; the run did not finish saving")
        return  # no model at all: task_of says so
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise UserError(f"{config_path}: expected JSON, found a damaged file ({error})") from None
    if not isinstance(config, dict):
        raise UserError(f"{config_path}: expected a JSON object")
    weights = path / "model.safetensors"
    if not weights.is_file():
        if (path / "model.safetensors.index.json").is_file():
            tensors = {}
        else:
            raise UserError(f"{path}: no model.safetensors (the weights); the run did not finish saving")
    else:
        tensors = safetensors_header(weights)
    for name, tensor in tensors.items():
        if name.endswith("word_embeddings.weight") and len(tensor.get("shape", [])) == 2:
            rows, width = tensor["shape"]
            expected = (config.get("vocab_size", rows), config.get("hidden_size", width))
            if (rows, width) != tuple(expected):
                raise UserError(
                    f"{config_path}: says vocab_size {expected[0]} and hidden_size {expected[1]}, but "
                    f"{weights.name} holds {rows} x {width} embeddings: config.json belongs to another model"
                )
            break
    if not any((path / name).is_file() for name in TOKENIZER_FILES) and not list(path.glob("*.model")):
        raise UserError(
            f"{path}: no tokenizer files ({', '.join(TOKENIZER_FILES)}); serving it would load the base "
            "model's tokenizer instead, which may not be the one it was trained with"
        )
    if not has_task and not (path / "modules.json").is_file():
        found = [name for name in RUN_FILES if (path / name).exists()]
        heads = sorted({name.split(".")[0] for name in tensors if name.startswith(HEAD_PREFIXES)})
        if found or heads:
            what = ", ".join(found + [f"{h}.* head weights" for h in heads])
            raise UserError(
                f"{path}: looks like a task run ({what}) but has no encoder_tasks.json, the file that says "
                "its task; it would be served as an embedding model. Restore encoder_tasks.json from the run"
            )

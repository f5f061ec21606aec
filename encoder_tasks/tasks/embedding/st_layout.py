"""The sentence-transformers model layout, written beside the toolkit's own files.

``SentenceTransformer(path)`` reads ``modules.json`` and builds each module from its folder:
the Transformer from the top level (``config.json``, weights, tokenizer), then Pooling
(``1_Pooling/config.json``) and, for normalised embeddings, Normalize (``2_Normalize``).
"""

from __future__ import annotations

import json
from pathlib import Path

from ...data.writers import write_json
from ...errors import UserError


def write_sentence_transformers_files(
    output_dir,
    hidden_size: int,
    pooling: str,
    normalize: bool,
    max_seq_length: int,
    model_args: dict | None = None,
) -> None:
    """``modules.json`` (Transformer at the top level, Pooling, Normalize) and their configs.

    ``model_args`` are the keyword arguments sentence-transformers passes to the encoder's
    ``from_pretrained`` (``sentence_bert_config.json``'s ``model_args``): ``{"add_pooling_layer":
    False}`` for an encoder saved without the pooler it never uses, so that loading builds none
    and reports no "MISSING ... newly initialized" weights (:func:`pooler_free_model_args`).
    """
    out = Path(output_dir)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
        )
        (out / "2_Normalize").mkdir(exist_ok=True)
    pooling_config = {
        "word_embedding_dimension": hidden_size,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": pooling == "max",
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    }
    (out / "1_Pooling").mkdir(exist_ok=True)
    files = {
        out / "modules.json": modules,
        out / "1_Pooling" / "config.json": pooling_config,
        out / "sentence_bert_config.json": {
            "max_seq_length": max_seq_length,
            "do_lower_case": False,
            **({"model_args": dict(model_args)} if model_args else {}),
        },
        out / "config_sentence_transformers.json": {
            "prompts": {},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    }
    for path, data in files.items():
        write_json(path, data)


def pooler_free_model_args(encoder) -> dict:
    """``{"add_pooling_layer": False}`` where ``encoder`` (a transformers model) was built with a
    pooler it does not keep (the toolkit drops BERT's and RoBERTa's: no head uses them) and its
    class can be built without one; ``{}`` otherwise (DistilBERT has no pooler to leave out).

    Example:
        >>> from encoder_tasks.backbone import load_encoder
        >>> from encoder_tasks.testing import make_tiny_model
        >>> encoder = load_encoder(make_tiny_model("bert"))
        >>> encoder.pooler = None
        >>> pooler_free_model_args(encoder)
        {'add_pooling_layer': False}
    """
    import inspect

    try:
        accepted = inspect.signature(type(encoder).__init__).parameters
    except (TypeError, ValueError):
        return {}
    if "add_pooling_layer" in accepted and getattr(encoder, "pooler", None) is None:
        return {"add_pooling_layer": False}
    return {}


def read_sentence_transformers_pooling(path) -> tuple[str, bool] | None:
    """``(pooling, normalize)`` of a sentence-transformers model folder, or None if it is not one."""
    path = Path(path)
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        return None
    try:
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
        # sentence-transformers < 6 names "sentence_transformers.models.Pooling"; 6 moved the
        # modules ("sentence_transformers.sentence_transformer.modules.pooling.Pooling").
        pooling_dir = next(m["path"] for m in modules if m["type"].split(".")[-1] == "Pooling")
        config = json.loads((path / pooling_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, StopIteration) as exc:
        raise UserError(f"{modules_file}: not a readable sentence-transformers layout ({exc})") from None
    if isinstance(config.get("pooling_mode"), str):  # sentence-transformers 6: one field
        modes = [config["pooling_mode"]] if config["pooling_mode"] in ("cls", "mean", "max") else []
    else:
        modes = [
            m
            for m in ("cls", "mean", "max")
            if config.get(f"pooling_mode_{m}_token" + ("" if m == "cls" else "s"))
        ]
    if len(modes) != 1:
        raise UserError(
            f"{path / pooling_dir / 'config.json'}: pooling {config} is not one of cls, mean, max"
        )
    normalize = any(m["type"].split(".")[-1] == "Normalize" for m in modules)
    return modes[0], normalize


def read_max_seq_length(path) -> int | None:
    """``max_seq_length`` of a sentence-transformers folder (what it truncates texts to), if set."""
    config = Path(path) / "sentence_bert_config.json"
    try:
        value = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None

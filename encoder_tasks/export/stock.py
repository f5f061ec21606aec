"""The stock transformers layout: what every task's converter shares, and the checked export.

A task's ``stock_model(model)`` hook (``encoder_tasks/tasks/<task>/stock.py``) builds the stock
``AutoModelFor*`` with the toolkit model's weights, using the helpers here: a copy of the
encoder's config, the encoder's weights loaded into the stock base model, a check that the
model family has a stock head of the right shape. :func:`export_transformers` then checks that
both models score the sample inputs alike before it writes anything.

Example:
    >>> from encoder_tasks.backbone import load_encoder
    >>> from encoder_tasks.testing import make_tiny_model
    >>> encoder = load_encoder(make_tiny_model("bert"))
    >>> tuple(hidden_bound(encoder).shape) == (encoder.config.hidden_size,)
    True
"""

from __future__ import annotations

import copy
import inspect
import math
from pathlib import Path

import torch
from torch import nn

from . import ExportError
from .samples import compare_outputs, sample_batches

#: Model families whose stock token-classification and QA heads are one linear layer on the
#: token states (the shape of the toolkit's token and span heads).
LINEAR_TOKEN_HEADS = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "deberta-v2")


def hidden_bound(encoder: nn.Module) -> torch.Tensor:
    """Per-unit bound on the encoder's output, from its last LayerNorm.

    A LayerNorm output is ``gamma * n + beta`` with ``n`` of mean 0 and variance 1, so
    ``|n_i| <= sqrt(d - 1)``.
    """
    norms = [m for m in encoder.modules() if isinstance(m, nn.LayerNorm)]
    if not norms:
        raise ExportError("the encoder has no LayerNorm to bound its outputs; export it to ONNX instead")
    last = norms[-1]
    d = last.normalized_shape[-1]
    gamma = last.weight.detach().abs() if last.weight is not None else torch.ones(d)
    beta = last.bias.detach().abs() if last.bias is not None else torch.zeros(d)
    return gamma * math.sqrt(d - 1) + beta


def set_linear(layer: nn.Linear, weight: torch.Tensor, bias: torch.Tensor) -> None:
    """Overwrite a linear layer's weight and bias."""
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)


def load_encoder_into(stock, encoder: nn.Module) -> None:
    """Load the toolkit encoder's weights into the stock model's base model (its pooler aside)."""
    base = getattr(stock, stock.base_model_prefix)
    missing, unexpected = base.load_state_dict(encoder.state_dict(), strict=False)
    missing = [m for m in missing if not m.startswith("pooler.")]
    if missing or unexpected:
        raise ExportError(
            f"the encoder's weights do not fit the stock {type(stock).__name__} "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )


def stock_config(model, **changes):
    """A copy of the encoder's config with ``changes`` set (labels, head settings)."""
    config = copy.deepcopy(model.encoder.config)
    for key, value in changes.items():
        setattr(config, key, value)
    return config


def require_family(model, families, what: str) -> str:
    """The encoder's ``model_type``, if it is one of ``families``; else a message saying what works."""
    model_type = getattr(model.encoder.config, "model_type", "")
    if model_type not in families:
        reason = (
            "its stock heads end in a LayerNorm, which cannot pass the toolkit head's input through"
            if model_type == "modernbert"
            else "no stock head of that family is known to express the toolkit head"
        )
        raise ExportError(
            f"{what}: a {model_type!r} model cannot be written in the stock transformers layout ({reason}); "
            "export it with --format onnx, or serve it with `encoder-tasks <task> predict`"
        )
    return model_type


def finish(stock):
    """Record the stock class as the config's architecture; eval mode."""
    stock.config.architectures = [type(stock).__name__]
    return stock.eval()


def export_transformers(model, tokenizer, dest: str | Path, task, tolerance: float = 1e-3) -> dict:
    """Write ``model`` in the stock layout (``task.stock_model``) to ``dest``; return what was checked.

    Nothing is written unless the stock model's outputs (``task.onnx_outputs``) match the
    toolkit model's on the sample batches, within ``tolerance`` relative to the largest output.
    """
    stock = task.stock_model(model)
    accepted = set(inspect.signature(stock.forward).parameters)
    model.eval()
    diff = scale = 0.0
    for batch in sample_batches(tokenizer):
        if "token_type_ids" not in accepted:
            batch.pop("token_type_ids", None)
        batch_diff, batch_scale = compare_outputs(model, stock, batch, task.onnx_outputs)
        diff, scale = max(diff, batch_diff), max(scale, batch_scale)
    allowed = tolerance * (1.0 + scale)
    if not diff <= allowed:
        raise ExportError(
            f"the exported model's outputs differ from the toolkit model's by {diff:.3g} (tolerance "
            f"{allowed:.3g}); not written. Please report this with the model type"
        )
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    stock.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    info = {
        "format": "transformers",
        "architecture": type(stock).__name__,
        "parity": "checked",
        "max_abs_diff": diff,
    }
    if getattr(stock.config, "auto_map", None):  # its modeling file ships with it (remote_code.py)
        info["trust_remote_code"] = True
    return info

"""The masked-LM head in the stock ``AutoModelForMaskedLM`` layout (served by ``fill-mask``).

The toolkit's head is the stock one's shape (dense, activation, LayerNorm, tied decoder plus
bias); the stock head's modules are found by shape, as the MLM task finds them to copy a
checkpoint's head in, and filled the other way round. The export's parity check then proves
the match (a family whose stock head differs is refused there).

Example:
    >>> from encoder_tasks.backbone import load_encoder
    >>> from encoder_tasks.testing import make_tiny_model
    >>> from encoder_tasks.tasks.mlm.model import MaskedLanguageModel
    >>> type(to_stock(MaskedLanguageModel(load_encoder(make_tiny_model("bert"))))).__name__
    'BertForMaskedLM'
"""

from __future__ import annotations

import torch
from torch import nn

from ...export import ExportError
from ...export.stock import finish, load_encoder_into, stock_config


def to_stock(model):
    """A stock ``*ForMaskedLM`` with the MLM head's weights."""
    from transformers import AutoModelForMaskedLM

    stock = AutoModelForMaskedLM.from_config(stock_config(model))
    load_encoder_into(stock, model.encoder)
    base = {id(m) for m in stock.base_model.modules()}
    output = stock.get_output_embeddings()
    head = [m for m in stock.modules() if id(m) not in base]
    size = model.head.dense.out_features
    dense = [
        m
        for m in head
        if isinstance(m, nn.Linear)
        and m is not output
        and m.out_features == size
        and m.in_features == model.config.hidden_size
    ]
    norms = [m for m in head if isinstance(m, nn.LayerNorm) and m.normalized_shape[0] == size]
    name = type(stock).__name__
    if output is None or len(dense) != 1 or len(norms) != 1:
        raise ExportError(
            f"masked LM: the stock {name} head is not dense -> activation -> LayerNorm -> decoder; "
            "export with --format onnx"
        )
    with torch.no_grad():
        dense[0].weight.copy_(model.head.dense.weight)
        if dense[0].bias is not None:
            dense[0].bias.copy_(model.head.dense.bias)
        elif bool(model.head.dense.bias.abs().gt(0).any()):
            raise ExportError(f"masked LM: the stock {name} head has no dense bias; use --format onnx")
        norms[0].weight.copy_(model.head.norm.weight)
        if norms[0].bias is not None:
            norms[0].bias.copy_(model.head.norm.bias)
        elif bool(model.head.norm.bias.abs().gt(0).any()):
            raise ExportError(
                f"masked LM: the stock {name} LayerNorm has no bias but this head learned one; "
                "export with --format onnx"
            )
        output.weight.copy_(model.head.decoder.weight)
        bias = output.bias
        if bias is None:
            found = [
                p
                for m in head
                for n, p in m.named_parameters(recurse=False)
                if n == "bias" and p.shape == model.head.bias.shape
            ]
            bias = found[0] if len(found) == 1 else None
        if bias is None:
            raise ExportError("masked LM: no output bias in the stock head; export with --format onnx")
        bias.copy_(model.head.bias)
    return finish(stock)

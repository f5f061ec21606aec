"""The span head in the stock ``AutoModelForQuestionAnswering`` layout.

Both are one linear layer giving a start and an end logit per token, so the weights copy
over as they are (transformers 5 has no question-answering pipeline; the export's parity
check compares the start and end logits).

Example:
    >>> from encoder_tasks.backbone import load_encoder
    >>> from encoder_tasks.testing import make_tiny_model
    >>> from encoder_tasks.tasks.qa.model import ExtractiveQuestionAnswering
    >>> type(to_stock(ExtractiveQuestionAnswering(load_encoder(make_tiny_model("bert"))))).__name__
    'BertForQuestionAnswering'
"""

from __future__ import annotations

from ...export.stock import (
    LINEAR_TOKEN_HEADS,
    finish,
    load_encoder_into,
    require_family,
    set_linear,
    stock_config,
)


def to_stock(model):
    """A stock ``*ForQuestionAnswering`` with the same start/end logits."""
    from transformers import AutoModelForQuestionAnswering

    require_family(model, LINEAR_TOKEN_HEADS, "question answering")
    stock = AutoModelForQuestionAnswering.from_config(stock_config(model, num_labels=2))
    load_encoder_into(stock, model.encoder)
    set_linear(stock.qa_outputs, model.qa_outputs.weight.detach(), model.qa_outputs.bias.detach())
    return finish(stock)

"""The QA head: a start/end scorer on every token of any encoder."""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_outputs import QuestionAnsweringModelOutput

from ...heads import EncoderWithHead, full_precision
from .args import QASettings

# Padding positions get this logit: far below any real one, yet start + end stays finite.
MASKED_LOGIT = -10000.0


class ExtractiveQuestionAnswering(EncoderWithHead):
    """A linear start/end scorer on every token of any encoder (as ``*ForQuestionAnswering``).

    Padding positions are masked out of the logits, so the loss never spreads probability
    over padding whatever the batch length.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = ExtractiveQuestionAnswering(load_encoder(make_tiny_model("bert")))
        >>> out = model(input_ids=torch.tensor([[2, 5, 6, 3]]), attention_mask=torch.ones(1, 4))
        >>> tuple(out.start_logits.shape), tuple(out.end_logits.shape)
        ((1, 4), (1, 4))
    """

    task = "qa"
    Settings = QASettings

    def __init__(self, encoder):
        super().__init__(encoder)
        self.qa_outputs = nn.Linear(encoder.config.hidden_size, 2)
        nn.init.normal_(self.qa_outputs.weight, std=getattr(encoder.config, "initializer_range", 0.02))
        nn.init.zeros_(self.qa_outputs.bias)

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        start_positions=None,
        end_positions=None,
        **kwargs,
    ):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encode(input_ids, attention_mask, token_type_ids, **kwargs)
        # Logits and loss in fp32 even under bf16 autocast.
        logits = full_precision(self.qa_outputs, hidden)
        start_logits, end_logits = logits.unbind(dim=-1)
        padding = attention_mask == 0
        start_logits = start_logits.masked_fill(padding, MASKED_LOGIT)
        end_logits = end_logits.masked_fill(padding, MASKED_LOGIT)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = (
                nn.functional.cross_entropy(start_logits, start_positions.long().view(-1))
                + nn.functional.cross_entropy(end_logits, end_positions.long().view(-1))
            ) / 2
        return QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits)

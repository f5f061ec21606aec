"""The head: mean pooling and a two-way linear layer, composed on any encoder."""

from __future__ import annotations

from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput

from encoder_tasks.heads import EncoderWithHead, Pooler

from .args import ToySettings


class KeywordHead(EncoderWithHead):
    task = "toy"
    Settings = ToySettings

    def __init__(self, encoder):
        super().__init__(encoder)
        self.pooler = Pooler("mean")
        self.classifier = nn.Linear(encoder.config.hidden_size, 2)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        hidden = self.encode(input_ids, attention_mask, token_type_ids)
        logits = self.classifier(self.pooler(hidden, attention_mask))
        loss = nn.functional.cross_entropy(logits.float(), labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)

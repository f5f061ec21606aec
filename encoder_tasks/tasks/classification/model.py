"""The classification head: pooling, dropout and one linear layer on any encoder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput

from ...heads import EncoderWithHead, Pooler, full_precision, head_dropout
from .args import ClassificationSettings


class SequenceClassifier(EncoderWithHead):
    """Pooling, dropout and a linear layer on any encoder.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = SequenceClassifier(load_encoder(make_tiny_model("bert")), num_labels=3)
        >>> out = model(input_ids=torch.tensor([[2, 5, 6, 3]]), attention_mask=torch.ones(1, 4))
        >>> tuple(out.logits.shape)
        (1, 3)
    """

    task = "classification"
    Settings = ClassificationSettings

    def __init__(
        self,
        encoder,
        num_labels: int,
        problem_type: str = "single_label",
        pooling: str = "mean",
        dropout: float | None = None,
        class_weights: list[float] | None = None,
    ):
        super().__init__(
            encoder,
            num_labels=num_labels,
            problem_type=problem_type,
            pooling=pooling,
            dropout=dropout,
            class_weights=class_weights,
        )
        self.problem_type = problem_type
        self.pooler = Pooler(pooling)
        self.dropout = nn.Dropout(head_dropout(encoder.config, dropout))
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        std = getattr(encoder.config, "initializer_range", 0.02)
        nn.init.normal_(self.classifier.weight, std=std)
        nn.init.zeros_(self.classifier.bias)
        weights = torch.tensor(class_weights, dtype=torch.float32) if class_weights else None
        self.register_buffer("class_weights", weights, persistent=False)

    @classmethod
    def from_settings(
        cls, encoder, settings: ClassificationSettings, training: Mapping[str, Any] | None = None
    ) -> SequenceClassifier:
        """The head the saved ``settings`` describe (``training``: class weights, not saved).

        Example:
            >>> from encoder_tasks.testing import make_tiny_model
            >>> from encoder_tasks.backbone import load_encoder
            >>> settings = ClassificationSettings(problem_type="regression", label_names=["score"])
            >>> model = SequenceClassifier.from_settings(load_encoder(make_tiny_model("bert")), settings)
            >>> model.classifier.out_features, model.settings.problem_type
            (1, 'regression')
        """
        model = cls(
            encoder,
            num_labels=len(settings.label_names),
            problem_type=settings.problem_type,
            pooling=settings.pooling,
            dropout=settings.classifier_dropout,
            class_weights=(training or {}).get("class_weights"),
        )
        model.settings = settings
        return model

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encode(input_ids, attention_mask, token_type_ids, **kwargs)
        pooled = self.pooler(hidden, attention_mask)
        logits = full_precision(self.classifier, self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = self.loss(logits.float(), labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        # Losses run in fp32 even under bf16 autocast.
        if self.problem_type == "regression":
            return nn.functional.mse_loss(logits.squeeze(-1), labels.float())
        if self.problem_type == "multi_label":
            return nn.functional.binary_cross_entropy_with_logits(
                logits, labels.float(), pos_weight=self.class_weights
            )
        return nn.functional.cross_entropy(logits, labels.long(), weight=self.class_weights)

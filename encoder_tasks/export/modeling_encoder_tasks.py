"""A pooled sequence classifier that transformers loads as remote code (shipped with exports).

``encoder-tasks export`` copies this file, unchanged, next to a mean- or max-pooled classifier
(and next to one whose model family has no stock head that can express it), and points
``auto_map`` in ``config.json`` at it, so stock transformers loads the model:

    from transformers import AutoModelForSequenceClassification, pipeline
    model = AutoModelForSequenceClassification.from_pretrained("exported/x", trust_remote_code=True)
    pipeline("text-classification", model="exported/x", trust_remote_code=True)("a fine film")

Why a file of its own: the stock ``*ForSequenceClassification`` heads read the first token only
(``encoder_tasks/tasks/classification/stock.py``), so a head that averages (or max-pools) the
tokens cannot be written in them. This module imports only torch and transformers (the loaded
copy runs where encoder-tasks is not installed); its pooling is the toolkit's
(:class:`encoder_tasks.heads.Pooler`) written out again for that reason, and every export
checks that both give the same logits before anything is written.

The weights keep the toolkit's names (``encoder.*``, ``classifier.*``); ``config.encoder`` is
the encoder's own config, so the encoder is any ``AutoModel`` (BERT, RoBERTa, DeBERTa-v2,
ModernBERT, ...). The config's ``model_type`` is this file's own, so loading without
``trust_remote_code=True`` stops with transformers' message rather than quietly building a
stock head with random weights.

Example:
    >>> import torch
    >>> from transformers import AutoConfig
    >>> encoder = AutoConfig.for_model("bert", vocab_size=50, hidden_size=8, num_hidden_layers=1,
    ...                                num_attention_heads=2, intermediate_size=16)
    >>> config = PooledEncoderConfig(encoder=encoder, pooling="mean", num_labels=3)
    >>> model = PooledEncoderForSequenceClassification(config).eval()
    >>> ids = torch.tensor([[2, 5, 6, 3], [2, 7, 3, 0]])
    >>> tuple(model(input_ids=ids, attention_mask=(ids > 0).long()).logits.shape)
    (2, 3)
"""

from __future__ import annotations

import inspect

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput

POOLING_MODES = ("cls", "mean", "max")


class PooledEncoderConfig(PretrainedConfig):
    """An encoder's config (``encoder``, a dict) plus the head: ``pooling`` and ``classifier_dropout``.

    Labels, ``problem_type`` and ``id2label`` are the usual ``PretrainedConfig`` fields, as the
    text-classification pipeline reads them.
    """

    model_type = "encoder_tasks_pooled"

    def __init__(self, encoder=None, pooling: str = "mean", classifier_dropout: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        if isinstance(encoder, PretrainedConfig):
            encoder = encoder.to_dict()
        if pooling not in POOLING_MODES:
            raise ValueError(f"pooling must be one of {', '.join(POOLING_MODES)}, found {pooling!r}")
        self.encoder = dict(encoder or {})
        self.pooling = pooling
        self.classifier_dropout = classifier_dropout

    def encoder_config(self) -> PretrainedConfig:
        """The encoder's config as its own class (``BertConfig``, ...)."""
        settings = dict(self.encoder)
        return AutoConfig.for_model(settings.pop("model_type"), **settings)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """One vector per sequence: the first real token (left padding works), the mean or the max
    of the real tokens."""
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
    if mode == "cls":
        first = attention_mask.long().argmax(dim=1)
        return hidden[torch.arange(hidden.size(0), device=hidden.device), first]
    if mode == "mean":
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    return hidden.masked_fill(mask == 0, torch.finfo(hidden.dtype).min).max(dim=1).values


class PooledEncoderForSequenceClassification(PreTrainedModel):
    """Encoder -> pooling -> dropout -> linear, with the losses of the stock heads."""

    config_class = PooledEncoderConfig
    base_model_prefix = "encoder"

    def __init__(self, config: PooledEncoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.encoder = AutoModel.from_config(config.encoder_config())
        # The encoder's own pooler (BERT, RoBERTa) is unused, and dropped as the toolkit drops it.
        if getattr(self.encoder, "pooler", None) is not None:
            self.encoder.pooler = None
        self._encoder_accepts = set(inspect.signature(self.encoder.forward).parameters)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(self.encoder.config.hidden_size, config.num_labels)
        self.post_init()

    def _init_weights(self, module):
        # The classifier is this head's own; every other module is the encoder's to initialise.
        if module is getattr(self, "classifier", None):
            nn.init.normal_(module.weight, std=self.config.encoder.get("initializer_range", 0.02))
            nn.init.zeros_(module.bias)
        elif hasattr(self, "encoder"):
            self.encoder._init_weights(module)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        # DistilBERT and ModernBERT take no token type ids.
        if token_type_ids is not None and "token_type_ids" in self._encoder_accepts:
            inputs["token_type_ids"] = token_type_ids
        for key in ("position_ids", "inputs_embeds"):
            if kwargs.get(key) is not None:
                inputs[key] = kwargs[key]
        hidden = self.encoder(**inputs, return_dict=True).last_hidden_state
        logits = self.classifier(self.dropout(pool(hidden, attention_mask, self.config.pooling)))
        loss = None if labels is None else self.loss(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The stock heads' losses, chosen by ``config.problem_type`` as they choose them."""
        problem = self.config.problem_type
        if problem is None:
            problem = (
                "regression"
                if self.num_labels == 1
                else "single_label_classification"
                if labels.dtype in (torch.long, torch.int)
                else "multi_label_classification"
            )
        if problem == "regression":
            return nn.functional.mse_loss(logits.squeeze(-1).float(), labels.float().view(-1))
        if problem == "multi_label_classification":
            return nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float())
        return nn.functional.cross_entropy(logits.float().view(-1, self.num_labels), labels.view(-1))


# Saving either class copies this file beside the weights and records it in ``auto_map``.
PooledEncoderConfig.register_for_auto_class()
PooledEncoderForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")

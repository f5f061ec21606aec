"""The tagging head: per-word tag scores from each word's first sub-token, softmax or CRF.

Example:
    >>> from encoder_tasks.testing import make_tiny_model
    >>> from encoder_tasks.backbone import load_encoder
    >>> from encoder_tasks.tasks.ner.args import NerSettings
    >>> model = build_model(load_encoder(make_tiny_model("bert")), NerSettings(label_names=["O", "B-X", "I-X"]))
    >>> type(model).__name__, model.crf is None, model.settings.label_names
    ('TokenTagger', True, ['O', 'B-X', 'I-X'])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers.utils import ModelOutput

from ...heads import EncoderWithHead, full_precision, head_dropout
from .args import NerSettings
from .crf import LinearChainCRF
from .features import IGNORE
from .schemes import allowed_transitions


@dataclass
class TokenTaggerOutput(ModelOutput):
    """Loss, per-word scores ``[batch, words, labels]`` and the features' indices (so the
    metrics can put length-sorted evaluation batches back in place)."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    feature_index: torch.Tensor | None = None


class TokenTagger(EncoderWithHead):
    """Per-word tag scores from each word's first sub-token, with an optional CRF.

    Built by hand, it describes itself with the settings its arguments imply (IOB2 labels,
    or plain tags when not ``constrained``), so it saves, reloads and exports like a trained
    one; :func:`build_model` gives it the full settings of a run.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = TokenTagger(load_encoder(make_tiny_model("bert")), label_names=["O", "B-X", "I-X"], crf=True)
        >>> out = model(input_ids=torch.tensor([[2, 5, 6, 3]]), word_index=torch.tensor([[1, 2]]),
        ...             labels=torch.tensor([[1, 2]]))
        >>> tuple(out.logits.shape), out.loss.ndim
        ((1, 2, 3), 0)
    """

    task = "ner"
    Settings = NerSettings

    @classmethod
    def from_settings(cls, encoder, settings: NerSettings, training=None) -> TokenTagger:
        """See :func:`build_model`."""
        return build_model(encoder, settings, training)

    def __init__(
        self,
        encoder,
        label_names: list[str],
        crf: bool = False,
        constrained: bool = True,
        dropout: float | None = None,
        label_subtokens: str = "first",
    ):
        super().__init__(
            encoder,
            label_names=list(label_names),
            crf=crf,
            constrained=constrained,
            dropout=dropout,
            label_subtokens=label_subtokens,
        )
        self.settings = NerSettings(
            label_names=list(label_names),
            tag_scheme="iob2" if constrained else "none",
            crf=crf,
            classifier_dropout=dropout,
            label_subtokens=label_subtokens,
        )
        self.label_names = list(label_names)
        self.num_labels = len(label_names)
        self.dropout = nn.Dropout(head_dropout(encoder.config, dropout))
        self.classifier = nn.Linear(encoder.config.hidden_size, self.num_labels)
        nn.init.normal_(self.classifier.weight, std=getattr(encoder.config, "initializer_range", 0.02))
        nn.init.zeros_(self.classifier.bias)
        self.crf = None
        if crf:
            allowed, start = allowed_transitions(label_names) if constrained else (None, None)
            self.crf = LinearChainCRF(self.num_labels, allowed, start)

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        word_index=None,
        labels=None,
        subtoken_targets=None,
        sentence_start=None,
        feature_index=None,
        length=None,  # kept in the signature so the Trainer keeps the column for length-sorted batches
        **kwargs,
    ):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encode(input_ids, attention_mask, token_type_ids, **kwargs)
        token_logits = full_precision(self.classifier, self.dropout(hidden))  # [batch, seq, labels]
        if word_index is None:  # every position is a word (plain token classification)
            word_index = torch.arange(input_ids.size(1), device=input_ids.device).expand_as(input_ids)
            word_index = word_index.masked_fill(attention_mask == 0, -1)
        word_mask = word_index >= 0
        gather = word_index.clamp(min=0).unsqueeze(-1).expand(-1, -1, self.num_labels)
        logits = token_logits.gather(1, gather) * word_mask.unsqueeze(-1)
        loss = None
        if labels is not None:
            loss = self.loss(
                logits, labels, word_mask, token_logits, subtoken_targets, word_index, sentence_start
            )
        return TokenTaggerOutput(loss=loss, logits=logits, feature_index=feature_index)

    def loss(self, logits, labels, word_mask, token_logits, subtoken_targets, word_index, sentence_start):
        # Losses run in fp32 even under bf16 autocast (the CRF switches autocast off itself).
        labels = labels.long()
        known = labels != IGNORE
        if self.crf is not None:
            # A CRF scores whole paths, so a word whose gold tag the model lacks (evaluation data
            # only) cannot be left out: it is scored as tag 0 (O).
            tags = labels.masked_fill(~known, 0)
            start = sentence_start if sentence_start is not None else True
            nll = self.crf.nll(logits, tags, word_mask, constrain_start=start)
            loss = nll.sum() / word_mask.sum().clamp(min=1)
            if subtoken_targets is not None:
                # "all": the CRF covers words; the other sub-tokens get a softmax loss of their own.
                rest = subtoken_targets.long().clone()
                rows = torch.arange(rest.size(0), device=rest.device).unsqueeze(1).expand_as(word_index)
                rest[rows[word_mask], word_index[word_mask]] = IGNORE
                if (rest != IGNORE).any():
                    loss = loss + nn.functional.cross_entropy(
                        token_logits.float().flatten(0, 1), rest.flatten(), ignore_index=IGNORE
                    )
            return loss
        if subtoken_targets is not None:
            return nn.functional.cross_entropy(
                token_logits.float().flatten(0, 1), subtoken_targets.long().flatten(), ignore_index=IGNORE
            )
        return nn.functional.cross_entropy(
            logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE
        )


def build_model(encoder, settings: NerSettings, training: Mapping[str, Any] | None = None) -> TokenTagger:
    """The tagger described by ``settings``; ``training["vocab_size"]`` (the tokenizer's size after
    ``--extend_vocabulary``) grows the encoder's embeddings first. A saved model's encoder
    config already has the grown size, so loading passes no ``training``."""
    vocab_size = (training or {}).get("vocab_size")
    embeddings = encoder.get_input_embeddings() if vocab_size else None  # training only
    if vocab_size and embeddings is not None and vocab_size > embeddings.num_embeddings:
        # New rows start at the mean of the old ones (transformers' default), not at random.
        encoder.resize_token_embeddings(vocab_size)
    model = TokenTagger(
        encoder,
        label_names=settings.label_names,
        crf=settings.crf,
        constrained=settings.constrained,
        dropout=settings.classifier_dropout,
        label_subtokens=settings.label_subtokens,
    )
    model.settings = settings
    return model

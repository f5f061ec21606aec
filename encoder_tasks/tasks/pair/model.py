"""The pair head: the classification head, saved as a ``pair`` model."""

from __future__ import annotations

from ..classification.model import SequenceClassifier


class PairClassifier(SequenceClassifier):
    """:class:`SequenceClassifier` saved as a ``pair`` model (so ``pair evaluate`` accepts it).

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> PairClassifier(load_encoder(make_tiny_model("bert")), num_labels=1).task
        'pair'
    """

    task = "pair"

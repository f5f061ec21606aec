"""The tagging trainer: a learning rate of its own for the new head and the CRF, and metrics
that decode with the CRF being trained.

Example:
    >>> from encoder_tasks.trainer import EncoderTaskTrainer
    >>> issubclass(NerTrainer, EncoderTaskTrainer)
    True
"""

from __future__ import annotations

from ...trainer import EncoderTaskTrainer
from .metrics import TaggingMetrics
from .model import TokenTagger


class NerTrainer(EncoderTaskTrainer):
    """Adds a separate learning rate for the head/CRF (read from ``task_args``: the
    ``--head_learning_rate`` and ``--crf_learning_rate`` flags) and lets the metrics decode
    with the CRF."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The metrics may be wrapped (the run records predictions): follow ``compute_metrics``.
        metrics, depth = self.compute_metrics, 0
        while metrics is not None and not isinstance(metrics, TaggingMetrics) and depth < 5:
            metrics, depth = getattr(metrics, "compute_metrics", None), depth + 1
        if isinstance(metrics, TaggingMetrics):
            metrics.bind(self)

    def _learning_rates(self) -> dict[str, float]:
        base = self.args.learning_rate
        head = getattr(self.task_args, "head_learning_rate", None) or base
        crf = getattr(self.task_args, "crf_learning_rate", None) or head
        return {"encoder": base, "head": head, "crf": crf}

    def has_own_rates(self, model) -> bool:
        return isinstance(model, TokenTagger)

    def learning_rate_of(self, name: str) -> float:
        """The encoder at ``--learning_rate`` (with ``--layer_lr_decay``), the classifier at
        ``--head_learning_rate``, the CRF at ``--crf_learning_rate``."""
        if name.startswith("encoder."):
            return super().learning_rate_of(name)
        return self._learning_rates()["crf" if name.startswith("crf.") else "head"]

    def weight_decay_of(self, name: str, decayed: bool) -> float:
        # Transition scores are not weights to shrink.
        return 0.0 if name.startswith("crf.") else super().weight_decay_of(name, decayed)

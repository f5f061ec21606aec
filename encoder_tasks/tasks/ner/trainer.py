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

    def create_optimizer(self, model=None):
        """AdamW groups: the encoder at ``--learning_rate``, the classifier at
        ``--head_learning_rate``, the CRF at ``--crf_learning_rate`` (never weight-decayed:
        transition scores are not weights to shrink)."""
        model = self.model if model is None else model
        if self.optimizer is not None or not isinstance(model, TokenTagger):
            return super().create_optimizer(model)
        rates = self._learning_rates()
        decay = set(self.get_decay_parameter_names(model))
        grouped: dict[tuple[str, bool], list] = {}
        for name, param in model.named_parameters():
            if not param.requires_grad:
                continue
            part = "crf" if name.startswith("crf.") else "encoder" if name.startswith("encoder.") else "head"
            decayed = name in decay and part != "crf"
            grouped.setdefault((part, decayed), []).append(param)
        groups = [
            {"params": params, "lr": rates[part], "weight_decay": self.args.weight_decay if decayed else 0.0}
            for (part, decayed), params in grouped.items()
        ]
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
        self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
        return self.optimizer

"""What a bi-encoder student learns from its teacher: its vectors, and its similarity margins.

For every text group of a training row (anchor, positive, hard negatives) the student's vector
must match the teacher's (squared distance, so the student lands in the teacher's space and the
teacher's saved index stays usable), plus MarginMSE on the pairs' cosine scores: with hard
negatives, the margin between the positive's and each negative's score; without, the margins
between every two pairs of the batch (scored pairs). The hard-label loss is the model's own
(MNRL, CoSENT or cosine), mixed in by ``--distill_alpha``.

Example:
    >>> import torch
    >>> d = EmbeddingDistiller()
    >>> v = torch.nn.functional.normalize(torch.randn(3, 4), dim=-1)
    >>> out = Embeddings(anchor=v, positive=v.flip(0), negatives=[])
    >>> float(d.soft_loss(out, {"anchor": v, "positive": v.flip(0)}, {}, 1.0))
    0.0
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ...distillation.distiller import Distiller, _token_keys
from ...distillation.losses import margin_mse_loss, mse_loss
from ...distillation.unlabelled import as_split, first_name, texts
from .args import SCORED_LOSSES, score_spec


@dataclass
class Embeddings:
    """The student's vectors of a batch, per text group (and its hard loss)."""

    anchor: torch.Tensor
    positive: torch.Tensor
    negatives: list[torch.Tensor] = field(default_factory=list)
    loss: torch.Tensor | None = None


def _groups(inputs) -> dict[str, dict]:
    groups = {"anchor": inputs["anchor"], "positive": inputs["positive"]}
    for index, negative in enumerate(inputs.get("negatives") or []):
        groups[f"negative_{index}"] = negative
    return groups


class EmbeddingDistiller(Distiller):
    task = "embedding"
    supports_unlabelled = True
    prune_columns = False

    def run_teacher(self, teacher, inputs):
        return {name: teacher.embed(**group) for name, group in _groups(inputs).items()}

    def targets(self, teacher_output, inputs):
        return dict(teacher_output)

    def row_keys(self, inputs):
        per_group = [_token_keys(group, name) for name, group in _groups(inputs).items()]
        return [b"".join(keys) for keys in zip(*per_group)]

    def student_outputs(self, model, inputs, stock):
        model = getattr(model, "module", model)  # the bi-encoder under a DDP wrapper
        anchor, positive = model.embed(**inputs["anchor"]), model.embed(**inputs["positive"])
        negatives = [model.embed(**group) for group in inputs.get("negatives") or []]
        if model.loss_name in SCORED_LOSSES:
            hard = model.loss_fn(anchor, positive, inputs["labels"])
        else:
            hard = model.loss_fn(anchor, positive, negatives)
        return hard, Embeddings(anchor, positive, negatives, hard)

    def unlabelled_outputs(self, model, inputs):
        model = getattr(model, "module", model)
        anchor = model.embed(**inputs["anchor"])
        return Embeddings(anchor, anchor)  # an unlabelled row is its text twice

    def soft_loss(self, outputs, targets, inputs, temperature):
        student = {"anchor": outputs.anchor, "positive": outputs.positive}
        student.update({f"negative_{i}": n for i, n in enumerate(outputs.negatives)})
        vectors = torch.stack([mse_loss(student[name], targets[name]) for name in student])
        return vectors.mean() + margin_mse_loss(self._scores(student), self._scores(targets))

    @staticmethod
    def _scores(vectors: dict[str, torch.Tensor]) -> torch.Tensor:
        anchor = vectors["anchor"]
        others = [vectors["positive"]] + [vectors[k] for k in sorted(vectors) if k.startswith("negative_")]
        scores = torch.stack([F.cosine_similarity(anchor.float(), o.float(), dim=-1) for o in others], dim=1)
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def unlabelled_split(self, split, task_args, settings):
        """Each text as a pair with itself (the hard loss never sees it)."""
        column = texts(split, task_args.text_column, "text")
        columns = {first_name(task_args.text_column): column, first_name(task_args.text_pair_column): column}
        spec = score_spec(task_args.score_column)
        if settings.loss in SCORED_LOSSES and spec:
            columns[first_name(spec)] = [float((settings.score_range or [0.0, 1.0])[1])] * len(column)
        return as_split(split, columns)

"""The per-task seam of distillation: :class:`Distiller` says which outputs are distilled and how.

A task's ``Task.distiller()`` returns one (``encoder_tasks/tasks/<task>/distill.py``); the
shared trainer (:mod:`.trainer`) calls only the methods below, so it never looks inside a task.

The teacher's outputs become *targets* (:meth:`Distiller.targets`): per task, what the student
must match (class logits, per-word emissions, start/end logits, vectors, vocabulary logits at
masked positions). Targets can be split into rows and joined back (:meth:`split_rows`,
:meth:`join_rows`), so :class:`TeacherCache` keeps them per example, keyed by the example's
token ids: order-free, so a shuffled epoch finds the rows of the last one.

Example:
    >>> import torch
    >>> d = Distiller()
    >>> rows = d.split_rows({"logits": torch.eye(2)}, {})
    >>> d.join_rows(rows, {}, "cpu")["logits"].tolist()
    [[1.0, 0.0], [0.0, 1.0]]
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import UserError

logger = logging.getLogger(__name__)


class Distiller:
    """Defaults fit a head with one fixed-size output per example (classification); tasks override."""

    #: Input keys that carry labels: not given to the teacher, dropped for unlabelled rows.
    label_keys: tuple[str, ...] = ("labels",)
    #: Whether the teacher's targets depend on the example alone (MLM's random masks do not).
    cacheable: bool = True
    #: The task's name, for messages.
    task: str = ""
    #: Whether the trainer's column pruning applies to unlabelled rows (a task whose training
    #: rows are columns its model does not name, like the bi-encoder's, says no).
    prune_columns: bool = True
    #: Whether ``--unlabelled_file`` works for the task, and if not, why.
    supports_unlabelled: bool = False
    no_unlabelled_reason: str = "the task has no way to read plain text as training rows"

    #: The settings of the run being distilled (set by :meth:`bind`).
    settings = None

    def bind(self, settings) -> None:
        """Learn the settings of the run (problem type, labels) once the data is prepared."""
        self.settings = settings

    # ---- the teacher -----------------------------------------------------------------------
    def without_labels(self, inputs: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in inputs.items() if k not in self.label_keys}

    def run_teacher(self, teacher: nn.Module, inputs: dict[str, Any]):
        """The teacher's forward pass over a training batch (called under ``torch.inference_mode``)."""
        return teacher(**self.without_labels(inputs))

    def targets(self, teacher_output, inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
        """What the student must match, batched (default: the logits)."""
        return {"logits": teacher_output.logits}

    def split_rows(
        self, targets: dict[str, torch.Tensor], inputs: dict[str, Any]
    ) -> list[dict[str, torch.Tensor]]:
        """Targets per example (to cache); the default suits fixed-size outputs."""
        size = next(iter(targets.values())).shape[0]
        return [{k: v[i] for k, v in targets.items()} for i in range(size)]

    def join_rows(
        self, rows: list[dict[str, torch.Tensor]], inputs: dict[str, Any], device
    ) -> dict[str, torch.Tensor]:
        """The inverse of :meth:`split_rows`, shaped for this batch."""
        return {k: torch.stack([row[k] for row in rows]).to(device) for k in rows[0]}

    def row_keys(self, inputs: dict[str, Any]) -> list[bytes]:
        """One key per example: its real tokens (padding left out, so any batch gives the same key)."""
        return _token_keys(inputs)

    # ---- the student -----------------------------------------------------------------------
    def student_outputs(self, model: nn.Module, inputs: dict[str, Any], stock: Callable[[], tuple]):
        """``(hard loss, outputs)`` of the student on a labelled batch; ``stock`` is the Trainer's
        own ``compute_loss`` (label smoothing, ``num_items_in_batch``), used by default."""
        return stock()

    def unlabelled_outputs(self, model: nn.Module, inputs: dict[str, Any]):
        """The student's outputs on a batch of unlabelled rows (no hard loss)."""
        return model(**self.without_labels(inputs))

    def soft_loss(
        self, outputs, targets: dict[str, torch.Tensor], inputs: dict[str, Any], temperature: float
    ):
        """The distillation term of the loss."""
        raise NotImplementedError

    def init_student(self, student: nn.Module, teacher: nn.Module) -> list[str]:
        """Start the student's head from the teacher's where shapes agree; returns what was copied.

        The encoder is the student's own (a layer subset of the teacher's, or another model).
        """
        mine = student.state_dict()
        copied = []
        with torch.no_grad():
            for name, tensor in teacher.state_dict().items():
                if name.startswith("encoder.") or name not in mine or mine[name].shape != tensor.shape:
                    continue
                mine[name].copy_(tensor)
                copied.append(name)
        return copied

    # ---- unlabelled text -------------------------------------------------------------------
    def unlabelled_split(self, split, task_args, settings):
        """Unlabelled rows in the training file's shape (placeholder labels, never used)."""
        raise UserError(f"{self.task}: --unlabelled_file is not supported: {self.no_unlabelled_reason}")


def _token_keys(inputs: dict[str, Any], prefix: str = "") -> list[bytes]:
    ids = inputs["input_ids"]
    mask = inputs.get("attention_mask")
    types = inputs.get("token_type_ids")
    keys = []
    for i in range(ids.shape[0]):
        real = mask[i].bool() if mask is not None else torch.ones_like(ids[i], dtype=torch.bool)
        digest = hashlib.blake2b(prefix.encode(), digest_size=16)
        digest.update(ids[i][real].cpu().numpy().tobytes())
        if types is not None:
            digest.update(types[i][real].cpu().numpy().tobytes())
        keys.append(digest.digest())
    return keys


class TeacherCache:
    """The teacher's targets per example, kept while they fit in ``budget_mb``.

    It decides once, on the first batch: the bytes of that batch's targets per example, times
    the examples of one epoch, must fit the budget; otherwise the teacher runs on every batch
    (said in the log). Targets are kept on the CPU.

    Example:
        >>> cache = TeacherCache(budget_mb=0, examples=10)  # 0: never kept
        >>> cache.put([b"k"], [{"x": torch.zeros(4)}])
        >>> cache.get([b"k"]) is None
        True
    """

    def __init__(self, budget_mb: float, examples: int):
        self.budget = int(budget_mb * 2**20)
        self.examples = examples
        self.enabled: bool | None = None if budget_mb > 0 else False
        self.rows: dict[bytes, dict[str, torch.Tensor]] = {}
        self.hits = self.misses = 0

    def decide(self, rows: list[dict[str, torch.Tensor]]) -> bool:
        if self.enabled is None:
            per_row = sum(t.numel() * t.element_size() for row in rows for t in row.values()) / max(
                len(rows), 1
            )
            need = per_row * self.examples
            self.enabled = need <= self.budget
            logger.info(
                "teacher outputs: %s (about %.1f MB for %d examples; --teacher_cache_mb %.0f)",
                "kept in memory, the teacher runs once per example"
                if self.enabled
                else "not kept (too large), the teacher runs on every batch",
                need / 2**20,
                self.examples,
                self.budget / 2**20,
            )
        return self.enabled

    def get(self, keys: list[bytes]) -> list[dict[str, torch.Tensor]] | None:
        if not self.enabled:
            return None
        rows = [self.rows.get(key) for key in keys]
        if any(row is None for row in rows):
            self.misses += 1
            return None
        self.hits += 1
        return rows

    def put(self, keys: list[bytes], rows: list[dict[str, torch.Tensor]]) -> None:
        if self.decide(rows):
            for key, row in zip(keys, rows):
                self.rows[key] = {k: v.detach().to("cpu") for k, v in row.items()}

"""Listwise reranker training: a query's passages scored together, the positive among them.

``pair train --listwise_negatives negative_1,negative_2,negative_3`` reads rows as
``embedding mine`` writes them (a query, its positive passage, its mined negatives) and trains
the pair model to put the positive first among the row's passages: each passage's relevance
is ``logit(1) - logit(0)`` of the two-label classifier, and the loss is the cross-entropy of
the positive under the softmax over the row's relevances (ListNet with one relevant passage;
the loss of sentence-transformers' ``CrossEncoder`` ``MultipleNegativesRankingLoss`` over the
given negatives). A pointwise (BCE) reranker learns each pair's label alone; a listwise one
learns the *order* a reranker is asked for.

The model saved is the usual pair classifier (labels ``0`` and ``1``): ``predict``, ``serve``,
``retrieve --rerank`` and ``--calibrate temperature`` (fitted on the validation pairs, so the
relevance is a probability) work on it unchanged. Validation rows in the same layout are scored
as labelled pairs (the positive 1, each negative 0).

Example:
    >>> import torch
    >>> logits = torch.tensor([[0.0, 2.0], [0.0, 0.0], [0.0, 1.0], [0.0, 3.0]])  # 2 groups of 2
    >>> round(float(listwise_loss(logits, group_size=2)), 4)
    1.1269
"""

from __future__ import annotations

import logging

import datasets
import torch

from ...data import Split, column_texts, name_list, resolve_column
from ...errors import UserError
from ...sampling import GroupBatchSampler
from ...trainer import EncoderTaskTrainer

logger = logging.getLogger(__name__)

#: The label names a listwise reranker is saved with: relevance is P("1").
LABELS = ("0", "1")


def expand_groups(split: Split, text_spec: str, pair_spec: str, negatives: list[str]) -> Split:
    """One row (query, positive, negatives...) -> ``1 + len(negatives)`` labelled pairs, the
    positive first, rows of a group consecutive (:class:`~encoder_tasks.sampling.GroupBatchSampler`
    and :func:`listwise_loss` rely on it). Every named column must be present and non-empty."""
    query_col = resolve_column(split, text_spec, "text")
    positive_col = resolve_column(split, pair_spec, "text_pair")
    missing = [c for c in negatives if c not in split.dataset.column_names]
    if missing:
        raise UserError(
            f"{split.source}: --listwise_negatives names column(s) {missing} that are not in the file; "
            f"found columns {split.dataset.column_names}"
        )
    queries = column_texts(split, query_col)
    passages = [column_texts(split, positive_col)] + [column_texts(split, c) for c in negatives]
    rows: dict[str, list] = {query_col: [], positive_col: [], "label": []}
    for i, query in enumerate(queries):
        for j, group in enumerate(passages):
            rows[query_col].append(query)
            rows[positive_col].append(group[i])
            rows["label"].append(LABELS[1] if j == 0 else LABELS[0])
    return Split(split.name, split.source, datasets.Dataset.from_dict(rows))


def listwise_loss(logits: torch.Tensor, group_size: int, scale: float | None = None) -> torch.Tensor:
    """Cross-entropy of each group's first row (the positive) under the softmax of the
    relevances ``logits[:, 1] - logits[:, 0]`` of its ``group_size`` rows; with ``scale``, of
    ``scale * P(1)`` instead (``P(1)`` is the sigmoid of the relevance): a bounded score, so a
    mined negative that is in fact relevant cannot be pushed down without limit.

    Example:
        >>> logits = torch.tensor([[0.0, 2.0], [0.0, 0.0]])  # one group: the positive, a negative
        >>> round(float(listwise_loss(logits, 2, scale=10.0)), 5)  # softmax of [8.808, 5.0]
        0.02195
    """
    if logits.shape[0] % group_size:
        raise ValueError(f"{logits.shape[0]} rows are not whole groups of {group_size}")
    relevance = (logits[:, 1] - logits[:, 0]).float().view(-1, group_size)
    if scale is not None:
        relevance = scale * torch.sigmoid(relevance)
    target = torch.zeros(relevance.shape[0], dtype=torch.long, device=relevance.device)
    return torch.nn.functional.cross_entropy(relevance, target)


class PairTrainer(EncoderTaskTrainer):
    """The pair task's trainer: the classification trainer, plus listwise training where
    ``--listwise_negatives`` names the negatives (whole groups per batch, the listwise loss;
    ``--per_device_train_batch_size`` counts queries then)."""

    @property
    def group_size(self) -> int | None:
        columns = name_list(getattr(self.task_args, "listwise_negatives", None))
        return 1 + len(columns) if columns else None

    def get_train_dataloader(self):
        size = self.group_size
        if size is None:
            return super().get_train_dataloader()
        dataset = self._remove_unused_columns(self.train_dataset, description="Training")
        if len(dataset) % size:
            raise UserError(f"listwise training: {len(dataset)} pairs are not whole groups of {size}")
        sampler = GroupBatchSampler(
            len(dataset) // size,
            size,
            self._train_batch_size,
            seed=self._data_seed,
            rank=self.args.process_index,
            world_size=self.args.world_size,
            drop_last=self.args.dataloader_drop_last,
        )
        self._seeded_sampler = sampler
        logger.info(
            "listwise training: %d queries with %d passages each, %d queries a batch",
            len(dataset) // size,
            size,
            self._train_batch_size,
        )
        return self._batch_sampler_dataloader(dataset, sampler, self.data_collator)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        size = self.group_size
        if size is None or not model.training:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        features = {k: v for k, v in inputs.items() if k != "labels"}
        outputs = model(**features)
        loss = listwise_loss(outputs.logits, size, getattr(self.task_args, "listwise_scale", None))
        return (loss, outputs) if return_outputs else loss

"""Listwise reranker training: a query's passages scored together, the positive among them.

``pair train --listwise_negatives negative_1,negative_2,negative_3`` reads rows as
``embedding mine`` writes them (a query, its positive passage, its mined negatives) and trains
the pair model to put the positive first among the row's passages: each passage's relevance
is ``logit(1) - logit(0)`` of the two-label classifier, and the loss is the cross-entropy of
the positive under the softmax over the row's relevances (ListNet with one relevant passage;
the loss of sentence-transformers' ``CrossEncoder`` ``MultipleNegativesRankingLoss`` over the
given negatives). A pointwise (BCE) reranker learns each pair's label alone; a listwise one
learns the *order* a reranker is asked for.

``--listwise_in_batch_negatives N`` adds N easy negatives to each query's list, drawn afresh
each step from the other rows of its batch (:class:`InBatchNegatives`), as sentence-transformers'
listwise loss does: the mined negatives teach the fine distinctions, the random ones keep the
score of an unrelated passage low. A cross-encoder scores every (query, passage) pair in its own
forward pass, so each costs as much as a mined one.

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
import random

import datasets
import torch

from ...data import Split, column_texts, name_list, resolve_column
from ...errors import UserError
from ...sampling import EpochSeededCollator, GroupBatchSampler
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


#: The training column that ties a tokenised pair to its texts, for :class:`InBatchNegatives`.
PAIR_INDEX = "pair_index"
#: The batch key that tells :meth:`PairTrainer.compute_loss` how many passages each query has.
GROUP_SIZE_KEY = "listwise_group_size"


class InBatchNegatives:
    """A listwise training collator that adds ``count`` in-batch negatives to every group.

    A batch holds whole groups of ``group_size`` tokenised pairs (the query with its positive,
    then its mined negatives), each row carrying its :data:`PAIR_INDEX` into ``queries`` and
    ``passages``. For each group, ``count`` passages are drawn (from Python's ``random``, which
    :class:`~encoder_tasks.sampling.EpochSeededCollator` seeds per batch and epoch) from the other
    groups' passages, skipping any equal to the group's own positive; each is tokenised with the
    group's query (same truncation as training) and appended to the group, labelled ``0``. Where
    some group has fewer candidates, every group gets that many, so groups stay equal in size;
    the batch's :data:`GROUP_SIZE_KEY` says the size. Rows without a pair index (evaluation) pass
    straight to ``collator``.

    Example:
        >>> from encoder_tasks.collators import PaddingCollator
        >>> from encoder_tasks.testing import make_tiny_tokenizer
        >>> tok = make_tiny_tokenizer()
        >>> queries, passages = ["a", "a", "b", "b"], ["c", "d", "e", "c"]  # 2 groups of 2
        >>> rows = [{**tok(q, p), "labels": int(i % 2 == 0), PAIR_INDEX: i}
        ...         for i, (q, p) in enumerate(zip(queries, passages))]
        >>> collate = InBatchNegatives(PaddingCollator(tok), tok, queries, passages, 2, count=1, max_length=16)
        >>> batch = collate(rows)  # group "b" may draw "c" (its own positive is "e"); group "a" cannot
        >>> int(batch[GROUP_SIZE_KEY]), batch["input_ids"].shape[0], batch["labels"].tolist()
        (3, 6, [1, 0, 0, 1, 0, 0])
    """

    def __init__(self, collator, tokenizer, queries: list[str], passages: list[str], group_size: int,
                 count: int, max_length: int):  # fmt: skip
        self.collator, self.tokenizer = collator, tokenizer
        self.queries, self.passages = queries, passages
        self.group_size, self.count, self.max_length = group_size, count, max_length

    def __call__(self, features: list[dict]):
        if not features or PAIR_INDEX not in features[0]:
            return self.collator(features)
        size = self.group_size
        groups = [features[i : i + size] for i in range(0, len(features), size)]
        indices = [[row[PAIR_INDEX] for row in group] for group in groups]
        pools = []
        for g, own in enumerate(indices):
            positive = self.passages[own[0]]
            others = (self.passages[i] for h, other in enumerate(indices) if h != g for i in other)
            pools.append([p for p in others if p != positive])
        count = min([self.count, *(len(pool) for pool in pools)])
        drawn = [random.sample(pool, count) for pool in pools]
        # A batch of one group (an epoch's last, say) has nothing to draw, and the tokenizer
        # refuses an empty list: such a batch trains on its own rows.
        encoded = (
            self.tokenizer(
                [self.queries[own[0]] for own in indices for _ in range(count)],
                [p for group in drawn for p in group],
                truncation=True,
                max_length=self.max_length,
            )
            if count
            else {}
        )
        rows, n = [], 0
        for group in groups:
            rows.extend(group)
            for _ in range(count):
                rows.append({**{k: encoded[k][n] for k in encoded.keys()}, "labels": group[-1]["labels"]})
                n += 1
        batch = self.collator(rows)
        batch[GROUP_SIZE_KEY] = torch.tensor(size + count)
        return batch


def with_in_batch_negatives(
    prepared, expanded: Split, tokenizer, task_args, group_size: int, max_length: int
):
    """``prepared`` with its training pairs tied to their texts (:data:`PAIR_INDEX`) and a
    collator that adds ``--listwise_in_batch_negatives`` to each group of ``group_size`` pairs
    (:class:`InBatchNegatives`). ``expanded`` is the training split as :func:`expand_groups`
    made it (rows in the order ``prepared.train`` holds them)."""
    import dataclasses

    queries = column_texts(expanded, resolve_column(expanded, task_args.text_column, "text"))
    passages = column_texts(expanded, resolve_column(expanded, task_args.text_pair_column, "text_pair"))
    train = prepared.train.add_column(PAIR_INDEX, list(range(len(prepared.train))))
    count = task_args.listwise_in_batch_negatives
    base = prepared.collator
    return dataclasses.replace(
        prepared,
        train=train,
        collator=lambda pad: InBatchNegatives(
            base(pad), tokenizer, queries, passages, group_size, count, max_length
        ),
    )


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
        dataset = self.train_dataset
        if PAIR_INDEX not in dataset.column_names:  # (InBatchNegatives reads it; the padding drops it)
            dataset = self._remove_unused_columns(dataset, description="Training")
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
        # In-batch negatives are drawn under a per-(seed, epoch, batch) RNG: see EpochSeededCollator.
        self._epoch_seeded_collator = EpochSeededCollator(self.data_collator, self._data_seed)
        extra = getattr(self.task_args, "listwise_in_batch_negatives", 0)
        logger.info(
            "listwise training: %d queries with %d passages each%s, %d queries a batch",
            len(dataset) // size,
            size,
            f" and {extra} in-batch negatives" if extra else "",
            self._train_batch_size,
        )
        return self._batch_sampler_dataloader(dataset, sampler, self._epoch_seeded_collator)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        size = self.group_size
        if size is None or not model.training:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if GROUP_SIZE_KEY in inputs:  # the group grew by its in-batch negatives
            size = int(inputs[GROUP_SIZE_KEY])
        features = {k: v for k, v in inputs.items() if k not in ("labels", GROUP_SIZE_KEY)}
        outputs = model(**features)
        loss = listwise_loss(outputs.logits, size, getattr(self.task_args, "listwise_scale", None))
        return (loss, outputs) if return_outputs else loss

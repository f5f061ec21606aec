"""Token-budget training batches (``--max_tokens_per_batch``): each step filled with as many texts as fit.

A batch holds at most ``max_tokens`` tokens counted as the model computes them: (the longest
text in the batch, padded up to ``pad_to_multiple_of``) x (texts in the batch). Short texts
make big batches and long ones small batches, so every step does about the same work and
almost none of it is padding.

How an epoch's batches are made, from (seed, epoch) alone:

1. the texts are sorted by padded length, longest first, texts of equal padded length in a
   random order;
2. the sorted texts are cut greedily: each batch takes as many texts as fit under the budget at
   its first (longest) length;
3. the batches are shuffled, and the one holding the longest texts goes first, so a budget too
   large for the device's memory fails on the first step, not hours in.

Not mega-batches (shuffle, cut into chunks, sort each chunk, as ``LengthGroupedSampler``
does): their number of batches changes from epoch to epoch, and the Trainer needs one count
for every epoch. It sizes the learning-rate schedule from it, and a resumed run finds its place
as ``global_step % steps_per_epoch``. Here the cut depends on the lengths alone (the same
batch sizes every epoch; only which texts of equal padded length share a batch and the batches'
order change: fairseq's bucketing), so ``len()`` is exact and constant.

Several processes: the number of batches is rounded up to a multiple of the number of
processes by splitting the largest batches in two (a part of a batch stays under the budget,
and no text is seen twice), and process ``i`` takes every ``n``-th batch from the ``i``-th:
whole batches, the same number of steps on every process, every text once per epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler

from .errors import UserError


def padded_length(length: int, multiple: int | None) -> int:
    """``length`` rounded up to a multiple of ``multiple`` (None or 0: unchanged).

    Example:
        >>> padded_length(13, 8), padded_length(16, 8), padded_length(13, None)
        (16, 16, 13)
    """
    if not multiple or multiple <= 1:
        return int(length)
    return -(-int(length) // multiple) * multiple


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Batches of at most ``max_tokens`` padded tokens, seeded by (seed, epoch); see the module.

    Args:
        lengths: each training example's length in tokens (before padding).
        max_tokens: the budget: (longest padded length in a batch) x (examples in it).
        pad_to_multiple_of: the collator's padding multiple (None or 0: none).
        seed: with the epoch (:meth:`set_epoch`), decides the order; nothing else does.
        num_processes, process_index: this process's share of every epoch's batches.

    Raises:
        UserError: an example longer than the budget (a batch must hold at least one), or
            fewer examples than processes.

    Example:
        >>> sampler = TokenBudgetBatchSampler([3, 9, 2, 8, 3, 4], max_tokens=16, seed=1)
        >>> batches = list(sampler)
        >>> len(batches) == len(sampler), sorted(i for b in batches for i in b)
        (True, [0, 1, 2, 3, 4, 5])
        >>> all(len(b) * sampler.padded[b].max() <= 16 for b in batches)  # the budget, padding included
        True
    """

    def __init__(
        self,
        lengths: Sequence[int],
        max_tokens: int,
        *,
        pad_to_multiple_of: int | None = None,
        seed: int = 0,
        num_processes: int = 1,
        process_index: int = 0,
    ):
        self.max_tokens = int(max_tokens)
        if self.max_tokens < 1:
            raise UserError(f"--max_tokens_per_batch must be a positive number of tokens, found {max_tokens}")
        self.pad_to_multiple_of = pad_to_multiple_of
        #: Each example's length as the collator pads it (a batch costs its longest one x its size).
        self.padded = np.asarray([padded_length(n, pad_to_multiple_of) for n in lengths], dtype=np.int64)
        self.seed = int(seed)
        self.epoch = 0
        self.num_processes = max(1, int(num_processes))
        self.process_index = int(process_index)
        if len(self.padded) and int(self.padded.max()) > self.max_tokens:
            longest = int(max(lengths))
            padded = int(self.padded.max())
            shown = f"{longest} tokens" + (
                f" ({padded} padded to a multiple of {pad_to_multiple_of})" if padded != longest else ""
            )
            raise UserError(
                f"--max_tokens_per_batch {self.max_tokens} is smaller than the longest training example, "
                f"{shown}: a batch must hold at least one example; raise it to {padded} or more, or lower "
                "--max_length"
            )
        #: Examples per batch, in sorted (longest first) order: the same every epoch.
        self.sizes = self._batch_sizes()

    def _batch_sizes(self) -> list[int]:
        descending = np.sort(self.padded)[::-1]
        sizes, start = [], 0
        while start < len(descending):
            size = min(self.max_tokens // int(descending[start]), len(descending) - start)
            sizes.append(size)
            start += size
        # Whole batches for every process and the same number of steps: split the largest
        # batches (a part of a batch stays under the budget) until the count divides evenly.
        while len(sizes) % self.num_processes:
            largest = max(range(len(sizes)), key=sizes.__getitem__)
            if sizes[largest] < 2:
                raise UserError(
                    f"{len(descending)} training examples cannot give each of {self.num_processes} processes "
                    "the same number of batches; use fewer processes or more data"
                )
            half = sizes[largest] // 2
            sizes[largest : largest + 1] = [sizes[largest] - half, half]
        return sizes

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def batches(self) -> list[list[int]]:
        """Every process's batches of the current epoch, in order (process ``i`` takes ``[i::n]``)."""
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        shuffled = torch.randperm(len(self.padded), generator=generator).numpy()
        # Longest first; a stable sort keeps the random order among equal padded lengths.
        order = shuffled[np.argsort(-self.padded[shuffled], kind="stable")]
        cut = np.split(order, np.cumsum(self.sizes)[:-1]) if self.sizes else []
        ranked = torch.randperm(len(cut), generator=generator).tolist()
        if ranked:
            ranked.remove(0)  # batch 0 holds the longest texts: first, so running out of memory shows at once
            ranked.insert(0, 0)
        return [cut[i].tolist() for i in ranked]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches()[self.process_index :: self.num_processes])

    def __len__(self) -> int:
        return len(self.sizes) // self.num_processes

    def padded_tokens(self) -> int:
        """Tokens an epoch feeds the model, padding included (the same every epoch)."""
        descending = np.sort(self.padded)[::-1]
        starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        return int(sum(int(descending[s]) * size for s, size in zip(starts, self.sizes)))

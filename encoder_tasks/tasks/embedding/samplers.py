"""A batch sampler that keeps two copies of the same text out of one batch.

With in-batch negatives a duplicate is poison: if a positive text also appears as another
row's positive, the model is trained to push a text away from itself. The sampler shuffles
(seeded, a new order each epoch) and fills each batch with rows whose texts are not yet in
it; skipped rows wait for a later batch.

Under several processes every process builds the same *global* batches (same seed) of
``batch_size x world_size`` rows and takes its own slice, so gathered negatives are
duplicate-free across devices too.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterator, Sequence

from torch.utils.data import Sampler


class DuplicateFreeBatchSampler(Sampler[list[int]]):
    """Yield lists of row indices; no text (key) occurs twice in one (global) batch.

    ``keys[i]`` holds the texts of row ``i`` (anchor, positive, negatives), as anything
    hashable (strings, token-id tuples).

    Example:
        >>> keys = [("a", "b"), ("a", "c"), ("d", "e"), ("f", "g")]
        >>> batches = list(DuplicateFreeBatchSampler(keys, batch_size=2, seed=0))
        >>> sorted(i for b in batches for i in b), all(not {0, 1} <= set(b) for b in batches)
        ([0, 1, 2, 3], True)
    """

    def __init__(
        self,
        keys: Sequence[Sequence[Hashable]],
        batch_size: int,
        drop_last: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.keys = [tuple(k) for k in keys]
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self._length: tuple[int, int] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def global_batches(self, epoch: int) -> list[list[int]]:
        """All global batches of one epoch (the same on every process)."""
        order = list(range(len(self.keys)))
        random.Random(self.seed + epoch).shuffle(order)
        size = self.batch_size * self.world_size
        batches: list[list[int]] = []
        remaining = order
        while remaining:
            batch, seen, skipped = [], set(), []
            for position, index in enumerate(remaining):
                texts = self.keys[index]
                if len(batch) < size and seen.isdisjoint(texts):
                    batch.append(index)
                    seen.update(texts)
                    if len(batch) == size:
                        skipped.extend(remaining[position + 1 :])
                        break
                else:
                    skipped.append(index)
            batches.append(batch)
            remaining = skipped
        # The last batches can be short (leftover rows that clash with each other). Every
        # process needs at least one row of each batch, or the gather waits forever.
        smallest = size if self.drop_last else self.world_size
        return [batch for batch in batches if len(batch) >= smallest]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.global_batches(self.epoch)
        self.epoch += 1  # a fresh order next time, even if nobody calls set_epoch
        for batch in batches:
            # Strided: processes differ by at most one row, and each has at least one.
            yield batch[self.rank :: self.world_size]

    def __len__(self) -> int:
        if self._length is None or self._length[0] != self.epoch:
            self._length = (self.epoch, len(self.global_batches(self.epoch)))
        return self._length[1]

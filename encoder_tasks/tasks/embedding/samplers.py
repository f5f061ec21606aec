"""A batch sampler that keeps two copies of the same text out of one batch.

With in-batch negatives a duplicate is poison: if a positive text also appears as another
row's positive, the model is trained to push a text away from itself. The sampler shuffles
(seeded, a new order each epoch) and fills each batch with rows whose texts are not yet in
it; skipped rows wait for a later batch.

Mined negatives gather on a few popular texts (one Chinese paragraph is the mined negative of
56 of 1,500 rows), and a batch that may hold each text once then needs at least that many
batches: the epoch ends in ever shorter ones with few in-batch negatives each. Given
``shared`` texts per row (the mined negatives), the sampler lets several rows of a batch share
such a text, as long as it is no row's anchor or positive in that batch: a repeated negative is
still a true negative for every query, while a negative that is another row's positive would
not be.

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
    hashable (strings, token-id tuples). ``shared[i]``, if given, holds row ``i``'s texts that
    other rows of its batch may hold too, in their own ``shared`` (its mined negatives); they
    must still be no other row's ``keys`` text of that batch.

    Example:
        >>> keys = [("a", "b"), ("a", "c"), ("d", "e"), ("f", "g")]
        >>> batches = list(DuplicateFreeBatchSampler(keys, batch_size=2, seed=0))
        >>> sorted(i for b in batches for i in b), all(not {0, 1} <= set(b) for b in batches)
        ([0, 1, 2, 3], True)
        >>> keys, negatives = [("q1", "p1"), ("q2", "p2")], [("n",), ("n",)]
        >>> list(DuplicateFreeBatchSampler(keys, batch_size=2, shared=negatives))
        [[0, 1]]
    """

    def __init__(
        self,
        keys: Sequence[Sequence[Hashable]],
        batch_size: int,
        drop_last: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shared: Sequence[Sequence[Hashable]] | None = None,
    ):
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if shared is not None and len(shared) != len(keys):
            raise ValueError(f"shared holds {len(shared)} rows, keys {len(keys)}: one entry a row in each")
        self.keys = [tuple(k) for k in keys]
        self.shared = [tuple(k) for k in shared] if shared is not None else [() for _ in self.keys]
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        # The last epoch's batches: len(), iteration and the trainer's report all ask for them,
        # and building them takes a pass over the rows per batch where texts repeat.
        self._built: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def global_batches(self, epoch: int) -> list[list[int]]:
        """All global batches of one epoch (the same on every process; built once, not to be
        changed by the caller)."""
        if self._built is None or self._built[0] != epoch:
            self._built = (epoch, self._build(epoch))
        return self._built[1]

    def _build(self, epoch: int) -> list[list[int]]:
        order = list(range(len(self.keys)))
        random.Random(self.seed + epoch).shuffle(order)
        size = self.batch_size * self.world_size
        batches: list[list[int]] = []
        remaining = order
        while remaining:
            # seen: every text of the batch so far; owned: the ones no other row may hold.
            batch, seen, owned, skipped = [], set(), set(), []
            for position, index in enumerate(remaining):
                texts, shared = self.keys[index], self.shared[index]
                if len(batch) < size and seen.isdisjoint(texts) and owned.isdisjoint(shared):
                    batch.append(index)
                    owned.update(texts)
                    seen.update(texts)
                    seen.update(shared)
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
        return len(self.global_batches(self.epoch))

"""The order training and evaluation batches come in, for :class:`~encoder_tasks.trainer.EncoderTaskTrainer`.

- length-grouped training batches come from a sampler seeded by (seed, epoch), so a resumed
  run sees the same batches in the same order as an uninterrupted one;
- training collators (MLM masks) draw their random numbers from an RNG seeded by (seed, epoch,
  the batch's content), so a resumed run draws the same masks;
- a callback tells both which epoch starts;
- evaluation batches are sorted by length (less padding, same metrics).

Token-budget batches (``--max_tokens_per_batch``) are :mod:`encoder_tasks.token_batches`.
"""

from __future__ import annotations

import random
import zlib

import numpy as np
import torch
from transformers import TrainerCallback
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices


class SeededLengthGroupedSampler(LengthGroupedSampler):
    """transformers' length-grouped sampler, shuffled by a generator seeded with (seed, epoch).

    The stock sampler draws from the global RNG at the moment an epoch starts; a run resumed
    mid-epoch reaches that moment with a different RNG state and so trains on other batches.
    Seeding by epoch makes the order a function of (seed, epoch) alone.

    Example:
        >>> s = SeededLengthGroupedSampler(2, lengths=[5, 1, 3, 2, 4, 6], seed=1)
        >>> s.set_epoch(1); first = list(s); s.set_epoch(1)
        >>> first == list(s), sorted(first)
        (True, [0, 1, 2, 3, 4, 5])
    """

    def __init__(self, batch_size: int, lengths: list[int], seed: int = 0):
        super().__init__(batch_size, lengths=lengths)
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))


class EpochSeededCollator:
    """Run a training collator with the RNG seeded by (seed, epoch, the batch's content).

    Collators may draw random numbers (MLM masks). The Trainer collates one batch ahead and
    saves the RNG state after a step, so masks drawn from the global RNG cannot be replayed
    exactly by a resumed run. Seeding each batch from what it holds and the epoch keeps masks
    fresh every epoch, makes them independent of prefetching, and leaves the global RNG (used
    by dropout) untouched.

    Example:
        >>> import torch
        >>> noisy = EpochSeededCollator(lambda rows: torch.rand(len(rows)), seed=0)
        >>> rows = [{"input_ids": [1, 2]}, {"input_ids": [3]}]
        >>> bool((noisy(rows) == noisy(rows)).all())
        True
        >>> noisy.epoch = 1
        >>> first = noisy(rows); noisy.epoch = 0
        >>> bool((first == noisy(rows)).all())
        False
    """

    def __init__(self, collator, seed: int):
        self.collator = collator
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _batch_seed(self, features) -> int:
        digest = zlib.crc32(f"{self.seed}:{self.epoch}".encode())
        for feature in features:
            items = sorted(feature.items()) if isinstance(feature, dict) else [("", feature)]
            for key, value in items:
                try:
                    data = np.asarray(value).tobytes()
                except (TypeError, ValueError):
                    data = repr(value).encode()
                digest = zlib.crc32(str(key).encode() + data, digest)
        return digest

    def __call__(self, features):
        seed = self._batch_seed(features)
        python_state, numpy_state = random.getstate(), np.random.get_state()
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)  # CPU only: CUDA streams stay as they are
            random.seed(seed)
            np.random.seed(seed)
            try:
                return self.collator(features)
            finally:
                random.setstate(python_state)
                np.random.set_state(numpy_state)


class GroupBatchSampler(torch.utils.data.Sampler):
    """Batches of whole groups: rows ``g * group_size`` to ``g * group_size + group_size - 1``
    form group ``g`` (a query with its candidate passages, scored together by a listwise loss),
    and a batch holds ``batch_groups`` groups per process, in an order seeded by (seed, epoch).

    Every process draws the same order and takes its own share of each global batch; a last
    global batch too small to give every process a group is dropped (with ``drop_last``, any
    short one).

    Example:
        >>> batches = list(GroupBatchSampler(groups=3, group_size=2, batch_groups=2, seed=0))
        >>> [sorted(b) for b in batches], len(batches)
        ([[0, 1, 2, 3], [4, 5]], 2)
        >>> [len(b) for b in GroupBatchSampler(3, 2, batch_groups=1, seed=0, rank=1, world_size=2)]
        [2]
    """

    def __init__(self, groups: int, group_size: int, batch_groups: int, seed: int = 0, rank: int = 0,
                 world_size: int = 1, drop_last: bool = False):  # fmt: skip
        if group_size < 1 or batch_groups < 1:
            raise ValueError("group_size and batch_groups must be at least 1")
        self.groups, self.group_size, self.batch_groups = groups, group_size, batch_groups
        self.seed, self.rank, self.world_size, self.drop_last = seed, rank, world_size, drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _global_batches(self) -> list[list[int]]:
        order = list(range(self.groups))
        random.Random(zlib.crc32(f"{self.seed}:{self.epoch}".encode())).shuffle(order)
        size = self.batch_groups * self.world_size
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        smallest = size if self.drop_last else self.world_size
        return [b for b in batches if len(b) >= smallest]

    def __iter__(self):
        for batch in self._global_batches():
            share = len(batch) // self.world_size
            mine = batch[self.rank * share : (self.rank + 1) * share]
            yield [g * self.group_size + j for g in mine for j in range(self.group_size)]

    def __len__(self) -> int:
        return len(self._global_batches())


class EpochSeeds(TrainerCallback):
    """Tell the seeded sampler and collator which epoch starts.

    accelerate forwards ``set_epoch`` through some sampler wrappers but not others (a resumed
    multi-process run wraps ours in ``SkipBatchSampler(BatchSamplerShard(...))``, which it
    does not reach), so the epoch is set here, from the trainer state, as well.

    Example:
        >>> from types import SimpleNamespace
        >>> sampler = SeededLengthGroupedSampler(2, lengths=[3, 1], seed=0)
        >>> trainer = SimpleNamespace(_seeded_sampler=sampler, _epoch_seeded_collator=None)
        >>> EpochSeeds(trainer).on_epoch_begin(None, SimpleNamespace(epoch=2.0), None)
        >>> sampler.epoch
        2
    """

    def __init__(self, trainer):
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs):
        epoch = int(state.epoch or 0)
        for name in ("_epoch_seeded_collator", "_seeded_sampler"):
            target = getattr(self.trainer, name, None)
            if target is not None:
                target.set_epoch(epoch)


class LengthSortedEvalMixin:
    """Evaluate in length-sorted order: far less padding, and metrics are order-free."""

    length_column = "length"
    #: False: evaluate in dataset order (``--write_predictions`` pairs each prediction with its row).
    sort_eval = True

    def _get_eval_sampler(self, eval_dataset):
        if not self.sort_eval:  # (transformers' own sampler may sort too: group_by_length)
            return torch.utils.data.SequentialSampler(eval_dataset)
        lengths = None
        if self.args.world_size <= 1 and hasattr(eval_dataset, "column_names"):
            # The Trainer drops columns forward() does not name (often `length`) before it
            # asks for a sampler, so fall back to measuring the token ids.
            if self.length_column in eval_dataset.column_names:
                lengths = list(eval_dataset[self.length_column])
            elif "input_ids" in eval_dataset.column_names:
                lengths = [len(ids) for ids in eval_dataset["input_ids"]]
        if lengths is not None:
            return sorted(range(len(lengths)), key=lengths.__getitem__)
        return super()._get_eval_sampler(eval_dataset)

"""``EncoderTaskTrainer``: the base ``transformers.Trainer`` for every task.

It overrides only what differs from the stock Trainer:
- saving: heads are plain modules, so checkpoints are written with the head's own
  ``save_pretrained`` (config, weights, label names), and every checkpoint reloads;
- checkpoints are written atomically (``tmp-checkpoint-N``, then renamed; see
  :mod:`encoder_tasks.checkpoints`), so a kill never leaves a half-written one to resume;
- every process's RNG state is written by the process that saves (not by each process), so
  on several machines with their own disks only the writer's disk gets a checkpoint;
- length-grouped training batches come from a sampler seeded by (seed, epoch), so a resumed
  run sees the same batches in the same order as an uninterrupted one;
- ``--max_tokens_per_batch``: training batches of a token budget rather than a number of
  examples (:mod:`encoder_tasks.token_batches`), seeded the same way;
- evaluation batches are sorted by length (less padding, same metrics);
- a NaN/inf training loss stops the run at once with a clear message (last good checkpoint kept).
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
import zlib
from functools import partial
from pathlib import Path

import numpy as np
import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints, seed_worker

from . import checkpoints
from .errors import UserError
from .heads import EncoderWithHead
from .token_batches import TokenBudgetBatchSampler
from .training_args import check_token_budget

logger = logging.getLogger(__name__)


class NonFiniteLossError(UserError):
    """Training produced a NaN or infinite loss."""


def check_finite_loss(loss: torch.Tensor, state, output_dir: str) -> None:
    """Raise :class:`NonFiniteLossError` if ``loss`` is NaN/inf, naming the last good checkpoint."""
    if bool(torch.isfinite(loss).all()):
        return
    last = checkpoints.last_complete_checkpoint(output_dir) if output_dir else None
    kept = (
        f"the last good checkpoint, {last.name}, is kept in {output_dir} (continue it with --resume)"
        if last is not None
        else "no checkpoint was written before it"
    )
    raise NonFiniteLossError(
        f"training loss became {loss.float().mean().item()} at step {state.global_step + 1} "
        f"(epoch {state.epoch or 0:.2f}); lower --learning_rate, set --max_grad_norm, or check the "
        f"labels for extreme values; {kept}"
    )


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


class _EpochSeeds(TrainerCallback):
    """Tell the seeded sampler and collator which epoch starts.

    accelerate forwards ``set_epoch`` through some sampler wrappers but not others (a resumed
    multi-process run wraps ours in ``SkipBatchSampler(BatchSamplerShard(...))``, which it
    does not reach), so the epoch is set here, from the trainer state, as well.
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
            import torch.utils.data

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


class EncoderTaskTrainer(LengthSortedEvalMixin, Trainer):
    """Trainer for :class:`~encoder_tasks.heads.EncoderWithHead` models.

    Example:
        >>> from encoder_tasks import EncoderTaskTrainer
        >>> issubclass(EncoderTaskTrainer, Trainer)
        True
    """

    def __init__(self, *args, task_settings=None, task_args=None, **kwargs):
        super().__init__(*args, **kwargs)
        #: The task's saved settings (:class:`~encoder_tasks.task.TaskSettings`) and its flags:
        #: task trainers read their options here, not from the model.
        self.task_settings = task_settings
        self.task_args = task_args
        self._epoch_seeded_collator = None
        self._seeded_sampler = None
        self.add_callback(_EpochSeeds(self))
        if getattr(self.args, "max_tokens_per_batch", None):
            model = (
                self.accelerator.unwrap_model(self.model, keep_torch_compile=False) if self.model else None
            )
            check_token_budget(self.args, getattr(model, "task", ""))

    @property
    def _data_seed(self) -> int:
        return self.args.data_seed if self.args.data_seed is not None else self.args.seed

    def get_train_dataloader(self):
        # Training batches are collated under a per-(seed, epoch, batch) RNG: see EpochSeededCollator.
        collator = self.data_collator
        self._epoch_seeded_collator = EpochSeededCollator(collator, self._data_seed)
        self.data_collator = self._epoch_seeded_collator
        try:
            if getattr(self.args, "max_tokens_per_batch", None):
                return self._token_budget_dataloader()
            return super().get_train_dataloader()
        finally:
            self.data_collator = collator

    def _token_budget_dataloader(self):
        """Training batches of at most ``--max_tokens_per_batch`` padded tokens, whole batches per process.

        Built here rather than by the stock ``_get_dataloader``, which passes only its own
        batch samplers as ``batch_sampler``. Loader options are the stock ones.
        """
        import datasets
        from torch.utils.data import DataLoader

        args = self.args
        config = args.accelerator_config
        if args.world_size > 1 and (config.split_batches or config.dispatch_batches):
            raise UserError(
                "--max_tokens_per_batch gives each process whole batches of its own; it does not work with "
                "accelerator_config split_batches or dispatch_batches"
            )
        dataset, collator = self.train_dataset, self.data_collator
        if not hasattr(dataset, "__len__"):
            raise UserError("--max_tokens_per_batch needs a training set of known size (not a streamed one)")
        if isinstance(dataset, datasets.Dataset):
            dataset = self._remove_unused_columns(dataset, description="Training")
        else:
            collator = self._get_collator_with_removed_columns(collator, description="Training")
        sampler = TokenBudgetBatchSampler(
            self._train_lengths(dataset),
            args.max_tokens_per_batch,
            pad_to_multiple_of=args.pad_to_multiple_of,
            seed=self._data_seed,
            num_processes=args.world_size,
            process_index=args.process_index,
        )
        self._seeded_sampler = sampler
        examples, batches = len(sampler.padded), len(sampler.sizes)
        shares = f" ({len(sampler):,} per process)" if args.world_size > 1 else ""
        logger.info(
            "training batches of at most %s tokens: %s per epoch%s, %.1f examples each on average, %s padded "
            "tokens per epoch (--per_device_train_batch_size does not apply)",
            f"{args.max_tokens_per_batch:,}",
            f"{batches:,}",
            shares,
            examples / max(batches, 1),
            f"{sampler.padded_tokens():,}",
        )
        loader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=collator,
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers,
            multiprocessing_context=args.dataloader_multiprocessing_context,
            prefetch_factor=args.dataloader_prefetch_factor,
            in_order=args.dataloader_in_order,
            worker_init_fn=partial(
                seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index
            ),
        )
        prepared = self.accelerator.prepare(loader)
        # The sampler already gave this process its own batches: accelerate's shard wrapper
        # must pass them through rather than share them out again.
        wrapper = getattr(prepared, "batch_sampler", None)
        if wrapper is not None and getattr(wrapper, "batch_sampler", None) is sampler:
            wrapper.num_processes = 1
            wrapper.process_index = 0
        return prepared

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        # Every micro-batch, before the optimizer step: the weights are still the last good ones.
        # (The stock loop already syncs on this value each step for logging_nan_inf_filter.)
        check_finite_loss(loss, self.state, self.args.output_dir)
        return loss

    def _train_lengths(self, train_dataset) -> list[int]:
        """Each training example's length in tokens: the ``length`` column, else the token ids."""
        # The Trainer hands over the dataset after dropping columns the model does not take
        # (``length`` among them): read the lengths from the full training set when it has them.
        column = self.args.length_column_name
        for source in (train_dataset, self.train_dataset):
            names = getattr(source, "column_names", None) or []
            if column in names and len(source) == len(train_dataset):
                return list(source[column])
        name = (
            self.processing_class.model_input_names[0] if self.processing_class is not None else "input_ids"
        )
        return [len(row[name]) for row in train_dataset]

    def _get_train_sampler(self, train_dataset=None):
        train_dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy != "group_by_length" or not hasattr(train_dataset, "__len__"):
            return super()._get_train_sampler(train_dataset)
        self._seeded_sampler = SeededLengthGroupedSampler(
            self.args.train_batch_size * self.args.gradient_accumulation_steps,
            lengths=self._train_lengths(train_dataset),
            seed=self._data_seed,
        )
        return self._seeded_sampler

    def _own_model(self):
        """The model when it is one of ours on a plain (non-sharded) setup, else None."""
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            return None
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        return model if isinstance(model, EncoderWithHead) else None

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None) -> None:
        # Checkpoints are written by the head's save_pretrained (some heads use a layout of
        # their own, e.g. sentence-transformers names): read them back with its own loader.
        own = self._own_model()
        if own is None:
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        own.load_weights(resume_from_checkpoint)

    def _load_best_model(self) -> None:
        own = self._own_model()
        if own is None:
            return super()._load_best_model()
        own.load_weights(self.state.best_model_checkpoint)

    def _issue_warnings_after_load(self, load_result) -> None:
        """After resuming (or loading the best checkpoint): tied weights are saved once by
        ``save_pretrained``, so their second name is missing by design; anything else missing
        or unexpected means the checkpoint belongs to a differently configured model."""
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        if not isinstance(model, EncoderWithHead):
            return super()._issue_warnings_after_load(load_result)
        params = dict(model.named_parameters(remove_duplicate=False))
        missing = set(load_result.missing_keys)
        loaded = {p.data_ptr() for name, p in params.items() if name not in missing}
        untied = sorted(
            name for name in missing if name not in params or params[name].data_ptr() not in loaded
        )
        buffers = {name for name, _ in model.named_buffers()}
        untied = [name for name in untied if name not in buffers]  # non-persistent buffers are never saved
        if untied or load_result.unexpected_keys:
            raise UserError(
                f"the checkpoint does not fit this model (missing {untied[:3]}, unexpected "
                f"{list(load_result.unexpected_keys)[:3]}); resume with the same model and task settings as the "
                "run that wrote it"
            )

    def _save_checkpoint(self, model, trial) -> None:
        """The stock checkpoint, written to ``tmp-checkpoint-N`` and renamed when whole.

        Mirrors ``Trainer._save_checkpoint`` (transformers 5.x) step for step; only the
        folder it writes into and the final rename differ.
        """
        if self.hp_search_backend is None and trial is None:
            self.store_flos()
        run_dir = self._get_output_dir(trial=trial)
        final = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        staging = str(checkpoints.staging_path(final))
        if self.args.should_save:
            checkpoints.remove_leftovers(run_dir)  # from a save that was killed
        self.accelerator.wait_for_everyone()
        self.save_model(staging, _internal_call=True)
        if self.args.save_strategy in ("steps", "epoch", "best") and self.state.best_global_step:
            best = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.best_global_step}")
            if self.state.best_global_step == self.state.global_step or os.path.exists(best):
                self.state.best_model_checkpoint = best
        if not self.args.save_only_model:
            self._save_optimizer_and_scheduler(staging)
            self._save_scaler(staging)
            self._save_rng_state(staging)
        if self.args.should_save:
            for cb in [
                c for c in self.callback_handler.callbacks + [self.control] if isinstance(c, ExportableState)
            ]:
                name = cb.__class__.__name__
                if isinstance(self.state.stateful_callbacks[name], list):
                    self.state.stateful_callbacks[name].append(cb.state())
                else:
                    self.state.stateful_callbacks[name] = cb.state()
            self.state.save_to_json(os.path.join(staging, TRAINER_STATE_NAME))
        self.accelerator.wait_for_everyone()  # every process has written its part (RNG states)
        if self.args.should_save:
            checkpoints.publish(staging, final)
        self.accelerator.wait_for_everyone()
        if self.args.push_to_hub:
            self._push_from_checkpoint(final)
        if self.args.should_save:
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )

    def _save_rng_state(self, output_dir: str) -> None:
        """Every process's ``rng_state_<i>.pth``, written by the processes that save.

        The stock Trainer has each process write its own file into the checkpoint. On several
        machines with their own disks that leaves, on every machine but the writer's, a
        ``tmp-checkpoint-N`` that is never published, and the published checkpoint lacks those
        states. The states travel to the writers instead (one small gather per checkpoint).
        """
        if self.args.world_size <= 1:
            return super()._save_rng_state(output_dir)
        from accelerate.utils import gather_object

        with tempfile.TemporaryDirectory(prefix="encoder-tasks-rng-") as scratch:
            super()._save_rng_state(scratch)  # transformers decides what a state holds
            mine = Path(scratch, f"rng_state_{self.args.process_index}.pth").read_bytes()
        states = gather_object([mine])  # in process order, on every process
        if self.args.should_save:
            os.makedirs(output_dir, exist_ok=True)
            for index, data in enumerate(states):
                Path(output_dir, f"rng_state_{index}.pth").write_bytes(data)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        if not isinstance(model, EncoderWithHead):
            return super()._save(output_dir, state_dict)
        if not self.args.should_save:
            return
        os.makedirs(output_dir, exist_ok=True)
        model.save_pretrained(output_dir, state_dict=state_dict)
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)
        torch.save(self.args, os.path.join(output_dir, "training_args.bin"))

"""``EncoderTaskTrainer``: the base ``transformers.Trainer`` for every task.

It overrides only what differs from the stock Trainer:
- saving: heads are plain modules, so checkpoints are written with the head's own
  ``save_pretrained`` (config, weights, label names), and every checkpoint reloads;
- checkpoints are written atomically (``tmp-checkpoint-N``, then renamed; see
  :mod:`encoder_tasks.checkpoints`), so a kill never leaves a half-written one to resume;
- every process's RNG state is written by the process that saves (not by each process), so
  on several machines with their own disks only the writer's disk gets a checkpoint;
- length-grouped training batches come from a sampler seeded by (seed, epoch), so a resumed
  run sees the same batches in the same order as an uninterrupted one, and evaluation batches
  are sorted by length (less padding, same metrics): :mod:`encoder_tasks.sampling`;
- ``--max_tokens_per_batch``: training batches of a token budget rather than a number of
  examples (:mod:`encoder_tasks.token_batches`), seeded the same way;
- :meth:`EncoderTaskTrainer._batch_sampler_dataloader`: the one loader for batch samplers that
  give each process its own batches (token budgets, the embedding task's global batches);
- a NaN/inf training loss stops the run at once with a clear message (last good checkpoint kept);
- the schedule options: ``--layer_lr_decay`` (a rate per layer: :meth:`learning_rate_of`,
  :mod:`encoder_tasks.encoder_layers`), ``--reinit_layers``, ``--average_weights_from``
  (:mod:`encoder_tasks.weight_averaging`) and ``--time_budget`` (:mod:`encoder_tasks.time_budget`);
- ``--early_stopping_patience``: the best evaluation's weights kept, training stopped once it
  stops improving (:mod:`encoder_tasks.early_stopping`).
"""

from __future__ import annotations

import logging
import os
import tempfile
from functools import partial
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from transformers import Trainer, TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints, seed_worker

from . import checkpoints
from .early_stopping import EarlyStopping
from .encoder_layers import parameter_depths, reinit_top_layers
from .errors import UserError
from .heads import EncoderWithHead
from .sampling import EpochSeededCollator, EpochSeeds, LengthSortedEvalMixin, SeededLengthGroupedSampler
from .time_budget import BUDGET_EPOCHS, TimeBudget, budget_scheduler, first_process_seconds, parse_duration
from .token_batches import TokenBudgetBatchSampler
from .training_args import check_token_budget
from .weight_averaging import WeightAverage

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


class _AtTrainBegin(TrainerCallback):
    """Calls ``action(state)`` when training begins (after a resumed run's weights are loaded)."""

    def __init__(self, action):
        self.action = action

    def on_train_begin(self, args, state, control, **kwargs):
        self.action(state)


class EncoderTaskTrainer(LengthSortedEvalMixin, Trainer):
    """Trainer for :class:`~encoder_tasks.heads.EncoderWithHead` models.

    Example:
        >>> from encoder_tasks import EncoderTaskTrainer
        >>> issubclass(EncoderTaskTrainer, Trainer)
        True
    """

    #: Why this trainer cannot take ``--max_tokens_per_batch`` (``None``: it can).
    token_budget_refusal: str | None = None

    def __init__(self, *args, task_settings=None, task_args=None, objectives=(), **kwargs):
        super().__init__(*args, **kwargs)
        #: The task's saved settings (:class:`~encoder_tasks.task.TaskSettings`) and its flags:
        #: task trainers read their options here, not from the model.
        self.task_settings = task_settings
        self.task_args = task_args
        self._epoch_seeded_collator = None
        self._seeded_sampler = None
        self.add_callback(EpochSeeds(self))
        self._depths: dict[str, int] | None = None
        self.time_budget: TimeBudget | None = None
        if getattr(self.args, "time_budget", None):
            seconds = parse_duration(self.args.time_budget)
            self.time_budget = TimeBudget(seconds, share=first_process_seconds(self.accelerator))
            self.add_callback(self.time_budget)
        if getattr(self.args, "reinit_layers", 0):
            self.add_callback(_AtTrainBegin(self.reinit_layers_at_start))
        if getattr(self.args, "average_weights_from", None) is not None:
            # After the budget's callback, so the fraction it reads is this step's. The model is
            # the trainer's own (a search trial's model is made inside train).
            budget = self.time_budget
            progress = (lambda: budget.fraction) if budget is not None else None
            self.add_callback(
                WeightAverage(self.args.average_weights_from, progress, model_of=self._own_model)
            )
        #: ``--early_stopping_patience``'s rule (``None``: off); ``objectives``: the task's metrics.
        self.early_stopping: EarlyStopping | None = None
        if getattr(self.args, "early_stopping_patience", None):
            self.early_stopping = EarlyStopping(
                self.args.early_stopping_patience,
                objectives,
                metric=self.args.metric_for_best_model,
                greater_is_better=self.args.greater_is_better if self.args.metric_for_best_model else None,
                evaluations_per_epoch=(
                    self.args.evaluations_per_epoch
                    if getattr(self.args, "evaluation_interval_auto", False)
                    else None
                ),
                model_of=self._own_model,
            )
            self.add_callback(self.early_stopping)
        if getattr(self.args, "max_tokens_per_batch", None):
            model = (
                self.accelerator.unwrap_model(self.model, keep_torch_compile=False) if self.model else None
            )
            check_token_budget(self.args, getattr(model, "task", ""), self.token_budget_refusal)

    # ---- schedule options --------------------------------------------------------------------
    def reinit_layers_at_start(self, state) -> None:
        """``--reinit_layers``: at the start of a fresh run (a resumed one loaded its weights,
        re-initialised ones included, from its checkpoint), on the model being trained (a
        search trial's too, made by ``model_init`` inside ``train``)."""
        count = int(getattr(self.args, "reinit_layers", 0) or 0)
        own = self._own_model()
        if count and state.global_step == 0 and own is not None:
            chosen = reinit_top_layers(own.encoder, count)
            logger.info("re-initialised encoder layer(s) %s (--reinit_layers %d)", chosen, count)

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if self.time_budget is not None and "num_train_epochs" not in getattr(self.args, "given_fields", ()):
            self.args.num_train_epochs = BUDGET_EPOCHS  # the budget stops training, not the epochs
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def learning_rate_of(self, name: str) -> float:
        """The peak learning rate of the parameter ``name`` of the model: ``--learning_rate``,
        times ``--layer_lr_decay`` to the power of its depth for the encoder's own parameters
        (:func:`encoder_tasks.encoder_layers.parameter_depths`); the head's, the task's
        ``--head_learning_rate`` where its flags have one and it is set. Task trainers with more
        than one head part give each its rate here (NER: the CRF's)."""
        rate = self.args.learning_rate
        if not name.startswith("encoder."):
            # A task whose flags give its fresh head a rate of its own (--head_learning_rate).
            return getattr(self.task_args, "head_learning_rate", None) or rate
        decay = getattr(self.args, "layer_lr_decay", None)
        if decay and decay != 1.0:
            if self._depths is None:
                own = self._own_model()
                self._depths = parameter_depths(own.encoder) if own is not None else {}
            rate *= decay ** self._depths.get(name.removeprefix("encoder."), 0)
        return rate

    def weight_decay_of(self, name: str, decayed: bool) -> float:
        """AdamW's weight decay for ``name`` (``decayed``: transformers would decay it)."""
        return self.args.weight_decay if decayed else 0.0

    def has_own_rates(self, model) -> bool:
        """Whether :meth:`create_optimizer` builds its groups from :meth:`learning_rate_of`
        (else the stock Trainer's two groups)."""
        decay = getattr(self.args, "layer_lr_decay", None)
        head = getattr(self.task_args, "head_learning_rate", None)
        return bool(((decay and decay != 1.0) or head) and isinstance(model, EncoderWithHead))

    def create_optimizer(self, model=None):
        """AdamW groups by learning rate and weight decay (:meth:`learning_rate_of`,
        :meth:`weight_decay_of`) where the trainer has rates of its own, else the stock ones."""
        model = self.model if model is None else model
        if self.optimizer is not None or not self.has_own_rates(model):
            return super().create_optimizer(model)
        decayed = set(self.get_decay_parameter_names(model))
        grouped: dict[tuple[float, float], list] = {}
        for name, param in model.named_parameters():
            if param.requires_grad:
                key = (self.learning_rate_of(name), self.weight_decay_of(name, name in decayed))
                grouped.setdefault(key, []).append(param)
        groups = [{"params": params, "lr": lr, "weight_decay": wd} for (lr, wd), params in grouped.items()]
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
        self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        """With ``--time_budget``: warm-up and decay over the time (:func:`budget_scheduler`)."""
        if self.time_budget is None or self.lr_scheduler is not None:
            return super().create_scheduler(num_training_steps, optimizer)
        optimizer = optimizer if optimizer is not None else self.optimizer
        self.lr_scheduler = budget_scheduler(optimizer, self.time_budget, float(self.args.warmup_steps or 0))
        self._created_lr_scheduler = True
        return self.lr_scheduler

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
        batch samplers as ``batch_sampler``.
        """
        import datasets

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
        return self._batch_sampler_dataloader(dataset, sampler, collator)

    def _batch_sampler_dataloader(self, dataset, batch_sampler, collator):
        """A loader of ``batch_sampler``'s batches (the stock loader options), prepared by accelerate.

        For samplers that already give each process its own batches (token budgets, the
        embedding task's global batches): accelerate's shard wrapper is told to pass them
        through rather than share them out again.
        """
        args = self.args
        loader = DataLoader(
            dataset,
            batch_sampler=batch_sampler,
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
        wrapper = getattr(prepared, "batch_sampler", None)
        if wrapper is not None and getattr(wrapper, "batch_sampler", None) is batch_sampler:
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

"""``EmbeddingTrainer``: duplicate-free (global) training batches, evaluation by encoding, and
the loss variants computed outside the model: Matryoshka prefixes (:mod:`.matryoshka`) and the
cached (GradCache) loss for large batches in small memory (:mod:`.cached_loss`).

Its options come from the task settings it is given (``task_settings``: the batch sampler,
the evaluation mode, the recall cut-offs, the Matryoshka sizes) and the training flags
(``task_args.cache_chunk_size``), never from the model.
"""

from __future__ import annotations

import logging
import math
import time

import torch

from ...errors import UserError
from ...trainer import EncoderTaskTrainer
from .args import SCORED_LOSSES
from .cached_loss import cached_loss
from .data import duplicate_keys
from .evaluation import evaluate_embeddings
from .matryoshka import MatryoshkaLoss
from .samplers import DuplicateFreeBatchSampler

logger = logging.getLogger(__name__)


def embedding_loss(bi_encoder, labels=None, matryoshka_dims=None):
    """``loss_of([anchors, positives, negatives...])``: the model's loss on embedding groups,
    summed over Matryoshka prefixes when ``matryoshka_dims`` is given."""
    loss_fn = bi_encoder.loss_fn
    if bi_encoder.loss_name in SCORED_LOSSES:
        if labels is None:
            raise UserError(f"--loss {bi_encoder.loss_name} needs a score per pair (--score_column)")

        def loss_of(groups):
            return loss_fn(groups[0], groups[1], labels)
    else:

        def loss_of(groups):
            return loss_fn(groups[0], groups[1], groups[2:])

    if matryoshka_dims:
        return MatryoshkaLoss(loss_of, matryoshka_dims, bi_encoder.config.hidden_size)
    return loss_of


class EmbeddingTrainer(EncoderTaskTrainer):
    """Trains a :class:`~.model.BiEncoder`; ``evaluate`` reports STS and/or retrieval metrics.

    Example:
        >>> trainer = EmbeddingTrainer(model=model, args=training_args, train_dataset=prepared.train,
        ...     data_collator=prepared.collator(None), task_settings=prepared.settings)  # doctest: +SKIP
    """

    token_budget_refusal = (
        "its batches are each other's negatives, so a batch whose size follows the texts' length "
        "would change the loss from step to step (few negatives for long texts); "
        "--per_device_train_batch_size sets its batch"
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        dims = self.task_settings.get("matryoshka_dims") if self.task_settings is not None else None
        if dims and self.model is not None:  # refused before training starts, not at its first step
            from .matryoshka import check_dims

            check_dims(dims, self.accelerator.unwrap_model(self.model).config.hidden_size)

    def get_train_dataloader(self):
        dataset = self.train_dataset
        mode, owned, negatives, shared = self.task_settings.batch_sampler, None, None, None
        if mode == "random":
            keys = [(i,) for i in range(len(dataset))]
        else:  # read once: the report below needs the same split
            owned, negatives = (
                duplicate_keys(dataset, negatives=False),
                duplicate_keys(dataset, negatives=True),
            )
            if mode == "shared_negatives":
                keys, shared = owned, negatives
            else:  # no_duplicates: a mined negative may not repeat in a batch either
                keys = [o + n for o, n in zip(owned, negatives)]
        sampler = DuplicateFreeBatchSampler(
            keys,
            shared=shared,
            batch_size=self._train_batch_size,
            drop_last=self.args.dataloader_drop_last,
            seed=self.args.seed,
            rank=self.args.process_index,
            world_size=self.args.world_size,
        )
        if self.is_world_process_zero():
            self._report_batches(sampler, owned, negatives)
        # Each process already gets its own slice of a global batch from the sampler.
        return self._batch_sampler_dataloader(dataset, sampler, self.data_collator)

    def _report_batches(self, sampler: DuplicateFreeBatchSampler, owned=None, negatives=None) -> None:
        """Say how many batches the sampler made, and why there are more than rows / batch size:
        rows that repeat a text wait for a later batch, and the epoch ends in short batches with
        few in-batch negatives. Where rows hold mined negatives, also say how many batches
        ``--batch_sampler shared_negatives`` would make (measured not better on the Chinese
        retrieval rows, docs/retrieval.md, so the choice is left to the user). ``owned`` and
        ``negatives``: the rows' texts as the sampler was given them (``duplicate_keys``)."""
        size, rows = sampler.batch_size * sampler.world_size, len(sampler.keys)
        batches = sampler.global_batches(sampler.epoch)
        planned = math.ceil(rows / size)
        full = sum(len(b) == size for b in batches)
        logger.info(
            "%d training batches an epoch, up to %d rows each (%d full), from %d rows",
            len(batches),
            size,
            full,
            rows,
        )
        if len(batches) <= planned * 1.1 or self.task_settings.batch_sampler != "no_duplicates":
            return
        if not any(negatives):
            logger.info("rows that repeat a text (a query or positive shared by rows) wait for later batches: "
                        "%d batches where %d rows would fill %d", len(batches), rows, planned)  # fmt: skip
            return
        shared = len(
            DuplicateFreeBatchSampler(owned, size, seed=sampler.seed, shared=negatives).global_batches(0)
        )
        logger.info("rows that repeat a text wait for later batches: %d batches where %d rows would fill %d; "
                    "--batch_sampler shared_negatives (rows may share a mined negative) makes %d",
                    len(batches), rows, planned, shared)  # fmt: skip

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The model's own loss, unless Matryoshka sizes or ``--cache_chunk_size`` ask for more."""
        dims = self.task_settings.get("matryoshka_dims") if self.task_settings is not None else None
        chunk = getattr(self.task_args, "cache_chunk_size", None)
        if not (dims or chunk) or "anchor" not in inputs or not model.training:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        from .model import EmbeddingOutput

        loss_of = embedding_loss(self.accelerator.unwrap_model(model), inputs.get("labels"), dims)
        groups = [inputs["anchor"], inputs["positive"], *(inputs.get("negatives") or [])]

        def embed(features):  # through the (possibly DDP-wrapped) model's forward
            return model(**features).embeddings

        if chunk:
            loss = cached_loss(embed, groups, loss_of, chunk, getattr(model, "no_sync", None))
        else:
            loss = loss_of([embed(g) for g in groups])
        return (loss, EmbeddingOutput(loss=loss)) if return_outputs else loss

    def _track_num_input_tokens(self, inputs):
        if self.args.include_num_input_tokens_seen == "no":
            return
        groups = [inputs.get("anchor"), inputs.get("positive"), *(inputs.get("negatives") or [])]
        masks = [g["attention_mask"] for g in groups if g is not None]
        if self.args.include_num_input_tokens_seen == "non_padding":
            count = sum(int(m.sum()) for m in masks)
        else:
            count = sum(m.numel() for m in masks)
        count = torch.as_tensor(count, device=self.args.device, dtype=torch.int64)
        self.state.num_input_tokens_seen += self.accelerator.gather(count).sum().item()

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise UserError("evaluation needs --validation_file")
        model = self.accelerator.unwrap_model(self.model)
        start = time.perf_counter()
        # ``evaluate --write_predictions`` hands a recorder (encoder_tasks.run.evaluate): it keeps
        # what each pair and query got, as the other tasks' recorders keep their predictions.
        recorder = self.compute_metrics
        details: dict | None = {} if recorder is not None else None
        raw = evaluate_embeddings(
            model,
            self.processing_class,
            dataset,
            self.task_settings,
            self.args.per_device_eval_batch_size,
            details,
        )
        if recorder is not None:
            recorder.predictions = details
        metrics = {f"{metric_key_prefix}_{k}": v for k, v in raw.items()}
        metrics[f"{metric_key_prefix}_runtime"] = time.perf_counter() - start
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

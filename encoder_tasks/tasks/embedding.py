"""Bi-encoders: one vector per text, compared by cosine similarity.

Shape shared by every task module:
- ``EmbeddingArguments``: the task's settings (recipe keys / CLI flags),
- ``BiEncoder``: pooling (mean, cls, max) and optional L2 normalisation on any encoder,
  with its loss (see :mod:`encoder_tasks.losses`),
- ``prepare``: tokenised (anchor, positive[, negatives][, score]) rows for training, raw
  text pairs for evaluation,
- ``EmbeddingTrainer``: duplicate-free batches, evaluation by STS Spearman or retrieval,
- ``predict``: the cosine similarity of each pair of a file; ``encode`` and ``retrieve`` in
  :mod:`encoder_tasks.tasks.embedding_search`.

Trained models are saved in the sentence-transformers layout (``modules.json``,
``1_Pooling/config.json``, encoder weights loadable by ``AutoModel`` at the top level),
so ``SentenceTransformer(path)`` loads them as they are.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from transformers.utils import ModelOutput

from ..config import PredictArguments
from ..data.loading import Split
from ..errors import UserError
from ..heads import WEIGHTS_FILE, EncoderWithHead, Pooler, _is_tied_copy
from ..losses import LOSSES, SCORED_LOSSES, build_loss
from ..samplers import DuplicateFreeBatchSampler
from ..st_layout import (
    read_max_seq_length,
    read_sentence_transformers_pooling,
    write_sentence_transformers_files,
)
from ..trainer import EncoderTaskTrainer
from .classification import Prepared, _texts, resolve_column
from .embedding_eval import evaluate_embeddings, unit_rows

logger = logging.getLogger(__name__)

EVALUATIONS = ("auto", "sts", "retrieval", "both")
SAMPLERS = ("no_duplicates", "random")


@dataclass
class EmbeddingArguments:
    """Settings of the bi-encoder (embedding) task."""

    text_column: str = field(
        default="anchor|sentence1|query|text1|text",
        metadata={"help": "Column with the first text (anchor/query); '|' alternatives tried in order."},
    )
    text_pair_column: str = field(
        default="positive|sentence2|text2|document",
        metadata={"help": "Column with the second text (positive/document); '|' alternatives allowed."},
    )
    negative_columns: str | None = field(
        default=None,
        metadata={"help": "Comma-separated hard-negative columns (for --loss mnrl), e.g. 'negative'."},
    )
    score_column: str | None = field(
        default="score|label",
        metadata={
            "help": "Column with a similarity score per pair, used when present ('|' alternatives); "
            "'none' to ignore scores."
        },
    )
    loss: str = field(
        default="auto",
        metadata={
            "help": "mnrl (= infonce: in-batch negatives), cosent or cosine (scored pairs), or auto "
            "(cosent when the training data has scores, else mnrl)."
        },
    )
    temperature: float = field(
        default=0.05, metadata={"help": "Softmax temperature of mnrl and cosent (0.05 = scale 20)."}
    )
    symmetric: bool = field(
        default=False, metadata={"help": "mnrl: also rank anchors for each positive, average both."}
    )
    gather_across_devices: bool = field(
        default=True,
        metadata={"help": "mnrl under several processes: use every process's texts as negatives."},
    )
    positive_min_score: float | None = field(
        default=None,
        metadata={
            "help": "Scored data: pairs with at least this score count as positives (mnrl training keeps "
            "only them; retrieval evaluation uses them as query -> relevant)."
        },
    )
    pooling: str = field(default="mean", metadata={"help": "Pooling of token vectors: mean, cls or max."})
    normalize: bool = field(default=True, metadata={"help": "L2-normalise embeddings (cosine = dot)."})
    batch_sampler: str = field(
        default="no_duplicates",
        metadata={
            "help": "no_duplicates (no text twice in a batch: in-batch negatives stay true) or random."
        },
    )
    evaluation: str = field(
        default="auto",
        metadata={
            "help": "sts (Spearman of cosine vs scores), retrieval (recall@k, MRR@10, nDCG@10 over all "
            "texts of the validation file), both, or auto (sts with scores, else retrieval)."
        },
    )
    retrieval_k: str = field(default="1,5,10", metadata={"help": "Cut-offs k for recall@k."})

    def __post_init__(self):
        if self.loss not in ("auto", *LOSSES, "infonce"):
            raise UserError(f"--loss must be one of auto, {', '.join(LOSSES)}, infonce; found {self.loss!r}")
        if self.evaluation not in EVALUATIONS:
            raise UserError(
                f"--evaluation must be one of {', '.join(EVALUATIONS)}, found {self.evaluation!r}"
            )
        if self.batch_sampler not in SAMPLERS:
            raise UserError(
                f"--batch_sampler must be one of {', '.join(SAMPLERS)}, found {self.batch_sampler!r}"
            )
        if self.score_column in ("none", ""):
            self.score_column = None
        Pooler(self.pooling)  # validates the name
        try:
            self.ks = sorted({int(k) for k in self.retrieval_k.split(",")})
        except ValueError:
            raise UserError(
                f"--retrieval_k: expected integers separated by commas, found {self.retrieval_k!r}"
            ) from None
        if not self.ks or self.ks[0] < 1:
            raise UserError(f"--retrieval_k: cut-offs must be positive, found {self.retrieval_k!r}")


@dataclass
class EmbeddingOutput(ModelOutput):
    loss: torch.Tensor | None = None
    embeddings: torch.Tensor | None = None


class BiEncoder(EncoderWithHead):
    """Encoder + pooling (+ L2 normalisation): one vector per text, and the training loss.

    ``forward(input_ids=..., attention_mask=...)`` embeds texts; in training, ``forward(anchor=...,
    positive=..., negatives=[...], labels=...)`` takes each group as a dict of model inputs and
    returns the loss.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = BiEncoder(load_encoder(make_tiny_model("bert")))
        >>> out = model(input_ids=torch.tensor([[2, 5, 6, 3]]), attention_mask=torch.ones(1, 4))
        >>> tuple(out.embeddings.shape), round(out.embeddings.norm().item(), 4)
        ((1, 32), 1.0)
    """

    task = "embedding"

    def __init__(
        self,
        encoder,
        pooling: str = "mean",
        normalize: bool = True,
        loss: str = "mnrl",
        temperature: float = 0.05,
        symmetric: bool = False,
        gather_across_devices: bool = True,
    ):
        super().__init__(
            encoder,
            pooling=pooling,
            normalize=normalize,
            loss=loss,
            temperature=temperature,
            symmetric=symmetric,
            gather_across_devices=gather_across_devices,
        )
        self.pooler = Pooler(pooling)
        self.normalize = normalize
        self.loss_name = "mnrl" if loss == "infonce" else loss
        self.loss_fn = build_loss(self.loss_name, temperature, symmetric, gather_across_devices)

    def embed(self, input_ids=None, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        """Pooled (and normalised) embeddings ``[batch, hidden]``."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encode(input_ids, attention_mask, token_type_ids)
        pooled = self.pooler(hidden, attention_mask)
        return F.normalize(pooled, dim=-1) if self.normalize else pooled

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        anchor=None,
        positive=None,
        negatives=None,
        labels=None,
    ) -> EmbeddingOutput:
        if anchor is None:
            return EmbeddingOutput(embeddings=self.embed(input_ids, attention_mask, token_type_ids))
        anchors = self.embed(**anchor)
        positives = self.embed(**positive)
        if self.loss_name in SCORED_LOSSES:
            if labels is None:
                raise UserError(f"--loss {self.loss_name} needs a score per pair (--score_column)")
            loss = self.loss_fn(anchors, positives, labels)
        else:
            loss = self.loss_fn(anchors, positives, [self.embed(**n) for n in negatives or []])
        return EmbeddingOutput(loss=loss, embeddings=anchors)

    # ---- saving: sentence-transformers layout --------------------------------------------
    def save_pretrained(self, output_dir, state_dict: dict | None = None) -> None:
        """Save encoder weights under their own names (``AutoModel`` loads the folder) and the
        sentence-transformers module files, besides the toolkit's metadata."""
        if state_dict is None:
            state_dict = self.state_dict()
        prefix = "encoder."
        others = [k for k in state_dict if not k.startswith(prefix)]
        if others:  # the head has no weights; anything else would be lost
            raise RuntimeError(f"BiEncoder holds weights outside the encoder: {others[:3]}")
        super().save_pretrained(output_dir, {k[len(prefix) :]: v for k, v in state_dict.items()})
        write_sentence_transformers_files(
            output_dir,
            hidden_size=self.encoder.config.hidden_size,
            pooling=self.pooler.mode,
            normalize=self.normalize,
            max_seq_length=int(self.metadata.get("max_length") or 256),
        )

    def load_weights(self, path) -> None:
        from safetensors.torch import load_file

        weights = Path(path) / WEIGHTS_FILE
        if not weights.is_file():
            raise UserError(f"{path}: no {WEIGHTS_FILE}; the run did not finish saving")
        state = load_file(str(weights))
        missing, unexpected = self.encoder.load_state_dict(state, strict=False)
        missing = [m for m in missing if not _is_tied_copy(self.encoder, m, state)]
        if missing or unexpected:
            raise UserError(
                f"{weights}: weights do not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})"
            )


def load_bi_encoder(name_or_path: str) -> BiEncoder:
    """A bi-encoder from a run saved here, a sentence-transformers folder, or any encoder (mean
    pooling, normalised).

    Example:
        >>> model = load_bi_encoder("sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
    """
    from ..backbone import load_encoder, read_task_metadata, resolve_model_path

    path = resolve_model_path(name_or_path)
    metadata = read_task_metadata(path) if Path(path).is_dir() else None
    if metadata is not None:
        if metadata.get("task") != "embedding":
            raise UserError(f"{path} holds a {metadata.get('task')!r} model, not an embedding model")
        return BiEncoder.from_pretrained(path)
    pooling, normalize = read_sentence_transformers_pooling(path) or ("mean", True)
    model = BiEncoder(load_encoder(path), pooling=pooling, normalize=normalize)
    # Truncate as sentence-transformers does for this model (MiniLM: 256 tokens).
    model.metadata["max_length"] = read_max_seq_length(path)
    return model.eval()


@torch.inference_mode()
def encode_texts(model: BiEncoder, tokenizer, texts, batch_size: int = 64, max_length: int | None = None):
    """Embeddings ``[len(texts), hidden]`` (float32 numpy) in input order.

    Texts are tokenised once and batched in length order, so batches carry little padding.
    """
    texts = list(texts)
    if not texts:
        return np.zeros((0, model.config.hidden_size), dtype=np.float32)
    max_length = max_length or model.metadata.get("max_length") or min(tokenizer.model_max_length, 512)
    encoded = tokenizer(texts, truncation=True, max_length=max_length)
    keys = [k for k in ("input_ids", "attention_mask") if k in encoded]
    order = sorted(range(len(texts)), key=lambda i: len(encoded["input_ids"][i]))
    was_training = model.training
    model.eval()
    device = model.device
    out = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
    from ..tracking import progress

    for start in progress(range(0, len(order), batch_size), desc="encoding", unit="batch"):
        chunk = order[start : start + batch_size]
        batch = tokenizer.pad([{k: encoded[k][i] for k in keys} for i in chunk], return_tensors="pt")
        vectors = model.embed(**{k: v.to(device) for k, v in batch.items()})
        out[chunk] = vectors.float().cpu().numpy()
    model.train(was_training)
    return out


# ---- data -------------------------------------------------------------------------------------
def _optional_column(split: Split, spec: str | None) -> str | None:
    if not spec:
        return None
    return next((name for name in spec.split("|") if name in split.dataset.column_names), None)


def _scores(split: Split, column: str) -> list[float]:
    values = []
    for index, value in enumerate(split.dataset[column]):
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            raise UserError(f"{split.location(index)}: column {column!r} expected a number, found {value!r}")
        values.append(number)
    return values


def _negative_columns(spec: str | None) -> list[str]:
    return [c.strip() for c in spec.split(",") if c.strip()] if spec else []


def read_pairs(split: Split, task_args, need_scores: bool = False) -> dict[str, Any]:
    """Texts, optional hard negatives and optional scores of a split, validated."""
    anchors = _texts(split, resolve_column(split, task_args.text_column, "text"))
    positives = _texts(split, resolve_column(split, task_args.text_pair_column, "text_pair"))
    negatives = []
    found = [c for c in split.dataset.column_names if c != "_line"]
    for name in _negative_columns(task_args.negative_columns):
        if name not in split.dataset.column_names:
            raise UserError(
                f"{split.source}: no negative column {name!r} (--negative_columns); found columns {found}"
            )
        negatives.append(_texts(split, name))
    score_col = _optional_column(split, task_args.score_column)
    if need_scores and score_col is None:
        found = [c for c in split.dataset.column_names if c != "_line"]
        raise UserError(
            f"{split.source}: no score column {task_args.score_column!r}; found columns {found}. "
            "Pass --score_column (scored losses and STS evaluation need a score per pair)"
        )
    scores = _scores(split, score_col) if score_col else None
    lines = split.dataset["_line"] if "_line" in split.dataset.column_names else [None] * len(anchors)
    return {"anchor": anchors, "positive": positives, "negatives": negatives, "score": scores, "line": lines}


def _tokenize_group(tokenizer, texts: list[str], max_length: int, prefix: str) -> dict[str, list]:
    encoded = tokenizer(texts, truncation=True, max_length=max_length)
    return {
        f"{prefix}_input_ids": encoded["input_ids"],
        f"{prefix}_attention_mask": encoded["attention_mask"],
    }


@dataclass
class BiEncoderCollator:
    """Pad each text group (anchor, positive, negative_i) of a batch on its own.

    Example:
        >>> from encoder_tasks.testing import make_tiny_tokenizer
        >>> collate = BiEncoderCollator(make_tiny_tokenizer(), num_negatives=0)
        >>> batch = collate([{"anchor_input_ids": [2, 5, 3], "anchor_attention_mask": [1, 1, 1],
        ...                   "positive_input_ids": [2, 3], "positive_attention_mask": [1, 1]}])
        >>> batch["anchor"]["input_ids"].shape, batch["positive"]["input_ids"].shape
        (torch.Size([1, 3]), torch.Size([1, 2]))
    """

    tokenizer: Any
    num_negatives: int = 0
    pad_to_multiple_of: int | None = None

    def _pad(self, features: list[dict], prefix: str) -> dict[str, torch.Tensor]:
        rows = [
            {"input_ids": f[f"{prefix}_input_ids"], "attention_mask": f[f"{prefix}_attention_mask"]}
            for f in features
        ]
        padded = self.tokenizer.pad(
            rows, padding=True, pad_to_multiple_of=self.pad_to_multiple_of or None, return_tensors="pt"
        )
        return {"input_ids": padded["input_ids"], "attention_mask": padded["attention_mask"]}

    def __call__(self, features: list[dict]) -> dict[str, Any]:
        batch: dict[str, Any] = {
            "anchor": self._pad(features, "anchor"),
            "positive": self._pad(features, "positive"),
        }
        if self.num_negatives:
            batch["negatives"] = [self._pad(features, f"negative_{i}") for i in range(self.num_negatives)]
        if features[0].get("labels") is not None:
            batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.float32)
        return batch


def prepare(splits, tokenizer, task_args: EmbeddingArguments, data_args, metadata=None) -> Prepared:
    """Tokenised training rows and raw evaluation pairs; metadata stored with the model."""
    import datasets

    train, evaluation = splits.get("train"), splits.get("validation")
    if metadata is None:
        if train is None:
            raise UserError("no training data: give --train_file")
        if task_args.loss in SCORED_LOSSES and task_args.negative_columns:
            raise UserError(f"--negative_columns is for --loss mnrl, not {task_args.loss}")
        probe = read_pairs(train, task_args, need_scores=task_args.loss in SCORED_LOSSES)
        loss = task_args.loss
        if loss == "auto":
            has_scores = probe["score"] is not None and not task_args.negative_columns
            loss = "cosent" if has_scores else "mnrl"
        loss = "mnrl" if loss == "infonce" else loss
        scores = probe["score"]
        metadata = {
            "text_column": task_args.text_column,
            "text_pair_column": task_args.text_pair_column,
            "negative_columns": task_args.negative_columns,
            "score_column": task_args.score_column,
            "loss": loss,
            "positive_min_score": task_args.positive_min_score,
            "score_range": [min(scores), max(scores)] if scores else None,
            "evaluation": task_args.evaluation,
            "retrieval_k": task_args.ks,
            "batch_sampler": task_args.batch_sampler,
            "max_length": data_args.max_length,
        }
    else:  # evaluating a saved model: this run's flags may change the evaluation
        metadata = {**metadata, "evaluation": task_args.evaluation, "retrieval_k": task_args.ks}
        if task_args.positive_min_score is not None:
            metadata["positive_min_score"] = task_args.positive_min_score

    train_dataset = None
    if train is not None:
        train_dataset = _training_rows(train, tokenizer, task_args, metadata, data_args.max_length)
    eval_dataset = None
    if evaluation is not None:
        needs_scores = metadata["evaluation"] in ("sts", "both")
        pairs = read_pairs(evaluation, task_args, need_scores=needs_scores)
        mode = metadata["evaluation"]
        if mode == "auto":
            mode = "sts" if pairs["score"] is not None else "retrieval"
        if (
            mode in ("retrieval", "both")
            and pairs["score"] is not None
            and metadata.get("positive_min_score") is None
        ):
            raise UserError(
                f"{evaluation.source}: retrieval on scored pairs needs --positive_min_score (which pairs are "
                "query -> relevant)"
            )
        columns = {"anchor": pairs["anchor"], "positive": pairs["positive"], "_line": pairs["line"]}
        if pairs["score"] is not None:
            columns["score"] = pairs["score"]
        eval_dataset = datasets.Dataset.from_dict(columns)
        metadata = {**metadata, "evaluation_mode": mode}

    head_kwargs = {
        "pooling": task_args.pooling,
        "normalize": task_args.normalize,
        "loss": metadata["loss"],
        "temperature": task_args.temperature,
        "symmetric": task_args.symmetric,
        "gather_across_devices": task_args.gather_across_devices,
    }
    num_negatives = len(_negative_columns(metadata.get("negative_columns")))
    return Prepared(
        train=train_dataset,
        eval=eval_dataset,
        metadata=metadata,
        collator=lambda pad: BiEncoderCollator(tokenizer, num_negatives, pad),
        compute_metrics=None,
        head_kwargs=head_kwargs,
    )


def _training_rows(split: Split, tokenizer, task_args, metadata: dict, max_length: int):
    import datasets

    loss = metadata["loss"]
    pairs = read_pairs(split, task_args, need_scores=loss in SCORED_LOSSES)
    keep = list(range(len(pairs["anchor"])))
    min_score = metadata.get("positive_min_score")
    if loss == "mnrl" and pairs["score"] is not None and min_score is not None:
        keep = [i for i in keep if pairs["score"][i] >= min_score]
        logger.info(
            "%s: %d of %d pairs have score >= %s (positives)",
            split.source,
            len(keep),
            len(pairs["anchor"]),
            min_score,
        )
        if len(keep) < 2:
            raise UserError(
                f"{split.source}: only {len(keep)} pairs have a score >= {min_score}; in-batch negatives need more"
            )

    elif loss == "mnrl" and pairs["score"] is not None:
        logger.warning(
            "%s: --loss mnrl treats every pair as a positive, whatever its score; pass "
            "--positive_min_score to keep only the similar pairs",
            split.source,
        )

    def pick(values):
        return [values[i] for i in keep]

    columns: dict[str, list] = {}
    columns.update(_tokenize_group(tokenizer, pick(pairs["anchor"]), max_length, "anchor"))
    columns.update(_tokenize_group(tokenizer, pick(pairs["positive"]), max_length, "positive"))
    for n, texts in enumerate(pairs["negatives"]):
        columns.update(_tokenize_group(tokenizer, pick(texts), max_length, f"negative_{n}"))
    if loss in SCORED_LOSSES:
        low, high = metadata["score_range"]
        scores = pick(pairs["score"])
        # CoSENT only uses the order; the cosine loss regresses onto [0, 1].
        columns["labels"] = [(s - low) / (high - low) if high > low else 1.0 for s in scores]
    return datasets.Dataset.from_dict(columns)


def duplicate_keys(dataset) -> list[tuple]:
    """The texts of every training row, as token-id tuples (equal texts, equal keys)."""
    groups = [c for c in dataset.column_names if c.endswith("_input_ids")]
    columns = [dataset[c] for c in groups]
    return [tuple(tuple(col[i]) for col in columns) for i in range(len(dataset))]


def build_model(encoder, head_kwargs: dict) -> BiEncoder:
    return BiEncoder(encoder, **head_kwargs)


# ---- training and evaluation -------------------------------------------------------------------
class EmbeddingTrainer(EncoderTaskTrainer):
    """Duplicate-free (global) training batches; evaluation by encoding, not by the loss."""

    def get_train_dataloader(self):
        from torch.utils.data import DataLoader

        dataset = self.train_dataset
        model = self.accelerator.unwrap_model(self.model)
        distinct = model.metadata.get("batch_sampler", "no_duplicates") == "no_duplicates"
        keys = duplicate_keys(dataset) if distinct else [(i,) for i in range(len(dataset))]
        sampler = DuplicateFreeBatchSampler(
            keys,
            batch_size=self._train_batch_size,
            drop_last=self.args.dataloader_drop_last,
            seed=self.args.seed,
            rank=self.args.process_index,
            world_size=self.args.world_size,
        )
        loader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )
        prepared = self.accelerator.prepare(loader)
        # The sampler already gives each process its own slice of a global batch; accelerate's
        # shard wrapper must pass batches through instead of sharding them again.
        wrapper = getattr(prepared, "batch_sampler", None)
        if wrapper is not None and getattr(wrapper, "batch_sampler", None) is sampler:
            wrapper.num_processes = 1
            wrapper.process_index = 0
        return prepared

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
        raw = evaluate_embeddings(
            model, self.processing_class, dataset, model.metadata, self.args.per_device_eval_batch_size
        )
        metrics = {f"{metric_key_prefix}_{k}": v for k, v in raw.items()}
        metrics[f"{metric_key_prefix}_runtime"] = time.perf_counter() - start
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


Trainer = EmbeddingTrainer


# ---- prediction: similarity of pairs -------------------------------------------------------------
@dataclass
class EmbeddingPredictArguments(PredictArguments):
    """Cosine similarity of the two texts of every row (columns default to those used in training)."""

    text_column: str | None = field(
        default=None, metadata={"help": "First text column (default: as in training)."}
    )
    text_pair_column: str | None = field(
        default=None, metadata={"help": "Second text column (default: as in training)."}
    )


def predict_file(args: EmbeddingPredictArguments) -> dict:
    """Write ``{"line", "text", "text_pair", "score"}`` per row (cosine similarity), in input order.

    Example:
        >>> predict_file(EmbeddingPredictArguments(model_dir="runs/emb", input_file="pairs.tsv",
        ...              output_file="scores.jsonl"))  # doctest: +SKIP
    """
    from ..backbone import load_tokenizer, resolve_model_path
    from ..run import write_jsonl

    args.check()
    model = load_bi_encoder(args.model_dir)
    tokenizer = load_tokenizer(resolve_model_path(args.model_dir))
    split = Split("predict", args.input_file, args.read_input())
    meta = model.metadata
    first = _texts(
        split,
        resolve_column(
            split, args.text_column or meta.get("text_column", EmbeddingArguments.text_column), "text"
        ),
    )
    second_spec = args.text_pair_column or meta.get("text_pair_column", EmbeddingArguments.text_pair_column)
    second = _texts(split, resolve_column(split, second_spec, "text_pair"))
    if torch.cuda.is_available():
        model.cuda()
    unique = list(dict.fromkeys([*first, *second]))
    vectors = unit_rows(encode_texts(model, tokenizer, unique, args.batch_size, args.max_length))
    index = {t: i for i, t in enumerate(unique)}
    scores = np.sum(vectors[[index[t] for t in first]] * vectors[[index[t] for t in second]], axis=1)
    records = [
        {"line": line, "text": a, "text_pair": b, "score": round(float(s), 6)}
        for line, a, b, s in zip(split.dataset["_line"], first, second, scores)
    ]
    write_jsonl(args.output_file, records)
    print(f"[encoder-tasks] wrote {len(records)} similarity scores to {args.output_file}")
    return {"predictions": len(records)}


Arguments = EmbeddingArguments
PredictArguments = EmbeddingPredictArguments

from .embedding_search import EncodeArguments, RetrieveArguments, encode_file, retrieve_file  # noqa: E402

#: Actions beyond train/evaluate/predict: ``encoder-tasks embedding encode|retrieve``.
EXTRA_ACTIONS = {
    "encode": (EncodeArguments, encode_file),
    "retrieve": (RetrieveArguments, retrieve_file),
}

"""Masked-language-model pretraining: adapt an encoder to a domain, or build one from scratch.

Shape shared by every task module:
- ``MLMArguments``: the task's settings (recipe keys / CLI flags),
- ``MaskedLanguageModel``: the prediction head on top of any encoder,
- ``prepare``: documents cut into blocks, the masking collator, the metadata stored with the model,
- ``compute_metrics`` via :func:`metrics_function`: masked-token accuracy and perplexity,
- ``predict``: fill in the ``[MASK]`` tokens of a file, written as JSONL.

The head is BERT's (dense, activation, LayerNorm, decoder tied to the input embeddings, bias),
which is also the shape of the RoBERTa, DistilBERT, ELECTRA and ModernBERT heads: when the
checkpoint carries a pretrained MLM head it is copied in (and checked against
``AutoModelForMaskedLM``'s own output); otherwise the head starts fresh and, for the first
``head_warmup_steps``, only the head trains while the encoder stays frozen, so random head
gradients do not disturb the pretrained encoder.

During training the head runs only at the masked positions: their hidden states are gathered
before the vocabulary projection, which is where most of an MLM step's compute goes.

The saved run is a starting point for every other task: ``--model_name_or_path runs/mlm/...``
loads its encoder (see :func:`encoder_tasks.backbone.load_encoder`).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import TrainerCallback
from transformers.modeling_outputs import MaskedLMOutput

from ..config import PredictArguments
from ..data.loading import Split
from ..data.text import make_blocks
from ..data.text import read_split as read_split  # the task's reader (.txt corpora)
from ..errors import UserError
from ..heads import WEIGHTS_FILE, EncoderWithHead
from ..masking import IGNORE_INDEX, MaskingCollator, check_masking, has_cjk, load_segmenter
from ..trainer import EncoderTaskTrainer

logger = logging.getLogger(__name__)


@dataclass
class MLMArguments:
    """Settings of masked-language-model training."""

    text_column: str = field(default="text", metadata={"help": "Column with the text (JSON/CSV/datasets)."})
    line_by_line: bool = field(
        default=False,
        metadata={
            "help": "One sequence per document (long ones cut into several). Default: pack documents into "
            "blocks of exactly max_length tokens (no padding)."
        },
    )
    mask_rate: float = field(
        default=0.15,
        metadata={"help": "Fraction of tokens to predict (0.15 as in BERT, 0.3 as in ModernBERT)."},
    )
    mask_replace_prob: float = field(
        default=0.8, metadata={"help": "Of the picked tokens, the fraction replaced by the mask token."}
    )
    random_replace_prob: float = field(
        default=0.1,
        metadata={
            "help": "Of the picked tokens, the fraction replaced by a random token (the rest stay as they are)."
        },
    )
    whole_word_masking: bool = field(
        default=False, metadata={"help": "Mask whole words (all their tokens) instead of single tokens."}
    )
    chinese_segmenter: str = field(
        default="auto",
        metadata={
            "help": "Whole-word masking of Chinese: auto (jieba words when jieba is installed, else single "
            "characters), jieba, or none (characters)."
        },
    )
    eval_mask_seed: int = field(
        default=1234,
        metadata={"help": "Seed of the evaluation masks: the same seed gives the same masks and metrics."},
    )
    validation_fraction: float = field(
        default=0.05,
        metadata={"help": "Without validation data, hold out this fraction of the documents (0 disables)."},
    )
    masked_only_head: bool = field(
        default=True,
        metadata={
            "help": "Run the prediction head only at masked positions (same loss, faster); false computes "
            "the full-vocabulary head over every token."
        },
    )
    head_warmup_steps: float = field(
        default=0.1,
        metadata={
            "help": "When the MLM head is new (the checkpoint has none): train only the head for this many "
            "steps (an int) or this fraction of all steps (in [0, 1)) before unfreezing the encoder. "
            "Not applied with --from_scratch."
        },
    )
    evaluate_before_training: bool = field(
        default=False, metadata={"help": "Evaluate once before training (metrics prefixed initial_)."}
    )
    from_scratch: str | None = field(
        default=None,
        metadata={
            "help": "Pretrain from scratch: a size preset (bert-tiny, bert-mini, bert-small, bert-medium, "
            "bert-base; a WordPiece tokenizer is trained on the training text) or a model whose config and "
            "tokenizer type are copied. --tokenizer_name uses that tokenizer instead of training one."
        },
    )
    tokenizer_vocab_size: int = field(default=32000, metadata={"help": "From scratch: vocabulary size."})
    tokenizer_min_frequency: int = field(
        default=2, metadata={"help": "From scratch: a token must occur this often to enter the vocabulary."}
    )
    tokenizer_lowercase: bool = field(default=True, metadata={"help": "From scratch: lowercase the text."})

    def __post_init__(self):
        check_masking(self.mask_rate, self.mask_replace_prob, self.random_replace_prob)
        if self.chinese_segmenter not in ("auto", "jieba", "none"):
            raise UserError(
                f"--chinese_segmenter must be auto, jieba or none, found {self.chinese_segmenter!r}"
            )
        if not 0.0 <= self.validation_fraction < 1.0:
            raise UserError(f"--validation_fraction must be in [0, 1), found {self.validation_fraction}")
        if self.head_warmup_steps < 0:
            raise UserError(f"--head_warmup_steps must be >= 0, found {self.head_warmup_steps}")


# ---- the model ------------------------------------------------------------------------------
def _activation_name(config) -> str:
    for name in ("classifier_activation", "hidden_act", "activation", "hidden_activation"):
        value = getattr(config, name, None)
        if isinstance(value, str):
            return value
    return "gelu"


def _layer_norm_eps(config) -> float:
    for name in ("layer_norm_eps", "norm_eps", "layer_norm_epsilon"):
        value = getattr(config, name, None)
        if isinstance(value, float):
            return value
    return 1e-12


class MaskedLMHead(nn.Module):
    """Dense, activation, LayerNorm, then the vocabulary projection (tied to the input embeddings)."""

    def __init__(self, hidden_size: int, embeddings: nn.Embedding, activation: str, eps: float, std: float):
        from transformers.activations import ACT2FN

        super().__init__()
        vocab_size, embedding_size = embeddings.weight.shape
        self.dense = nn.Linear(hidden_size, embedding_size)
        self.activation = ACT2FN[activation]
        self.norm = nn.LayerNorm(embedding_size, eps=eps)
        self.decoder = nn.Linear(embedding_size, vocab_size, bias=False)
        self.decoder.weight = embeddings.weight  # tied: saved once, and the head starts meaningful
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.dense.weight, std=std)
        nn.init.zeros_(self.dense.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.activation(self.dense(hidden)))) + self.bias


class MaskedLanguageModel(EncoderWithHead):
    """Any encoder with a masked-LM head; the loss is the mean cross-entropy over masked tokens.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = MaskedLanguageModel(load_encoder(make_tiny_model("bert")))
        >>> labels = torch.tensor([[-100, 7, -100, -100]])
        >>> out = model(input_ids=torch.tensor([[2, 4, 6, 3]]), labels=labels)
        >>> tuple(out.logits.shape)  # one row per masked token
        (1, 135)
    """

    task = "mlm"
    #: ``num_items_in_batch`` (masked tokens in the whole accumulated batch) is used for the loss.
    accepts_loss_kwargs = True

    def __init__(self, encoder, masked_only_head: bool = True, activation: str | None = None):
        activation = activation or _activation_name(encoder.config)
        super().__init__(encoder, masked_only_head=masked_only_head, activation=activation)
        self.masked_only_head = masked_only_head
        config = encoder.config
        self.head = MaskedLMHead(
            config.hidden_size,
            encoder.get_input_embeddings(),
            activation,
            _layer_norm_eps(config),
            getattr(config, "initializer_range", 0.02),
        )
        #: Where the head came from: "new", "pretrained" (checkpoint's MLM head) or "run" (an MLM run).
        self.head_source = "new"

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        labels=None,
        num_items_in_batch=None,
        **kwargs,
    ):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encode(input_ids, attention_mask, token_type_ids, **kwargs)
        targets = labels
        if labels is not None and self.masked_only_head:
            # Gather masked positions first: the vocabulary projection then costs
            # masked tokens x vocab instead of all tokens x vocab.
            selected = labels != IGNORE_INDEX
            hidden, targets = hidden[selected], labels[selected]
        logits = self.head(hidden)
        loss = None
        if labels is not None:
            total = nn.functional.cross_entropy(
                logits.float().reshape(-1, logits.size(-1)),
                targets.reshape(-1),
                ignore_index=IGNORE_INDEX,
                reduction="sum",
            )
            count = num_items_in_batch if num_items_in_batch is not None else (targets != IGNORE_INDEX).sum()
            if isinstance(count, torch.Tensor):
                count = count.to(total.device)
            # A batch without masked tokens (possible for tiny inputs) contributes zero, not NaN.
            loss = total / (count.clamp(min=1) if isinstance(count, torch.Tensor) else max(count, 1))
        return MaskedLMOutput(loss=loss, logits=logits)


# ---- initialising the head ------------------------------------------------------------------
def _copy_checkpoint_head(model: MaskedLanguageModel, source: str) -> bool:
    """Copy a checkpoint's pretrained MLM head into ``model.head``; True if it matches exactly.

    The copy is checked by comparing logits with ``AutoModelForMaskedLM`` on a probe input.
    """
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        reference, info = AutoModelForMaskedLM.from_pretrained(source, output_loading_info=True)
    except Exception as exc:  # families without a masked-LM class, unreadable checkpoints
        logger.info(
            "%s: no masked-LM head loadable (%s)", source, str(exc).splitlines()[0] if str(exc) else exc
        )
        return False
    finally:
        hf_logging.set_verbosity(verbosity)
    base = reference.base_model
    base_prefix = getattr(reference, "base_model_prefix", "")
    missing = [k for k in info.get("missing_keys", []) if not k.startswith(base_prefix + ".")]
    output = reference.get_output_embeddings()
    tied = output is not None and output.weight is reference.get_input_embeddings().weight
    # A tied decoder is the input embedding matrix: never a missing head weight.
    output_names = ("decoder.weight", "projector.weight", "lm_head.weight")
    missing = [k for k in missing if not (tied and k.endswith(output_names))]
    if missing or output is None:
        return False
    base_modules = {id(m) for m in base.modules()}
    head_modules = [m for m in reference.modules() if id(m) not in base_modules]
    embedding_size = model.head.dense.out_features
    dense = [
        m
        for m in head_modules
        if isinstance(m, nn.Linear)
        and m is not output
        and m.in_features == model.config.hidden_size
        and m.out_features == embedding_size
    ]
    norms = [
        m for m in head_modules if isinstance(m, nn.LayerNorm) and m.normalized_shape[0] == embedding_size
    ]
    if len(dense) != 1 or len(norms) != 1:
        return False
    bias = output.bias
    if bias is None:
        candidates = [
            p
            for m in head_modules
            for n, p in m.named_parameters(recurse=False)
            if n == "bias" and p.shape == model.head.bias.shape
        ]
        bias = candidates[0] if len(candidates) == 1 else None
    saved = {k: v.clone() for k, v in model.head.state_dict().items()}
    with torch.no_grad():
        model.head.dense.weight.copy_(dense[0].weight)
        if dense[0].bias is not None:
            model.head.dense.bias.copy_(dense[0].bias)
        else:
            model.head.dense.bias.zero_()
        model.head.norm.weight.copy_(norms[0].weight)
        if norms[0].bias is not None:
            model.head.norm.bias.copy_(norms[0].bias)
        else:
            model.head.norm.bias.zero_()
        model.head.norm.eps = norms[0].eps
        if bias is not None:
            model.head.bias.copy_(bias)
        if not tied:
            model.head.decoder.weight.copy_(output.weight)  # pragma: no cover - untied heads fail the check
    if _same_logits(model, reference):
        return True
    model.head.load_state_dict(saved)
    logger.warning(
        "%s: its MLM head has a shape this toolkit does not reproduce; starting a new head", source
    )
    return False


@torch.no_grad()
def _same_logits(model: MaskedLanguageModel, reference) -> bool:
    was_training = model.training
    model.eval()
    reference.eval()
    vocab = model.head.bias.shape[0]
    ids = torch.randint(5, vocab, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    ours = model.head(model.encode(ids, mask))
    theirs = reference(input_ids=ids, attention_mask=mask).logits
    model.train(was_training)
    return ours.shape == theirs.shape and torch.allclose(ours, theirs, atol=1e-4, rtol=1e-3)


def init_head(model: MaskedLanguageModel, source: str | None) -> str:
    """Give ``model`` the best head available from ``source``; returns where it came from."""
    from ..backbone import read_task_metadata

    if not source or not os.path.isdir(source):
        return "new"
    meta = read_task_metadata(source)
    if meta is not None:
        if meta.get("task") != MaskedLanguageModel.task:
            return "new"
        from safetensors.torch import load_file

        state = {
            k[len("head.") :]: v
            for k, v in load_file(os.path.join(source, WEIGHTS_FILE)).items()
            if k.startswith("head.")
        }
        missing, unexpected = model.head.load_state_dict(state, strict=False)
        if [m for m in missing if m != "decoder.weight"] or unexpected:
            return "new"
        return "run"
    if _copy_checkpoint_head(model, source):
        return "pretrained"
    return "new"


def build_model(encoder, head_kwargs: dict) -> MaskedLanguageModel:
    kwargs = dict(head_kwargs)
    training = kwargs.pop("training", {})
    model = MaskedLanguageModel(encoder, **kwargs)
    source = getattr(encoder, "name_or_path", None) or getattr(encoder.config, "_name_or_path", None)
    model.head_source = init_head(model, source)
    model.training_options = training
    logger.info(
        "MLM head: %s",
        {
            "new": "new (the checkpoint has none): decoder tied to the input embeddings, dense layer random",
            "pretrained": f"the pretrained head of {source}",
            "run": f"the head of the MLM run {source}",
        }[model.head_source],
    )
    return model


# ---- data -------------------------------------------------------------------------------------
@dataclass
class Prepared:
    """What a task hands to the shared training loop."""

    train: Any
    eval: Any
    metadata: dict
    collator: Any
    compute_metrics: Any
    head_kwargs: dict


def _warn_about_chinese(split: Split, column: str, segmenter, whole_word: bool) -> None:
    if not whole_word or segmenter is not None:
        return
    sample = split.dataset.select(range(min(200, len(split.dataset))))[column]
    if any(isinstance(t, str) and has_cjk(t) for t in sample):
        logger.warning(
            "%s: Chinese text with whole-word masking but no word segmenter: Chinese is masked character by "
            "character (pip install jieba for word-level masking)",
            split.source,
        )


def prepare(
    splits: dict[str, Split], tokenizer, task_args: MLMArguments, data_args, metadata=None
) -> Prepared:
    """Cut the documents into blocks and set up masking. ``metadata`` comes from a saved model."""
    segmenter = load_segmenter(task_args.chinese_segmenter) if task_args.whole_word_masking else None
    train, evaluation = splits.get("train"), splits.get("validation")
    if (
        train is not None
        and evaluation is None
        and task_args.validation_fraction > 0
        and len(train.dataset) > 1
    ):
        parts = train.dataset.train_test_split(test_size=task_args.validation_fraction, seed=42, shuffle=True)
        evaluation = Split(
            "validation", f"{train.source} (held-out {task_args.validation_fraction:.0%})", parts["test"]
        )
        train = Split(train.name, train.source, parts["train"])
    blocks = {}
    for name, split in (("train", train), ("validation", evaluation)):
        if split is None:
            continue
        _warn_about_chinese(split, task_args.text_column, segmenter, task_args.whole_word_masking)
        blocks[name] = make_blocks(
            split.dataset,
            tokenizer,
            task_args.text_column,
            data_args.max_length,
            task_args.line_by_line,
            segmenter,
            split.source,
        )
    if metadata is None:
        metadata = {
            "text_column": task_args.text_column,
            "max_length": data_args.max_length,
            "line_by_line": task_args.line_by_line,
            "mask_rate": task_args.mask_rate,
            "mask_replace_prob": task_args.mask_replace_prob,
            "random_replace_prob": task_args.random_replace_prob,
            "whole_word_masking": task_args.whole_word_masking,
            "chinese_segmenter": "jieba" if segmenter is not None else "none",
            "eval_mask_seed": task_args.eval_mask_seed,
        }

    def collator(pad):
        return MaskingCollator(
            tokenizer,
            mask_rate=task_args.mask_rate,
            mask_replace_prob=task_args.mask_replace_prob,
            random_replace_prob=task_args.random_replace_prob,
            whole_word_masking=task_args.whole_word_masking,
            eval_seed=task_args.eval_mask_seed,
            pad_to_multiple_of=pad,
        )

    head_kwargs = {
        "masked_only_head": task_args.masked_only_head,
        "training": {
            # From scratch the encoder is as random as the head: nothing to protect.
            "head_warmup_steps": 0 if task_args.from_scratch else task_args.head_warmup_steps,
            "evaluate_before_training": task_args.evaluate_before_training,
        },
    }
    return Prepared(
        train=blocks.get("train"),
        eval=blocks.get("validation"),
        metadata=metadata,
        collator=collator,
        compute_metrics=compute_metrics,
        head_kwargs=head_kwargs,
    )


# ---- from scratch -----------------------------------------------------------------------------
def prepare_model(model_args, data_args, task_args: MLMArguments, training_args) -> None:
    """``--from_scratch``: train a tokenizer on the training text and write a fresh encoder.

    The fresh model goes to ``<output_dir>/scratch-init`` and ``model_name_or_path`` points
    there, so the rest of the run (and ``--resume``) is the same as continued pretraining.
    """
    if not task_args.from_scratch:
        return
    from pathlib import Path

    from ..backbone import load_tokenizer
    from ..data import load_splits
    from ..tokenizer_training import build_from_scratch

    target = Path(training_args.output_dir) / "scratch-init"
    if not (training_args.resume and (target / "config.json").is_file()):
        splits = load_splits(data_args, reader=read_split, required=("train",))
        dataset = splits["train"].dataset
        column = task_args.text_column
        if column not in dataset.column_names:
            raise UserError(
                f"{splits['train'].source}: no text column {column!r}; found {dataset.column_names}"
            )

        def texts():
            for batch in dataset.select_columns([column]).iter(batch_size=1000):
                yield [t for t in batch[column] if isinstance(t, str)]

        tokenizer = load_tokenizer(model_args.tokenizer_name) if model_args.tokenizer_name else None
        build_from_scratch(
            texts(),
            target,
            task_args.from_scratch,
            vocab_size=task_args.tokenizer_vocab_size,
            min_frequency=task_args.tokenizer_min_frequency,
            lowercase=task_args.tokenizer_lowercase,
            max_length=data_args.max_length,
            tokenizer=tokenizer,
            seed=training_args.seed,
        )
    print(f"[encoder-tasks] from scratch: {task_args.from_scratch} encoder and tokenizer in {target}")
    model_args.model_name_or_path = str(target)
    model_args.tokenizer_name = None


# ---- metrics ----------------------------------------------------------------------------------
def masked_predictions(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per token: (predicted id, negative log-likelihood of the true token), ``[batch, seq, 2]``.

    Accepts the masked-only head's ``[n_masked, vocab]`` logits or full ``[batch, seq, vocab]``
    ones. Keeps evaluation memory at 2 numbers per token instead of a vocabulary row, and one
    row per example (the Trainer's gathering across processes assumes that). Positions that
    are not masked hold zeros; ``labels`` tell which ones count.
    """
    selected = labels != IGNORE_INDEX
    targets = labels[selected]
    if logits.dim() == 3:
        logits = logits[selected]
    nll = nn.functional.cross_entropy(logits.float(), targets, reduction="none")
    out = torch.zeros((*labels.shape, 2), dtype=torch.float32, device=labels.device)
    out[selected] = torch.stack([logits.argmax(-1).float(), nll], dim=-1)
    return out


def compute_metrics(eval_pred) -> dict:
    """Masked-token accuracy, loss (mean NLL over masked tokens) and perplexity = exp(loss)."""
    labels = np.asarray(eval_pred.label_ids)
    selected = labels != IGNORE_INDEX
    preds = np.asarray(eval_pred.predictions, dtype=np.float64)[selected]
    targets = labels[selected]
    if len(targets) == 0:
        return {"masked_tokens": 0}
    loss = float(preds[:, 1].mean())
    return {
        "masked_accuracy": float((preds[:, 0].astype(np.int64) == targets).mean()),
        "masked_loss": loss,
        "perplexity": float(math.exp(min(loss, 700.0))),
        "masked_tokens": int(len(targets)),
    }


# ---- trainer ----------------------------------------------------------------------------------
class HeadWarmup(TrainerCallback):
    """Keep the encoder frozen while a new head learns (the first ``steps`` optimizer steps)."""

    def __init__(self, model: MaskedLanguageModel, steps: float):
        self.model, self.steps, self.frozen = model, steps, False

    def _set(self, frozen: bool) -> None:
        if frozen != self.frozen:
            for parameter in self.model.encoder.parameters():
                parameter.requires_grad_(not frozen)
            self.frozen = frozen

    def on_train_begin(self, args, state, control, **kwargs):
        if 0 < self.steps < 1:
            self.steps = int(math.ceil(self.steps * state.max_steps))
        self.steps = int(self.steps)
        if self.steps:
            logger.info("new MLM head: encoder frozen for the first %d steps", self.steps)

    def on_step_begin(self, args, state, control, **kwargs):
        self._set(state.global_step < self.steps)

    def on_train_end(self, args, state, control, **kwargs):
        self._set(False)


class MLMTrainer(EncoderTaskTrainer):
    """Random masks for training, fixed seeded masks for evaluation; masked-token metrics."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.preprocess_logits_for_metrics is None:
            self.preprocess_logits_for_metrics = masked_predictions
        model = self.accelerator.unwrap_model(self.model)
        options = getattr(model, "training_options", {}) or {}
        warmup = options.get("head_warmup_steps", 0)
        if getattr(model, "head_source", "new") == "new" and warmup:
            if self.args.world_size > 1:
                # DDP expects a gradient for every parameter in every step: no frozen phase.
                logger.warning("head warm-up is skipped with %d processes (DDP)", self.args.world_size)
            else:
                self.add_callback(HeadWarmup(model, warmup))
        self.evaluate_before_training = bool(options.get("evaluate_before_training"))

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        if "word_starts" not in self._signature_columns:  # read by the masking collator
            self._signature_columns = [*self._signature_columns, "word_starts"]

    def get_eval_dataloader(self, eval_dataset=None):
        collator = self.data_collator
        if hasattr(collator, "for_evaluation"):
            self.data_collator = collator.for_evaluation()
        try:
            return super().get_eval_dataloader(eval_dataset)
        finally:
            self.data_collator = collator

    def train(self, *args, **kwargs):
        initial = {}
        if self.evaluate_before_training and self.eval_dataset is not None:
            initial = self.evaluate(metric_key_prefix="initial")
        result = super().train(*args, **kwargs)
        result.metrics.update(initial)
        return result


Trainer = MLMTrainer


# ---- prediction (fill-mask) ----------------------------------------------------------------
@dataclass
class MLMPredictArguments(PredictArguments):
    """Fill in masked tokens: write the top candidates for every mask token in each text."""

    text_column: str = field(default="text", metadata={"help": "Column with the text (for tables/JSON)."})
    top_k: int = field(default=5, metadata={"help": "Candidates listed per mask token."})


@torch.inference_mode()
def fill_mask(
    model: MaskedLanguageModel,
    tokenizer,
    texts: list[str],
    top_k: int = 5,
    batch_size: int = 32,
    max_length=None,
):
    """For each text, a list (one per mask token) of ``{"token", "score"}`` candidates.

    ``[MASK]`` and ``<mask>`` in the text both stand for the tokenizer's own mask token.
    """
    mask = tokenizer.mask_token
    texts = [t.replace("[MASK]", mask).replace("<mask>", mask) for t in texts]
    results = []
    from ..tracking import progress

    for start in progress(range(0, len(texts), batch_size), desc="filling masks", unit="batch"):
        chunk = texts[start : start + batch_size]
        batch = tokenizer(chunk, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        batch = {k: v.to(model.device) for k, v in batch.items()}
        hidden = model.encode(**batch)
        for row in range(len(chunk)):
            positions = (batch["input_ids"][row] == tokenizer.mask_token_id).nonzero().flatten()
            entries = []
            if len(positions):
                probs = model.head(hidden[row, positions]).float().softmax(-1)
                scores, ids = probs.topk(min(top_k, probs.size(-1)), dim=-1)
                for s_row, i_row in zip(scores.tolist(), ids.tolist()):
                    entries.append(
                        [
                            {"token": tokenizer.convert_ids_to_tokens(i), "score": round(s, 6)}
                            for s, i in zip(s_row, i_row)
                        ]
                    )
            results.append(entries)
    return results


def predict_file(args: MLMPredictArguments) -> dict:
    """Fill the mask tokens of every row of ``input_file`` (``.txt``: one text per line); write JSONL.

    Example:
        >>> predict_file(MLMPredictArguments(model_dir="runs/mlm/wikitext2-minilm", input_file="masked.txt",
        ...              output_file="fills.jsonl"))  # doctest: +SKIP
    """
    from ..backbone import load_tokenizer
    from ..data import LINE_COLUMN
    from ..run import write_jsonl

    args.check()
    model = MaskedLanguageModel.from_pretrained(args.model_dir)
    tokenizer = load_tokenizer(args.model_dir)
    dataset = args.read_input(read_split)
    if args.text_column not in dataset.column_names:
        raise UserError(
            f"{args.input_file}: no text column {args.text_column!r}; found {dataset.column_names}"
        )
    texts = ["" if t is None else str(t) for t in dataset[args.text_column]]
    if torch.cuda.is_available():
        model.cuda()
    from ..inference import autocast_for

    with autocast_for(model.device, args.precision):
        fills = fill_mask(
            model,
            tokenizer,
            texts,
            args.top_k,
            args.batch_size,
            args.max_length or model.metadata.get("max_length"),
        )
    without = sum(1 for f in fills if not f)
    if without:
        logger.warning("%d of %d texts hold no mask token (%s)", without, len(texts), tokenizer.mask_token)
    lines = dataset[LINE_COLUMN] if LINE_COLUMN in dataset.column_names else [None] * len(texts)
    records = [{"line": line, "text": text, "masks": fill} for line, text, fill in zip(lines, texts, fills)]
    write_jsonl(args.output_file, records)
    print(f"[encoder-tasks] wrote {len(records)} filled texts to {args.output_file}")
    return {"predictions": len(records), "without_mask": without}


Arguments = MLMArguments
PredictArguments = MLMPredictArguments

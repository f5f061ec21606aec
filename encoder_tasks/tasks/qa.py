"""Extractive question answering (SQuAD v1.1 / v2.0, CMRC 2018): start/end spans on any encoder.

Shape shared by every task module:
- ``QAArguments``: the task's settings (recipe keys / CLI flags),
- ``ExtractiveQuestionAnswering``: a start/end span head on top of any encoder,
- ``prepare``: answers checked against their contexts, question + context cut into
  overlapping windows (``doc_stride``) with character offsets kept,
- ``QATrainer``: evaluation that carries each window's index through the model, so windows
  are put back together per question (in any order, over any number of processes) and every
  question is scored exactly once,
- ``postprocess``: exact n-best span search per question over all its windows (end >= start,
  at most ``max_answer_length`` tokens, context tokens only), v2.0 "no answer" by a null-score
  threshold tuned on the evaluation set,
- ``predict``: question + context (or a file of them) to answer text, character offsets, score.
"""

from __future__ import annotations

import logging
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers.modeling_outputs import QuestionAnsweringModelOutput

from ..collators import PaddingCollator
from ..config import PredictArguments
from ..data.loading import Split
from ..data.squad import ANSWER_CHECKS, check_answers, normalize_answers, read_squad, split_by_article
from ..errors import UserError
from ..heads import EncoderWithHead, full_precision
from ..qa_spans import (
    Windows,
    label_windows,
    make_windows,
    postprocess_example,
    resolve_context_position,
    windows_dataset,
)
from ..squad_metrics import cmrc2018_scores, squad_v1_scores, squad_v2_scores
from ..trainer import EncoderTaskTrainer

logger = logging.getLogger(__name__)

METRICS = ("auto", "squad", "cmrc2018")
WINDOW_DEFAULTS = {"doc_stride": 128, "max_question_length": 64, "max_answer_length": 30, "n_best": 20}
CONTEXT_POSITIONS = ("auto", "first", "second")
# Padding positions get this logit: far below any real one, yet start + end stays finite.
MASKED_LOGIT = -10000.0


@dataclass
class QAArguments:
    """Settings of the extractive question answering task."""

    question_column: str = field(default="question", metadata={"help": "Column with the question."})
    context_column: str = field(default="context", metadata={"help": "Column with the context passage."})
    answers_column: str = field(
        default="answers",
        metadata={
            "help": "Column with the gold answers: {'text': [...], 'answer_start': [...]} or a list of "
            "{'text', 'answer_start'} (nested SQuAD JSON is flattened to this automatically)."
        },
    )
    id_column: str = field(
        default="id", metadata={"help": "Column with the question id (row number if absent)."}
    )
    # The next four default to None: 'the saved model's value' for evaluate, WINDOW_DEFAULTS
    # for training.
    doc_stride: int | None = field(
        default=None,
        metadata={
            "help": "Tokens shared by neighbouring windows when a context is longer than max_length "
            "(default 128; evaluate: the model's)."
        },
    )
    max_question_length: int | None = field(
        default=None,
        metadata={
            "help": "Questions longer than this many tokens are cut, so the context keeps the room "
            "(default 64; evaluate: the model's)."
        },
    )
    max_answer_length: int | None = field(
        default=None,
        metadata={"help": "Longest answer considered, in tokens (default 30; evaluate: the model's)."},
    )
    n_best: int | None = field(
        default=None,
        metadata={"help": "Candidate spans kept per question (default 20; evaluate: the model's)."},
    )
    version_2_with_negative: bool | None = field(
        default=None,
        metadata={
            "help": "SQuAD v2.0 style: questions may have no answer. Default: on when the training data has "
            "unanswerable questions (is_impossible, or an empty answer list)."
        },
    )
    null_threshold: float | None = field(
        default=None,
        metadata={
            "help": "v2.0: answer 'no answer' when null score - best span score > this. Default: 0 for "
            "training, the tuned value stored with a saved model for evaluate/predict."
        },
    )
    tune_null_threshold: bool = field(
        default=True,
        metadata={
            "help": "v2.0: after each evaluation, store the threshold with the best F1 on the evaluation set "
            "with the model (predict uses it). Reported as best_f1 / best_f1_thresh either way."
        },
    )
    answer_check: str = field(
        default="fix",
        metadata={
            "help": "Answers whose answer_start does not match the context text: fix (move to the nearest "
            "occurrence of the text; not trained on if absent), skip (not trained on) or error (stop). "
            "Every mismatch is reported with its id."
        },
    )
    metric: str = field(
        default="auto",
        metadata={
            "help": "squad (official SQuAD EM/F1), cmrc2018 (Chinese character-level F1/EM), or auto "
            "(cmrc2018 when the contexts are mostly Chinese characters)."
        },
    )
    context_position: str = field(
        default="auto",
        metadata={
            "help": "Where the context goes in the pair: second (question first), first, or auto "
            "(first for tokenizers that pad on the left, e.g. XLNet; second otherwise)."
        },
    )
    eval_split_by_article: float | None = field(
        default=None,
        metadata={
            "help": "Hold out this fraction of the training file's articles (by title) as the evaluation "
            "set, so no article is in both (e.g. 0.2 for squad-v2-dev). With evaluate, the same held-out "
            "articles of --validation_file are scored."
        },
    )
    article_split_seed: int = field(
        default=42, metadata={"help": "Seed of the article split (fixed, so train and evaluate agree)."}
    )

    def __post_init__(self):
        if self.answer_check not in ANSWER_CHECKS:
            raise UserError(
                f"--answer_check must be one of {', '.join(ANSWER_CHECKS)}, found {self.answer_check!r}"
            )
        if self.metric not in METRICS:
            raise UserError(f"--metric must be one of {', '.join(METRICS)}, found {self.metric!r}")
        if self.context_position not in CONTEXT_POSITIONS:
            raise UserError(
                f"--context_position must be one of {', '.join(CONTEXT_POSITIONS)}, found {self.context_position!r}"
            )
        for name in WINDOW_DEFAULTS:
            value = getattr(self, name)
            if value is not None and value < (0 if name == "doc_stride" else 1):
                raise UserError(
                    f"--{name} must be {'>= 0' if name == 'doc_stride' else '>= 1'}, found {value}"
                )


# ---- the head --------------------------------------------------------------------------------
class ExtractiveQuestionAnswering(EncoderWithHead):
    """A linear start/end scorer on every token of any encoder (as ``*ForQuestionAnswering``).

    Padding positions are masked out of the logits, so the loss never spreads probability
    over padding whatever the batch length.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = ExtractiveQuestionAnswering(load_encoder(make_tiny_model("bert")))
        >>> out = model(input_ids=torch.tensor([[2, 5, 6, 3]]), attention_mask=torch.ones(1, 4))
        >>> tuple(out.start_logits.shape), tuple(out.end_logits.shape)
        ((1, 4), (1, 4))
    """

    task = "qa"

    def __init__(self, encoder):
        super().__init__(encoder)
        self.qa_outputs = nn.Linear(encoder.config.hidden_size, 2)
        nn.init.normal_(self.qa_outputs.weight, std=getattr(encoder.config, "initializer_range", 0.02))
        nn.init.zeros_(self.qa_outputs.bias)

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        start_positions=None,
        end_positions=None,
        **kwargs,
    ):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encode(input_ids, attention_mask, token_type_ids, **kwargs)
        # Logits and loss in fp32 even under bf16 autocast.
        logits = full_precision(self.qa_outputs, hidden)
        start_logits, end_logits = logits.unbind(dim=-1)
        padding = attention_mask == 0
        start_logits = start_logits.masked_fill(padding, MASKED_LOGIT)
        end_logits = end_logits.masked_fill(padding, MASKED_LOGIT)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = (
                nn.functional.cross_entropy(start_logits, start_positions.long().view(-1))
                + nn.functional.cross_entropy(end_logits, end_positions.long().view(-1))
            ) / 2
        return QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits)


# ---- examples --------------------------------------------------------------------------------
@dataclass
class Examples:
    """Questions of one split, in file order."""

    ids: list[str]
    questions: list[str]
    contexts: list[str]
    answers: list[dict]  # {"text": [...], "answer_start": [...]}
    impossible: list[bool]
    source: str = ""

    def __len__(self) -> int:
        return len(self.ids)


def _column(split: Split, name: str, what: str, required: bool = True) -> str | None:
    names = split.dataset.column_names
    for candidate in name.split("|"):
        if candidate in names:
            return candidate
    if not required:
        return None
    found = [c for c in names if c != "_line"]
    raise UserError(f"{split.source}: no {what} column {name!r}; found columns {found}. Pass --{what}_column")


def read_examples(split: Split, args, need_answers: bool = True) -> Examples:
    """Questions, contexts and answers of a split, validated (names the row and id of a problem)."""
    data = split.dataset
    q_col = _column(split, args.question_column, "question")
    c_col = _column(split, args.context_column, "context")
    a_col = _column(split, args.answers_column, "answers", required=need_answers)
    id_col = _column(split, args.id_column, "id", required=False)
    ids = [str(v) for v in data[id_col]] if id_col else [str(i) for i in range(len(data))]
    questions, contexts = data[q_col], data[c_col]
    for index, (question, context) in enumerate(zip(questions, contexts)):
        for value, column in ((question, q_col), (context, c_col)):
            if not isinstance(value, str) or not value.strip():
                raise UserError(
                    f"{split.location(index)} (id {ids[index]}): column {column!r} must be non-empty text, "
                    f"found {value!r}"
                )
    answers = []
    if a_col:
        for index, value in enumerate(data[a_col]):
            answers.append(normalize_answers(value, f"{split.location(index)} (id {ids[index]})"))
    else:
        answers = [{"text": [], "answer_start": []} for _ in ids]
    if "is_impossible" in data.column_names:
        impossible = [bool(v) for v in data["is_impossible"]]
    else:
        impossible = [a_col is not None and not a["text"] for a in answers]
    # run_qa.py strips the question's leading whitespace too: some SQuAD questions start with
    # many spaces, which would only eat context room.
    return Examples(ids, [q.lstrip() for q in questions], list(contexts), answers, impossible, split.source)


_CJK = re.compile(r"[\u4e00-\u9fff]")


def looks_chinese(contexts: list[str], sample: int = 200) -> bool:
    """True when most non-space characters of (a sample of) the contexts are Chinese."""
    text = "".join(contexts[:sample])
    chars = [c for c in text if not c.isspace()]
    return bool(chars) and len(_CJK.findall(text)) / len(chars) > 0.3


def score_predictions(
    golds: dict[str, list[str]],
    best_spans_by_id: dict[str, str],
    null_diffs: dict[str, float] | None,
    metric: str,
    null_threshold: float = 0.0,
) -> dict:
    """Official scores: v1.1 (no null diffs), v2.0 (with them), or CMRC 2018.

    For v2.0 ``best_spans_by_id`` holds the best *span* of each question before the
    no-answer decision and ``null_diffs`` the no-answer scores: the official script's
    threshold is applied to them, and its best-threshold search sees every question's span.
    """
    if metric == "cmrc2018":
        if null_diffs is not None:
            raise UserError(
                "--metric cmrc2018 scores answerable questions only; it has no v2.0 no-answer mode"
            )
        return cmrc2018_scores(golds, best_spans_by_id)
    if null_diffs is None:
        return squad_v1_scores(golds, best_spans_by_id)
    return squad_v2_scores(golds, best_spans_by_id, null_diffs, na_prob_thresh=null_threshold)


class QAEvaluator:
    """``compute_metrics`` for QA: windows back into questions, post-processed, officially scored.

    The Trainer hands it ``predictions = (start_logits, end_logits)`` and, as ``label_ids``,
    the index of the window each row came from (see :class:`QATrainer`). Rows may come in any
    order (length-sorted evaluation) and some twice (the tail a multi-process gather repeats):
    each window is taken once, grouped by question, and every question is scored exactly
    once (``eval_total`` equals the number of questions; ``eval_missing`` counts questions no
    window came back for, scored as wrong).
    """

    def __init__(self, examples: Examples, windows: Windows, settings: dict):
        self.examples = examples
        self.windows = windows
        self.settings = settings
        self.last_predictions: dict[str, dict] = {}
        self.last_counts: dict[str, int] = {}

    @property
    def tune_null_threshold(self) -> bool:
        return bool(self.settings.get("tune_null_threshold")) and bool(
            self.settings["version_2_with_negative"]
        )

    def assemble(self, start_logits, end_logits, window_ids) -> dict[int, list[int]]:
        rows_by_window: dict[int, int] = {}
        duplicates = 0
        for row, window in enumerate(np.asarray(window_ids).reshape(-1).tolist()):
            if window < 0 or window >= len(self.windows):
                continue  # padding rows
            if window in rows_by_window:
                duplicates += 1
                continue
            rows_by_window[window] = row
        by_example: dict[int, list[int]] = defaultdict(list)
        for window in sorted(rows_by_window):
            by_example[self.windows.example_index[window]].append(window)
        self.last_counts = {
            "windows": len(self.windows),
            "windows_seen": len(rows_by_window),
            "duplicate_rows": duplicates,
        }
        self._rows = rows_by_window
        return by_example

    def predict(self, start_logits, end_logits, window_ids) -> dict[int, dict]:
        start_logits = np.asarray(start_logits)
        end_logits = np.asarray(end_logits)
        by_example = self.assemble(start_logits, end_logits, window_ids)
        s = self.settings
        results = {}
        for example, windows in by_example.items():
            parts = []
            for window in windows:
                row = self._rows[window]
                n = len(self.windows.offsets[window])
                parts.append(
                    (
                        start_logits[row, :n],
                        end_logits[row, :n],
                        self.windows.offsets[window],
                        self.windows.null_index[window],
                    )
                )
            results[example] = postprocess_example(
                self.examples.contexts[example],
                parts,
                max_answer_length=s["max_answer_length"],
                n_best=s["n_best"],
                version_2_with_negative=s["version_2_with_negative"],
                null_threshold=s["null_threshold"],
            )
        return results

    def __call__(self, eval_pred) -> dict:
        start_logits, end_logits = eval_pred.predictions[:2]
        results = self.predict(start_logits, end_logits, eval_pred.label_ids)
        missing = len(self.examples) - len(results)
        if missing:
            logger.warning(
                "%d of %d questions got no prediction back; scored as wrong", missing, len(self.examples)
            )
        # Keys are row numbers, so repeated ids in a file never merge two questions.
        golds = {str(i): list(a["text"]) for i, a in enumerate(self.examples.answers)}
        spans = {str(i): r["best_span"] for i, r in results.items()}
        v2 = self.settings["version_2_with_negative"]
        diffs = {str(i): r["null_score_diff"] for i, r in results.items()} if v2 else None
        if not v2:
            spans = {str(i): r["answer"] for i, r in results.items()}
        metrics = score_predictions(
            golds, spans, diffs, self.settings["metric"], self.settings["null_threshold"]
        )
        self.last_predictions = {self.examples.ids[i]: r for i, r in results.items()}
        return metrics


class QATrainer(EncoderTaskTrainer):
    """Trainer whose evaluation puts windows back together per question.

    Each evaluation row carries its window index (``feature_index``) past the model and out
    as the row's label, so :class:`QAEvaluator` never relies on the order rows come back in
    (length-sorted batches here, sharded and gathered ones on several processes). On v2.0
    data the best-F1 null threshold of each evaluation is stored with the model.
    """

    bookkeeping_columns = ("feature_index", "length")

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        # Keep the window index (and length, for length-sorted batches) through column pruning;
        # the collator passes neither to the model.
        extra = [c for c in self.bookkeeping_columns if c not in self._signature_columns]
        self._signature_columns = list(self._signature_columns) + extra

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        window_ids = inputs.pop("feature_index", None)
        loss, logits, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        if window_ids is not None and not prediction_loss_only:
            labels = window_ids.to(logits[0].device if isinstance(logits, tuple) else window_ids.device)
        return loss, logits, labels

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        metrics = super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        threshold = metrics.get(f"{metric_key_prefix}_best_f1_thresh")
        if threshold is not None and getattr(self.compute_metrics, "tune_null_threshold", False):
            model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
            if isinstance(model, EncoderWithHead):
                model.metadata["null_threshold"] = float(threshold)
        return metrics


Trainer = QATrainer


# ---- the task interface ----------------------------------------------------------------------
@dataclass
class Prepared:
    """What a task hands to the shared training loop."""

    train: Any
    eval: Any
    metadata: dict
    collator: Any
    compute_metrics: Any
    head_kwargs: dict


read_split = read_squad


def derive_splits(splits: dict[str, Split], task_args: QAArguments) -> dict[str, Split]:
    """``--eval_split_by_article``: carve the evaluation set out of the training file by article."""
    fraction = task_args.eval_split_by_article
    if not fraction:
        return splits
    out = dict(splits)
    train, validation = splits.get("train"), splits.get("validation")
    if train is not None:
        if validation is not None and validation.source != train.source:
            raise UserError(
                "--eval_split_by_article holds out articles of --train_file as the evaluation set; "
                f"do not also give a different --validation_file ({validation.source})"
            )
        kept, held = split_by_article(train.dataset, fraction, task_args.article_split_seed)
        out["train"] = Split("train", train.source, kept)
        out["validation"] = Split("validation", train.source, held)
        print(
            f"[encoder-tasks] {train.source}: {len(kept)} questions to train on, {len(held)} from "
            f"{len(set(held['title']))} held-out articles to evaluate on"
        )
    elif validation is not None:
        _, held = split_by_article(validation.dataset, fraction, task_args.article_split_seed)
        out["validation"] = Split("validation", validation.source, held)
        print(
            f"[encoder-tasks] {validation.source}: evaluating on the {len(held)} questions of the held-out articles"
        )
    return out


def window_settings(task_args: QAArguments, metadata: dict | None) -> dict:
    """Flags given win; else a saved model's values; else :data:`WINDOW_DEFAULTS`."""
    stored = metadata or {}
    return {
        name: getattr(task_args, name) if getattr(task_args, name) is not None else stored.get(name, default)
        for name, default in WINDOW_DEFAULTS.items()
    }


def _settings(metadata: dict, task_args: QAArguments, eval_examples: Examples | None) -> dict:
    metric = task_args.metric
    if metric == "auto":
        metric = (
            "cmrc2018" if eval_examples is not None and looks_chinese(eval_examples.contexts) else "squad"
        )
    if metric == "cmrc2018" and metadata["version_2_with_negative"]:
        raise UserError("--metric cmrc2018 scores answerable questions only; it has no v2.0 'no answer' mode")
    threshold = task_args.null_threshold
    if threshold is None:
        threshold = metadata.get("null_threshold", 0.0)
    return {
        "max_answer_length": metadata["max_answer_length"],
        "n_best": metadata["n_best"],
        "version_2_with_negative": metadata["version_2_with_negative"],
        "null_threshold": float(threshold),
        "metric": metric,
        "tune_null_threshold": task_args.tune_null_threshold,
    }


def prepare(
    splits: dict[str, Split], tokenizer, task_args: QAArguments, data_args, metadata=None
) -> Prepared:
    """Check answers, cut question + context into windows, label spans; build the evaluator."""
    train, evaluation = splits.get("train"), splits.get("validation")
    examples = {
        name: read_examples(split, task_args)
        for name, split in (("train", train), ("validation", evaluation))
        if split
    }
    knobs = window_settings(task_args, metadata)
    if metadata is None:
        first = examples.get("train") or examples["validation"]
        v2 = task_args.version_2_with_negative
        if v2 is None:
            v2 = any(first.impossible)
        metadata = {
            "question_column": task_args.question_column,
            "context_column": task_args.context_column,
            "id_column": task_args.id_column,
            "max_length": data_args.max_length,
            **knobs,
            "version_2_with_negative": bool(v2),
            "null_threshold": float(task_args.null_threshold or 0.0),
            "context_position": resolve_context_position(tokenizer, task_args.context_position),
        }
    else:
        metadata = {**metadata, **knobs}
        if task_args.version_2_with_negative is not None:
            metadata["version_2_with_negative"] = task_args.version_2_with_negative
    v2 = metadata["version_2_with_negative"]

    def windows_for(ex: Examples) -> Windows:
        return make_windows(
            tokenizer,
            ex.questions,
            ex.contexts,
            max_length=data_args.max_length,
            doc_stride=knobs["doc_stride"],
            max_question_length=knobs["max_question_length"],
            context_position=metadata["context_position"],
        )

    train_ds = eval_ds = evaluator = None
    if "train" in examples:
        ex = examples["train"]
        spans, _ = check_answers(ex.answers, ex.contexts, ex.ids, ex.source, task_args.answer_check)
        keep = []
        for i, span in enumerate(spans):
            if span is not None or (v2 and ex.impossible[i]):
                keep.append(i)
        dropped = len(ex) - len(keep)
        unanswerable = sum(ex.impossible)
        if not v2 and unanswerable:
            logger.warning(
                "%s: %d questions have no answer but version_2_with_negative is off; they are not trained on "
                "(pass --version_2_with_negative true to learn 'no answer')",
                ex.source,
                unanswerable,
            )
        if not keep:
            raise UserError(
                f"{ex.source}: no question has an answer span that matches its context; nothing to train on"
            )
        if dropped:
            print(
                f"[encoder-tasks] {ex.source}: training on {len(keep)} of {len(ex)} questions ({dropped} without a usable span)"
            )
        kept = Examples(
            [ex.ids[i] for i in keep],
            [ex.questions[i] for i in keep],
            [ex.contexts[i] for i in keep],
            [ex.answers[i] for i in keep],
            [ex.impossible[i] for i in keep],
            ex.source,
        )
        windows = windows_for(kept)
        starts, ends = label_windows(windows, [spans[i] for i in keep])
        train_ds = windows_dataset(windows, starts, ends)
        logger.info("%s: %d questions -> %d windows", ex.source, len(kept), len(windows))
    if "validation" in examples:
        ex = examples["validation"]
        spans, _ = check_answers(ex.answers, ex.contexts, ex.ids, ex.source, task_args.answer_check)
        if not v2 and any(ex.impossible):
            logger.warning(
                "%s: %d questions have no gold answer; with version_2_with_negative off they score 0",
                ex.source,
                sum(ex.impossible),
            )
        windows = windows_for(ex)
        starts, ends = label_windows(windows, spans)
        eval_ds = windows_dataset(windows, starts, ends, with_index=True)
        evaluator = QAEvaluator(ex, windows, _settings(metadata, task_args, ex))
        logger.info("%s: %d questions -> %d windows", ex.source, len(ex), len(windows))
    return Prepared(
        train=train_ds,
        eval=eval_ds,
        metadata=metadata,
        collator=lambda pad: PaddingCollator(
            tokenizer,
            pad_to_multiple_of=pad,
            extra_keys=("start_positions", "end_positions", "feature_index"),
        ),
        compute_metrics=evaluator,
        head_kwargs={},
    )


def build_model(encoder, head_kwargs: dict) -> ExtractiveQuestionAnswering:
    return ExtractiveQuestionAnswering(encoder, **head_kwargs)


# ---- prediction ------------------------------------------------------------------------------
@torch.inference_mode()
def predict_answers(
    model: ExtractiveQuestionAnswering,
    tokenizer,
    questions: list[str],
    contexts: list[str],
    batch_size: int = 32,
    max_length: int | None = None,
    doc_stride: int | None = None,
    max_answer_length: int | None = None,
    n_best: int | None = None,
    null_threshold: float | None = None,
) -> list[dict]:
    """Answer each question from its context (one result per question, input order).

    Settings default to the ones stored with the model (``null_threshold``: the tuned one).

    Example:
        >>> results = predict_answers(model, tokenizer, ["Who lives in Paris?"],
        ...                           ["John Smith lives in Paris."])  # doctest: +SKIP
        >>> results[0]["answer"], results[0]["start"]  # doctest: +SKIP
        ('John Smith', 0)
    """
    meta = model.metadata
    max_length = max_length or meta.get("max_length") or tokenizer.model_max_length
    windows = make_windows(
        tokenizer,
        [q.lstrip() for q in questions],
        list(contexts),
        max_length=max_length,
        doc_stride=meta.get("doc_stride", 128) if doc_stride is None else doc_stride,
        max_question_length=meta.get("max_question_length", 64),
        context_position=meta.get("context_position", "second"),
    )
    keys = list(windows.encodings)
    order = sorted(range(len(windows)), key=lambda i: len(windows.encodings["input_ids"][i]))
    logits: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(windows)
    from ..tracking import progress

    for start in progress(range(0, len(order), batch_size), desc="answering", unit="batch"):
        chunk = order[start : start + batch_size]
        batch = tokenizer.pad(
            [{k: windows.encodings[k][i] for k in keys} for i in chunk], return_tensors="pt"
        )
        out = model(**{k: v.to(model.device) for k, v in batch.items()})
        for row, i in enumerate(chunk):
            n = len(windows.encodings["input_ids"][i])
            logits[i] = (
                out.start_logits[row, :n].float().cpu().numpy(),
                out.end_logits[row, :n].float().cpu().numpy(),
            )
    by_example: dict[int, list[int]] = defaultdict(list)
    for i, example in enumerate(windows.example_index):
        by_example[example].append(i)
    threshold = meta.get("null_threshold", 0.0) if null_threshold is None else null_threshold
    results = []
    for example, context in enumerate(contexts):
        parts = [(*logits[i], windows.offsets[i], windows.null_index[i]) for i in by_example[example]]
        result = postprocess_example(
            context,
            parts,
            max_answer_length=max_answer_length or meta.get("max_answer_length", 30),
            n_best=n_best or meta.get("n_best", 20),
            version_2_with_negative=bool(meta.get("version_2_with_negative")),
            null_threshold=float(threshold),
        )
        result["windows"] = len(parts)
        results.append(result)
    return results


@dataclass
class QAPredictArguments(PredictArguments):
    """Prediction settings for QA: a file of question/context rows, or one --question/--context."""

    question: str | None = field(
        default=None, metadata={"help": "Answer this one question (with --context)."}
    )
    context: str | None = field(default=None, metadata={"help": "The passage for --question."})
    question_column: str | None = field(
        default=None, metadata={"help": "Question column (default: as in training)."}
    )
    context_column: str | None = field(
        default=None, metadata={"help": "Context column (default: as in training)."}
    )
    id_column: str | None = field(default=None, metadata={"help": "Id column (default: as in training)."})
    doc_stride: int | None = field(
        default=None, metadata={"help": "Window overlap (default: as in training)."}
    )
    max_answer_length: int | None = field(
        default=None, metadata={"help": "Longest answer in tokens (default: as in training)."}
    )
    null_threshold: float | None = field(
        default=None,
        metadata={"help": "v2.0 no-answer threshold (default: the tuned one stored with the model)."},
    )
    top_k: int = field(default=1, metadata={"help": "Also list this many best candidate spans per question."})

    def check(self) -> None:
        if self.question is not None or self.context is not None:
            if not (self.question and self.context):
                raise UserError("predict: --question and --context go together (both non-empty)")
            if not self.model_dir:
                raise UserError("predict: --model_dir is required")
            if self.input_file:
                raise UserError("predict: give either --input_file or --question/--context, not both")
            return
        super().check()


def _record(result: dict, top_k: int) -> dict:
    record = {
        "answer": result["answer"] if not result["no_answer"] else "no answer",
        "no_answer": result["no_answer"],
        "start": result["start"],
        "end": result["end"],
        "score": None if result["score"] is None else round(result["score"], 6),
    }
    if "null_score_diff" in result and math.isfinite(result["null_score_diff"]):
        record["null_score_diff"] = round(result["null_score_diff"], 6)
    if top_k > 1:
        record["candidates"] = [
            {**c, "score": round(c["score"], 6), "probability": round(c["probability"], 6)}
            for c in result["n_best"][:top_k]
        ]
    if result.get("windows", 1) > 1:
        record["windows"] = result["windows"]
    return record


def predict_file(args: QAPredictArguments) -> dict:
    """Answer every question of ``input_file`` (or the one ``--question``); write JSONL in input order.

    Each line: ``id``, ``question``, ``answer`` (``"no answer"`` when the model says so, with
    ``no_answer: true``), ``start``/``end`` character offsets into the context, ``score``.

    Example:
        >>> predict_file(QAPredictArguments(model_dir="runs/qa", question="Who lives in Paris?",
        ...              context="John Smith lives in Paris."))  # doctest: +SKIP
    """
    import json

    from ..backbone import load_tokenizer
    from ..run import write_jsonl

    args.check()
    model = ExtractiveQuestionAnswering.from_pretrained(args.model_dir)
    tokenizer = load_tokenizer(args.model_dir)
    if torch.cuda.is_available():
        model.cuda()
    meta = model.metadata
    options = dict(
        batch_size=args.batch_size,
        max_length=args.max_length,
        doc_stride=args.doc_stride,
        max_answer_length=args.max_answer_length,
        n_best=max(args.top_k, meta.get("n_best", 20)),
        null_threshold=args.null_threshold,
    )
    if args.question is not None:
        result = predict_answers(model, tokenizer, [args.question], [args.context], **options)[0]
        record = {"question": args.question, **_record(result, args.top_k)}
        if args.output_file:
            write_jsonl(args.output_file, [record])
        print(json.dumps(record, ensure_ascii=False))
        return {"predictions": 1}
    column_names = [c.strip() for c in args.column_names.split(",")] if args.column_names else None
    split = Split(
        "predict",
        args.input_file,
        read_squad(args.input_file, args.delimiter, column_names, args.encoding),
    )
    columns = QAArguments(
        question_column=args.question_column or meta.get("question_column", "question"),
        context_column=args.context_column or meta.get("context_column", "context"),
        id_column=args.id_column or meta.get("id_column", "id"),
    )
    examples = read_examples(split, columns, need_answers=False)
    results = predict_answers(model, tokenizer, examples.questions, examples.contexts, **options)
    lines = split.dataset["_line"]
    records = [
        {"line": line, "id": qid, "question": q, **_record(r, args.top_k)}
        for line, qid, q, r in zip(lines, examples.ids, examples.questions, results)
    ]
    write_jsonl(args.output_file, records)
    unanswered = sum(r["no_answer"] for r in results)
    print(
        f"[encoder-tasks] wrote {len(records)} answers to {args.output_file}"
        + (f" ({unanswered} 'no answer')" if unanswered else "")
    )
    return {"predictions": len(records), "no_answer": unanswered}


Arguments = QAArguments
PredictArguments = QAPredictArguments  # noqa: F811

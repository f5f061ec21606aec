"""QA data for training and evaluation: questions read and checked, cut into windows, labelled.

- :func:`read_examples`: questions, contexts and answers of a split, validated;
- :func:`derive_splits`: ``--eval_split_by_article`` (hold out whole articles);
- :func:`prepare`: answers checked against their contexts, question + context cut into
  overlapping windows (``doc_stride``) with character offsets kept, start/end labels, and
  the evaluator that puts windows back together per question.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ...data.columns import resolve_column
from ...data.loading import Split
from ...errors import UserError
from ...task import Prepared
from .args import QAArguments, QASettings
from .reading import check_answers, normalize_answers, split_by_article

logger = logging.getLogger(__name__)


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

    def select(self, keep: list[int]) -> Examples:
        """The questions at the indices ``keep``, in that order."""
        return Examples(
            *([values[i] for i in keep] for values in (self.ids, self.questions, self.contexts)),
            [self.answers[i] for i in keep],
            [self.impossible[i] for i in keep],
            self.source,
        )


def read_examples(split: Split, args, need_answers: bool = True) -> Examples:
    """Questions, contexts and answers of a split, validated (names the row and id of a problem).

    ``args`` names the columns (``question_column``, ``context_column``, ``id_column`` and,
    with ``need_answers``, ``answers_column``).

    Example:
        >>> import datasets
        >>> rows = {"question": ["  who?"], "context": ["john"], "answers": [{"text": ["john"], "answer_start": [0]}]}
        >>> ex = read_examples(Split("train", "t.json", datasets.Dataset.from_dict(rows)), QAArguments())
        >>> ex.ids, ex.questions, ex.impossible
        (['0'], ['who?'], [False])
    """
    data = split.dataset
    q_col = resolve_column(split, args.question_column, "question")
    c_col = resolve_column(split, args.context_column, "context")
    a_col = resolve_column(split, args.answers_column, "answers") if need_answers else None
    id_col = resolve_column(split, args.id_column, "id", required=False)
    first = split.first_index  # a chunk of a file: ids number the file's rows
    ids = [str(v) for v in data[id_col]] if id_col else [str(first + i) for i in range(len(data))]
    questions, contexts = data[q_col], data[c_col]
    for index, (question, context) in enumerate(zip(questions, contexts)):
        for value, column in ((question, q_col), (context, c_col)):
            if not isinstance(value, str) or not value.strip():
                raise UserError(
                    f"{split.location(index)} (id {ids[index]}): column {column!r} must be non-empty text, "
                    f"found {value!r}"
                )
    if a_col:
        answers = [
            normalize_answers(value, f"{split.location(index)} (id {ids[index]})")
            for index, value in enumerate(data[a_col])
        ]
    else:
        answers = [{"text": [], "answer_start": []} for _ in ids]
    if "is_impossible" in data.column_names:
        impossible = [bool(v) for v in data["is_impossible"]]
    else:
        impossible = [a_col is not None and not a["text"] for a in answers]
    # run_qa.py strips the question's leading whitespace too: some SQuAD questions start with
    # many spaces, which would only eat context room.
    return Examples(ids, [q.lstrip() for q in questions], list(contexts), answers, impossible, split.source)


def _split_articles(
    split: Split, fraction: float, seed: int, column: str = "title", flag: str = "--eval_split_by_article"
) -> tuple[Split, Split]:
    """``split`` as (kept, held out) with no article (or passage: ``column``) on both sides, logged."""
    kept, held = split_by_article(split.dataset, fraction, seed, title_column=column, flag=flag)
    unit = "articles" if column == "title" else "passages"
    logger.info(
        "%s: %d questions kept, %d from %d held-out %s to evaluate on",
        split.source,
        len(kept),
        len(held),
        len(set(held[column])),
        unit,
    )
    return Split("train", split.source, kept), Split("validation", split.source, held)


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
        out["train"], out["validation"] = _split_articles(train, fraction, task_args.article_split_seed)
    elif validation is not None:  # evaluating: the same held-out articles the training run had
        out["validation"] = _split_articles(validation, fraction, task_args.article_split_seed)[1]
    return out


def hold_out_articles(train: Split, fraction: float, task_args: QAArguments) -> tuple[Split, Split]:
    """A validation split of whole articles (questions on one passage are never on both sides);
    by context passage where the file has no ``title`` column or one title for every row."""
    from ...data.holdout import HOLD_OUT_SEED

    dataset = train.dataset
    # By article where the file names at least two, else by passage (one title for a whole file).
    titled = "title" in dataset.column_names and len(set(dataset["title"])) > 1
    column = "title" if titled else task_args.context_column
    kept, held = _split_articles(
        train, fraction, HOLD_OUT_SEED, column, flag="--early_stopping_patience (holding out validation data)"
    )
    return kept, Split("validation", f"{train.source} (held-out {fraction:.0%} by {column})", held.dataset)


def make_settings(
    task_args: QAArguments, data_args, tokenizer, examples: Examples, saved: QASettings | None = None
) -> QASettings:
    """The settings this run saves (or, evaluating, ``saved`` with the resolved flags on top).

    The flags are already resolved (given > saved > default); only what is left to the data
    is decided here: v2.0 mode from ``examples`` when unset, ``auto`` context position.
    """
    from .windows import resolve_context_position

    v2 = task_args.version_2_with_negative
    if v2 is None:
        v2 = any(examples.impossible)
    values = {
        "question_column": task_args.question_column,
        "context_column": task_args.context_column,
        "answers_column": task_args.answers_column,
        "id_column": task_args.id_column,
        "max_length": data_args.max_length,
        "doc_stride": task_args.doc_stride,
        "max_question_length": task_args.max_question_length,
        "max_answer_length": task_args.max_answer_length,
        "n_best": task_args.n_best,
        "version_2_with_negative": bool(v2),
        "null_threshold": float(task_args.null_threshold),
        "context_position": resolve_context_position(tokenizer, task_args.context_position),
    }
    return QASettings.from_dict({**(saved.to_dict() if saved is not None else {}), **values})


def _train_examples(ex: Examples, task_args: QAArguments, v2: bool):
    """The training questions with a usable span (or, v2.0, none to find), and their spans."""
    spans, _ = check_answers(ex.answers, ex.contexts, ex.ids, ex.source, task_args.answer_check)
    keep = [i for i, span in enumerate(spans) if span is not None or (v2 and ex.impossible[i])]
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
    if len(keep) < len(ex):
        logger.info(
            "%s: training on %d of %d questions (%d without a usable span)",
            ex.source,
            len(keep),
            len(ex),
            len(ex) - len(keep),
        )
    return ex.select(keep), [spans[i] for i in keep]


def prepare(
    splits: dict[str, Split], tokenizer, task_args: QAArguments, data_args, saved: QASettings | None = None
) -> Prepared:
    """Check answers, cut question + context into windows, label spans; build the evaluator.

    ``task_args``/``data_args`` are already resolved against ``saved`` (a saved model's
    settings, when evaluating), so their values are the ones to use. Evaluating a v2.0 model
    with its tuned null threshold on the data it was tuned on warns.
    """
    from ...collators import PaddingCollator
    from .metrics import QAEvaluator, resolve_metric, warn_if_evaluating_on_tuning_data
    from .windows import label_windows, make_windows, windows_dataset

    examples = {
        name: read_examples(splits[name], task_args) for name in ("train", "validation") if splits.get(name)
    }
    if not examples:
        raise UserError("qa: no training or evaluation data to prepare")
    settings = make_settings(
        task_args, data_args, tokenizer, examples.get("train") or examples["validation"], saved
    )
    v2 = settings.version_2_with_negative

    def windows_for(ex: Examples):
        return make_windows(
            tokenizer,
            ex.questions,
            ex.contexts,
            max_length=settings.max_length,
            doc_stride=settings.doc_stride,
            max_question_length=settings.max_question_length,
            context_position=settings.context_position,
        )

    train_ds = eval_ds = evaluator = None
    if "train" in examples:
        kept, spans = _train_examples(examples["train"], task_args, v2)
        windows = windows_for(kept)
        train_ds = windows_dataset(windows, *label_windows(windows, spans))
        logger.info("%s: %d questions -> %d windows", kept.source, len(kept), len(windows))
    if "validation" in examples:
        ex = examples["validation"]
        spans, _ = check_answers(ex.answers, ex.contexts, ex.ids, ex.source, task_args.answer_check)
        if not v2 and any(ex.impossible):
            logger.warning(
                "%s: %d questions have no gold answer; with version_2_with_negative off they score 0",
                ex.source,
                sum(ex.impossible),
            )
        if saved is not None:
            warn_if_evaluating_on_tuning_data(settings, saved, ex.source)
        windows = windows_for(ex)
        eval_ds = windows_dataset(windows, *label_windows(windows, spans), with_index=True)
        evaluator = QAEvaluator(ex, windows, settings, resolve_metric(task_args.metric, ex.contexts, v2))
        logger.info("%s: %d questions -> %d windows", ex.source, len(ex), len(windows))
    return Prepared(
        train=train_ds,
        eval=eval_ds,
        settings=settings,
        collator=lambda pad: PaddingCollator(
            tokenizer,
            pad_to_multiple_of=pad,
            extra_keys=("start_positions", "end_positions", "feature_index"),
        ),
        compute_metrics=evaluator,
    )

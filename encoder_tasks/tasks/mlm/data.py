"""MLM data: documents cut into blocks (:mod:`.text`), the masking collator (:mod:`.masking`),
and the settings saved with the model.

Example:
    >>> import datasets
    >>> from encoder_tasks.config import DataArguments
    >>> from encoder_tasks.data import Split
    >>> from encoder_tasks.testing import make_tiny_tokenizer
    >>> from encoder_tasks.tasks.mlm.args import MLMArguments
    >>> docs = datasets.Dataset.from_dict({"text": ["the film was good", "the cat sat on the mat"] * 10})
    >>> prepared = prepare({"train": Split("train", "docs", docs)}, make_tiny_tokenizer(),
    ...                    MLMArguments(validation_fraction=0.1), DataArguments(max_length=16))
    >>> prepared.settings.max_length, prepared.eval is not None
    (16, True)
"""

from __future__ import annotations

import logging

from ...data import Split, resolve_column
from ...data.holdout import hold_out
from ...task import Prepared, TaskSettings
from .args import MLMArguments, MLMSettings, masking_mode
from .masking import MaskingCollator, has_cjk, load_segmenter
from .metrics import compute_metrics
from .text import make_blocks

logger = logging.getLogger(__name__)


def _warn_about_chinese(split: Split, column: str) -> None:
    sample = split.dataset.select(range(min(200, len(split.dataset))))[column]
    if any(isinstance(t, str) and has_cjk(t) for t in sample):
        logger.warning(
            "%s: Chinese text with whole-word masking but no word segmenter: Chinese is masked character by "
            "character (pip install jieba for word-level masking)",
            split.source,
        )


def prepare(
    splits: dict[str, Split],
    tokenizer,
    task_args: MLMArguments,
    data_args,
    saved: TaskSettings | None = None,
) -> Prepared:
    """Cut the documents into blocks and set up masking.

    ``task_args`` and ``data_args`` are already resolved against a saved model's settings
    (:func:`encoder_tasks.settings.resolve`); ``saved`` is those settings, kept as they are.
    Without validation data, ``--validation_fraction`` of the training documents is held out.
    """
    mode = masking_mode(task_args.masking, task_args.whole_word_masking)
    segmenter = load_segmenter(task_args.chinese_segmenter) if mode == "words" else None
    train, evaluation = splits.get("train"), splits.get("validation")
    if (
        train is not None
        and evaluation is None
        and task_args.validation_fraction > 0
        and len(train.dataset) > 1
    ):
        train, evaluation = hold_out(train, task_args.validation_fraction)
    blocks = {}
    for name, split in (("train", train), ("validation", evaluation)):
        if split is None:
            continue
        column = resolve_column(split, task_args.text_column, "text")
        if mode == "words" and segmenter is None:
            _warn_about_chinese(split, column)
        blocks[name] = make_blocks(
            split.dataset,
            tokenizer,
            column,
            data_args.max_length,
            task_args.line_by_line,
            segmenter,
            split.source,
            identifiers=mode == "identifiers",
        )
    settings = saved
    if settings is None:
        # With whole-word masking, the segmenter "auto" chose (so evaluate masks words as
        # training did); without, no choice was made and the flag is kept as given.
        used = task_args.chinese_segmenter
        if mode == "words":
            used = "jieba" if segmenter is not None else "none"
        settings = MLMSettings.from_arguments(task_args, data_args.max_length, chinese_segmenter=used)

    def collator(pad):
        return MaskingCollator(
            tokenizer,
            mask_rate=task_args.mask_rate,
            mask_replace_prob=task_args.mask_replace_prob,
            random_replace_prob=task_args.random_replace_prob,
            whole_word_masking=task_args.whole_word_masking,
            masking=task_args.masking,
            eval_seed=task_args.eval_mask_seed,
            pad_to_multiple_of=pad,
        )

    return Prepared(
        train=blocks.get("train"),
        eval=blocks.get("validation"),
        settings=settings,
        collator=collator,
        compute_metrics=compute_metrics,
    )

"""Tagging data for training and evaluation: sentences read and validated, tags normalised
to IOB2, the label set learnt (training) or taken from the saved model (evaluation), the
vocabulary extended for characters the tokenizer does not know, and sentences tokenised
into windows of whole words.

Example:
    >>> import datasets
    >>> from types import SimpleNamespace
    >>> from encoder_tasks.data import Split
    >>> from encoder_tasks.testing import make_tiny_tokenizer
    >>> from encoder_tasks.tasks.ner.args import NerArguments
    >>> ds = datasets.Dataset.from_dict({"tokens": [["john", "lives"]], "tags": [["B-PER", "O"]]})
    >>> prepared = prepare({"train": Split("train", "t.jsonl", ds)}, make_tiny_tokenizer(),
    ...                    NerArguments(), SimpleNamespace(max_length=32))
    >>> prepared.settings.label_names, prepared.train[0]["labels"]
    (['O', 'B-PER', 'I-PER'], [1, 0])
"""

from __future__ import annotations

import logging
from typing import Any

from ...data.columns import resolve_column
from ...data.loading import Split
from ...errors import UserError
from ...task import Prepared
from .args import NerArguments, NerSettings
from .features import IGNORE, TaggingCollator, featurize
from .metrics import TaggingMetrics
from .reading import normalise_tags, read_sentences, warn_token_prefix
from .schemes import detect_scheme, iob2_labels, split_tag
from .text import guess_level, missing_characters

logger = logging.getLogger(__name__)


def extend_vocabulary(tokenizer, sentences, mode: str, min_count: int) -> list[str]:
    """Add the training data's characters the tokenizer maps to [UNK]; return them."""
    missing = missing_characters(tokenizer, sentences, mode, min_count)
    if missing:
        tokenizer.add_tokens(missing)
        logger.info(
            "vocabulary extended with %d characters the tokenizer knew only as %s (e.g. %s); "
            "embeddings resized to %d",
            len(missing),
            tokenizer.unk_token,
            "".join(missing[:10]),
            len(tokenizer),
        )
    return missing


def _learn_settings(
    split: Split,
    sentences: list[list[str]],
    iob2: list[list[str]],
    scheme: str,
    tokenizer,
    task_args: NerArguments,
    data_args,
    extend: bool,
) -> NerSettings:
    """The settings a new model saves: labels from the data, flags as given."""
    if scheme == "none":
        label_names = sorted({t for tags in iob2 for t in tags})
    else:
        label_names = iob2_labels({split_tag(t)[1] for tags in iob2 for t in tags if t != "O"})
    if len(label_names) < 2:
        raise UserError(f"{split.source}: only the tag(s) {label_names} occur; nothing to learn")
    extended: list[str] = []
    if extend and task_args.extend_vocabulary != "none":
        extended = extend_vocabulary(
            tokenizer, sentences, task_args.extend_vocabulary, task_args.vocabulary_min_count
        )
    level = task_args.tokenization if task_args.tokenization != "auto" else guess_level(sentences)
    return NerSettings(
        max_length=data_args.max_length,
        label_names=label_names,
        tag_scheme=scheme,
        entity_types=sorted({split_tag(t)[1] for t in label_names if split_tag(t)[1]}),
        tokens_column=task_args.tokens_column,
        tags_column=task_args.tags_column,
        token_prefix=task_args.token_prefix,
        window_stride=task_args.window_stride,
        decoding=task_args.decoding,
        tokenization=level,
        token_separator="" if level == "char" else " ",
        added_characters=len(extended),
        invalid_tags=task_args.invalid_tags,
        crf=task_args.crf,
        label_subtokens=task_args.label_subtokens,
        classifier_dropout=task_args.classifier_dropout,
        head_learning_rate=task_args.head_learning_rate,
        crf_learning_rate=task_args.crf_learning_rate,
    )


def _continuation(label_names: list[str]) -> list[int]:
    """Per label, the label of a word's later sub-tokens (``--label_subtokens all``): I-X for B-X."""
    index = {name: i for i, name in enumerate(label_names)}
    return [
        index.get("I-" + (split_tag(n)[1] or ""), i) if n.startswith("B-") else i
        for i, n in enumerate(label_names)
    ]


def prepare(
    splits: dict[str, Split],
    tokenizer,
    task_args: NerArguments,
    data_args,
    saved: NerSettings | None = None,
) -> Prepared:
    """Read, validate and normalise the tags, extend the vocabulary (training only), and
    tokenise into windows.

    ``saved`` (a saved model's settings) fixes the labels; the arguments are already
    resolved against it (flag > saved > default), so they are read as they are. An ``auto``
    tag scheme is the model's own, and ``--decoding`` may choose another decoder.
    """
    import datasets

    present = [(name, splits[name]) for name in ("train", "validation") if splits.get(name) is not None]
    for _, split in present:  # every column problem is reported before any tag problem
        resolve_column(split, task_args.tokens_column, "tokens")
        resolve_column(split, task_args.tags_column, "tags")
    read = {}
    for name, split in present:
        read[name] = read_sentences(
            split, task_args.tokens_column, task_args.tags_column, task_args.token_prefix
        )
        if not task_args.token_prefix:
            warn_token_prefix(read[name][0], split.source)

    first_name, first = present[0]
    scheme = task_args.tag_scheme
    if scheme == "auto" and saved is not None:
        scheme = saved.tag_scheme
    elif scheme == "auto":
        scheme = detect_scheme(read[first_name][1])
        logger.info("%s: tags read as %s", first.source, scheme.upper())
    iob2 = {
        name: normalise_tags(split, read[name][1], scheme, task_args.invalid_tags)[0]
        for name, split in present
    }
    if saved is None:
        sentences = read[first_name][0]
        extend = first_name == "train"
        settings = _learn_settings(
            first, sentences, iob2[first_name], scheme, tokenizer, task_args, data_args, extend
        )
    else:
        settings = saved.replace(decoding=task_args.decoding)

    label_index = {name: i for i, name in enumerate(settings.label_names)}
    continuation = _continuation(settings.label_names)
    out: dict[str, Any] = {}
    compute_metrics = None
    for name, split in present:
        sentences = read[name][0]
        unknown = sorted({t for tags in iob2[name] for t in tags if t not in label_index})
        if unknown and name == "train":
            raise UserError(f"{split.source}: tags {unknown[:5]} are not among the model's labels")
        if unknown:
            logger.warning(
                "%s: tags %s never occur in training; they count as misses and are left out of the loss",
                split.source,
                unknown[:10],
            )
        features = featurize(
            sentences,
            tokenizer,
            data_args.max_length,
            task_args.window_stride,
            labels=[[label_index.get(t, IGNORE) for t in tags] for tags in iob2[name]],
            all_subtokens=task_args.label_subtokens == "all",
            continuation=continuation,
        )
        if len(features) > len(sentences):
            logger.info(
                "%s: %d extra windows for sentences over max_length=%d",
                split.source,
                len(features) - len(sentences),
                data_args.max_length,
            )
        out[name] = datasets.Dataset.from_list(features)
        if name == "validation":
            compute_metrics = TaggingMetrics(features, iob2[name], settings)
    return Prepared(
        train=out.get("train"),
        eval=out.get("validation"),
        settings=settings,
        collator=lambda pad: TaggingCollator(tokenizer, pad_to_multiple_of=pad),
        compute_metrics=compute_metrics,
        training_head={"vocab_size": len(tokenizer)},
    )

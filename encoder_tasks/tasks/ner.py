"""Token tagging (NER, slot filling, POS) on any encoder, with a softmax head or a CRF.

Shape shared by every task module:
- ``NerArguments``: the task's settings (recipe keys / CLI flags),
- ``TokenTagger``: the head (per-word scores from each word's first sub-token; softmax or CRF),
- ``prepare``: sentences read, tags normalised to IOB2, tokenised into windows,
- ``TaggingMetrics``: seqeval strict and lenient F1 on whole sentences (windows stitched),
- ``NerTrainer``: a separate learning rate for the head, and metrics that decode with the CRF,
- ``predict_file``: raw text or pre-tokenised input to tags and entities with character offsets.

Data: CoNLL column files (any suffix but .json/.jsonl), JSON/JSONL records with a token
list and a tag list, ``save_to_disk`` folders and Hub datasets (``ClassLabel`` tags).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers.utils import ModelOutput

from ..config import PredictArguments
from ..crf import LinearChainCRF
from ..data.loading import Split
from ..errors import UserError
from ..heads import EncoderWithHead, head_dropout
from ..tag_schemes import (
    SCHEME_HELP,
    InvalidTagSequence,
    allowed_transitions,
    check_scheme,
    detect_scheme,
    from_iob2,
    iob2_labels,
    spans_from_iob2,
    split_tag,
    to_iob2,
)
from ..tagging.decoding import decode
from ..tagging.features import IGNORE, TaggingCollator, featurize, stitch
from ..tagging.metrics import entity_metrics, plain_tag_metrics
from ..tagging.text import guess_level, join_words, missing_characters, split_words
from ..trainer import EncoderTaskTrainer
from .classification import Prepared, resolve_column

logger = logging.getLogger(__name__)

JSON_SUFFIXES = {".json", ".jsonl", ".ndjson"}


@dataclass
class NerArguments:
    """Settings of the token tagging task."""

    tokens_column: str = field(
        default="tokens|words",
        metadata={"help": "Column with each sentence's tokens; '|' alternatives are tried in order."},
    )
    tags_column: str = field(
        default="tags|ner_tags|labels",
        metadata={
            "help": "Column with each sentence's tags (strings or ClassLabel ids). For CoNLL files the first "
            "column is 'tokens' and the last 'tags' unless --column_names names them."
        },
    )
    tag_scheme: str = field(default="auto", metadata={"help": f"Tag scheme of the data: {SCHEME_HELP}."})
    invalid_tags: str = field(
        default="error",
        metadata={
            "help": "An invalid tag sequence (O I-PER in IOB2): error (stop, naming the line) or repair "
            "(read it as conlleval does, and report how many were fixed)."
        },
    )
    token_prefix: str | None = field(
        default=None,
        metadata={"help": "Prefix to strip from every token, e.g. 'en:' for WikiANN files."},
    )
    label_subtokens: str = field(
        default="first",
        metadata={
            "help": "first: only a word's first sub-token is trained and predicts the word; all: every "
            "sub-token is trained (I-X on the rest of a B-X word), the first still predicts."
        },
    )
    crf: bool = field(
        default=False, metadata={"help": "Use a linear-chain CRF over the words instead of a softmax."}
    )
    decoding: str = field(
        default="auto",
        metadata={
            "help": "Softmax head: viterbi (best sequence that obeys the IOB2 transitions), argmax, or auto "
            "(viterbi for span schemes). The CRF always decodes with constrained Viterbi."
        },
    )
    head_learning_rate: float | None = field(
        default=1e-3,
        metadata={
            "help": "Learning rate of the freshly initialised classifier and CRF (the encoder uses "
            "--learning_rate). A new head learns faster at a higher rate; none = --learning_rate."
        },
    )
    crf_learning_rate: float | None = field(
        default=1e-2,
        metadata={
            "help": "Learning rate of the CRF's start/transition/end scores (few parameters that must move far "
            "from zero in few steps); none = --head_learning_rate."
        },
    )
    classifier_dropout: float | None = field(
        default=None, metadata={"help": "Dropout before the classifier (default: the encoder's own)."}
    )
    window_stride: int = field(
        default=32,
        metadata={
            "help": "Sentences over max_length are cut into windows sharing about this many sub-tokens."
        },
    )
    extend_vocabulary: str = field(
        default="auto",
        metadata={
            "help": "Add characters the tokenizer only knows as [UNK] to its vocabulary (and resize the "
            "embeddings): auto (CJK characters), all (any character), none."
        },
    )
    vocabulary_min_count: int = field(
        default=2, metadata={"help": "Only characters seen this many times in training are added."}
    )
    tokenization: str = field(
        default="auto",
        metadata={
            "help": "How predict cuts raw text into words: word (words and punctuation; CJK characters one "
            "by one), char (every character), or auto (char when the training tokens are single characters)."
        },
    )

    def __post_init__(self):
        self.tag_scheme = check_scheme(self.tag_scheme)
        choices = {
            "invalid_tags": ("error", "repair"),
            "label_subtokens": ("first", "all"),
            "decoding": ("auto", "viterbi", "argmax"),
            "extend_vocabulary": ("auto", "all", "none"),
            "tokenization": ("auto", "word", "char"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise UserError(
                    f"--{name} must be one of {', '.join(allowed)}, found {getattr(self, name)!r}"
                )
        if self.window_stride < 0:
            raise UserError(f"--window_stride must be 0 or more, found {self.window_stride}")


# ---- model ------------------------------------------------------------------------------------
@dataclass
class TokenTaggerOutput(ModelOutput):
    """Loss, per-word scores ``[batch, words, labels]`` and the features' indices (so the
    metrics can put length-sorted evaluation batches back in place)."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    feature_index: torch.Tensor | None = None


class TokenTagger(EncoderWithHead):
    """Per-word tag scores from each word's first sub-token, with an optional CRF.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = TokenTagger(load_encoder(make_tiny_model("bert")), label_names=["O", "B-X", "I-X"], crf=True)
        >>> out = model(input_ids=torch.tensor([[2, 5, 6, 3]]), word_index=torch.tensor([[1, 2]]),
        ...             labels=torch.tensor([[1, 2]]))
        >>> tuple(out.logits.shape), out.loss.ndim
        ((1, 2, 3), 0)
    """

    task = "ner"

    def __init__(
        self,
        encoder,
        label_names: list[str],
        crf: bool = False,
        constrained: bool = True,
        dropout: float | None = None,
        label_subtokens: str = "first",
    ):
        super().__init__(
            encoder,
            label_names=list(label_names),
            crf=crf,
            constrained=constrained,
            dropout=dropout,
            label_subtokens=label_subtokens,
        )
        self.label_names = list(label_names)
        self.num_labels = len(label_names)
        self.dropout = nn.Dropout(head_dropout(encoder.config, dropout))
        self.classifier = nn.Linear(encoder.config.hidden_size, self.num_labels)
        nn.init.normal_(self.classifier.weight, std=getattr(encoder.config, "initializer_range", 0.02))
        nn.init.zeros_(self.classifier.bias)
        self.crf = None
        if crf:
            allowed, start = allowed_transitions(label_names) if constrained else (None, None)
            self.crf = LinearChainCRF(self.num_labels, allowed, start)

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        word_index=None,
        labels=None,
        subtoken_targets=None,
        sentence_start=None,
        feature_index=None,
        length=None,  # kept in the signature so the Trainer keeps the column for length-sorted batches
        **kwargs,
    ):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encode(input_ids, attention_mask, token_type_ids, **kwargs)
        token_logits = self.classifier(self.dropout(hidden))  # [batch, seq, labels]
        if word_index is None:  # every position is a word (plain token classification)
            word_index = torch.arange(input_ids.size(1), device=input_ids.device).expand_as(input_ids)
            word_index = word_index.masked_fill(attention_mask == 0, -1)
        word_mask = word_index >= 0
        gather = word_index.clamp(min=0).unsqueeze(-1).expand(-1, -1, self.num_labels)
        logits = token_logits.gather(1, gather) * word_mask.unsqueeze(-1)
        loss = None
        if labels is not None:
            loss = self.loss(
                logits, labels, word_mask, token_logits, subtoken_targets, word_index, sentence_start
            )
        return TokenTaggerOutput(loss=loss, logits=logits, feature_index=feature_index)

    def loss(self, logits, labels, word_mask, token_logits, subtoken_targets, word_index, sentence_start):
        # Losses run in fp32 even under bf16 autocast (the CRF switches autocast off itself).
        labels = labels.long()
        known = labels != IGNORE
        if self.crf is not None:
            # A CRF scores whole paths, so a word whose gold tag the model lacks (evaluation data
            # only) cannot be left out: it is scored as tag 0 (O).
            tags = labels.masked_fill(~known, 0)
            start = sentence_start if sentence_start is not None else True
            nll = self.crf.nll(logits, tags, word_mask, constrain_start=start)
            loss = nll.sum() / word_mask.sum().clamp(min=1)
            if subtoken_targets is not None:
                # "all": the CRF covers words; the other sub-tokens get a softmax loss of their own.
                rest = subtoken_targets.long().clone()
                rows = torch.arange(rest.size(0), device=rest.device).unsqueeze(1).expand_as(word_index)
                rest[rows[word_mask], word_index[word_mask]] = IGNORE
                if (rest != IGNORE).any():
                    loss = loss + nn.functional.cross_entropy(
                        token_logits.float().flatten(0, 1), rest.flatten(), ignore_index=IGNORE
                    )
            return loss
        if subtoken_targets is not None:
            return nn.functional.cross_entropy(
                token_logits.float().flatten(0, 1), subtoken_targets.long().flatten(), ignore_index=IGNORE
            )
        return nn.functional.cross_entropy(
            logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE
        )


def build_model(encoder, head_kwargs: dict) -> TokenTagger:
    """The tagger; grows the encoder's embeddings first when the vocabulary was extended."""
    kwargs = dict(head_kwargs)
    vocab_size = kwargs.pop("vocab_size", None)
    embeddings = encoder.get_input_embeddings()
    if vocab_size and embeddings is not None and vocab_size > embeddings.num_embeddings:
        # New rows start at the mean of the old ones (transformers' default), not at random.
        encoder.resize_token_embeddings(vocab_size)
    return TokenTagger(encoder, **kwargs)


# ---- reading ----------------------------------------------------------------------------------
def read_split(path, delimiter="auto", column_names=None, encoding="utf-8", split=None):
    """JSON/JSONL and ``save_to_disk`` folders as records, anything else as CoNLL columns."""
    from ..data import read_file
    from ..data.conll import read_conll

    path = Path(path)
    if path.is_dir() or path.suffix.lower() in JSON_SUFFIXES:
        return read_file(path, delimiter, column_names, encoding, split)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    return read_conll(path, delimiter, column_names, encoding)


def _word_location(split: Split, row: int, position: int) -> str:
    """``file line N`` of a token (CoNLL rows: one token per line), else the record and token."""
    line = split.dataset[row]["_line"] if "_line" in split.dataset.column_names else None
    conll = line is not None and Path(split.source).suffix.lower() not in JSON_SUFFIXES
    if conll:
        return f"{split.source} line {line + position}"
    return f"{split.location(row)}, token {position + 1}"


def _tag_names(split: Split, column: str) -> list[str] | None:
    """Names of ``ClassLabel`` tags (Hub datasets store tag ids)."""
    import datasets

    feature = split.dataset.features.get(column)
    inner = getattr(feature, "feature", None)
    if isinstance(inner, datasets.ClassLabel):
        return list(inner.names)
    return None


def read_sentences(split: Split, task_args, token_prefix: str | None, with_tags: bool = True):
    """Tokens (prefix stripped) and raw tags of every sentence, validated."""
    tok_col = resolve_column(split, task_args.tokens_column, "tokens")
    tag_col = resolve_column(split, task_args.tags_column, "tags") if with_tags else None
    names = _tag_names(split, tag_col) if tag_col else None
    all_tokens = split.dataset[tok_col]
    all_tags = split.dataset[tag_col] if tag_col else [None] * len(all_tokens)
    sentences, tag_lists = [], []
    for row, (tokens, tags) in enumerate(zip(all_tokens, all_tags)):
        if isinstance(tokens, str) or not isinstance(tokens, (list, tuple)):
            raise UserError(
                f"{split.location(row)}: column {tok_col!r} must hold a list of tokens, found {type(tokens).__name__}"
            )
        if not tokens:
            raise UserError(f"{split.location(row)}: column {tok_col!r} holds an empty sentence")
        words = []
        for position, token in enumerate(tokens):
            if not isinstance(token, str) or not token.strip():
                raise UserError(
                    f"{_word_location(split, row, position)}: token {token!r} is not a non-empty string"
                )
            if token_prefix and token.startswith(token_prefix) and len(token) > len(token_prefix):
                token = token[len(token_prefix) :]
            words.append(token)
        sentences.append(words)
        if tag_col is None:
            continue
        if not isinstance(tags, (list, tuple)):
            raise UserError(
                f"{split.location(row)}: column {tag_col!r} must hold a list of tags, found {tags!r}"
            )
        if len(tags) != len(tokens):
            raise UserError(
                f"{split.location(row)}: {len(tokens)} tokens but {len(tags)} tags; every token needs one tag"
            )
        if names is not None:
            tags = [names[t] for t in tags]
        for position, tag in enumerate(tags):
            if not isinstance(tag, str) or not tag.strip():
                raise UserError(
                    f"{_word_location(split, row, position)}: tag {tag!r} is not a tag name (strings, or "
                    "ids of a ClassLabel feature)"
                )
        tag_lists.append([t.strip() for t in tags])
    return sentences, tag_lists if tag_col else None


def _warn_prefix(sentences: list[list[str]], source: str) -> None:
    """Every token starting with the same ``xx:`` looks like WikiANN's language prefix."""
    sample = [w for words in sentences[:200] for w in words]
    heads = {w.split(":", 1)[0] + ":" for w in sample if ":" in w[1:]}
    if sample and len(heads) == 1 and all(w.startswith(next(iter(heads))) for w in sample):
        logger.warning(
            "%s: every token starts with %r; pass --token_prefix %s to strip it", source, *heads, *heads
        )


def normalise_tags(
    split: Split, tag_lists: list[list[str]], scheme: str, invalid: str
) -> tuple[list[list[str]], int]:
    """All sentences' tags in IOB2; invalid sequences stop with the line, or are counted and repaired."""
    out, repairs = [], 0
    for row, tags in enumerate(tag_lists):
        try:
            iob2, fixed = to_iob2(tags, scheme, repair=invalid == "repair")
        except InvalidTagSequence as exc:
            raise UserError(
                f"{_word_location(split, row, exc.position)}: {exc}. Fix the data, check --tag_scheme "
                f"(read as {scheme}), or pass --invalid_tags repair"
            ) from None
        out.append(iob2)
        repairs += fixed
    if repairs:
        logger.warning(
            "%s: repaired %d invalid %s tag sequences (--invalid_tags repair)", split.source, repairs, scheme
        )
        print(f"[encoder-tasks] {split.source}: repaired {repairs} invalid {scheme.upper()} tag sequences")
    return out, repairs


# ---- preparation ------------------------------------------------------------------------------
class TaggingMetrics:
    """``compute_metrics`` over whole sentences: window scores are put back in place by
    ``feature_index``, stitched, decoded (CRF Viterbi, or constrained Viterbi/argmax) and
    scored against the gold IOB2 tags with seqeval.

    The CRF's transition scores are read from the model at call time: :class:`NerTrainer`
    binds itself with :meth:`bind`.
    """

    def __init__(self, features: list[dict], references: list[list[str]], metadata: dict):
        self.features = [
            {
                "example_index": f["example_index"],
                "word_offset": f["word_offset"],
                "n_words": len(f["word_index"]),
            }
            for f in features
        ]
        self.references = references
        self.metadata = metadata
        self.trainer = None

    def bind(self, trainer) -> None:
        self.trainer = trainer

    def _crf(self):
        if self.trainer is None:
            if self.metadata.get("crf"):
                raise RuntimeError(
                    "TaggingMetrics of a CRF model must be bound to its trainer (NerTrainer does it)"
                )
            return None
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        return _cpu_crf(model)

    def decode(self, predictions) -> list[list[str]]:
        logits, feature_index = predictions if isinstance(predictions, (tuple, list)) else (predictions, None)
        logits = np.asarray(logits, dtype=np.float32)
        order = np.arange(len(logits)) if feature_index is None else np.asarray(feature_index).reshape(-1)
        per_feature: list[Any] = [None] * len(self.features)
        for row, index in enumerate(order.tolist()):
            per_feature[index] = logits[row, : self.features[index]["n_words"]]
        emissions = stitch(self.features, per_feature, [len(r) for r in self.references])
        tags, _ = decode(emissions, self.metadata["label_names"], self._crf(), _decoding(self.metadata))
        return tags

    def __call__(self, eval_pred) -> dict:
        predictions = self.decode(eval_pred.predictions)
        if self.metadata["tag_scheme"] == "none":
            return plain_tag_metrics(self.references, predictions, self.metadata["label_names"])
        return entity_metrics(self.references, predictions)


def _decoding(metadata: dict) -> str:
    mode = metadata.get("decoding", "auto")
    if mode == "auto":
        return "argmax" if metadata["tag_scheme"] == "none" else "viterbi"
    return mode


def _cpu_crf(model) -> LinearChainCRF | None:
    crf = getattr(model, "crf", None)
    if crf is None:
        return None
    copy = LinearChainCRF(crf.num_tags)
    copy.load_state_dict({k: v.detach().float().cpu() for k, v in crf.state_dict().items()})
    copy.allowed = crf.allowed.cpu() if crf.allowed is not None else None
    copy.allowed_start = crf.allowed_start.cpu() if crf.allowed_start is not None else None
    return copy


def extend_vocabulary(tokenizer, sentences, mode: str, min_count: int) -> list[str]:
    """Add the training data's characters the tokenizer maps to [UNK]; return them."""
    missing = missing_characters(tokenizer, sentences, mode, min_count)
    if missing:
        tokenizer.add_tokens(missing)
        print(
            f"[encoder-tasks] vocabulary extended with {len(missing)} characters the tokenizer knew only as "
            f"{tokenizer.unk_token} (e.g. {''.join(missing[:10])}); embeddings resized to {len(tokenizer)}"
        )
    return missing


def _dataset(features: list[dict]):
    import datasets

    return datasets.Dataset.from_list(features)


def prepare(
    splits: dict[str, Split], tokenizer, task_args: NerArguments, data_args, metadata=None
) -> Prepared:
    """Read, validate and normalise the tags, extend the vocabulary (training only), and
    tokenise into windows. ``metadata`` (a saved model's) fixes the labels and scheme."""
    train, evaluation = splits.get("train"), splits.get("validation")
    for split in (train, evaluation):  # every column problem is reported before any tag problem
        if split is not None:
            resolve_column(split, task_args.tokens_column, "tokens")
            resolve_column(split, task_args.tags_column, "tags")
    token_prefix = task_args.token_prefix or (metadata or {}).get("token_prefix")
    read = {}
    for name, split in (("train", train), ("validation", evaluation)):
        if split is not None:
            read[name] = read_sentences(split, task_args, token_prefix)
            if not token_prefix:
                _warn_prefix(read[name][0], split.source)

    extended: list[str] = []
    if metadata is None:
        first = "train" if train is not None else "validation"
        sentences, raw_tags = read[first]
        scheme = task_args.tag_scheme
        if scheme == "auto":
            scheme = detect_scheme(raw_tags)
            logger.info("%s: tags read as %s", (train or evaluation).source, scheme.upper())
        iob2, _ = normalise_tags(train or evaluation, raw_tags, scheme, task_args.invalid_tags)
        if scheme == "none":
            label_names = sorted({t for tags in iob2 for t in tags})
        else:
            label_names = iob2_labels({split_tag(t)[1] for tags in iob2 for t in tags if t != "O"})
        if len(label_names) < 2:
            raise UserError(
                f"{(train or evaluation).source}: only the tag(s) {label_names} occur; nothing to learn"
            )
        if task_args.extend_vocabulary != "none" and train is not None:
            extended = extend_vocabulary(
                tokenizer, sentences, task_args.extend_vocabulary, task_args.vocabulary_min_count
            )
        level = task_args.tokenization if task_args.tokenization != "auto" else guess_level(sentences)
        metadata = {
            "tag_scheme": scheme,
            "label_names": label_names,
            "entity_types": sorted({split_tag(t)[1] for t in label_names if split_tag(t)[1]}),
            "tokens_column": task_args.tokens_column,
            "tags_column": task_args.tags_column,
            "token_prefix": token_prefix,
            "max_length": data_args.max_length,
            "window_stride": task_args.window_stride,
            "decoding": task_args.decoding,
            "tokenization": level,
            "token_separator": "" if level == "char" else " ",
            "added_characters": len(extended),
            "invalid_tags": task_args.invalid_tags,
        }
    elif task_args.decoding != "auto":  # evaluating a saved model with another decoder
        metadata["decoding"] = task_args.decoding
    scheme, label_names = metadata["tag_scheme"], metadata["label_names"]
    label_index = {name: i for i, name in enumerate(label_names)}
    continuation = [
        label_index.get("I-" + (split_tag(n)[1] or ""), i) if n.startswith("B-") else i
        for i, n in enumerate(label_names)
    ]

    # A run trained with repairs evaluates with them too; a flag asks for them on any model.
    invalid = "repair" if "repair" in (task_args.invalid_tags, metadata.get("invalid_tags")) else "error"
    out: dict[str, Any] = {}
    references = None
    eval_features: list[dict] = []
    for name, split in (("train", train), ("validation", evaluation)):
        if split is None:
            continue
        sentences, raw_tags = read[name]
        iob2, _ = normalise_tags(split, raw_tags, scheme, invalid)
        unknown = sorted({t for tags in iob2 for t in tags if t not in label_index})
        if unknown and name == "train":
            raise UserError(f"{split.source}: tags {unknown[:5]} are not among the model's labels")
        if unknown:
            logger.warning(
                "%s: tags %s never occur in training; they count as misses and are left out of the loss",
                split.source,
                unknown[:10],
            )
        ids = [[label_index.get(t, IGNORE) for t in tags] for tags in iob2]
        features = featurize(
            sentences,
            tokenizer,
            data_args.max_length,
            task_args.window_stride,
            labels=ids,
            all_subtokens=task_args.label_subtokens == "all",
            continuation=continuation,
        )
        windows = len(features) - len(sentences)
        if windows:
            print(
                f"[encoder-tasks] {split.source}: {windows} extra windows for sentences over max_length={data_args.max_length}"
            )
        out[name] = _dataset(features)
        if name == "validation":
            references, eval_features = iob2, features

    compute_metrics = None
    if references is not None:
        compute_metrics = TaggingMetrics(eval_features, references, metadata)
    head_kwargs = {
        "label_names": label_names,
        "crf": task_args.crf,
        "constrained": scheme != "none",
        "dropout": task_args.classifier_dropout,
        "label_subtokens": task_args.label_subtokens,
        "vocab_size": len(tokenizer),
    }
    metadata["crf"] = task_args.crf if "crf" not in metadata else metadata["crf"]
    metadata["head_learning_rate"] = task_args.head_learning_rate
    metadata["crf_learning_rate"] = task_args.crf_learning_rate
    return Prepared(
        train=out.get("train"),
        eval=out.get("validation"),
        metadata=metadata,
        collator=lambda pad: TaggingCollator(tokenizer, pad_to_multiple_of=pad),
        compute_metrics=compute_metrics,
        head_kwargs=head_kwargs,
    )


# ---- training -----------------------------------------------------------------------------------
class NerTrainer(EncoderTaskTrainer):
    """Adds a separate learning rate for the head/CRF and lets the metrics decode with the CRF."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The metrics may be wrapped (run.py records predictions): follow ``compute_metrics``.
        metrics, depth = self.compute_metrics, 0
        while metrics is not None and not isinstance(metrics, TaggingMetrics) and depth < 5:
            metrics, depth = getattr(metrics, "compute_metrics", None), depth + 1
        if isinstance(metrics, TaggingMetrics):
            metrics.bind(self)

    def create_optimizer(self, model=None):
        """AdamW groups: the encoder at ``--learning_rate``, the classifier at
        ``--head_learning_rate``, the CRF at ``--crf_learning_rate`` (never weight-decayed:
        transition scores are not weights to shrink)."""
        model = self.model if model is None else model
        meta = getattr(model, "metadata", {})
        if self.optimizer is not None or not isinstance(model, TokenTagger):
            return super().create_optimizer(model)
        rates = {
            "encoder": self.args.learning_rate,
            "head": meta.get("head_learning_rate") or self.args.learning_rate,
            "crf": meta.get("crf_learning_rate") or meta.get("head_learning_rate") or self.args.learning_rate,
        }
        decay = set(self.get_decay_parameter_names(model))
        grouped: dict[tuple[str, bool], list] = {}
        for name, param in model.named_parameters():
            if not param.requires_grad:
                continue
            part = "crf" if name.startswith("crf.") else "encoder" if name.startswith("encoder.") else "head"
            decayed = name in decay and part != "crf"
            grouped.setdefault((part, decayed), []).append(param)
        groups = [
            {"params": params, "lr": rates[part], "weight_decay": self.args.weight_decay if decayed else 0.0}
            for (part, decayed), params in grouped.items()
        ]
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
        self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
        return self.optimizer


Trainer = NerTrainer


# ---- prediction ---------------------------------------------------------------------------------
@torch.inference_mode()
def _scores(model: TokenTagger, tokenizer, sentences, max_length, stride, batch_size) -> list[np.ndarray]:
    features = featurize(sentences, tokenizer, max_length, stride)
    collate = TaggingCollator(tokenizer)
    order = sorted(range(len(features)), key=lambda i: features[i]["length"])
    rows: list[Any] = [None] * len(features)
    device = model.device
    from ..tracking import progress

    for begin in progress(range(0, len(order), batch_size), desc="tagging", unit="batch"):
        chunk = order[begin : begin + batch_size]
        batch = collate([features[i] for i in chunk])
        batch.pop("feature_index")
        out = model(**{k: v.to(device) for k, v in batch.items()})
        logits = out.logits.float().cpu().numpy()
        for row, i in enumerate(chunk):
            rows[i] = logits[row, : len(features[i]["word_index"])]
    return stitch(features, rows, [len(s) for s in sentences])


def predict_sentences(
    model: TokenTagger,
    tokenizer,
    sentences: list[list[str]],
    batch_size: int = 64,
    max_length=None,
    stride=None,
) -> tuple[list[list[str]], list[np.ndarray]]:
    """IOB2 tags and per-word probabilities for pre-tokenised sentences (any length).

    Example:
        >>> model = TokenTagger.from_pretrained("runs/ner/wnut17")  # doctest: +SKIP
        >>> predict_sentences(model, tokenizer, [["John", "lives", "in", "Paris"]])[0]  # doctest: +SKIP
        [['B-person', 'O', 'O', 'B-location']]
    """
    meta = model.metadata
    max_length = max_length or meta.get("max_length") or tokenizer.model_max_length
    stride = meta.get("window_stride", 32) if stride is None else stride
    scores = _scores(model, tokenizer, sentences, max_length, stride, batch_size)
    crf = _cpu_crf(model)
    return decode(scores, meta["label_names"], crf, _decoding(meta))


def entities(words: list[str], spans: list[tuple[int, int]], text: str, iob2: list[str], probs) -> list[dict]:
    """Entities with character offsets into ``text`` and a score (mean probability of their tags)."""
    found = []
    for kind, start, end in spans_from_iob2(iob2):
        char_start, char_end = spans[start][0], spans[end - 1][1]
        found.append(
            {
                "type": kind,
                "text": text[char_start:char_end],
                "start": char_start,
                "end": char_end,
                "token_start": start,
                "token_end": end,
                "score": round(float(np.mean(probs[start:end])), 6),
            }
        )
    return found


def predict_texts(model: TokenTagger, tokenizer, texts: list[str], **kwargs) -> list[dict]:
    """Tag raw texts: words cut as in training (``word`` or ``char``), entities with offsets.

    Example:
        >>> predict_texts(model, tokenizer, ["John lives in Paris."])[0]["entities"]  # doctest: +SKIP
        [{'type': 'PER', 'text': 'John', 'start': 0, 'end': 4, ...}, ...]
    """
    level = model.metadata.get("tokenization", "word")
    cut = [split_words(t, level) for t in texts]
    sentences = [[w for w, _, _ in words] for words in cut]
    return _results(
        model, tokenizer, texts, sentences, [[(s, e) for _, s, e in words] for words in cut], **kwargs
    )


def predict_tokens(model: TokenTagger, tokenizer, sentences: list[list[str]], **kwargs) -> list[dict]:
    """Tag pre-tokenised sentences; character offsets refer to the tokens joined by the
    training data's separator (a space, or nothing for character-level data)."""
    separator = model.metadata.get("token_separator", " ")
    joined = [join_words(words, separator) for words in sentences]
    return _results(model, tokenizer, [t for t, _ in joined], sentences, [s for _, s in joined], **kwargs)


def _results(model, tokenizer, texts, sentences, spans, **kwargs) -> list[dict]:
    results: list[dict | None] = [None] * len(texts)
    nonempty = [i for i, words in enumerate(sentences) if words]
    tags, probs = (
        predict_sentences(model, tokenizer, [sentences[i] for i in nonempty], **kwargs)
        if nonempty
        else ([], [])
    )
    scheme = model.metadata["tag_scheme"]
    for i in range(len(texts)):
        results[i] = {"text": texts[i], "tokens": [], "tags": [], "entities": []}
    for i, iob2, p in zip(nonempty, tags, probs):
        results[i] = {
            "text": texts[i],
            "tokens": sentences[i],
            "tags": from_iob2(iob2, scheme),
            "entities": [] if scheme == "none" else entities(sentences[i], spans[i], texts[i], iob2, p),
        }
        if scheme == "none":
            results[i]["scores"] = [round(float(x), 6) for x in p]
    return results


@dataclass
class NerPredictArguments(PredictArguments):
    """Prediction settings for tagging. Input: a CoNLL file (tokens; tags, if present, are
    ignored), JSON/JSONL with a ``text`` field (raw text) or a token list, or a .txt file
    with one raw text per line."""

    input_format: str = field(
        default="auto",
        metadata={
            "help": "auto (by suffix: .txt raw lines, .json/.jsonl by field, others CoNLL), text, tokens, conll."
        },
    )
    text_column: str = field(default="text", metadata={"help": "JSON/JSONL field with raw text."})
    tokens_column: str | None = field(
        default=None,
        metadata={"help": "JSON/JSONL field or CoNLL column with tokens (default: as in training)."},
    )
    window_stride: int | None = field(
        default=None,
        metadata={"help": "Sub-tokens shared by neighbouring windows (default: as in training)."},
    )


def _read_predict_inputs(args: NerPredictArguments, meta: dict) -> tuple[list[int | None], list]:
    """(line per input, inputs): each input is a raw text (str) or a token list."""
    from ..data.readers import read_text

    path = Path(args.input_file)
    if not path.is_file():
        raise UserError(f"--input_file {path}: no such file")
    fmt = args.input_format
    suffix = path.suffix.lower()
    if fmt == "auto":
        fmt = "text" if suffix == ".txt" else "json" if suffix in JSON_SUFFIXES else "conll"
    if fmt == "text" and suffix not in JSON_SUFFIXES:
        lines = read_text(path, args.encoding).splitlines()
        rows = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
        return [n for n, _ in rows], [line for _, line in rows]
    spec = args.tokens_column or meta.get("tokens_column") or "tokens"
    if fmt in ("conll", "tokens") and suffix not in JSON_SUFFIXES:
        from ..data.conll import read_conll

        column_names = [c.strip() for c in args.column_names.split(",")] if args.column_names else None
        split = Split("predict", str(path), read_conll(path, args.delimiter, column_names, args.encoding))
        sentences, _ = read_sentences(
            split, NerArguments(tokens_column=spec), meta.get("token_prefix"), False
        )
        return list(split.dataset["_line"]), sentences
    # JSON/JSONL: each record holds raw text or a token list (records may mix the two, so the
    # records are read as they are, not as a table whose columns come from the first one).
    from ..data.readers import read_json, read_jsonl, row_location

    records = (
        read_jsonl(path, args.encoding) if suffix in (".jsonl", ".ndjson") else read_json(path, args.encoding)
    )
    prefix = meta.get("token_prefix")
    token_fields = spec.split("|")
    inputs: list = []
    for i, record in enumerate(records):
        text = record.get(args.text_column) if fmt != "tokens" else None
        words = next((record[f] for f in token_fields if f in record), None)
        if isinstance(text, str):
            inputs.append(text)
        elif isinstance(words, list) and words and all(isinstance(w, str) and w.strip() for w in words):
            inputs.append([w[len(prefix) :] if prefix and w.startswith(prefix) else w for w in words])
        else:
            raise UserError(
                f"{row_location(str(path), record.get('_line'), i)}: expected a {args.text_column!r} string or a "
                f"non-empty {spec!r} list of token strings, found {sorted(k for k in record if k != '_line')}"
            )
    return [r.get("_line") for r in records], inputs


def predict_file(args: NerPredictArguments) -> dict:
    """Tag every input of ``input_file``; write JSONL (input order); return a summary.

    Each line: ``{"line", "text", "tokens", "tags" (the training data's scheme), "entities":
    [{"type", "text", "start", "end", "token_start", "token_end", "score"}]}``.

    Example:
        >>> predict_file(NerPredictArguments(model_dir="runs/ner", input_file="in.txt",
        ...              output_file="tags.jsonl"))  # doctest: +SKIP
    """
    from ..backbone import load_tokenizer
    from ..run import write_jsonl

    args.check()
    if args.input_format not in ("auto", "text", "tokens", "conll"):
        raise UserError(f"--input_format must be auto, text, tokens or conll, found {args.input_format!r}")
    model = TokenTagger.from_pretrained(args.model_dir)
    tokenizer = load_tokenizer(args.model_dir)
    lines, inputs = _read_predict_inputs(args, model.metadata)
    if torch.cuda.is_available():
        model.cuda()
    options = {"batch_size": args.batch_size, "max_length": args.max_length, "stride": args.window_stride}
    results: list[Any] = [None] * len(inputs)
    for kind, run in (("text", predict_texts), ("tokens", predict_tokens)):
        chosen = [i for i, item in enumerate(inputs) if isinstance(item, str) == (kind == "text")]
        if chosen:
            for i, result in zip(chosen, run(model, tokenizer, [inputs[i] for i in chosen], **options)):
                results[i] = result
    records = [{"line": line, **result} for line, result in zip(lines, results)]
    write_jsonl(args.output_file, records)
    n_entities = sum(len(r["entities"]) for r in records)
    print(f"[encoder-tasks] wrote {len(records)} predictions ({n_entities} entities) to {args.output_file}")
    return {"predictions": len(records), "entities": n_entities}


Arguments = NerArguments
PredictArguments = NerPredictArguments

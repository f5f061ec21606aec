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
from ..heads import EncoderWithHead, full_precision, head_dropout
from ..tag_schemes import (
    SCHEME_HELP,
    allowed_transitions,
    check_scheme,
    detect_scheme,
    iob2_labels,
    split_tag,
)
from ..tagging.decoding import cpu_crf_copy, decode, decoding_mode
from ..tagging.features import IGNORE, TaggingCollator, featurize, stitch
from ..tagging.metrics import entity_metrics, plain_tag_metrics
from ..tagging.predict import entities, predict_sentences, predict_texts, predict_tokens
from ..tagging.reading import (
    JSON_SUFFIXES,
    normalise_tags,
    read_sentences,
    read_split,
    warn_token_prefix,
)
from ..tagging.text import guess_level, missing_characters
from ..trainer import EncoderTaskTrainer
from .classification import Prepared, resolve_column

logger = logging.getLogger(__name__)


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
        token_logits = full_precision(self.classifier, self.dropout(hidden))  # [batch, seq, labels]
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
        return cpu_crf_copy(model)

    def decode(self, predictions) -> list[list[str]]:
        logits, feature_index = predictions if isinstance(predictions, (tuple, list)) else (predictions, None)
        logits = np.asarray(logits, dtype=np.float32)
        order = np.arange(len(logits)) if feature_index is None else np.asarray(feature_index).reshape(-1)
        per_feature: list[Any] = [None] * len(self.features)
        for row, index in enumerate(order.tolist()):
            per_feature[index] = logits[row, : self.features[index]["n_words"]]
        emissions = stitch(self.features, per_feature, [len(r) for r in self.references])
        tags, _ = decode(emissions, self.metadata["label_names"], self._crf(), decoding_mode(self.metadata))
        return tags

    def __call__(self, eval_pred) -> dict:
        predictions = self.decode(eval_pred.predictions)
        if self.metadata["tag_scheme"] == "none":
            return plain_tag_metrics(self.references, predictions, self.metadata["label_names"])
        return entity_metrics(self.references, predictions)


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
                warn_token_prefix(read[name][0], split.source)

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


# ---- prediction (the functions live in encoder_tasks.tagging.predict) ----------------------------
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
    from ..inference import autocast_for

    with autocast_for(model.device, args.precision):
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

__all__ = [
    "Arguments",
    "NerArguments",
    "NerPredictArguments",
    "NerTrainer",
    "PredictArguments",
    "TaggingMetrics",
    "TokenTagger",
    "Trainer",
    "build_model",
    "entities",
    "extend_vocabulary",
    "normalise_tags",
    "predict_file",
    "predict_sentences",
    "predict_texts",
    "predict_tokens",
    "prepare",
    "read_sentences",
    "read_split",
]

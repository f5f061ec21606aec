"""The tagging task's settings: its flags (train/evaluate/search, predict) and what a model saves.

Light on purpose (dataclasses and the pure-Python tag schemes): the CLI imports it to build
``--help`` without torch. A saved setting that mirrors a flag has the flag's name, so
:func:`encoder_tasks.settings.resolve` fills every flag left unset from the saved model.

Example:
    >>> NerArguments(tag_scheme="BIO").tag_scheme
    'iob2'
    >>> s = NerSettings(label_names=["O", "B-PER", "I-PER"], tag_scheme="bioes", max_length=128)
    >>> s.replace(decoding="argmax").decoding, s.constrained
    ('argmax', True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...config import PredictArguments
from ...errors import UserError, check_choice, check_probability
from ...task import TaskSettings
from .schemes import SCHEME_HELP, check_scheme

#: Flags with a fixed set of values (the tag scheme is checked by :func:`check_scheme`).
CHOICES = {
    "invalid_tags": ("error", "repair"),
    "label_subtokens": ("first", "all"),
    "decoding": ("auto", "viterbi", "argmax"),
    "extend_vocabulary": ("auto", "all", "none"),
    "tokenization": ("auto", "word", "char"),
}
INPUT_FORMATS = ("auto", "text", "tokens", "conll")


@dataclass
class NerArguments:
    """Settings of the token tagging task (recipe keys / CLI flags).

    For ``evaluate``, every flag left unset takes the value saved with the model (columns,
    token prefix, window stride, decoding, tag scheme: see :mod:`encoder_tasks.settings`).
    """

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
        for name, allowed in CHOICES.items():
            check_choice(name, getattr(self, name), allowed)
        if self.window_stride < 0:
            raise UserError(f"--window_stride must be 0 or more, found {self.window_stride}")


@dataclass
class NerPredictArguments(PredictArguments):
    """Prediction settings for tagging. Input: a CoNLL file (tokens; tags, if present, are
    written beside the predicted ones and scored), JSON/JSONL with a ``text`` field (raw text)
    or a token list (with tags, likewise), or a .txt file with one raw text per line."""

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
    abstain_below: float | None = field(
        default=None,
        metadata={
            "help": "An entity whose probability (CRF forward-backward, or the softmax product) is below "
            "this keeps its span with type null and an 'unsure' field (best type, probability, threshold)."
        },
    )

    def __post_init__(self):
        if self.window_stride is not None and self.window_stride < 0:
            raise UserError(f"--window_stride must be 0 or more, found {self.window_stride}")

    def check(self) -> None:
        super().check()
        check_probability("abstain_below", self.abstain_below)
        if self.input_format not in INPUT_FORMATS:
            raise UserError(
                f"--input_format must be auto, text, tokens or conll, found {self.input_format!r}"
            )


@dataclass(frozen=True)
class NerSettings(TaskSettings):
    """What a tagging model saves (``encoder_tasks.json``): its labels and how it reads and cuts text.

    Fields named like a flag (``tokens_column``, ``window_stride``, ``decoding``...) are that
    flag's value in training; the others are learnt from the data: ``tag_scheme`` (the data's,
    predictions are written back in it), ``tokenization`` (``word`` or ``char``: how ``predict``
    cuts raw text), ``token_separator`` (how pre-tokenised input joins into text for offsets).
    """

    label_names: list[str] = field(default_factory=list)
    tag_scheme: str = "iob2"
    entity_types: list[str] = field(default_factory=list)
    tokens_column: str = "tokens|words"
    tags_column: str = "tags|ner_tags|labels"
    token_prefix: str | None = None
    window_stride: int = 32
    decoding: str = "auto"
    tokenization: str = "word"
    token_separator: str = " "
    #: Characters added to the tokenizer's vocabulary (``--extend_vocabulary``).
    added_characters: int = 0
    invalid_tags: str = "error"
    crf: bool = False
    label_subtokens: str = "first"
    classifier_dropout: float | None = None
    head_learning_rate: float | None = None
    crf_learning_rate: float | None = None

    @property
    def constrained(self) -> bool:
        """Span schemes forbid ``I-X`` after anything but ``B-X``/``I-X``; plain tags (POS) do not."""
        return self.tag_scheme != "none"

    @classmethod
    def from_format1(cls, metadata: Mapping[str, Any]) -> NerSettings:
        """Format 1 saved the head's ``dropout`` (now ``classifier_dropout``) and ``constrained``
        (now derived from the tag scheme) in ``head_config``, next to the flat settings."""
        head = dict(metadata.get("head_config") or {})
        if "dropout" in head:
            head["classifier_dropout"] = head.pop("dropout")
        head.pop("constrained", None)
        flat = {k: v for k, v in metadata.items() if k != "head_config"}
        return cls.from_dict({**head, **flat})

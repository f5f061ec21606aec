"""MLM settings: the flags of train/evaluate/search, of ``predict`` (fill-mask), and the
settings saved with the model (``encoder_tasks.json``).

Light on purpose (dataclasses and :class:`UserError` only): the CLI builds its ``--help``
from these without importing torch.

Example:
    >>> args = MLMArguments(mask_rate=0.3, whole_word_masking=True)
    >>> settings = MLMSettings.from_arguments(args, max_length=128, chinese_segmenter="none")
    >>> settings.mask_rate, settings.max_length, settings.whole_word_masking
    (0.3, 128, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...config import PredictArguments
from ...errors import UserError
from ...task import TaskSettings

#: ``--masking`` choices: single tokens, whole words, or whole identifiers (code).
MASKINGS = ("tokens", "words", "identifiers")
#: ``--chinese_segmenter`` choices: jieba words when installed (auto), jieba, or characters (none).
SEGMENTERS = ("auto", "jieba", "none")


def check_masking(mask_rate: float, mask_replace_prob: float, random_replace_prob: float) -> None:
    """Reject rates a user could mistype (negative, over 1, or replace + random over 1).

    Example:
        >>> check_masking(0.15, 0.8, 0.1)
        >>> check_masking(0.15, 0.9, 0.2)
        Traceback (most recent call last):
        ...
        encoder_tasks.errors.UserError: --mask_replace_prob (0.9) + --random_replace_prob (0.2) must not exceed 1 (the rest of the picked tokens are kept unchanged)
    """
    if not 0.0 < mask_rate < 1.0:
        raise UserError(f"--mask_rate must be in (0, 1), found {mask_rate}")
    for name, value in (
        ("mask_replace_prob", mask_replace_prob),
        ("random_replace_prob", random_replace_prob),
    ):
        if not 0.0 <= value <= 1.0:
            raise UserError(f"--{name} must be in [0, 1], found {value}")
    if mask_replace_prob + random_replace_prob > 1.0 + 1e-9:
        raise UserError(
            f"--mask_replace_prob ({mask_replace_prob}) + --random_replace_prob ({random_replace_prob}) "
            "must not exceed 1 (the rest of the picked tokens are kept unchanged)"
        )


def masking_mode(masking: str, whole_word_masking: bool) -> str:
    """The masking in force: ``--masking``, where ``--whole_word_masking true`` means ``words``.

    Example:
        >>> masking_mode("tokens", True), masking_mode("identifiers", False)
        ('words', 'identifiers')
        >>> masking_mode("identifiers", True)
        Traceback (most recent call last):
        ...
        encoder_tasks.errors.UserError: --whole_word_masking true and --masking identifiers ask for two maskings; give one (--masking words is whole-word masking)
    """
    if masking not in MASKINGS:
        raise UserError(f"--masking must be one of {', '.join(MASKINGS)}, found {masking!r}")
    if whole_word_masking and masking == "identifiers":
        raise UserError(
            "--whole_word_masking true and --masking identifiers ask for two maskings; give one "
            "(--masking words is whole-word masking)"
        )
    return "words" if whole_word_masking else masking


def check_segmenter(choice: str) -> None:
    """Reject a ``--chinese_segmenter`` that is not one of :data:`SEGMENTERS`."""
    if choice not in SEGMENTERS:
        raise UserError(f"--chinese_segmenter must be auto, jieba or none, found {choice!r}")


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
    masking: str = field(
        default="tokens",
        metadata={
            "help": "tokens, words (= --whole_word_masking true) or identifiers (source code: only identifiers "
            "and dotted API names such as os.path.join are masked, each with all its tokens; as many tokens "
            "masked in expectation as --mask_rate of the sequence)."
        },
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
        check_segmenter(self.chinese_segmenter)
        masking_mode(self.masking, self.whole_word_masking)
        if not 0.0 <= self.validation_fraction < 1.0:
            raise UserError(f"--validation_fraction must be in [0, 1), found {self.validation_fraction}")
        if self.head_warmup_steps < 0:
            raise UserError(f"--head_warmup_steps must be >= 0, found {self.head_warmup_steps}")

    @property
    def head_warmup(self) -> float:
        """The head warm-up that applies: none from scratch, where the encoder is as random as
        the head and there is nothing to protect from its gradients.

        Example:
            >>> MLMArguments().head_warmup, MLMArguments(from_scratch="bert-tiny").head_warmup
            (0.1, 0)
        """
        return 0 if self.from_scratch else self.head_warmup_steps


@dataclass
class MLMPredictArguments(PredictArguments):
    """Fill in masked tokens: write the top candidates for every mask token in each text."""

    text_column: str = field(default="text", metadata={"help": "Column with the text (for tables/JSON)."})
    top_k: int = field(default=5, metadata={"help": "Candidates listed per mask token."})

    def __post_init__(self):
        if self.top_k < 1:
            raise UserError(f"--top_k must be at least 1, found {self.top_k}")


@dataclass(frozen=True)
class MLMSettings(TaskSettings):
    """What an MLM model saves: how its text was cut and masked, and its head.

    Every field but ``activation`` has the name of the flag it records, so ``evaluate`` and
    ``predict`` fill unset flags from it (:func:`encoder_tasks.settings.resolve`). Format-1
    files hold the same keys (the head's ``masked_only_head`` and ``activation`` in
    ``head_config``), so the default :meth:`~encoder_tasks.task.TaskSettings.from_format1` reads them.
    """

    text_column: str = "text"
    line_by_line: bool = False
    mask_rate: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    whole_word_masking: bool = False
    #: ``tokens``, ``words`` or ``identifiers`` (files written before this field: ``tokens``, with
    #: ``whole_word_masking`` deciding words).
    masking: str = "tokens"
    #: With whole-word masking, the segmenter training used (``auto`` resolved to ``jieba`` or ``none``).
    chinese_segmenter: str = "auto"
    eval_mask_seed: int = 1234
    masked_only_head: bool = True
    #: The head's activation (None: the one the encoder's config names, see ``model.py``).
    activation: str | None = None

    @classmethod
    def from_arguments(cls, args: MLMArguments, max_length: int, chinese_segmenter: str) -> MLMSettings:
        """The settings a training run saves (``chinese_segmenter``: the one actually loaded)."""
        return cls(
            max_length=max_length,
            text_column=args.text_column,
            line_by_line=args.line_by_line,
            mask_rate=args.mask_rate,
            mask_replace_prob=args.mask_replace_prob,
            random_replace_prob=args.random_replace_prob,
            whole_word_masking=args.whole_word_masking,
            masking=args.masking,
            chinese_segmenter=chinese_segmenter,
            eval_mask_seed=args.eval_mask_seed,
            masked_only_head=args.masked_only_head,
        )

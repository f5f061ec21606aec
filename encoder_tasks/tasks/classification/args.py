"""The classification task's settings: its flags (train, evaluate, predict) and what a model saves.

Light on purpose (dataclasses only): the CLI builds ``--help`` from these without torch.

Example:
    >>> ClassificationArguments(problem_type="multi_label", label_separator="|").tune_thresholds
    True
    >>> saved = ClassificationSettings(problem_type="regression", label_names=["score"], max_length=128)
    >>> ClassificationSettings.from_dict(saved.to_dict()) == saved
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...config import PredictArguments
from ...errors import UserError, check_choice, check_probability
from ...task import TaskSettings

PROBLEM_TYPES = ("auto", "single_label", "multi_label", "regression")
LONG_TEXT = ("window", "truncate")
CALIBRATIONS = ("none", "temperature")
POOLINGS = ("auto", "cls", "mean", "max")
#: ``--pooling auto``: mean pooling for a head that reads a pair of texts (a cross-encoder), [CLS]
#: for one that reads one text. Chosen on validation data, four datasets per head type, three
#: seeds (``benchmarks/bench_pooling.py --sets all``; the table and why in docs/ecosystem.md,
#: "How the default pooling was chosen").
AUTO_POOLING = {"pair": "mean", "single": "cls"}


def resolve_pooling(pooling: str, pair: bool) -> str:
    """The pooling a head gets for ``--pooling`` (``auto``: by whether it reads a text pair).

    Example:
        >>> resolve_pooling("auto", pair=True), resolve_pooling("auto", pair=False)
        ('mean', 'cls')
        >>> resolve_pooling("max", pair=True)
        'max'
    """
    if pooling != "auto":
        return pooling
    return AUTO_POOLING["pair" if pair else "single"]


@dataclass
class ClassificationArguments:
    """Settings of the classification task (recipe keys and CLI flags)."""

    text_column: str = field(
        default="text",
        metadata={
            "help": "Column with the text. Several names separated by '|' are tried in order per file."
        },
    )
    text_pair_column: str | None = field(
        default=None,
        metadata={"help": "Optional second text column (sentence pairs); '|' alternatives allowed."},
    )
    label_column: str = field(default="label", metadata={"help": "Column with the label (or score)."})
    problem_type: str = field(
        default="auto",
        metadata={
            "help": "single_label, multi_label (sigmoid, per-label thresholds), regression, or auto "
            "(lists -> multi_label, non-integer numbers -> regression, else single_label)."
        },
    )
    label_separator: str | None = field(
        default=None,
        metadata={"help": "Multi-label given as one string, e.g. 'sports|politics': the separator."},
    )
    pooling: str = field(
        default="auto",
        metadata={
            "help": "Sequence pooling: auto (default: mean for a pair of texts, cls for one text), cls (the "
            "first token; exports as the plain stock AutoModelForSequenceClassification), mean or max (export "
            "with a modeling file: trust_remote_code=True). Chosen per head type on validation data "
            "(docs/ecosystem.md)."
        },
    )
    classifier_dropout: float | None = field(
        default=None, metadata={"help": "Dropout before the classifier (default: the encoder's own)."}
    )
    head_learning_rate: float | None = field(
        default=1e-3,
        metadata={
            "help": "Learning rate of the freshly initialised classifier (the encoder keeps --learning_rate): a new "
            "head learns faster at a higher rate (chosen on validation, benchmarks/README.md); "
            "none = --learning_rate."
        },
    )
    class_weights: str | None = field(
        default=None,
        metadata={
            "help": "Loss weights for imbalanced data: 'balanced' or comma-separated weights in label order."
        },
    )
    long_text: str = field(
        default="window",
        metadata={
            "help": "At prediction, texts over max_length: window (overlapping windows, logits averaged) or "
            "truncate (cut, counted in a warning)."
        },
    )
    window_stride: int = field(default=64, metadata={"help": "Tokens shared by neighbouring windows."})
    tune_thresholds: bool = field(
        default=True,
        metadata={
            "help": "Multi-label: after training, tune each label's threshold on the validation set and save "
            "it with the model (predict and evaluate use it). eval_* stay scored at 0.5; the tuned scores, "
            "optimistic on the data they were tuned on, are reported as tuned_*."
        },
    )
    calibrate: str = field(
        default="none",
        metadata={
            "help": "Single-label: 'temperature' fits one temperature on the validation set after training "
            "(logits / T before the softmax; labels never change) and saves it with the model, so predict, "
            "serve, evaluate and a reranker give calibrated probabilities. tuned_ece_before/after report it "
            "on the data it was fitted on. 'none' (default) leaves probabilities as trained."
        },
    )

    def __post_init__(self):
        check_choice("problem_type", self.problem_type, PROBLEM_TYPES)
        check_choice("pooling", self.pooling, POOLINGS)
        check_choice("calibrate", self.calibrate, CALIBRATIONS)
        if self.calibrate != "none" and self.problem_type in ("multi_label", "regression"):
            raise UserError(
                f"--calibrate {self.calibrate} calibrates a single-label softmax; --problem_type is "
                f"{self.problem_type}"
            )
        check_long_text(self.long_text)


def check_long_text(value: str) -> None:
    if value not in LONG_TEXT:
        raise UserError(f"--long_text must be window or truncate, found {value!r}")


@dataclass
class ClassificationPredictArguments(PredictArguments):
    """Prediction settings for classification; unset columns and ``max_length`` take the values
    the model was trained with (:func:`encoder_tasks.settings.resolve`)."""

    text_column: str | None = field(default=None, metadata={"help": "Text column (default: as in training)."})
    text_pair_column: str | None = field(
        default=None, metadata={"help": "Second text column, for pair models (default: as in training)."}
    )
    long_text: str = field(
        default="window",
        metadata={"help": "window (average overlapping windows) or truncate (cut, with a count)."},
    )
    window_stride: int = field(default=64, metadata={"help": "Tokens shared by neighbouring windows."})
    abstain_below: float | None = field(
        default=None,
        metadata={
            "help": "Single-label: when the top probability (after the model's saved temperature) is below "
            "this, answer label null with an 'unsure' field (best label, its probability, the threshold) "
            "instead of a label."
        },
    )

    def __post_init__(self):
        check_long_text(self.long_text)
        if self.window_stride < 0:
            raise UserError(f"--window_stride must be 0 or more, found {self.window_stride}")
        check_probability("abstain_below", self.abstain_below)


@dataclass(frozen=True)
class ClassificationSettings(TaskSettings):
    """What a classification (or pair) model saves in ``encoder_tasks.json``.

    The head is built from it (label count, problem type, pooling, dropout); the columns and
    ``max_length`` are the defaults of ``evaluate`` and ``predict``. Fields that mirror a flag
    have the flag's name. Column fields left ``None`` mean "not saved" (the flag's default holds).
    """

    problem_type: str = "single_label"
    #: Class names in logit order (``["score"]`` for regression).
    label_names: list[str] | None = None
    text_column: str | None = None
    text_pair_column: str | None = None
    label_column: str | None = None
    label_separator: str | None = None
    #: Multi-label: one decision threshold per label (0.5 until tuned on the validation set).
    thresholds: list[float] | None = None
    #: The data the thresholds were tuned on (``{"path", "sha256"}``, see
    #: :mod:`encoder_tasks.data.fingerprint`): ``evaluate`` warns when it scores that same data.
    thresholds_tuned_on: dict | None = None
    #: Single-label ``--calibrate temperature``: probabilities are ``softmax(logits / temperature)``
    #: (None: as trained, T = 1).
    temperature: float | None = None
    #: The data the temperature was fitted on (as ``thresholds_tuned_on``).
    temperature_fitted_on: dict | None = None
    pooling: str = "mean"
    classifier_dropout: float | None = None

    @classmethod
    def from_format1(cls, metadata: Mapping[str, Any]) -> ClassificationSettings:
        """Read a format-1 file, whose head arguments were named apart from the settings.

        Example:
            >>> old = {"head_config": {"num_labels": 2, "problem_type": "single_label", "pooling": "cls",
            ...        "dropout": 0.2, "class_weights": None}, "label_names": ["neg", "pos"], "max_length": 64}
            >>> s = ClassificationSettings.from_format1(old)
            >>> s.pooling, s.classifier_dropout, s.label_names, dict(s.extra)
            ('cls', 0.2, ['neg', 'pos'], {})
        """
        head = dict(metadata.get("head_config") or {})
        # num_labels follows from label_names; class_weights shape training only: neither is a setting.
        from_head = {
            "problem_type": head.get("problem_type", "single_label"),
            "pooling": head.get("pooling", "mean"),
            "classifier_dropout": head.get("dropout"),
        }
        flat = {k: v for k, v in metadata.items() if k != "head_config"}
        return cls.from_dict({**from_head, **flat})

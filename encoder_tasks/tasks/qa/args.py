"""The QA task's settings: its flags (train/evaluate/search, predict) and what a model saves.

Light on purpose (dataclasses only): the CLI imports it to build ``--help`` without torch.

Example:
    >>> QAArguments(doc_stride=64).doc_stride, QAArguments().max_answer_length
    (64, 30)
    >>> QASettings(max_length=384, version_2_with_negative=True).replace(null_threshold=-1.5).null_threshold
    -1.5
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...config import PredictArguments
from ...errors import UserError, check_choice
from ...task import TaskSettings

METRICS = ("auto", "squad", "cmrc2018")
CONTEXT_POSITIONS = ("auto", "first", "second")
ANSWER_CHECKS = ("fix", "skip", "error")
#: Window and span-search sizes: each name is a flag and a saved setting, with its lower bound.
WINDOW_MINIMUMS = {"doc_stride": 0, "max_question_length": 1, "max_answer_length": 1, "n_best": 1}


def _check_minimums(args) -> None:
    for name, low in WINDOW_MINIMUMS.items():
        value = getattr(args, name, None)
        if value is not None and value < low:
            raise UserError(f"--{name} must be >= {low}, found {value}")


@dataclass
class QAArguments:
    """Settings of the extractive question answering task (recipe keys / CLI flags).

    For ``evaluate``, every flag left unset takes the value saved with the model (see
    :mod:`encoder_tasks.settings`): columns, window sizes, v2.0 mode, the tuned threshold.
    """

    question_column: str = field(default="question", metadata={"help": "Column with the question."})
    context_column: str = field(default="context", metadata={"help": "Column with the context passage."})
    head_learning_rate: float | None = field(
        default=1e-3,
        metadata={
            "help": "Learning rate of the freshly initialised span head (the encoder keeps --learning_rate): a new "
            "head learns faster at a higher rate (chosen on validation, benchmarks/README.md); "
            "none = --learning_rate."
        },
    )
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
    doc_stride: int = field(
        default=128,
        metadata={
            "help": "Tokens shared by neighbouring windows when a context is longer than max_length "
            "(evaluate: the model's unless given)."
        },
    )
    max_question_length: int = field(
        default=64,
        metadata={
            "help": "Questions longer than this many tokens are cut, so the context keeps the room "
            "(evaluate: the model's unless given)."
        },
    )
    max_answer_length: int = field(
        default=30,
        metadata={"help": "Longest answer considered, in tokens (evaluate: the model's unless given)."},
    )
    n_best: int = field(
        default=20,
        metadata={"help": "Candidate spans kept per question (evaluate: the model's unless given)."},
    )
    version_2_with_negative: bool | None = field(
        default=None,
        metadata={
            "help": "SQuAD v2.0 style: questions may have no answer. Default: on when the training data has "
            "unanswerable questions (is_impossible, or an empty answer list)."
        },
    )
    null_threshold: float = field(
        default=0.0,
        metadata={
            "help": "v2.0: answer 'no answer' when null score - best span score > this. Default: 0 for "
            "training, the tuned value stored with a saved model for evaluate/predict."
        },
    )
    tune_null_threshold: bool = field(
        default=True,
        metadata={
            "help": "v2.0: after each evaluation, store the threshold with the best F1 on the evaluation set "
            "with the model (predict and evaluate use it; evaluate warns on the file it was tuned on). "
            "Reported as best_f1 / best_f1_thresh either way (optimistic: tuned and scored on the same data)."
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
        check_choice("answer_check", self.answer_check, ANSWER_CHECKS)
        check_choice("metric", self.metric, METRICS)
        check_choice("context_position", self.context_position, CONTEXT_POSITIONS)
        _check_minimums(self)


@dataclass
class QAPredictArguments(PredictArguments):
    """Prediction settings for QA: a file of question/context rows, or one --question/--context.

    Columns, ``doc_stride``, ``max_answer_length`` and ``null_threshold`` left unset take the
    values saved with the model (the tuned threshold for v2.0 models).
    """

    question: str | None = field(
        default=None, metadata={"help": "Answer this one question (with --context)."}
    )
    context: str | None = field(default=None, metadata={"help": "The passage for --question."})
    question_column: str = field(
        default="question", metadata={"help": "Question column (unset: the model's, from training)."}
    )
    context_column: str = field(
        default="context", metadata={"help": "Context column (unset: the model's, from training)."}
    )
    id_column: str = field(default="id", metadata={"help": "Id column (unset: the model's, from training)."})
    doc_stride: int = field(
        default=128, metadata={"help": "Window overlap in tokens (unset: the model's, from training)."}
    )
    max_answer_length: int = field(
        default=30, metadata={"help": "Longest answer in tokens (unset: the model's, from training)."}
    )
    null_threshold: float = field(
        default=0.0,
        metadata={"help": "v2.0 no-answer threshold (unset: the tuned one stored with the model)."},
    )
    top_k: int = field(default=1, metadata={"help": "Also list this many best candidate spans per question."})

    def __post_init__(self):
        _check_minimums(self)
        if self.top_k < 1:
            raise UserError(f"--top_k must be at least 1, found {self.top_k}")
        if self.null_threshold is not None and not math.isfinite(self.null_threshold):
            raise UserError(f"--null_threshold must be a finite number, found {self.null_threshold}")

    def check(self) -> None:
        _check_minimums(self)
        if self.question is not None or self.context is not None:
            if not (self.question and self.context):
                raise UserError("predict: --question and --context go together (both non-empty)")
            if not self.model_dir:
                raise UserError("predict: --model_dir is required")
            if self.input_file:
                raise UserError("predict: give either --input_file or --question/--context, not both")
            if self.output_file:  # optional here; but never written over unless told
                from ...data.writers import check_new_file

                check_new_file(self.output_file, self.overwrite_output)
            return
        super().check()


@dataclass(frozen=True)
class QASettings(TaskSettings):
    """What a QA model saves (``encoder_tasks.json``): field names are the flags' names.

    Format-1 files stored the same keys flat, so the default
    :meth:`~encoder_tasks.task.TaskSettings.from_format1` reads them; a format-1 file that
    lacks a key (written before it existed) gets the default below.

    Example:
        >>> QASettings.from_format1({"head_config": {}, "doc_stride": 6, "max_length": 24}).doc_stride
        6
    """

    question_column: str = "question"
    context_column: str = "context"
    answers_column: str = "answers"
    id_column: str = "id"
    doc_stride: int = 128
    max_question_length: int = 64
    max_answer_length: int = 30
    n_best: int = 20
    version_2_with_negative: bool = False
    #: v2.0: the no-answer threshold (tuned on the evaluation set after training).
    null_threshold: float = 0.0
    #: The data ``null_threshold`` was tuned on (``{"path", "sha256"}``, see
    #: :mod:`encoder_tasks.data.fingerprint`): ``evaluate`` warns when it scores that same data.
    null_threshold_tuned_on: dict | None = None
    #: ``first`` or ``second`` (``auto`` is decided from the tokenizer before saving).
    context_position: str = "second"

"""Cross-encoders: both texts of a pair in one input, a label (paraphrase, NLI) or a score out.

This is the classification task with pair defaults, not a copy of it: the same
:class:`~encoder_tasks.tasks.classification.SequenceClassifier` head, preprocessing
(``tokenizer(text, text_pair)`` gives segment ids to the encoders that have them), metrics
(accuracy and F1; Pearson and Spearman for scores) and ``predict``.

Example:
    >>> PairArguments().text_column
    'sentence1|text1|premise|question1|anchor'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import classification
from .classification import ClassificationArguments, SequenceClassifier


@dataclass
class PairArguments(ClassificationArguments):
    """Settings of the pair task: classification settings with pair column defaults."""

    text_column: str = field(
        default="sentence1|text1|premise|question1|anchor",
        metadata={"help": "Column with the first text of each pair; '|' alternatives tried in order."},
    )
    text_pair_column: str | None = field(
        default="sentence2|text2|hypothesis|question2|positive",
        metadata={"help": "Column with the second text of each pair; '|' alternatives tried in order."},
    )
    label_column: str = field(
        default="label|score", metadata={"help": "Column with the label or similarity score."}
    )
    problem_type: str = field(
        default="auto",
        metadata={
            "help": "single_label (paraphrase, NLI), regression (similarity scores), multi_label, or auto "
            "(non-integer numbers -> regression, else single_label). Integer-only scores need regression."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        if not self.text_pair_column:
            from ..errors import UserError

            raise UserError("pair: --text_pair_column is required (use the classification task for one text)")


class PairClassifier(SequenceClassifier):
    """:class:`SequenceClassifier` saved as a ``pair`` model (so ``pair evaluate`` accepts it)."""

    task = "pair"


def prepare(splits, tokenizer, task_args, data_args, metadata=None):
    return classification.prepare(splits, tokenizer, task_args, data_args, metadata)


def build_model(encoder, head_kwargs: dict) -> PairClassifier:
    return PairClassifier(encoder, **head_kwargs)


after_training = classification.after_training
predict_file = classification.predict_file
Arguments = PairArguments
PredictArguments = classification.ClassificationPredictArguments

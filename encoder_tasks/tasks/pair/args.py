"""The pair task's flags: the classification flags with pair column defaults.

A pair model saves :class:`~encoder_tasks.tasks.classification.args.ClassificationSettings`
(same head, same fields), and predicts with the classification prediction flags.

Example:
    >>> PairArguments().text_column
    'sentence1|text1|premise|question1|anchor'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import UserError
from ..classification.args import ClassificationArguments


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
            raise UserError("pair: --text_pair_column is required (use the classification task for one text)")

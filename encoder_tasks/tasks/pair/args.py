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

#: Passages of other rows added to each listwise query's list by default: sentence-transformers'
#: ``num_negatives``. Chosen on validation (``bench_retrieval --phase rerank-variants``, English,
#: seed 42: nDCG@10 71.1 against 65.7 with none), at about twice the training time.
LISTWISE_IN_BATCH_NEGATIVES = 4


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

    listwise_negatives: str | None = field(
        default=None,
        metadata={
            "help": "Train a reranker listwise: the comma-separated columns of each row's negative passages "
            "(negative_1,negative_2,... as `embedding mine` writes them; the text column is the query, the pair "
            "column its positive). A row's passages are scored together and the positive must come first "
            "(softmax cross-entropy); the batch size counts queries. Default: none (one labelled pair per row)."
        },
    )
    listwise_scale: float | None = field(
        default=None,
        metadata={
            "help": "With --listwise_negatives: each passage's score in the softmax is this scale times its "
            "P(relevant) (bounded, as sentence-transformers' CrossEncoder MultipleNegativesRankingLoss scores, "
            "its default 10) instead of the unbounded relevance logit(1) - logit(0). Default: none (unbounded)."
        },
    )

    listwise_in_batch_negatives: int | None = field(
        default=None,
        metadata={
            "help": "With --listwise_negatives: also score each query against this many passages of the other rows "
            "in its batch (their positives and mined negatives, drawn afresh each step; never a passage equal to "
            "the query's own positive), as sentence-transformers' CrossEncoder MultipleNegativesRankingLoss does "
            "(num_negatives, its default 4). Each is one more forward pass per query; 0 turns them off. "
            f"Default: {LISTWISE_IN_BATCH_NEGATIVES} with --listwise_negatives (chosen on validation: "
            "docs/retrieval.md), else 0."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        if not self.text_pair_column:
            raise UserError("pair: --text_pair_column is required (use the classification task for one text)")
        if self.listwise_negatives and self.problem_type not in ("auto", "single_label"):
            raise UserError(
                f"--listwise_negatives trains a two-label (0/1) reranker; --problem_type {self.problem_type} "
                "does not apply"
            )
        if self.listwise_scale is not None:
            if not self.listwise_negatives:
                raise UserError("--listwise_scale applies to listwise training: set --listwise_negatives too")
            if not self.listwise_scale > 0:
                raise UserError(f"--listwise_scale: expected a number above 0, found {self.listwise_scale:g}")
        if self.listwise_in_batch_negatives is None:
            self.listwise_in_batch_negatives = LISTWISE_IN_BATCH_NEGATIVES if self.listwise_negatives else 0
        if self.listwise_in_batch_negatives < 0:
            raise UserError(
                f"--listwise_in_batch_negatives: expected 0 or more, found {self.listwise_in_batch_negatives}"
            )
        if self.listwise_in_batch_negatives and not self.listwise_negatives:
            raise UserError(
                "--listwise_in_batch_negatives applies to listwise training: set --listwise_negatives too"
            )

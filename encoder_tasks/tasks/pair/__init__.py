"""Cross-encoders: both texts of a pair in one input, a label (paraphrase, NLI) or a score out.

This is the classification task with pair defaults, not a copy of it: :class:`PairTask`
inherits every hook of :class:`~encoder_tasks.tasks.classification.ClassificationTask` (the
same preprocessing, where ``tokenizer(text, text_pair)`` gives segment ids to the encoders
that have them; the same metrics, accuracy and F1 or Pearson and Spearman; the same settings,
``predict`` and stock export) and changes only its flags' defaults (``args.py``) and the
name its head is saved under (``model.py``), and adds listwise reranker training
(``--listwise_negatives``, ``listwise.py``).

Example:
    >>> task = PairTask()
    >>> task.name, task.Arguments().text_pair_column
    ('pair', 'sentence2|text2|hypothesis|question2|positive')
"""

from __future__ import annotations

from ..classification import ClassificationTask
from .args import PairArguments

__all__ = ["PairArguments", "PairTask"]


class PairTask(ClassificationTask):
    """``encoder-tasks pair ...``: classification's hooks, pair flags, a ``pair`` head."""

    name = "pair"
    summary = "Cross-encoder: a label (paraphrase, NLI) or a similarity score for a pair of texts."
    Arguments = PairArguments

    def head_class(self) -> type:
        from .model import PairClassifier

        return PairClassifier

    def trainer_class(self) -> type:
        from .listwise import PairTrainer

        return PairTrainer

    def prepare(self, splits, tokenizer, task_args, data_args, saved=None):
        """``--listwise_negatives``: each (query, positive, negatives) row becomes its labelled
        pairs, in groups (:func:`.listwise.expand_groups`), after ``--max_*_samples`` picked
        the rows (so they count queries)."""
        from ...data import name_list
        from .listwise import expand_groups, with_in_batch_negatives

        columns = name_list(getattr(task_args, "listwise_negatives", None))
        if columns:
            splits = {
                name: expand_groups(split, task_args.text_column, task_args.text_pair_column, columns)
                if split is not None and name in ("train", "validation")
                else split
                for name, split in splits.items()
            }
        prepared = super().prepare(splits, tokenizer, task_args, data_args, saved)
        if columns and getattr(task_args, "listwise_in_batch_negatives", 0) and prepared.train is not None:
            prepared = with_in_batch_negatives(
                prepared, splits["train"], tokenizer, task_args, 1 + len(columns), data_args.max_length
            )
        return prepared

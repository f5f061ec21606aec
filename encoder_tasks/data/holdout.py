"""A validation split held out of the training split, the same rows in every run.

MLM holds out ``--validation_fraction`` of its documents; ``--early_stopping_patience``
without validation data holds out ``--holdout_fraction`` of any task's training rows
(:meth:`encoder_tasks.task.Task.hold_out`: QA holds out whole articles instead).

Example:
    >>> import datasets
    >>> from encoder_tasks.data import Split
    >>> split = Split("train", "train.csv", datasets.Dataset.from_dict({"text": [str(i) for i in range(10)]}))
    >>> kept, held = hold_out(split, 0.2)
    >>> len(kept.dataset), len(held.dataset), held.source
    (8, 2, 'train.csv (held-out 20%)')
    >>> sorted(set(kept.dataset["text"]) & set(held.dataset["text"]))
    []
"""

from __future__ import annotations

from ..errors import UserError
from .loading import Split

#: Seed of the held-out rows: the same rows whatever the run's --seed, so runs compare.
HOLD_OUT_SEED = 42


def hold_out(train: Split, fraction: float, seed: int = HOLD_OUT_SEED) -> tuple[Split, Split]:
    """``(kept, held)``: ``fraction`` of ``train``'s rows, drawn with ``seed``, as validation."""
    if not 0.0 < fraction < 1.0:
        raise UserError(f"the held-out share of the training data must be in (0, 1), found {fraction}")
    if len(train.dataset) < 2:
        raise UserError(
            f"{train.source}: {len(train.dataset)} training row(s): too few to hold out a validation split; "
            "give --validation_file"
        )
    parts = train.dataset.train_test_split(test_size=fraction, seed=seed, shuffle=True)
    held = Split("validation", f"{train.source} (held-out {fraction:.0%})", parts["test"])
    return Split(train.name, train.source, parts["train"]), held

"""``--time_budget 10m``: train for a length of time instead of a number of epochs, with a
learning-rate schedule that ends when the time does.

The schedule is the usual linear warm-up and linear decay, but over the *fraction of the budget
spent* rather than the fraction of steps done, so it reaches zero as the budget runs out
however fast the machine is. The fraction is measured by the first process and shared with the
others at every step (all processes take the same learning rate and stop on the same step).
The budget covers ``trainer.train()`` (evaluations during training included); the final
evaluation and saving come after it.

Example:
    >>> parse_duration("10m"), parse_duration("90s"), parse_duration("1.5h"), parse_duration("45")
    (600.0, 90.0, 5400.0, 45.0)
    >>> [round(time_schedule(f, warmup=0.1), 2) for f in (0.0, 0.05, 0.1, 0.55, 1.0)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
"""

from __future__ import annotations

import re
import time

import torch
from transformers import TrainerCallback

from .errors import UserError

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
#: The epoch count of a budgeted run whose user named none: more than any budget fits.
BUDGET_EPOCHS = 10_000


def parse_duration(text: str | float | int) -> float:
    """Seconds in ``text``: a number with an optional unit ``s``, ``m``/``min`` or ``h``."""
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h)?\s*", str(text).lower())
        if not match:
            raise UserError(f"--time_budget: expected a duration such as 10m, 90s or 1.5h, found {text!r}")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or ""]
    if seconds <= 0:
        raise UserError(f"--time_budget must be longer than zero, found {text!r}")
    return seconds


def time_schedule(fraction: float, warmup: float) -> float:
    """The learning-rate factor when ``fraction`` of the budget is spent: linear from 0 to 1
    over the first ``warmup`` of it, then linear down to 0 at the end."""
    fraction = min(max(fraction, 0.0), 1.0)
    if warmup > 0 and fraction < warmup:
        return fraction / warmup
    return max(0.0, (1.0 - fraction) / max(1e-12, 1.0 - warmup))


class TimeBudget(TrainerCallback):
    """Measures the budget spent (``fraction``) after every optimiser step (before the
    scheduler's step, which reads it) and stops training when it is spent. ``share`` turns the first process's seconds into every process's
    (default: as they are, one process)."""

    def __init__(self, seconds: float, share=None):
        self.seconds = float(seconds)
        self.share = share
        self.fraction = 0.0
        self.started: float | None = None
        self.stopped_at_step: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()
        self.fraction = 0.0

    def on_optimizer_step(self, args, state, control, **kwargs):
        # Between the optimiser's step and the scheduler's: the next rate reads this fraction.
        elapsed = time.perf_counter() - (self.started or time.perf_counter())
        if self.share is not None:
            elapsed = self.share(elapsed)
        self.fraction = min(1.0, elapsed / self.seconds)

    def on_step_end(self, args, state, control, **kwargs):
        if self.fraction >= 1.0:
            control.should_training_stop = True
            self.stopped_at_step = state.global_step
        return control


def first_process_seconds(accelerator):
    """A ``share`` for :class:`TimeBudget`: every process takes the first process's clock (a
    broadcast of one number per step), so all agree on the rate and on when to stop."""
    if accelerator is None or accelerator.num_processes <= 1:
        return None
    from accelerate.utils import broadcast

    def share(seconds: float) -> float:
        value = torch.tensor([seconds], dtype=torch.float64, device=accelerator.device)
        return float(broadcast(value, from_process=0).item())

    return share


def budget_scheduler(optimizer, budget: TimeBudget, warmup: float):
    """A ``LambdaLR`` whose factor is :func:`time_schedule` of the budget spent."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _step: time_schedule(budget.fraction, warmup))

"""``--average_weights_from F``: the model saved is the mean of its weights over the last part
of training (stochastic weight averaging with the usual decaying schedule, not a cyclic one).

From the step where a fraction ``F`` of training is done (of the steps, or of ``--time_budget``)
to the last step, the trainable weights after each optimiser step are averaged (a running mean,
kept in float32 on the weights' device); when training ends the model takes the average, so the
final evaluation, the saved model and everything after it use it. Buffers (position ids) are
left alone; encoders without batch norm need no statistics update.

Example:
    >>> import torch
    >>> from types import SimpleNamespace
    >>> model = torch.nn.Linear(1, 1, bias=False)
    >>> average = WeightAverage(start=0.5)
    >>> state = SimpleNamespace(max_steps=4, global_step=0)
    >>> for step, value in enumerate([1.0, 2.0, 3.0, 5.0], start=1):
    ...     _ = model.weight.data.fill_(value)
    ...     state.global_step = step
    ...     average.on_step_end(None, state, None, model=model)
    >>> average.on_train_end(None, state, None, model=model)
    >>> model.weight.item(), average.steps  # steps 3 and 4: those taken from half way on
    (4.0, 2)
"""

from __future__ import annotations

import torch
from transformers import TrainerCallback

from .errors import UserError


def check_start(start: float | None) -> float | None:
    if start is not None and not 0.0 <= float(start) < 1.0:
        raise UserError(f"--average_weights_from must be a fraction of training in [0, 1), found {start}")
    return None if start is None else float(start)


class WeightAverage(TrainerCallback):
    """Averages the model's trainable weights from ``start`` (a fraction of training) on.

    ``progress`` (optional) gives the fraction of training done, for a run whose length is
    not a number of steps (``--time_budget``); otherwise ``global_step / max_steps``.
    ``model_of`` (optional) gives the model to average (a trainer's own); otherwise the
    ``model`` the callback is called with.
    """

    def __init__(self, start: float, progress=None, model_of=None):
        self.start = check_start(start)
        self.progress = progress
        self.model_of = model_of
        self.mean: dict[str, torch.Tensor] = {}
        self.steps = 0

    def _done(self, state) -> float:
        if self.progress is not None:
            return self.progress()
        return state.global_step / max(1, state.max_steps)

    def _model(self, model):
        return self.model_of() if self.model_of is not None else model

    def on_step_end(self, args, state, control, model=None, **kwargs):
        model = self._model(model)
        # The fraction done *before* this step: a step taken from F on is averaged.
        before = self._done(state) - (0.0 if self.progress else 1 / max(1, state.max_steps))
        if model is None or before < self.start - 1e-9:
            return control
        self.steps += 1
        with torch.no_grad():
            for name, param in model.named_parameters():
                if not param.requires_grad:
                    continue
                value = param.detach().float()
                if name not in self.mean:
                    self.mean[name] = value.clone()
                else:
                    self.mean[name].add_(value - self.mean[name], alpha=1.0 / self.steps)
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):
        model = self._model(model)
        if model is None or not self.mean:
            return control
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name in self.mean:
                    param.copy_(self.mean[name].to(param.dtype))
        return control

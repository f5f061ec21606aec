"""``--early_stopping_patience N``: evaluate during training, keep the best weights, stop once
``N`` evaluations in a row have not improved on the best.

The model is evaluated ``--evaluations_per_epoch`` times per epoch (4 by default; an explicit
``--eval_strategy``/``--eval_steps`` is kept as given) on the validation split, which is held out
of the training data (``--holdout_fraction``, 10% by default; QA: whole articles) when the run
has none. The metric watched is ``--metric_for_best_model`` when given, else the task's own
objective (``Task.objectives``: accuracy, strict entity F1, SQuAD F1...), higher is better
unless its name says loss. The best evaluation's weights are kept in memory (a CPU copy: no
checkpoint is written for it) and put back when training ends, so the final evaluation, the
saved model and everything after it use them; the log and ``metrics.json`` say which step they
are from (``train_best_step``) and whether training stopped early.

Unlike transformers' ``load_best_model_at_end`` it needs no checkpoint per evaluation and works
with ``--time_budget`` and search trials. The best weights live in memory only, so a run
continued with ``--resume`` starts watching afresh from the step it resumes at.

Example:
    >>> import logging, torch
    >>> from types import SimpleNamespace
    >>> logging.disable(logging.INFO)  # what it logs, left out here
    >>> model = torch.nn.Linear(1, 1, bias=False)
    >>> stopping = EarlyStopping(patience=2, objectives=("eval_accuracy",))
    >>> state, control = SimpleNamespace(global_step=0), SimpleNamespace(should_training_stop=False)
    >>> for step, accuracy in enumerate([0.6, 0.8, 0.7, 0.75], start=1):
    ...     _ = model.weight.data.fill_(step)
    ...     state.global_step = step
    ...     _ = stopping.on_evaluate(None, state, control, {"eval_accuracy": accuracy}, model=model)
    >>> control.should_training_stop, stopping.best_step
    (True, 2)
    >>> _ = stopping.on_train_end(None, state, control, model=model)
    >>> model.weight.item(), stopping.summary()["train_best_eval_accuracy"]
    (2.0, 0.8)
    >>> logging.disable(logging.NOTSET)
"""

from __future__ import annotations

import logging
import math

import torch
from transformers import TrainerCallback

from .errors import UserError
from .metrics import lower_is_better

logger = logging.getLogger(__name__)


def check_patience(patience: int | None, evaluations_per_epoch: int, holdout_fraction: float) -> None:
    """Refuse values of the early-stopping flags that cannot work, before a model loads."""
    if patience is not None and int(patience) < 1:
        raise UserError(f"--early_stopping_patience must be at least 1 evaluation, found {patience}")
    if int(evaluations_per_epoch) < 1:
        raise UserError(f"--evaluations_per_epoch must be at least 1, found {evaluations_per_epoch}")
    if not 0.0 < float(holdout_fraction) < 1.0:
        raise UserError(f"--holdout_fraction must be in (0, 1), found {holdout_fraction}")


class EarlyStopping(TrainerCallback):
    """Keeps the weights of the best evaluation and stops after ``patience`` without a better one.

    ``objectives``: the task's metrics, most specific first (the first the evaluation reports is
    watched, unless ``metric`` names one); ``evaluations_per_epoch``: sets the evaluation interval
    at train begin (``None``: keep the run's own); ``model_of``: gives the model (a trainer's own,
    for search trials whose model is made inside ``train``), else the ``model`` passed.
    """

    def __init__(
        self,
        patience: int,
        objectives: tuple[str, ...] = (),
        metric: str | None = None,
        greater_is_better: bool | None = None,
        evaluations_per_epoch: int | None = None,
        model_of=None,
    ):
        self.patience = int(patience)
        self.objectives = tuple(objectives)
        self.metric = None if metric is None else (metric if metric.startswith("eval_") else f"eval_{metric}")
        self.greater_is_better = greater_is_better
        self.evaluations_per_epoch = evaluations_per_epoch
        self.model_of = model_of
        self.best: float | None = None
        self.best_step: int | None = None
        self.weights: dict[str, torch.Tensor] = {}
        self.misses = 0
        self.stopped_at: int | None = None
        self.finished = False

    def _model(self, model):
        return self.model_of() if self.model_of is not None else model

    def watched(self, metrics: dict) -> str:
        """The metric this evaluation is judged by (an error names the ones reported)."""
        if self.metric is not None:
            if self.metric not in metrics:
                found = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)))
                raise UserError(
                    f"--metric_for_best_model {self.metric.removeprefix('eval_')!r}: not among the evaluation "
                    f"metrics {found}"
                )
            return self.metric
        for name in (*self.objectives, "eval_loss"):
            if isinstance(metrics.get(name), (int, float)):
                return name
        raise UserError(
            "--early_stopping_patience: the evaluation reported no metric; pass --metric_for_best_model"
        )

    def _better(self, metric: str, value: float) -> bool:
        if self.best is None:
            return True
        higher = self.greater_is_better
        if higher is None:
            higher = not lower_is_better(metric)
        return value > self.best if higher else value < self.best

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        if self.evaluations_per_epoch and train_dataloader is not None:
            accumulation = max(1, int(getattr(args, "gradient_accumulation_steps", 1) or 1))
            per_epoch = max(1, math.ceil(len(train_dataloader) / accumulation))
            state.eval_steps = max(1, math.ceil(per_epoch / self.evaluations_per_epoch))
            logger.info(
                "early stopping: evaluating every %d steps (%d per epoch), patience %d",
                state.eval_steps,
                self.evaluations_per_epoch,
                self.patience,
            )
        return control

    def on_evaluate(self, args, state, control, metrics, model=None, **kwargs):
        model = self._model(model)
        if self.finished:  # the run's final evaluation, after the weights are back
            return control
        metric = self.metric_name = self.watched(metrics)
        value = float(metrics[metric])
        if self._better(metric, value):
            self.best, self.best_step, self.misses = value, state.global_step, 0
            if model is not None:  # a sharded model (FSDP, DeepSpeed) stops early but keeps its last weights
                self.weights = {
                    name: t.detach().to("cpu", copy=True) for name, t in model.state_dict().items()
                }
            return control
        self.misses += 1
        if self.misses >= self.patience:
            control.should_training_stop = True
            self.stopped_at = state.global_step
            logger.info(
                "early stopping at step %d: %s has not improved on %.4f (step %d) for %d evaluation(s)",
                state.global_step,
                metric,
                self.best,
                self.best_step,
                self.misses,
            )
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):
        model = self._model(model)
        self.finished = True
        if model is None or not self.weights:
            return control
        if self.best_step != state.global_step:
            model.load_state_dict(self.weights)
            logger.info(
                "kept the weights of step %d (best %s %.4f), not those of the last step %d",
                self.best_step,
                self.metric_name,
                self.best,
                state.global_step,
            )
        self.weights = {}  # the memory goes back
        return control

    def summary(self) -> dict:
        """What the rule did, for ``metrics.json``."""
        if self.best_step is None:
            return {}
        return {
            "train_best_step": self.best_step,
            f"train_best_{self.metric_name}": self.best,
            "train_stopped_early": self.stopped_at is not None,
        }

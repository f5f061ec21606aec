"""Where ``predict`` runs when not in this process: ``--engine ray`` (:mod:`.ray_engine`).

``<task> predict --engine ray`` and ``embedding encode --engine ray`` write the files the local
commands write, from an actor pool of model replicas on Ray Data over the streamed input; see
docs/batch-inference.md. Ray is imported only when a run asks for it.

Example:
    >>> from encoder_tasks.cli import main
    >>> main(["classification", "predict", "--model_dir", "runs/sst2", "--input_file", "reviews/",
    ...       "--output_file", "predictions.jsonl", "--engine", "ray", "--ray_workers", "8"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

from ..errors import UserError

#: The task actions of their own that ``--engine ray`` runs (``embedding encode``).
RAY_ACTIONS = ("encode",)


def predict_on_ray(task, args) -> dict:
    """``<task> predict --engine ray``."""
    from .ray_engine import predict

    return predict(task, args)


def run_on_ray(task, action: str, args) -> dict:
    """A task's own action with ``--engine ray``: ``embedding encode``; others run locally only."""
    if action not in RAY_ACTIONS:
        raise UserError(
            f"{task.name} {action}: --engine ray runs `predict` and `embedding encode`; drop --engine ray here"
        )
    from .ray_engine import encode

    return encode(task, args)

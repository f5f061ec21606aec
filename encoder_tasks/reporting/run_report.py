"""What a finished training run leaves beside the model: predictions, plots, the model card.

Called once by :func:`encoder_tasks.run.train` on the main process, after ``metrics.json``
and ``run_config.json`` are written. Nothing here can fail a finished run: a plot that
cannot be drawn is logged and skipped.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..config import dataclass_to_dict
from .model_card import write_model_card
from .tracking import PREDICTIONS_FILE

logger = logging.getLogger(__name__)

# Training settings that are noise in a card (paths, logging plumbing).
_SKIP_TRAINING = ("output_dir", "logging_dir", "hub_token", "push_to_hub_token")


def report_run(output_dir, task_name: str, model, metrics: dict, recorder=None, args=()) -> list[Path]:
    """Save the last eval predictions, draw the plots, write ``README.md``; return files written.

    ``args`` are the run's (model_args, data_args, task_args, training_args).
    """
    from .plots import matplotlib_missing_message, plot_run

    output_dir = Path(output_dir)
    written: list[Path] = []
    if recorder is not None and recorder.predictions is not None:
        target = output_dir / PREDICTIONS_FILE
        if recorder.save(target):
            written.append(target)
    try:
        plots = plot_run(
            output_dir, recorder.predictions if recorder else None, recorder.label_ids if recorder else None
        )
    except Exception as exc:  # a plot must never cost a finished run
        logger.warning("plots skipped: %s: %s", type(exc).__name__, exc)
        plots = []
    else:
        if not plots:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                logger.info("%s", matplotlib_missing_message())
    written += plots
    model_args, data_args, task_args, training_args = (list(args) + [None] * 4)[:4]
    training = dataclass_to_dict(training_args) if training_args is not None else {}
    card = write_model_card(
        output_dir,
        task=task_name,
        metadata=dict(model.metadata),
        metrics=metrics,
        command=None,
        model_args=vars(model_args) if model_args is not None else {},
        data_args=vars(data_args) if data_args is not None else {},
        task_args=vars(task_args) if task_args is not None else {},
        training_args={k: v for k, v in training.items() if k not in _SKIP_TRAINING},
        name=f"{task_name}: {output_dir.name}",
    )
    written.append(card)
    shown = ", ".join(p.name for p in written)
    logger.info("wrote %s to %s", shown, output_dir)
    return written

"""One voice for the toolkit: every module logs to a child of the ``encoder_tasks`` logger, and
the command line shows those records with one prefix, progress on stdout and warnings on stderr.

Example:
    >>> import logging
    >>> configure_logging()
    >>> logging.getLogger("encoder_tasks.example").info("wrote %d predictions", 3)
    [encoder-tasks] wrote 3 predictions
    >>> logging.getLogger("encoder_tasks").handlers.clear()  # a library leaves logging to its caller

The Python API (``encoder_tasks.train`` and the other actions) shows the same records, unless the
caller set up logging first (:func:`report_like_the_cli`). To silence it:
``logging.getLogger("encoder_tasks").setLevel(logging.WARNING)``.
"""

from __future__ import annotations

import logging
import sys

PREFIX = "[encoder-tasks]"
_MARK = "_encoder_tasks_handler"


class _BelowWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING


class _CurrentStream(logging.StreamHandler):
    """Writes to whatever ``sys.stdout``/``sys.stderr`` is when a record arrives (so output
    redirected after set-up, as pytest's capture does, still gets it)."""

    def __init__(self, name: str):
        super().__init__()
        self._name = name

    @property
    def stream(self):
        return getattr(sys, self._name)

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ assigns it; the property wins
        pass


def configure_logging(level: int = logging.INFO) -> None:
    """Show the toolkit's records: INFO and below on stdout, warnings and errors on stderr.

    Idempotent; third-party loggers (transformers, datasets) keep their own settings.
    """
    logger = logging.getLogger("encoder_tasks")
    for handler in [h for h in logger.handlers if getattr(h, _MARK, False)]:
        logger.removeHandler(handler)
    progress = _CurrentStream("stdout")
    progress.addFilter(_BelowWarning())
    progress.setFormatter(logging.Formatter(f"{PREFIX} %(message)s"))
    problems = _CurrentStream("stderr")
    problems.setLevel(logging.WARNING)
    problems.setFormatter(logging.Formatter(f"{PREFIX} %(levelname)s: %(message)s"))
    for handler in (progress, problems):
        setattr(handler, _MARK, True)
        logger.addHandler(handler)
    logger.setLevel(level)


def report_like_the_cli() -> None:
    """Show the toolkit's records at INFO, as the command line does, when nobody configured
    logging: no handler on the root logger or on ``encoder_tasks``, and no level set on it.

    A caller who configured logging (``logging.basicConfig``, a handler, a level on the
    ``encoder_tasks`` logger) keeps their configuration: this does nothing. Called by each action
    of the Python API (:mod:`encoder_tasks.api`).

    Example:
        >>> import logging
        >>> logging.getLogger("encoder_tasks").setLevel(logging.WARNING)  # silenced by the caller
        >>> report_like_the_cli(); logging.getLogger("encoder_tasks").handlers
        []
        >>> logging.getLogger("encoder_tasks").setLevel(logging.NOTSET)
    """
    toolkit = logging.getLogger("encoder_tasks")
    if toolkit.handlers or toolkit.level != logging.NOTSET or logging.getLogger().handlers:
        return
    configure_logging(logging.INFO)

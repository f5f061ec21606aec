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


#: Third-party warnings that are wrong for this toolkit, by logger: message prefixes dropped.
WRONG_FOR_US = {
    # The toolkit reads a long text in windows (or cuts it, saying so); it counts tokens of whole
    # texts on purpose before cutting them.
    "transformers.tokenization_utils_base": ("Token indices sequence length is longer than",),
}


class _DropWrong(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


def quiet_wrong_warnings() -> None:
    """Drop the third-party warnings of :data:`WRONG_FOR_US` (idempotent; imports nothing).

    Example:
        >>> quiet_wrong_warnings()
        >>> tokenization = logging.getLogger("transformers.tokenization_utils_base")
        >>> tokenization.filter(logging.makeLogRecord({"msg": "Token indices sequence length is longer than 512"}))
        False
    """
    for name, prefixes in WRONG_FOR_US.items():
        target = logging.getLogger(name)
        if not any(isinstance(f, _DropWrong) for f in target.filters):
            target.addFilter(_DropWrong(prefixes))


def configure_logging(level: int = logging.INFO) -> None:
    """Show the toolkit's records: INFO and below on stdout, warnings and errors on stderr.

    Idempotent; third-party loggers (transformers, datasets) keep their own settings.
    """
    quiet_wrong_warnings()
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
    quiet_wrong_warnings()
    toolkit = logging.getLogger("encoder_tasks")
    if toolkit.handlers or toolkit.level != logging.NOTSET or logging.getLogger().handlers:
        return
    configure_logging(logging.INFO)

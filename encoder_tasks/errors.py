"""User-facing errors.

Anything a user can fix (a missing column, a malformed line, an output directory that
already holds a run) is raised as :class:`UserError`. The CLI prints its message on one
line and exits with status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations


class UserError(Exception):
    """An error caused by input the user controls; its message says where and how to fix it.

    Example:
        >>> raise UserError("data/train.csv line 3: expected 2 columns, found 1")
        Traceback (most recent call last):
        ...
        encoder_tasks.errors.UserError: data/train.csv line 3: expected 2 columns, found 1
    """

    exit_code = 2


def check_choice(flag: str, value, choices) -> None:
    """Refuse a value outside ``choices``, naming the flag, the choices and what was found.

    Example:
        >>> check_choice("pooling", "sum", ("mean", "cls"))
        Traceback (most recent call last):
        ...
        encoder_tasks.errors.UserError: --pooling must be one of mean, cls, found 'sum'
    """
    if value not in choices:
        raise UserError(f"--{flag} must be one of {', '.join(map(str, choices))}, found {value!r}")


def check_probability(flag: str, value) -> None:
    """Refuse a value that is not a probability in (0, 1] (None passes: the flag is off).

    Example:
        >>> check_probability("abstain_below", 1.5)
        Traceback (most recent call last):
        ...
        encoder_tasks.errors.UserError: --abstain_below must be a probability in (0, 1], found 1.5
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise UserError(f"--{flag} must be a probability in (0, 1], found {value!r}")

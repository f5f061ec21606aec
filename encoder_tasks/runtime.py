"""CPU runtime defaults, applied before torch is imported.

By default idle OpenMP threads spin, ready for the next parallel region; when threads
outnumber the cores (several trainings, or data-loader and tokenizer threads beside the math
threads) a spinning thread can hold a core a working thread needs. We set
``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep) and silence the tokenizers fork warning, but
only where the user has not chosen: an exported variable always wins. No speed-up is claimed
(docs/speed.md); ``benchmarks/bench_cpu_runtime.py`` measures it.
"""

from __future__ import annotations

import os

CPU_RUNTIME_DEFAULTS = {
    "OMP_WAIT_POLICY": "PASSIVE",
    "TOKENIZERS_PARALLELISM": "false",
}


def configure_cpu_runtime() -> dict[str, str]:
    """Set the toolkit's runtime defaults where unset; return the ones that were applied.

    Example:
        >>> applied = configure_cpu_runtime()
        >>> os.environ["OMP_WAIT_POLICY"] in ("PASSIVE", "ACTIVE", os.environ["OMP_WAIT_POLICY"])
        True
    """
    applied = {}
    for key, value in CPU_RUNTIME_DEFAULTS.items():
        if key not in os.environ:
            os.environ[key] = value
            applied[key] = value
    return applied

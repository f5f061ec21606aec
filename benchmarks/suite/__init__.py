"""The fair benchmark suite: one module per task, each training one contender once.

Every module (``classification``, ``ner``, ``qa``, ``pair``, ``mlm``) exposes ``TASK``,
``DATASET``, ``STOCK_SCRIPT``, ``SIZES``, ``describe(size)`` and
``run(contender, seed, size, work, extra_flags=())``; ``benchmarks/bench_all.py`` runs every
contender x seed in its own process and writes the result files. ``toolkit_run`` holds what
the modules share: the toolkit run in process from its flags, the stock Trainer's timed
training, and the result row every module returns.
"""

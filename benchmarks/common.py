"""Shared helpers for the side-by-side benchmarks (toolkit vs the stock transformers Trainer).

Every benchmark runs both contenders in one process, one after the other, on the same
model, data, epochs and seed, and reports *real* (non-padding) tokens per second, so
padding the stock run does not count as work.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("ENCODER_TASKS_DATA_DIR", REPO.parent / "shared" / "data"))
RESULTS = REPO / "benchmarks" / "results"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def environment() -> dict:
    """What the numbers depend on: threads, wait policy, versions, CPU."""
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
        "cpu": platform.processor() or platform.machine(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


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


def save_results(name: str, results: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"environment": environment(), **results}, indent=2, default=str))
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

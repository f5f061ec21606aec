"""Memory of ``predict`` against the size of its input: streamed in chunks, and read whole.

    OMP_WAIT_POLICY=PASSIVE python -m benchmarks.bench_predict_stream            # 5 MB and 50 MB
    python -m benchmarks.bench_predict_stream --sizes_mb 1,5 --modes streamed     # a smoke run

Issue 26, item 12: a 50 MB JSON-lines input took ``classification predict`` from 0.3 to 3.6 GB of
RSS before it wrote anything. Here ``classification predict`` runs, each time in a fresh process,
on generated JSON-lines inputs of ``--sizes_mb`` megabytes (random sentences of 8 to 30 words
from a small vocabulary, ~110 bytes a line), with a tiny classification model (the test suite's
tiny BERT, trained one step: the weights do not matter for memory or time), writing to stdout
(``--output_file -``), which this script reads line by line. Per run: the peak RSS of the process
(``ru_maxrss`` from ``wait4``), its wall time, the seconds until the first record arrived, and the
records read.

Modes: ``streamed`` (the default chunk of rows, :data:`encoder_tasks.data.chunks.CHUNK_ROWS`) and
``whole`` (``ENCODER_TASKS_CHUNK_ROWS`` larger than the input: the whole input is one chunk, as
``predict`` ran before it streamed), by default on the inputs up to ``--whole_max_mb`` (5) only.
The result file holds every run, the command and the
machine (CPU flags included).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import REPO, save_results  # noqa: E402
from benchmarks.harness import invocation  # noqa: E402

WORDS = (
    "the a film movie good bad great awful fun boring story actor plot scene music long short "
    "cat dog sat mat john smith lives in paris london and but it was is not very quite"
).split()


def make_input(path: Path, megabytes: float, seed: int = 0) -> int:
    """A JSON-lines file of about ``megabytes`` MB of ``{"text"}`` lines; returns the rows."""
    rng = random.Random(seed)
    target, written, rows = int(megabytes * 1e6), 0, 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < target:
            line = json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))}) + "\n"
            handle.write(line)
            written += len(line)
            rows += 1
    return rows


def tiny_run(work: Path) -> Path:
    """A tiny classification run, trained for one step once and kept under ``work``."""
    run = work / "tiny-classification"
    if (run / "model.safetensors").is_file():
        return run
    from encoder_tasks.testing import make_tiny_model
    from tests.samples import REVIEWS_CSV

    data = work / "train.csv"
    data.write_text(REVIEWS_CSV)
    model = make_tiny_model("bert", str(work / "tiny-bert"))
    argv = [
        sys.executable,
        "-m",
        "encoder_tasks.cli",
        "classification",
        "train",
        "--model_name_or_path",
        model,
    ]
    argv += ["--train_file", str(data), "--output_dir", str(run), "--max_steps", "1", "--report_to", "none"]
    argv += ["--save_strategy", "no"]
    subprocess.run(argv, cwd=REPO, check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return run


def measure(run: Path, inputs: Path, mode: str, rows: int) -> dict:
    """One ``classification predict`` process over ``inputs``: peak RSS, wall time, first record."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ENCODER_TASKS_DISABLE_TQDM": "1"}
    if mode == "whole":
        env["ENCODER_TASKS_CHUNK_ROWS"] = str(rows + 1)
    else:
        env.pop("ENCODER_TASKS_CHUNK_ROWS", None)
    argv = [sys.executable, "-m", "encoder_tasks.cli", "classification", "predict", "--model_dir", str(run)]
    argv += ["--input_file", str(inputs), "--output_file", "-", "--precision", "fp32"]
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    first, records = None, 0
    for _ in process.stdout:
        if first is None:
            first = time.perf_counter() - start
        records += 1
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if status != 0 or records != rows:
        sys.exit(f"{mode} predict of {inputs} failed (status {status}, {records} of {rows} records)")
    return {
        "mode": mode,
        "input_mb": round(inputs.stat().st_size / 1e6, 2),
        "rows": rows,
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: kilobytes
        "wall_seconds": round(wall, 2),
        "first_record_seconds": round(first, 2),
        "records": records,
    }


def stream_table(runs: list[dict]) -> dict:
    """The ``predict-stream`` table of a result file's runs (docs/batch-inference.md cites it).

    Example:
        >>> run = {"mode": "whole", "input_mb": 5.0, "rows": 47613, "peak_rss_mb": 1147.4,
        ...        "wall_seconds": 52.8, "first_record_seconds": 47.4}
        >>> stream_table([run])["rows"]
        [['5 MB', '47,613', 'whole input as one chunk (as before)', '1,147 MB', '53 s', '47.4 s']]
    """
    modes = {"streamed": "streamed (4,096-row chunks)", "whole": "whole input as one chunk (as before)"}
    rows = [
        [
            f"{run['input_mb']:g} MB",
            f"{run['rows']:,}",
            modes.get(run["mode"], run["mode"]),
            f"{run['peak_rss_mb']:,.0f} MB",
            f"{run['wall_seconds']:.0f} s",
            f"{run['first_record_seconds']:.1f} s",
        ]
        for run in runs
    ]
    columns = ["JSON-lines input", "rows", "mode", "peak RSS", "wall", "first record after"]
    return {"columns": columns, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes_mb", default="5,50", help="input sizes in MB, comma separated")
    parser.add_argument("--modes", default="streamed,whole", help="streamed, whole, or both")
    parser.add_argument(
        "--whole_max_mb",
        type=float,
        default=5,
        help="run the whole mode only on inputs up to this size (whole, 50 MB is the issue's "
        "reproduction: gigabytes, minutes)",
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-predict-stream")
    args = parser.parse_args()
    from encoder_tasks.data.chunks import CHUNK_ROWS

    args.work.mkdir(parents=True, exist_ok=True)
    run = tiny_run(args.work)
    results = []
    for size in [float(s) for s in args.sizes_mb.split(",")]:
        inputs = args.work / f"input-{size:g}mb.jsonl"
        rows = make_input(inputs, size)
        for mode in args.modes.split(","):
            if mode == "whole" and size > args.whole_max_mb:
                continue
            row = measure(run, inputs, mode, rows)
            print(json.dumps(row), flush=True)
            results.append(row)
    path = save_results(
        "predict-stream",
        {
            "command": invocation("bench_predict_stream"),
            "task": "classification predict, tiny BERT (tests' tiny model), --precision fp32, to stdout",
            "chunk_rows": CHUNK_ROWS,
            "whole_max_mb": args.whole_max_mb,
            "load_average": os.getloadavg(),
            "runs": results,
            "tables": {"predict-stream": stream_table(results)},
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()

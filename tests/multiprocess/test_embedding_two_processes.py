"""Bi-encoder training under `accelerate launch` with 2 CPU processes (make test-multiprocess)."""

import json
import os
import socket
import subprocess
import sys

import pytest

from encoder_tasks.tasks.embedding.samplers import DuplicateFreeBatchSampler
from tests.conftest import REPO, write

pytestmark = pytest.mark.multiprocess

WORDS = "the a film movie cat dog john paris london good bad big red blue new york city one two".split()


def free_port() -> int:
    # Other two-process runs may hold accelerate's default port 29500 at the same time.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(args):
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    cmd += ["--num_machines", "1", "--main_process_port", str(free_port()), "--dynamo_backend", "no"]
    cmd += ["--mixed_precision", "no", "-m", "encoder_tasks.cli", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_two_processes_train_on_shared_global_batches(tiny_bert, tmp_path):
    rows = [
        (
            f"{WORDS[i]} {WORDS[(i + 1) % len(WORDS)]}",
            f"{WORDS[(i + 2) % len(WORDS)]} {WORDS[(i + 7) % len(WORDS)]} {i}",
        )
        for i in range(18)
    ]
    rows += [("cat dog", "the a 0"), ("new york", "the a 0")]  # repeated texts: kept apart
    data = write(tmp_path / "pairs.csv", "anchor,positive\n" + "\n".join(f"{a},{p}" for a, p in rows) + "\n")
    out = tmp_path / "run"
    args = ["embedding", "train", "--model_name_or_path", tiny_bert, "--train_file", str(data)]
    args += ["--validation_file", str(data), "--output_dir", str(out), "--num_train_epochs", "1"]
    args += [
        "--per_device_train_batch_size",
        "3",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--seed",
        "1",
    ]
    args += ["--logging_steps", "1"]
    launch(args)
    metrics = json.loads((out / "metrics.json").read_text())
    # 18 distinct anchors (two are repeated) are the queries
    assert metrics["eval_queries"] == 18 and 0 <= metrics["eval_recall@1"] <= 1
    # one optimizer step per *global* batch of 2 x 3 rows (each process takes its half)
    texts = [(a, p) for a, p in rows]
    expected = len(DuplicateFreeBatchSampler(texts, 3, seed=1, world_size=2).global_batches(0))
    steps = [r["step"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "loss" in r]
    assert max(steps) == expected
    # every process saw real tokens: the count is the sum over both
    assert metrics["train_num_input_tokens_seen"] > 0 and (out / "modules.json").is_file()

"""`accelerate launch --cpu --num_processes 2` on tiny models (make test-multiprocess)."""

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO, write

pytestmark = pytest.mark.multiprocess

# 7 rows: with 2 processes and batch 2 the last batch is padded with duplicates, which must
# not be scored twice.
ROWS = [
    "the film was good and fun,pos",
    "the movie was bad and boring,neg",
    "I love this great movie,pos",
    "I hate this awful film,neg",
    "good fun,pos",
    "awful boring,neg",
    "very good,pos",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(args, processes=2):
    # --multi_gpu is accelerate's torchrun launcher; without GPUs the toolkit joins the
    # processes in a gloo group (see recipes/accelerate/cpu-2proc.yaml).
    # A fresh port per launch: back-to-back runs on the default port can meet a socket the
    # previous run has not released yet, and gloo then aborts a rank.
    multi = ["--multi_gpu", "--main_process_port", str(free_port())] if processes > 1 else []
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *multi,
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--dynamo_backend",
        "no",
        "--mixed_precision",
        "no",
        "-m",
        "encoder_tasks.cli",
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture
def data(tmp_path):
    train = write(tmp_path / "train.csv", "text,label\n" + "\n".join(ROWS * 4) + "\n")
    dev = write(tmp_path / "dev.csv", "text,label\n" + "\n".join(ROWS) + "\n")
    return train, dev


def test_two_processes_train_and_score_each_example_once(tiny_bert, data, tmp_path):
    train, dev = data
    out = tmp_path / "run"
    common = [
        "--model_name_or_path",
        tiny_bert,
        "--train_file",
        str(train),
        "--validation_file",
        str(dev),
        "--num_train_epochs",
        "2",
        "--per_device_eval_batch_size",
        "2",
        "--mixed_precision",
        "no",
        "--save_strategy",
        "epoch",
        "--seed",
        "3",
    ]
    launch(
        ["classification", "train", "--output_dir", str(out), "--per_device_train_batch_size", "4", *common]
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["eval_examples"] == 7 and metrics["train_epoch"] == 2
    # Only the main process writes: one set of files, one checkpoint per epoch.
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-8"]
    assert not list(out.glob("*.tmp*"))

    # The same saved model evaluated on 1 and on 2 processes gives identical metrics:
    # every example scored exactly once, none twice from the padded last batch.
    launch(
        [
            "classification",
            "evaluate",
            "--model_name_or_path",
            str(out),
            "--validation_file",
            str(dev),
            "--per_device_eval_batch_size",
            "2",
            "--mixed_precision",
            "no",
        ],
        processes=1,
    )
    launch(
        [
            "classification",
            "evaluate",
            "--model_name_or_path",
            str(out),
            "--validation_file",
            str(dev),
            "--per_device_eval_batch_size",
            "2",
            "--mixed_precision",
            "no",
        ],
        processes=2,
    )
    one = json.loads((out / "eval" / "dev.json").read_text())
    two = json.loads((out / "eval" / "dev-2.json").read_text())
    assert one["eval_examples"] == two["eval_examples"] == 7
    assert one["eval_accuracy"] == two["eval_accuracy"]
    assert one["eval_per_class"] == two["eval_per_class"]
    # eval_loss is the Trainer's mean of per-batch means, so it moves slightly with how the
    # 7 examples fall into batches of 2 on one or two processes.
    assert one["eval_loss"] == pytest.approx(two["eval_loss"], rel=1e-3)


def test_two_process_training_matches_one_process(tiny_bert, data, tmp_path):
    """Same effective batch (2 x 2 vs 1 x 4): the trained models score alike.

    Tolerance: the distributed sampler deals examples to processes in a different order than
    one process sees them, so runs are not bit-identical; on this tiny task eval loss agrees
    within 0.05.
    """
    train, dev = data
    results = {}
    for processes, batch in ((1, 4), (2, 2)):
        out = tmp_path / f"run{processes}"
        launch(
            [
                "classification",
                "train",
                "--model_name_or_path",
                tiny_bert,
                "--train_file",
                str(train),
                "--validation_file",
                str(dev),
                "--output_dir",
                str(out),
                "--num_train_epochs",
                "2",
                "--per_device_train_batch_size",
                str(batch),
                "--train_sampling_strategy",
                "random",
                "--mixed_precision",
                "no",
                "--save_strategy",
                "no",
                "--seed",
                "3",
            ],
            processes=processes,
        )
        results[processes] = json.loads((out / "metrics.json").read_text())
    assert results[1]["eval_loss"] == pytest.approx(results[2]["eval_loss"], abs=0.05)

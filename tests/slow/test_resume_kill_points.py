"""Every kill point of a real training run, each killed in a subprocess and resumed exactly.

``tests/kill_at.py`` kills the CLI with SIGKILL at an exact point (or the test kills it from
outside); the resumed run must end as the uninterrupted one did (bit-identical weights, equal
metrics and per-step losses). The fast tier keeps one kill point (``tests/cli/test_resume.py``).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import pytest

from encoder_tasks.cli import main
from tests.helpers import (
    assert_same_run,
    complete_checkpoints,
    resume_argv,
    resume_csv,
    resume_in_subprocess,
    run_killed,
    subprocess_env,
)


@pytest.mark.parametrize(
    ("point", "step", "resumes_from"),
    [
        ("step", 5, "checkpoint-3"),  # between checkpoints, mid epoch 1
        ("step", 11, "checkpoint-9"),  # mid epoch 2
        ("save-weights", 6, "checkpoint-3"),
        ("save-rename", 9, "checkpoint-6"),  # whole but not yet renamed: still not used
        ("save-rotate", 9, "checkpoint-9"),  # renamed: complete, resumed from
        ("final-save", 12, "checkpoint-12"),  # training done, the final model half written
    ],
)
def test_kill_points_all_subprocess(resume_reference, tmp_path, point, step, resumes_from):
    model, data, reference = resume_reference
    out = tmp_path / "run"
    argv = resume_argv(model, data, out)
    run_killed(point, step, argv)
    names = complete_checkpoints(out)
    assert names[-1] == resumes_from
    resume_in_subprocess(argv)
    assert_same_run(reference, out)


def test_kill_from_outside_when_a_checkpoint_appears(resume_reference, tmp_path):
    """No hooks at all: the stock CLI process, killed as soon as checkpoint-6 shows up."""
    model, data, reference = resume_reference
    out = tmp_path / "run"
    argv = resume_argv(model, data, out)
    proc = subprocess.Popen(
        [sys.executable, "-m", "encoder_tasks.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=subprocess_env(),
    )
    deadline = time.monotonic() + 300
    while not (out / "checkpoint-6").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() in (-signal.SIGKILL, 0)
    complete_checkpoints(out)
    resume_in_subprocess(argv)
    assert_same_run(reference, out)


@pytest.mark.parametrize("strategy", ["random", "sequential"])
def test_other_sampling_strategies_resume_exactly(tiny_bert, tmp_path, strategy):
    data = resume_csv(tmp_path / "train.csv")
    reference, out = tmp_path / "reference", tmp_path / "run"
    extra = ("--train_sampling_strategy", strategy, "--gradient_accumulation_steps", "1")
    assert main(resume_argv(tiny_bert, data, reference, *extra)) == 0
    argv = resume_argv(tiny_bert, data, out, *extra)
    run_killed("step", 7, argv)
    resume_in_subprocess(argv)
    assert_same_run(reference, out)
    shutil.rmtree(out)

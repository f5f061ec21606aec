"""Kill a real training run with SIGKILL, resume it, and get the uninterrupted run's result.

Each killed run is a subprocess of the real CLI (``tests/recipes/kill_at.py`` kills it at an
exact point, or the test kills it from outside). Resumed and uninterrupted runs must end
with bit-identical weights, the same evaluation metrics and the same per-step losses: on
CPU with a fixed seed the optimizer, scheduler, RNG and data order are all restored.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from encoder_tasks.checkpoints import checkpoint_step, incomplete_reason
from encoder_tasks.cli import main
from tests.conftest import REPO, write

KILLER = Path(__file__).with_name("kill_at.py")
WORDS = "good bad fun boring great awful film movie plot the a was is very".split()


def _train_csv(path: Path, rows: int = 16) -> Path:
    rng = random.Random(0)
    lines = ["text,label"]
    for _ in range(rows):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14)))  # varied lengths
        lines.append(f"{text},{'pos' if 'good' in text or 'great' in text else 'neg'}")
    return write(path, "\n".join(lines) + "\n")


def _args(model: str, data: Path, out: Path, *extra: str) -> list[str]:
    # 16 rows / batch 4 = 4 steps per epoch, 3 epochs = 12 steps, a checkpoint every 3 steps:
    # checkpoints 3, 6, 9, 12; resuming from 6 or 9 starts in the middle of epoch 1 or 2.
    return [
        "classification",
        "train",
        "--model_name_or_path",
        model,
        "--train_file",
        str(data),
        "--validation_file",
        str(data),
        "--output_dir",
        str(out),
        "--num_train_epochs",
        "3",
        "--per_device_train_batch_size",
        "4",
        "--learning_rate",
        "1e-3",
        "--logging_steps",
        "1",
        "--save_strategy",
        "steps",
        "--save_steps",
        "3",
        "--save_total_limit",
        "2",
        "--seed",
        "11",
        "--report_to",
        "none",
        *extra,
    ]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run_killed(point: str, step: int, argv: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, str(KILLER), point, str(step), *argv],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    return done


def _resume_in_subprocess(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "encoder_tasks.cli", *argv, "--resume"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


TIMING_KEYS = ("runtime", "per_second", "wall_seconds", "train_loss", "total_flos", "resumed")


def _outcome(out: Path) -> tuple[dict, dict, list]:
    weights = load_file(str(out / "model.safetensors"))
    metrics = json.loads((out / "metrics.json").read_text())
    # train_loss (and flos) of a resumed call cover the steps run in that call (transformers'
    # definition); the per-step losses below compare the whole trajectory instead.
    metrics = {k: v for k, v in metrics.items() if not any(t in k for t in TIMING_KEYS)}
    state = json.loads((out / "checkpoint-12" / "trainer_state.json").read_text())
    losses = [
        (e["step"], e["loss"], e["grad_norm"], e["learning_rate"])
        for e in state["log_history"]
        if "loss" in e
    ]
    return weights, metrics, losses


def _assert_same(reference: Path, resumed: Path) -> None:
    ref_w, ref_m, ref_l = _outcome(reference)
    got_w, got_m, got_l = _outcome(resumed)
    assert ref_w.keys() == got_w.keys()
    different = [name for name in ref_w if not torch.equal(ref_w[name], got_w[name])]
    assert not different, f"weights differ (bit-exact expected on CPU): {different[:5]}"
    assert got_m == ref_m
    assert len(ref_l) == 12 and got_l == ref_l
    leftovers = [p.name for p in resumed.iterdir() if p.name.startswith(("tmp-", "old-"))]
    assert not leftovers


def _assert_only_complete_checkpoints(out: Path) -> list[str]:
    names = sorted(
        (p.name for p in out.iterdir() if checkpoint_step(p) is not None), key=lambda n: checkpoint_step(n)
    )
    for name in names:
        assert incomplete_reason(out / name) is None, f"{name} is half-written"
    return names


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_bert):
    root = tmp_path_factory.mktemp("resume")
    data = _train_csv(root / "train.csv")
    reference = root / "reference"
    assert main(_args(tiny_bert, data, reference)) == 0
    return tiny_bert, data, reference


def test_kill_during_checkpoint_save_then_resume_is_bit_exact(setup, tmp_path, capsys):
    model, data, reference = setup
    out = tmp_path / "run"
    argv = _args(model, data, out)
    _run_killed("save-weights", 9, argv)
    # The kill came while checkpoint-9 was half written: only its temporary folder holds it.
    assert _assert_only_complete_checkpoints(out) == ["checkpoint-3", "checkpoint-6"]
    assert (out / "tmp-checkpoint-9").is_dir()
    # A half-written folder under a real name (as a plain transformers run leaves after a
    # kill) must be skipped, never loaded; its step is saved again over it.
    write(out / "checkpoint-12" / "trainer_state.json", '{"global_st')
    before = (data.read_bytes(),)
    assert main([*argv, "--resume"]) == 0  # the real CLI, resuming in this process
    printed = capsys.readouterr().out
    assert "skipping incomplete checkpoint" in printed and "checkpoint-12" in printed
    assert "resuming from" in printed and "checkpoint-6" in printed
    assert (data.read_bytes(),) == before
    _assert_same(reference, out)


def test_resume_refuses_without_a_complete_checkpoint(tiny_bert, tmp_path, capsys):
    out = tmp_path / "run"
    write(out / "checkpoint-3" / "config.json", "{}")  # weights never made it
    data = _train_csv(tmp_path / "train.csv")
    assert main([*_args(tiny_bert, data, out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "no complete checkpoint" in err and "Traceback" not in err


@pytest.mark.slow
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
def test_kill_points_all_subprocess(setup, tmp_path, point, step, resumes_from):
    model, data, reference = setup
    out = tmp_path / "run"
    argv = _args(model, data, out)
    _run_killed(point, step, argv)
    names = _assert_only_complete_checkpoints(out)
    assert names[-1] == resumes_from
    _resume_in_subprocess(argv)
    _assert_same(reference, out)


@pytest.mark.slow
def test_kill_from_outside_when_a_checkpoint_appears(setup, tmp_path):
    """No hooks at all: the stock CLI process, killed as soon as checkpoint-6 shows up."""
    model, data, reference = setup
    out = tmp_path / "run"
    argv = _args(model, data, out)
    proc = subprocess.Popen(
        [sys.executable, "-m", "encoder_tasks.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(),
    )
    deadline = time.monotonic() + 300
    while not (out / "checkpoint-6").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() in (-signal.SIGKILL, 0)
    _assert_only_complete_checkpoints(out)
    _resume_in_subprocess(argv)
    _assert_same(reference, out)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["random", "sequential"])
def test_other_sampling_strategies_resume_exactly(tiny_bert, tmp_path, strategy):
    data = _train_csv(tmp_path / "train.csv")
    reference, out = tmp_path / "reference", tmp_path / "run"
    extra = ("--train_sampling_strategy", strategy, "--gradient_accumulation_steps", "1")
    assert main(_args(tiny_bert, data, reference, *extra)) == 0
    argv = _args(tiny_bert, data, out, *extra)
    _run_killed("step", 7, argv)
    _resume_in_subprocess(argv)
    _assert_same(reference, out)
    shutil.rmtree(out)

"""What the tests share besides fixtures: files, command lines, launching, reading a run back.

Command lines are lists for ``encoder_tasks.cli.main`` (in this process) or for
``accelerate launch`` (``launch``, several processes). The builders add no training flags of their
own: a test passes ``*FAST_TRAINING`` (or its own) explicitly, so what a run does stays visible
where the run is.

Example:
    >>> train_argv("ner", "tiny", "t.conll", "out", "--crf")
    ['ner', 'train', '--model_name_or_path', 'tiny', '--train_file', 't.conll', '--output_dir', 'out', '--crf']
    >>> evaluate_argv("ner", "out", "dev.conll")
    ['ner', 'evaluate', '--model_name_or_path', 'out', '--validation_file', 'dev.conll']
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("ENCODER_TASKS_DATA_DIR", REPO.parent / "shared" / "data"))

#: CLI flags for a few-step training run on the tiny files the CLI tests write: one epoch of
#: batch 4, a log line per step, no checkpoints, no trackers. Tests add their task's own flags
#: after these (a repeated flag takes its last value).
FAST_TRAINING = [
    "--num_train_epochs",
    "1",
    "--per_device_train_batch_size",
    "4",
    "--logging_steps",
    "1",
    "--save_strategy",
    "no",
    "--report_to",
    "none",
]

#: FAST_TRAINING for the SQuAD files of ``tests.samples``: windows of 24 tokens, stride 6.
FAST_QA = [*FAST_TRAINING, "--per_device_eval_batch_size", "3", "--max_length", "24", "--doc_stride", "6"]


# ---- files ---------------------------------------------------------------------------------------
def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


# ---- command lines -------------------------------------------------------------------------------
def train_argv(
    task: str, model, train, out, *flags: str, validation=None, action: str = "train"
) -> list[str]:
    """``TASK train`` of ``model`` on ``train`` (and ``validation``) into ``out``, then ``flags``
    (``action="search"``: the same for a hyperparameter search)."""
    argv = [task, action, "--model_name_or_path", str(model), "--train_file", str(train)]
    if validation is not None:
        argv += ["--validation_file", str(validation)]
    # Tests that look inside checkpoint-* folders of finished runs (resume, overwrite) need them:
    # a finished run removes them unless told (tests/cli/test_run_folder.py tests that default).
    keep = [] if "--keep_checkpoints" in flags or action != "train" else ["--keep_checkpoints", "true"]
    return [*argv, "--output_dir", str(out), *keep, *flags]


def evaluate_argv(task: str, model, data, *flags: str) -> list[str]:
    return [task, "evaluate", "--model_name_or_path", str(model), "--validation_file", str(data), *flags]


def predict_argv(task: str, model_dir, inputs, output, *flags: str, action: str = "predict") -> list[str]:
    """``TASK predict`` (or another action that reads inputs with a saved model: ``encode``...)."""
    argv = [task, action, "--model_dir", str(model_dir), "--input_file", str(inputs)]
    return [*argv, "--output_file", str(output), *flags]


def run_train(task: str, model, train, out, *flags: str, validation=None) -> dict:
    """Train through the real CLI (in this process); the run's ``metrics.json``."""
    from encoder_tasks.cli import main

    assert main(train_argv(task, model, train, out, *flags, validation=validation)) == 0
    return read_json(Path(out) / "metrics.json")


def run_predict(task: str, model_dir, inputs, output, *flags: str) -> list[dict]:
    """Predict through the real CLI (in this process); the JSON lines it wrote."""
    from encoder_tasks.cli import main

    assert main(predict_argv(task, model_dir, inputs, output, *flags)) == 0
    return read_jsonl(output)


# ---- what the user sees --------------------------------------------------------------------------
def error_line(err: str, alone: bool = False) -> str:
    """The one ``encoder-tasks:`` error line of stderr ``err`` (asserted: exactly one, no
    traceback); with ``alone``, also asserted to be all that stderr holds."""
    lines = [line for line in err.strip().splitlines() if line.startswith("encoder-tasks:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    if alone:
        assert len(err.strip().splitlines()) == 1, err
    return lines[0]


# ---- subprocesses --------------------------------------------------------------------------------
def subprocess_env(**extra: str) -> dict[str, str]:
    """This environment, with the checkout importable (``tests.*`` helpers) and ``extra`` set."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **extra}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_python(code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -c code args...`` in a fresh interpreter at the checkout, with
    :func:`subprocess_env`, its output captured as text (what import-isolation tests need)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(args: list[str], processes: int = 2, timeout: int = 600) -> subprocess.CompletedProcess:
    """``accelerate launch --cpu`` of the CLI on ``processes`` processes; asserts it succeeded."""
    # --multi_gpu is accelerate's torchrun launcher; without GPUs the toolkit joins the
    # processes in a gloo group (see recipes/accelerate/cpu-2proc.yaml).
    # A fresh port per launch: back-to-back runs on the default port can meet a socket the
    # previous run has not released yet, and gloo then aborts a rank.
    multi = ["--multi_gpu", "--main_process_port", str(free_port())] if processes > 1 else []
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *multi, "--num_processes", str(processes)]
    cmd += ["--num_machines", "1", "--dynamo_backend", "no", "--mixed_precision", "no"]
    keep = (
        ["--keep_checkpoints", "true"] if args[1:2] == ["train"] and "--keep_checkpoints" not in args else []
    )
    cmd += ["-m", "encoder_tasks.cli", *args, *keep]
    env = subprocess_env(OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


# ---- killed and resumed runs (tests/cli/test_resume.py, tests/slow/test_resume_kill_points.py) ----
KILLER = Path(__file__).with_name("kill_at.py")
RESUME_WORDS = "good bad fun boring great awful film movie plot the a was is very".split()
#: metrics.json keys that differ between an uninterrupted and a resumed run by definition.
TIMING_KEYS = ("runtime", "per_second", "wall_seconds", "train_loss", "total_flos", "resumed")


def resume_csv(path: Path, rows: int = 16) -> Path:
    """A classification table of ``rows`` texts of varied lengths (a fixed draw)."""
    import random

    rng = random.Random(0)
    lines = ["text,label"]
    for _ in range(rows):
        text = " ".join(rng.choice(RESUME_WORDS) for _ in range(rng.randint(2, 14)))  # varied lengths
        lines.append(f"{text},{'pos' if 'good' in text or 'great' in text else 'neg'}")
    return write(path, "\n".join(lines) + "\n")


def resume_argv(model: str, data: Path, out: Path, *extra: str) -> list[str]:
    # 16 rows / batch 4 = 4 steps per epoch, 3 epochs = 12 steps, a checkpoint every 3 steps:
    # checkpoints 3, 6, 9, 12; resuming from 6 or 9 starts in the middle of epoch 1 or 2.
    flags = ["--num_train_epochs", "3", "--per_device_train_batch_size", "4", "--learning_rate", "1e-3"]
    flags += ["--logging_steps", "1", "--save_strategy", "steps", "--save_steps", "3"]
    flags += ["--save_total_limit", "2", "--seed", "11", "--report_to", "none", *extra]
    return train_argv("classification", model, data, out, *flags, validation=data)


def run_killed(point: str, step: int, argv: list[str]) -> subprocess.CompletedProcess:
    """The CLI in a subprocess that ``kill_at.py`` SIGKILLs at ``point`` of ``step``."""
    import signal

    done = subprocess.run(
        [sys.executable, str(KILLER), point, str(step), *argv],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=300,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    return done


def resume_in_subprocess(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "encoder_tasks.cli", *argv, "--resume"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _outcome(out: Path) -> tuple[dict, dict, list]:
    from safetensors.torch import load_file

    weights = load_file(str(out / "model.safetensors"))
    # train_loss (and flos) of a resumed call cover the steps run in that call (transformers'
    # definition); the per-step losses below compare the whole trajectory instead.
    metrics = {
        k: v for k, v in read_json(out / "metrics.json").items() if not any(t in k for t in TIMING_KEYS)
    }
    state = read_json(out / "checkpoint-12" / "trainer_state.json")
    losses = [
        (e["step"], e["loss"], e["grad_norm"], e["learning_rate"])
        for e in state["log_history"]
        if "loss" in e
    ]
    return weights, metrics, losses


def assert_same_run(reference: Path, resumed: Path) -> None:
    """Bit-identical weights, equal metrics and per-step losses, no temporary leftovers."""
    import torch

    ref_w, ref_m, ref_l = _outcome(reference)
    got_w, got_m, got_l = _outcome(resumed)
    assert ref_w.keys() == got_w.keys()
    different = [name for name in ref_w if not torch.equal(ref_w[name], got_w[name])]
    assert not different, f"weights differ (bit-exact expected on CPU): {different[:5]}"
    assert got_m == ref_m
    assert len(ref_l) == 12 and got_l == ref_l
    leftovers = [p.name for p in resumed.iterdir() if p.name.startswith(("tmp-", "old-"))]
    assert not leftovers


def complete_checkpoints(out: Path) -> list[str]:
    """The checkpoint folders of ``out`` by step, each asserted complete."""
    from encoder_tasks.checkpoints import checkpoint_step, incomplete_reason

    names = sorted((p.name for p in out.iterdir() if checkpoint_step(p) is not None), key=checkpoint_step)
    for name in names:
        assert incomplete_reason(out / name) is None, f"{name} is half-written"
    return names


def assert_close_records(found, expected, tolerance: float = 2e-6, where: str = "records") -> None:
    """``found == expected`` (nested dicts and lists), numbers within ``tolerance``: predictions of
    the same inputs batched differently differ in the last rounded digit, never in a label."""
    if isinstance(expected, dict):
        assert isinstance(found, dict) and found.keys() == expected.keys(), (
            f"{where}: {found!r} != {expected!r}"
        )
        for key in expected:
            assert_close_records(found[key], expected[key], tolerance, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(found, list) and len(found) == len(expected), f"{where}: {found!r} != {expected!r}"
        for i, (a, b) in enumerate(zip(found, expected)):
            assert_close_records(a, b, tolerance, f"{where}[{i}]")
    elif isinstance(expected, float) and not isinstance(expected, bool):
        assert abs(found - expected) <= tolerance, f"{where}: {found} != {expected}"
    else:
        assert found == expected, f"{where}: {found!r} != {expected!r}"


def cli_records(run, tmp_path: Path, *flags: str) -> list[dict]:
    """What the command line writes for a ``tests.runs.TaskRun``'s predict file at fp32, without
    ``line``: ``predict`` (``encode`` for embedding, whose ``predict`` scores pairs)."""
    flags = ("--precision", "fp32", *flags)
    if run.task == "embedding":
        from encoder_tasks.cli import main

        out = tmp_path / "vectors.jsonl"
        assert (
            main(predict_argv("embedding", run.model_dir, run.predict_file, out, *flags, action="encode"))
            == 0
        )
        return [{k: v for k, v in r.items() if k != "id"} for r in read_jsonl(out)]
    records = run_predict(run.task, run.model_dir, run.predict_file, tmp_path / "out.jsonl", *flags)
    return [{k: v for k, v in r.items() if k != "line"} for r in records]


def batch_rule(task_name: str) -> dict:
    """The batch-size rules a task's objects give ``training_args.resolve_batch_size``."""
    from encoder_tasks.registry import TASKS

    task = TASKS[task_name]
    return {
        "auto_batch": task.auto_batch_size,
        "token_budget_refusal": task.trainer_class().token_budget_refusal,
    }

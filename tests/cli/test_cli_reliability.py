"""Failures during a run end in one line and keep earlier work: NaN loss, full or unwritable
disk, unexpected exceptions, errors raised inside Trainer callbacks, ``--debug``."""

from __future__ import annotations

import errno
import os
import shutil
from collections import namedtuple

import pytest
from transformers import TrainerCallback

from encoder_tasks import checkpoints, outputs
from encoder_tasks.checkpoints import incomplete_reason
from encoder_tasks.cli import main
from encoder_tasks.errors import UserError
from encoder_tasks.trainer import EncoderTaskTrainer
from tests.helpers import error_line, train_argv, write

FAST = ["--per_device_train_batch_size", "2", "--logging_steps", "1", "--report_to", "none"]


def _scores(path, last="1.5"):
    # Regression data in a fixed order; the last label is absurd (1e30 squared overflows fp32).
    rows = ["text,label", "good film,0.5", "bad film,2.5", "fine plot,1.5", "dull plot,3.5"]
    rows += ["great cast,4.5", f"awful cast,{last}"]
    return write(path, "\n".join(rows) + "\n")


def _train(model, data, out, *extra):
    return train_argv("classification", model, data, out, *FAST, *extra)


def test_nan_loss_stops_with_one_line_and_keeps_the_last_good_checkpoint(tiny_bert, tmp_path, capsys):
    data = _scores(tmp_path / "train.csv", last="1e30")
    out = tmp_path / "run"
    flags = ["--train_sampling_strategy", "sequential"]  # the bad row comes in step 3
    argv = _train(
        tiny_bert,
        data,
        out,
        *flags,
        "--num_train_epochs",
        "1",
        "--save_strategy",
        "steps",
        "--save_steps",
        "1",
    )
    assert main(argv) == 2
    line = error_line(capsys.readouterr().err)
    assert "training loss became inf at step 3" in line and "checkpoint-2" in line and "--resume" in line
    kept = sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint-"))
    assert kept == ["checkpoint-1", "checkpoint-2"]
    assert incomplete_reason(out / "checkpoint-2") is None
    assert not (out / "model.safetensors").exists()  # no final model from a diverged run


def test_nan_from_a_huge_learning_rate(tiny_bert, tmp_path, capsys):
    data = _scores(tmp_path / "train.csv")
    out = tmp_path / "run"
    argv = _train(
        tiny_bert, data, out, "--learning_rate", "1e30", "--max_grad_norm", "0", "--save_strategy", "no"
    )
    assert main([*argv, "--num_train_epochs", "20"]) == 2
    line = error_line(capsys.readouterr().err)
    assert "training loss became" in line and "no checkpoint was written before it" in line


def test_full_disk_is_found_before_training(tiny_bert, tmp_path, capsys, monkeypatch):
    data = _scores(tmp_path / "train.csv")
    out = tmp_path / "run"
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(
        outputs.shutil, "disk_usage", lambda path: usage(1 << 30, (1 << 30) - (1 << 20), 1 << 20)
    )
    monkeypatch.setattr(EncoderTaskTrainer, "train", lambda *a, **k: pytest.fail("training started"))
    assert main(_train(tiny_bert, data, out)) == 2
    line = error_line(capsys.readouterr().err)
    assert f"--output_dir {out}: 1 MiB free, the run needs about" in line and "3 checkpoints" in line


def test_disk_estimate_counts_every_checkpoint_kept(tiny_bert):
    from types import SimpleNamespace

    from encoder_tasks.backbone import load_encoder

    model = load_encoder(tiny_bert)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    margin = 50 << 20
    args = SimpleNamespace(save_strategy="steps", save_total_limit=2, save_only_model=False)
    assert outputs.checkpoint_bytes(model, args)[0] == 3 * 3 * weights + weights + margin
    args.save_total_limit = None
    assert outputs.checkpoint_bytes(model, args)[0] == 2 * 3 * weights + weights + margin
    args.save_strategy = "no"
    assert outputs.checkpoint_bytes(model, args)[0] == weights + margin


def test_unwritable_output_dir_is_found_before_training(tiny_bert, tmp_path, capsys, monkeypatch):
    data = _scores(tmp_path / "train.csv")

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(outputs.tempfile, "NamedTemporaryFile", refuse)
    assert main(_train(tiny_bert, data, tmp_path / "run")) == 2
    assert "cannot write there (Permission denied)" in error_line(capsys.readouterr().err)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_output_dir(tiny_bert, tmp_path, capsys):
    data = _scores(tmp_path / "train.csv")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert main(_train(tiny_bert, data, locked / "run")) == 2
    finally:
        locked.chmod(0o700)
    assert "cannot write there" in error_line(capsys.readouterr().err)


def test_disk_full_during_a_save_keeps_complete_checkpoints(tiny_bert, tmp_path, capsys, monkeypatch):
    data = _scores(tmp_path / "train.csv")
    out = tmp_path / "run"
    publish = checkpoints.publish

    def publish_until_full(staging, final):
        if final.endswith("checkpoint-2"):
            raise OSError(errno.ENOSPC, "No space left on device", str(staging))
        return publish(staging, final)

    monkeypatch.setattr(checkpoints, "publish", publish_until_full)
    argv = _train(
        tiny_bert, data, out, "--num_train_epochs", "1", "--save_strategy", "steps", "--save_steps", "1"
    )
    assert main(argv) == 2
    line = error_line(capsys.readouterr().err)
    assert "no space left on the device" in line and "--resume" in line
    assert incomplete_reason(out / "checkpoint-1") is None and not (out / "checkpoint-2").exists()
    monkeypatch.setattr(checkpoints, "publish", publish)
    assert main([*argv, "--resume"]) == 0  # space is back: continue where it stopped
    assert (out / "model.safetensors").is_file() and not (out / "tmp-checkpoint-2").exists()


def test_user_error_raised_in_a_callback_reaches_the_cli(tiny_bert, tmp_path, capsys, monkeypatch):
    class Refuse(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            raise UserError(f"stopped by a callback at step {state.global_step}")

    init = EncoderTaskTrainer.__init__

    def with_callback(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.add_callback(Refuse())

    monkeypatch.setattr(EncoderTaskTrainer, "__init__", with_callback)
    data = _scores(tmp_path / "train.csv")
    assert main(_train(tiny_bert, data, tmp_path / "run", "--save_strategy", "no")) == 2
    assert error_line(capsys.readouterr().err) == "encoder-tasks: error: stopped by a callback at step 1"


def test_unexpected_exception_is_one_line_and_debug_shows_it(tiny_bert, tmp_path, capsys, monkeypatch):
    from encoder_tasks.registry import TASKS

    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(type(TASKS["classification"]), "prepare", broken)
    data = _scores(tmp_path / "train.csv")
    argv = _train(tiny_bert, data, tmp_path / "run")
    assert main(argv) == 1
    line = error_line(capsys.readouterr().err)
    assert line.startswith("encoder-tasks: error: unexpected RuntimeError: boom.") and "--debug" in line
    shutil.rmtree(tmp_path / "run", ignore_errors=True)
    with pytest.raises(RuntimeError, match="boom"):
        main([*argv, "--debug"])
    monkeypatch.setenv("ENCODER_TASKS_DEBUG", "1")
    shutil.rmtree(tmp_path / "run", ignore_errors=True)
    with pytest.raises(RuntimeError, match="boom"):
        main(argv)


def test_debug_flag_on_train_shows_the_user_error_traceback(tmp_path):
    # transformers has a --debug option of its own; a bare --debug is ours.
    argv = ["classification", "train", "--output_dir", str(tmp_path / "o"), "--train_file", "missing.csv"]
    with pytest.raises(UserError, match="missing.csv: no such file"):
        main([*argv, "--debug"])
    with pytest.raises(UserError, match="missing.csv: no such file"):
        main(["--debug", *argv][1:2] + ["train", "--debug", *argv[2:]])


def test_out_of_memory_gets_a_hint(tiny_bert, tmp_path, capsys, monkeypatch):
    def oom(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(EncoderTaskTrainer, "train", oom)
    data = _scores(tmp_path / "train.csv")
    assert main(_train(tiny_bert, data, tmp_path / "run")) == 1
    assert "--per_device_train_batch_size" in error_line(capsys.readouterr().err)

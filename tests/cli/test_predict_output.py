"""Where ``predict`` writes (issue 26, reproduction 12): an output that cannot be written is one
clear error before the model loads, not "unexpected PermissionError" after every prediction;
``-`` writes the predictions alone on stdout; a pipe or a device is written directly, never
replaced by a regular file, even with ``--overwrite_output``."""

import json
import os
import subprocess
import sys
import threading

import pytest

from encoder_tasks.cli import main
from encoder_tasks.errors import UserError
from encoder_tasks.predict import check_output_location
from tests.helpers import REPO, error_line, predict_argv, subprocess_env


def test_unwritable_outputs_are_refused_before_any_prediction(task_runs, tmp_path, capsys, monkeypatch):
    import encoder_tasks.predict as predict

    def no_model(*args, **kwargs):
        raise AssertionError("the model was used before the output was checked")

    monkeypatch.setattr(predict, "run_batches", no_model)
    run = task_runs["classification"]
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for output, message in [
        (tmp_path, "is a folder; expected a file name"),
        (a_file / "out.jsonl", "is a file, not a folder"),
        ("/sys/kernel/out.jsonl", "cannot write in /sys/kernel"),
    ]:
        assert main(predict_argv("classification", run.model_dir, run.predict_file, output)) != 0
        line = error_line(capsys.readouterr().err)
        assert message in line, line
        assert "probably a bug" not in line


def test_check_output_location_accepts_what_can_be_written(tmp_path):
    check_output_location("-")
    check_output_location(str(tmp_path / "new" / "deeper" / "out.jsonl"))  # folders are made
    check_output_location("/dev/null")  # a device: written directly
    (tmp_path / "old.jsonl").write_text("")
    with pytest.raises(UserError, match="already exists"):
        check_output_location(str(tmp_path / "old.jsonl"))
    check_output_location(str(tmp_path / "old.jsonl"), overwrite=True)


def _predict_process(run, output, *flags):
    argv = predict_argv("classification", run.model_dir, run.predict_file, output, *flags)
    return subprocess.run(
        [sys.executable, "-m", "encoder_tasks.cli", *argv],
        cwd=REPO,
        env=subprocess_env(ENCODER_TASKS_DISABLE_TQDM="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_dash_writes_the_predictions_alone_on_stdout(task_runs):
    run = task_runs["classification"]
    done = _predict_process(run, "-")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]  # nothing else on stdout
    assert [r["text"] for r in records] == [r["text"] for r in run.records]
    assert "wrote 3 predictions to stdout" in done.stderr


def test_a_named_pipe_is_written_directly_and_stays_a_pipe(task_runs, tmp_path):
    run = task_runs["classification"]
    fifo = tmp_path / "predictions.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    done = _predict_process(run, fifo, "--overwrite_output")
    reader.join(60)
    assert done.returncode == 0, done.stderr
    assert len(got[0].splitlines()) == 3
    assert fifo.is_fifo()  # not replaced by a regular file


def test_a_device_is_written_directly_not_replaced(task_runs):
    run = task_runs["classification"]
    done = _predict_process(run, "/dev/null", "--overwrite_output")
    assert done.returncode == 0, done.stderr
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    full = _predict_process(run, "/dev/full", "--overwrite_output")  # a device that refuses writes
    assert full.returncode != 0
    assert "--output_file /dev/full: cannot write (No space left on device)" in full.stderr
    assert not os.path.isfile("/dev/full")

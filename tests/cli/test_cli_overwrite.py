"""``--overwrite_output_dir`` moves the earlier run aside, whole, before the new one writes: the run
directory then holds the new run only (its checkpoints, its log, no old ``eval/``), the earlier
run is where the log line says, and ``--resume`` continues the new run, never the old one."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from encoder_tasks import outputs
from encoder_tasks.cli import main
from encoder_tasks.errors import UserError
from encoder_tasks.outputs import check_output_dir
from encoder_tasks.reporting.tracking import read_log
from tests.helpers import complete_checkpoints, read_json, resume_argv, resume_csv, write

REPLACED = ".replaced-"  # <output_dir>.replaced-<time>


def moved_to(err: str) -> Path:
    """The folder the overwrite message names."""
    found = re.search(r"moved the earlier run in \S+ to (\S+) \(nothing deleted", err)
    assert found, err
    return Path(found.group(1))


def test_overwrite_moves_the_earlier_run_aside_and_resume_continues_the_new_one(tiny_bert, tmp_path, capsys):
    data = resume_csv(tmp_path / "train.csv")
    out = tmp_path / "run"
    # The earlier run: 12 steps, checkpoints 9 and 12, a log of 12 steps, an evaluation.
    assert main(resume_argv(tiny_bert, data, out)) == 0
    write(out / "eval" / "dev.json", '{"eval_accuracy": 0.5}')
    old_files = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert complete_checkpoints(out) == ["checkpoint-9", "checkpoint-12"]
    capsys.readouterr()

    # The new run: 2 epochs = 8 steps, checkpoints 3, 6 and 8 (the last two kept).
    argv = resume_argv(tiny_bert, data, out, "--num_train_epochs", "2")
    assert main([*argv, "--overwrite_output_dir"]) == 0
    aside = moved_to(capsys.readouterr().err)
    assert aside.parent == tmp_path and aside.name.startswith("run" + REPLACED)
    assert sorted(p.relative_to(aside) for p in aside.rglob("*")) == old_files  # all of it, untouched
    assert complete_checkpoints(aside) == ["checkpoint-9", "checkpoint-12"]
    assert max(r["step"] for r in read_log(aside)) == 12

    assert complete_checkpoints(out) == ["checkpoint-6", "checkpoint-8"]  # the new run's only
    assert not (out / "eval").exists()
    assert [r["step"] for r in read_log(out) if "loss" in r] == list(range(1, 9))  # no old records

    # As if killed before its last save: --resume continues the new run from its checkpoint-6,
    # not from the old run's checkpoint-12.
    shutil.rmtree(out / "checkpoint-8")
    assert main([*argv, "--resume"]) == 0
    printed = capsys.readouterr().out
    assert f"resuming from {out / 'checkpoint-6'}" in printed
    assert read_json(out / "metrics.json")["train_resumed_from_step"] == 6
    assert [p.name for p in tmp_path.iterdir() if REPLACED in p.name] == [aside.name]  # resume moved nothing


def test_resume_never_reaches_back_into_the_replaced_run(tiny_bert, tmp_path, capsys):
    data = resume_csv(tmp_path / "train.csv")
    out = tmp_path / "run"
    assert main(resume_argv(tiny_bert, data, out)) == 0  # checkpoints 9 and 12
    # A new run that wrote no checkpoint yet (as if killed before its first save): --resume
    # has nothing of it to continue, and must not pick the replaced run's checkpoint-12.
    argv = resume_argv(tiny_bert, data, out, "--num_train_epochs", "1", "--save_strategy", "no")
    assert main([*argv, "--overwrite_output_dir"]) == 0
    aside = moved_to(capsys.readouterr().err)
    assert main([*argv, "--resume"]) == 2
    assert "no complete checkpoint" in capsys.readouterr().err
    assert complete_checkpoints(aside) == ["checkpoint-9", "checkpoint-12"]


def args_for(out, overwrite=True, resume=False):
    return SimpleNamespace(output_dir=str(out), overwrite_output_dir=overwrite, resume=resume)


def test_an_empty_or_missing_output_dir_moves_nothing(tmp_path, caplog):
    check_output_dir(args_for(tmp_path / "new"))
    (tmp_path / "empty").mkdir()
    check_output_dir(args_for(tmp_path / "empty"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "new"]
    assert "moved" not in caplog.text


def test_resume_wins_over_overwrite_and_other_processes_move_nothing(tmp_path, monkeypatch):
    out = tmp_path / "run"
    write(out / "checkpoint-3" / "trainer_state.json", '{"global_step": 3}')
    check_output_dir(args_for(out, resume=True))
    monkeypatch.setenv("RANK", "1")  # not the main process: only the main one moves the run
    check_output_dir(args_for(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert (out / "checkpoint-3" / "trainer_state.json").is_file()


def test_a_working_directory_or_a_link_stays_and_its_entries_move(tmp_path, monkeypatch):
    out = tmp_path / "run"
    write(out / "log.jsonl", "{}\n")
    write(out / "checkpoint-3" / "trainer_state.json", "{}")
    monkeypatch.chdir(out)  # `--output_dir .`: the folder itself cannot move from under the process
    aside = outputs.move_aside(Path("."))
    assert aside.parent == tmp_path and out.is_dir() and not any(out.iterdir())
    assert sorted(p.name for p in aside.iterdir()) == ["checkpoint-3", "log.jsonl"]

    link = tmp_path / "link"
    link.symlink_to(out)
    write(out / "log.jsonl", "{}\n")
    again = outputs.move_aside(link)  # the link must keep pointing somewhere: its target's entries move
    assert link.is_symlink() and link.resolve() == out.resolve() and not any(out.iterdir())
    assert again != aside and (again / "log.jsonl").is_file()


def test_a_run_that_cannot_be_moved_is_left_alone_with_a_clear_error(tmp_path, monkeypatch):
    out = tmp_path / "run"
    write(out / "log.jsonl", "{}\n")

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("encoder_tasks.outputs.os.rename", refuse)
    with pytest.raises(UserError, match=r"cannot move the earlier run in .*run aside to .*Permission denied"):
        check_output_dir(args_for(out))
    assert (out / "log.jsonl").is_file()

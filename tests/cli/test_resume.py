"""Kill a real training run with SIGKILL, resume it, and get the uninterrupted run's result.

The killed run is a subprocess of the real CLI (``tests/kill_at.py`` kills it at an exact
point). Resumed and uninterrupted runs must end with bit-identical weights, the same evaluation
metrics and the same per-step losses: on CPU with a fixed seed the optimizer, scheduler, RNG and
data order are all restored. Every other kill point is in the slow tier
(``tests/slow/test_resume_kill_points.py``).
"""

from __future__ import annotations

from encoder_tasks.cli import main
from tests.helpers import assert_same_run, complete_checkpoints, resume_argv, resume_csv, run_killed, write


def test_kill_during_checkpoint_save_then_resume_is_bit_exact(resume_reference, tmp_path, capsys):
    model, data, reference = resume_reference
    out = tmp_path / "run"
    argv = resume_argv(model, data, out)
    run_killed("save-weights", 9, argv)
    # The kill came while checkpoint-9 was half written: only its temporary folder holds it.
    assert complete_checkpoints(out) == ["checkpoint-3", "checkpoint-6"]
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
    assert_same_run(reference, out)


def test_resume_refuses_without_a_complete_checkpoint(tiny_bert, tmp_path, capsys):
    out = tmp_path / "run"
    write(out / "checkpoint-3" / "config.json", "{}")  # weights never made it
    data = resume_csv(tmp_path / "train.csv")
    assert main([*resume_argv(tiny_bert, data, out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "no complete checkpoint" in err and "Traceback" not in err

"""Atomic checkpoint folders, choosing what to resume from, and the seeded length-grouped sampler."""

from __future__ import annotations

import json

import pytest

from encoder_tasks import checkpoints
from encoder_tasks.checkpoints import (
    checkpoint_step,
    incomplete_reason,
    last_complete_checkpoint,
    publish,
    remove_leftovers,
    staging_path,
)
from encoder_tasks.cli import main
from encoder_tasks.sampling import SeededLengthGroupedSampler
from tests.helpers import write


def _checkpoint(root, step, state=None, name=None):
    folder = root / (name or f"checkpoint-{step}")
    write(folder / "model.safetensors", b"weights")
    if state is not False:
        write(folder / "trainer_state.json", json.dumps(state or {"global_step": step}))
    return folder


def test_publish_renames_whole_folder_and_replaces_an_older_one(tmp_path):
    final = tmp_path / "checkpoint-4"
    _checkpoint(tmp_path, 4, {"global_step": 4, "old": True})
    staging = staging_path(final)
    _checkpoint(tmp_path, 4, name=staging.name)
    publish(staging, final)
    assert not staging.exists() and not (tmp_path / "old-checkpoint-4").exists()
    assert json.loads((final / "trainer_state.json").read_text()) == {"global_step": 4}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (False, "no trainer_state.json"),
        ('{"global_st', "is damaged"),
        ('{"global_step": 3}', "does not describe step 5"),
        ("[1]", "does not describe step 5"),
    ],
)
def test_incomplete_checkpoints_are_named(tmp_path, content, reason):
    folder = _checkpoint(tmp_path, 5, state=False)
    if content is not False:
        (folder / "trainer_state.json").write_text(content)
    assert reason in incomplete_reason(folder)


def test_last_complete_checkpoint_orders_by_step_and_skips_broken(tmp_path, capsys):
    for step in (2, 9, 10):
        _checkpoint(tmp_path, step)
    _checkpoint(tmp_path, 12, state=False)  # half written
    _checkpoint(tmp_path, 11, name="tmp-checkpoint-11")  # never renamed
    write(tmp_path / "checkpoint-x" / "trainer_state.json", "{}")
    assert last_complete_checkpoint(tmp_path).name == "checkpoint-10"  # numeric, not "9" > "10"
    assert "skipping incomplete checkpoint" in capsys.readouterr().out
    assert last_complete_checkpoint(tmp_path / "missing") is None
    assert checkpoint_step("checkpoint-10") == 10 and checkpoint_step("tmp-checkpoint-10") is None


def test_remove_leftovers_only_touches_interrupted_saves(tmp_path):
    _checkpoint(tmp_path, 3)
    _checkpoint(tmp_path, 6, name="tmp-checkpoint-6")
    _checkpoint(tmp_path, 6, name="old-checkpoint-6")
    write(tmp_path / "tmp-notes" / "keep.txt", "mine")
    assert remove_leftovers(tmp_path) == ["old-checkpoint-6", "tmp-checkpoint-6"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-3", "tmp-notes"]


def test_seeded_sampler_order_depends_on_seed_and_epoch_only():
    lengths = [((i * 37) % 23) + 1 for i in range(200)]
    sampler = SeededLengthGroupedSampler(8, lengths=lengths, seed=3)
    orders = {}
    for epoch in (0, 1, 0):
        sampler.set_epoch(epoch)
        order = list(sampler)
        assert sorted(order) == list(range(200))
        orders.setdefault(epoch, order)
        assert order == orders[epoch]
    assert orders[0] != orders[1]
    other = SeededLengthGroupedSampler(8, lengths=lengths, seed=4)
    assert list(other) != orders[0]
    # the longest example leads, as in transformers' sampler (an OOM shows up at once)
    assert lengths[orders[1][0]] == max(lengths)


def test_best_model_checkpoint_survives_atomic_saves(tiny_bert, tmp_path, capsys):
    data = write(tmp_path / "t.csv", "text,label\n" + "good film,pos\nbad film,neg\n" * 6)
    out = tmp_path / "run"
    argv = ["classification", "train", "--model_name_or_path", tiny_bert, "--train_file", str(data)]
    argv += ["--validation_file", str(data), "--output_dir", str(out), "--num_train_epochs", "2"]
    argv += ["--per_device_train_batch_size", "4", "--eval_strategy", "steps", "--eval_steps", "1"]
    argv += ["--save_strategy", "steps", "--save_steps", "1", "--save_total_limit", "1"]
    argv += ["--load_best_model_at_end", "--metric_for_best_model", "loss", "--report_to", "none"]
    argv += ["--keep_checkpoints", "true"]  # looked into below (a finished run removes them otherwise)
    assert main(argv) == 0
    kept = sorted(p.name for p in out.iterdir() if checkpoint_step(p) is not None)
    state = json.loads((out / kept[-1] / "trainer_state.json").read_text())
    assert state["best_model_checkpoint"] and state["best_model_checkpoint"].startswith(
        str(out / "checkpoint-")
    )
    assert not any(p.name.startswith(("tmp-", "old-")) for p in out.iterdir())
    assert checkpoints.STAGING_PREFIX == "tmp-"

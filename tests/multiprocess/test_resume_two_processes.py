"""Resuming a two-process (DDP, gloo) run: every rank's RNG state is written into the
temporary checkpoint folder before rank 0 renames it, and the resumed run ends with the
uninterrupted run's weights."""

import shutil

import pytest
import torch
from safetensors.torch import load_file

from encoder_tasks.checkpoints import incomplete_reason
from tests.helpers import launch, train_argv


@pytest.mark.parametrize("strategy", ["group_by_length", "random"])
def test_two_process_run_resumes_exactly(tiny_bert, reviews, tmp_path, strategy):
    train, dev = reviews
    flags = ["--num_train_epochs", "2", "--per_device_train_batch_size", "2"]
    flags += ["--save_strategy", "steps", "--save_steps", "3", "--save_total_limit", "10", "--seed", "3"]
    flags += ["--mixed_precision", "no", "--report_to", "none", "--logging_steps", "1"]
    flags += ["--train_sampling_strategy", strategy]
    reference = tmp_path / "reference"
    launch(train_argv("classification", tiny_bert, train, reference, *flags, validation=dev))
    middle = reference / "checkpoint-9"  # 28 rows / (2 x 2) = 7 steps per epoch: mid epoch 1
    assert incomplete_reason(middle) is None
    assert sorted(p.name for p in middle.glob("rng_state_*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert not [p for p in reference.iterdir() if p.name.startswith(("tmp-", "old-"))]

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(middle, resumed / middle.name)
    launch([*train_argv("classification", tiny_bert, train, resumed, *flags, validation=dev), "--resume"])
    want, got = load_file(str(reference / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert [k for k in want if not torch.equal(want[k], got[k])] == []

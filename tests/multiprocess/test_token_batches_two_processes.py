"""Token-budget batches on two processes (DDP, gloo): each process takes whole batches, both the
same number of steps, and a run resumed mid-epoch ends with the uninterrupted run's weights."""

import shutil

import torch
from safetensors.torch import load_file

from tests.helpers import launch, read_json, resume_csv, train_argv


def test_two_process_token_budget_run_resumes_exactly(tiny_bert, tmp_path):
    data = resume_csv(tmp_path / "train.csv", rows=40)
    flags = ["--num_train_epochs", "2", "--max_tokens_per_batch", "48", "--seed", "3"]
    flags += ["--save_strategy", "steps", "--save_steps", "2", "--save_total_limit", "50"]
    flags += ["--mixed_precision", "no", "--report_to", "none", "--logging_steps", "1"]
    reference = tmp_path / "reference"
    done = launch(train_argv("classification", tiny_bert, data, reference, *flags))
    assert "per process" in done.stdout + done.stderr
    steps = sorted(int(p.name.split("-")[1]) for p in reference.glob("checkpoint-*"))
    per_epoch = read_json(reference / f"checkpoint-{steps[-1]}" / "trainer_state.json")["max_steps"] // 2
    middle = next(s for s in steps if s > per_epoch and s % per_epoch)  # inside epoch 1
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(reference / f"checkpoint-{middle}", resumed / f"checkpoint-{middle}")
    launch([*train_argv("classification", tiny_bert, data, resumed, *flags), "--resume"])
    want, got = load_file(str(reference / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert [k for k in want if not torch.equal(want[k], got[k])] == []

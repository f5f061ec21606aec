"""The one prediction path: device, batching, writing without overwriting."""

from __future__ import annotations

import pytest
import torch

from encoder_tasks.data.writers import check_new_file, write_jsonl
from encoder_tasks.errors import UserError
from encoder_tasks.predict import inference_device, length_sorted_batches, run_batches


def test_batches_are_length_sorted_and_cover_every_index_once():
    lengths = [9, 1, 5, 3, 7, 2, 8]
    batches = length_sorted_batches(lengths, 3)
    assert [len(b) for b in batches] == [3, 3, 1]
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[i] for i in flat] == sorted(lengths)
    with pytest.raises(UserError, match="--batch_size must be at least 1"):
        length_sorted_batches(lengths, 0)


def test_run_batches_returns_outputs_in_input_order_with_the_batch_size_asked(monkeypatch):
    seen = []

    class Echo(torch.nn.Module):
        device = torch.device("cpu")

        def forward(self, input_ids):
            seen.append(input_ids.shape[0])
            return type("Out", (), {"logits": input_ids.sum(-1, keepdim=True).float()})()

    def collate(rows):
        width = max(len(r["input_ids"]) for r in rows)
        return {
            "input_ids": torch.tensor([r["input_ids"] + [0] * (width - len(r["input_ids"])) for r in rows])
        }

    features = [{"input_ids": [1] * n} for n in (5, 1, 4, 2, 3)]
    out = run_batches(Echo(), features, collate, batch_size=2, precision="fp32", disable_tqdm=True)
    assert [float(row[0]) for row in out] == [5, 1, 4, 2, 3]
    assert seen == [2, 2, 1]


def test_the_device_can_be_chosen_and_defaults_to_an_accelerator_or_the_cpu(monkeypatch):
    monkeypatch.setenv("ENCODER_TASKS_DEVICE", "cpu")
    assert inference_device().type == "cpu"
    monkeypatch.delenv("ENCODER_TASKS_DEVICE")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert inference_device().type == "mps"  # no longer switched off silently


def test_an_existing_output_is_never_overwritten_unless_asked(tmp_path):
    target = tmp_path / "out.jsonl"
    assert write_jsonl(target, [{"a": 1}, {"a": 2}]) == 2
    with pytest.raises(UserError, match="already exists"):
        check_new_file(target)
    assert check_new_file(target, overwrite=True) == target
    assert target.read_text().count("\n") == 2

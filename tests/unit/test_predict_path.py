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


def _all_partitions(n):
    """Every way to cut range(n) into contiguous non-empty runs (cut points as a sorted tuple)."""
    import itertools

    for k in range(n):
        yield from itertools.combinations(range(1, n), k)


@pytest.mark.parametrize("seed", range(20))
def test_split_passes_cost_no_more_than_any_other_cut(seed):
    """Against brute force: the passes' cost (a pass's cost plus rows x longest row) is the least
    of every contiguous cut of each length-sorted batch; every index appears once; none is larger
    than the batch size."""
    import random

    rng = random.Random(seed)
    lengths = [rng.choice([rng.randint(4, 12), rng.randint(20, 60)]) for _ in range(rng.randint(1, 9))]
    batch_size, pass_cost = rng.randint(2, 9), rng.choice([4, 16, 32])

    def cost(passes):
        return sum(pass_cost + len(p) * max(lengths[i] for i in p) for p in passes)

    got = length_sorted_batches(lengths, batch_size, pass_cost)
    assert sorted(i for p in got for i in p) == list(range(len(lengths)))
    assert all(len(p) <= batch_size for p in got)
    for whole in length_sorted_batches(lengths, batch_size):
        mine = [p for p in got if set(p) <= set(whole)]
        assert sum(map(len, mine)) == len(whole)  # passes never mix two batches
        options = [
            [whole[a:b] for a, b in zip((0, *cuts), (*cuts, len(whole)))]
            for cuts in _all_partitions(len(whole))
        ]
        assert cost(mine) == min(cost(o) for o in options)


def test_like_lengths_stay_one_pass_and_mixed_ones_split():
    assert length_sorted_batches([20, 21, 20, 22], 4, pass_cost=16) == [[0, 2, 1, 3]]
    assert length_sorted_batches([8, 40, 9, 41, 10], 8, pass_cost=16) == [[0, 2, 4], [1, 3]]
    assert length_sorted_batches([8, 40, 9, 41, 10], 8, pass_cost=128) == [[0, 2, 4, 1, 3]]


def test_run_batches_on_a_cpu_splits_a_mixed_batch_and_keeps_input_order():
    seen = []

    class Echo(torch.nn.Module):
        device = torch.device("cpu")

        def forward(self, input_ids):
            seen.append(tuple(input_ids.shape))
            return type("Out", (), {"logits": (input_ids != 0).sum(-1, keepdim=True).float()})()

    def collate(rows):
        width = max(len(r["input_ids"]) for r in rows)
        return {
            "input_ids": torch.tensor([r["input_ids"] + [0] * (width - len(r["input_ids"])) for r in rows])
        }

    sizes = [40, 3, 41, 4, 2, 39]
    out = run_batches(Echo(), [{"input_ids": [1] * n} for n in sizes], collate, batch_size=64)
    assert [float(o[0]) for o in out] == sizes
    assert seen == [(3, 4), (3, 41)]

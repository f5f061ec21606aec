"""``benchmarks/bench_sampler_batches.py``: the batch counts behind the GradCache rows' step counts."""

from __future__ import annotations

import json

from benchmarks import bench_sampler_batches as bench

# Three questions whose mined negative is the same passage "hub"; each has its own positive.
ROWS = [{"query": f"q{i}", "positive": f"p{i}", "negative_1": "hub"} for i in range(3)]


def test_a_shared_negative_needs_a_batch_per_row_unless_negatives_may_repeat(tmp_path):
    (tmp_path / "zh").mkdir()
    (tmp_path / "zh" / "mined-n-tuple.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))

    found = bench.count(tmp_path, "zh", batch=8, seeds=[1])
    seed = found["seeds"][1]
    assert found["most_rows_sharing_one_text"] == 3
    assert seed["toolkit_batches"] == [1, 1, 1]
    assert sorted(seed["st_batches_yielded"]) == [1, 1, 1]
    assert seed["st_steps_trained"] == 1 and seed["st_rows_trained"] == 1  # len() plans 3 / 8 -> 1 step
    assert seed["shared_negatives_batches"] == [3]


def test_a_positive_is_never_another_rows_negative_in_one_batch():
    rows = [
        {"query": "q1", "positive": "p1", "negative_1": "p2"},
        {"query": "q2", "positive": "p2", "negative_1": "n"},
    ]
    assert bench.shared_negative_batches(rows, batch=8, seed=0) == [1, 1]

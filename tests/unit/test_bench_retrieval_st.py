"""``benchmarks/bench_retrieval_st.py``'s reranker phase without training: the rows each
sentence-transformers loss reads, the scorer bridge to the toolkit's ``rerank``, and the tables."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import bench_retrieval as br
from benchmarks import bench_retrieval_st as st

ROWS = [
    {"query": "q1", "positive": "p1", "negative_1": "a", "negative_2": "b", "negative_3": "c"},
    {"query": "q2", "positive": "p2", "negative_1": "d", "negative_2": "e", "negative_3": "f"},
]


@pytest.fixture
def rows_file(tmp_path):
    path = tmp_path / "mined.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return path


def test_listwise_rows_keep_the_n_tuples_in_column_order(rows_file):
    data = st.st_reranker_rows(rows_file, "mnrl")
    assert data.column_names == ["query", "positive", "negative_1", "negative_2", "negative_3"]
    assert data[1] == ROWS[1]


def test_pointwise_rows_label_the_positive_one_and_each_negative_zero(rows_file):
    data = st.st_reranker_rows(rows_file, "bce")
    assert data.column_names == ["query", "passage", "label"]
    assert len(data) == 2 * (1 + st.RERANK_NEGATIVES)
    assert [(r["query"], r["passage"], r["label"]) for r in data][:4] == [
        ("q1", "p1", 1.0),
        ("q1", "a", 0.0),
        ("q1", "b", 0.0),
        ("q1", "c", 0.0),
    ]


class FixedScorer:
    """Relevance = the passage's position in a fixed preference list (first = best)."""

    def __init__(self, preferred):
        self.preferred = preferred

    def scores(self, pairs):
        return np.array([-self.preferred.index(p) for _, p in pairs], dtype=np.float64)


def test_rerank_scores_takes_any_scorer_and_reorders_the_top_k():
    split = {"pairs": [("q", "gold")], "corpus": ["x", "gold", "y"]}
    indices = np.array([[0, 2, 1]])  # the bi-encoder put the gold passage third
    relevant = [{1}]
    before = br.scores(indices, relevant)
    after = br.rerank_scores(FixedScorer(["gold", "x", "y"]), split, indices, relevant, k=3)
    assert before["recall@1"] == 0.0 and after["recall@1"] == 1.0
    # a depth of 2 leaves the gold passage where the bi-encoder put it
    assert br.rerank_scores(FixedScorer(["gold", "x", "y"]), split, indices, relevant, k=2)["recall@1"] == 0.0


def _run(ndcg, wall=None, k=None):
    row = {"recall@10": 0.5, "mrr@10": 0.4, "ndcg@10": ndcg}
    if wall is not None:
        row.update(train_wall_s=wall, rerank_top_k=k)
    return row


def test_rerank_tables_compare_with_the_bi_encoder_and_each_st_reranker():
    ours, mnrl, bce = list(st.RERANK_ROWS)
    results = {
        "en": {
            "hardneg, no reranker": [_run(0.50), _run(0.52)],
            ours: [_run(0.55, 100, 10), _run(0.55, 110, 30)],
            mnrl: [_run(0.54, 100, 10), _run(0.56, 100, 10)],
            bce: [_run(0.40, 50, 10), _run(0.42, 50, 10)],
        }
    }
    tables = st.rerank_tables(results)
    by_name = {r[1]: r for r in tables["rerank-st"]["rows"]}
    assert by_name[ours][5:] == ["105.0", "10, 30", 2]
    assert by_name["hardneg, no reranker"][5:] == ["-", "-", 2]
    targets = {r[1]: r for r in tables["rerank-st-targets"]["rows"]}
    gain = targets[f"{ours} - no reranker, nDCG@10 (points)"]
    assert gain[2:5] == ["+4.0", "1.4", "yes"]  # 55 - 51, spread max(0, 1.41)
    versus = targets[f"toolkit - {mnrl}, nDCG@10 (points)"]
    assert versus[2:5] == ["+0.0", "1.4", "yes"] and versus[6] == "1.05x"
    assert targets[f"toolkit - {bce}, nDCG@10 (points)"][2] == "+14.0"
    assert targets[f"{bce} - no reranker, nDCG@10 (points)"][4] == "no"


def test_one_seed_is_not_judged():
    ours = next(iter(st.RERANK_ROWS))
    results = {"en": {"hardneg, no reranker": [_run(0.50)], ours: [_run(0.55, 100, 10)]}}
    (gain,) = st.rerank_tables(results)["rerank-st-targets"]["rows"]
    assert gain[2:5] == ["+5.0", "- (1 seed)", "not judged"]


def test_a_run_without_the_toolkit_row_judges_each_reranker_alone(monkeypatch):
    ours, _, bce = list(st.RERANK_ROWS)
    monkeypatch.setattr(st, "RERANK_ROWS", {bce: "bce"})  # as --rows leaves it
    results = {"zh": {"hardneg, no reranker": [_run(0.50)], bce: [_run(0.45, 50, 10)]}}
    tables = st.rerank_tables(results)
    assert [r[1] for r in tables["rerank-st"]["rows"]] == ["hardneg, no reranker", bce]
    (gain,) = tables["rerank-st-targets"]["rows"]
    assert gain[1] == f"{bce} - no reranker, nDCG@10 (points)" and gain[2] == "-5.0"


def test_ranked_encodes_a_model_once_per_split_until_its_weights_change(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(br, "_RANKED", {})
    monkeypatch.setattr(br, "_rank", lambda model_dir, split, size, depth: calls.append(depth) or len(calls))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"one")
    split = {"corpus": ["p1", "p2"], "pairs": [("q1", "p1")]}
    size = {"max_length": 128}

    assert br.ranked(str(model), split, size) == br.ranked(str(model), split, size) == 1
    assert br.ranked(str(model), {**split, "corpus": ["p1", "p3"]}, size) == 2  # other texts
    (model / "model.safetensors").write_bytes(b"trained again")
    assert br.ranked(str(model), split, size) == 3
    assert calls == [100, 100, 100]


def test_a_toolkit_reranker_trained_before_is_reused_with_its_own_recorded_time(tmp_path, monkeypatch):
    trained = []
    monkeypatch.setattr(br, "train_reranker", lambda out, *a: trained.append(out) or out)
    fresh = st.toolkit_reranker_timing(tmp_path / "new", tmp_path / "rows.jsonl", {}, 42, [])
    assert trained == [tmp_path / "new"] and set(fresh) == {"train_wall_s"}

    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "encoder_tasks.json").write_text("{}")
    (earlier / "metrics.json").write_text(json.dumps({"train_runtime": 3055.9, "wall_seconds": 3056.18}))
    reused = st.toolkit_reranker_timing(earlier, tmp_path / "rows.jsonl", {}, 42, [])
    assert trained == [tmp_path / "new"]  # not trained again
    assert reused == {"train_wall_s": 3056.2, "train_time_from": "metrics.json of an earlier run"}

"""``benchmarks/bench_code.py``'s reranker row without training: re-ordering the bi-encoder's
head with a scorer, and the targets the tables judge."""

from __future__ import annotations

import json

import numpy as np

from benchmarks import bench_code as bc


class LengthScorer:
    """A stand-in cross-encoder: a passage's relevance is its length (brute-force checkable)."""

    def scores(self, pairs):
        return np.array([len(passage) for _, passage in pairs], dtype=np.float64)


SPLIT = {
    "queries": ["q0", "q1"],
    "corpus": ["a", "bbbb", "cc", "ddd", "e"],
    "relevant": [{1}, {3}],
}


def test_reranking_reorders_only_the_head_and_keeps_the_bi_encoders_tail():
    candidates = np.array([[0, 2, 1, 3, 4], [4, 0, 2, 3, 1]])
    # top 3 re-ordered by length: query 0 -> 1 (bbbb), 2, 0; query 1 -> 2 (cc), 4, 0; tails kept
    deep = bc.reranked_scores(LengthScorer(), SPLIT, candidates, 3)
    assert deep["recall@1"] == 0.5  # query 0's relevant row moves to first, query 1's stays 4th
    assert deep["mrr@10"] == (1 + 1 / 4) / 2
    # re-ordering all 5 puts both relevant rows first or second (bbbb, ddd are the longest)
    full = bc.reranked_scores(LengthScorer(), SPLIT, candidates, 5)
    assert full["mrr@10"] == (1 + 1 / 2) / 2


def test_the_targets_judge_the_reranker_pipeline_as_well_as_the_plain_fine_tune():
    rows = {
        "BM25 (code tokens)": [{"mrr@10": 0.60, "ndcg@10": 0.65}],
        "base MiniLM": [{"mrr@10": 0.70, "ndcg@10": 0.75}],
        "fine-tuned": [{"mrr@10": m, "ndcg@10": m} for m in (0.74, 0.75, 0.76)],
        "fine-tuned + mined hard negatives + listwise reranker": [
            {"mrr@10": m, "ndcg@10": m} for m in (0.80, 0.81, 0.82)
        ],
    }
    targets = {row[0]: row for row in bc.tables({"search": {"rows": rows}})["targets"]["rows"]}
    plain = targets["fine-tuned - base MiniLM, MRR@10 (points)"]
    assert plain[1:4] == ["+5.0", "1.0 (3 seeds)", "no"]
    reranked = targets["fine-tuned + mined hard negatives + listwise reranker - base MiniLM, MRR@10 (points)"]
    assert reranked[1:4] == ["+11.0", "1.0 (3 seeds)", "yes"]
    assert len(targets) == 4  # each against the base model and BM25


def test_the_search_table_lists_rows_in_a_fixed_order_whatever_finished_first():
    row = [{"mrr@10": 0.5, "ndcg@10": 0.5}]
    finished = {"fine-tuned + mined hard negatives": row, "base MiniLM": row, "BM25 (code tokens)": row}
    shown = [r[0] for r in bc.tables({"search": {"rows": finished}})["search"]["rows"]]
    assert shown == ["BM25 (code tokens)", "base MiniLM", "fine-tuned + mined hard negatives"]


def test_the_variants_table_marks_the_best_tuned_variant_on_validation():
    score = {"ndcg@10": 0.5, "recall@10": 0.5}
    results = {
        "variants": {
            "base MiniLM (not fine-tuned)": {"mrr@10": 0.9, **score},  # not a variant: never marked
            "setting": {"what": "1 epoch", "mrr@10": 0.60, "epochs": 1, **score},
            "epochs-3": {"what": "3 epochs", "mrr@10": 0.65, "epochs": 3, **score},
        }
    }
    rows = bc.tables(results)["variants"]["rows"]
    assert [(r[0], r[-1]) for r in rows] == [
        ("base MiniLM (not fine-tuned)", ""),
        ("setting", ""),
        ("epochs-3", "yes"),
    ]


def test_more_training_pairs_add_as_many_new_pairs_and_never_a_held_out_functions_code(tmp_path, monkeypatch):
    def lines(rows):
        return "".join(json.dumps(r) + "\n" for r in rows)

    base, more = tmp_path / "search-data", tmp_path / "search-data-more"
    base.mkdir()
    more.mkdir()
    (tmp_path / "sets").mkdir()
    (base / "functions-validation.jsonl").write_text(lines([{"code": "def f():\n    return 1"}]))
    (base / "functions-test.jsonl").write_text(lines([{"code": "def g(x):\n    return x"}]))
    train = tmp_path / "sets" / "train.jsonl"
    train.write_text(lines([{"query": "own", "positive": "def a():\n    return 0", "id": 0}]))
    (more / "search-train.jsonl").write_text(
        lines(
            [
                {"id": 1, "query": "one", "positive": "def f():  return 1"},  # a copy, spaced differently
                {"id": 2, "query": "kept", "positive": "def h():\n    return 2"},
                {"id": 3, "query": "ident", "positive": "def g(x):\n    return x"},
                {"id": 4, "query": "again", "positive": "def a():\n    return 0"},  # a training pair's code
            ]
        )
    )
    monkeypatch.setattr(bc, "extract_search", lambda work, more_train=None, name="search-data": work / name)
    kept = bc.read_jsonl(bc.more_training_pairs(tmp_path, base, train))
    assert kept == [
        {"query": "own", "positive": "def a():\n    return 0"},
        {"query": "kept", "positive": "def h():\n    return 2"},
    ]

    # As many new pairs as training pairs, sampled: never more.
    (more / "search-train.jsonl").write_text(
        lines([{"id": i, "query": f"q{i}", "positive": f"def h{i}():\n    return {i}"} for i in range(5)])
    )
    kept = bc.read_jsonl(bc.more_training_pairs(tmp_path, base, train))
    assert len(kept) == 2 and kept[0]["query"] == "own" and kept[1]["query"].startswith("q")

"""The datasets benchmarks derive from QA and NER files, and the per-head pooling table."""

from __future__ import annotations

import random

from benchmarks import bench_pooling
from benchmarks.derived_sets import DERIVED_SETS, carve, qnli_groups, read_tagged, sentences_with_offsets


def test_carving_keeps_every_group_in_one_split():
    groups = [[{"g": g, "i": i} for i in range(g % 3 + 1)] for g in range(50)]
    split = carve(groups, held_out=10)
    seen = {s: {r["g"] for r in rows} for s, rows in split.items()}
    assert not (
        seen["train"] & seen["validation"]
        or seen["train"] & seen["test"]
        or seen["validation"] & seen["test"]
    )
    assert sum(len(rows) for rows in split.values()) == sum(len(g) for g in groups)
    assert 10 <= len(split["validation"]) < 13 and 10 <= len(split["test"]) < 13
    assert carve(groups, held_out=10) == split  # seed 0: the same carve every time


def test_qnli_rows_pair_each_question_with_its_answer_sentence_and_another():
    context = "Paris is in France. The Seine runs through it! Berlin is in Germany."
    articles = [
        {
            "paragraphs": [
                {
                    "context": context,
                    "qas": [
                        {"question": "Which river? ", "answers": [{"text": "Seine", "answer_start": 24}]},
                        {"question": "Unanswerable?", "answers": [], "is_impossible": True},
                    ],
                },
                {
                    "context": "One sentence only.",
                    "qas": [{"question": "q", "answers": [{"answer_start": 0}]}],
                },
            ]
        }
    ]
    (group,) = qnli_groups(articles, random.Random(0))
    assert group[0] == {"sentence1": "Which river?", "sentence2": "The Seine runs through it!", "label": 1}
    assert group[1]["label"] == 0 and group[1]["sentence2"] in (
        "Paris is in France.",
        "Berlin is in Germany.",
    )
    assert [s for _, s in sentences_with_offsets(context)][2] == "Berlin is in Germany."


def test_tagged_files_lose_wikiann_language_prefixes(tmp_path):
    path = tmp_path / "train"
    path.write_text("en:John\tB-PER\nen:ran\tO\n\nen:Paris\tB-LOC\n", encoding="utf-8")
    assert list(read_tagged(path)) == [(["John", "ran"], ["B-PER", "O"]), (["Paris"], ["B-LOC"])]


def test_every_head_type_has_at_least_four_sets():
    heads = [s.head for s in DERIVED_SETS.values()]
    assert {h: heads.count(h) for h in set(heads)} == {
        "single_label": 4,
        "regression_pair": 4,
        "classification_pair": 4,
    }
    assert all("--problem_type" in s.flags for s in DERIVED_SETS.values() if s.head == "regression_pair")


def test_the_per_head_table_says_where_cls_holds():
    def row(dataset, pooling, mean, std, paired=None):
        return {
            "dataset": dataset,
            "metric": "spearman",
            "pooling": pooling,
            "mean": mean,
            "std": std,
            "minus_mean_pooling": paired,
            "paired_std": None if paired is None else 0.01,
        }

    rows = [
        row("stsb", "mean", 0.80, 0.01),
        row("stsb", "cls", 0.77, 0.01, -0.03),  # 3 points below, spread 1: does not hold
        row("stsb-news", "mean", 0.70, 0.02),
        row("stsb-news", "cls", 0.69, 0.02, -0.01),
    ]
    tables = bench_pooling.head_tables(rows, ["stsb", "stsb-news"])
    assert [r[-2:] for r in tables["pooling-by-head"]["rows"]] == [["no", "cls worse"], ["yes", "within"]]
    assert tables["pooling-by-head-summary"]["rows"] == [["regression pair", "1 of 2", "1 of 2"]]

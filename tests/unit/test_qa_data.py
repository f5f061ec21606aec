"""Reading SQuAD-style data in every published form, and the answer_start checks."""

import json

import datasets
import pytest

from encoder_tasks.errors import UserError
from encoder_tasks.tasks.qa.reading import check_answers, read_squad, split_by_article
from tests.helpers import write

V2 = {
    "version": "v2.0",
    "data": [
        {
            "title": "Paris",
            "paragraphs": [
                {
                    "context": "Paris is the capital of France.",
                    "qas": [
                        {
                            "id": "q1",
                            "question": "What is the capital of France?",
                            "answers": [
                                {"text": "Paris", "answer_start": 0},
                                {"text": "Paris", "answer_start": 0},
                                {"text": "capital", "answer_start": 13},
                            ],
                            "is_impossible": False,
                        },
                        {
                            "id": "q2",
                            "question": "What is the capital of Spain?",
                            "answers": [],
                            "plausible_answers": [{"text": "Paris", "answer_start": 0}],
                            "is_impossible": True,
                        },
                    ],
                }
            ],
        }
    ],
}


def test_nested_v2_json_is_flattened(tmp_path):
    ds = read_squad(write(tmp_path / "dev.json", json.dumps(V2)))
    assert ds["id"] == ["q1", "q2"] and ds["title"] == ["Paris", "Paris"]
    assert ds[0]["answers"] == {"text": ["Paris", "Paris", "capital"], "answer_start": [0, 0, 13]}
    assert ds[1]["answers"] == {"text": [], "answer_start": []}  # plausible answers are not gold
    assert ds["is_impossible"] == [False, True]


def test_folder_of_squad_files_reads_as_one(tmp_path):
    write(tmp_path / "d" / "a.json", json.dumps(V2))
    other = json.loads(json.dumps(V2))
    other["data"][0]["paragraphs"][0]["qas"] = other["data"][0]["paragraphs"][0]["qas"][:1]
    other["data"][0]["paragraphs"][0]["qas"][0]["id"] = "b1"
    write(tmp_path / "d" / "b.json", json.dumps(other))
    assert read_squad(tmp_path / "d")["id"] == ["q1", "q2", "b1"]


@pytest.mark.parametrize(
    "answers", [{"text": ["cd"], "answer_start": [3]}, [{"text": "cd", "answer_start": 3}]]
)
def test_flat_jsonl_with_either_answer_layout(tmp_path, answers):
    from encoder_tasks.tasks.qa.reading import normalize_answers

    row = {"id": "1", "question": "q?", "context": "ab cd", "answers": answers}
    ds = read_squad(write(tmp_path / "flat.jsonl", json.dumps(row) + "\n"))
    assert ds["_line"] == [1]
    assert normalize_answers(ds[0]["answers"], "x") == {"text": ["cd"], "answer_start": [3]}


def test_saved_dataset_folder(tmp_path):
    ds = datasets.Dataset.from_dict(
        {
            "id": ["1"],
            "question": ["q"],
            "context": ["ab"],
            "answers": [{"text": ["ab"], "answer_start": [0]}],
        }
    )
    ds.save_to_disk(str(tmp_path / "saved"))
    assert read_squad(tmp_path / "saved")["id"] == ["1"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["data"][0]["paragraphs"][0].pop("context"),
            r"article 0 \('Paris'\) paragraph 0: expected a 'context' string",
        ),
        (
            lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start="x"),
            r"question id q1: answer_start must be an integer",
        ),
        (lambda d: d["data"][0]["paragraphs"][0].update(qas=None), r"expected a 'qas' list"),
    ],
)
def test_structural_problems_name_the_place(tmp_path, mutate, message):
    data = json.loads(json.dumps(V2))
    mutate(data)
    with pytest.raises(UserError, match=message):
        read_squad(write(tmp_path / "bad.json", json.dumps(data)))


ANSWERS = [
    {"text": ["cat"], "answer_start": [4]},  # right
    {"text": ["cat"], "answer_start": [12]},  # off: "cat" is at 4 and 16; nearest is 16
    {"text": ["dog", "cat"], "answer_start": [0, 4]},  # first absent, second right
    {"text": ["dog"], "answer_start": [0]},  # absent: no usable span
    {"text": [], "answer_start": []},  # unanswerable
]
CONTEXTS = ["the cat and the cat"] * 5
IDS = ["ok", "moved", "second", "absent", "none"]


def test_check_answers_fix_reports_and_relocates(caplog):
    with caplog.at_level("WARNING", logger="encoder_tasks"):
        spans, report = check_answers(ANSWERS, CONTEXTS, IDS, "f.json", "fix")
    assert spans == [(4, 7), (16, 19), (4, 7), None, None]
    assert report.relocated == ["moved"] and report.absent == ["second", "absent"]
    assert report.unusable_questions == ["absent"] and report.answers == 5
    (out,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]  # reported once
    assert "f.json: 3 of 5 answers do not match the context at answer_start" in out
    assert "(ids moved)" in out and "(ids second, absent)" in out


def test_check_answers_skip_and_error():
    spans, _ = check_answers(ANSWERS, CONTEXTS, IDS, "f.json", "skip")
    assert spans == [(4, 7), None, (4, 7), None, None]
    with pytest.raises(UserError, match=r"3 of 5 answers do not match.*ids moved"):
        check_answers(ANSWERS, CONTEXTS, IDS, "f.json", "error")


def test_check_answers_shows_a_bounded_id_list():
    many = [{"text": ["zzz"], "answer_start": [0]}] * 25
    _, report = check_answers(many, ["abc"] * 25, [f"id{i}" for i in range(25)], "f", "fix")
    assert "(+15 more)" in report.summary()


def test_split_by_article_is_disjoint_and_repeatable():
    titles = [f"t{i % 10}" for i in range(100)]
    ds = datasets.Dataset.from_dict({"title": titles, "id": [str(i) for i in range(100)]})
    train, held = split_by_article(ds, 0.2, seed=7)
    assert len(set(held["title"])) == 2 and not set(train["title"]) & set(held["title"])
    assert len(train) + len(held) == 100
    assert split_by_article(ds, 0.2, seed=7)[1]["id"] == held["id"]
    with pytest.raises(UserError, match="between 0 and 1"):
        split_by_article(ds, 1.5)
    with pytest.raises(UserError, match="at least 2"):
        split_by_article(ds.select(range(1)), 0.5)

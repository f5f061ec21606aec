"""The real QA CLI, end to end, on tiny models and tiny SQuAD files written here."""

import copy
import json

import pytest

from encoder_tasks.cli import main
from tests.conftest import FAST_TRAINING, write

CONTEXTS = [
    "john smith lives in paris . the cat sat on the mat .",
    "acme inc works in new york city . the dog played with a red ball .",
]


def squad_json(v2: bool = False) -> dict:
    qas = [
        [
            ("who lives in paris ?", "john smith", False),
            ("where did the cat sit ?", "the mat", False),
            ("what did the dog do ?", None, True),
        ],
        [
            ("where does acme inc work ?", "new york city", False),
            ("what did the dog play with ?", "a red ball", False),
            ("who lives in london ?", None, True),
        ],
    ]
    articles = []
    for a, (context, questions) in enumerate(zip(CONTEXTS, qas)):
        items = []
        for q, (question, answer, impossible) in enumerate(questions):
            if impossible and not v2:
                continue
            answers = [] if impossible else [{"text": answer, "answer_start": context.index(answer)}]
            item = {"id": f"a{a}q{q}", "question": question, "answers": answers}
            if v2:
                item["is_impossible"] = impossible
            items.append(item)
        articles.append({"title": f"article {a}", "paragraphs": [{"context": context, "qas": items}]})
    return {"version": "v2.0" if v2 else "1.1", "data": articles}


FAST = [
    *FAST_TRAINING,
    "--per_device_eval_batch_size",
    "3",
    "--max_length",
    "24",
    "--doc_stride",
    "6",
]


def questions_in(data: dict) -> int:
    return sum(len(p["qas"]) for a in data["data"] for p in a["paragraphs"])


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "electra", "deberta-v2", "modernbert"])
def test_train_evaluate_predict(tiny_models, tmp_path, family, capsys):
    data = squad_json()
    train = write(tmp_path / "train.json", json.dumps(data))
    out = tmp_path / "run"
    args = ["qa", "train", "--model_name_or_path", tiny_models[family], "--train_file", str(train)]
    assert main([*args, "--validation_file", str(train), "--output_dir", str(out), *FAST]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    # every question scored once, though short windows give several rows per question
    assert metrics["eval_total"] == questions_in(data) and metrics["eval_missing"] == 0
    assert 0.0 <= metrics["eval_exact"] <= metrics["eval_f1"] <= 100.0
    meta = json.loads((out / "encoder_tasks.json").read_text())
    assert meta["task"] == "qa" and meta["version_2_with_negative"] is False

    assert (
        main(
            [
                "qa",
                "evaluate",
                "--model_name_or_path",
                str(out),
                "--validation_file",
                str(train),
                "--max_length",
                "24",
            ]
        )
        == 0
    )
    # evaluate reuses the model's doc_stride (6): the default 128 would not fit max_length 24
    again = json.loads((out / "eval" / "train.json").read_text())
    assert again["eval_f1"] == pytest.approx(metrics["eval_f1"])

    # a flattened JSON Lines file to predict on
    rows = [{"id": "x", "question": "who lives in paris ?", "context": CONTEXTS[0]}]
    inputs = write(tmp_path / "in.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    preds = tmp_path / "preds.jsonl"
    assert (
        main(
            [
                "qa",
                "predict",
                "--model_dir",
                str(out),
                "--input_file",
                str(inputs),
                "--output_file",
                str(preds),
                "--top_k",
                "3",
            ]
        )
        == 0
    )
    (row,) = [json.loads(line) for line in preds.read_text().splitlines()]
    assert row["id"] == "x" and row["line"] == 1
    assert CONTEXTS[0][row["start"] : row["end"]] == row["answer"]
    assert len(row["candidates"]) == 3


def test_v2_train_by_article_split_and_single_question(tiny_bert, tmp_path, capsys):
    data = squad_json(v2=True)
    data["data"] = [copy.deepcopy(a) for a in data["data"] * 3]  # six articles, unique titles below
    for i, article in enumerate(data["data"]):
        article["title"] = f"article {i}"
    train = write(tmp_path / "dev-v2.json", json.dumps(data))
    out = tmp_path / "run"
    assert (
        main(
            [
                "qa",
                "train",
                "--model_name_or_path",
                tiny_bert,
                "--train_file",
                str(train),
                "--eval_split_by_article",
                "0.3",
                "--output_dir",
                str(out),
                *FAST,
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "12 questions to train on, 6 from 2 held-out articles" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert (
        metrics["eval_total"] == 6 and metrics["eval_HasAns_total"] == 4 and metrics["eval_NoAns_total"] == 2
    )
    for key in ("eval_best_f1", "eval_best_f1_thresh", "eval_best_exact", "eval_NoAns_exact"):
        assert key in metrics
    meta = json.loads((out / "encoder_tasks.json").read_text())
    assert meta["version_2_with_negative"] is True
    assert meta["null_threshold"] == pytest.approx(metrics["eval_best_f1_thresh"])  # tuned, stored

    # evaluate picks the same held-out articles
    assert (
        main(
            [
                "qa",
                "evaluate",
                "--model_name_or_path",
                str(out),
                "--validation_file",
                str(train),
                "--eval_split_by_article",
                "0.3",
                "--max_length",
                "24",
                "--doc_stride",
                "6",
            ]
        )
        == 0
    )
    assert json.loads((out / "eval" / "dev-v2.json").read_text())["eval_total"] == 6

    capsys.readouterr()
    assert (
        main(
            [
                "qa",
                "predict",
                "--model_dir",
                str(out),
                "--question",
                "who lives in paris ?",
                "--context",
                CONTEXTS[0],
                "--null_threshold",
                "1e9",
            ]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["no_answer"] is False and CONTEXTS[0][record["start"] : record["end"]] == record["answer"]
    assert (
        main(
            [
                "qa",
                "predict",
                "--model_dir",
                str(out),
                "--question",
                "who ?",
                "--context",
                CONTEXTS[0],
                "--null_threshold=-1e9",
            ]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["no_answer"] is True and record["answer"] == "no answer" and record["start"] is None


def test_answer_check_error_names_ids(tiny_bert, tmp_path, capsys):
    data = squad_json()
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 3  # "john smith" is at 0
    data["data"][1]["paragraphs"][0]["qas"][0]["answers"][0]["text"] = "boston"  # not in the context
    train = write(tmp_path / "train.json", json.dumps(data))
    args = ["qa", "train", "--model_name_or_path", tiny_bert, "--train_file", str(train), *FAST]
    assert main([*args, "--output_dir", str(tmp_path / "a"), "--answer_check", "error"]) == 2
    err = capsys.readouterr().err
    assert "2 of 4 answers do not match the context at answer_start" in err
    assert "a0q0" in err and "a1q0" in err
    # default: fixed where possible, reported, and training goes on
    assert main([*args, "--output_dir", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "1 found elsewhere in the context and moved to the nearest occurrence (ids a0q0)" in out
    assert "1 whose text is not in the context" in out and "a1q0" in out
    assert "training on 3 of 4 questions" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--doc_stride", "30"], "must exceed doc_stride=30"),
        (["--answer_check", "maybe"], "--answer_check must be one of fix, skip, error"),
        (["--answers_column", "gold"], "no answers column 'gold'"),
    ],
)
def test_bad_settings_are_user_errors(tiny_bert, tmp_path, argv, message, capsys):
    train = write(tmp_path / "train.json", json.dumps(squad_json()))
    args = [
        "qa",
        "train",
        "--model_name_or_path",
        tiny_bert,
        "--train_file",
        str(train),
        "--output_dir",
        str(tmp_path / "o"),
        *FAST,
    ]
    assert main([*args, *argv]) == 2
    assert message in capsys.readouterr().err

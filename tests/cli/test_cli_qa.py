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
    assert meta["task"] == "qa" and meta["settings"]["version_2_with_negative"] is False

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
    settings = json.loads((out / "encoder_tasks.json").read_text())["settings"]
    assert settings["version_2_with_negative"] is True
    assert settings["null_threshold"] == pytest.approx(metrics["eval_best_f1_thresh"])  # tuned, stored

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
    # default: fixed where possible, reported (a warning, on stderr), and training goes on
    assert main([*args, "--output_dir", str(tmp_path / "b")]) == 0
    out, err = capsys.readouterr()
    assert "1 found elsewhere in the context and moved to the nearest occurrence (ids a0q0)" in err
    assert "1 whose text is not in the context" in err and "a1q0" in err
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


# ---- predict: precision, batch size, output files (no training needed) ----------------------
@pytest.fixture
def saved_qa(tiny_bert, tmp_path):
    """An untrained QA model saved as a run saves it, with short windows (max_length 24, stride 6)."""
    import torch

    from encoder_tasks.backbone import load_encoder, load_tokenizer
    from encoder_tasks.tasks.qa import QASettings, QATask

    torch.manual_seed(0)
    model = QATask().build_model(load_encoder(tiny_bert), QASettings(max_length=24, doc_stride=6))
    model.save_pretrained(tmp_path / "model")
    load_tokenizer(tiny_bert).save_pretrained(str(tmp_path / "model"))
    return tmp_path / "model"


@pytest.fixture
def forward_spy(monkeypatch):
    """Records, for every encoder call, the batch size and whether bf16 autocast was on."""
    import torch

    from encoder_tasks.heads import EncoderWithHead

    calls = []
    encode = EncoderWithHead.encode

    def spy(self, input_ids=None, *args, **kwargs):
        device = self.device.type
        bf16 = torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == torch.bfloat16
        calls.append({"rows": len(input_ids), "bf16": bf16})
        return encode(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(EncoderWithHead, "encode", spy)
    return calls


def predict_rows(model_dir, tmp_path, name, *flags):
    rows = [
        {"id": str(i), "question": "who lives in paris ?", "context": c * 3} for i, c in enumerate(CONTEXTS)
    ]
    inputs = write(tmp_path / "in.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    output = tmp_path / name
    argv = ["qa", "predict", "--model_dir", str(model_dir), "--input_file", str(inputs)]
    assert main([*argv, "--output_file", str(output), "--top_k", "3", *flags]) == 0
    return [json.loads(line) for line in output.read_text().splitlines()]


def test_predict_runs_under_the_precision_asked_for(saved_qa, tmp_path, forward_spy):
    # The old predict ignored --precision: every forward ran in fp32 and the scores were the same.
    bf16 = predict_rows(saved_qa, tmp_path, "bf16.jsonl", "--precision", "bf16")
    assert forward_spy and all(call["bf16"] for call in forward_spy)
    forward_spy.clear()
    fp32 = predict_rows(saved_qa, tmp_path, "fp32.jsonl", "--precision", "fp32")
    assert forward_spy and not any(call["bf16"] for call in forward_spy)
    scores = [[c["score"] for c in row["candidates"]] for row in (*bf16, *fp32)]
    assert scores[: len(bf16)] != scores[len(bf16) :]  # the encoder really ran in bf16


def test_predict_honours_batch_size_and_the_saved_windows(saved_qa, tmp_path, forward_spy):
    # No --max_length/--doc_stride: the saved 24/6 are used (the default stride 128 cannot fit).
    rows = predict_rows(saved_qa, tmp_path, "b2.jsonl", "--batch_size", "2", "--precision", "fp32")
    windows = sum(row.get("windows", 1) for row in rows)
    assert windows > len(rows)  # long contexts: several windows per question
    assert [call["rows"] for call in forward_spy] == [2] * (windows // 2) + [1] * (windows % 2)
    forward_spy.clear()
    assert predict_rows(saved_qa, tmp_path, "b64.jsonl", "--batch_size", "64", "--precision", "fp32") == rows
    assert [call["rows"] for call in forward_spy] == [windows]


def test_single_question_never_overwrites_an_output_file(saved_qa, tmp_path, capsys):
    # The old predict wrote one --question's answer over an existing --output_file silently.
    target = write(tmp_path / "answers.jsonl", "keep me\n")
    argv = ["qa", "predict", "--model_dir", str(saved_qa), "--question", "who lives in paris ?"]
    argv += ["--context", CONTEXTS[0], "--output_file", str(target)]
    assert main(argv) == 2
    assert "already exists; choose another or pass --overwrite_output" in capsys.readouterr().err
    assert target.read_text() == "keep me\n"
    assert main([*argv, "--overwrite_output"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (written,) = [json.loads(line) for line in target.read_text().splitlines()]
    assert written == printed and written["question"] == "who lives in paris ?"

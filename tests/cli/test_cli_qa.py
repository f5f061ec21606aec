"""The real QA CLI, end to end, on tiny models and tiny SQuAD files written here."""

import copy
import json

import pytest

from encoder_tasks.cli import main
from tests.helpers import (
    FAST_QA,
    evaluate_argv,
    read_json,
    read_jsonl,
    run_predict,
    run_train,
    train_argv,
    write,
)
from tests.samples import CONTEXTS, questions_in, squad_json


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "electra", "deberta-v2", "modernbert"])
def test_train_evaluate_predict(tiny_models, tmp_path, family, capsys):
    data = squad_json()
    train = write(tmp_path / "train.json", json.dumps(data))
    out = tmp_path / "run"
    metrics = run_train("qa", tiny_models[family], train, out, *FAST_QA, validation=train)
    # every question scored once, though short windows give several rows per question
    assert metrics["eval_total"] == questions_in(data) and metrics["eval_missing"] == 0
    # the same questions through `qa predict`, scored by the official v1.1 rules, score the same
    from encoder_tasks.tasks.qa.evaluation import squad_v1_scores

    asked = [(p["context"], q) for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]
    flat = "".join(
        json.dumps({"id": q["id"], "question": q["question"], "context": c}) + "\n" for c, q in asked
    )
    flags = ["--max_length", "24", "--doc_stride", "6", "--precision", "fp32"]
    predicted = run_predict("qa", out, write(tmp_path / "q.jsonl", flat), tmp_path / "a.jsonl", *flags)
    golds = {q["id"]: [g["text"] for g in q["answers"]] for _, q in asked}
    scores = squad_v1_scores(golds, {r["id"]: r["answer"] for r in predicted})
    assert (metrics["eval_exact"], metrics["eval_f1"]) == pytest.approx((scores["exact"], scores["f1"]))
    # The answers' probabilities are judged against exact match: the Brier score again from predict.
    brier = [(r["probability"] - (squad_v1_scores({"q": golds[r["id"]]}, {"q": r["answer"]})["exact"] / 100)) ** 2
             for r in predicted]  # fmt: skip
    assert metrics["eval_answer_brier"] == pytest.approx(sum(brier) / len(brier), abs=1e-5)
    assert 0.0 <= metrics["eval_answer_ece"] <= 1.0 and metrics["eval_answer_calibration_examples"] == len(
        asked
    )
    meta = read_json(out / "encoder_tasks.json")
    assert meta["task"] == "qa" and meta["settings"]["version_2_with_negative"] is False

    assert main(evaluate_argv("qa", out, train, "--max_length", "24")) == 0
    # evaluate reuses the model's doc_stride (6): the default 128 would not fit max_length 24
    again = read_json(out / "eval" / "train.json")
    assert again["eval_f1"] == pytest.approx(metrics["eval_f1"])

    # a flattened JSON Lines file to predict on
    rows = [{"id": "x", "question": "who lives in paris ?", "context": CONTEXTS[0]}]
    inputs = write(tmp_path / "in.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    (row,) = run_predict("qa", out, inputs, tmp_path / "preds.jsonl", "--top_k", "3")
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
    metrics = run_train("qa", tiny_bert, train, out, "--eval_split_by_article", "0.3", *FAST_QA)
    printed = capsys.readouterr().out
    assert "12 questions kept, 6 from 2 held-out articles" in printed
    assert (
        metrics["eval_total"] == 6 and metrics["eval_HasAns_total"] == 4 and metrics["eval_NoAns_total"] == 2
    )
    for key in ("eval_best_f1", "eval_best_f1_thresh", "eval_best_exact", "eval_NoAns_exact"):
        assert key in metrics
    settings = read_json(out / "encoder_tasks.json")["settings"]
    assert settings["version_2_with_negative"] is True
    assert settings["null_threshold"] == pytest.approx(metrics["eval_best_f1_thresh"])  # tuned, stored

    # evaluate picks the same held-out articles
    evaluate = evaluate_argv("qa", out, train, "--eval_split_by_article", "0.3")
    assert main([*evaluate, "--max_length", "24", "--doc_stride", "6"]) == 0
    assert read_json(out / "eval" / "dev-v2.json")["eval_total"] == 6

    capsys.readouterr()
    single = ["qa", "predict", "--model_dir", str(out), "--context", CONTEXTS[0]]
    assert main([*single, "--question", "who lives in paris ?", "--null_threshold", "1e9"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["no_answer"] is False and CONTEXTS[0][record["start"] : record["end"]] == record["answer"]
    assert main([*single, "--question", "who ?", "--null_threshold=-1e9"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["no_answer"] is True and record["answer"] == "no answer" and record["start"] is None


def test_answer_check_error_names_ids(tiny_bert, tmp_path, capsys):
    data = squad_json()
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 3  # "john smith" is at 0
    data["data"][1]["paragraphs"][0]["qas"][0]["answers"][0]["text"] = "boston"  # not in the context
    train = write(tmp_path / "train.json", json.dumps(data))
    assert main(train_argv("qa", tiny_bert, train, tmp_path / "a", *FAST_QA, "--answer_check", "error")) == 2
    err = capsys.readouterr().err
    assert "2 of 4 answers do not match the context at answer_start" in err
    assert "a0q0" in err and "a1q0" in err
    # default: fixed where possible, reported (a warning, on stderr), and training goes on
    assert main(train_argv("qa", tiny_bert, train, tmp_path / "b", *FAST_QA)) == 0
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
    assert main(train_argv("qa", tiny_bert, train, tmp_path / "o", *FAST_QA, *argv)) == 2
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
    return run_predict("qa", model_dir, inputs, tmp_path / name, "--top_k", "3", *flags)


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
    (written,) = read_jsonl(target)
    assert written == printed and written["question"] == "who lives in paris ?"

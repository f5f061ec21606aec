"""The real CLI, end to end, on tiny models and tiny files written here."""

import json

import pytest

from encoder_tasks.cli import main
from tests.helpers import (
    FAST_TRAINING,
    error_line,
    evaluate_argv,
    predict_argv,
    read_json,
    run_predict,
    run_train,
    train_argv,
    write,
)
from tests.samples import REVIEWS_CSV

FAST = list(FAST_TRAINING)


@pytest.fixture
def data(tmp_path):
    return write(tmp_path / "train.csv", REVIEWS_CSV), write(tmp_path / "dev.csv", REVIEWS_CSV)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "electra", "deberta-v2", "modernbert"])
def test_train_evaluate_predict(tiny_models, data, tmp_path, family, capsys):
    train, dev = data
    out = tmp_path / "run"
    metrics = run_train("classification", tiny_models[family], train, out, *FAST, validation=dev)
    assert metrics["train_real_tokens_per_second"] > 0
    import numpy as np

    # the final evaluation's logits and labels (neg=0, pos=1) give its accuracy again
    saved = np.load(out / "eval_predictions.npz")
    assert sorted(saved["label_ids"]) == [0] * 8 + [1] * 8
    accuracy = (saved["predictions"].argmax(-1) == saved["label_ids"]).mean()
    assert metrics["eval_accuracy"] == pytest.approx(accuracy)
    assert read_json(out / "encoder_tasks.json")["settings"]["label_names"] == ["neg", "pos"]

    assert main(evaluate_argv("classification", out, dev)) == 0
    first = read_json(out / "eval" / "dev.json")
    assert first["eval_accuracy"] == pytest.approx(metrics["eval_accuracy"])
    assert main(evaluate_argv("classification", out, dev)) == 0
    assert (out / "eval" / "dev-2.json").is_file()  # never overwritten

    rows = run_predict("classification", out, dev, tmp_path / "preds.jsonl")
    assert [r["line"] for r in rows] == list(range(2, 18))  # input order
    assert all(
        r["label"] in ("neg", "pos") and abs(sum(r["probabilities"].values()) - 1) < 1e-4 for r in rows
    )


def test_existing_run_is_never_overwritten(tiny_bert, data, tmp_path, capsys):
    train, _ = data
    out = tmp_path / "run"
    args = train_argv("classification", tiny_bert, train, out, *FAST)
    assert main(args) == 0
    before = (out / "model.safetensors").read_bytes()
    assert main(args) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (out / "model.safetensors").read_bytes() == before
    assert main([*args, "--overwrite_output_dir"]) == 0


def test_predict_windows_long_texts(tiny_bert, data, tmp_path, capsys):
    train, _ = data
    out = tmp_path / "run"
    run_train("classification", tiny_bert, train, out, "--max_length", "16", *FAST)
    long_text = " ".join(["the film was good and fun"] * 20)
    inputs = write(
        tmp_path / "in.jsonl", json.dumps({"text": long_text}) + "\n" + json.dumps({"text": "bad"}) + "\n"
    )
    preds = tmp_path / "p.jsonl"
    rows = run_predict("classification", out, inputs, preds, "--window_stride", "4")
    assert rows[0]["windows"] > 1 and "windows" not in rows[1]
    assert "1 long inputs windowed" in capsys.readouterr().out
    # predicting again into the same file is refused
    assert main(predict_argv("classification", out, inputs, preds)) == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nosuchtask", "train"], "unknown task 'nosuchtask'"),
        (["classification", "fly"], "expected an action"),
        (
            ["classification", "train", "--output_dir", "x", "--train_file", "missing.csv"],
            "missing.csv: no such file",
        ),
        (predict_argv("classification", "nowhere", "a", "b"), "nowhere"),
    ],
)
def test_cli_errors_are_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in error_line(capsys.readouterr().err, alone=True)


def test_unwritable_output_dir_found_before_training(tiny_bert, data, tmp_path, capsys):
    train, _ = data
    blocker = write(tmp_path / "file", "x")
    assert main(train_argv("classification", tiny_bert, train, blocker / "sub", *FAST)) == 2
    assert "cannot write there" in capsys.readouterr().err


def test_small_data_gets_batch_8_unless_the_user_chose(tiny_bert, data, tmp_path, capsys):
    train, dev = data
    flags = [
        "--num_train_epochs",
        "1",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
    ]
    assert (
        main(train_argv("classification", tiny_bert, train, tmp_path / "auto", *flags, validation=dev)) == 0
    )
    assert (
        "batch 8 (not 16): 16 training examples x 1 epochs give 1 optimiser steps" in capsys.readouterr().out
    )
    assert "| per_device_train_batch_size | 8 |" in (tmp_path / "auto" / "README.md").read_text()
    given = train_argv("classification", tiny_bert, train, tmp_path / "given", *flags, validation=dev)
    assert main([*given, "--per_device_train_batch_size", "16"]) == 0
    assert "batch 8" not in capsys.readouterr().out
    assert "| per_device_train_batch_size | 16 |" in (tmp_path / "given" / "README.md").read_text()


MULTI = (
    "text,label\n"
    + "the film was good and fun,good|fun\nthe movie was bad and boring,bad\nfun but bad,fun|bad\n" * 4
)


@pytest.mark.parametrize("tune", [None, "false"])
def test_tune_thresholds_flag_is_obeyed(tiny_bert, tmp_path, tune):
    data = write(tmp_path / "multi.csv", MULTI)
    out = tmp_path / "run"
    flags = ["--label_separator", "|", *FAST, *(["--tune_thresholds", tune] if tune else [])]
    metrics = run_train("classification", tiny_bert, data, out, *flags, validation=data)
    settings = read_json(out / "encoder_tasks.json")["settings"]
    assert settings["problem_type"] == "multi_label" and settings["label_names"] == ["bad", "fun", "good"]
    if tune is None:  # the default: tuned on the validation set, saved, reported
        assert settings["thresholds"] == list(metrics["tuned_thresholds"].values())
    else:
        assert settings["thresholds"] == [0.5, 0.5, 0.5]
        assert not [key for key in metrics if key.startswith("tuned_")]

"""The real CLI, end to end, on tiny models and tiny files written here."""

import json

import pytest

from encoder_tasks.cli import main
from tests.conftest import FAST_TRAINING, write

TRAIN = (
    "text,label\n"
    + "\n".join(
        [
            "the film was good and fun,pos",
            "the movie was bad and boring,neg",
            "I love this great movie,pos",
            "I hate this awful film,neg",
        ]
        * 4
    )
    + "\n"
)

FAST = list(FAST_TRAINING)


@pytest.fixture
def data(tmp_path):
    return write(tmp_path / "train.csv", TRAIN), write(tmp_path / "dev.csv", TRAIN)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "electra", "deberta-v2", "modernbert"])
def test_train_evaluate_predict(tiny_models, data, tmp_path, family, capsys):
    train, dev = data
    out = tmp_path / "run"
    assert (
        main(
            [
                "classification",
                "train",
                "--model_name_or_path",
                tiny_models[family],
                "--train_file",
                str(train),
                "--validation_file",
                str(dev),
                "--output_dir",
                str(out),
                *FAST,
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0 and metrics["train_real_tokens_per_second"] > 0
    assert json.loads((out / "encoder_tasks.json").read_text())["settings"]["label_names"] == ["neg", "pos"]

    assert (
        main(["classification", "evaluate", "--model_name_or_path", str(out), "--validation_file", str(dev)])
        == 0
    )
    first = json.loads((out / "eval" / "dev.json").read_text())
    assert first["eval_accuracy"] == pytest.approx(metrics["eval_accuracy"])
    assert (
        main(["classification", "evaluate", "--model_name_or_path", str(out), "--validation_file", str(dev)])
        == 0
    )
    assert (out / "eval" / "dev-2.json").is_file()  # never overwritten

    preds = tmp_path / "preds.jsonl"
    assert (
        main(
            [
                "classification",
                "predict",
                "--model_dir",
                str(out),
                "--input_file",
                str(dev),
                "--output_file",
                str(preds),
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    assert [r["line"] for r in rows] == list(range(2, 18))  # input order
    assert all(
        r["label"] in ("neg", "pos") and abs(sum(r["probabilities"].values()) - 1) < 1e-4 for r in rows
    )


def test_existing_run_is_never_overwritten(tiny_bert, data, tmp_path, capsys):
    train, _ = data
    out = tmp_path / "run"
    args = [
        "classification",
        "train",
        "--model_name_or_path",
        tiny_bert,
        "--train_file",
        str(train),
        "--output_dir",
        str(out),
        *FAST,
    ]
    assert main(args) == 0
    before = (out / "model.safetensors").read_bytes()
    assert main(args) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (out / "model.safetensors").read_bytes() == before
    assert main([*args, "--overwrite_output_dir"]) == 0


def test_predict_windows_long_texts(tiny_bert, data, tmp_path, capsys):
    train, _ = data
    out = tmp_path / "run"
    assert (
        main(
            [
                "classification",
                "train",
                "--model_name_or_path",
                tiny_bert,
                "--train_file",
                str(train),
                "--output_dir",
                str(out),
                "--max_length",
                "16",
                *FAST,
            ]
        )
        == 0
    )
    long_text = " ".join(["the film was good and fun"] * 20)
    inputs = write(
        tmp_path / "in.jsonl", json.dumps({"text": long_text}) + "\n" + json.dumps({"text": "bad"}) + "\n"
    )
    preds = tmp_path / "p.jsonl"
    assert (
        main(
            [
                "classification",
                "predict",
                "--model_dir",
                str(out),
                "--input_file",
                str(inputs),
                "--output_file",
                str(preds),
                "--window_stride",
                "4",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    assert rows[0]["windows"] > 1 and "windows" not in rows[1]
    assert "1 long inputs windowed" in capsys.readouterr().out
    # predicting again into the same file is refused
    assert (
        main(
            [
                "classification",
                "predict",
                "--model_dir",
                str(out),
                "--input_file",
                str(inputs),
                "--output_file",
                str(preds),
            ]
        )
        == 2
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nosuchtask", "train"], "unknown task 'nosuchtask'"),
        (["classification", "fly"], "expected an action"),
        (
            ["classification", "train", "--output_dir", "x", "--train_file", "missing.csv"],
            "missing.csv: no such file",
        ),
        (
            [
                "classification",
                "predict",
                "--model_dir",
                "nowhere",
                "--input_file",
                "a",
                "--output_file",
                "b",
            ],
            "nowhere",
        ),
    ],
)
def test_cli_errors_are_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_unwritable_output_dir_found_before_training(tiny_bert, data, tmp_path, capsys):
    train, _ = data
    blocker = write(tmp_path / "file", "x")
    assert (
        main(
            [
                "classification",
                "train",
                "--model_name_or_path",
                tiny_bert,
                "--train_file",
                str(train),
                "--output_dir",
                str(blocker / "sub"),
                *FAST,
            ]
        )
        == 2
    )
    assert "cannot write there" in capsys.readouterr().err


def test_small_data_gets_batch_8_unless_the_user_chose(tiny_bert, data, tmp_path, capsys):
    train, dev = data
    argv = ["classification", "train", "--model_name_or_path", tiny_bert, "--train_file", str(train)]
    argv += ["--validation_file", str(dev), "--num_train_epochs", "1", "--save_strategy", "no"]
    argv += ["--report_to", "none", "--disable_tqdm", "true"]
    assert main([*argv, "--output_dir", str(tmp_path / "auto")]) == 0
    assert (
        "batch 8 (not 16): 16 training examples x 1 epochs give 1 optimiser steps" in capsys.readouterr().out
    )
    assert "| per_device_train_batch_size | 8 |" in (tmp_path / "auto" / "README.md").read_text()
    assert main([*argv, "--output_dir", str(tmp_path / "given"), "--per_device_train_batch_size", "16"]) == 0
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
    argv = ["classification", "train", "--model_name_or_path", tiny_bert, "--train_file", str(data)]
    argv += ["--validation_file", str(data), "--label_separator", "|", "--output_dir", str(out), *FAST]
    assert main(argv + (["--tune_thresholds", tune] if tune else [])) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    settings = json.loads((out / "encoder_tasks.json").read_text())["settings"]
    assert settings["problem_type"] == "multi_label" and settings["label_names"] == ["bad", "fun", "good"]
    if tune is None:  # the default: tuned on the validation set, saved, reported
        assert settings["thresholds"] == list(metrics["tuned_thresholds"].values())
    else:
        assert settings["thresholds"] == [0.5, 0.5, 0.5]
        assert not [key for key in metrics if key.startswith("tuned_")]

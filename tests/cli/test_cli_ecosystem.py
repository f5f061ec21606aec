"""The ecosystem around a run, end to end through the real CLI on a tiny model: JSON-lines log,
model card, plots, multi-file evaluation, LoRA, hyperparameter search, export (the recipes
commands are in test_cli_recipes.py)."""

import json

import pytest
from safetensors.torch import load_file

from encoder_tasks.cli import main
from encoder_tasks.heads import EncoderWithHead
from tests.helpers import evaluate_argv, predict_argv, read_json, read_jsonl, train_argv, write
from tests.samples import REVIEWS, REVIEWS_CSV, conll, csv_rows, squad_json

FAST = ["--num_train_epochs", "2", "--per_device_train_batch_size", "4", "--logging_steps", "1"]
FAST += ["--report_to", "none", "--eval_strategy", "epoch", "--disable_tqdm", "true"]


@pytest.fixture
def data(tmp_path):
    return (
        write(tmp_path / "train.csv", REVIEWS_CSV),
        write(tmp_path / "dev.csv", REVIEWS_CSV),
        write(tmp_path / "other.csv", csv_rows(REVIEWS[:2])),
    )


def _train(model, data, out, *extra):
    train, dev, _ = data
    assert main(train_argv("classification", model, train, out, *FAST, *extra, validation=dev)) == 0


def test_run_leaves_log_card_plots_and_compares_datasets(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "run"
    _train(tiny_bert, data, out, "--save_strategy", "no")
    records = read_jsonl(out / "log.jsonl")
    assert (
        any("loss" in r for r in records) and sum("eval_accuracy" in r for r in records) == 3
    )  # 2 epochs + final
    assert all("step" in r and "epoch" in r for r in records)

    card = (out / "README.md").read_text()
    metrics = read_json(out / "metrics.json")
    assert f"base_model: {tiny_bert}" in card
    assert "| learning_rate | 5e-05 |" in card and "| num_train_epochs | 2.0 |" in card
    assert f"| eval_accuracy | {metrics['eval_accuracy']:.4g} |" in card
    assert "encoder-tasks classification train --model_name_or_path" not in card or "--output_dir" in card
    assert "train.csv" in card and "## Reproduce" in card

    pytest.importorskip("matplotlib")
    for name in ("learning_curves.png", "confusion_matrix.png", "score_distribution.png"):
        assert (out / name).stat().st_size > 1000
        (out / name).unlink()
    assert main(["plot", str(out)]) == 0  # redrawn from log.jsonl + eval_predictions.npz
    assert (out / "learning_curves.png").is_file() and (out / "confusion_matrix.png").is_file()

    _, dev, other = data
    capsys.readouterr()
    assert main([*evaluate_argv("classification", out, dev), str(other)]) == 0
    printed = capsys.readouterr().out
    assert "side by side" in printed and "dev.csv" in printed and "other.csv" in printed
    table = (out / "eval" / "comparison.md").read_text()
    assert table.startswith("| metric | dev.csv | other.csv |") and "eval_accuracy" in table
    assert read_json(out / "eval" / "other.json")["data"].endswith("other.csv")


def test_lora_run_reloads_from_checkpoint_and_final_model(tiny_bert, data, tmp_path):
    pytest.importorskip("peft")
    out = tmp_path / "lora"
    _train(tiny_bert, data, out, "--lora_r", "4", "--learning_rate", "1e-3", "--save_strategy", "epoch")
    final = load_file(str(out / "model.safetensors"))
    assert not any("lora_" in k or "base_layer" in k for k in final)  # merged: a plain model
    settings = read_json(out / "encoder_tasks.json")["settings"]
    assert settings["lora"] is None and settings["lora_merged"].startswith("r=4")
    checkpoint = sorted(out.glob("checkpoint-*"))[-1]
    assert any("lora_A" in k for k in load_file(str(checkpoint / "model.safetensors")))

    import torch

    from encoder_tasks.backbone import load_tokenizer

    # The last checkpoint (adapters apart) and the final model (merged) give the same logits.
    tokenizer = load_tokenizer(str(out))
    batch = tokenizer(["the film was good", "awful"], padding=True, return_tensors="pt")
    with torch.no_grad():
        a = EncoderWithHead.from_pretrained(checkpoint)(**batch).logits
        b = EncoderWithHead.from_pretrained(out)(**batch).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    _, dev, _ = data
    assert main(predict_argv("classification", out, dev, tmp_path / "p.jsonl")) == 0
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 16


def test_lora_bad_target_is_a_user_error(tiny_bert, data, tmp_path, capsys):
    pytest.importorskip("peft")
    train, dev, _ = data
    flags = ["--lora_r", "4", "--lora_target_modules", "nope", *FAST[:2]]
    assert main(train_argv("classification", tiny_bert, train, tmp_path / "x", *flags)) == 2
    assert "--lora_target_modules" in capsys.readouterr().err


def test_search_runs_trials_and_reports_the_best(tiny_bert, data, tmp_path, capsys):
    pytest.importorskip("optuna")
    train, dev, _ = data
    out = tmp_path / "search"
    flags = ["--n_trials", "3", "--search_learning_rate", "1e-4,1e-2", "--search_batch_size", "4,8"]
    flags += [*FAST[:2], "--report_to", "none"]
    assert (
        main(train_argv("classification", tiny_bert, train, out, *flags, validation=dev, action="search"))
        == 0
    )
    result = read_json(out / "search_results.json")
    assert result["metric"] == "eval_accuracy" and result["direction"] == "maximize"
    assert len(result["trials"]) == 3 and all(t["state"] == "COMPLETE" for t in result["trials"])
    values = [t["value"] for t in result["trials"]]
    assert result["best"]["value"] == max(values)
    assert {t["params"]["per_device_train_batch_size"] for t in result["trials"]} <= {4, 8}
    assert all(1e-4 <= t["params"]["learning_rate"] <= 1e-2 for t in result["trials"])
    assert "train with it: encoder-tasks classification train" in capsys.readouterr().out


def test_search_rejects_a_bad_range(tiny_bert, data, tmp_path, capsys):
    train, dev, _ = data
    flags = ["--search_learning_rate", "1e-2,1e-4"]
    assert (
        main(
            train_argv(
                "classification", tiny_bert, train, tmp_path / "s", *flags, validation=dev, action="search"
            )
        )
        == 2
    )
    assert "low <= high" in capsys.readouterr().err


def test_report_to_tensorboard_writes_events(tiny_bert, data, tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "tb"
    _train(tiny_bert, data, out, "--save_strategy", "no", "--report_to", "tensorboard")
    assert list((out / "runs").glob("*/events.out.tfevents.*"))


def test_lora_run_resumes_from_its_checkpoint(tiny_bert, data, tmp_path):
    pytest.importorskip("peft")
    out = tmp_path / "lora-resume"
    _train(tiny_bert, data, out, "--lora_r", "4", "--save_strategy", "epoch", "--num_train_epochs", "1")
    _train(
        tiny_bert,
        data,
        out,
        "--lora_r",
        "4",
        "--save_strategy",
        "epoch",
        "--num_train_epochs",
        "2",
        "--resume",
    )
    metrics = read_json(out / "metrics.json")
    assert metrics["train_resumed_from_step"] == 4 and metrics["epoch"] == 2
    assert not any("lora_" in k for k in load_file(str(out / "model.safetensors")))


@pytest.mark.parametrize("task", ["ner", "qa"])
def test_search_works_for_tasks_with_their_own_trainer(tiny_bert, tmp_path, task):
    """NER (CRF-aware metrics bound to the trainer) and QA (held-out articles, null threshold)."""
    pytest.importorskip("optuna")
    if task == "ner":
        data, flags = write(tmp_path / "train.conll", conll()), ["--crf", "true"]
    else:
        # The tiny encoder's 128 positions leave windows too short for the default doc_stride 128.
        data, flags = write(tmp_path / "train.json", json.dumps(squad_json())), ["--doc_stride", "32"]
    out = tmp_path / "search"
    flags += [
        "--n_trials",
        "2",
        "--num_train_epochs",
        "1",
        "--per_device_train_batch_size",
        "4",
        "--report_to",
        "none",
    ]
    assert main(train_argv(task, tiny_bert, data, out, *flags, validation=data, action="search")) == 0
    result = read_json(out / "search_results.json")
    assert [t["state"] for t in result["trials"]] == ["COMPLETE", "COMPLETE"]
    assert (
        result["metric"] == {"ner": "eval_f1_strict", "qa": "eval_f1"}[task]
        and result["direction"] == "maximize"
    )
    assert result["best"]["value"] == max(t["value"] for t in result["trials"])


def test_export_command_writes_a_checked_stock_model(tiny_bert, tmp_path, capsys):
    """``encoder-tasks export`` (flags as before the export package): stock layout, refusals."""
    from encoder_tasks.backbone import load_encoder, load_tokenizer
    from encoder_tasks.registry import TASKS

    task = TASKS["classification"]
    model = task.build_model(
        load_encoder(tiny_bert), task.Settings(label_names=["neg", "pos"], pooling="cls")
    )
    run = tmp_path / "run"
    model.save_pretrained(run)
    load_tokenizer(tiny_bert).save_pretrained(run)
    assert main(["export", str(run), str(tmp_path / "stock")]) == 0
    out = capsys.readouterr().out
    assert (
        f"exported classification model to {tmp_path / 'stock'} as transformers (checked: max |diff|" in out
    )
    assert read_json(tmp_path / "stock" / "config.json")["id2label"] == {
        "0": "neg",
        "1": "pos",
    }
    assert main(["export", str(run), str(tmp_path / "stock")]) == 2  # never over existing files
    assert "already holds files" in capsys.readouterr().err
    assert main(["export", str(run), str(tmp_path / "st"), "--format", "sentence-transformers"]) == 2
    assert "a classification model exports as one of auto, transformers, onnx" in capsys.readouterr().err
    assert main(["export", str(run), str(tmp_path / "x"), "--format", "tflite"]) == 2
    assert "invalid choice: 'tflite'" in capsys.readouterr().err

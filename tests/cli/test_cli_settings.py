"""A saved model is evaluated as it was trained, and search trains as train does."""

from __future__ import annotations

import pytest

from encoder_tasks.cli import main
from tests.helpers import FAST_TRAINING, evaluate_argv, read_json, read_jsonl, run_train, write

LONG = " ".join(["word"] * 30)


@pytest.fixture
def review_data(tmp_path):
    rows = [(f"{'great' if i % 2 else 'awful'} {LONG} {i}", i % 2) for i in range(24)]
    text = "review,label\n" + "\n".join(f"{t},{y}" for t, y in rows) + "\n"
    return write(tmp_path / "train.csv", text), write(tmp_path / "dev.csv", text)


def test_evaluate_uses_the_saved_max_length_and_columns(tiny_bert, review_data, tmp_path):
    """The model trained at max_length 8 on column `review` evaluates at 8 on `review` unless told."""
    train, dev = review_data
    run = tmp_path / "run"
    # Mean pooling: every token of a longer input moves the pooled vector, so length shows.
    flags = ["--text_column", "review", "--max_length", "8", "--pooling", "mean", *FAST_TRAINING]
    trained = run_train("classification", tiny_bert, train, run, *flags, validation=dev)

    assert main(evaluate_argv("classification", run, dev)) == 0
    evaluated = read_json(run / "eval" / "dev.json")
    # Same model, data and length: the same loss as the final evaluation of training.
    assert evaluated["eval_loss"] == pytest.approx(trained["eval_loss"], rel=1e-4)

    # A flag still wins: at 64 tokens the long texts are scored differently.
    assert main(evaluate_argv("classification", run, dev, "--max_length", "64")) == 0
    longer = read_json(run / "eval" / "dev-2.json")
    assert longer["eval_loss"] != pytest.approx(trained["eval_loss"], rel=1e-4)


def _first_logged_loss(run_dir):
    for record in read_jsonl(run_dir / "log.jsonl"):
        if "loss" in record:
            return record["loss"]
    raise AssertionError(f"no training loss in {run_dir / 'log.jsonl'}")


def test_a_search_trial_takes_the_same_first_step_as_train(tiny_bert, review_data, tmp_path):
    """One trainer-building path: no drift in batch size, model set-up or seeding."""
    train, dev = review_data
    common = ["--model_name_or_path", tiny_bert, "--train_file", str(train), "--validation_file", str(dev)]
    common += ["--text_column", "review", "--max_length", "16", "--num_train_epochs", "1"]
    common += ["--logging_steps", "1", "--report_to", "none", "--learning_rate", "5e-5"]
    # No batch size given: both choose it the same way (the automatic small-data batch).
    assert main(["classification", "train", *common, "--output_dir", str(tmp_path / "train")]) == 0
    search = ["classification", "search", *common, "--output_dir", str(tmp_path / "search")]
    assert main([*search, "--n_trials", "1", "--search_learning_rate", "5e-5,5e-5"]) == 0
    assert _first_logged_loss(tmp_path / "search") == pytest.approx(
        _first_logged_loss(tmp_path / "train"), rel=1e-6
    )

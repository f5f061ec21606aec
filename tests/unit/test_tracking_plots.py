"""Plots, model card and tracking helpers, on hand-made inputs (every task's shapes)."""

import json

import numpy as np
import pytest
from transformers import EvalPrediction

from encoder_tasks.reporting.model_card import render_model_card, reproduce_command
from encoder_tasks.reporting.plots import plot_predictions, plot_run
from encoder_tasks.reporting.tracking import PredictionRecorder, progress, read_log

PER_TYPE = {
    "LOC": {"precision": 0.5, "recall": 0.25, "f1": 0.333, "support": 4},
    "PER": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2},
}


def test_task_plots_from_predictions_and_metrics(tmp_path):
    pytest.importorskip("matplotlib")
    ner = plot_predictions(
        "ner", {"label_names": ["O", "B-LOC"]}, {"eval_per_type": PER_TYPE}, None, None, tmp_path
    )
    assert [p.name for p in ner] == ["per_type_f1.png"]

    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 50)
    pair = plot_predictions(
        "pair",
        {"problem_type": "regression", "label_names": ["score"]},
        {},
        gold[:, None] + 0.1,
        gold,
        tmp_path,
    )
    assert [p.name for p in pair] == ["score_distribution.png"]

    logits, labels = rng.normal(size=(40, 3)), rng.integers(0, 3, 40)
    cls = plot_predictions(
        "classification",
        {"problem_type": "single_label", "label_names": list("abc")},
        {},
        logits,
        labels,
        tmp_path,
    )
    assert [p.name for p in cls] == ["confusion_matrix.png"]

    # Ragged outputs (QA start/end logits of different lengths) are skipped, not a crash.
    ragged = (np.zeros((2, 5)), np.zeros((3, 7)))
    assert plot_predictions("qa", {}, {}, ragged, None, tmp_path) == []


def test_plot_run_from_trainer_state_when_no_log(tmp_path):
    pytest.importorskip("matplotlib")
    history = [{"step": s, "loss": 1.0 / s} for s in range(1, 6)] + [
        {"step": 5, "eval_loss": 0.3, "eval_f1": 0.7}
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    assert read_log(tmp_path) == history
    assert [p.name for p in plot_run(tmp_path)] == ["learning_curves.png"]


def test_recorder_keeps_last_predictions_and_saves_small_ones(tmp_path):
    recorder = PredictionRecorder(
        lambda p: {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}
    )
    out = recorder(EvalPrediction(predictions=np.eye(3), label_ids=np.array([0, 1, 0])))
    assert out == {"accuracy": pytest.approx(2 / 3)}
    assert recorder.save(tmp_path / "p.npz")
    assert np.load(tmp_path / "p.npz")["predictions"].shape == (3, 3)
    recorder = PredictionRecorder(lambda p: {})
    recorder(EvalPrediction(predictions=(np.zeros(2), np.zeros(3)), label_ids=np.zeros(2)))
    assert not recorder.save(tmp_path / "q.npz")  # tuples are not plain arrays


def test_model_card_names_everything_a_reader_needs():
    card = render_model_card(
        task="ner",
        metadata={"base_model": "bert-base-cased", "label_names": ["O", "B-PER", "I-PER"]},
        metrics={"eval_f1_strict": 0.91234, "eval_per_type": PER_TYPE},
        command="encoder-tasks ner train --config recipes/ner/default.yaml",
        data_args={"train_file": "ner/train.conll", "max_train_samples": 1000},
        training_args={"learning_rate": 5e-05, "seed": 42},
        task_args={"crf": True},
    )
    assert "base_model: bert-base-cased" in card and "| train_file | ner/train.conll |" in card
    assert "| learning_rate | 5e-05 |" in card and "| task: crf | True |" in card
    assert "| eval_f1_strict | 0.9123 |" in card and "| PER | 1 | 1 | 1 | 2 |" in card
    assert "encoder-tasks ner train --config recipes/ner/default.yaml" in card


def test_reproduce_command_names_the_cli():
    assert reproduce_command(["/x/.venv/bin/encoder-tasks", "ner", "train", "--config", "a b.yaml"]) == (
        "encoder-tasks ner train --config 'a b.yaml'"
    )


def test_progress_is_silent_off_a_terminal(capsys):
    assert list(progress(range(4), desc="x")) == [0, 1, 2, 3]
    assert capsys.readouterr().err == ""

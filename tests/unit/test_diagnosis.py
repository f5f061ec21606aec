""" "Learned nothing" detection: each task's own metrics, computed on degenerate predictions, are
read as such (one class, only O, a constant, every question abstained, one token), and ordinary
predictions are not; a run that learned nothing is told so after training and after evaluate."""

import logging

import numpy as np
import pytest

from encoder_tasks.cli import main
from encoder_tasks.diagnosis import learned_nothing, warn_if_learned_nothing
from encoder_tasks.metrics import classification_metrics, regression_metrics
from encoder_tasks.tasks.mlm.metrics import compute_metrics as mlm_metrics
from encoder_tasks.tasks.ner.metrics import entity_metrics, plain_tag_metrics
from tests.helpers import evaluate_argv, train_argv, write
from tests.samples import REVIEWS_CSV


def test_one_class_for_every_example():
    gold = [0, 1, 2, 1, 0, 2]
    found = learned_nothing(classification_metrics([1] * 6, gold, ["neg", "neutral", "pos"]))
    assert found == "the model predicts only 'neutral' for all 6 examples (the data has 3 classes)"
    assert (
        learned_nothing(classification_metrics([1, 1, 0, 1, 1, 1], gold, ["neg", "neutral", "pos"])) is None
    )
    # Data of one class: predicting it is right, not a failure.
    assert learned_nothing(classification_metrics([0, 0], [0, 0], ["neg", "pos"])) is None


def test_only_o_tags():
    gold = [["B-PER", "I-PER", "O"], ["O", "B-LOC"]]
    found = learned_nothing(entity_metrics(gold, [["O", "O", "O"], ["O", "O"]]))
    assert found == "the model predicts only 'O': no entity found, where the data has 2"
    assert learned_nothing(entity_metrics(gold, [["B-PER", "O", "O"], ["O", "O"]])) is None
    # Plain tags (POS): one tag for every token.
    tags = plain_tag_metrics([["NOUN", "VERB"]], [["NOUN", "NOUN"]], ["NOUN", "VERB"])
    assert (
        learned_nothing(tags) == "the model predicts only 'NOUN' for all 2 examples (the data has 2 classes)"
    )


def test_a_constant_regression():
    found = learned_nothing(regression_metrics([2.5] * 4, [0.0, 1.0, 4.0, 5.0]))
    assert found.startswith("the model predicts a constant: 2.5 for every example (spread 0")
    assert learned_nothing(regression_metrics([0.1, 1.2, 3.9, 4.8], [0.0, 1.0, 4.0, 5.0])) is None


def test_one_token_for_every_mask():
    labels = np.array([[-100, 4, 3, 7]])
    same = np.array([[[0, 0.0], [9, 1.0], [9, 1.0], [9, 1.0]]])
    assert learned_nothing(mlm_metrics(type("P", (), {"predictions": same, "label_ids": labels}))) == (
        "the model predicts the same token for all 3 masked tokens"
    )
    varied = np.array([[[0, 0.0], [4, 1.0], [9, 1.0], [7, 1.0]]])
    assert learned_nothing(mlm_metrics(type("P", (), {"predictions": varied, "label_ids": labels}))) is None


def test_every_question_abstained():
    assert learned_nothing({"eval_answered": 0, "eval_questions": 6}) == (
        "the model abstains on every question (6 questions, none answered)"
    )
    assert learned_nothing({"eval_answered": 2, "eval_questions": 6}) is None


def test_the_warning_names_the_run_and_what_to_try(caplog):
    metrics = {"eval_predicted_entities": 0, "eval_gold_entities": 40}
    with caplog.at_level(logging.WARNING, logger="encoder_tasks"):
        message = warn_if_learned_nothing(metrics, "ner: after training", steps=63, learning_rate=5e-5)
    assert message == caplog.records[-1].getMessage()
    assert message.startswith("ner: after training: the model predicts only 'O': no entity found")
    assert "too few optimiser steps (63)" in message and "--learning_rate 5e-05" in message


@pytest.mark.parametrize("action", ["train", "evaluate"])
def test_a_run_that_learned_nothing_is_told_so(tiny_bert, tmp_path, caplog, action):
    # A learning rate of 0.5, the head's too, sends the tiny model to one class within 4 steps
    # (seed 42).
    data = write(tmp_path / "train.csv", REVIEWS_CSV)
    flags = [
        "--num_train_epochs",
        "2",
        "--learning_rate",
        "0.5",
        "--head_learning_rate",
        "none",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
    ]
    with caplog.at_level(logging.WARNING, logger="encoder_tasks"):
        assert (
            main(train_argv("classification", tiny_bert, data, tmp_path / "run", *flags, validation=data))
            == 0
        )
        if action == "evaluate":
            caplog.clear()
            assert main(evaluate_argv("classification", tmp_path / "run", data)) == 0
    said = [r.getMessage() for r in caplog.records if "learned nothing" in r.getMessage()]
    assert len(said) == 1, said
    where = "after training" if action == "train" else "evaluation of"
    assert said[0].startswith(f"classification: {where}")
    assert "the model predicts only 'neg' for all 16 examples (the data has 2 classes)" in said[0]

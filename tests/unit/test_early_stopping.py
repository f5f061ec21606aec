"""``--early_stopping_patience``: evaluations at the interval asked for, the best evaluation's
weights kept, training stopped after the patience, validation held out when none is given."""

from __future__ import annotations

import pytest
import torch
from transformers import TrainerCallback

from encoder_tasks.backbone import load_encoder
from encoder_tasks.early_stopping import EarlyStopping
from encoder_tasks.errors import UserError
from encoder_tasks.tasks.classification.model import SequenceClassifier
from encoder_tasks.trainer import EncoderTaskTrainer
from tests.unit.test_schedule_options import _args, _dataset


class _WeightsAtEvaluation(TrainerCallback):
    """The classifier's weights at each evaluation (called before the rule's own callback sees
    it, since the trainer's callbacks run in the order added and this one is added first)."""

    def __init__(self):
        self.steps, self.weights = [], []

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        self.steps.append(state.global_step)
        self.weights.append(model.classifier.weight.detach().clone())


def _scripted(scores):
    """compute_metrics that reports ``scores`` in turn, whatever the model predicts."""
    calls = iter(scores)
    return lambda prediction: {"accuracy": next(calls)}


def test_the_best_evaluation_is_kept_and_training_stops_after_the_patience(tiny_bert, tmp_path):
    torch.manual_seed(0)
    model = SequenceClassifier(load_encoder(tiny_bert), num_labels=2)
    # 16 rows, batch 2: 8 steps an epoch, 4 evaluations an epoch (every 2 steps), 3 epochs.
    args = _args(tmp_path, num_train_epochs=3, per_device_train_batch_size=2, early_stopping_patience=2)
    seen = _WeightsAtEvaluation()
    trainer = EncoderTaskTrainer(
        model=model,
        args=args,
        train_dataset=_dataset(),
        eval_dataset=_dataset(4),
        compute_metrics=_scripted([0.5, 0.9, 0.6, 0.85, 0.95]),
        callbacks=[seen],
        objectives=("eval_accuracy",),
    )
    trainer.train()
    # The best (0.9, step 4), then two evaluations without a better one: stopped at step 8.
    assert seen.steps == [2, 4, 6, 8] and trainer.state.global_step == 8
    torch.testing.assert_close(model.classifier.weight, seen.weights[1])
    assert not torch.equal(model.classifier.weight, seen.weights[-1])
    assert trainer.early_stopping.summary() == {
        "train_best_step": 4,
        "train_best_eval_accuracy": 0.9,
        "train_stopped_early": True,
    }


def test_lower_is_better_for_a_loss_and_a_named_metric_must_exist():
    state, control = type("S", (), {"global_step": 0})(), type("C", (), {"should_training_stop": False})()
    stopping = EarlyStopping(patience=1)  # no objectives reported: the loss decides
    for step, loss in enumerate([0.9, 0.5, 0.7], start=1):
        state.global_step = step
        stopping.on_evaluate(None, state, control, {"eval_loss": loss})
    assert stopping.best_step == 2 and control.should_training_stop
    with pytest.raises(
        UserError, match=r"--metric_for_best_model 'f1': not among the evaluation metrics \['eval_loss'\]"
    ):
        EarlyStopping(patience=1, metric="f1").on_evaluate(None, state, control, {"eval_loss": 0.5})


def test_a_perplexity_or_an_error_is_also_lower_is_better():
    # MLM's objective is eval_perplexity: transformers' rule ("loss" only) would keep the worst.
    state, control = type("S", (), {"global_step": 0})(), type("C", (), {"should_training_stop": False})()
    stopping = EarlyStopping(patience=2, objectives=("eval_perplexity",))
    for step, perplexity in enumerate([30.0, 12.0, 15.0, 14.0], start=1):
        state.global_step = step
        stopping.on_evaluate(None, state, control, {"eval_perplexity": perplexity, "eval_loss": 1.0})
    assert (stopping.best_step, stopping.best) == (2, 12.0) and control.should_training_stop


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"early_stopping_patience": 0}, "at least 1 evaluation"),
        (
            {"early_stopping_patience": 2, "evaluations_per_epoch": 0},
            "--evaluations_per_epoch must be at least 1",
        ),
        ({"early_stopping_patience": 2, "holdout_fraction": 1.5}, r"--holdout_fraction must be in \(0, 1\)"),
        ({"early_stopping_patience": 2, "average_weights_from": 0.5}, "each choose the weights kept"),
    ],
)
def test_bad_early_stopping_flags_are_refused(flags, message, tmp_path):
    with pytest.raises(UserError, match=message):
        _args(tmp_path, **flags)


def test_a_cli_run_without_validation_holds_some_out_and_keeps_the_best(tiny_bert, tmp_path, caplog):
    """No --validation_file: 10% of the training rows are held out; the final evaluation (on the
    held-out rows) scores the kept weights, so it equals the best evaluation's score."""
    import logging

    from tests.helpers import FAST_TRAINING, read_jsonl, run_train, write
    from tests.samples import REVIEWS_CSV

    data = write(tmp_path / "train.csv", REVIEWS_CSV)
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO):
        metrics = run_train(
            "classification", tiny_bert, data, out, *FAST_TRAINING, "--num_train_epochs", "3",
            "--early_stopping_patience", "3", "--learning_rate", "1e-3",
        )  # fmt: skip
    assert "rows held out to evaluate on (--holdout_fraction 0.1)" in caplog.text
    evaluations = [r for r in read_jsonl(out / "log.jsonl") if "eval_accuracy" in r]
    assert len(evaluations) >= 4  # 4 an epoch, until the rule stopped it
    assert metrics["eval_accuracy"] == pytest.approx(metrics["train_best_eval_accuracy"])
    assert metrics["train_best_eval_accuracy"] == max(r["eval_accuracy"] for r in evaluations)


def test_qa_holds_out_whole_articles(tmp_path):
    import datasets

    from encoder_tasks.data import Split
    from encoder_tasks.registry import TASKS

    rows = {"title": [f"t{i // 3}" for i in range(30)], "context": ["c"] * 30, "question": ["q"] * 30}
    task = TASKS["qa"]
    kept, held = task.hold_out(
        Split("train", "squad.json", datasets.Dataset.from_dict(rows)), 0.2, task.Arguments()
    )
    assert not set(kept.dataset["title"]) & set(held.dataset["title"])
    assert len(set(held.dataset["title"])) == 2 and len(kept.dataset) + len(held.dataset) == 30


def test_qa_holds_out_passages_where_one_title_covers_the_file():
    import datasets

    from encoder_tasks.data import Split
    from encoder_tasks.registry import TASKS

    rows = {"title": ["one"] * 12, "context": [f"c{i // 2}" for i in range(12)], "question": ["q"] * 12}
    task = TASKS["qa"]
    kept, held = task.hold_out(
        Split("train", "squad.json", datasets.Dataset.from_dict(rows)), 0.3, task.Arguments()
    )
    assert not set(kept.dataset["context"]) & set(held.dataset["context"]) and len(held.dataset) == 4

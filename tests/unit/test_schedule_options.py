"""The training schedule options: --layer_lr_decay, --reinit_layers, --average_weights_from and
--time_budget (on the shared trainer, so every task has them)."""

from __future__ import annotations

import datasets
import pytest
import torch
from transformers import TrainerCallback

from encoder_tasks.backbone import load_encoder
from encoder_tasks.encoder_layers import parameter_depths, reinit_top_layers
from encoder_tasks.errors import UserError
from encoder_tasks.tasks.classification.model import SequenceClassifier
from encoder_tasks.tasks.ner.args import NerArguments
from encoder_tasks.tasks.ner.model import TokenTagger
from encoder_tasks.tasks.ner.trainer import NerTrainer
from encoder_tasks.testing import FAMILIES, make_tiny_model
from encoder_tasks.trainer import EncoderTaskTrainer
from encoder_tasks.training_args import EncoderTrainingArguments


def _args(tmp_path, **kwargs) -> EncoderTrainingArguments:
    kwargs = {"report_to": "none", "save_strategy": "no", "logging_steps": 1, **kwargs}
    return EncoderTrainingArguments(output_dir=str(tmp_path), **kwargs)


def _dataset(rows: int = 16) -> datasets.Dataset:
    generator = torch.Generator().manual_seed(0)
    ids = [[2, *torch.randint(5, 90, (4,), generator=generator).tolist(), 3] for _ in range(rows)]
    return datasets.Dataset.from_dict(
        {"input_ids": ids, "attention_mask": [[1] * 6] * rows, "labels": [i % 2 for i in range(rows)]}
    )


# ---- layer-wise learning-rate decay -------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_has_a_layer_stack_with_depths(family, tiny_models):
    encoder = load_encoder(tiny_models[family])
    depths = parameter_depths(encoder)
    layers = encoder.config.num_hidden_layers
    assert set(range(1, layers + 1)) <= set(depths.values())  # each layer has its depth
    embedding = next(n for n in depths if "embed" in n and n.endswith("weight"))
    assert depths[embedding] == layers + 1


def test_layer_decay_gives_each_layer_its_rate_and_the_head_the_base_rate(tiny_bert, tmp_path):
    model = SequenceClassifier(load_encoder(tiny_bert), num_labels=2)
    trainer = EncoderTaskTrainer(model=model, args=_args(tmp_path, learning_rate=1e-3, layer_lr_decay=0.5))
    optimizer = trainer.create_optimizer()
    rate = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    named = dict(model.named_parameters())
    assert rate[id(named["classifier.weight"])] == pytest.approx(1e-3)
    assert rate[id(named["encoder.encoder.layer.1.attention.self.query.weight"])] == pytest.approx(5e-4)
    assert rate[id(named["encoder.encoder.layer.0.attention.self.query.weight"])] == pytest.approx(2.5e-4)
    assert rate[id(named["encoder.embeddings.word_embeddings.weight"])] == pytest.approx(1.25e-4)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(named)
    # Without the option the stock Trainer's two groups, one rate.
    plain = EncoderTaskTrainer(model=model, args=_args(tmp_path, learning_rate=1e-3)).create_optimizer()
    assert len(plain.param_groups) == 2 and {g["lr"] for g in plain.param_groups} == {1e-3}


def test_ner_keeps_its_head_and_crf_rates_under_layer_decay(tiny_bert, tmp_path):
    model = TokenTagger(load_encoder(tiny_bert), ["O", "B-X", "I-X"], crf=True)
    args = _args(tmp_path, learning_rate=1e-4, layer_lr_decay=0.5)
    trainer = NerTrainer(model=model, args=args, task_args=NerArguments(head_learning_rate=1e-3))
    rate = {id(p): g for g in trainer.create_optimizer().param_groups for p in g["params"]}
    assert rate[id(model.classifier.weight)]["lr"] == pytest.approx(1e-3)
    assert rate[id(model.crf.transitions)]["weight_decay"] == 0.0
    top = model.encoder.encoder.layer[1].output.dense.weight
    assert rate[id(top)]["lr"] == pytest.approx(5e-5)


# ---- re-initialising the top layers -------------------------------------------------------------
def test_reinit_changes_only_the_top_layers(tmp_path):
    # A model saved with a large initializer range, so re-initialised weights are told apart.
    path = make_tiny_model("bert", str(tmp_path / "bert"))
    encoder = load_encoder(path)
    with torch.no_grad():
        for param in encoder.parameters():
            param.fill_(0.5)
    before = {n: p.clone() for n, p in encoder.named_parameters()}
    assert reinit_top_layers(encoder, 1) == [1]
    changed = {n for n, p in encoder.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(n.startswith("encoder.layer.1.") for n in changed)
    weight = encoder.encoder.layer[1].attention.self.query.weight
    assert weight.std().item() == pytest.approx(encoder.config.initializer_range, rel=0.3)
    with pytest.raises(UserError, match="only 2 layers"):
        reinit_top_layers(encoder, 3)


# ---- weight averaging ---------------------------------------------------------------------------
class _Snapshots(TrainerCallback):
    def __init__(self):
        self.weights = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.weights.append(model.classifier.weight.detach().clone())


def test_the_kept_weights_are_the_mean_over_the_last_part(tiny_bert, tmp_path):
    torch.manual_seed(0)
    model = SequenceClassifier(load_encoder(tiny_bert), num_labels=2)
    args = _args(tmp_path, num_train_epochs=2, per_device_train_batch_size=4, average_weights_from=0.5)
    trainer = EncoderTaskTrainer(model=model, args=args, train_dataset=_dataset())
    snapshots = _Snapshots()
    trainer.add_callback(snapshots)
    trainer.train()
    assert len(snapshots.weights) == 8
    expected = torch.stack(snapshots.weights[4:]).mean(0)  # steps 5-8: from half way on
    torch.testing.assert_close(model.classifier.weight, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(model.classifier.weight, snapshots.weights[-1])


# ---- the time budget ----------------------------------------------------------------------------
class _Clock:
    """perf_counter that moves one second per call: the budget callback reads it once a step."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


def test_a_time_budget_stops_on_time_with_a_schedule_that_ends_there(tiny_bert, tmp_path, monkeypatch):
    import encoder_tasks.time_budget as time_budget

    monkeypatch.setattr(time_budget, "time", _Clock())
    model = SequenceClassifier(load_encoder(tiny_bert), num_labels=2)
    args = _args(
        tmp_path, per_device_train_batch_size=4, time_budget="10s", warmup_steps=0.2, learning_rate=1e-3
    )
    trainer = EncoderTaskTrainer(model=model, args=args, train_dataset=_dataset())
    trainer.train()
    # 4 steps an epoch; the budget, not the epoch count, ended training, at its 10th second.
    assert trainer.state.global_step == 10 and trainer.state.epoch > 2
    rates = [entry["learning_rate"] for entry in trainer.state.log_history if "learning_rate" in entry]
    assert max(rates) == pytest.approx(1e-3, rel=0.01)  # warm-up over 2 s, then the peak
    assert rates[-1] <= 1.25e-4  # and down to nearly zero as the time runs out (9 s of 10 at the last step)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"time_budget": "ten minutes"}, "expected a duration such as 10m"),
        ({"time_budget": "10m", "max_steps": 5}, "use one"),
        ({"time_budget": "10m", "warmup_steps": 50}, "as a fraction of the time"),
        ({"layer_lr_decay": 1.5}, r"must be in \(0, 1\]"),
        ({"average_weights_from": 1.0}, r"in \[0, 1\)"),
        ({"reinit_layers": -1}, "0 or more layers"),
    ],
)
def test_bad_schedule_options_are_refused_before_training(flags, message, tmp_path):
    with pytest.raises(UserError, match=message):
        _args(tmp_path, **flags)


def test_the_options_reach_a_cli_run(tiny_bert, tmp_path):
    """Every option on one command line: the run trains, evaluates and saves as usual."""
    from tests.helpers import FAST_TRAINING, run_train, write
    from tests.samples import REVIEWS_CSV

    data = write(tmp_path / "train.csv", REVIEWS_CSV)
    flags = ["--layer_lr_decay", "0.8", "--reinit_layers", "1", "--average_weights_from", "0.5"]
    flags += ["--time_budget", "10m", "--num_train_epochs", "2"]  # the epochs cap the budget here
    metrics = run_train("classification", tiny_bert, data, tmp_path / "run", *FAST_TRAINING[2:], *flags,
                        validation=data)  # fmt: skip
    assert metrics["train_epoch"] == pytest.approx(2.0) and "eval_accuracy" in metrics


@pytest.mark.parametrize("task", ["classification", "qa"])
def test_a_fresh_head_can_have_its_own_rate(task, tiny_bert, tmp_path):
    from encoder_tasks.registry import TASKS

    spec = TASKS[task]
    task_args = spec.Arguments(head_learning_rate=1e-3)
    if task == "qa":
        from encoder_tasks.tasks.qa.model import ExtractiveQuestionAnswering

        model = ExtractiveQuestionAnswering(load_encoder(tiny_bert))
    else:
        model = SequenceClassifier(load_encoder(tiny_bert), num_labels=2)
    trainer = spec.trainer_class()(model=model, args=_args(tmp_path, learning_rate=5e-5), task_args=task_args)
    rate = {n: g["lr"] for g in trainer.create_optimizer().param_groups for n in [id(p) for p in g["params"]]}
    for name, param in model.named_parameters():
        assert rate[id(param)] == pytest.approx(5e-5 if name.startswith("encoder.") else 1e-3), name


def test_ner_trains_a_narrow_encoder_at_its_own_rate_unless_told(tiny_bert, tmp_path):
    """NER's narrow_learning_rate (1e-4 up to MiniLM's width; the tiny encoder is 32 wide)
    applies where no --learning_rate is given; a given one wins."""
    from encoder_tasks.training_args import width_scaled_rate
    from tests.helpers import FAST_TRAINING, read_jsonl, run_train, write
    from tests.samples import conll

    data = write(tmp_path / "train.conll", conll())

    def peak_rate(out, *flags):
        run_train("ner", tiny_bert, data, out, *FAST_TRAINING, "--num_train_epochs", "3", *flags)
        return max(r["learning_rate"] for r in read_jsonl(out / "log.jsonl") if "learning_rate" in r)

    # Linear decay after 10% warm-up, the same steps: the peaks logged differ as the rates do.
    assert peak_rate(tmp_path / "a") / peak_rate(tmp_path / "b", "--learning_rate", "5e-5") == pytest.approx(
        2.0
    )
    assert width_scaled_rate(1e-4, 768) == pytest.approx(5e-5) and width_scaled_rate(1e-4, 1024) < 5e-5

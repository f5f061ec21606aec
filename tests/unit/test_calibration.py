"""Calibration: ECE/Brier/NLL against brute force, temperature scaling (fit, save, predict,
reranker), ``--abstain_below`` and the reliability diagram of a run."""

import json

import numpy as np
import pytest
import torch

from encoder_tasks.errors import UserError
from encoder_tasks.metrics import (
    binary_calibration_metrics,
    calibration_metrics,
    expected_calibration_error,
    fit_temperature,
    reliability_bins,
    softmax,
)
from encoder_tasks.tasks.classification import ClassificationTask
from encoder_tasks.tasks.classification.args import ClassificationArguments, ClassificationPredictArguments
from encoder_tasks.tasks.classification.metrics import ClassificationMetrics
from encoder_tasks.tasks.classification.predict import describe_prediction
from tests.helpers import read_json, run_predict, run_train, write

TASK = ClassificationTask()


# ---- the figures against loops written out by hand -------------------------------------------
def brute_ece(confidence, outcome, bins=15):
    total, n = 0.0, len(confidence)
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        members = [i for i, c in enumerate(confidence) if (lo < c <= hi) or (b == 0 and c == 0.0)]
        if members:
            acc = sum(outcome[i] for i in members) / len(members)
            conf = sum(confidence[i] for i in members) / len(members)
            total += len(members) / n * abs(acc - conf)
    return total


@pytest.mark.parametrize("seed", range(3))
def test_multiclass_figures_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(60, 4)) * 3
    refs = rng.integers(0, 4, 60)
    probs = softmax(logits)
    m = calibration_metrics(probs, refs)
    top = [int(np.argmax(p)) for p in probs]
    conf = [float(p[t]) for p, t in zip(probs, top)]
    hit = [float(t == r) for t, r in zip(top, refs)]
    brier = np.mean([sum((p[k] - (k == r)) ** 2 for k in range(4)) for p, r in zip(probs, refs)])
    nll = np.mean([-np.log(p[r]) for p, r in zip(probs, refs)])
    assert m["ece"] == pytest.approx(brute_ece(conf, hit), abs=1e-12)
    assert m["brier"] == pytest.approx(brier, abs=1e-12)
    assert m["nll"] == pytest.approx(nll, abs=1e-12)
    assert sum(m["reliability"]["count"]) == 60 == m["calibration_examples"]
    # the diagram's bins weigh up to the ECE
    table = m["reliability"]
    gap = sum(
        n / 60 * abs(a - c) for n, a, c in zip(table["count"], table["accuracy"], table["confidence"]) if n
    )
    assert gap == pytest.approx(m["ece"], abs=1e-12)


def test_binary_figures_match_brute_force():
    rng = np.random.default_rng(7)
    p = rng.uniform(size=80)
    y = (rng.uniform(size=80) < p**2).astype(int)
    m = binary_calibration_metrics(p, y)
    assert m["ece"] == pytest.approx(brute_ece(list(p), list(y)), abs=1e-12)
    assert m["brier"] == pytest.approx(np.mean([(a - b) ** 2 for a, b in zip(p, y)]), abs=1e-12)
    nll = np.mean([-(b * np.log(a) + (1 - b) * np.log(1 - a)) for a, b in zip(p, y)])
    assert m["nll"] == pytest.approx(nll, abs=1e-12)


def test_bin_edges_and_empty_inputs():
    # 1/15 is the first bin's upper edge (included); 0 falls in the first bin; 1 in the last.
    table = reliability_bins([0.0, 1 / 15, 1 / 15 + 1e-9, 1.0], [1, 1, 0, 1])
    assert table["count"][:2] == [2, 1] and table["count"][-1] == 1 and sum(table["count"]) == 4
    assert table["confidence"][5] is None and table["accuracy"][1] == 0.0
    assert expected_calibration_error([], []) == 0.0
    assert calibration_metrics(np.zeros((0, 2)), [])["calibration_examples"] == 0
    # a reference the model has no class for is left out (it has no probability)
    m = calibration_metrics(np.array([[0.9, 0.1], [0.5, 0.5]]), [0, 5])
    assert m["calibration_examples"] == 1 and m["nll"] == pytest.approx(-np.log(0.9))


# ---- temperature scaling --------------------------------------------------------------------
def overconfident(n=600, classes=3, seed=0):
    """Logits that are right ~70% of the time but put ~99% on their top class."""
    rng = np.random.default_rng(seed)
    refs = rng.integers(0, classes, n)
    guess = np.where(rng.uniform(size=n) < 0.7, refs, rng.integers(0, classes, n))
    logits = rng.normal(size=(n, classes)) * 0.5
    logits[np.arange(n), guess] += 6.0
    return logits, refs


def mean_nll(logits, refs, t):
    return float(np.mean(-np.log(softmax(logits, t)[np.arange(len(refs)), refs])))


def test_fitted_temperature_lowers_nll_and_ece_on_an_overconfident_set():
    logits, refs = overconfident()
    t = fit_temperature(logits, refs)
    assert t > 1.5  # overconfident: the logits are softened
    # the minimum: no temperature on a fine grid does better
    grid = np.exp(np.linspace(np.log(0.05), np.log(20), 2000))
    assert mean_nll(logits, refs, t) <= min(mean_nll(logits, refs, g) for g in grid) + 1e-6
    assert mean_nll(logits, refs, t) < mean_nll(logits, refs, 1.0) - 0.2
    before, after = calibration_metrics(softmax(logits), refs), calibration_metrics(softmax(logits, t), refs)
    assert after["ece"] < before["ece"] / 2
    # labels never change
    assert (softmax(logits, t).argmax(-1) == logits.argmax(-1)).all()


class _Trainer:
    def __init__(self, logits, refs):
        self.output = type("Out", (), {"predictions": logits, "label_ids": refs})

    def predict(self, dataset):
        return self.output


def _prepared(tmp_path, tiny_bert, with_validation=True):
    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.config import DataArguments
    from encoder_tasks.data import Split, read_file

    def split(name, text):
        path = write(tmp_path / name, text)
        return Split(name, str(path), read_file(path))

    rows = "text,label\n" + "".join(f"t{i},{'abc'[i % 3]}\n" for i in range(6))
    splits = {"train": split("train.csv", rows)}
    if with_validation:
        splits["validation"] = split("dev.csv", rows)
    args = ClassificationArguments(calibrate="temperature")
    return TASK.prepare(splits, load_tokenizer(tiny_bert), args, DataArguments()), args


def test_after_training_fits_the_temperature_into_the_settings(tmp_path, tiny_bert):
    prepared, args = _prepared(tmp_path, tiny_bert)
    before = prepared.settings
    logits, refs = overconfident()
    tuned = TASK.after_training(_Trainer(logits, refs), prepared, args)
    assert (
        prepared.settings.temperature
        == tuned["temperature"]
        == pytest.approx(fit_temperature(logits, refs), abs=1e-5)
    )
    assert prepared.settings.temperature_fitted_on["path"].endswith("dev.csv")
    assert tuned["ece_after"] < tuned["ece_before"] and tuned["nll_after"] < tuned["nll_before"]
    assert "in-sample" in tuned["calibration_note"]
    assert before.temperature is None  # frozen settings: a new object holds the change
    # evaluate scores a saved model with its temperature, as predict gives probabilities
    saved = ClassificationMetrics(prepared.settings.replace(label_names=["a", "b", "c"]))
    plain = ClassificationMetrics(before.replace(label_names=["a", "b", "c"]))
    pred = type("P", (), {"predictions": logits, "label_ids": refs})
    assert saved(pred)["ece"] == pytest.approx(tuned["ece_after"])
    assert plain(pred)["ece"] == pytest.approx(tuned["ece_before"])
    assert saved(pred)["accuracy"] == plain(pred)["accuracy"]


def test_calibrate_without_validation_or_for_regression(tmp_path, tiny_bert, caplog):
    prepared, args = _prepared(tmp_path, tiny_bert, with_validation=False)
    tuned = TASK.after_training(_Trainer(*overconfident()), prepared, args)
    assert prepared.settings.temperature is None
    assert "no validation data" in tuned["calibration_note"] and "nothing fitted" in caplog.text
    with pytest.raises(UserError, match="--calibrate temperature calibrates a single-label softmax"):
        ClassificationArguments(calibrate="temperature", problem_type="regression")
    with pytest.raises(UserError, match="--calibrate must be one of none, temperature, found 'platt'"):
        ClassificationArguments(calibrate="platt")


def _saved_model(tmp_path, tiny_bert, **settings):
    from encoder_tasks.backbone import load_encoder, load_tokenizer

    torch.manual_seed(0)
    s = TASK.Settings(label_names=["neg", "pos"], max_length=16, **settings)
    TASK.build_model(load_encoder(tiny_bert), s).save_pretrained(tmp_path / "m")
    load_tokenizer(tiny_bert).save_pretrained(tmp_path / "m")
    return tmp_path / "m"


def test_saved_temperature_reloads_and_predict_applies_it(tmp_path, tiny_bert):
    from encoder_tasks.heads import EncoderWithHead

    plain_dir = _saved_model(tmp_path / "a", tiny_bert)
    warm_dir = _saved_model(tmp_path / "b", tiny_bert, temperature=0.05)
    assert EncoderWithHead.from_pretrained(warm_dir).settings.temperature == 0.05
    assert json.loads((warm_dir / "encoder_tasks.json").read_text())["settings"]["temperature"] == 0.05
    inputs = write(tmp_path / "in.jsonl", '{"text": "a fine film"}\n{"text": "dull"}\n')
    plain = run_predict("classification", plain_dir, inputs, tmp_path / "p.jsonl")
    warm = run_predict("classification", warm_dir, inputs, tmp_path / "w.jsonl")
    for p, w in zip(plain, warm):
        # same weights (same seed), so p = softmax(z) and w = softmax(z / 0.05): log-odds x 20
        odds_p = np.log(p["probabilities"]["pos"] / p["probabilities"]["neg"])
        odds_w = np.log(w["probabilities"]["pos"] / w["probabilities"]["neg"])
        assert odds_w == pytest.approx(odds_p / 0.05, rel=1e-3, abs=1e-3)
        assert w["label"] == p["label"]


def test_reranker_scores_are_the_calibrated_probabilities(tmp_path, tiny_bert):
    from encoder_tasks.tasks.embedding.rerank import CrossEncoderScorer

    runs = {}
    for name, t in (("plain", None), ("scaled", 4.0)):
        run = _saved_model(tmp_path / name, tiny_bert, temperature=t, text_pair_column="text_pair")
        runs[name] = CrossEncoderScorer.load(str(run)).scores([("q", "a passage"), ("q", "other words")])
    logit = np.log(runs["plain"] / (1 - runs["plain"]))
    expected = 1 / (1 + np.exp(-logit / 4.0))
    assert runs["scaled"] == pytest.approx(expected, abs=2e-5)


# ---- abstaining ------------------------------------------------------------------------------
def test_abstain_below_gives_no_label_and_says_why(tmp_path, tiny_bert):
    settings = TASK.Settings(label_names=["neg", "pos"])
    sure = describe_prediction(np.array([0.0, 3.0]), settings, abstain_below=0.9)
    assert sure["label"] == "pos" and "unsure" not in sure
    unsure = describe_prediction(np.array([0.0, 0.5]), settings, abstain_below=0.9)
    assert unsure["label"] is None and unsure["score"] == pytest.approx(0.622459, abs=1e-6)
    assert unsure["unsure"] == {"best_label": "pos", "probability": unsure["score"], "abstain_below": 0.9}
    # through predict: the tiny untrained model is never 99.99% sure
    model = _saved_model(tmp_path, tiny_bert)
    inputs = write(tmp_path / "in.jsonl", '{"text": "a fine film"}\n')
    rows = run_predict("classification", model, inputs, tmp_path / "p.jsonl", "--abstain_below", "0.9999")
    assert rows[0]["label"] is None and rows[0]["unsure"]["abstain_below"] == 0.9999
    with pytest.raises(UserError, match=r"--abstain_below must be a probability in \(0, 1\], found 1.5"):
        ClassificationPredictArguments(abstain_below=1.5)


def test_abstain_below_is_refused_for_regression(tmp_path, tiny_bert):
    model = _saved_model(tmp_path, tiny_bert, problem_type="regression")
    model_dir = tmp_path / "m"
    inputs = write(tmp_path / "in.jsonl", '{"text": "x"}\n')
    from encoder_tasks.cli import main

    argv = ["classification", "predict", "--model_dir", str(model_dir), "--input_file", str(inputs)]
    argv += ["--output_file", str(tmp_path / "o.jsonl"), "--abstain_below", "0.5"]
    assert model == model_dir and main(argv) != 0
    assert not (tmp_path / "o.jsonl").exists()


# ---- end to end: train --calibrate temperature, metrics.json, the diagram --------------------
def test_train_reports_calibration_and_saves_the_temperature(tmp_path, tiny_bert):
    pytest.importorskip("matplotlib")
    rows = "text,label\n" + "".join(f"word{i % 5} thing{i % 3},{'ab'[i % 2]}\n" for i in range(24))
    train = write(tmp_path / "train.csv", rows)
    dev = write(tmp_path / "dev.csv", rows)
    metrics = run_train(
        "classification",
        tiny_bert,
        train,
        tmp_path / "run",
        "--calibrate",
        "temperature",
        "--num_train_epochs",
        "1",
        "--per_device_train_batch_size",
        "8",
        validation=dev,
    )
    for key in (
        "eval_ece",
        "eval_brier",
        "eval_nll",
        "tuned_temperature",
        "tuned_ece_before",
        "tuned_ece_after",
    ):
        assert isinstance(metrics[key], float), key
    assert metrics["tuned_nll_after"] <= metrics["tuned_nll_before"] + 1e-9
    assert sum(metrics["eval_reliability"]["count"]) == 24
    saved = read_json(tmp_path / "run" / "encoder_tasks.json")["settings"]
    assert saved["temperature"] == metrics["tuned_temperature"]
    assert (tmp_path / "run" / "reliability.png").is_file()


def test_evaluate_warns_on_the_data_the_temperature_was_fitted_on(tmp_path, caplog):
    from encoder_tasks.data.fingerprint import data_fingerprint
    from encoder_tasks.tasks.classification.metrics import warn_if_evaluating_on_tuning_data

    dev = write(tmp_path / "dev.csv", "text,label\na,x\n")
    other = write(tmp_path / "other.csv", "text,label\nb,y\n")
    settings = TASK.Settings(
        label_names=["x", "y"], temperature=1.3, temperature_fitted_on=data_fingerprint(dev)
    )
    assert warn_if_evaluating_on_tuning_data(settings, str(dev))
    assert "the model's temperature (--calibrate temperature): tuned on" in caplog.text
    assert not warn_if_evaluating_on_tuning_data(settings, str(other))

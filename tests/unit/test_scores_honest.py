"""Scores that do not peek (issue 14, items 1 and 3).

- Macro F1 averages the labels present in the references or predictions, as scikit-learn does
  without a label list; the per-label reports still list every label.
- Multi-label thresholds tuned on the validation data do not score the final ``eval_*`` (their
  tuned scores are reported apart); the data they were tuned on is recorded (path + content
  hash) and ``evaluate`` warns on that same data. Likewise QA's tuned null threshold.
"""

import logging
import shutil

import numpy as np
import pytest

from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.config import DataArguments
from encoder_tasks.data import Split, read_file
from encoder_tasks.data.fingerprint import data_fingerprint, same_data, warn_if_tuned_on
from encoder_tasks.metrics import classification_metrics, multilabel_metrics
from encoder_tasks.reporting.model_card import render_model_card
from encoder_tasks.tasks.classification import ClassificationArguments, ClassificationTask
from encoder_tasks.tasks.classification.metrics import ClassificationMetrics
from encoder_tasks.tasks.ner.metrics import plain_tag_metrics
from encoder_tasks.tasks.qa.args import QASettings
from tests.helpers import write

TASK = ClassificationTask()
MULTI = "text,label\na,x|y\nb,x\nc,y\nd,x\n"


# ---- item 3: macro F1 over the labels present ---------------------------------------------------
def test_macro_f1_of_perfect_predictions_with_a_label_absent_is_one():
    # 2 of 3 classes in the evaluation set, all predicted right: was 0.667 (the absent class as 0)
    m = classification_metrics([0, 1, 1, 0], [0, 1, 1, 0], ["neg", "pos", "neutral"])
    assert m["macro_f1"] == pytest.approx(1.0) and m["accuracy"] == 1.0 and m["micro_f1"] == 1.0
    assert list(m["per_class"]) == ["neg", "pos", "neutral"]  # every label still reported
    assert m["per_class"]["neutral"]["support"] == 0


def test_macro_f1_counts_a_label_that_is_only_predicted():
    # "neutral" never occurs but is predicted once: it is present, with F1 0
    m = classification_metrics([0, 2], [0, 0], ["neg", "pos", "neutral"])
    assert m["macro_f1"] == pytest.approx((2 / 3 + 0.0) / 2)


def test_macro_f1_matches_scikit_learn_default():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    refs, preds = rng.integers(0, 3, 50), rng.integers(0, 3, 50)  # label 3 of 5 absent
    m = classification_metrics(preds, refs, ["a", "b", "c", "d", "e"])
    assert m["macro_f1"] == pytest.approx(f1_score(refs, preds, average="macro"))


def test_multilabel_macro_f1_skips_labels_never_seen_or_predicted():
    refs = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0]])
    m = multilabel_metrics(refs.copy(), refs, ["x", "y", "z"])
    assert m["macro_f1"] == pytest.approx(1.0)  # was 0.667
    assert list(m["per_class"]) == ["x", "y", "z"] and m["per_class"]["z"]["support"] == 0
    predicted = refs.copy()
    predicted[0, 2] = 1  # "z" predicted once, never true: present, F1 0
    assert multilabel_metrics(predicted, refs, ["x", "y", "z"])["macro_f1"] == pytest.approx(2 / 3)


def test_plain_tag_macro_f1_skips_tags_absent_from_the_evaluation_data():
    refs = [["DET", "NOUN", "VERB"], ["NOUN", "VERB"]]
    m = plain_tag_metrics(refs, [list(s) for s in refs], ["ADJ", "DET", "NOUN", "VERB"])
    assert m["macro_f1"] == pytest.approx(1.0)  # was 0.75
    assert sorted(m["per_type"]) == ["ADJ", "DET", "NOUN", "VERB"]


# ---- the shared fingerprint ----------------------------------------------------------------------
def test_fingerprint_compares_content_not_names(tmp_path):
    dev = write(tmp_path / "dev.csv", MULTI)
    record = data_fingerprint(dev)
    assert record["path"] == str(dev.resolve()) and len(record["sha256"]) == 64
    copy = shutil.copy(dev, tmp_path / "copy.csv")
    assert same_data(record, copy)  # same rows under another name: the same data
    write(tmp_path / "dev.csv", MULTI + "e,y\n")
    assert not same_data(record, dev)  # edited since: other data
    assert not same_data(None, dev)


def test_fingerprint_of_a_folder_and_of_a_hub_split(tmp_path):
    folder = tmp_path / "saved"
    write(folder / "data.arrow", b"abc")
    write(folder / "state.json", "{}")
    record = data_fingerprint(folder)
    assert same_data(record, folder) and record["sha256"]
    write(folder / "data.arrow", b"abd")
    assert not same_data(record, folder)
    assert data_fingerprint("imdb[test]") == {"path": "imdb[test]", "sha256": None}
    assert same_data(data_fingerprint("imdb[test]"), "imdb[test]")
    assert not same_data(data_fingerprint("imdb[test]"), "imdb[train]")


def test_warn_if_tuned_on_names_the_data(tmp_path, caplog):
    dev = write(tmp_path / "dev.csv", MULTI)
    with caplog.at_level(logging.WARNING):
        assert warn_if_tuned_on(data_fingerprint(dev), dev, "the model's thresholds", "use other data")
    assert f"tuned on {dev.resolve()}" in caplog.text and "optimistic" in caplog.text


# ---- item 1: multi-label thresholds ---------------------------------------------------------------
class _Trainer:
    """Stands in for the Trainer: ``predict`` gives fixed multi-label logits."""

    probabilities = np.array([[0.3, 0.9], [0.25, 0.2], [0.1, 0.8], [0.35, 0.1]])
    label_ids = np.array([[1, 1], [1, 0], [0, 1], [1, 0]])

    def predict(self, dataset):
        logits = np.log(self.probabilities / (1 - self.probabilities))
        return type("Out", (), {"predictions": logits, "label_ids": self.label_ids})


def _split(path):
    return Split("validation", str(path), read_file(path))


def _prepared(tmp_path, tiny_bert, saved=None):
    dev = write(tmp_path / "dev.csv", MULTI)
    splits = (
        {"validation": _split(dev)}
        if saved is not None
        else {"train": _split(dev), "validation": _split(dev)}
    )
    args = ClassificationArguments(label_separator="|")
    return TASK.prepare(splits, load_tokenizer(tiny_bert), args, DataArguments(), saved=saved), dev


def test_tuned_thresholds_do_not_score_the_final_evaluation(tmp_path, tiny_bert, caplog):
    prepared, dev = _prepared(tmp_path, tiny_bert)
    with caplog.at_level(logging.INFO):
        tuned = TASK.after_training(_Trainer(), prepared, ClassificationArguments(label_separator="|"))
    thresholds = list(tuned["thresholds"].values())
    assert prepared.settings.thresholds == thresholds != [0.5, 0.5]  # saved with the model
    assert prepared.settings.thresholds_tuned_on == data_fingerprint(dev)  # and where they were tuned

    # the final evaluation (the same compute_metrics) still cuts at 0.5
    logits = np.log(_Trainer.probabilities / (1 - _Trainer.probabilities))
    final = prepared.compute_metrics(type("P", (), {"predictions": logits, "label_ids": _Trainer.label_ids}))
    at_half = multilabel_metrics((_Trainer.probabilities >= 0.5).astype(int), _Trainer.label_ids, ["x", "y"])
    assert final["micro_f1"] == pytest.approx(at_half["micro_f1"])
    # the tuned scores are reported apart, and they are the (optimistic) higher ones
    at_tuned = multilabel_metrics(
        (_Trainer.probabilities >= np.array(thresholds)).astype(int), _Trainer.label_ids, ["x", "y"]
    )
    for name in ("micro_f1", "macro_f1", "subset_accuracy"):
        assert tuned[name] == pytest.approx(at_tuned[name])
    assert tuned["micro_f1"] > final["micro_f1"]
    assert tuned["on"] == str(dev.resolve()) and "optimistic" in tuned["note"]
    assert f"tuned on {dev.resolve()}" in caplog.text and "optimistic" in caplog.text


def test_evaluate_uses_saved_thresholds_and_warns_on_their_tuning_data(tmp_path, tiny_bert, caplog):
    dev = write(tmp_path / "dev.csv", MULTI)
    saved = TASK.Settings(
        problem_type="multi_label",
        label_names=["x", "y"],
        label_separator="|",
        thresholds=[0.2, 0.7],
        thresholds_tuned_on=data_fingerprint(dev),
    )
    with caplog.at_level(logging.WARNING):
        prepared, _ = _prepared(tmp_path, tiny_bert, saved=saved)
    assert isinstance(prepared.compute_metrics, ClassificationMetrics)
    assert prepared.compute_metrics.settings.thresholds == [0.2, 0.7]  # what predict uses
    assert "multi-label thresholds: tuned on" in caplog.text and "optimistic" in caplog.text

    caplog.clear()
    other = write(tmp_path / "other" / "dev.csv", MULTI.replace("d,x", "d,y"))
    with caplog.at_level(logging.WARNING):
        TASK.prepare(
            {"validation": _split(other)},
            load_tokenizer(tiny_bert),
            ClassificationArguments(label_separator="|"),
            DataArguments(),
            saved=saved,
        )
    assert "tuned on" not in caplog.text


def test_model_card_says_where_thresholds_were_tuned():
    record = {"path": "/data/dev.csv", "sha256": "0123456789ab" + "0" * 52}
    card = render_model_card(
        "classification",
        {"thresholds": [0.3, 0.6], "thresholds_tuned_on": record, "problem_type": "multi_label"},
        {"eval_micro_f1": 0.5, "tuned_micro_f1": 0.7, "tuned_note": "thresholds tuned on /data/dev.csv; ..."},
    )
    assert "`thresholds` was tuned on `/data/dev.csv` (sha256 `0123456789ab`)" in card
    assert "optimistic" in card and "thresholds tuned on /data/dev.csv" in card


# ---- item 1: QA's null threshold --------------------------------------------------------------------
def test_qa_evaluate_warns_when_the_tuned_null_threshold_meets_its_tuning_data(tmp_path, caplog):
    from encoder_tasks.tasks.qa.metrics import warn_if_evaluating_on_tuning_data

    dev = write(tmp_path / "dev-v2.json", '{"data": []}')
    saved = QASettings(
        version_2_with_negative=True, null_threshold=-1.5, null_threshold_tuned_on=data_fingerprint(dev)
    )
    with caplog.at_level(logging.WARNING):
        assert warn_if_evaluating_on_tuning_data(saved, saved, str(dev))
    assert "null threshold (-1.5): tuned on" in caplog.text
    # --null_threshold given: the tuned value is not in use
    assert not warn_if_evaluating_on_tuning_data(saved.replace(null_threshold=0.0), saved, str(dev))
    other = write(tmp_path / "other.json", '{"data": [], "version": "2"}')
    assert not warn_if_evaluating_on_tuning_data(saved, saved, str(other))
    v1 = QASettings(null_threshold_tuned_on=data_fingerprint(dev))
    assert not warn_if_evaluating_on_tuning_data(v1, v1, str(dev))  # v1.1: no threshold to tune

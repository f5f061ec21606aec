import json
import subprocess
import sys

import numpy as np
import pytest

from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.config import DataArguments
from encoder_tasks.data import Split, read_file
from encoder_tasks.errors import UserError
from encoder_tasks.metrics import classification_metrics, regression_metrics
from encoder_tasks.tasks.classification import ClassificationArguments, ClassificationTask
from encoder_tasks.tasks.classification.labels import infer_problem_type, parse_class_weights
from encoder_tasks.tasks.classification.metrics import tune_thresholds
from tests.helpers import write

TASK = ClassificationTask()


def split(tmp_path, name, text):
    path = write(tmp_path / name, text)
    return Split("train", str(path), read_file(path))


@pytest.mark.parametrize(
    ("values", "separator", "expected"),
    [
        (["pos", "neg"], None, "single_label"),
        ([0, 1, 1], None, "single_label"),
        (["0", "1.0"], None, "single_label"),
        ([0.5, 4.2], None, "regression"),
        (["3.8", "1"], None, "regression"),
        ([["a", "b"], ["c"]], None, "multi_label"),
        (["a|b", "c"], "|", "multi_label"),
    ],
)
def test_infer_problem_type(values, separator, expected):
    assert infer_problem_type(values, separator) == expected


def test_prepare_maps_string_and_integer_labels(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {"train": split(tmp_path, "t.csv", "text,label\ngood,1\nbad,0\nfine,1.0\n")}
    prepared = TASK.prepare(splits, tok, ClassificationArguments(), DataArguments())
    assert prepared.settings.label_names == ["0", "1"]
    assert prepared.train["labels"] == [1, 0, 1]
    assert prepared.train["length"] == [len(ids) for ids in prepared.train["input_ids"]]


def test_unseen_eval_label_is_reported(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {
        "train": split(tmp_path, "t.csv", "text,label\ngood,pos\nbad,neg\n"),
        "validation": split(tmp_path, "d.csv", "text,label\ngood,pos\nmeh,neutral\n"),
    }
    with pytest.raises(UserError, match=r"d.csv line 3: label 'neutral' never appears in the training data"):
        TASK.prepare(splits, tok, ClassificationArguments(), DataArguments())


def test_nan_regression_target_is_reported(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {"train": split(tmp_path, "t.csv", "text,label\ngood,1.5\nbad,nan\n")}
    args = ClassificationArguments(problem_type="regression")
    with pytest.raises(
        UserError, match=r"t.csv line 3: column 'label' expected a finite number, found 'nan'"
    ):
        TASK.prepare(splits, tok, args, DataArguments())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("text,label\ngood,\n", r"line 2: column 'label' is empty"),
        ("text,label\n,1\ngood,0\n", r"line 2: column 'text' is empty"),
        ("sentence,label\ngood,1\n", r"no text column 'text'; found columns \['sentence', 'label'\]"),
        ("text,label\ngood,1\nbad,1\n", r"holds a single label"),
    ],
)
def test_bad_classification_inputs(tmp_path, tiny_bert, text, message):
    tok = load_tokenizer(tiny_bert)
    with pytest.raises(UserError, match=message):
        TASK.prepare(
            {"train": split(tmp_path, "t.csv", text)}, tok, ClassificationArguments(), DataArguments()
        )


def test_column_alternatives_per_file(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {
        "train": split(tmp_path, "t.tsv", "label\tsentence\n1\tgood\n0\tbad\n"),
        "validation": split(tmp_path, "d.tsv", "label\tcontent\n1\tgood\n"),
    }
    prepared = TASK.prepare(
        splits, tok, ClassificationArguments(text_column="sentence|content"), DataArguments()
    )
    assert len(prepared.eval) == 1


def test_multilabel_with_separator_and_balanced_weights(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {"train": split(tmp_path, "t.csv", "text,label\na,x|y\nb,x\nc,\nd,x\n")}
    args = ClassificationArguments(label_separator="|", class_weights="balanced")
    prepared = TASK.prepare(splits, tok, args, DataArguments())
    assert prepared.settings.problem_type == "multi_label"
    assert prepared.train["labels"] == [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0]]
    # pos_weight = negatives / positives per label: x: 1/3, y: 3/1
    assert prepared.training_head["class_weights"] == pytest.approx([1 / 3, 3.0])


def test_balanced_class_weights_match_sklearn_formula():
    labels = ["a", "a", "a", "b"]
    weights = parse_class_weights("balanced", labels, ["a", "b"], "single_label")
    assert weights == pytest.approx([4 / (2 * 3), 4 / (2 * 1)])
    with pytest.raises(UserError, match="3 weights given for 2 labels"):
        parse_class_weights("1,2,3", labels, ["a", "b"], "single_label")


def test_metrics_against_hand_values():
    m = classification_metrics([0, 0, 1, 1], [0, 1, 1, 1], ["a", "b"])
    assert m["accuracy"] == 0.75
    assert m["per_class"]["b"]["recall"] == pytest.approx(2 / 3)
    r = regression_metrics([1, 2, 3, 4], [2, 4, 6, 8])
    assert r["pearson"] == pytest.approx(1.0) and r["spearman"] == pytest.approx(1.0)
    assert r["mse"] == pytest.approx((1 + 4 + 9 + 16) / 4)


def test_tuned_thresholds_separate_the_classes():
    probs = np.array([[0.3, 0.9], [0.25, 0.2], [0.1, 0.8], [0.35, 0.1]])
    refs = np.array([[1, 1], [1, 0], [0, 1], [1, 0]])
    thresholds = tune_thresholds(probs, refs)
    assert 0.1 < thresholds[0] <= 0.25
    assert 0.2 < thresholds[1] <= 0.8


# ---- saved settings, heads and the hooks around training -------------------------------------
def test_prepare_records_the_settings_saved_with_the_model(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {"train": split(tmp_path, "t.csv", "text,label\na,x|y\nb,x\n")}
    args = ClassificationArguments(label_separator="|", pooling="cls", classifier_dropout=0.2)
    settings = TASK.prepare(splits, tok, args, DataArguments(max_length=64)).settings
    assert settings == TASK.Settings(
        problem_type="multi_label",
        label_names=["x", "y"],
        text_column="text",
        label_column="label",
        label_separator="|",
        thresholds=[0.5, 0.5],
        pooling="cls",
        classifier_dropout=0.2,
        max_length=64,
    )


def test_saved_settings_fix_the_labels_when_evaluating(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    saved = TASK.Settings(problem_type="single_label", label_names=["neg", "pos", "zzz"], max_length=64)
    splits = {"validation": split(tmp_path, "d.csv", "text,label\ngood,pos\nbad,neg\n")}
    prepared = TASK.prepare(splits, tok, ClassificationArguments(), DataArguments(), saved=saved)
    assert prepared.settings is saved and prepared.eval["labels"] == [1, 0] and prepared.train is None


def test_build_model_from_settings_saves_and_reloads(tmp_path, tiny_bert):
    from encoder_tasks.backbone import load_encoder
    from encoder_tasks.heads import EncoderWithHead

    settings = TASK.Settings(problem_type="multi_label", label_names=["a", "b", "c"], pooling="max")
    model = TASK.build_model(load_encoder(tiny_bert), settings, {"class_weights": [1.0, 2.0, 3.0]})
    assert model.settings is settings and model.pooler.mode == "max"
    assert model.class_weights.tolist() == [1.0, 2.0, 3.0]
    model.save_pretrained(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "encoder_tasks.json").read_text())
    assert saved["format_version"] == 2 and saved["settings"]["label_names"] == ["a", "b", "c"]
    again = EncoderWithHead.from_pretrained(tmp_path / "m")
    assert again.settings == settings and again.classifier.out_features == 3 and again.pooler.mode == "max"
    assert again.class_weights is None  # class weights shape training only: not saved


def test_format1_file_loads_with_its_head_settings(tmp_path, tiny_bert):
    from encoder_tasks.backbone import load_encoder
    from encoder_tasks.heads import EncoderWithHead
    from encoder_tasks.tasks.classification.model import SequenceClassifier

    SequenceClassifier(load_encoder(tiny_bert), num_labels=2, pooling="cls").save_pretrained(tmp_path / "m")
    # encoder_tasks.json as version 1 wrote it: flat metadata plus the head's constructor arguments
    format1 = {
        "task": "classification",
        "head_class": "encoder_tasks.tasks.classification:SequenceClassifier",
        "head_config": {
            "num_labels": 2,
            "problem_type": "single_label",
            "pooling": "cls",
            "dropout": 0.3,
            "class_weights": [1.0, 4.0],
        },
        "problem_type": "single_label",
        "label_names": ["neg", "pos"],
        "text_column": "review",
        "text_pair_column": None,
        "label_column": "label",
        "label_separator": None,
        "max_length": 48,
        "thresholds": None,
        "base_model": "tiny",
    }
    write(tmp_path / "m" / "encoder_tasks.json", json.dumps(format1))
    model = EncoderWithHead.from_pretrained(tmp_path / "m")
    assert isinstance(model, SequenceClassifier) and model.pooler.mode == "cls"
    s = model.settings
    assert (s.label_names, s.text_column, s.max_length, s.pooling, s.classifier_dropout, s.base_model) == (
        ["neg", "pos"],
        "review",
        48,
        "cls",
        0.3,
        "tiny",
    )
    assert dict(s.extra) == {}  # num_labels and class_weights are not settings


class _Trainer:
    """Stands in for the Trainer: ``predict`` gives fixed multi-label logits."""

    def predict(self, dataset):
        logits = np.log(np.array([[0.3, 0.9], [0.25, 0.2], [0.1, 0.8], [0.35, 0.1]]) / 0.7)
        return type(
            "Out", (), {"predictions": logits, "label_ids": np.array([[1, 1], [1, 0], [0, 1], [1, 0]])}
        )


def _multilabel_prepared(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {
        "train": split(tmp_path, "t.csv", "text,label\na,x|y\nb,x\nc,y\nd,x\n"),
        "validation": split(tmp_path, "d.csv", "text,label\na,x|y\nb,x\nc,y\nd,x\n"),
    }
    return TASK.prepare(splits, tok, ClassificationArguments(label_separator="|"), DataArguments())


def test_after_training_tunes_thresholds_into_the_settings(tmp_path, tiny_bert):
    prepared = _multilabel_prepared(tmp_path, tiny_bert)
    before = prepared.settings
    tuned = TASK.after_training(_Trainer(), prepared, ClassificationArguments(label_separator="|"))
    assert set(tuned["thresholds"]) == {"x", "y"}
    assert prepared.settings.thresholds == list(tuned["thresholds"].values()) != [0.5, 0.5]
    assert before.thresholds == [0.5, 0.5]  # settings are frozen: a new object holds the change
    # the final evaluation is scored at 0.5: the tuned thresholds were tuned on its data (issue 14)
    assert prepared.compute_metrics.settings is before


def test_after_training_leaves_thresholds_when_told_not_to_tune(tmp_path, tiny_bert):
    prepared = _multilabel_prepared(tmp_path, tiny_bert)
    before = prepared.settings
    args = ClassificationArguments(label_separator="|", tune_thresholds=False)
    assert TASK.after_training(_Trainer(), prepared, args) == {}
    assert prepared.settings is before and before.thresholds == [0.5, 0.5]


def test_task_modules_load_without_torch():
    code = (
        "import sys, encoder_tasks.tasks.classification as c, encoder_tasks.tasks.pair as p\n"
        "assert c.ClassificationTask.Arguments and p.PairTask.Arguments\n"
        "heavy = [m for m in ('torch', 'transformers', 'datasets') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_predict_uses_saved_columns_and_honours_precision_and_batch_size(
    tmp_path, tiny_bert, monkeypatch, caplog
):
    from encoder_tasks.backbone import load_encoder
    from encoder_tasks.tasks.classification import predict as predict_module

    settings = TASK.Settings(label_names=["neg", "pos"], text_column="review", max_length=16)
    TASK.build_model(load_encoder(tiny_bert), settings).save_pretrained(tmp_path / "m")
    load_tokenizer(tiny_bert).save_pretrained(tmp_path / "m")
    inputs = write(tmp_path / "in.csv", "review\n" + "a fine film\n" * 5 + " ".join(["long"] * 40) + "\n")
    seen = {}
    real = predict_module.run_batches

    def spy(model, features, collate, batch_size, precision="auto", **kwargs):
        seen.update(
            batch_size=batch_size, precision=precision, longest=max(len(f["input_ids"]) for f in features)
        )
        return real(model, features, collate, batch_size, precision, **kwargs)

    monkeypatch.setattr(predict_module, "run_batches", spy)
    args = TASK.PredictArguments(
        model_dir=str(tmp_path / "m"),
        input_file=str(inputs),
        output_file=str(tmp_path / "p.jsonl"),
        batch_size=3,
        precision="fp32",
    )
    summary = TASK.predict(args)
    assert summary == {"predictions": 6, "long_inputs": 1}
    assert args.text_column == "review" and args.max_length == 16  # the saved values
    assert seen == {"batch_size": 3, "precision": "fp32", "longest": 16}
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rows] == [2, 3, 4, 5, 6, 7] and rows[-1]["windows"] > 1
    # the default stride (64) does not fit windows of the saved max_length (16): halved, with a warning
    assert "--window_stride 64 leaves windows of 14 tokens nothing new; using 7" in caplog.text

import numpy as np
import pytest

from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.config import DataArguments
from encoder_tasks.data import Split, read_file
from encoder_tasks.errors import UserError
from encoder_tasks.metrics import classification_metrics, regression_metrics, tune_thresholds
from encoder_tasks.tasks import classification as cls
from tests.conftest import write


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
    assert cls.infer_problem_type(values, separator) == expected


def test_prepare_maps_string_and_integer_labels(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {"train": split(tmp_path, "t.csv", "text,label\ngood,1\nbad,0\nfine,1.0\n")}
    prepared = cls.prepare(splits, tok, cls.ClassificationArguments(), DataArguments())
    assert prepared.metadata["label_names"] == ["0", "1"]
    assert prepared.train["labels"] == [1, 0, 1]
    assert prepared.train["length"] == [len(ids) for ids in prepared.train["input_ids"]]


def test_unseen_eval_label_is_reported(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {
        "train": split(tmp_path, "t.csv", "text,label\ngood,pos\nbad,neg\n"),
        "validation": split(tmp_path, "d.csv", "text,label\ngood,pos\nmeh,neutral\n"),
    }
    with pytest.raises(UserError, match=r"d.csv line 3: label 'neutral' never appears in the training data"):
        cls.prepare(splits, tok, cls.ClassificationArguments(), DataArguments())


def test_nan_regression_target_is_reported(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {"train": split(tmp_path, "t.csv", "text,label\ngood,1.5\nbad,nan\n")}
    args = cls.ClassificationArguments(problem_type="regression")
    with pytest.raises(
        UserError, match=r"t.csv line 3: column 'label' expected a finite number, found 'nan'"
    ):
        cls.prepare(splits, tok, args, DataArguments())


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
        cls.prepare(
            {"train": split(tmp_path, "t.csv", text)}, tok, cls.ClassificationArguments(), DataArguments()
        )


def test_column_alternatives_per_file(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {
        "train": split(tmp_path, "t.tsv", "label\tsentence\n1\tgood\n0\tbad\n"),
        "validation": split(tmp_path, "d.tsv", "label\tcontent\n1\tgood\n"),
    }
    prepared = cls.prepare(
        splits, tok, cls.ClassificationArguments(text_column="sentence|content"), DataArguments()
    )
    assert len(prepared.eval) == 1


def test_multilabel_with_separator_and_balanced_weights(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    splits = {"train": split(tmp_path, "t.csv", "text,label\na,x|y\nb,x\nc,\nd,x\n")}
    args = cls.ClassificationArguments(label_separator="|", class_weights="balanced")
    prepared = cls.prepare(splits, tok, args, DataArguments())
    assert prepared.metadata["problem_type"] == "multi_label"
    assert prepared.train["labels"] == [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0]]
    # pos_weight = negatives / positives per label: x: 1/3, y: 3/1
    assert prepared.head_kwargs["class_weights"] == pytest.approx([1 / 3, 3.0])


def test_balanced_class_weights_match_sklearn_formula():
    labels = ["a", "a", "a", "b"]
    weights = cls.parse_class_weights("balanced", labels, ["a", "b"], "single_label")
    assert weights == pytest.approx([4 / (2 * 3), 4 / (2 * 1)])
    with pytest.raises(UserError, match="3 weights given for 2 labels"):
        cls.parse_class_weights("1,2,3", labels, ["a", "b"], "single_label")


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

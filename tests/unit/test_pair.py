"""Cross-encoder pair task: the classification machinery with pair defaults."""

import numpy as np
import pytest

from encoder_tasks.backbone import load_encoder, load_tokenizer
from encoder_tasks.config import DataArguments
from encoder_tasks.data import Split, read_file
from encoder_tasks.errors import UserError
from encoder_tasks.tasks import classification, pair
from encoder_tasks.tasks.classification.model import SequenceClassifier
from encoder_tasks.tasks.pair import PairArguments, PairTask
from encoder_tasks.tasks.pair.model import PairClassifier
from tests.helpers import write

TASK = PairTask()

STS = (
    "main-captions\tMSRvid\t2012\t0001\t5.000\tA plane is taking off.\tAn air plane is taking off.\n"
    "main-news\theadlines\t2013\t0002\t1.600\tthe cat sat\tthe dog ran\textra\tcolumns\n"
    "main-forums\tdeft\t2014\t0003\t3.800\tjohn lives in paris\tjohn smith lives in paris\n"
)
COLUMNS = "genre,source,year,id,score,sentence1,sentence2"


def sts_split(tmp_path):
    path = write(tmp_path / "sts-train.csv", STS)
    return Split("train", str(path), read_file(path, column_names=COLUMNS.split(",")))


def test_pair_reuses_classification():
    assert issubclass(PairTask, classification.ClassificationTask)
    assert issubclass(pair.PairArguments, classification.ClassificationArguments)
    assert issubclass(PairClassifier, SequenceClassifier)
    # one predict, one settings type: inherited, not copied (prepare adds only the listwise
    # expansion of grouped rows, then calls classification's: tests/unit/test_pair_listwise.py)
    for hook in ("after_training", "predict", "stock_model", "build_model"):
        assert getattr(PairTask, hook) is getattr(classification.ClassificationTask, hook)
    assert PairTask.Settings is classification.ClassificationSettings
    assert PairTask.PredictArguments is classification.ClassificationPredictArguments
    assert PairTask.name == "pair" and PairTask.objectives == classification.ClassificationTask.objectives


def test_sts_file_without_header_becomes_regression(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    prepared = TASK.prepare({"train": sts_split(tmp_path)}, tok, PairArguments(), DataArguments())
    assert prepared.settings.problem_type == "regression"
    assert prepared.settings.label_names == ["score"]
    assert prepared.train["labels"] == pytest.approx([5.0, 1.6, 3.8])
    # both texts in one input, the second marked by segment ids (BERT has them)
    row = prepared.train[0]
    assert 0 in row["token_type_ids"] and 1 in row["token_type_ids"]
    assert row["input_ids"].count(tok.sep_token_id) == 2
    model = TASK.build_model(load_encoder(tiny_bert), prepared.settings, prepared.training_head)
    assert model.task == "pair" and model.classifier.out_features == 1
    assert isinstance(model, PairClassifier) and model.settings is prepared.settings


def test_paraphrase_labels_become_classes_with_f1(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    text = "sentence1,sentence2,label\na cat,the cat,1\na cat,a dog,0\nthe film,the movie,1\n"
    path = write(tmp_path / "p.csv", text)
    prepared = TASK.prepare(
        {"train": Split("train", str(path), read_file(path))}, tok, PairArguments(), DataArguments()
    )
    assert prepared.settings.problem_type == "single_label" and prepared.train["labels"] == [1, 0, 1]
    logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.9, 0.1]])
    metrics = prepared.compute_metrics(
        type("P", (), {"predictions": logits, "label_ids": np.array([1, 0, 1])})
    )
    assert metrics["accuracy"] == pytest.approx(2 / 3)
    assert metrics["per_class"]["1"]["f1-score"] == pytest.approx(2 / 3)


def test_regression_metrics_are_pearson_and_spearman(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    prepared = TASK.prepare({"train": sts_split(tmp_path)}, tok, PairArguments(), DataArguments())
    preds = np.array([[4.0], [1.0], [2.0]])
    metrics = prepared.compute_metrics(
        type("P", (), {"predictions": preds, "label_ids": np.array([5.0, 1.6, 3.8])})
    )
    assert metrics["spearman"] == pytest.approx(1.0) and 0.9 < metrics["pearson"] < 1.0


def test_pair_needs_a_second_text():
    with pytest.raises(UserError, match="--text_pair_column is required"):
        PairArguments(text_pair_column="")


def test_missing_pair_column_names_the_columns(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    path = write(tmp_path / "p.csv", "sentence1,label\na,1\nb,0\n")
    with pytest.raises(
        UserError, match=r"no text_pair column 'sentence2\|text2\|hypothesis\|question2\|positive'"
    ):
        TASK.prepare(
            {"train": Split("train", str(path), read_file(path))}, tok, PairArguments(), DataArguments()
        )


def test_format1_pair_model_loads(tmp_path, tiny_bert):
    import json

    from encoder_tasks.heads import EncoderWithHead

    PairClassifier(load_encoder(tiny_bert), num_labels=1, problem_type="regression").save_pretrained(
        tmp_path / "m"
    )
    format1 = {
        "task": "pair",
        "head_class": "encoder_tasks.tasks.pair:PairClassifier",
        "head_config": {"num_labels": 1, "problem_type": "regression", "pooling": "mean", "dropout": None},
        "problem_type": "regression",
        "label_names": ["score"],
        "text_column": "sentence1|text1|premise|question1|anchor",
        "text_pair_column": "sentence2|text2|hypothesis|question2|positive",
        "max_length": 128,
    }
    write(tmp_path / "m" / "encoder_tasks.json", json.dumps(format1))
    model = EncoderWithHead.from_pretrained(tmp_path / "m")
    assert isinstance(model, PairClassifier) and model.task == "pair"
    assert model.settings.text_pair_column.startswith("sentence2") and model.settings.max_length == 128

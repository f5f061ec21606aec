"""The real CLI for the pair (cross-encoder) task, end to end on tiny models."""

import json

import pytest

from encoder_tasks.cli import main
from tests.conftest import FAST_TRAINING, write

ROWS = [
    ("5.000", "the film was good", "the movie was good"),
    ("0.400", "the film was good", "john lives in paris"),
    ("4.200", "the cat sat on the mat", "a cat sat on a mat"),
    ("1.200", "the dog ran", "the cat sat"),
    ("3.600", "john lives in paris", "john smith lives in paris"),
    ("0.800", "big red dog", "small blue cat"),
]
FAST = list(FAST_TRAINING)
COLUMNS = ["--column_names", "genre,source,year,id,score,sentence1,sentence2"]


@pytest.fixture
def sts(tmp_path):
    # headerless STS-B layout; one row carries two extra trailing columns
    lines = [f"main\tsrc\t2012\t{i:04d}\t{s}\t{a}\t{b}" for i, (s, a, b) in enumerate(ROWS * 3)]
    lines[1] += "\tx\ty"
    return write(tmp_path / "sts-train.csv", "\n".join(lines) + "\n")


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "modernbert"])
def test_pair_regression_train_evaluate_predict(tiny_models, sts, tmp_path, family):
    out = tmp_path / "run"
    args = [
        "--train_file",
        str(sts),
        "--validation_file",
        str(sts),
        "--output_dir",
        str(out),
        *COLUMNS,
        *FAST,
    ]
    assert main(["pair", "train", "--model_name_or_path", tiny_models[family], *args]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert -1 <= metrics["eval_spearman"] <= 1 and -1 <= metrics["eval_pearson"] <= 1
    meta = json.loads((out / "encoder_tasks.json").read_text())
    assert meta["task"] == "pair" and meta["settings"]["problem_type"] == "regression"

    assert (
        main(["pair", "evaluate", "--model_name_or_path", str(out), "--validation_file", str(sts), *COLUMNS])
        == 0
    )
    again = json.loads((out / "eval" / "sts-train.json").read_text())
    assert again["eval_spearman"] == pytest.approx(metrics["eval_spearman"], abs=1e-6)

    preds = tmp_path / "p.jsonl"
    args = ["--model_dir", str(out), "--input_file", str(sts), "--output_file", str(preds), *COLUMNS]
    assert main(["pair", "predict", *args]) == 0
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    assert len(rows) == 18 and all(isinstance(r["score"], float) for r in rows)


def test_pair_classification_and_wrong_task(tiny_bert, tmp_path, capsys):
    text = "sentence1,sentence2,label\n" + "the film,the movie,1\nthe film,john lives,0\n" * 4
    data = write(tmp_path / "para.csv", text)
    out = tmp_path / "run"
    common = ["--train_file", str(data), "--validation_file", str(data), "--output_dir", str(out), *FAST]
    assert main(["pair", "train", "--model_name_or_path", tiny_bert, *common]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0 <= metrics["eval_accuracy"] <= 1 and "eval_macro_f1" in metrics
    assert (
        main(["classification", "evaluate", "--model_name_or_path", str(out), "--validation_file", str(data)])
        == 2
    )
    assert "holds a 'pair' model; use `encoder-tasks pair evaluate`" in capsys.readouterr().err

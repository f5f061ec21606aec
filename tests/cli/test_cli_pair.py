"""The real CLI for the pair (cross-encoder) task, end to end on tiny models."""

import pytest

from encoder_tasks.cli import main
from tests.helpers import FAST_TRAINING, evaluate_argv, read_json, run_predict, run_train, write
from tests.samples import STS_COLUMNS, STS_ROWS, sts_lines

FAST = list(FAST_TRAINING)


@pytest.fixture
def sts(tmp_path):
    # headerless STS-B layout; one row carries two extra trailing columns
    lines = sts_lines()
    lines[1] += "\tx\ty"
    return write(tmp_path / "sts-train.csv", "\n".join(lines) + "\n")


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "modernbert"])
def test_pair_regression_train_evaluate_predict(tiny_models, sts, tmp_path, family):
    out = tmp_path / "run"
    metrics = run_train("pair", tiny_models[family], sts, out, *STS_COLUMNS, *FAST, validation=sts)
    import numpy as np
    from scipy.stats import pearsonr, spearmanr

    # the final evaluation's scores against the file's gold scores give its correlations again
    saved = np.load(out / "eval_predictions.npz")
    gold, predicted = saved["label_ids"], saved["predictions"].reshape(-1)
    assert sorted(gold) == pytest.approx(sorted(float(score) for score, _, _ in STS_ROWS * 3))
    assert metrics["eval_spearman"] == pytest.approx(spearmanr(predicted, gold)[0])
    assert metrics["eval_pearson"] == pytest.approx(pearsonr(predicted, gold)[0])
    meta = read_json(out / "encoder_tasks.json")
    assert meta["task"] == "pair" and meta["settings"]["problem_type"] == "regression"

    assert main(evaluate_argv("pair", out, sts, *STS_COLUMNS)) == 0
    again = read_json(out / "eval" / "sts-train.json")
    assert again["eval_spearman"] == pytest.approx(metrics["eval_spearman"], abs=1e-6)

    rows = run_predict("pair", out, sts, tmp_path / "p.jsonl", *STS_COLUMNS)
    assert len(rows) == 18 and all(isinstance(r["score"], float) for r in rows)


def test_pair_classification_and_wrong_task(tiny_bert, tmp_path, capsys):
    text = "sentence1,sentence2,label\n" + "the film,the movie,1\nthe film,john lives,0\n" * 4
    data = write(tmp_path / "para.csv", text)
    out = tmp_path / "run"
    metrics = run_train("pair", tiny_bert, data, out, *FAST, validation=data)
    import numpy as np

    saved = np.load(out / "eval_predictions.npz")  # the final evaluation's logits and labels
    assert sorted(saved["label_ids"]) == [0] * 4 + [1] * 4  # labels "0" and "1"
    accuracy = (saved["predictions"].argmax(-1) == saved["label_ids"]).mean()
    assert metrics["eval_accuracy"] == pytest.approx(accuracy) and "eval_macro_f1" in metrics
    assert main(evaluate_argv("classification", out, data)) == 2
    assert "holds a 'pair' model; use `encoder-tasks pair evaluate`" in capsys.readouterr().err

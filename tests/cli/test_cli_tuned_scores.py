"""Values tuned on the evaluation data, end to end (issue 14, item 1).

Multi-label thresholds: ``metrics.json`` keeps ``eval_*`` at 0.5 and reports the tuned scores
as ``tuned_*``, with the data they were tuned on; the saved settings record that data (path and
content hash); ``evaluate`` scores with the saved thresholds and warns on that same data.
QA v2.0: the tuned null threshold records its data the same way, and ``evaluate`` warns when it
reuses the threshold there.
"""

import copy
import hashlib
import json
import shutil

import numpy as np
import pytest

from encoder_tasks.cli import main
from encoder_tasks.metrics import multilabel_metrics
from tests.helpers import FAST_QA, FAST_TRAINING, evaluate_argv, read_json, run_train, write
from tests.samples import squad_json

MULTI = (
    "text,label\n"
    + "the film was good and fun,good|fun\nthe movie was bad and boring,bad\nfun but bad,fun|bad\n" * 4
)


def _fingerprint(path):
    return {"path": str(path.resolve()), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def test_multilabel_eval_scores_are_untuned_and_evaluate_warns_on_the_tuning_data(
    tiny_bert, tmp_path, capsys
):
    data = write(tmp_path / "multi.csv", MULTI)
    out = tmp_path / "run"
    metrics = run_train(
        "classification", tiny_bert, data, out, "--label_separator", "|", *FAST_TRAINING, validation=data
    )
    printed = capsys.readouterr().out
    settings = read_json(out / "encoder_tasks.json")["settings"]
    thresholds = np.array(settings["thresholds"])
    assert settings["thresholds_tuned_on"] == _fingerprint(data)
    assert thresholds.tolist() == list(metrics["tuned_thresholds"].values())

    # eval_* are the 0.5 scores, tuned_* the tuned ones: both recomputed from the saved predictions
    saved = np.load(out / "eval_predictions.npz")
    probs, refs = 1 / (1 + np.exp(-saved["predictions"])), saved["label_ids"].astype(int)
    names = settings["label_names"]
    at_half = multilabel_metrics((probs >= 0.5).astype(int), refs, names)
    at_tuned = multilabel_metrics((probs >= thresholds).astype(int), refs, names)
    for name in ("micro_f1", "macro_f1", "subset_accuracy"):
        assert metrics[f"eval_{name}"] == pytest.approx(at_half[name], abs=1e-6)
        assert metrics[f"tuned_{name}"] == pytest.approx(at_tuned[name], abs=1e-6)
    assert metrics["tuned_on"] == str(data.resolve()) and "optimistic" in metrics["tuned_note"]
    assert f"multi-label thresholds tuned on {data.resolve()}" in printed and "optimistic" in printed
    card = (out / "README.md").read_text()
    assert f"`thresholds` was tuned on `{data.resolve()}`" in card and "optimistic" in card

    # evaluate scores with the saved (tuned) thresholds, as predict does, and warns on that file
    assert main(evaluate_argv("classification", out, data)) == 0
    err = capsys.readouterr().err
    assert f"multi-label thresholds: tuned on {data.resolve()}" in err and "optimistic" in err
    assert read_json(out / "eval" / "multi.json")["eval_micro_f1"] == pytest.approx(metrics["tuned_micro_f1"])
    # the same rows under another name are the same data; other rows are not
    assert main(evaluate_argv("classification", out, shutil.copy(data, tmp_path / "renamed.csv"))) == 0
    assert "tuned on" in capsys.readouterr().err
    other = write(tmp_path / "other.csv", MULTI.replace("fun but bad,fun|bad", "fun but good,fun|good"))
    assert main(evaluate_argv("classification", out, other)) == 0
    assert "tuned on" not in capsys.readouterr().err


def test_qa_evaluate_warns_when_reusing_the_null_threshold_on_its_tuning_data(tiny_bert, tmp_path, capsys):
    data = squad_json(v2=True)
    data["data"] = [copy.deepcopy(a) for a in data["data"] * 3]
    for i, article in enumerate(data["data"]):
        article["title"] = f"article {i}"
    train = write(tmp_path / "dev-v2.json", json.dumps(data))
    out = tmp_path / "run"
    split = ("--eval_split_by_article", "0.3")
    run_train("qa", tiny_bert, train, out, *split, *FAST_QA)
    printed = capsys.readouterr().out
    settings = read_json(out / "encoder_tasks.json")["settings"]
    assert settings["null_threshold_tuned_on"] == _fingerprint(train)
    assert f"v2.0 null threshold: tuned on {train.resolve()}" in printed and "optimistic" in printed
    assert (
        f"`null_threshold` ({settings['null_threshold']:.4g}) was tuned on" in (out / "README.md").read_text()
    )

    window = ("--max_length", "24", "--doc_stride", "6")
    assert main([*evaluate_argv("qa", out, train, *split), *window]) == 0
    err = capsys.readouterr().err
    assert f"null threshold ({settings['null_threshold']:g}): tuned on {train.resolve()}" in err
    # another threshold given: the tuned one is not in use, nothing to warn about
    assert main([*evaluate_argv("qa", out, train, *split), *window, "--null_threshold", "0.5"]) == 0
    assert "tuned on" not in capsys.readouterr().err
    # other data: no warning
    other = write(tmp_path / "other-v2.json", json.dumps(squad_json(v2=True)))
    assert main([*evaluate_argv("qa", out, other), *window]) == 0
    assert "tuned on" not in capsys.readouterr().err

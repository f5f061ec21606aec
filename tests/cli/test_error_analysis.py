"""Error analysis with ``evaluate``: ``--write_predictions FILE`` writes each example's input,
gold, prediction and whether it is right (checked against ``predict`` on the same inputs and
against the metrics), the per-label table is printed, and NER's errors are counted by kind."""

import csv
import json
import logging

import pytest

from encoder_tasks.cli import main
from encoder_tasks.errors import UserError
from encoder_tasks.tasks.ner.conll import read_conll
from tests.helpers import evaluate_argv, read_jsonl, run_predict, write


def evaluate(task, run_dir, data, out, caplog):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="encoder_tasks"):
        assert main(evaluate_argv(task, run_dir, data, "--write_predictions", str(out))) == 0
    return read_jsonl(out), "\n".join(r.getMessage() for r in caplog.records)


def test_classification_predictions_match_predict_and_the_metrics(task_runs, tmp_path, caplog):
    run = task_runs["classification"]
    records, said = evaluate("classification", run.model_dir, run.train_file, tmp_path / "p.jsonl", caplog)
    rows = list(csv.DictReader(run.train_file.open()))
    assert [r["text"] for r in records] == [row["text"] for row in rows]
    assert [r["gold"] for r in records] == [row["label"] for row in rows]
    assert all(r["correct"] == (r["gold"] == r["prediction"]) for r in records)
    inputs = write(
        tmp_path / "texts.jsonl", "".join(json.dumps({"text": row["text"]}) + "\n" for row in rows)
    )
    predicted = run_predict("classification", run.model_dir, inputs, tmp_path / "predict.jsonl")
    assert [r["prediction"] for r in records] == [p["label"] for p in predicted]
    metrics = read_jsonl_metrics(run.model_dir)
    assert sum(r["correct"] for r in records) / len(records) == pytest.approx(metrics["eval_accuracy"])
    # The per-class table, with what was predicted how often.
    assert "  per class" in said and "predicted" in said
    for name in ("neg", "pos"):
        count = sum(r["prediction"] == name for r in records)
        assert any(line.split()[0] == name and line.split()[-1] == str(count) for line in said.splitlines())


def read_jsonl_metrics(run_dir):
    """The latest evaluation's metrics of ``run_dir`` (``eval/*.json``)."""
    latest = max((run_dir / "eval").glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    return json.loads(latest.read_text())


def test_ner_predictions_errors_by_kind_and_predict(task_runs, tmp_path, caplog):
    run = task_runs["ner"]
    records, said = evaluate("ner", run.model_dir, run.train_file, tmp_path / "p.jsonl", caplog)
    sentences = read_conll(str(run.train_file))
    assert [r["tokens"] for r in records] == list(sentences["tokens"])
    predicted = run_predict("ner", run.model_dir, run.train_file, tmp_path / "predict.jsonl")
    assert [r["prediction"] for r in records] == [p["tags"] for p in predicted]
    metrics = read_jsonl_metrics(run.model_dir)
    errors = metrics["eval_errors"]
    assert set(errors) == {"correct", "missed", "spurious", "wrong_type", "wrong_boundary"}
    for kind in ("missed", "spurious", "wrong_type", "wrong_boundary"):
        assert sum(r["errors"].get(kind, 0) for r in records) == errors[kind]
    assert (
        errors["correct"] + errors["missed"] + errors["wrong_type"] + errors["wrong_boundary"]
        == (metrics["eval_gold_entities"])
    )
    assert "  errors: correct " in said and "  per type" in said


def test_qa_predictions_score_as_the_metrics(task_runs, tmp_path, caplog):
    run = task_runs["qa"]
    records, _ = evaluate("qa", run.model_dir, run.train_file, tmp_path / "p.jsonl", caplog)
    assert [r["id"] for r in records] == [q["id"] for q in run.records]
    metrics = read_jsonl_metrics(run.model_dir)
    assert 100 * sum(r["correct"] for r in records) / len(records) == pytest.approx(metrics["eval_exact"])
    assert sum(1 for r in records if r["prediction"]) == metrics["eval_answered"]


def test_an_existing_file_is_never_overwritten(task_runs, tmp_path):
    out = write(tmp_path / "p.jsonl", "keep me\n")
    run = task_runs["classification"]
    with pytest.raises(UserError, match=r"--write_predictions .*p.jsonl: the file exists"):
        main(
            evaluate_argv(
                "classification", run.model_dir, run.train_file, "--write_predictions", str(out), "--debug"
            )
        )
    assert out.read_text() == "keep me\n"

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


def test_embedding_sts_records_give_each_pair_its_cosine_and_ranks(task_runs, tmp_path, caplog):
    from scipy.stats import spearmanr

    from tests.samples import SCORED_PAIRS

    run = task_runs["embedding"]
    records, _ = evaluate("embedding", run.model_dir, run.train_file, tmp_path / "p.jsonl", caplog)
    assert [(r["kind"], r["anchor"], r["positive"], r["gold"]) for r in records] == [
        ("pair", a, b, s) for a, b, s in SCORED_PAIRS
    ]
    metrics = read_jsonl_metrics(run.model_dir)
    rho = spearmanr([r["gold"] for r in records], [r["prediction"] for r in records]).statistic
    assert rho == pytest.approx(metrics["eval_cosine_spearman"], abs=1e-6)
    # the ranks are those Spearman correlates: 1 = the most similar pair
    best = max(records, key=lambda r: r["prediction"])
    assert best["predicted_rank"] == 1.0 and min(r["gold_rank"] for r in records) == 1.0
    assert all(r["rank_error"] == r["predicted_rank"] - r["gold_rank"] for r in records)
    assert all("correct" not in r for r in records)  # a pair is not right or wrong on its own


def test_embedding_retrieval_records_rank_each_query_as_the_metrics(task_runs, tmp_path, caplog):
    run = task_runs["embedding"]
    out = tmp_path / "p.jsonl"
    flags = ["--evaluation", "retrieval", "--positive_min_score", "3", "--write_predictions", str(out)]
    with caplog.at_level(logging.INFO, logger="encoder_tasks"):
        assert main(evaluate_argv("embedding", run.model_dir, run.train_file, *flags)) == 0
    records = read_jsonl(out)
    metrics = read_jsonl_metrics(run.model_dir)
    assert {r["kind"] for r in records} == {"query"} and len(records) == metrics["eval_queries"]
    assert sum(r["correct"] for r in records) / len(records) == pytest.approx(metrics["eval_recall@1"])
    mrr = sum(1 / r["first_relevant_rank"] for r in records if r["first_relevant_rank"]) / len(records)
    assert mrr == pytest.approx(metrics["eval_mrr@10"])
    for r in records:
        assert r["query"] not in [hit["text"] for hit in r["retrieved"]]  # a query never finds itself
        scores = [hit["score"] for hit in r["retrieved"]]
        assert scores == sorted(scores, reverse=True)
        if r["first_relevant_rank"]:
            assert r["retrieved"][r["first_relevant_rank"] - 1]["text"] in r["relevant"]


def test_mlm_records_one_per_masked_token_as_the_metrics(task_runs, tmp_path, caplog):
    run = task_runs["mlm"]
    records, said = evaluate("mlm", run.model_dir, run.train_file, tmp_path / "p.jsonl", caplog)
    metrics = read_jsonl_metrics(run.model_dir)
    assert len(records) == metrics["eval_masked_tokens"] > 0
    assert sum(r["correct"] for r in records) / len(records) == pytest.approx(metrics["eval_masked_accuracy"])
    assert sum(r["nll"] for r in records) / len(records) == pytest.approx(
        metrics["eval_masked_loss"], abs=1e-5
    )
    assert all(r["correct"] == (r["gold"] == r["prediction"]) and "[MASK]" in r["context"] for r in records)
    assert f"wrote {len(records)} predictions" in said

"""``predict`` on a labelled input uses the gold tags: each record carries them beside the
predicted ones, and the strict entity F1 (seqeval, as ``evaluate`` computes it) is said at the
end with a pointer to ``evaluate --write_predictions``; unlabelled inputs are written as before."""

import json
import logging

import pytest
from seqeval.metrics import f1_score
from seqeval.scheme import IOB2

from tests.helpers import FAST_TRAINING, run_predict, run_train, write
from tests.samples import SENTENCES, conll


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory, tiny_bert):
    root = tmp_path_factory.mktemp("ner-gold")
    run_train("ner", tiny_bert, write(root / "train.conll", conll()), root / "run", *FAST_TRAINING)
    return root / "run"


def test_labelled_conll_writes_gold_tags_and_the_strict_f1(ner_run, tmp_path, caplog):
    labelled = write(tmp_path / "test.conll", conll())
    with caplog.at_level(logging.INFO, logger="encoder_tasks"):
        records = run_predict("ner", ner_run, labelled, tmp_path / "out.jsonl")
    gold = [tags for _, tags in SENTENCES * 3]
    assert [r["gold_tags"] for r in records] == gold
    want = f1_score(gold, [r["tags"] for r in records], mode="strict", scheme=IOB2, zero_division=0)
    said = [m for m in caplog.messages if "strict entity F1" in m]
    assert len(said) == 1, caplog.messages
    assert f"strict entity F1 {want:.4f}" in said[0]
    assert "--write_predictions" in said[0] and str(labelled) in said[0]


def test_gold_in_another_scheme_is_compared_in_iob2(ner_run, tmp_path, caplog):
    # The run learnt IOB2; a BIOES copy of the same tags is the same gold.
    with caplog.at_level(logging.INFO, logger="encoder_tasks"):
        iob2 = run_predict("ner", ner_run, write(tmp_path / "t.conll", conll("iob2")), tmp_path / "a.jsonl")
        bioes = run_predict("ner", ner_run, write(tmp_path / "b.conll", conll("bioes")), tmp_path / "b.jsonl")
    assert any("S-" in t for r in bioes for t in r["gold_tags"])  # written as in the file
    assert [r["tags"] for r in bioes] == [r["tags"] for r in iob2]
    f1 = [m for m in caplog.messages if "strict entity F1" in m]
    assert len(f1) == 2 and f1[0].split("F1")[1].split("(")[0] == f1[1].split("F1")[1].split("(")[0]


def test_json_token_records_with_tags_are_scored_and_unlabelled_inputs_are_not(ner_run, tmp_path, caplog):
    words, tags = SENTENCES[0]
    labelled = write(tmp_path / "in.jsonl", json.dumps({"tokens": words, "tags": tags}) + "\n")
    with caplog.at_level(logging.INFO, logger="encoder_tasks"):
        (record,) = run_predict("ner", ner_run, labelled, tmp_path / "a.jsonl")
    assert record["gold_tags"] == tags and "strict entity F1" in caplog.text
    caplog.clear()
    tokens_only = write(tmp_path / "words.conll", "\n".join(words) + "\n")
    with caplog.at_level(logging.INFO, logger="encoder_tasks"):
        (record,) = run_predict("ner", ner_run, tokens_only, tmp_path / "b.jsonl")
    assert "gold_tags" not in record and "F1" not in caplog.text


def test_gold_tags_that_do_not_fit_the_tokens_are_refused_naming_the_record(ner_run, tmp_path):
    from encoder_tasks.cli import main

    words, tags = SENTENCES[0]
    bad = write(tmp_path / "in.jsonl", json.dumps({"tokens": words, "tags": tags[:-1]}) + "\n")
    argv = ["ner", "predict", "--model_dir", str(ner_run), "--input_file", str(bad)]
    assert main([*argv, "--output_file", str(tmp_path / "o.jsonl")]) != 0
    assert not (tmp_path / "o.jsonl").exists()


def test_classification_predict_on_a_labelled_file_writes_gold_and_the_accuracy(task_runs, tmp_path, caplog):
    import csv

    from sklearn.metrics import f1_score as sk_f1

    run = task_runs["classification"]
    rows = list(csv.DictReader(run.train_file.open()))
    with caplog.at_level(logging.INFO, logger="encoder_tasks"):
        records = run_predict("classification", run.model_dir, run.train_file, tmp_path / "out.jsonl")
    assert [r["gold"] for r in records] == [row["label"] for row in rows]
    accuracy = sum(r["label"] == r["gold"] for r in records) / len(records)
    macro = sk_f1(
        [r["gold"] for r in records], [r["label"] for r in records], average="macro", zero_division=0
    )
    said = [m for m in caplog.messages if "holds 'label'" in m]
    assert len(said) == 1 and f"accuracy {accuracy:.4f}, macro F1 {macro:.4f}" in said[0], caplog.messages
    assert "--write_predictions" in said[0]
    # an input without the label column is written as before
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="encoder_tasks"):
        plain = run_predict("classification", run.model_dir, run.predict_file, tmp_path / "plain.jsonl")
    assert all("gold" not in r for r in plain) and "accuracy" not in caplog.text


def test_pair_predict_on_a_scored_file_writes_gold_and_the_correlations(task_runs, tmp_path, caplog):
    from scipy.stats import spearmanr

    from tests.samples import STS_COLUMNS, sts_lines

    run = task_runs["pair"]
    with caplog.at_level(logging.INFO, logger="encoder_tasks"):
        records = run_predict("pair", run.model_dir, run.train_file, tmp_path / "out.jsonl", *STS_COLUMNS)
    gold = [float(line.split("\t")[4]) for line in sts_lines()]
    assert [r["gold"] for r in records] == gold
    rho = spearmanr([r["score"] for r in records], gold).statistic
    assert any(f"Spearman {rho:.4f}" in m and "holds 'score'" in m for m in caplog.messages), caplog.messages

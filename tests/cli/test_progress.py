"""Progress bars on the long jobs (predict, encode, retrieve, mine, evaluate): each loop goes
through :func:`encoder_tasks.reporting.tracking.progress`, shown on a terminal and hidden when
stderr is not one or with ``--disable_tqdm``; ``evaluate`` in a log file or a pipe prints none of
the Trainer's bars either."""

import json

import pytest

import encoder_tasks.reporting.tracking as tracking
from encoder_tasks.cli import main
from tests.helpers import evaluate_argv, predict_argv, write


@pytest.fixture
def bars(monkeypatch):
    """The ``desc`` of every progress bar asked for, and whether it was shown, as on a terminal."""
    shown: list[tuple[str, bool]] = []
    real = tracking.progress

    def recorded(iterable=None, desc=None, total=None, disable=None, unit="it"):
        bar = real(iterable, desc=desc, total=total, disable=disable, unit=unit)
        shown.append((desc, not bar.disable))
        return bar

    monkeypatch.setattr(tracking, "progress", recorded)
    monkeypatch.setattr(tracking.sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.delenv("ENCODER_TASKS_DISABLE_TQDM", raising=False)
    return shown


def test_encode_retrieve_and_mine_show_progress(task_runs, tmp_path, bars):
    run = task_runs["embedding"].model_dir
    texts = ["the cat sat", "a dog ran far", "the film was good", "a red car", "paris in spring"]
    corpus = write(tmp_path / "corpus.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))
    assert main(predict_argv("embedding", run, corpus, tmp_path / "v.npy", action="encode")) == 0
    queries = write(tmp_path / "q.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts[:2]))
    flags = ["--corpus_file", str(tmp_path / "v.npy"), "--top_k", "2"]
    assert (
        main(predict_argv("embedding", run, queries, tmp_path / "hits.jsonl", *flags, action="retrieve")) == 0
    )
    pairs = write(
        tmp_path / "pairs.jsonl",
        "".join(json.dumps({"query": q, "positive": p}) + "\n" for q, p in zip(texts[:2], texts[2:4])),
    )
    mine = ["--corpus_file", str(corpus), "--range_min", "0", "--num_negatives", "1"]
    assert main(predict_argv("embedding", run, pairs, tmp_path / "mined.jsonl", *mine, action="mine")) == 0
    asked = {desc for desc, on in bars if on}
    assert {"encoding", "searching", "mining"} <= asked, bars


def test_predict_shows_progress_unless_disabled(task_runs, tmp_path, bars):
    run = task_runs["ner"]
    assert main(predict_argv("ner", run.model_dir, run.predict_file, tmp_path / "a.jsonl")) == 0
    assert ("tagging", True) in bars
    bars.clear()
    flags = ["--disable_tqdm", "true"]
    assert main(predict_argv("ner", run.model_dir, run.predict_file, tmp_path / "b.jsonl", *flags)) == 0
    assert bars and not any(on for _, on in bars)


def test_evaluate_in_a_log_file_prints_no_bars(task_runs, capfd, monkeypatch):
    monkeypatch.delenv("ENCODER_TASKS_DISABLE_TQDM", raising=False)
    run = task_runs["classification"]
    assert main(evaluate_argv("classification", run.model_dir, run.train_file)) == 0
    err = capfd.readouterr().err
    assert "it/s]" not in err and "\r" not in err, err[-500:]

"""``predict`` streams (issue 26, item 12): the input is read, predicted and written a chunk of rows
at a time, so memory stays flat in the input's size.

- every task writes the records it writes when the whole input is one chunk, with chunks of 3 rows
  (boundaries inside every input), and logs the same summary (counts, long inputs, warnings);
- the first records reach a pipe before the input has been fully written (read as it goes);
- an error in the middle of the input leaves an existing output file as it was, and no temporary
  file behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from encoder_tasks.cli import main
from tests.helpers import REPO, assert_close_records, error_line, predict_argv, read_jsonl, subprocess_env
from tests.samples import conll, squad_json

TEXTS = [
    "the film was good and fun",
    "I hate this awful film",
    "a cat sat on the mat and it was great fun",
    " ".join(["a long review of a film that goes on and on"] * 40),  # windowed: longer than max_length
    "the film was good and fun",  # repeated: across a chunk boundary
    "john smith lives in paris .",
    "acme inc works in new york city",
    "the dog played with a red ball",
]
MASKED = [t.replace("film", "[MASK]") if "film" in t else t.split(" ", 1)[0] + " [MASK]" for t in TEXTS]


def _jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _qa_rows() -> list[dict]:
    squad = squad_json(v2=True)
    rows = [
        {"id": q["id"], "question": q["question"], "context": p["context"]}
        for a in squad["data"]
        for p in a["paragraphs"]
        for q in p["qas"]
    ]
    return (rows * 3)[:8]


#: (case, task, action, input file name, its text, flags)
CASES = [
    ("classification-jsonl", "classification", "predict", "in.jsonl", _jsonl({"text": t} for t in TEXTS), ()),
    (
        "classification-csv",
        "classification",
        "predict",
        "in.csv",
        "text,other\n" + "".join(f'"{t}",x\n' for t in TEXTS),
        ("--batch_size", "2"),
    ),
    (
        "pair",
        "pair",
        "predict",
        "in.jsonl",
        _jsonl({"sentence1": a, "sentence2": b} for a, b in zip(TEXTS, reversed(TEXTS))),
        (),
    ),
    ("ner-text", "ner", "predict", "in.txt", "\n".join(TEXTS[:4]) + "\n\n" + "\n".join(TEXTS[4:]) + "\n", ()),
    ("ner-conll", "ner", "predict", "in.conll", conll(), ("--batch_size", "2")),
    (
        "ner-jsonl",
        "ner",
        "predict",
        "in.jsonl",
        _jsonl({"text": t} if i % 2 else {"tokens": t.split()} for i, t in enumerate(TEXTS)),
        (),
    ),
    ("qa-jsonl", "qa", "predict", "in.jsonl", _jsonl(_qa_rows()), ()),
    ("qa-squad", "qa", "predict", "in.json", json.dumps(squad_json(v2=True)), ()),
    (
        "embedding-pairs",
        "embedding",
        "predict",
        "in.tsv",
        "sentence1\tsentence2\n" + "".join(f"{a}\t{b}\n" for a, b in zip(TEXTS, TEXTS[2:] + TEXTS[:2])),
        (),
    ),
    ("embedding-encode", "embedding", "encode", "in.jsonl", _jsonl({"text": t} for t in TEXTS), ()),
    ("embedding-encode-npy", "embedding", "encode", "in.jsonl", _jsonl({"text": t} for t in TEXTS), ()),
    ("mlm-jsonl", "mlm", "predict", "in.jsonl", _jsonl({"text": t} for t in MASKED), ()),
    ("mlm-text", "mlm", "predict", "in.txt", "\n".join(MASKED + ["no mask at all"]) + "\n", ()),
]

#: What the summary says: the closing line and the warnings over the whole input.
SUMMARY_WORDS = ("wrote ", "longer than max_length", "hold no mask", "answered 'no answer'")


def _predict(run, case, action, name, text, flags, folder, capsys):
    folder.mkdir()
    inputs = folder / name
    inputs.write_text(text, encoding="utf-8")
    output = folder / ("out.npy" if case.endswith("npy") else "out.jsonl")
    capsys.readouterr()
    argv = predict_argv(run.task, run.model_dir, inputs, output, "--precision", "fp32", *flags, action=action)
    assert main(argv) == 0
    seen = capsys.readouterr()
    logged = [
        line.replace(str(folder), "DIR")
        for line in (seen.out + seen.err).splitlines()
        if any(word in line for word in SUMMARY_WORDS)
    ]
    if output.suffix == ".npy":
        ids = json.loads((folder / "out.ids.json").read_text())["ids"]
        return {"vectors": np.load(output).tolist(), "ids": ids}, logged
    return read_jsonl(output), logged


@pytest.mark.parametrize(
    ("case", "task", "action", "name", "text", "flags"), CASES, ids=[c[0] for c in CASES]
)
def test_chunks_of_three_rows_write_the_records_of_one_chunk(
    task_runs, tmp_path, capsys, monkeypatch, case, task, action, name, text, flags
):
    run = task_runs[task]
    monkeypatch.setenv("ENCODER_TASKS_CHUNK_ROWS", "100000")  # the whole input at once
    whole, whole_log = _predict(run, case, action, name, text, flags, tmp_path / "whole", capsys)
    monkeypatch.setenv("ENCODER_TASKS_CHUNK_ROWS", "3")
    chunked, chunked_log = _predict(run, case, action, name, text, flags, tmp_path / "chunked", capsys)
    assert len(whole["ids"] if isinstance(whole, dict) else whole) > 3  # chunk boundaries were crossed
    assert_close_records(chunked, whole)
    assert chunked_log == whole_log and any("wrote " in line for line in whole_log), whole_log
    if case == "classification-jsonl":
        assert any("1 of 8 inputs were longer than max_length" in line for line in chunked_log), chunked_log
        assert [r["line"] for r in chunked] == list(range(1, 9))


def test_the_first_records_reach_a_pipe_before_the_input_is_complete(task_runs, tmp_path):
    """The input comes through a named pipe whose writer stays open: the first chunk's records must
    come out on stdout while the rest of the input has not been written yet (a command that read its
    whole input first would wait for the end of the input forever; a watchdog ends it)."""
    run = task_runs["classification"]
    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)
    argv = predict_argv("classification", run.model_dir, fifo, "-")
    process = subprocess.Popen(
        [sys.executable, "-m", "encoder_tasks.cli", *argv],
        cwd=REPO,
        env=subprocess_env(ENCODER_TASKS_DISABLE_TQDM="1", ENCODER_TASKS_CHUNK_ROWS="2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    watchdog = threading.Timer(240, process.kill)  # a deadlock guard, not a timing assert
    watchdog.start()
    try:
        with open(fifo, "w", encoding="utf-8") as writer:  # waits for the command to open it
            writer.write(_jsonl({"text": t} for t in TEXTS[:2]))
            writer.flush()
            first = [json.loads(process.stdout.readline()) for _ in range(2)]  # the input is still open
            assert [r["line"] for r in first] == [1, 2]
            writer.write(_jsonl({"text": t} for t in TEXTS[2:5]))
        rest = [json.loads(line) for line in process.stdout.read().splitlines()]
        assert process.wait() == 0
    finally:
        watchdog.cancel()
        process.kill()
    assert [r["line"] for r in first + rest] == [1, 2, 3, 4, 5]
    assert [r["text"] for r in first + rest] == TEXTS[:5]


@pytest.mark.parametrize("task", ["classification", "ner", "mlm"])
def test_an_error_in_the_middle_leaves_the_old_output_untouched(
    task_runs, tmp_path, capsys, monkeypatch, task
):
    run = task_runs[task]
    monkeypatch.setenv("ENCODER_TASKS_CHUNK_ROWS", "3")
    inputs = tmp_path / "in.jsonl"
    inputs.write_text(_jsonl({"text": t} for t in MASKED[:7]) + '{"text": "cut off\n', encoding="utf-8")
    output = tmp_path / "out.jsonl"
    output.write_text("the old predictions\n")
    assert main(predict_argv(task, run.model_dir, inputs, output, "--overwrite_output")) != 0
    assert "in.jsonl line 8: not valid JSON" in error_line(capsys.readouterr().err)
    assert output.read_text() == "the old predictions\n"  # two chunks were predicted, none written over it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]  # no temporary file left


def test_an_error_in_the_middle_leaves_no_new_output(task_runs, tmp_path, capsys, monkeypatch):
    run = task_runs["embedding"]
    monkeypatch.setenv("ENCODER_TASKS_CHUNK_ROWS", "2")
    inputs = tmp_path / "in.csv"
    inputs.write_text("text,id\n" + "".join(f"{t},{i}\n" for i, t in enumerate(TEXTS[:5])) + " ,9\n")
    for output in (tmp_path / "vectors.npy", tmp_path / "vectors.jsonl"):
        argv = predict_argv("embedding", run.model_dir, inputs, output, action="encode")
        assert main(argv) != 0
        assert "in.csv line 7: column 'text' is empty" in error_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]

"""One tiny trained run directory per task (and the files they predict on), built once per session.

The server, the Ray engine and the int8 quantizer are tested against these: real run directories
saved by the real CLI, each a few optimiser steps on the tiny data of :mod:`tests.samples`.

Example (a session fixture in tests/conftest.py): ``task_runs["ner"].model_dir``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import FAST_QA, FAST_TRAINING, run_train, write
from tests.samples import (
    MLM_WORDS,
    REVIEWS_CSV,
    STS_COLUMNS,
    conll,
    scored_pairs_tsv,
    squad_json,
    sts_lines,
)


@dataclass(frozen=True)
class TaskRun:
    """A trained run: its directory, its training file, and inputs for predict (file and JSON records)."""

    task: str
    model_dir: Path
    train_file: Path
    predict_file: Path
    records: list[dict]


def _mlm_docs() -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(MLM_WORDS) for _ in range(rng.randint(4, 20))) for _ in range(40)]


def build_task_runs(root: Path, model: str) -> dict[str, TaskRun]:
    """Train every task on its tiny data under ``root``; returns ``{task: TaskRun}``."""
    runs = {}
    texts = [
        "the film was good and fun",
        "I hate this awful film",
        "a cat sat on the mat and it was great fun",
    ]

    data = write(root / "cls" / "train.csv", REVIEWS_CSV)
    inputs = write(root / "cls" / "inputs.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))
    run_train("classification", model, data, root / "cls" / "run", *FAST_TRAINING)
    runs["classification"] = TaskRun(
        "classification", root / "cls" / "run", data, inputs, [{"text": t} for t in texts]
    )

    data = write(root / "pair" / "train.tsv", "\n".join(sts_lines()) + "\n")
    pairs = [("the film was good", "the movie was good"), ("big red dog", "john lives in paris")]
    inputs = write(
        root / "pair" / "inputs.jsonl",
        "".join(json.dumps({"sentence1": a, "sentence2": b}) + "\n" for a, b in pairs),
    )
    # [CLS]-pooled, as these runs were before --pooling auto chose mean for regression heads:
    # the int8 guardrail tests need a tiny model whose metric int8 moves, and this one's does.
    run_train("pair", model, data, root / "pair" / "run", *STS_COLUMNS, *FAST_TRAINING, "--pooling", "cls")
    runs["pair"] = TaskRun(
        "pair", root / "pair" / "run", data, inputs, [{"text": a, "text_pair": b} for a, b in pairs]
    )

    data = write(root / "ner" / "train.conll", conll())
    ner_texts = ["john smith lives in paris .", "acme inc works in new york city", "the cat sat"]
    inputs = write(root / "ner" / "inputs.txt", "\n".join(ner_texts) + "\n")
    run_train("ner", model, data, root / "ner" / "run", *FAST_TRAINING, "--crf")
    runs["ner"] = TaskRun("ner", root / "ner" / "run", data, inputs, [{"text": t} for t in ner_texts])

    squad = squad_json(v2=True)
    data = write(root / "qa" / "train.json", json.dumps(squad))
    questions = [
        {"id": q["id"], "question": q["question"], "context": p["context"]}
        for a in squad["data"]
        for p in a["paragraphs"]
        for q in p["qas"]
    ]
    run_train("qa", model, data, root / "qa" / "run", *FAST_QA, "--version_2_with_negative", "true")
    runs["qa"] = TaskRun("qa", root / "qa" / "run", data, data, questions)

    data = write(root / "emb" / "train.tsv", scored_pairs_tsv())
    inputs = write(root / "emb" / "inputs.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))
    run_train("embedding", model, data, root / "emb" / "run", *FAST_TRAINING)
    runs["embedding"] = TaskRun("embedding", root / "emb" / "run", data, inputs, [{"text": t} for t in texts])

    data = write(root / "mlm" / "train.txt", "\n".join(_mlm_docs()) + "\n")
    masked = ["the [MASK] sat on the mat", "john [MASK] in paris", "no mask here"]
    inputs = write(root / "mlm" / "inputs.txt", "\n".join(masked) + "\n")
    run_train("mlm", model, data, root / "mlm" / "run", *FAST_TRAINING, "--max_length", "32")
    runs["mlm"] = TaskRun("mlm", root / "mlm" / "run", data, inputs, [{"text": t} for t in masked])
    return runs

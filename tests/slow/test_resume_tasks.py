"""Every task resumes exactly: a run continued from one of its own checkpoints ends with the
same weights as the run that was never interrupted (bit-exact on CPU, fixed seed).

The kill itself is tested on classification (``tests/cli/test_resume.py``); here each task's own parts
(collators that draw random masks, task samplers, task Trainers) are checked to restore
their state. Each case trains a tiny model twice, so the file is in the slow tier.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from encoder_tasks.cli import main
from encoder_tasks.registry import TASKS
from tests.helpers import read_json, train_argv, write
from tests.samples import conll, cycled_docs, squad_json

COMMON = ["--num_train_epochs", "3", "--per_device_train_batch_size", "4", "--learning_rate", "1e-3"]
COMMON += ["--logging_steps", "1", "--save_strategy", "steps", "--save_total_limit", "10", "--seed", "5"]
COMMON += ["--report_to", "none", "--mixed_precision", "no", "--save_steps", "2"]


def _classification(tmp):
    rows = [
        f"{w} film number {i},{'pos' if w == 'good' else 'neg'}" for i in range(6) for w in ("good", "bad")
    ]
    return write(tmp / "train.csv", "\n".join(["text,label", *rows]) + "\n"), []


def _ner(tmp):
    return write(tmp / "train.conll", conll()), ["--max_length", "16"]


def _qa(tmp):
    return write(tmp / "train.json", json.dumps(squad_json())), ["--max_length", "24", "--doc_stride", "6"]


def _mlm(tmp):
    # Masks are drawn from the RNG at collation: a resumed run must draw the same ones.
    return write(tmp / "train.txt", "\n".join(cycled_docs(7, 5)) + "\n"), ["--max_length", "16"]


def _sentence_pairs(tmp):
    words = "the a film movie good bad cat dog sat mat john lives paris".split()
    lines = ["sentence1\tsentence2\tscore"]
    for i in range(12):
        first = " ".join(words[(i + j) % len(words)] for j in range(3 + i % 4))
        second = " ".join(words[(2 * i + j) % len(words)] for j in range(2 + i % 5))
        lines.append(f"{first}\t{second}\t{(i * 7) % 5 + 0.5}")
    return write(tmp / "pairs.tsv", "\n".join(lines) + "\n")


def _pair(tmp):
    columns = ["--text_column", "sentence1", "--text_pair_column", "sentence2", "--label_column", "score"]
    return _sentence_pairs(tmp), columns


def _embedding(tmp):
    # The duplicate-free batch sampler of in-batch-negative losses must restore its order too.
    return _sentence_pairs(tmp), ["--loss", "mnrl"]


DATA = {
    "classification": _classification,
    "ner": _ner,
    "qa": _qa,
    "mlm": _mlm,
    "pair": _pair,
    "embedding": _embedding,
}


def _steps(out):
    state = read_json(
        max(out.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    )
    return state["global_step"], [(e["step"], e["loss"]) for e in state["log_history"] if "loss" in e]


@pytest.mark.parametrize("task", list(DATA))
def test_task_resumes_exactly(task, tiny_bert, tmp_path):
    if task not in TASKS:
        pytest.skip(f"task {task} is not registered")
    data, flags = DATA[task](tmp_path)
    reference = tmp_path / "reference"

    def argv(out):
        return train_argv(task, tiny_bert, data, out, *flags, *COMMON, validation=data)

    assert main(argv(reference)) == 0
    total, reference_losses = _steps(reference)
    assert total >= 4, "too few steps to resume in the middle"
    # A crash after checkpoint-(total/2 rounded to the save interval): only that checkpoint survives.
    middle = f"checkpoint-{(total // 2) // 2 * 2}"
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(reference / middle, resumed / middle)
    assert main([*argv(resumed), "--resume"]) == 0
    want, got = load_file(str(reference / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert want.keys() == got.keys()
    assert [k for k in want if not torch.equal(want[k], got[k])] == []
    assert _steps(resumed) == (total, reference_losses)

"""Every task resumes exactly: a run continued from one of its own checkpoints ends with the
same weights as the run that was never interrupted (bit-exact on CPU, fixed seed).

The kill itself is tested on classification (``test_resume.py``); here each task's own parts
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
from tests.conftest import write

COMMON = [
    "--num_train_epochs",
    "3",
    "--per_device_train_batch_size",
    "4",
    "--learning_rate",
    "1e-3",
    "--logging_steps",
    "1",
    "--save_strategy",
    "steps",
    "--save_total_limit",
    "10",
    "--seed",
    "5",
    "--report_to",
    "none",
    "--mixed_precision",
    "no",
]


def _classification(tmp):
    rows = ["text,label"] + [
        f"{w} film number {i},{'pos' if w == 'good' else 'neg'}" for i in range(6) for w in ("good", "bad")
    ]
    data = write(tmp / "train.csv", "\n".join(rows) + "\n")
    return ["--train_file", str(data), "--validation_file", str(data)]


def _ner(tmp):
    from tests.recipes.test_cli_ner import conll

    data = write(tmp / "train.conll", conll())
    return ["--train_file", str(data), "--validation_file", str(data), "--max_length", "16"]


def _qa(tmp):
    from tests.recipes.test_cli_qa import squad_json

    data = write(tmp / "train.json", json.dumps(squad_json()))
    return [
        "--train_file",
        str(data),
        "--validation_file",
        str(data),
        "--max_length",
        "24",
        "--doc_stride",
        "6",
    ]


def _mlm(tmp):
    # Masks are drawn from the RNG at collation: a resumed run must draw the same ones.
    words = "the a film movie good bad great cat dog sat mat john smith lives in paris".split()
    docs = [" ".join(words[(i * 7 + j) % len(words)] for j in range(5 + i % 9)) for i in range(40)]
    data = write(tmp / "train.txt", "\n".join(docs) + "\n")
    return ["--train_file", str(data), "--validation_file", str(data), "--max_length", "16"]


def _sentence_pairs(tmp):
    words = "the a film movie good bad cat dog sat mat john lives paris".split()
    lines = ["sentence1\tsentence2\tscore"]
    for i in range(12):
        first = " ".join(words[(i + j) % len(words)] for j in range(3 + i % 4))
        second = " ".join(words[(2 * i + j) % len(words)] for j in range(2 + i % 5))
        lines.append(f"{first}\t{second}\t{(i * 7) % 5 + 0.5}")
    return write(tmp / "pairs.tsv", "\n".join(lines) + "\n")


def _pair(tmp):
    data = _sentence_pairs(tmp)
    return ["--train_file", str(data), "--validation_file", str(data), "--text_column", "sentence1"] + [
        "--text_pair_column",
        "sentence2",
        "--label_column",
        "score",
    ]


def _embedding(tmp):
    # The duplicate-free batch sampler of in-batch-negative losses must restore its order too.
    data = _sentence_pairs(tmp)
    return ["--train_file", str(data), "--validation_file", str(data), "--loss", "mnrl"]


DATA = {
    "classification": _classification,
    "ner": _ner,
    "qa": _qa,
    "mlm": _mlm,
    "pair": _pair,
    "embedding": _embedding,
}


def _steps(out):
    state = json.loads(
        max(
            out.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1])
        ).read_text()
    )
    return state["global_step"], [(e["step"], e["loss"]) for e in state["log_history"] if "loss" in e]


@pytest.mark.slow
@pytest.mark.parametrize("task", list(DATA))
def test_task_resumes_exactly(task, tiny_bert, tmp_path):
    if task not in TASKS:
        pytest.skip(f"task {task} is not registered")
    data_flags = DATA[task](tmp_path)
    reference = tmp_path / "reference"
    argv = [task, "train", "--model_name_or_path", tiny_bert, *data_flags, *COMMON, "--save_steps", "2"]
    assert main([*argv, "--output_dir", str(reference)]) == 0
    total, reference_losses = _steps(reference)
    assert total >= 4, "too few steps to resume in the middle"
    # A crash after checkpoint-(total/2 rounded to the save interval): only that checkpoint survives.
    middle = f"checkpoint-{(total // 2) // 2 * 2}"
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(reference / middle, resumed / middle)
    assert main([*argv, "--output_dir", str(resumed), "--resume"]) == 0
    want, got = load_file(str(reference / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert want.keys() == got.keys()
    assert [k for k in want if not torch.equal(want[k], got[k])] == []
    assert _steps(resumed) == (total, reference_losses)

"""``--max_tokens_per_batch`` through the real CLI: runs learn with it, resume exactly, and a task
that cannot take it (embedding) says so.

Learning uses the separable data and the ``learner`` model of ``test_learning``; texts here vary
in length (2 to 40 words) so the batches do too. Margins at 128 tokens, seeds 1/2/3 (the tests run
seed 1): classification accuracy 1.0/1.0/1.0 and last-to-first epoch loss 0.04/0.03/0.05 (0.9 and
0.3 asked), NER-CRF strict F1 1.0/1.0/0.96 (0.9), QA F1 100/100/81 (80), MLM masked accuracy
0.43/0.65/0.96 (0.21).
"""

from __future__ import annotations

import random
import shutil

import pytest
import torch
from safetensors.torch import load_file

from encoder_tasks.cli import main
from tests.cli import test_learning
from tests.cli.test_learning import CASES, KEYWORDS, QUIET, SEED, fillers, insert
from tests.helpers import error_line, read_json, read_jsonl, resume_csv, run_train, train_argv, write
from tests.samples import scored_pairs_tsv

learner = test_learning.learner  # the same fixture: tiny_bert at a larger initializer_range


def varied_keyword_rows(seed: int, n: int) -> str:
    """``text,label``: 1 to 40 filler words around one keyword, whose group is the label."""
    rng = random.Random(seed)
    rows = ["text,label"]
    for _ in range(n):
        label = rng.choice(sorted(KEYWORDS))
        words = insert(rng, fillers(rng, 1, rng.choice([4, 12, 40])), [rng.choice(KEYWORDS[label])])
        rows.append(" ".join(words) + f",{label}")
    return "\n".join(rows) + "\n"


@pytest.fixture(autouse=True)
def no_plots(monkeypatch):
    monkeypatch.setattr("encoder_tasks.reporting.plots.plot_run", lambda *args, **kwargs: [])


def test_classification_learns_with_token_budget_batches(learner, tmp_path, capsys):
    train = write(tmp_path / "train.csv", varied_keyword_rows(SEED, 256))
    dev = write(tmp_path / "dev.csv", varied_keyword_rows(SEED + 1, 48))
    out = tmp_path / "run"
    flags = [*QUIET, "--logging_steps", "1", "--seed", str(SEED), "--learning_rate", "5e-3"]
    flags += ["--num_train_epochs", "4", "--max_tokens_per_batch", "128"]
    metrics = run_train("classification", learner, train, out, *flags, validation=dev)
    printed = capsys.readouterr().out
    assert "training batches of at most 128 tokens" in printed
    assert metrics["eval_accuracy"] >= 0.9, metrics
    losses = [row["loss"] for row in read_jsonl(out / "log.jsonl") if "loss" in row]
    steps = len(losses) // 4
    assert sum(losses[-steps:]) < 0.3 * sum(losses[:steps])  # last epoch against the first


@pytest.mark.parametrize("name", ["ner-crf", "qa", "mlm"])
def test_other_tasks_learn_with_token_budget_batches(learner, tmp_path, name):
    """Each task's own collator (word maps, answer spans, masks) under a budget; MLM's loss is a
    mean over the masked tokens of the step, whatever the batch sizes."""
    case = CASES[name]
    train = write(tmp_path / f"train.{case.suffix}", case.rows(SEED, case.train_rows))
    dev = write(tmp_path / f"dev.{case.suffix}", case.rows(SEED + 1, 48))
    flags = [*QUIET, "--seed", str(SEED), "--learning_rate", "5e-3", *case.flags]
    # 128 tokens: about the case's own batch at its texts' length (QA windows of 16 tokens: 8), so
    # about its number of steps; at 256 (half the steps) QA reached F1 37 in the 6 epochs it then had.
    flags += ["--num_train_epochs", str(case.epochs), "--max_tokens_per_batch", "128"]
    metrics = run_train(case.task, learner, train, tmp_path / "run", *flags, validation=dev)
    assert metrics[case.metric] >= case.threshold, metrics


def test_token_budget_run_resumes_exactly(tiny_bert, tmp_path):
    """A run resumed mid-epoch from a checkpoint ends with the uninterrupted run's weights and
    per-step losses (gradient accumulation over batches of different sizes included)."""
    data = resume_csv(tmp_path / "train.csv", rows=40)
    flags = ["--num_train_epochs", "3", "--max_tokens_per_batch", "48", "--gradient_accumulation_steps", "2"]
    flags += [
        "--learning_rate",
        "1e-3",
        "--logging_steps",
        "1",
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
    ]
    flags += ["--save_total_limit", "50", "--seed", "11", "--report_to", "none", "--mixed_precision", "no"]
    reference = tmp_path / "reference"
    assert main(train_argv("classification", tiny_bert, data, reference, *flags)) == 0
    steps = sorted(int(p.name.split("-")[1]) for p in reference.glob("checkpoint-*"))
    last = read_json(reference / f"checkpoint-{steps[-1]}" / "trainer_state.json")
    per_epoch = last["max_steps"] // 3
    assert per_epoch >= 3, last  # room for a checkpoint inside an epoch
    middle = next(s for s in steps if s > per_epoch and s % per_epoch)  # inside epoch 1
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(reference / f"checkpoint-{middle}", resumed / f"checkpoint-{middle}")
    assert main([*train_argv("classification", tiny_bert, data, resumed, *flags), "--resume"]) == 0

    want, got = load_file(str(reference / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert [k for k in want if not torch.equal(want[k], got[k])] == []

    def losses(run):
        state = read_json(run / f"checkpoint-{steps[-1]}" / "trainer_state.json")
        return [(e["step"], e["loss"], e["grad_norm"]) for e in state["log_history"] if "loss" in e]

    assert losses(resumed) == losses(reference) and len(losses(reference)) == last["max_steps"]


def test_embedding_refuses_a_token_budget(tiny_bert, tmp_path, capsys):
    data = write(tmp_path / "pairs.tsv", scored_pairs_tsv())
    argv = train_argv("embedding", tiny_bert, data, tmp_path / "run", "--max_tokens_per_batch", "512")
    assert main([*argv, "--report_to", "none"]) == 2
    line = error_line(capsys.readouterr().err)
    assert "--max_tokens_per_batch does not apply to embedding" in line and "negatives" in line
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_search_refuses_a_batch_size_space_under_a_token_budget(tiny_bert, tmp_path, capsys):
    data = resume_csv(tmp_path / "train.csv", rows=20)
    flags = ["--max_tokens_per_batch", "64", "--search_batch_size", "8,16", "--n_trials", "2"]
    argv = train_argv(
        "classification", tiny_bert, data, tmp_path / "search", *flags, validation=data, action="search"
    )
    assert main(argv) == 2
    line = error_line(capsys.readouterr().err)
    assert "--search_batch_size has no effect with --max_tokens_per_batch" in line
    assert not (tmp_path / "search").exists()

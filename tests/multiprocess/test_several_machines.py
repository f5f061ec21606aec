"""Two "machines" on one host: `accelerate launch --num_machines 2 --machine_rank 0/1` (gloo).

Each machine is its own ``accelerate launch`` of ``recipes/accelerate/multi-node-cpu.yaml``,
started concurrently and run from its own working directory with the same RELATIVE
``--output_dir``, as two machines with their own disks would: only machine 0 (global rank 0)
writes the run, so machine 1's directory stays empty; with ``--save_on_each_node`` each machine
keeps its own copy of the checkpoints and resumes from it. The data and the model are given by
absolute paths (on real machines: a copy on each, at the same path). docs/several-machines.md
is the guide.
"""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import REPO, free_port, read_json, run_train, subprocess_env, train_argv

CONFIG = REPO / "recipes" / "accelerate" / "multi-node-cpu.yaml"
#: 28 rows at a global batch of 4: 7 steps per epoch, 2 epochs. No dropout (a tiny model
#: without it, ``--classifier_dropout 0``) and batches dealt in order (``sequential``): training
#: is then a function of the batches alone.
FLAGS = ["--num_train_epochs", "2", "--learning_rate", "1e-3", "--seed", "3", "--mixed_precision", "no"]
FLAGS += ["--train_sampling_strategy", "sequential", "--classifier_dropout", "0"]
FLAGS += ["--per_device_eval_batch_size", "2", "--logging_steps", "1", "--report_to", "none"]


@pytest.fixture
def still_bert(tiny_bert, tmp_path):
    """The tiny BERT without dropout."""
    model = shutil.copytree(tiny_bert, tmp_path / "still-bert")
    config = json.loads((model / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (model / "config.json").write_text(json.dumps(config))
    return model


@pytest.fixture
def data(reviews):
    """``(train, dev)``: 28 training rows; 8 evaluation rows, so that evaluation batches of 2
    are all full and the mean loss over them is the same however they are dealt."""
    train, dev = reviews
    rows = dev.read_text().splitlines()
    dev.write_text("\n".join([*rows, rows[1]]) + "\n")
    return train, dev


def two_machines(homes, argv: list[str]) -> None:
    """Machine 0 and machine 1, each an ``accelerate launch`` of the CLI in its own ``home``."""
    where = ["--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port())]
    procs = []
    for rank, home in enumerate(homes):
        home.mkdir(exist_ok=True)
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIG)]
        cmd += ["--machine_rank", str(rank), *where, "--dynamo_backend", "no"]
        cmd += ["-m", "encoder_tasks.cli", *argv]
        env = subprocess_env(OMP_NUM_THREADS="1")
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        procs.append(subprocess.Popen(cmd, cwd=home, env=env, **pipes))
    errors = [proc.communicate(timeout=600)[1] for proc in procs]
    failed = [f"machine {n}:\n{errors[n][-3000:]}" for n, proc in enumerate(procs) if proc.returncode]
    assert not failed, "\n".join(reversed(failed))  # machine 1's error usually explains machine 0's


def names(folder, pattern: str = "*") -> list[str]:
    return sorted(p.name for p in folder.glob(pattern))


def differing(model_a, model_b, atol: float = 0.0) -> list[str]:
    """The weights of two saved models that differ by more than ``atol``."""
    a, b = load_file(str(model_a / "model.safetensors")), load_file(str(model_b / "model.safetensors"))
    return [k for k in a if not torch.allclose(a[k], b[k], rtol=0, atol=atol)]


BOTH_RNG_STATES = ["rng_state_0.pth", "rng_state_1.pth"]


def test_two_machines_train_as_one_process_and_only_machine_0_writes(still_bert, data, tmp_path):
    """Same scores as one process on the same GLOBAL batch: batch 4 on one process against
    batch 2 on each of two machines. Step k sees rows 4k..4k+3 in both runs (on two machines,
    two rows each, their gradients averaged), so the runs differ only by float summation order."""
    train, dev = data
    flags = [*FLAGS, "--save_strategy", "epoch"]
    batch = "--per_device_train_batch_size"
    alone = tmp_path / "one"
    one = run_train("classification", still_bert, train, alone, *flags, batch, "4", validation=dev)

    homes = [tmp_path / "machine0", tmp_path / "machine1"]
    argv = train_argv("classification", still_bert, train, "run", *flags, batch, "2", validation=dev)
    two_machines(homes, argv)

    run = homes[0] / "run"
    two = read_json(run / "metrics.json")
    assert names(run, "checkpoint-*") == names(alone, "checkpoint-*") == ["checkpoint-14", "checkpoint-7"]
    # Every process's RNG state is in machine 0's checkpoint, though machine 1 cannot see its disk.
    assert names(run / "checkpoint-7", "rng_state*") == BOTH_RNG_STATES
    assert (run / "model.safetensors").is_file() and (run / "log.jsonl").is_file()
    assert not [name for name in names(run) if name.startswith(("tmp-", "old-"))]
    assert names(homes[1], "**/*") == []  # machine 1 wrote nothing at all

    assert two["eval_examples"] == one["eval_examples"] == 8
    for key in ("train_loss", "eval_loss", "eval_accuracy", "eval_macro_f1"):
        assert two[key] == pytest.approx(one[key], abs=1e-5), key  # measured: within 6e-8
    assert differing(alone, run, atol=1e-5) == []  # measured: 1.2e-7 at most


def test_machines_with_own_disks_keep_their_checkpoints_and_resume(still_bert, data, tmp_path):
    """``--save_on_each_node``: each machine writes the checkpoints and the model on its own disk
    (machine 0 alone the metrics and reports); killed after step 9, each resumes from its own
    copy and the run ends with the uninterrupted run's weights on both."""
    train, dev = data
    flags = [*FLAGS, "--per_device_train_batch_size", "2", "--save_on_each_node"]
    flags += ["--save_strategy", "steps", "--save_steps", "3", "--save_total_limit", "10"]
    argv = train_argv("classification", still_bert, train, "run", *flags, validation=dev)
    whole = [tmp_path / "whole0", tmp_path / "whole1"]
    two_machines(whole, argv)
    for home in whole:
        steps = sorted(int(name.split("-")[1]) for name in names(home / "run", "checkpoint-*"))
        assert steps == [3, 6, 9, 12, 14]
        assert names(home / "run" / "checkpoint-9", "rng_state*") == BOTH_RNG_STATES
    assert (whole[0] / "run" / "metrics.json").is_file()
    assert not (whole[1] / "run" / "metrics.json").exists()

    resumed = [tmp_path / "resumed0", tmp_path / "resumed1"]
    for source, home in zip(whole, resumed):  # the kill: only checkpoint-9 survives, on each disk
        shutil.copytree(source / "run" / "checkpoint-9", home / "run" / "checkpoint-9")
    two_machines(resumed, [*argv, "--resume"])
    for home in resumed:
        assert differing(whole[0] / "run", home / "run") == [], home.name  # bit for bit
    assert read_json(resumed[0] / "run" / "metrics.json")["train_resumed_from_step"] == 9

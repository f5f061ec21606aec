"""Two processes, each with half of a global batch, train the bi-encoder exactly as one process
on the whole batch (issue 14, item 6): same loss, same gradients after DDP's averaging."""

import json

import pytest

#: float32 arithmetic in a different order (per-process sums, the all-reduce) may differ this much.
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def results(tiny_bert, tmp_path_factory):
    """What the two gloo processes of ``global_batch_worker.run`` measured, per case."""
    import torch.multiprocessing as mp

    from tests.multiprocess.global_batch_worker import run

    root = tmp_path_factory.mktemp("global-batch")
    out = root / "results.json"
    # spawn, not fork: a forked child inherits OpenMP/gloo threads and can hang
    mp.spawn(run, args=(2, str(root / "init"), tiny_bert, str(out)), nprocs=2, join=True)
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    "case",
    [
        "mnrl",
        "mnrl_hard_negatives",
        "mnrl_symmetric",
        "mnrl_uneven",
        "mnrl_symmetric_uneven_hard_negatives",
        "cosine",
        "mnrl_training_3_steps",
    ],
)
def test_two_processes_match_one_process_on_the_global_batch(results, case):
    found = results[case]
    assert found["grad_scale"] > 1e-3, "the gradients are not trivially zero"
    assert found["loss"] <= TOLERANCE, found
    assert found["grad"] <= TOLERANCE, found


def test_cosent_scores_within_each_process(results):
    """CoSENT compares pairs within each process's batch (as sentence-transformers does): the
    step is the mean of the per-process losses and gradients, which the docs say."""
    found = results["cosent_per_device"]
    assert found["grad_scale"] > 1e-3
    assert found["loss"] <= TOLERANCE and found["grad"] <= TOLERANCE, found


def test_two_process_training_matches_one_process(tiny_bert, tmp_path):
    """The real CLI: `accelerate launch` on 2 processes of 3 rows logs the same loss and gradient
    norm, step by step, as one process of 6 rows (dropout off and fp32, so both compute one
    function: bf16 autocast rounds differently for different batch shapes)."""
    import shutil

    from tests.helpers import launch, read_jsonl, run_train, write

    model = shutil.copytree(tiny_bert, tmp_path / "no-dropout")
    config = json.loads((model / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (model / "config.json").write_text(json.dumps(config))
    words = "the a film movie cat dog john paris london good bad big red blue new york city one two".split()
    rows = [
        f"{words[i]} {words[(i + 1) % 19]},{words[(i + 2) % 19]} {words[(i + 7) % 19]} {i}" for i in range(18)
    ]
    data = write(tmp_path / "pairs.csv", "anchor,positive\n" + "\n".join(rows) + "\n")
    flags = ["--num_train_epochs", "1", "--save_strategy", "no", "--report_to", "none"]
    flags += ["--seed", "1", "--logging_steps", "1", "--learning_rate", "1e-3", "--mixed_precision", "no"]
    run_train("embedding", model, data, tmp_path / "one", *flags, "--per_device_train_batch_size", "6")
    two = ["embedding", "train", "--model_name_or_path", str(model), "--train_file", str(data)]
    launch([*two, "--output_dir", str(tmp_path / "two"), *flags, "--per_device_train_batch_size", "3"])
    logs = [[r for r in read_jsonl(tmp_path / run / "log.jsonl") if "loss" in r] for run in ("one", "two")]
    assert [r["step"] for r in logs[0]] == [r["step"] for r in logs[1]] == [1, 2, 3]  # 18 rows / 6
    for one, two in zip(*logs):
        seen = f"step {one['step']}: loss {one['loss']} vs {two['loss']}, grad_norm {one['grad_norm']} vs {two['grad_norm']}"
        assert abs(one["loss"] - two["loss"]) <= TOLERANCE, seen
        assert abs(one["grad_norm"] - two["grad_norm"]) <= TOLERANCE * max(1.0, one["grad_norm"]), seen

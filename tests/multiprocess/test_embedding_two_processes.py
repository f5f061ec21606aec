"""Bi-encoder training under `accelerate launch` with 2 CPU processes, and the gather of
in-batch negatives across two gloo processes (make test-multiprocess)."""

from encoder_tasks.tasks.embedding.samplers import DuplicateFreeBatchSampler
from tests.helpers import launch, read_json, read_jsonl, train_argv, write

WORDS = "the a film movie cat dog john paris london good bad big red blue new york city one two".split()


def test_two_processes_train_on_shared_global_batches(tiny_bert, tmp_path):
    rows = [
        (
            f"{WORDS[i]} {WORDS[(i + 1) % len(WORDS)]}",
            f"{WORDS[(i + 2) % len(WORDS)]} {WORDS[(i + 7) % len(WORDS)]} {i}",
        )
        for i in range(18)
    ]
    rows += [("cat dog", "the a 0"), ("new york", "the a 0")]  # repeated texts: kept apart
    data = write(tmp_path / "pairs.csv", "anchor,positive\n" + "\n".join(f"{a},{p}" for a, p in rows) + "\n")
    out = tmp_path / "run"
    flags = ["--num_train_epochs", "1", "--per_device_train_batch_size", "3", "--save_strategy", "no"]
    flags += ["--report_to", "none", "--seed", "1", "--logging_steps", "1"]
    launch(train_argv("embedding", tiny_bert, data, out, *flags, validation=data))
    metrics = read_json(out / "metrics.json")
    # 18 distinct anchors (two are repeated) are the queries
    assert metrics["eval_queries"] == 18 and 0 <= metrics["eval_recall@1"] <= 1
    # one optimizer step per *global* batch of 2 x 3 rows (each process takes its half)
    texts = [(a, p) for a, p in rows]
    expected = len(DuplicateFreeBatchSampler(texts, 3, seed=1, world_size=2).global_batches(0))
    steps = [r["step"] for r in read_jsonl(out / "log.jsonl") if "loss" in r]
    assert max(steps) == expected
    # every process saw real tokens: the count is the sum over both
    assert metrics["train_num_input_tokens_seen"] > 0 and (out / "modules.json").is_file()


def test_gather_across_two_processes(tmp_path):
    """Two gloo processes: rows in rank order, gradients reach every process, loss = the one-process formula."""
    import torch.multiprocessing as mp

    from tests.multiprocess.gather_worker import check_gather

    # spawn, not fork: a forked child inherits OpenMP/gloo threads and can hang
    mp.spawn(check_gather, args=(2, str(tmp_path / "init")), nprocs=2, join=True)

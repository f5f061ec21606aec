"""Every task under `accelerate launch` with two CPU processes (make test-multiprocess).

Checks per task: training completes and only the main process writes (one set of files,
no temporary leftovers); the saved model evaluated on one and on two processes gives the
same scores over the same number of examples, so nothing is dropped or scored twice when
the last batch is padded. (Classification, QA and embedding have their own files.)
"""

import pytest

from tests.helpers import evaluate_argv, launch, read_json, train_argv, write
from tests.samples import STS_COLUMNS, conll, cycled_docs, sts_lines

COMMON = ["--mixed_precision", "no", "--per_device_eval_batch_size", "2", "--seed", "3"]


def _train_then_evaluate_twice(task, model, train, dev, out, extra=()):
    flags = ["--num_train_epochs", "1", "--per_device_train_batch_size", "4", "--save_strategy", "epoch"]
    launch(train_argv(task, model, train, out, *flags, *COMMON, *extra, validation=dev))
    assert (out / "metrics.json").is_file() and (out / "model.safetensors").is_file()
    assert len(list(out.glob("checkpoint-*"))) == 1
    assert not list(out.glob("tmp-checkpoint-*")) and not list(out.glob(".*.tmp*"))
    results = []
    for processes in (1, 2):
        launch(evaluate_argv(task, out, dev, *COMMON, *extra), processes=processes)
        files = sorted((out / "eval").glob("*.json"), key=lambda p: p.stat().st_mtime)
        results.append(read_json(files[-1]))
    return results


def _same_scores(one, two):
    """Every score and count equal; timings and the batch-averaged loss may differ."""
    skip = ("runtime", "per_second", "loss", "data", "epoch", "num_input_tokens_seen", "_time")
    keys = [k for k in one if not any(part in k for part in skip)]
    assert len(keys) >= 3, keys
    for key in keys:
        if isinstance(one[key], float):
            assert one[key] == pytest.approx(two[key], abs=1e-6), key
        else:
            assert one[key] == two[key], key


def test_ner_two_processes(tiny_bert, tmp_path):
    train = write(tmp_path / "train.conll", conll())
    # An odd number of sentences, so the second process gets a padded duplicate.
    dev = write(
        tmp_path / "dev.conll",
        conll().split("\n\n", 1)[0] + "\n\n" + "\n\n".join(conll().split("\n\n")[1:8]) + "\n",
    )
    one, two = _train_then_evaluate_twice("ner", tiny_bert, train, dev, tmp_path / "run")
    _same_scores(one, two)


def test_mlm_two_processes(tiny_bert, tmp_path):
    """Evaluation masks are seeded per sequence, so 1 and 2 processes mask the same tokens."""
    docs = cycled_docs(5, 6)
    train = write(tmp_path / "train.txt", "\n".join(docs) + "\n")
    dev = write(tmp_path / "dev.txt", "\n".join(docs[:7]) + "\n")
    one, two = _train_then_evaluate_twice(
        "mlm", tiny_bert, train, dev, tmp_path / "run", extra=["--max_length", "16"]
    )
    _same_scores(one, two)


def test_pair_two_processes(tiny_bert, tmp_path):
    """Cross-encoder regression (STS-B layout): Pearson/Spearman alike on 1 and 2 processes."""
    lines = sts_lines()
    train = write(tmp_path / "sts-train.csv", "\n".join(lines) + "\n")
    dev = write(tmp_path / "sts-dev.csv", "\n".join(lines[:7]) + "\n")
    one, two = _train_then_evaluate_twice("pair", tiny_bert, train, dev, tmp_path / "run", extra=STS_COLUMNS)
    _same_scores(one, two)

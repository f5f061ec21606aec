"""Every task under `accelerate launch` with two CPU processes (make test-multiprocess).

Checks per task: training completes and only the main process writes (one set of files,
no temporary leftovers); the saved model evaluated on one and on two processes gives the
same scores over the same number of examples, so nothing is dropped or scored twice when
the last batch is padded. (Classification, QA and embedding have their own files.)
"""

import json

import pytest

from tests.conftest import write
from tests.multiprocess.test_classification_two_processes import launch
from tests.recipes.test_cli_ner import conll

pytestmark = pytest.mark.multiprocess

COMMON = ["--mixed_precision", "no", "--per_device_eval_batch_size", "2", "--seed", "3"]


def _train_then_evaluate_twice(task, model, train, dev, out, extra=()):
    launch(
        [
            task,
            "train",
            "--model_name_or_path",
            model,
            "--train_file",
            str(train),
            "--validation_file",
            str(dev),
            "--output_dir",
            str(out),
            "--num_train_epochs",
            "1",
            "--per_device_train_batch_size",
            "4",
            "--save_strategy",
            "epoch",
            *COMMON,
            *extra,
        ]
    )
    assert (out / "metrics.json").is_file() and (out / "model.safetensors").is_file()
    assert len(list(out.glob("checkpoint-*"))) == 1
    assert not list(out.glob("tmp-checkpoint-*")) and not list(out.glob(".*.tmp*"))
    results = []
    for processes in (1, 2):
        launch(
            [
                task,
                "evaluate",
                "--model_name_or_path",
                str(out),
                "--validation_file",
                str(dev),
                *COMMON,
                *extra,
            ],
            processes=processes,
        )
        files = sorted((out / "eval").glob("*.json"), key=lambda p: p.stat().st_mtime)
        results.append(json.loads(files[-1].read_text()))
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
    words = "the a film movie good bad great cat dog sat mat john smith lives in paris".split()
    docs = [" ".join(words[(i * 5 + j) % len(words)] for j in range(6 + i % 9)) for i in range(40)]
    train = write(tmp_path / "train.txt", "\n".join(docs) + "\n")
    dev = write(tmp_path / "dev.txt", "\n".join(docs[:7]) + "\n")
    one, two = _train_then_evaluate_twice(
        "mlm", tiny_bert, train, dev, tmp_path / "run", extra=["--max_length", "16"]
    )
    _same_scores(one, two)


def test_pair_two_processes(tiny_bert, tmp_path):
    """Cross-encoder regression (STS-B layout): Pearson/Spearman alike on 1 and 2 processes."""
    from tests.recipes.test_cli_pair import COLUMNS, ROWS

    lines = [f"main\tsrc\t2012\t{i:04d}\t{s}\t{a}\t{b}" for i, (s, a, b) in enumerate(ROWS * 3)]
    train = write(tmp_path / "sts-train.csv", "\n".join(lines) + "\n")
    dev = write(tmp_path / "sts-dev.csv", "\n".join(lines[:7]) + "\n")
    one, two = _train_then_evaluate_twice("pair", tiny_bert, train, dev, tmp_path / "run", extra=COLUMNS)
    _same_scores(one, two)

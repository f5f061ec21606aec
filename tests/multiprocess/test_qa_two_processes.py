"""QA evaluation on 2 processes scores every question exactly once (make test-multiprocess)."""

import json

import pytest

from tests.helpers import FAST_QA, evaluate_argv, launch, read_json, run_train, write
from tests.samples import questions_in, squad_json


def test_two_process_evaluation_matches_one(tiny_bert, tmp_path):
    data = squad_json(v2=True)
    dev = write(tmp_path / "dev.json", json.dumps(data))
    out = tmp_path / "run"
    run_train("qa", tiny_bert, dev, out, *FAST_QA)
    # short windows and batches of 2: several windows per question, split across processes,
    # and a padded (repeated) tail in the last gathered batch
    evaluate = evaluate_argv("qa", out, dev, "--max_length", "24", "--doc_stride", "6")
    evaluate += ["--per_device_eval_batch_size", "2", "--mixed_precision", "no"]
    launch(evaluate, processes=1)
    launch(evaluate, processes=2)
    one, two = read_json(out / "eval" / "dev.json"), read_json(out / "eval" / "dev-2.json")
    assert one["eval_total"] == two["eval_total"] == questions_in(data)
    assert one["eval_missing"] == two["eval_missing"] == 0
    for key in ("eval_exact", "eval_f1", "eval_HasAns_exact", "eval_NoAns_exact", "eval_best_f1"):
        assert one[key] == pytest.approx(two[key])

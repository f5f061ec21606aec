"""QA evaluation on 2 processes scores every question exactly once (make test-multiprocess)."""

import json

import pytest

from encoder_tasks.cli import main
from tests.conftest import write
from tests.multiprocess.test_classification_two_processes import launch
from tests.recipes.test_cli_qa import FAST, questions_in, squad_json

pytestmark = pytest.mark.multiprocess


def test_two_process_evaluation_matches_one(tiny_bert, tmp_path):
    data = squad_json(v2=True)
    dev = write(tmp_path / "dev.json", json.dumps(data))
    out = tmp_path / "run"
    assert (
        main(
            [
                "qa",
                "train",
                "--model_name_or_path",
                tiny_bert,
                "--train_file",
                str(dev),
                "--output_dir",
                str(out),
                *FAST,
            ]
        )
        == 0
    )
    # short windows and batches of 2: several windows per question, split across processes,
    # and a padded (repeated) tail in the last gathered batch
    evaluate = [
        "qa", "evaluate", "--model_name_or_path", str(out), "--validation_file", str(dev),
        "--max_length", "24", "--doc_stride", "6", "--per_device_eval_batch_size", "2", "--mixed_precision", "no",
    ]  # fmt: skip
    launch(evaluate, processes=1)
    launch(evaluate, processes=2)
    one = json.loads((out / "eval" / "dev.json").read_text())
    two = json.loads((out / "eval" / "dev-2.json").read_text())
    assert one["eval_total"] == two["eval_total"] == questions_in(data)
    assert one["eval_missing"] == two["eval_missing"] == 0
    for key in ("eval_exact", "eval_f1", "eval_HasAns_exact", "eval_NoAns_exact", "eval_best_f1"):
        assert one[key] == pytest.approx(two[key])

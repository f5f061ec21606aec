"""A one-sentence ``predict`` imports only what predicting needs: not the Trainer stack
(``transformers.TrainingArguments`` pulls in peft and ``transformers.trainer_utils``, about 3 s of
CPU here), nor data sets, metrics or runtimes a torch prediction does not use. Time itself is
measured by benchmarks/bench_cli_startup.py, never asserted here."""

import json

from tests.helpers import FAST_TRAINING, run_python, run_train, write
from tests.samples import conll

#: Modules the predict path once imported (or could) without using them.
HEAVY = (
    "peft",
    "transformers.trainer",
    "transformers.training_args",
    "transformers.trainer_utils",
    "encoder_tasks.training_args",
    "encoder_tasks.trainer",
    "datasets",
    "evaluate",
    "seqeval",
    "sklearn",
    "onnxruntime",
    "openvino",
)


def test_ner_predict_of_one_sentence_imports_no_trainer_data_or_metrics(tmp_path, tiny_bert):
    run = tmp_path / "run"
    run_train("ner", tiny_bert, write(tmp_path / "train.conll", conll()), run, *FAST_TRAINING)
    sentence = write(tmp_path / "one.txt", "John Smith lives in Paris .\n")
    argv = ["ner", "predict", "--model_dir", str(run), "--input_file", str(sentence)]
    argv += ["--output_file", str(tmp_path / "out.jsonl"), "--backend", "torch"]
    code = (
        "import json, sys\n"
        "from encoder_tasks.cli import main\n"
        f"assert main({argv!r}) == 0\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
    record = json.loads((tmp_path / "out.jsonl").read_text())
    assert record["tokens"] == ["John", "Smith", "lives", "in", "Paris", "."]

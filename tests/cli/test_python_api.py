"""The Python API end to end: a run trained from Python is the run the CLI trains (same files,
metrics, weights and predictions), inputs of every kind, errors by name, and every example of
docs/python-api.md executed as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import encoder_tasks
from encoder_tasks.errors import UserError
from encoder_tasks.inputs import InputError
from tests.helpers import read_json, read_jsonl, run_predict

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"

FAST = {
    "num_train_epochs": 1,
    "per_device_train_batch_size": 4,
    "logging_steps": 1,
    "save_strategy": "no",
    "report_to": "none",
}
#: The settings tests/runs.py gives each task's CLI run, beyond FAST.
TASK_SETTINGS = {
    "classification": {},
    "pair": {
        "column_names": "genre,source,year,id,score,sentence1,sentence2",
        "pooling": "cls",
    },  # as tests/runs.py trains it
    "ner": {"crf": True},
    "qa": {
        "per_device_eval_batch_size": 3,
        "max_length": 24,
        "doc_stride": 6,
        "version_2_with_negative": True,
    },
    "embedding": {},
    "mlm": {"max_length": 32},
}
#: Metrics that measure time, not the model.
TIMINGS = re.compile(r"runtime|per_second|seconds")


def _files(run: Path) -> list[str]:
    # eval/ holds evaluations other tests may have added to the shared CLI runs.
    return sorted(
        p.relative_to(run).as_posix() for p in run.rglob("*") if p.relative_to(run).parts[0] != "eval"
    )


def _numbers(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not TIMINGS.search(k)}


@pytest.fixture(scope="module")
def python_runs(task_runs, tiny_bert, tmp_path_factory):
    """``{task: Run}``: each task_runs CLI run trained again from Python, same settings and data."""
    root = tmp_path_factory.mktemp("python-runs")
    return {
        task: encoder_tasks.train(
            task,
            model_name_or_path=tiny_bert,
            train_file=str(cli.train_file),
            output_dir=str(root / task),
            **FAST,
            **TASK_SETTINGS[task],
        )
        for task, cli in task_runs.items()
    }


@pytest.mark.parametrize("task", sorted(TASK_SETTINGS))
def test_a_python_run_is_the_cli_run(task, task_runs, python_runs, tmp_path):
    from safetensors.torch import load_file

    cli, run = task_runs[task], python_runs[task]
    assert run.task == task and _files(run.path) == _files(cli.model_dir)
    assert _numbers(run.metrics) == pytest.approx(_numbers(read_json(cli.model_dir / "metrics.json")))
    assert run.metrics == read_json(run.path / "metrics.json")
    ours, theirs = (
        load_file(str(run.path / "model.safetensors")),
        load_file(str(cli.model_dir / "model.safetensors")),
    )
    assert ours.keys() == theirs.keys() and all(ours[k].equal(theirs[k]) for k in ours)
    assert (
        read_json(run.path / "encoder_tasks.json")["settings"]
        == read_json(cli.model_dir / "encoder_tasks.json")["settings"]
    )
    # The record of the run names the command that repeats it.
    command = read_json(run.path / "run_config.json")["command"]
    assert command.startswith(f"encoder-tasks {task} train --model_name_or_path ")

    # predict_file writes what the CLI's predict writes (embedding: predict scores the pairs of a
    # file); loaded, both runs give the same records (tests/cli/test_inference.py checks that
    # those are the records the CLI writes).
    inputs = cli.train_file if task == "embedding" else cli.predict_file
    expected = run_predict(task, cli.model_dir, inputs, tmp_path / "cli.jsonl", "--precision", "fp32")
    summary = encoder_tasks.predict_file(run.path, inputs, tmp_path / "python.jsonl", precision="fp32")
    assert isinstance(summary, dict) and read_jsonl(tmp_path / "python.jsonl") == expected
    records = run.load(precision="fp32").predict(cli.records)
    assert len(records) == len(cli.records)
    assert encoder_tasks.load(cli.model_dir, precision="fp32").predict(cli.records) == records


def test_evaluate_and_export_from_python(task_runs, python_runs, tmp_path):
    run = python_runs["ner"]
    metrics = encoder_tasks.evaluate(run.path, validation_file=str(task_runs["ner"].train_file))
    assert read_json(run.path / "eval" / "train.json")["eval_f1_strict"] == metrics["eval_f1_strict"]
    again = run.evaluate(validation_file=str(task_runs["ner"].train_file))  # never overwritten
    assert (
        again["eval_loss"] == pytest.approx(metrics["eval_loss"])
        and (run.path / "eval" / "train-2.json").is_file()
    )
    info = encoder_tasks.export(run.path, tmp_path / "onnx", format="onnx")
    assert info["format"] == "onnx" and (tmp_path / "onnx" / "export_info.json").is_file()
    with pytest.raises(UserError, match="already holds files"):
        run.export(tmp_path / "onnx", format="onnx")
    cls = python_runs["classification"]
    assert encoder_tasks.export(cls.path, tmp_path / "stock")["format"] == "transformers"


def test_inputs_of_every_kind_predict_the_same(python_runs, task_runs):
    import datasets
    import pandas as pd

    model = python_runs["classification"].load()
    texts = [r["text"] for r in task_runs["classification"].records]
    expected = model.predict(texts)
    assert [r["text"] for r in expected] == texts
    assert model.predict(texts[0]) == expected[0]
    assert model.predict([{"text": t} for t in texts]) == expected
    frame = pd.DataFrame({"review": texts, "label": ["pos"] * len(texts)})
    assert model.predict(frame, columns={"review": "text"}) == expected
    dataset = datasets.Dataset.from_dict({"text": texts})
    assert model.predict(dataset) == expected
    assert model(texts) == expected

    pair = python_runs["pair"].load()
    records = task_runs["pair"].records
    assert pair.predict([(r["text"], r["text_pair"]) for r in records]) == pair.predict(records)


def test_training_data_held_in_memory_trains_the_same_run(task_runs, python_runs, tiny_bert, tmp_path):
    import datasets
    import pandas as pd

    from encoder_tasks.data import read_file

    cli = task_runs["classification"]
    rows = read_file(cli.train_file).remove_columns("_line")
    expected = python_runs["classification"].metrics
    for name, data in (
        ("frame", pd.DataFrame(rows.to_dict())),
        ("dataset", rows),
        ("records", rows.to_list()),
    ):
        run = encoder_tasks.train(
            "classification",
            model_name_or_path=tiny_bert,
            train_file=data,
            output_dir=str(tmp_path / name),
            **FAST,
        )
        assert isinstance(rows, datasets.Dataset)
        assert run.metrics["train_loss"] == pytest.approx(expected["train_loss"]), name
        recorded = read_json(run.path / "run_config.json")["data_args"]["train_file"]
        assert recorded.endswith("train.jsonl") and not Path(recorded).exists()  # the call removed it


def test_bad_settings_and_inputs_fail_by_name(python_runs, tiny_bert, tmp_path):
    run = python_runs["classification"]
    with pytest.raises(UserError, match=r"unknown setting 'learning_rat' \(did you mean 'learning_rate'\?\)"):
        encoder_tasks.train("classification", model_name_or_path=tiny_bert, learning_rat=1e-3)
    with pytest.raises(UserError, match=r"load: unknown setting 'batchsize' \(did you mean 'batch_size'\?\)"):
        encoder_tasks.load(run.path, batchsize=4)
    with pytest.raises(UserError, match=r"load: unknown setting 'input_file'"):
        encoder_tasks.load(run.path, input_file="x.csv")
    with pytest.raises(UserError, match="do not give model_name_or_path"):
        encoder_tasks.evaluate(run.path, model_name_or_path=tiny_bert, validation_file="x.csv")
    with pytest.raises(UserError, match="already holds"):  # an earlier run is never overwritten
        encoder_tasks.train(
            "classification",
            model_name_or_path=tiny_bert,
            train_file=[{"text": "a", "label": "x"}],
            output_dir=str(run.path),
            **FAST,
        )
    model = run.load()
    with pytest.raises(InputError, match=r"inputs\[1\]\.txt: unknown field") as error:
        model.predict([{"text": "ok"}, {"txt": "typo"}])
    assert error.value.field == "inputs[1].txt"
    with pytest.raises(InputError, match=r"flags\.batch_size: not a flag a request may set"):
        model.predict("ok", batch_size=2)
    with pytest.raises(InputError, match=r"train_file\[0\]: expected a record"):
        encoder_tasks.train(
            "classification", model_name_or_path=tiny_bert, train_file=[3], output_dir=str(tmp_path / "x")
        )


def _doc_blocks() -> list[tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"```python\n(.*?)```", text, re.S):
        headings = re.findall(r"^#+ (.+)$", text[: match.start()], re.M)
        blocks.append((headings[-1] if headings else "top", match.group(1)))
    return blocks


@pytest.fixture(scope="module")
def doc_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("python-api-doc")


@pytest.mark.parametrize("index", range(len(_doc_blocks())), ids=[h for h, _ in _doc_blocks()])
def test_the_docs_examples_run_as_written(index, doc_folder, monkeypatch):
    """In order, in one folder (the predict example reloads the quick start's run)."""
    heading, code = _doc_blocks()[index]
    monkeypatch.chdir(doc_folder)
    exec(compile(code, f"{DOC}:{heading}", "exec"), {"__name__": f"python_api_doc_{index}"})
    for folder in re.findall(r'save_model\("([^"]+)"\)', code):  # a run directory predict and export accept
        saved = set(p.name for p in (doc_folder / folder).iterdir())
        assert {"encoder_tasks.json", "model.safetensors", "tokenizer.json"} <= saved, folder
        assert json.loads((doc_folder / folder / "encoder_tasks.json").read_text())["settings"]

"""The task contract holds: every task is a Task object, the shared code never probes tasks,
a new task is one package plus one registry line (the toy task in tests/assets), and every
import, function-level ones included, points down the layers (tests/import_graph.py)."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from encoder_tasks.cli import main
from encoder_tasks.config import PredictArguments
from encoder_tasks.errors import UserError
from encoder_tasks.registry import TASKS
from encoder_tasks.task import SETTINGS_FORMAT, Task, TaskSettings
from tests import import_graph
from tests.assets.toy_task import ToyTask
from tests.helpers import FAST_TRAINING, evaluate_argv, predict_argv, read_json, read_jsonl, run_train, write

PACKAGE = Path(__file__).resolve().parents[2] / "encoder_tasks"


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_is_a_task_object_with_typed_settings(name):
    task = TASKS[name]
    assert isinstance(task, Task) and task.name == name and task.summary
    assert dataclasses.is_dataclass(task.Arguments)
    assert issubclass(task.PredictArguments, PredictArguments)
    assert issubclass(task.Settings, TaskSettings) and task.Settings.__dataclass_params__.frozen
    assert task.objectives and all(m.startswith("eval_") for m in task.objectives)
    # Settings round-trip through the file format.
    settings = task.Settings()
    assert task.load_settings({"format_version": SETTINGS_FORMAT, "settings": settings.to_dict()}) == settings


def test_shared_code_never_probes_a_task():
    for module in ("run.py", "cli.py", "hpo.py", "predict.py"):
        source = (PACKAGE / module).read_text(encoding="utf-8")
        assert not re.search(r"(getattr|hasattr)\(\s*task\b", source), module


def test_shared_code_never_imports_a_task_package():
    shared = [p for p in PACKAGE.rglob("*.py") if "tasks" not in p.relative_to(PACKAGE).parts]
    for path in shared:
        if path.relative_to(PACKAGE).as_posix() in ("registry.py", "__init__.py"):
            continue  # the one list of tasks, and the public names (lazily imported)
        source = path.read_text(encoding="utf-8")
        imports = re.compile(
            r"^\s*(from\s+(\.+tasks|encoder_tasks\.tasks)\b|import\s+encoder_tasks\.tasks\b)", re.M
        )
        assert not imports.search(source) and 'import_module("encoder_tasks.tasks' not in source, path


def test_no_import_points_up_the_layers():
    problems = import_graph.upward_imports(PACKAGE)
    assert not problems, "imports that point up the layers:\n" + "\n".join(problems)


def test_the_import_graph_has_no_cycle():
    assert import_graph.cycles(PACKAGE) == []


def test_every_module_has_a_layer():
    unplaced = import_graph.unplaced_modules(PACKAGE)
    assert not unplaced, f"add these modules to a layer in tests/import_graph.py LAYERS: {unplaced}"


def test_imports_by_computed_name_are_the_known_ones():
    assert set(import_graph.dynamic_imports(PACKAGE)) == set(import_graph.DYNAMIC_IMPORTS)


def _plant(tmp_path, module: str, line: str) -> Path:
    copy = tmp_path / "encoder_tasks"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    source = target.read_text(encoding="utf-8")
    target.write_text(source + f"\n\ndef _planted():\n    {line}\n", encoding="utf-8")
    return copy, len(source.splitlines()) + 4


def test_a_planted_upward_import_is_named_with_its_line(tmp_path):
    copy, line = _plant(
        tmp_path, "heads.py", "from .registry import TASKS  # inside a function: still counts"
    )
    problems = import_graph.upward_imports(copy)
    assert problems == [
        f"encoder_tasks/heads.py:{line}: encoder_tasks.heads (model and engines) imports "
        "encoder_tasks.registry (registry), a layer above it"
    ]
    assert any(
        "encoder_tasks.heads" in c and "encoder_tasks.registry" in c for c in import_graph.cycles(copy)
    )


def test_a_planted_computed_import_is_found(tmp_path):
    copy, line = _plant(
        tmp_path, "predict.py", "import importlib; importlib.import_module('encoder_tasks.' + 'run')"
    )
    assert import_graph.dynamic_imports(copy)["encoder_tasks.predict"] == [f"encoder_tasks/predict.py:{line}"]


def test_a_saved_model_opens_without_the_registry(tmp_path, tiny_bert):
    """Low layers rebuild a saved model from the head class its file records; the unknown task
    message is the one place above the registry that looks tasks up."""
    import json

    from encoder_tasks.heads import EncoderWithHead
    from encoder_tasks.saved import open_saved

    train = write(tmp_path / "train.csv", "text,label\n" + "a good day,1\nbad acting,0\n" * 6)
    run = tmp_path / "run"
    run_train("classification", tiny_bert, train, run, "--max_length", "12", *FAST_TRAINING)
    model = EncoderWithHead.from_pretrained(run)
    assert type(model).__name__ == "SequenceClassifier" and model.settings.label_names == ["0", "1"]
    meta = read_json(run / "encoder_tasks.json")
    (run / "encoder_tasks.json").write_text(json.dumps({**meta, "task": "clasification"}))
    with pytest.raises(
        UserError, match="unknown task 'clasification' \\(did you mean 'classification'\\?\\)"
    ):
        open_saved(run)
    (run / "encoder_tasks.json").write_text(json.dumps({**meta, "head_class": "os:path"}))
    with pytest.raises(UserError, match="is not a head"):
        EncoderWithHead.from_pretrained(run)


def test_settings_from_a_newer_format_are_refused():
    with pytest.raises(UserError, match="format 99 is newer"):
        TASKS["classification"].load_settings({"format_version": 99})


def test_unknown_keys_survive_a_round_trip():
    settings = TaskSettings.from_dict({"max_length": 64, "from_the_future": [1, 2]})
    assert settings.max_length == 64 and settings.to_dict()["from_the_future"] == [1, 2]


@pytest.fixture
def toy(monkeypatch):
    """Register the toy task the way a new task is added: one registry line."""
    monkeypatch.setitem(TASKS, "toy", ToyTask())


def test_a_new_task_is_one_package_and_one_registry_line(toy, tiny_bert, tmp_path, capsys):
    rows = ["the movie was good", "bad acting", "a good day", "nothing here", "good good", "dull"] * 4
    train = write(tmp_path / "train.csv", "text\n" + "\n".join(rows) + "\n")
    run = tmp_path / "run"
    metrics = run_train("toy", tiny_bert, train, run, "--max_length", "12", *FAST_TRAINING, validation=train)
    saved = read_json(run / "encoder_tasks.json")
    assert saved["format_version"] == SETTINGS_FORMAT and saved["task"] == "toy"
    assert saved["settings"]["keyword"] == "good" and saved["settings"]["max_length"] == 12
    assert "eval_accuracy" in metrics

    # evaluate and predict run through the shared code with the saved settings.
    assert main(evaluate_argv("toy", run, train)) == 0
    evaluated = read_json(run / "eval" / "train.json")
    assert evaluated["eval_accuracy"] == pytest.approx(metrics["eval_accuracy"])
    out = tmp_path / "predictions.jsonl"
    argv = predict_argv("toy", run, train, out)
    assert main(argv) == 0
    records = read_jsonl(out)
    assert len(records) == len(rows) and set(records[0]) == {"line", "text", "mentions"}
    assert "wrote 24 predictions" in capsys.readouterr().out
    # ... and refuses to overwrite the predictions it wrote.
    assert main(argv) == 2
    assert "already exists" in capsys.readouterr().err

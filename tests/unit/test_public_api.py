"""The public surface: ``encoder_tasks.__all__``, lazy imports, input conversion and settings
checks of the Python API (no training here: tests/cli/test_python_api.py trains)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import encoder_tasks
from encoder_tasks.api.inputs import data_file, to_records
from encoder_tasks.api.settings import to_argv
from encoder_tasks.errors import UserError
from encoder_tasks.inputs import InputError

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "python-api.md"


def test_every_public_name_resolves_and_nothing_else_is_offered():
    for name in encoder_tasks.__all__:
        assert getattr(encoder_tasks, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'not_public'"):
        encoder_tasks.not_public  # noqa: B018
    assert {"train", "evaluate", "load", "export", "predict_file", "prepare", "Run", "Model"} <= set(
        encoder_tasks.__all__
    )


def test_import_stays_light_and_the_package_is_typed():
    code = "import sys, encoder_tasks; print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
    assert (ROOT / "encoder_tasks" / "py.typed").is_file()


def test_export_is_the_action_and_still_the_package():
    importlib.import_module("encoder_tasks.export.staging")  # rebinds encoder_tasks.export on import
    assert callable(encoder_tasks.export) and encoder_tasks.export.SHARED_FORMATS
    with pytest.raises(UserError, match="not a model saved by encoder-tasks"):
        encoder_tasks.export(ROOT / "docs", ROOT / "nowhere")


@pytest.mark.parametrize(
    "inputs, records, single",
    [
        ("a film", [{"text": "a film"}], True),
        (("a", "b"), [{"text": "a", "text_pair": "b"}], True),
        ({"tokens": ["a", "b"]}, [{"tokens": ["a", "b"]}], True),
        (["a", ("b", "c")], [{"text": "a"}, {"text": "b", "text_pair": "c"}], False),
        ([{"text": "a", "_line": 3}], [{"text": "a"}], False),  # the readers' line column is not a field
        ([], [], False),
    ],
)
def test_inputs_become_json_records(inputs, records, single):
    assert to_records(inputs) == (records, single)


def test_datasets_and_dataframes_give_one_record_per_row():
    import datasets
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"sentence": ["a", "b"], "score": np.array([1, 2]), "note": [None, float("nan")]})
    records, single = to_records(frame)
    assert not single and records == [
        {"sentence": "a", "score": 1, "note": None},
        {"sentence": "b", "score": 2, "note": None},
    ]
    assert all(type(r["score"]) is int for r in records)  # numpy scalars become JSON values
    dataset = datasets.Dataset.from_dict({"sentence": ["a", "b"], "label": [0, 1]})
    assert to_records(dataset, columns={"sentence": "text"}) == ([{"text": "a"}, {"text": "b"}], False)
    assert to_records(frame, columns={"sentence": "text"})[0] == [{"text": "a"}, {"text": "b"}]


def test_bad_inputs_name_what_is_wrong():
    with pytest.raises(InputError, match=r"inputs\[0\]: no column 'sentence'.*found 'text'") as error:
        to_records([{"text": "a"}], columns={"sentence": "text"})
    assert error.value.field == "inputs[0]"
    with pytest.raises(InputError, match=r"inputs: expected a string, a list .* found 3 \(int\)"):
        to_records(3)


def test_data_in_memory_is_written_as_json_lines(tmp_path):
    assert data_file("data/train.csv", tmp_path, "train") == "data/train.csv"  # a path stays a path
    import pandas as pd

    path = data_file(pd.DataFrame({"text": ["é", "b"], "label": [1, 0]}), tmp_path / "d", "validation")
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    assert Path(path).name == "validation.jsonl" and [json.loads(x) for x in lines] == [
        {"text": "é", "label": 1},
        {"text": "b", "label": 0},
    ]
    with pytest.raises(InputError, match=r"train\[1\]: expected a record"):
        data_file([{"text": "a"}, 5], tmp_path, "train")
    with pytest.raises(InputError, match="train: no records"):
        data_file([], tmp_path, "train")


def _types():
    from encoder_tasks.config import DataArguments, ModelArguments
    from encoder_tasks.registry import TASKS
    from encoder_tasks.training_args import EncoderTrainingArguments

    return [ModelArguments, DataArguments, TASKS["ner"].Arguments, EncoderTrainingArguments]


def test_settings_become_the_clis_flags():
    argv = to_argv(
        _types(), {"crf": True, "max_length": 64, "num_train_epochs": 1, "tokenizer_name": None}, "t"
    )
    assert argv == ["--crf", "true", "--max_length", "64", "--num_train_epochs", "1"]


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"crff": True},
            r"ner train: unknown setting 'crff' \(did you mean 'crf'\?\).*`encoder-tasks ner train --help`",
        ),
        ({"num_train_epoch": 1}, r"unknown setting 'num_train_epoch' \(did you mean 'num_train_epochs'\?\)"),
        ({"config": "r.yaml"}, r"unknown setting 'config'"),
        ({"max_length": "long"}, r"ner train: key 'max_length' expects int, found 'long'"),
        ({"num_train_epochs": [1, 2]}, r"expects a single float, found a list"),
    ],
)
def test_bad_settings_are_refused_by_name(settings, message):
    with pytest.raises(UserError, match=message):
        to_argv(_types(), settings, "ner train", "encoder-tasks ner train")


def test_unknown_tasks_are_refused_with_a_suggestion():
    with pytest.raises(UserError, match=r"unknown task 'nerr' \(did you mean 'ner'\?\)"):
        encoder_tasks.train("nerr", train_file="x")


def _doc_table() -> dict[str, list[str]]:
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and all(":" in c for c in cells[1:]):
            rows[cells[0]] = cells[1:]
    return rows


def _resolve(spec: str):
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def test_the_docs_building_blocks_table_names_what_each_task_uses():
    from encoder_tasks.registry import TASKS

    table = _doc_table()
    assert sorted(table) == sorted(TASKS)
    for task, (head, prepare, collator, metrics, trainer) in table.items():
        for spec in (prepare, collator, metrics):
            assert callable(_resolve(spec)), spec
        assert _resolve(trainer) is TASKS[task].trainer_class(), task
        assert issubclass(_resolve(head), encoder_tasks.EncoderWithHead), head
        assert _resolve(head).task == task, head


def test_every_python_block_of_the_docs_is_valid_python():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 8  # quick start, predict, one per task
    for block in blocks:
        compile(block, str(DOC), "exec")

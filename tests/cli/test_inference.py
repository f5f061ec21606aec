"""Predicting on inputs held in memory (:class:`encoder_tasks.inference.Predictor`): the same records
as the ``predict`` command, for every task; bad records refused by field."""

import pytest

from encoder_tasks.errors import UserError
from encoder_tasks.inference import Predictor, task_of
from encoder_tasks.inputs import InputError
from tests.helpers import assert_close_records, cli_records

TASKS = ["classification", "pair", "ner", "qa", "embedding", "mlm"]


@pytest.mark.parametrize("task", TASKS)
def test_predictor_gives_the_records_predict_writes(task_runs, tmp_path, task):
    run = task_runs[task]
    predictor = Predictor.load(run.model_dir, precision="fp32")
    assert predictor.task.name == task == task_of(run.model_dir)
    found = predictor(run.records)
    expected = cli_records(run, tmp_path)
    assert len(found) == len(expected) == len(run.records)
    assert_close_records(found, expected)


@pytest.mark.parametrize(
    ("task", "record", "message"),
    [
        ("classification", {"txt": "a"}, "inputs[0].txt: unknown field; expected text"),
        ("classification", {"text": 5}, "inputs[0].text: expected a string, found 5 (int)"),
        ("pair", {"text": "a"}, "inputs[0].text_pair: expected a string, found nothing"),
        ("ner", {"tokens": ["a", ""]}, "inputs[0].tokens[1]: expected a non-blank token string, found ''"),
        (
            "ner",
            {"text": "a", "tokens": ["a"]},
            "inputs[0]: expected either a 'text' string or a 'tokens' list",
        ),
        ("qa", {"context": "Ann lives in Oslo."}, "inputs[0].question: expected a string, found nothing"),
        (
            "qa",
            {"question": " ", "context": "x"},
            "inputs[0].question: expected a non-empty text, found ' '",
        ),
        (
            "embedding",
            "just a string",
            "inputs[0]: expected an object with text, text_pair, sparse, found 'just a string'",
        ),
        ("mlm", {"text": None}, "inputs[0].text: expected a string, found null"),
    ],
)
def test_bad_records_are_refused_by_field(task_runs, task, record, message):
    predictor = Predictor.load(task_runs[task].model_dir)
    with pytest.raises(InputError) as caught:
        predictor([record])
    assert str(caught.value).startswith(message)
    assert caught.value.field == message.split(":")[0]


def test_unknown_flags_and_folders_are_refused(task_runs, tmp_path):
    with pytest.raises(UserError, match="classification predict has no flag top_kk"):
        Predictor.load(task_runs["classification"].model_dir, top_kk=3)
    with pytest.raises(UserError, match="not a saved model"):
        Predictor.load(tmp_path)

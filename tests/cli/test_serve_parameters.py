"""Every per-request parameter is range-checked (issue 26, reproductions 2 and 4): a value that
would multiply the work (a stride that moves windows one word on, ``top_k`` of the vocabulary) or
that makes no sense (a negative stride, ``top_k`` 0, a NaN threshold) is a 400 naming it; a task's
own refusal raised while predicting is a 400 too, never a 500."""

import asyncio
import json

import httpx
import pytest

from encoder_tasks.errors import UserError
from tests.serving import live_server

PREDICT = "/v1/models/{}/predict"
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server(task_runs):
    models = {task: task_runs[task].model_dir for task in ("classification", "ner", "qa", "mlm")}
    with live_server(models) as url:
        yield url


QUESTION = {"question": "who lives in paris ?", "context": "john smith lives in paris ."}


@pytest.mark.parametrize(
    ("name", "record", "parameters", "field", "message"),
    [
        (
            "ner",
            {"text": "john lives"},
            '{"window_stride": -5}',
            "window_stride",
            "expected at least 0, found -5",
        ),
        (
            "ner",
            {"text": "john lives"},
            '{"window_stride": 200}',
            "window_stride",
            "window_stride 200 must be less than",
        ),
        ("classification", {"text": "a"}, '{"window_stride": -5}', "window_stride", "expected at least 0"),
        ("qa", QUESTION, '{"doc_stride": -1}', "doc_stride", "expected at least 0, found -1"),
        ("qa", QUESTION, '{"doc_stride": 400}', "doc_stride", "doc_stride 400 must be less than"),
        ("qa", QUESTION, '{"max_length": 8}', "max_length", "doc_stride"),
        ("qa", QUESTION, '{"top_k": 0}', "top_k", "expected 1 to 100 (--max_top_k), found 0"),
        ("qa", QUESTION, '{"top_k": -1}', "top_k", "expected 1 to 100"),
        ("qa", QUESTION, '{"max_answer_length": 0}', "max_answer_length", "expected at least 1, found 0"),
        ("qa", QUESTION, '{"max_answer_length": -3}', "max_answer_length", "expected at least 1"),
        ("qa", QUESTION, '{"null_threshold": NaN}', "null_threshold", "expected a finite number, found nan"),
        ("qa", QUESTION, '{"null_threshold": Infinity}', "null_threshold", "expected a finite number"),
        ("mlm", {"text": "the [MASK] sat"}, '{"top_k": 0}', "top_k", "expected 1 to 100"),
        (
            "mlm",
            {"text": "the [MASK] sat"},
            '{"top_k": 30522}',
            "top_k",
            "expected 1 to 100 (--max_top_k), found 30522",
        ),
        ("qa", QUESTION, '{"max_length": 100000}', "max_length", "expected 8 to 128 tokens"),
    ],
)
def test_a_parameter_out_of_range_is_a_400_naming_it(server, name, record, parameters, field, message):
    body = f'{{"inputs": [{json.dumps(record)}], "parameters": {parameters}}}'
    answer = httpx.post(server + PREDICT.format(name), content=body, headers=JSON, timeout=60)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == f"parameters.{field}", error
    assert message in error["message"], error["message"]


def test_parameters_in_range_are_answered(server):
    for name, record, parameters in [
        ("ner", {"text": "john lives in paris"}, {"window_stride": 0}),
        ("qa", QUESTION, {"top_k": 3, "max_answer_length": 5, "null_threshold": -1.5, "doc_stride": 4}),
        ("mlm", {"text": "the [MASK] sat"}, {"top_k": 100}),
    ]:
        answer = httpx.post(
            server + PREDICT.format(name), json={"inputs": [record], "parameters": parameters}, timeout=60
        )
        assert answer.status_code == 200, answer.text
    masks = answer.json()["predictions"][0]["masks"]
    assert len(masks[0]["candidates"] if isinstance(masks[0], dict) else masks[0]) == 100


def test_a_user_error_raised_while_predicting_is_a_400(server):
    served = server.app.state.served["qa"]
    original = served.batcher.predict

    def refusing(inputs, overrides):
        raise UserError("max_length=24 leaves 3 tokens for the context")

    served.batcher.predict = refusing
    try:
        answer = httpx.post(server + PREDICT.format("qa"), json={"inputs": [QUESTION]}, timeout=60)
    finally:
        served.batcher.predict = original
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"] == "max_length=24 leaves 3 tokens for the context"


def test_answers_are_rendered_off_the_event_loop_as_json_response_renders_them():
    from fastapi.responses import JSONResponse

    from encoder_tasks.serving.app import json_response

    content = {"predictions": [{"text": "é ü", "score": 0.5, "masks": [[1, 2]]}]}
    answer = asyncio.run(json_response(content))
    assert answer.body == JSONResponse(content).body
    assert answer.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        ("MLMPredictArguments(top_k=0)", "--top_k must be at least 1, found 0"),
        ("QAPredictArguments(top_k=0)", "--top_k must be at least 1, found 0"),
        ("QAPredictArguments(max_answer_length=0)", "--max_answer_length must be >= 1, found 0"),
        ("QAPredictArguments(doc_stride=-1)", "--doc_stride must be >= 0, found -1"),
        ("QAPredictArguments(null_threshold=float('nan'))", "--null_threshold must be a finite number"),
        ("NerPredictArguments(window_stride=-5)", "--window_stride must be 0 or more, found -5"),
        ("ClassificationPredictArguments(window_stride=-5)", "--window_stride must be 0 or more, found -5"),
    ],
)
def test_predict_refuses_the_same_values_on_the_command_line(make, message):
    from encoder_tasks.tasks.classification.args import ClassificationPredictArguments  # noqa: F401
    from encoder_tasks.tasks.mlm.args import MLMPredictArguments  # noqa: F401
    from encoder_tasks.tasks.ner.args import NerPredictArguments  # noqa: F401
    from encoder_tasks.tasks.qa.args import QAPredictArguments  # noqa: F401

    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        eval(make)

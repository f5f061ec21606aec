"""Bad requests never take the server down: each gets a 4xx JSON naming the field, what was
expected and what was found; a timeout a 503; a failure inside the model a 500 for its own batch;
and the server answers the next request as if nothing happened."""

import threading
from types import SimpleNamespace

import httpx
import pytest

from encoder_tasks.serving.errors import ApiError
from encoder_tasks.serving.models import choose_model
from tests.serving import live_server, wait_ready

PREDICT = "/v1/models/{}/predict"


@pytest.fixture(scope="module")
def server(task_runs):
    models = {task: task_runs[task].model_dir for task in ("classification", "qa", "ner")}
    with live_server(models, max_inputs_per_request=4, max_chars_per_input=60, request_timeout=1.0) as url:
        yield url


def post(url, name, content=None, **kwargs):
    return httpx.post(url + PREDICT.format(name), content=content, timeout=60, **kwargs)


def refused(answer, status, message, field):
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == status and error["param"] == field
    assert error["message"].startswith(message), error["message"]
    return error


JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    ("body", "message", "field"),
    [
        (
            '{"inputs": [{"text": "a"}',
            "request body: expected JSON, found invalid JSON at line 1 column 26",
            "request body",
        ),
        ("", "request body: expected a value, found nothing", "request body"),
        ('[{"text": "a"}]', "request body: expected a JSON object, found a list of 1 items", "request body"),
        ('{"input": [{"text": "a"}]}', "inputs: expected a value, found nothing", "inputs"),
        ('{"inputs": [{"text": "a"}], "params": {}}', "params: unknown field", "params"),
        (
            '{"inputs": 3}',
            "inputs: expected a list of input objects (or one object), found 3 (int)",
            "inputs",
        ),
        ('{"inputs": []}', "inputs: expected at least one input, found an empty list", "inputs"),
        ('{"inputs": [{"text": 5}]}', "inputs[0].text: expected a string, found 5 (int)", "inputs[0].text"),
        (
            '{"inputs": [{"text": "a"}, {"txt": "b"}]}',
            "inputs[1].txt: unknown field; expected text",
            "inputs[1].txt",
        ),
        (
            '{"inputs": ["just text"]}',
            "inputs[0]: expected an object with text, found 'just text'",
            "inputs[0]",
        ),
        (
            '{"inputs": [{"text": "a"}], "parameters": 3}',
            "parameters: expected a valid dictionary, found 3",
            "parameters",
        ),
        (
            '{"inputs": [{"text": "a"}], "parameters": {"batch_size": 2}}',
            "parameters.batch_size: not a flag a request may set; expected one of",
            "parameters.batch_size",
        ),
    ],
)
def test_bad_bodies_are_400_naming_the_field(server, body, message, field):
    refused(post(server, "classification", body, headers=JSON), 400, message, field)


def test_json_sent_without_its_content_type_is_named(server):
    answer = post(
        server, "classification", '{"inputs": [{"text": "a"}]}', headers={"content-type": "text/plain"}
    )
    refused(
        answer,
        400,
        "request body: expected JSON sent with Content-Type: application/json, found",
        "request body",
    )


def test_a_question_missing_from_a_qa_input_is_named(server):
    answer = post(server, "qa", json={"inputs": [{"context": "Ann lives in Oslo."}]})
    refused(answer, 400, "inputs[0].question: expected a string, found nothing", "inputs[0].question")
    answer = post(
        server,
        "qa",
        json={"inputs": [{"question": "Who?", "context": "Ann."}], "parameters": {"n_best_size": "3"}},
    )
    assert answer.status_code == 400 and answer.json()["error"]["param"].startswith("parameters")


def test_oversized_requests_are_413_naming_the_limit(server):
    answer = post(server, "classification", json={"inputs": [{"text": "a"}] * 5})
    refused(
        answer,
        413,
        "inputs: expected at most 4 inputs per request (--max_inputs_per_request), found 5",
        "inputs",
    )
    answer = post(server, "classification", json={"inputs": [{"text": "a"}, {"text": "x" * 61}]})
    refused(
        answer,
        413,
        "inputs[1].text: expected at most 60 characters (--max_chars_per_input), found 61",
        "inputs[1].text",
    )
    answer = post(server, "ner", json={"inputs": {"tokens": ["word"] * 13}})  # 13 * 4 + 12 spaces = 64
    refused(answer, 413, "inputs[0].tokens: expected at most 60 characters", "inputs[0].tokens")
    # a body larger than any the limits allow is refused before it is read
    answer = post(server, "ner", '{"inputs": [{"text": "' + "x" * 80_000 + '"}]}', headers=JSON)
    limit = 4 * (6 * 60 + 1024) + 65536
    refused(
        answer,
        413,
        f"request body: expected at most {limit} bytes (from --max_inputs_per_request",
        "request body",
    )


def test_unknown_models_routes_and_methods_are_404_and_405_json(server):
    answer = post(server, "sst3", json={"inputs": [{"text": "a"}]})
    refused(
        answer,
        404,
        "model: no model named 'sst3' is served; served: classification (classification), qa (qa), ner (ner)",
        "model",
    )
    refused(httpx.get(f"{server}/v1/models/sst3"), 404, "model: no model named 'sst3'", "model")
    refused(
        httpx.get(f"{server}/v2/nothing"),
        404,
        "no route GET /v2/nothing; the routes are listed at /docs",
        None,
    )
    refused(
        httpx.get(server + PREDICT.format("qa")),
        405,
        "GET is not allowed on /v1/models/qa/predict; allowed: POST",
        None,
    )


def test_choose_model_names_the_model_a_route_needs():
    served = {"a": SimpleNamespace(name="a", task="ner"), "b": SimpleNamespace(name="b", task="embedding")}
    served["c"] = SimpleNamespace(name="c", task="embedding")
    request = SimpleNamespace(
        app=SimpleNamespace(state=SimpleNamespace(served=served)), state=SimpleNamespace()
    )
    assert choose_model(request, None, ("ner",), "/x").name == "a" and request.state.model == "a"
    with pytest.raises(
        ApiError, match="model: expected the name of one of the embedding models b, c, found none"
    ):
        choose_model(request, None, ("embedding",), "/embed")
    with pytest.raises(
        ApiError, match="model: no qa model is served; served: a .ner., b .embedding., c"
    ) as caught:
        choose_model(request, None, ("qa",), "/x")
    assert caught.value.status == 404
    with pytest.raises(ApiError, match="model 'a' is a ner model; /embed serves embedding models") as caught:
        choose_model(request, "a", ("embedding",), "/embed")
    assert caught.value.status == 400 and caught.value.field == "model"


def _hold(served):
    """Make ``served``'s model wait for the returned gate inside each batch (the model is busy)."""
    gate, original = threading.Event(), served.batcher.predict

    def held(inputs, overrides):
        assert gate.wait(30)
        return original(inputs, overrides)

    served.batcher.predict = held
    return gate, original


def test_a_request_that_waits_past_request_timeout_is_503_and_the_server_lives_on(server):
    served = server.app.state.served["classification"]
    gate, original = _hold(served)
    try:
        answer = post(server, "classification", json={"inputs": [{"text": "slow"}]})
    finally:
        gate.set()
        served.batcher.predict = original
    assert answer.status_code == 503
    assert answer.json()["error"]["message"] == (
        "model 'classification': no answer within 1 s (--request_timeout); the server is overloaded, try again"
    )
    assert post(server, "classification", json={"inputs": [{"text": "fine"}]}).status_code == 200


def test_failures_inside_the_server_are_500_json_and_the_server_lives_on(server):
    served = server.app.state.served["ner"]
    original_predict, original_parse = served.batcher.predict, served.parse

    def broken_predict(inputs, overrides):
        raise RuntimeError("the model broke")

    def broken_parse(records, where="inputs"):
        raise KeyError("a bug in a route")

    served.batcher.predict = broken_predict
    try:
        answer = post(server, "ner", json={"inputs": [{"text": "john"}]})
    finally:
        served.batcher.predict = original_predict
    # The exception's type, never its text (which may hold paths): the log has the traceback.
    error = refused(answer, 500, "model 'ner': prediction failed (RuntimeError); see the server log", None)
    assert error["type"] == "server_error"
    served.parse = broken_parse
    try:
        answer = post(server, "ner", json={"inputs": [{"text": "john"}]})
    finally:
        served.parse = original_parse
    refused(answer, 500, "internal error; the server log has the traceback", None)
    assert post(server, "ner", json={"inputs": [{"text": "john"}]}).status_code == 200
    assert httpx.get(f"{server}/health").status_code == 200


def test_before_its_models_are_loaded_the_server_is_alive_but_not_ready(task_runs, monkeypatch):
    from encoder_tasks.serving.models import ServedModel

    loaded, load = threading.Event(), ServedModel.load

    def slow_load(self):  # loading takes as long as the test wants
        assert loaded.wait(30)
        load(self)

    monkeypatch.setattr(ServedModel, "load", slow_load)
    with live_server({"pair": task_runs["pair"].model_dir}, ready=False) as url:
        health = httpx.get(f"{url}/health")
        assert health.status_code == 200 and health.json()["models"]["pair"]["state"] == "loading"  # alive
        answer = httpx.get(f"{url}/ready")
        assert answer.status_code == 503 and answer.json()["status"] == "loading"
        answer = post(url, "pair", json={"inputs": [{"text": "a", "text_pair": "b"}]})
        refused(answer, 503, "model 'pair' is still loading; GET /ready answers 200 once it is ready", None)
        loaded.set()
        wait_ready(url)
        assert post(url, "pair", json={"inputs": [{"text": "a", "text_pair": "b"}]}).status_code == 200


def test_a_model_that_fails_to_load_makes_the_server_unhealthy(task_runs, monkeypatch):
    from encoder_tasks.serving.models import ServedModel

    def broken_load(self):
        raise OSError("model.safetensors: unreadable")

    monkeypatch.setattr(ServedModel, "load", broken_load)
    with live_server({"pair": task_runs["pair"].model_dir}, ready=False) as url:
        for _ in range(500):
            answer = httpx.get(f"{url}/ready")
            if answer.json()["status"] != "loading":
                break
            threading.Event().wait(0.02)
        assert answer.status_code == 503 and answer.json()["status"] == "failed"
        # the reason is in the server log; an answer to anyone shows no exception text
        assert answer.json()["models"]["pair"]["error"] == "failed to load; the server log says why"
        answer = post(url, "pair", json={"inputs": [{"text": "a", "text_pair": "b"}]})
        refused(answer, 503, "model 'pair' failed to load; the server log says why", None)
        health = httpx.get(f"{url}/health")  # liveness fails too: an orchestrator restarts it
        assert health.status_code == 503 and health.json()["status"] == "failed"


def test_a_value_that_fits_no_branch_of_a_union_is_named_once():
    from pydantic import BaseModel, ValidationError

    from encoder_tasks.serving.errors import validation_error

    class Body(BaseModel):
        input: str | list[str]

    def message(body):
        with pytest.raises(ValidationError) as caught:
            Body.model_validate(body)
        return validation_error([{**e, "loc": ("body", *e["loc"])} for e in caught.value.errors()]).message

    assert message({"input": 3}) == "input: expected a valid string or a valid list, found 3 (int)"
    assert message({"input": ["a", 3]}) == "input[1]: expected a valid string, found 3 (int)"

"""Bodies and connections from the open internet (issue 26, reproductions 3, 5, 7 and 11): a lone
surrogate, invalid UTF-8, another charset or deep nesting is a 400/415 naming what and where; a
chunked body is stopped at the byte limit; slow headers and slow bodies are answered 408 and closed;
past the connection cap a new connection gets a JSON 503 at once."""

import json
import select
import socket
import time

import httpx
import pytest

from encoder_tasks.serving.body import MAX_DEPTH, NOT_JSON, check_json
from encoder_tasks.serving.errors import ApiError
from tests.serving import live_server

PREDICT = "/v1/models/{}/predict"
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server(task_runs):
    models = {"sst2": task_runs["classification"].model_dir, "qa": task_runs["qa"].model_dir}
    models["emb"] = task_runs["embedding"].model_dir
    with live_server(
        models, max_inputs_per_request=4, max_chars_per_input=1000, header_timeout=1.0, body_timeout=1.0
    ) as url:
        yield url


def post(url, path, content, headers=JSON):
    return httpx.post(url + path, content=content, headers=headers, timeout=60)


def refused(answer, status, message, field=None, tei=False):
    assert answer.status_code == status, answer.text
    if tei:
        assert message in answer.json()["error"], answer.text
        return
    error = answer.json()["error"]
    assert message in error["message"], error["message"]
    if field is not None:
        assert error["param"] == field, error


QA = '"question": "who?", "context": "ann lives here"'


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (PREDICT.format("sst2"), r'{"inputs": [{"text": "a \ud800"}]}', "inputs[0].text"),
        (PREDICT.format("sst2"), r'{"inputs": [{"te\udc00xt": "a"}]}', "inputs[0]"),
        (PREDICT.format("sst2"), r'{"inputs": [{"text": "a"}], "parameters": {"\ud800": 1}}', "parameters"),
        (PREDICT.format("qa"), '{"inputs": [{"id": "q\\ud800", ' + QA + "}]}", "inputs[0].id"),
        ("/v1/embeddings", r'{"model": "emb", "input": ["ok", "a \ud800 b"]}', "input[1]"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_its_field_on_every_route(server, path, body, field):
    answer = post(server, path, body)
    refused(answer, 400, "a lone surrogate \\u", field)
    assert post(server, PREDICT.format("sst2"), '{"inputs": [{"text": "fine"}]}').status_code == 200


def test_tei_routes_refuse_a_lone_surrogate_in_their_error_shape(server):
    refused(
        post(server, "/embed", r'{"inputs": "a \ud800"}'),
        400,
        "inputs: expected text, found a lone",
        tei=True,
    )


def test_body_errors_say_what_and_where(server):
    path = PREDICT.format("sst2")
    answer = post(server, path, b'{"inputs": [{"text": "caf\xe9"}]}')
    refused(answer, 400, "request body: expected UTF-8 text, found the byte 0xe9 at byte 25", "request body")
    answer = post(
        server, path, '{"inputs": [{"text": "a"}]}', {"content-type": "application/json; charset=latin-1"}
    )
    refused(answer, 415, "found charset 'latin-1'", "request body")
    deep = '{"inputs": [{"text": "a"}], "parameters": {"x": ' + "[" * 200 + "]" * 200 + "}}"
    refused(
        post(server, path, deep), 400, f"expected JSON nested at most {MAX_DEPTH} levels deep", "request body"
    )
    deeper = "[" * 10_000 + "]" * 10_000  # past Python's own recursion limit
    refused(post(server, path, deeper), 400, "expected JSON nested at most", "request body")
    answer = post(server, path, '{"inputs": [{"text": ""}]}')
    refused(answer, 400, "inputs[0].text: expected a non-empty text, found ''", "inputs[0].text")
    answer = post(server, path, '{"inputs": [{"text": "a"}')  # malformed: the parser names the place
    refused(answer, 400, "request body: expected JSON, found invalid JSON at line 1 column 26")


def test_check_json_leaves_good_bodies_alone():
    good = {"inputs": [{"text": "é ü 😀"}], "parameters": {"top_k": 3}}
    assert check_json(json.dumps(good).encode()) == good
    assert check_json(b'{"inputs": [') is NOT_JSON  # the route's parser names line and column
    with pytest.raises(ApiError, match=r"inputs\[1\]\.text: expected text, found a lone surrogate \\udfff"):
        check_json(rb'{"inputs": [{"text": "ok"}, {"text": "\udfff"}]}')


def _connect(url):
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def _read_answer(sock, within=20.0):
    """Everything the server sends until it closes the connection (or ``within`` s pass)."""
    deadline, data = time.monotonic() + within, b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sock], [], [], 0.2)
        if ready:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return data, True
            if not chunk:
                return data, True
            data += chunk
    return data, False


def test_every_route_reads_the_json_the_body_check_parsed_without_parsing_it_again(server, monkeypatch):
    import starlette.requests

    parses = []

    class CountingJson:
        def loads(self, *args, **kwargs):
            parses.append(1)
            return json.loads(*args, **kwargs)

    monkeypatch.setattr(starlette.requests, "json", CountingJson())
    answer = post(server, PREDICT.format("sst2"), json.dumps({"inputs": [{"text": "fine"}]}))
    assert answer.status_code == 200 and len(answer.json()["predictions"]) == 1, answer.text
    embedded = post(server, "/v1/embeddings", json.dumps({"model": "emb", "input": ["a", "b"]}))
    assert embedded.status_code == 200 and len(embedded.json()["data"]) == 2, embedded.text
    tei = post(server, "/embed", json.dumps({"inputs": ["a"]}))
    assert tei.status_code == 200 and len(tei.json()) == 1, tei.text
    assert not parses
    broken = post(server, PREDICT.format("sst2"), '{"inputs": [')  # not JSON: the route's parser
    assert broken.status_code in (400, 422) and parses == [1], broken.text


def test_a_chunked_body_is_stopped_at_the_byte_limit(server):
    sock = _connect(server)
    try:
        sock.sendall(
            b"POST /v1/models/sst2/predict HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        chunk = b"a" * 16384
        sent, answer = 0, b""
        while sent < 300 * 2**20:  # what the server reads before it answers, at most 300 MB
            ready, _, _ = select.select([sock], [], [], 0.005)
            if ready:
                answer, _ = _read_answer(sock)
                break
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except (BrokenPipeError, ConnectionResetError):
                answer, _ = _read_answer(sock)
                break
            sent += len(chunk)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    message = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["message"]
    limit = int(message.split("expected at most ")[1].split(" ")[0])
    assert "stopped reading" in message
    assert sent < limit + 8 * 2**20, (sent, limit)  # stopped near the limit, not at 300 MB


def test_slow_headers_and_slow_bodies_are_answered_408_and_closed(server):
    slow_headers = _connect(server)
    slow_body = _connect(server)
    try:
        slow_headers.sendall(b"POST /v1/models/sst2/predict HTTP/1.1\r\nHost: x\r\n")  # and no more
        slow_body.sendall(
            b"POST /v1/models/sst2/predict HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 100\r\n\r\n" + b'{"inputs": '
        )
        answer, closed = _read_answer(slow_headers)
        assert closed and answer.startswith(b"HTTP/1.1 408"), answer
        assert b"--header_timeout" in answer
        answer, closed = _read_answer(slow_body)
        assert closed and answer.startswith(b"HTTP/1.1 408"), answer
        assert b"--body_timeout" in answer
    finally:
        slow_headers.close()
        slow_body.close()
    assert post(server, PREDICT.format("sst2"), '{"inputs": [{"text": "fine"}]}').status_code == 200


def test_past_the_connection_cap_a_new_connection_gets_a_json_503_at_once(task_runs):
    with live_server({"sst2": task_runs["classification"].model_dir}, max_connections=3) as url:
        held = [_connect(url) for _ in range(3)]
        try:
            time.sleep(0.2)  # accepted by the server
            extra = _connect(url)
            answer, closed = _read_answer(extra)
            extra.close()
            assert closed and answer.startswith(b"HTTP/1.1 503"), answer
            body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
            assert "--max_connections" in body["error"]["message"]
            assert b"retry-after: 1" in answer.lower()
        finally:
            for sock in held:
                sock.close()
        time.sleep(0.2)
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200


def test_special_tokens_typed_in_a_text_are_text(server):
    served = server.app.state.served["sst2"]
    tokenizer = served.predictor.tokenizer
    ids = tokenizer("a fine [SEP] film [CLS]")["input_ids"]
    assert ids.count(tokenizer.sep_token_id) == 1 and ids.count(tokenizer.cls_token_id) == 1  # its own only
    answer = post(server, PREDICT.format("sst2"), '{"inputs": [{"text": "a fine [SEP] film"}]}')
    assert answer.status_code == 200, answer.text


def test_the_pure_python_parser_keeps_the_same_limits(task_runs):
    # serve runs on httptools where installed (the serve extra) and h11 with --http h11: the
    # header timeout and the connection cap hold over both.
    from encoder_tasks.serving.protocol import http_protocol

    assert http_protocol("auto").__name__ == "HttpToolsProtocol"  # the serve extra installs it
    models = {"sst2": task_runs["classification"].model_dir}
    with live_server(models, http="h11", header_timeout=1.0, max_connections=2) as url:
        slow = _connect(url)
        try:
            slow.sendall(b"POST /v1/models/sst2/predict HTTP/1.1\r\nHost: x\r\n")
            answer, closed = _read_answer(slow)
            assert closed and answer.startswith(b"HTTP/1.1 408") and b"--header_timeout" in answer
        finally:
            slow.close()
        assert post(url, PREDICT.format("sst2"), '{"inputs": [{"text": "fine"}]}').status_code == 200


def test_an_unknown_http_parser_is_refused_naming_the_flag():
    from encoder_tasks.errors import UserError
    from encoder_tasks.serving.app import ServeOptions

    with pytest.raises(UserError, match="http"):
        ServeOptions(http="gunicorn")


def test_the_body_limit_is_the_flag_or_what_the_other_limits_allow():
    from encoder_tasks.serving.app import ServeOptions, _body_limit

    assert _body_limit(ServeOptions()) == 32 << 20  # below 2,048 x 20,000 characters escaped
    assert _body_limit(ServeOptions(max_body_bytes=4096)) == 4096
    small = ServeOptions(max_inputs_per_request=4, max_chars_per_input=1000)
    assert _body_limit(small) == 4 * (6 * 1000 + 1024) + (1 << 16)  # no request of the limits is larger

"""Access (issue 26, reproductions 10 and 11): with an API key, everything but ``/health`` needs it
(Bearer as OpenAI and TEI clients send it, or X-API-Key); CORS only for the origins given; answers
to anyone show no paths; ``/docs`` is one page with nothing from a CDN, or off."""

import re

import httpx
import pytest

from tests.serving import live_server

KEY = "s3cret-key"
PREDICT = "/v1/models/sst2/predict"
BODY = {"inputs": [{"text": "a fine film"}]}


@pytest.fixture(scope="module")
def server(task_runs):
    models = {"sst2": task_runs["classification"].model_dir, "emb": task_runs["embedding"].model_dir}
    with live_server(models, api_key=KEY, cors_origins="https://app.example") as url:
        yield url


def test_health_is_open_and_shows_no_paths(server, task_runs):
    answer = httpx.get(f"{server}/health")
    assert answer.status_code == 200 and answer.json()["models"]["sst2"] == {
        "task": "classification",
        "state": "ready",
    }
    assert str(task_runs["classification"].model_dir) not in answer.text
    head = httpx.head(f"{server}/health")
    assert head.status_code == 200 and head.content == b""


@pytest.mark.parametrize("path", ["/ready", "/metrics", "/v1/models", "/docs", "/openapi.json"])
def test_everything_else_needs_the_key(server, path):
    answer = httpx.get(f"{server}{path}")
    assert answer.status_code == 401, answer.text
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert answer.json()["error"]["message"].startswith("expected an API key")
    assert httpx.get(f"{server}{path}", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_the_key_is_accepted_as_bearer_or_x_api_key_and_a_wrong_one_refused(server):
    assert httpx.post(server + PREDICT, json=BODY).status_code == 401
    wrong = httpx.post(server + PREDICT, json=BODY, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "not this server's" in wrong.json()["error"]["message"]
    for headers in ({"Authorization": f"Bearer {KEY}"}, {"X-API-Key": KEY}, {"api-key": KEY}):
        answer = httpx.post(server + PREDICT, json=BODY, headers=headers, timeout=60)
        assert answer.status_code == 200, (headers, answer.text)
    tei = httpx.post(f"{server}/embed", json={"inputs": "a"})  # TEI's error shape on TEI's routes
    assert tei.status_code == 401 and tei.json()["error_type"] == "Unauthorized"
    ok = httpx.post(
        f"{server}/embed", json={"inputs": "a"}, headers={"Authorization": f"Bearer {KEY}"}, timeout=60
    )
    assert ok.status_code == 200, ok.text


def test_cors_answers_only_the_origins_given(server):
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    ok = httpx.options(server + PREDICT, headers={"Origin": "https://app.example", **preflight})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://app.example"
    other = httpx.options(server + PREDICT, headers={"Origin": "https://evil.example", **preflight})
    assert "access-control-allow-origin" not in other.headers


def test_docs_are_one_page_with_nothing_from_a_cdn(server):
    page = httpx.get(f"{server}/docs", headers={"Authorization": f"Bearer {KEY}"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/v1/models/{name}/predict" in page.text and "a fine film" in page.text
    assert not re.search(r"<script|<link|https?://", page.text), "the page loads nothing from elsewhere"


def test_docs_off_and_the_key_from_the_environment(task_runs, monkeypatch):
    monkeypatch.setenv("ENCODER_TASKS_API_KEY", "from-env")
    with live_server({"sst2": task_runs["classification"].model_dir}, ready=False, docs="off") as url:
        assert httpx.get(f"{url}/v1/models").status_code == 401
        headers = {"Authorization": "Bearer from-env"}
        assert httpx.get(f"{url}/v1/models", headers=headers).status_code == 200
        assert httpx.get(f"{url}/docs", headers=headers).status_code == 404
        assert httpx.get(f"{url}/openapi.json", headers=headers).status_code == 404

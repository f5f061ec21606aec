"""``encoder-tasks serve``: every task's trained run behind one real server on 127.0.0.1, answering
exactly what the ``predict`` CLI writes, under concurrent load too (micro-batched), with health,
readiness, the model list and Prometheus metrics."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from encoder_tasks.serving.metrics import parse_metrics
from tests.helpers import assert_close_records, cli_records
from tests.serving import live_server

TASKS = ["classification", "pair", "ner", "qa", "embedding", "mlm"]
#: Predictions of the same inputs in different batches differ in the last digits, never in a label.
BATCHED = 2e-5


@pytest.fixture(scope="module")
def server(task_runs):
    """Every task's run, served at fp32 (as the CLI is run below), each model under its task name."""
    with live_server(
        {task: task_runs[task].model_dir for task in TASKS}, precision="fp32", max_wait_ms=50
    ) as url:
        yield url


def predict(url, name, inputs, **body):
    answer = httpx.post(f"{url}/v1/models/{name}/predict", json={"inputs": inputs, **body}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.parametrize("task", TASKS)
def test_the_server_answers_what_the_predict_cli_writes(server, task_runs, tmp_path, task):
    run = task_runs[task]
    answer = predict(server, task, run.records)
    assert answer["model"] == task and answer["task"] == task
    assert_close_records(answer["predictions"], cli_records(run, tmp_path), BATCHED)


def test_one_record_object_is_one_input_and_parameters_apply_to_one_request(server, task_runs):
    masked = {"text": "the [MASK] sat on the mat"}
    default = predict(server, "mlm", masked)["predictions"]
    narrowed = predict(server, "mlm", [masked], parameters={"top_k": 2})["predictions"]
    assert len(default) == len(narrowed) == 1
    assert len(default[0]["masks"][0]) == 5  # predict's --top_k default
    assert narrowed[0]["masks"][0] == default[0]["masks"][0][:2]
    assert len(predict(server, "mlm", [masked])["predictions"][0]["masks"][0]) == 5  # nothing stuck


def test_concurrent_requests_get_the_answers_of_one_at_a_time_requests_in_shared_batches(server, task_runs):
    texts = [r["text"] for r in task_runs["ner"].records] + [
        r["text"] for r in task_runs["classification"].records
    ]
    requests = [
        (
            "ner" if i % 2 else "classification",
            [{"text": texts[(i + k) % len(texts)]} for k in range(1 + i % 3)],
        )
        for i in range(24)
    ]
    alone = [predict(server, name, inputs)["predictions"] for name, inputs in requests]
    before = _batched_requests(server)
    start = threading.Barrier(8)

    def send(i):
        if i < 8:
            start.wait(timeout=30)  # the first eight leave together
        name, inputs = requests[i]
        return predict(server, name, inputs)["predictions"]

    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(send, range(24)))
    for i, (found, expected) in enumerate(zip(together, alone)):
        assert_close_records(found, expected, BATCHED, where=f"request {i}")
    shared = _batched_requests(server) - before
    assert shared > 0, "no model batch merged two requests"


def _batched_requests(url) -> float:
    """Model batches so far that merged more than one request (from /metrics)."""
    values = parse_metrics(httpx.get(f"{url}/metrics").text)
    total = count_one = 0.0
    for (name, labels), value in values.items():
        if name == "encoder_tasks_batch_requests_count":
            total += value
        elif name == "encoder_tasks_batch_requests_bucket" and ("le", "1") in labels:
            count_one += value
    return total - count_one


def test_health_ready_and_the_model_list(server, task_runs):
    health = httpx.get(f"{server}/health").json()
    assert health["status"] == "ok"
    assert {name: about["state"] for name, about in health["models"].items()} == dict.fromkeys(TASKS, "ready")
    assert httpx.get(f"{server}/ready").status_code == 200
    listing = httpx.get(f"{server}/v1/models").json()
    assert listing["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"], m["task"]) for m in listing["data"]] == [
        (task, "model", "encoder-tasks", task) for task in TASKS
    ]
    assert httpx.get(f"{server}/v1/models/ner").json()["task"] == "ner"
    assert httpx.get(f"{server}/docs").status_code == 200
    assert "/v1/models/{name}/predict" in httpx.get(f"{server}/openapi.json").json()["paths"]


def test_the_openai_client_lists_the_served_models(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused")
    assert [m.id for m in client.models.list()] == TASKS


def test_metrics_count_requests_errors_latency_and_queues(server):
    def values():
        return parse_metrics(httpx.get(f"{server}/metrics").text)

    before = values()
    route = "/v1/models/{name}/predict"
    ok = ("encoder_tasks_requests_total", (("code", "200"), ("model", "classification"), ("route", route)))
    bad = (
        "encoder_tasks_request_errors_total",
        (("code", "400"), ("model", "classification"), ("route", route)),
    )
    latency = (
        "encoder_tasks_request_duration_seconds_count",
        (("model", "classification"), ("route", route)),
    )
    predict(server, "classification", [{"text": "fine"}])
    predict(server, "classification", [{"text": "fine"}])
    httpx.post(f"{server}/v1/models/classification/predict", json={"inputs": [{"text": 3}]})
    after = values()
    assert after[ok] - before.get(ok, 0) == 2
    assert after[bad] - before.get(bad, 0) == 1
    assert after[latency] - before.get(latency, 0) == 3
    for task in TASKS:
        assert after[("encoder_tasks_model_ready", (("model", task),))] == 1
        assert after[("encoder_tasks_queue_depth", (("model", task),))] == 0
    assert after[("encoder_tasks_requests_in_flight", ())] == 1  # this very request


def test_a_client_that_disconnects_costs_nobody_else_their_answer(server, task_runs):
    served = server.app.state.served["ner"]
    gate, entered = threading.Event(), threading.Event()
    original = served.batcher.predict

    def held(inputs, overrides):  # the model is busy until the test lets it go
        entered.set()
        assert gate.wait(30)
        return original(inputs, overrides)

    inputs = [{"text": "john smith lives in paris ."}]
    expected = predict(server, "ner", inputs)["predictions"]
    before = parse_metrics(httpx.get(f"{server}/metrics").text)
    served.batcher.predict = held
    try:
        with ThreadPoolExecutor(2) as pool:
            kept = pool.submit(predict, server, "ner", inputs)
            assert entered.wait(30)
            with pytest.raises(httpx.ReadTimeout):  # this client gives up and closes its connection
                httpx.post(f"{server}/v1/models/ner/predict", json={"inputs": inputs * 3}, timeout=0.5)
            deadline = time.monotonic() + 30
            while _closed(server, before) < 1 and time.monotonic() < deadline:
                time.sleep(0.02)  # until the server has noticed the disconnect
            gate.set()
            assert kept.result(timeout=60)["predictions"] == expected
    finally:
        served.batcher.predict = original
        gate.set()
    assert _closed(server, before) == 1
    assert predict(server, "ner", inputs)["predictions"] == expected  # and it keeps serving


def _closed(url, before) -> float:
    key = (
        "encoder_tasks_requests_total",
        (("code", "499"), ("model", "ner"), ("route", "/v1/models/{name}/predict")),
    )
    return parse_metrics(httpx.get(f"{url}/metrics").text).get(key, 0) - before.get(key, 0)


def test_exports_and_bare_encoders_are_served_like_runs(server, task_runs, tiny_bert, tmp_path):
    from encoder_tasks.cli import main

    run = task_runs["embedding"]
    assert main(["export", str(run.model_dir), str(tmp_path / "st")]) == 0  # sentence-transformers
    expected = predict(server, "embedding", run.records)["predictions"]
    with live_server({"st": tmp_path / "st", "bare": tiny_bert}, precision="fp32") as url:
        listing = {m["id"]: m["task"] for m in httpx.get(f"{url}/v1/models").json()["data"]}
        assert listing == {"st": "embedding", "bare": "embedding"}
        assert_close_records(predict(url, "st", run.records)["predictions"], expected, BATCHED)
        vectors = predict(url, "bare", run.records)["predictions"]
        assert [len(r["embedding"]) for r in vectors] == [len(r["embedding"]) for r in expected]


@pytest.mark.parametrize("backend", ["torch", "onnx", "openvino"])
def test_two_model_workers_answer_what_one_does(task_runs, backend):
    # --model_workers 2: two batches in flight per model (the runtime set up for two callers,
    # a tokenizer per worker); under concurrent load every answer equals the one-worker answer.
    models = {t: task_runs[t].model_dir for t in ("classification", "ner", "embedding")}
    requests = [
        (task, [task_runs[task].records[(i + k) % len(task_runs[task].records)] for k in range(1 + i % 3)])
        for i, task in enumerate(["classification", "ner", "embedding"] * 6)
    ]
    with live_server(models, precision="fp32", backend=backend) as url:
        alone = [predict(url, name, inputs)["predictions"] for name, inputs in requests]
    with live_server(models, precision="fp32", backend=backend, model_workers=2) as url:
        served = url.app.state.served["classification"]
        assert len(served.batcher._threads) == 2
        if backend != "torch":
            assert served.predictor.model.encoder.backend == backend
        with ThreadPoolExecutor(6) as pool:
            together = list(pool.map(lambda r: predict(url, r[0], r[1])["predictions"], requests))
    for i, (found, expected) in enumerate(zip(together, alone)):
        assert_close_records(found, expected, BATCHED, where=f"request {i}")


@pytest.mark.parametrize("backend", ["torch", "onnx", "openvino"])
def test_a_model_on_one_thread_answers_what_every_core_does(task_runs, backend):
    # --model_threads 1: the model computes on one core (the event loop keeps the others).
    import torch

    run = task_runs["embedding"]
    before = torch.get_num_threads()
    try:
        with live_server({"e": run.model_dir}, precision="fp32", backend=backend) as url:
            alone = predict(url, "e", run.records[:3])["predictions"]
        with live_server({"e": run.model_dir}, precision="fp32", backend=backend, model_threads=1) as url:
            encoder = url.app.state.served["e"].predictor.model.encoder
            if backend == "torch":  # what a new thread, as the model's worker, starts with
                seen: list[int] = []
                worker = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
                worker.start()
                worker.join()
                assert seen == [1]
            elif backend == "onnx":
                assert encoder.session.get_session_options().intra_op_num_threads == 1
            else:
                assert encoder.settings["threads"] == 1
            found = predict(url, "e", run.records[:3])["predictions"]
    finally:
        torch.set_num_threads(before)
    assert_close_records(found, alone, BATCHED, where="one thread")

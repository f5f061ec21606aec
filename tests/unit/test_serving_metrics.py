"""Prometheus text (encoder_tasks.serving.metrics): the exposition format, and the middleware that
counts every request and turns an unexpected exception into a 500 JSON."""

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from encoder_tasks.serving.errors import ApiError, install_handlers  # noqa: E402
from encoder_tasks.serving.metrics import ObserveRequests, ServerMetrics, parse_metrics  # noqa: E402


def test_counters_gauges_and_histograms_render_as_prometheus_text():
    metrics = ServerMetrics()
    metrics.answered("sst2", "/v1/models/{name}/predict", 200, 0.004)
    metrics.answered("sst2", "/v1/models/{name}/predict", 200, 0.3)
    metrics.answered("sst2", "/v1/models/{name}/predict", 413, 0.001)
    metrics.queue_depth.set(3, model="sst2")
    metrics.batch_inputs.observe(5, model="sst2")
    text = metrics.render()
    assert "# TYPE encoder_tasks_requests_total counter" in text
    assert "# TYPE encoder_tasks_request_duration_seconds histogram" in text
    assert "# TYPE encoder_tasks_queue_depth gauge" in text
    values = parse_metrics(text)
    labels = (("model", "sst2"), ("route", "/v1/models/{name}/predict"))
    assert values[("encoder_tasks_requests_total", (("code", "200"), *labels))] == 2
    assert values[("encoder_tasks_request_errors_total", (("code", "413"), *labels))] == 1
    assert ("encoder_tasks_request_errors_total", (("code", "200"), *labels)) not in values
    # buckets are cumulative: 0.001 <= 0.001, 0.004 <= 0.005, 0.3 <= 0.5
    bucket = "encoder_tasks_request_duration_seconds_bucket"
    assert values[(bucket, (("le", "0.001"), *labels))] == 1
    assert values[(bucket, (("le", "0.005"), *labels))] == 2
    assert values[(bucket, (("le", "0.25"), *labels))] == 2
    assert values[(bucket, (("le", "0.5"), *labels))] == 3
    assert values[(bucket, (("le", "+Inf"), *labels))] == 3
    assert values[("encoder_tasks_request_duration_seconds_count", labels)] == 3
    assert values[("encoder_tasks_request_duration_seconds_sum", labels)] == pytest.approx(0.305)
    assert values[("encoder_tasks_queue_depth", (("model", "sst2"),))] == 3
    assert values[("encoder_tasks_batch_size_bucket", (("le", "4"), ("model", "sst2")))] == 0
    assert values[("encoder_tasks_batch_size_bucket", (("le", "8"), ("model", "sst2")))] == 1


def test_label_values_are_escaped_and_read_back():
    metrics = ServerMetrics()
    odd = 'a "quoted", back\\slash\nand newline'
    metrics.batch_failures.inc(model=odd)
    assert '\\"quoted\\", back\\\\slash\\nand newline' in metrics.render()
    assert parse_metrics(metrics.render())[("encoder_tasks_batch_failures_total", (("model", odd),))] == 1


def _app(metrics):
    app = FastAPI()
    app.state.served = {"m": None}
    install_handlers(app)
    app.add_middleware(ObserveRequests, metrics=metrics)

    @app.get("/v1/models/{name}/boom")
    async def boom(name: str):
        raise RuntimeError("a bug")

    @app.get("/v1/models/{name}/refuse")
    async def refuse(name: str, request: Request):
        request.state.model = "chosen"
        raise ApiError(413, "inputs: too many", "inputs")

    @app.get("/embed")
    async def tei(request: Request):
        raise ApiError(400, "inputs: expected a string", "inputs")

    return app


def test_unexpected_exceptions_answer_500_json_and_every_request_is_counted(caplog):
    metrics = ServerMetrics()
    client = TestClient(_app(metrics), raise_server_exceptions=False)
    answer = client.get("/v1/models/m/boom")
    assert answer.status_code == 500
    assert answer.json()["error"]["message"] == "internal error; the server log has the traceback"
    assert "RuntimeError: a bug" in caplog.text  # logged with its traceback
    answer = client.get("/v1/models/m/refuse")
    assert answer.status_code == 413 and answer.json()["error"]["param"] == "inputs"
    assert client.get("/embed").json() == {"error": "inputs: expected a string", "error_type": "Validation"}
    assert client.get("/nowhere").status_code == 404
    values = parse_metrics(metrics.render())
    total = "encoder_tasks_requests_total"
    # the model named in the path (a served name) or chosen by the route; the route's template
    assert values[(total, (("code", "500"), ("model", "m"), ("route", "/v1/models/{name}/boom")))] == 1
    assert values[(total, (("code", "413"), ("model", "chosen"), ("route", "/v1/models/{name}/refuse")))] == 1
    assert values[(total, (("code", "404"), ("model", ""), ("route", "unmatched")))] == 1
    assert values[("encoder_tasks_requests_in_flight", ())] == 0

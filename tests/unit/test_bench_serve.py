"""The load test's own parts (``benchmarks/bench_serve.py``, ``benchmarks/serve_baselines.py``):
percentiles, the bounded load generator's accounting, the toolkit's batch statistics, label
agreement, the tables, the baseline servers' route, and a whole run's result file against fake
servers on 127.0.0.1 (no model, no training). No timing is asserted."""

from __future__ import annotations

import asyncio
import json
import random
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from benchmarks import bench_serve, serve_baselines, tables
from encoder_tasks.serving.metrics import ServerMetrics

REPO = Path(__file__).resolve().parents[2]


# ---- percentiles ------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 2, 3, 10, 101])
def test_percentile_matches_numpy(size):
    values = [random.Random(size).uniform(0, 100) for _ in range(size)]
    for q in (0, 50, 90, 99, 100):
        assert bench_serve.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_of_nothing_is_none():
    assert bench_serve.percentile([], 50) is None


# ---- the load generator, against an in-process ASGI app ------------------------------------------
class FakeServer:
    """An ASGI app answering the task-native route: label ``pos`` for texts with "good"; every
    ``fail_every``-th request a 500, or a 200 that is not JSON with ``garbage``; counts how many
    requests were in flight at once."""

    def __init__(self, fail_every: int = 0, delay: float = 0.0, garbage: bool = False):
        self.fail_every, self.delay, self.garbage = fail_every, delay, garbage
        self.seen = self.in_flight = self.most_in_flight = 0

    async def __call__(self, scope, receive, send):
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.seen += 1
        number = self.seen
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(self.delay)
        self.in_flight -= 1
        status, payload = 200, None
        if self.fail_every and number % self.fail_every == 0:
            if self.garbage:
                payload = b"<html>oops</html>"
            else:
                status, payload = 500, b'{"error": "boom"}'
        if payload is None:
            texts = [r["text"] for r in json.loads(body)["inputs"]]
            found = [{"text": t, "label": "pos" if "good" in t else "neg"} for t in texts]
            payload = json.dumps({"predictions": found}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def load(app, bodies, concurrency, max_requests, max_seconds=30.0):
    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await bench_serve.run_load(
                client, "http://test/v1/models/sst2/predict", bodies, concurrency, max_requests, max_seconds
            )

    return asyncio.run(go())


BODIES = bench_serve.request_bodies(["a good film", "a dull film", "good, good", "bad"])


def test_load_stops_at_the_request_bound_and_counts_every_request():
    app = FakeServer(fail_every=5, delay=0.001)
    row, labels = load(app, BODIES, concurrency=4, max_requests=20)
    assert app.seen == row["sent"] == 20
    assert (row["completed"], row["errors"], row["error_kinds"]) == (16, 4, {"HTTP 500": 4})
    assert row["error_sample"].startswith("HTTP 500")
    assert row["stopped_by"] == "requests"
    assert 1 < app.most_in_flight <= 4  # never more than the concurrency in flight
    # Request i sends body i % 4; the failed ones (5, 10, 15, 20 -> indices 0, 1, 2, 3 of the
    # order they arrived) leave 16 labels, each the right one for its text.
    assert sum(len(found) for found in labels.values()) == 16
    assert set(labels) == {0, 1, 2, 3}
    assert {i: set(found) for i, found in labels.items()} == {0: {"pos"}, 1: {"neg"}, 2: {"pos"}, 3: {"neg"}}
    assert row["requests_per_s"] == pytest.approx(16 / row["seconds"])
    latency = row["latency_ms"]
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]


def test_load_stops_at_the_time_bound():
    app = FakeServer(delay=0.02)
    row, _ = load(app, BODIES, concurrency=2, max_requests=10**6, max_seconds=0.2)
    assert row["stopped_by"] == "time"
    assert row["sent"] == row["completed"] == app.seen < 10**6
    assert row["errors"] == 0


def test_a_body_that_is_not_json_is_an_error_not_a_crash():
    row, labels = load(FakeServer(fail_every=2, garbage=True), BODIES, concurrency=1, max_requests=4)
    assert (row["completed"], row["error_kinds"]) == (2, {"unreadable body": 2})
    assert sorted(labels) == [0, 2]


def test_a_connection_that_fails_is_counted_by_its_kind():
    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
            return await bench_serve.run_load(client, "http://test/x", BODIES, 2, 6, 30.0)

    row, labels = asyncio.run(go())
    assert (row["sent"], row["completed"], row["error_kinds"], labels) == (6, 0, {"ConnectError": 6}, {})
    assert row["latency_ms"]["p50"] is None


# ---- what the toolkit batched, and agreement -----------------------------------------------------
def test_batch_stats_reads_the_difference_between_two_scrapes():
    metrics = ServerMetrics()
    metrics.batch_inputs.observe(1, model="sst2")
    metrics.batch_inputs.observe(5, model="other")  # another model's batches are not counted
    before = metrics.render()
    for size, tokens in ((4, 40), (8, 100)):
        metrics.batch_inputs.observe(size, model="sst2")
        metrics.batch_requests.observe(size, model="sst2")
        metrics.batch_tokens.observe(tokens, model="sst2")
    stats = bench_serve.batch_stats(before, metrics.render())
    assert stats == {
        "batches": 2,
        "mean_batch_inputs": 6.0,
        "mean_batch_requests": 6.0,
        "mean_batch_tokens": 70.0,
    }
    assert bench_serve.batch_stats(before, before)["mean_batch_inputs"] is None


def test_agreement_uses_the_majority_label_and_the_inputs_both_answered():
    report = bench_serve.agreement(
        {"toolkit": {0: ["a"], 1: ["b", "b", "a"], 2: ["a"]}, "naive": {0: ["b"], 1: ["b"], 3: ["a", "b"]}}
    )
    assert report["naive"] == {
        "reference": "toolkit",
        "inputs_compared": 2,
        "disagreements": 1,
        "disagreeing_inputs": [0],
        "inconsistent_inputs": 1,
    }
    assert report["toolkit"]["disagreements"] == 0 and report["toolkit"]["inconsistent_inputs"] == 1
    # Without the toolkit, the first contender is the reference.
    assert (
        bench_serve.agreement({"naive": {0: ["a"]}, "pipeline": {0: ["b"]}})["pipeline"]["reference"]
        == "naive"
    )


# ---- tables ------------------------------------------------------------------------------------
def fake_row(contender, kind, concurrency, rate, p50, errors=0, batch=None):
    row = {
        "contender": contender,
        "input": kind,
        "concurrency": concurrency,
        "completed": 100,
        "errors": errors,
        "requests_per_s": rate,
        "latency_ms": {"p50": p50, "p90": p50 * 1.5, "p99": p50 * 2, "mean": p50, "max": p50 * 3},
    }
    if batch is not None:
        row["toolkit_batches"] = {"mean_batch_inputs": batch}
    return row


def test_tables_hold_every_row_and_judge_the_targets_honestly():
    rows = [
        fake_row("toolkit", "short", 1, 50.0, 20.0, batch=1.0),
        fake_row("naive", "short", 1, 52.0, 19.0),
        fake_row("toolkit", "short", 32, 300.0, 100.0, batch=12.5),
        fake_row("naive", "short", 32, 55.0, 580.0),
        fake_row("toolkit", "long", 1, 10.0, 130.0, batch=1.0),
        fake_row("naive", "long", 1, 10.0, 100.0),
    ]
    found = bench_serve.serve_tables(
        rows, {"short": bench_serve.agreement({"toolkit": {0: ["a"]}, "naive": {0: ["a"]}})}
    )
    for table in found.values():  # every table renders as the docs render it
        tables.render_markdown(table)
    assert [r[:2] for r in found["short"]["rows"]] == [
        ["toolkit", "1"],
        ["naive", "1"],
        ["toolkit", "32"],
        ["naive", "32"],
    ]
    assert found["short"]["rows"][2][5] == "5.45x" and found["short"]["rows"][2][-1] == "12.50"
    assert found["short"]["rows"][3][-1] == ""  # no batch size for a baseline
    short_speed, short_latency, long_speed, long_latency = found["targets"]["rows"]
    assert short_speed[0] == "short" and long_speed[0] == "long" and short_latency[0] == long_latency[0] == ""
    assert short_speed[1] == "toolkit / naive throughput at concurrency 32 >= 5x"
    assert short_speed[2:] == ["5.45x (300.0 vs 55.0 requests/s, naive)", "met"]
    assert short_latency[1] == "toolkit / naive p50 latency at concurrency 1 <= 1.2x"
    assert short_latency[2:] == ["1.05x (20.0 vs 19.0 ms, naive)", "met"]
    assert long_speed[2:] == ["not measured", "not measured"]  # no concurrency-32 rows
    assert long_latency[2:] == ["1.30x (130.0 vs 100.0 ms, naive)", "not met"]
    assert found["agreement"]["rows"] == [
        ["toolkit", "short", "-", "-", "-", "0"],
        ["naive", "short", "toolkit", "1", "0", "0"],
    ]


def test_targets_compare_with_the_naive_servers_better_configuration():
    rows = [
        fake_row("toolkit", "short", 32, 300.0, 100.0),
        fake_row("naive", "short", 32, 50.0, 600.0),
        fake_row("naive-threadpool", "short", 32, 75.0, 400.0),
        fake_row("toolkit", "short", 1, 50.0, 20.0),
        fake_row("naive", "short", 1, 50.0, 19.0),
        fake_row("naive-threadpool", "short", 1, 40.0, 25.0),
    ]
    speed, latency, *_ = bench_serve.serve_tables(rows, {})["targets"]["rows"]
    assert speed[2:] == ["4.00x (300.0 vs 75.0 requests/s, naive-threadpool)", "not met"]
    assert latency[2:] == ["1.05x (20.0 vs 19.0 ms, naive)", "met"]


def test_a_speedup_with_errors_does_not_meet_the_target():
    rows = [
        fake_row("toolkit", "short", 32, 600.0, 10.0, errors=3),
        fake_row("naive", "short", 32, 50.0, 10.0),
    ]
    target = bench_serve.serve_tables(rows, {})["targets"]["rows"][0]
    assert target[2].startswith("12.00x") and target[3] == "not met"


# ---- the baseline servers' route --------------------------------------------------------------------
class CountingForward:
    """A model stand-in: answers each input with ``pos``, and counts forwards running at once."""

    def __init__(self):
        self.lock, self.now, self.most = threading.Lock(), 0, 0

    def __call__(self, inputs):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.01)
        with self.lock:
            self.now -= 1
        return [{"text": r["text"], "label": "pos", "score": 1.0} for r in inputs]


def ask(app, requests):
    async def go():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test"
        ) as client:
            return await asyncio.gather(
                *(client.request(method, path, **kw) for method, path, kw in requests)
            )

    return asyncio.run(go())


def test_serial_baseline_runs_one_forward_at_a_time_and_answers_each_request():
    forward = CountingForward()
    app = serve_baselines.build_app("sst2", serve_baselines.pipeline_parse, forward, "serial")
    body = {"json": {"inputs": [{"text": "good"}]}}
    answers = ask(app, [("POST", "/v1/models/sst2/predict", body)] * 8)
    assert [a.json() for a in answers] == [
        {"predictions": [{"text": "good", "label": "pos", "score": 1.0}]}
    ] * 8
    assert forward.most == 1


def test_threadpool_baseline_answers_too():
    app = serve_baselines.build_app("sst2", serve_baselines.pipeline_parse, CountingForward(), "threadpool")
    answers = ask(app, [("POST", "/v1/models/sst2/predict", {"json": {"inputs": [{"text": "x"}]}})] * 4)
    assert {a.status_code for a in answers} == {200}


def test_baseline_refuses_bad_requests_with_json_naming_the_field():
    app = serve_baselines.build_app("sst2", serve_baselines.pipeline_parse, CountingForward())
    wrong_model, bad_json, bad_text, ready = ask(
        app,
        [
            ("POST", "/v1/models/nope/predict", {"json": {"inputs": [{"text": "x"}]}}),
            ("POST", "/v1/models/sst2/predict", {"content": b"{not json"}),
            ("POST", "/v1/models/sst2/predict", {"json": {"inputs": [{"text": 3}]}}),
            ("GET", "/ready", {}),
        ],
    )
    assert wrong_model.status_code == 404 and wrong_model.json()["error"]["param"] == "model"
    assert bad_json.status_code == 400 and "expected JSON" in bad_json.json()["error"]["message"]
    assert bad_text.status_code == 422 and bad_text.json()["error"]["param"] == "inputs[0].text"
    assert "expected a string, found {'text': 3}" in bad_text.json()["error"]["message"]
    assert ready.status_code == 200


def test_a_server_that_exits_before_ready_is_an_error_with_its_output(tmp_path):
    command = [sys.executable, "-c", "import sys; print('no model here'); sys.exit(3)"]
    server = serve_baselines.ServerProcess(command, serve_baselines.free_port(), tmp_path / "server.log")
    with pytest.raises(RuntimeError, match="(?s)exited with 3.*no model here"):
        server.__enter__()
    assert server.process is None  # stopped and its log closed


# ---- a whole run, against fake servers in their own processes ---------------------------------------
FAKE_SERVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import uvicorn
    from fastapi.responses import PlainTextResponse
    from benchmarks.serve_baselines import build_app, pipeline_parse
    from encoder_tasks.serving.metrics import ServerMetrics

    metrics = ServerMetrics()

    def forward(inputs):
        metrics.batch_inputs.observe(len(inputs), model="sst2")
        return [{{"text": r["text"], "label": "pos" if "good" in r["text"] else "neg"}} for r in inputs]

    app = build_app("sst2", pipeline_parse, forward)
    app.get("/metrics")(lambda: PlainTextResponse(metrics.render()))
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    """
)


def test_a_run_writes_its_result_file(tmp_path, monkeypatch):
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER.format(repo=str(REPO)))
    texts = {"short": ["a good film", "bad"], "long": ["good " * 300, "dull " * 300]}
    stats = {kind: {"inputs": 2} for kind in texts}
    monkeypatch.setattr(bench_serve, "require_data", lambda *paths: None)
    monkeypatch.setattr(bench_serve, "trained_model", lambda work, n: (tmp_path, tmp_path, {"flags": []}))
    monkeypatch.setattr(bench_serve, "load_inputs", lambda run_dir, short, long: (texts, stats))
    monkeypatch.setattr(
        bench_serve,
        "contender_command",
        lambda name, r, e, port, p, f: [sys.executable, str(script), str(port)],
    )
    argv = ["--quick", "--contenders", "toolkit,naive", "--precision", "fp32", "--concurrency", "1,2",
            "--requests", "4", "--warmup", "2", "--work", str(tmp_path / "work")]  # fmt: skip
    assert bench_serve.main(argv) == 0
    (path,) = (tmp_path / "work" / "results").glob("serve-*.json")
    result = json.loads(path.read_text())
    assert result["settings"]["precision_resolved"] == "fp32"
    assert set(result) >= {
        "command",
        "environment",
        "settings",
        "model",
        "inputs",
        "servers",
        "rows",
        "agreement",
        "tables",
    }
    assert [
        (r["contender"], r["input"], r["concurrency"], r["completed"], r["errors"]) for r in result["rows"]
    ] == [
        (name, kind, level, 4, 0)
        for name in ("toolkit", "naive")
        for kind in ("short", "long")
        for level in (1, 2)
    ]
    assert result["rows"][0]["toolkit_batches"]["mean_batch_inputs"] == 1.0
    assert result["agreement"]["short"]["naive"]["inputs_compared"] == 2
    assert result["agreement"]["short"]["naive"]["disagreements"] == 0
    assert set(result["tables"]) == {"short", "long", "targets", "agreement"}
    assert result["servers"]["naive"]["peak_rss_mib"] > 0
    for table in result["tables"].values():
        tables.render_markdown(table)

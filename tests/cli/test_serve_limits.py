"""Work per request is bounded by what it costs (issue 26, reproductions 1 and 6): the budget counts
every window of a long text, a request over ``--max_request_tokens`` is a 413 before any forward
pass, a lone request over the batch budget runs in slices, a request that times out or whose
client leaves stops computing at the next forward pass, and a full queue answers 429 at once."""

import threading
import time

import httpx
import pytest

from encoder_tasks.serving.metrics import parse_metrics
from encoder_tasks.serving.models import _windows
from tests.serving import live_server

PREDICT = "/v1/models/{}/predict"
LONG = " ".join(["a fine film and a long review of it"] * 60)  # ~480 tokens: several windows


def post(url, name, body, timeout=60):
    return httpx.post(url + PREDICT.format(name), json=body, timeout=timeout)


def metric(url, name, **labels):
    values = parse_metrics(httpx.get(f"{url}/metrics", timeout=30).text)
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


class SlowForward:
    """A forward pre-hook on the model: counts passes and makes each take ``seconds``."""

    def __init__(self, model, seconds):
        self.passes, self.seconds = 0, seconds
        self.handle = model.register_forward_pre_hook(self)

    def __call__(self, module, args):
        self.passes += 1
        time.sleep(self.seconds)


def test_windows_cover_a_text_as_the_tokenizer_cuts_it(task_runs):
    from encoder_tasks.inference import Predictor

    predictor = Predictor.load(task_runs["classification"].model_dir)
    tokenizer = predictor.tokenizer
    max_length, stride = 32, 8
    for words in (3, 30, 31, 200):
        text = " ".join(["film"] * words)
        cut = tokenizer(
            text, truncation=True, max_length=max_length, stride=stride, return_overflowing_tokens=True
        )
        n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        assert _windows(n, max_length - tokenizer.num_special_tokens_to_add(), stride) == len(
            cut["input_ids"]
        )


@pytest.fixture(scope="module")
def server(task_runs):
    models = {"sst2": task_runs["classification"].model_dir, "qa": task_runs["qa"].model_dir}
    with live_server(
        models, max_request_tokens=4000, max_batch_tokens=600, batch_size=1, request_timeout=1.0, max_queue=2
    ) as url:
        yield url


def test_the_cost_counts_every_window_and_a_request_over_the_cap_is_413(server):
    served = server.app.state.served["sst2"]
    one = served.costs([{"text": LONG}])[0]
    short = served.costs([{"text": "a fine film"}])[0]
    assert short < 10 and one > 2 * 128  # the tiny model reads 128 positions: a long text is windows
    # stride 0: fewer windows than the saved stride; a stride is part of the cost
    assert served.costs([{"text": LONG}], {"window_stride": 0})[0] < one
    count = 4000 // one + 1
    start = time.monotonic()
    answer = post(server, "sst2", {"inputs": [{"text": LONG}] * count})
    assert answer.status_code == 413, answer.text
    error = answer.json()["error"]
    assert error["param"] == "inputs" and "--max_request_tokens" in error["message"]
    assert f"found {one * count} in {count} inputs" in error["message"]
    assert time.monotonic() - start < 30  # refused before any forward pass (no hang)
    assert post(server, "sst2", {"inputs": [{"text": LONG}]}).status_code == 200


def test_a_lone_request_over_the_batch_budget_runs_in_slices_with_the_same_answers(server):
    served = server.app.state.served["sst2"]
    calls, original = [], served.batcher.predict

    def recording(inputs, overrides):
        calls.append(len(inputs))
        return original(inputs, overrides)

    inputs = [{"text": " ".join(["a fine film and a long review"] * 8) + f" {i}"} for i in range(5)]
    whole = served.predictor.predict(inputs)
    served.batcher.predict = recording
    try:
        answer = post(server, "sst2", {"inputs": inputs})
    finally:
        served.batcher.predict = original
    assert answer.status_code == 200, answer.text
    assert sum(calls) == 5 and len(calls) > 1, calls  # 600 tokens a batch: two windowed texts a slice
    got = answer.json()["predictions"]
    assert [p["label"] for p in got] == [p["label"] for p in whole]
    assert all(abs(a["score"] - b["score"]) < 1e-5 for a, b in zip(got, whole))


@pytest.mark.parametrize("how", ["timeout", "client leaves"])
def test_work_stops_when_nobody_waits_for_it(server, how):
    served = server.app.state.served["sst2"]
    before = metric(server, "encoder_tasks_batches_abandoned_total", model="sst2")
    slow = SlowForward(served.predictor.model, 0.1)
    inputs = [{"text": f"film number {i}"} for i in range(60)]  # batch_size 1: 60 passes, 6 s
    try:
        if how == "timeout":
            answer = post(server, "sst2", {"inputs": inputs})
            assert answer.status_code == 503 and "--request_timeout" in answer.json()["error"]["message"]
        else:
            with pytest.raises(httpx.ReadTimeout):
                post(server, "sst2", {"inputs": inputs}, timeout=0.5)
        deadline = time.monotonic() + 30
        while metric(server, "encoder_tasks_batches_abandoned_total", model="sst2") == before:
            assert time.monotonic() < deadline, "the abandoned batch never stopped"
            time.sleep(0.05)
        passes = slow.passes
    finally:
        slow.handle.remove()
    assert passes < 60, passes  # it stopped between forward passes, long before the end
    assert post(server, "sst2", {"inputs": [{"text": "next"}]}).status_code == 200  # the model is free


def test_a_full_queue_answers_429_at_once_and_the_gauge_drops_requests_that_left(server):
    served = server.app.state.served["sst2"]
    gate, original = threading.Event(), served.batcher.predict

    def held(inputs, overrides):
        gate.wait(30)
        return original(inputs, overrides)

    served.batcher.predict = held
    answers = []
    try:
        first = threading.Thread(
            target=lambda: answers.append(post(server, "sst2", {"inputs": [{"text": "a"}]}))
        )
        first.start()  # taken by the worker, which blocks on the gate
        deadline = time.monotonic() + 30
        while served.batcher.depth or not served.batcher._running:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        waiting = [
            threading.Thread(target=lambda: answers.append(post(server, "sst2", {"inputs": [{"text": "b"}]})))
            for _ in range(2)
        ]
        for thread in waiting:
            thread.start()
        while served.batcher.depth < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        start = time.monotonic()
        shed = post(server, "sst2", {"inputs": [{"text": "c"}]})
        assert time.monotonic() - start < 5  # at once, not after --request_timeout
        assert shed.status_code == 429, shed.text
        assert int(shed.headers["retry-after"]) >= 1
        assert "--max_queue 2" in shed.json()["error"]["message"]
        for thread in waiting:
            thread.join(30)
        # both timed out (1 s) while the worker was held: the gauge no longer counts them
        assert metric(server, "encoder_tasks_queue_depth", model="sst2") == 0
        assert metric(server, "encoder_tasks_requests_shed_total", model="sst2") >= 1
    finally:
        gate.set()
        served.batcher.predict = original
        first.join(30)
    assert post(server, "sst2", {"inputs": [{"text": "d"}]}).status_code == 200


def test_a_request_far_over_the_cap_is_refused_from_its_word_count_before_tokenizing(server):
    served = server.app.state.served["sst2"]
    calls, original = [], served.costs

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    served.costs = counting
    try:
        answer = post(server, "sst2", {"inputs": [{"text": " ".join(["film"] * 3000)}] * 4})
    finally:
        del served.costs
    assert answer.status_code == 413, answer.text
    message = answer.json()["error"]["message"]
    # 3,000 words, windowed: the first input alone is past the cap of 4,000, and counting stops
    assert "found at least 6144 in the first 1 of 4 inputs" in message, message
    assert not calls  # never tokenized

"""Micro-batching (encoder_tasks.serving.batcher): what merges, what never does, what fails alone.

The model is a function that records its calls; a gate holds the worker inside a call so the
requests behind it queue up, which makes every batch below deterministic.
"""

import asyncio
import threading

import pytest

from encoder_tasks.serving.batcher import Batcher
from encoder_tasks.serving.errors import ApiError
from encoder_tasks.serving.metrics import ServerMetrics, parse_metrics


class GatedModel:
    """``predict(inputs, overrides)``: echoes each input with the call's overrides; while the gate
    is closed a call waits inside (the worker is busy)."""

    def __init__(self, fail_on: str | None = None):
        self.calls: list[tuple[list[str], dict]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_on = fail_on

    def __call__(self, inputs, overrides):
        self.calls.append(([r["text"] for r in inputs], dict(overrides)))
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"
        if self.fail_on is not None and any(r["text"] == self.fail_on for r in inputs):
            raise ValueError(f"cannot read {self.fail_on!r}")
        return [{"text": r["text"], **overrides} for r in inputs]


def _batcher(model, max_batch_tokens=8192, max_wait_ms=0.0):
    metrics = ServerMetrics()
    batcher = Batcher("m", model, max_batch_tokens, max_wait_ms, metrics)
    batcher.start()
    return batcher, metrics


async def _behind_a_busy_worker(batcher, model, requests):
    """Occupy the worker with one request, queue ``requests`` (texts, overrides, tokens) behind
    it, then let everything run; returns the queued requests' answers (exceptions included)."""
    model.gate.clear()
    first = batcher.submit([{"text": "first"}], {}, tokens=1)
    await asyncio.to_thread(model.entered.wait, 10)
    futures = [batcher.submit([{"text": t} for t in texts], o, tokens=n) for texts, o, n in requests]
    model.gate.set()
    assert await first == [{"text": "first"}]
    return await asyncio.gather(*futures, return_exceptions=True)


def test_queued_requests_merge_into_one_call_and_split_back_in_order():
    model = GatedModel()
    batcher, metrics = _batcher(model)
    requests = [(["a", "b"], {}, 4), (["c"], {}, 2), (["d", "e", "f"], {}, 6)]
    answers = asyncio.run(_behind_a_busy_worker(batcher, model, requests))
    assert answers == [[{"text": "a"}, {"text": "b"}], [{"text": "c"}], [{"text": t} for t in "def"]]
    assert model.calls == [(["first"], {}), (list("abcdef"), {})]
    assert batcher.stop(timeout=5)
    values = parse_metrics(metrics.render())
    assert values[("encoder_tasks_batch_requests_count", (("model", "m"),))] == 2
    assert values[("encoder_tasks_batch_requests_bucket", (("le", "2"), ("model", "m")))] == 1  # the lone one
    assert values[("encoder_tasks_batch_size_sum", (("model", "m"),))] == 7
    assert values[("encoder_tasks_batch_tokens_sum", (("model", "m"),))] == 13


def test_requests_with_different_parameters_never_share_a_call():
    model = GatedModel()
    batcher, _ = _batcher(model)
    requests = [(["a"], {}, 1), (["b"], {"top_k": 3}, 1), (["c"], {}, 1), (["d"], {"top_k": 3}, 1)]
    answers = asyncio.run(_behind_a_busy_worker(batcher, model, requests))
    assert answers == [
        [{"text": "a"}],
        [{"text": "b", "top_k": 3}],
        [{"text": "c"}],
        [{"text": "d", "top_k": 3}],
    ]
    assert model.calls[1:] == [(["a", "c"], {}), (["b", "d"], {"top_k": 3})]
    batcher.stop(timeout=5)


def test_the_token_budget_splits_batches_and_a_request_over_it_runs_alone():
    model = GatedModel()
    batcher, _ = _batcher(model, max_batch_tokens=10)
    requests = [(["a"], {}, 4), (["b"], {}, 4), (["c"], {}, 4), (["big"], {}, 25), (["d"], {}, 3)]
    asyncio.run(_behind_a_busy_worker(batcher, model, requests))
    # arrival order is kept: "d" would fit beside "c" but does not jump over "big"
    assert [texts for texts, _ in model.calls[1:]] == [["a", "b"], ["c"], ["big"], ["d"]]
    batcher.stop(timeout=5)


def test_a_failing_batch_fails_its_own_requests_only():
    model = GatedModel(fail_on="bad")
    batcher, metrics = _batcher(model, max_batch_tokens=2)
    requests = [(["ok1"], {}, 1), (["bad"], {}, 1), (["ok2"], {}, 1), (["ok3"], {}, 1)]
    answers = asyncio.run(_behind_a_busy_worker(batcher, model, requests))
    assert [texts for texts, _ in model.calls[1:]] == [["ok1", "bad"], ["ok2", "ok3"]]
    assert isinstance(answers[0], ApiError) and answers[0].status == 500
    # The answer names the exception's type only; its text (maybe a path or input) is in the log.
    assert "prediction failed (ValueError); see the server log" in answers[1].message
    assert answers[2:] == [[{"text": "ok2"}], [{"text": "ok3"}]]
    assert parse_metrics(metrics.render())[("encoder_tasks_batch_failures_total", (("model", "m"),))] == 1
    # the worker lives on
    assert asyncio.run(_ask(batcher, "later")) == [{"text": "later"}]
    batcher.stop(timeout=5)


async def _ask(batcher, text):
    return await batcher.submit([{"text": text}], {}, tokens=1)


def test_requests_nobody_waits_for_are_skipped():
    model = GatedModel()
    batcher, _ = _batcher(model)

    async def scenario():
        model.gate.clear()
        first = batcher.submit([{"text": "first"}], {}, tokens=1)
        await asyncio.to_thread(model.entered.wait, 10)
        gone = batcher.submit([{"text": "gone"}], {}, tokens=1)
        kept = batcher.submit([{"text": "kept"}], {}, tokens=1)
        gone.cancel()  # a timeout or a disconnect cancels the future
        model.gate.set()
        return await first, await kept

    assert asyncio.run(scenario()) == ([{"text": "first"}], [{"text": "kept"}])
    assert [texts for texts, _ in model.calls] == [["first"], ["kept"]]
    batcher.stop(timeout=5)


def test_a_lone_request_on_an_idle_model_does_not_wait_for_company():
    model = GatedModel()
    batcher, _ = _batcher(model, max_wait_ms=600_000)  # ten minutes: waiting would hang the test

    async def ask_twice():
        return [await asyncio.wait_for(_ask(batcher, t), 10) for t in ("one", "two")]

    assert asyncio.run(ask_twice()) == [[{"text": "one"}], [{"text": "two"}]]
    batcher.stop(timeout=5)


def test_under_load_the_oldest_request_waits_for_company():
    model = GatedModel()
    batcher, _ = _batcher(model, max_wait_ms=600_000, max_batch_tokens=3)

    async def scenario():
        model.gate.clear()
        first = batcher.submit([{"text": "first"}], {}, tokens=1)
        await asyncio.to_thread(model.entered.wait, 10)
        queued = [batcher.submit([{"text": t}], {}, tokens=1) for t in ("a", "b")]
        model.gate.set()
        await first
        # two were queued: the model is under load, so the worker holds them for company until the
        # budget (3 tokens) is full; "c", sent after the first answer, still joins them
        late = batcher.submit([{"text": "c"}], {}, tokens=1)
        return await asyncio.wait_for(asyncio.gather(*queued, late), 10)

    assert asyncio.run(scenario()) == [[{"text": "a"}], [{"text": "b"}], [{"text": "c"}]]
    assert model.calls[1] == (["a", "b", "c"], {})
    batcher.stop(timeout=5)


def test_stop_answers_what_is_queued_then_refuses_new_requests():
    model = GatedModel()
    batcher, _ = _batcher(model)

    async def scenario():
        model.gate.clear()
        first = batcher.submit([{"text": "first"}], {}, tokens=1)
        await asyncio.to_thread(model.entered.wait, 10)
        queued = batcher.submit([{"text": "queued"}], {}, tokens=1)
        stopping = asyncio.ensure_future(asyncio.to_thread(batcher.stop, 10))
        while not batcher.stopping:
            await asyncio.sleep(0.01)
        with pytest.raises(ApiError, match="shutting down"):
            batcher.submit([{"text": "late"}], {}, tokens=1)
        model.gate.set()
        return await first, await queued, await stopping

    assert asyncio.run(scenario()) == ([{"text": "first"}], [{"text": "queued"}], True)


def test_the_wait_budget_sheds_by_the_work_ahead_not_by_the_count():
    # A batch of 100 tokens took ~0.2 s: 2 ms a token. Behind a running 100-token batch, a queued
    # 10-token request (~20 ms of work) fits in a 1 s budget; 1,000 queued tokens (~2 s) do not.
    model = GatedModel()
    metrics = ServerMetrics()
    batcher = Batcher("m", model, 8192, 0.0, metrics, max_queue=100, max_queue_wait_ms=1000)
    batcher.start()

    async def scenario():
        # The first batch pays for set-up: it sets no speed (it would price every token as slow).
        assert await batcher.submit([{"text": "set-up"}], {}, tokens=1) == [{"text": "set-up"}]
        assert batcher._seconds_per_token == 0.0
        model.gate.clear()
        timer = threading.Timer(0.2, model.gate.set)
        timer.start()
        assert await batcher.submit([{"text": "warm"}], {}, tokens=100) == [{"text": "warm"}]
        per_token = batcher._seconds_per_token
        assert 0.0015 < per_token < 0.05  # measured: ~0.2 s over 100 tokens (a loaded machine: more)
        model.gate.clear()
        running = batcher.submit([{"text": "running"}], {}, tokens=100)
        await asyncio.to_thread(model.entered.wait, 10)
        small = batcher.submit([{"text": "small"}], {}, tokens=10)
        assert batcher.estimated_wait() <= (100 + 10) * per_token
        big = batcher.submit([{"text": "big"}], {}, tokens=int(1.0 / per_token) + 50)
        with pytest.raises(ApiError) as refused:
            batcher.submit([{"text": "one more"}], {}, tokens=1)
        model.gate.set()
        return refused.value, await asyncio.gather(running, small, big)

    model.entered.clear()
    error, answers = asyncio.run(scenario())
    assert error.status == 429 and "--max_queue_wait_ms 1000" in error.message
    assert int(error.headers["Retry-After"]) >= 1
    assert answers == [[{"text": "running"}], [{"text": "small"}], [{"text": "big"}]]
    assert batcher.stop(timeout=5)
    shed = parse_metrics(metrics.render())
    assert any(
        name == "encoder_tasks_requests_shed_total" and value == 1 for (name, _), value in shed.items()
    )


def test_requests_still_being_counted_count_as_waiting_at_the_recent_requests_size():
    # A burst passes admission before any of it is queued (its tokens are counted off the event
    # loop): each reserved request counts as the recent requests' tokens, so the burst's tail is
    # refused at once rather than after its counting.
    model = GatedModel()
    batcher = Batcher("m", model, 8192, 0.0, ServerMetrics(), max_queue=3, max_queue_wait_ms=1000)
    batcher.start()

    async def scenario():
        await batcher.submit([{"text": "set-up"}], {}, tokens=1)
        await batcher.submit([{"text": "timed"}], {}, tokens=100)
        per_token, per_request = batcher._seconds_per_token, batcher._tokens_per_request
        assert per_request == pytest.approx(0.8 * 1 + 0.2 * 100)
        with batcher.reserved(), batcher.reserved():
            assert batcher.estimated_wait() == pytest.approx(2 * per_request * per_token)
            batcher.admit()  # two waiting, --max_queue 3: a third fits
            with batcher.reserved(), pytest.raises(ApiError) as refused:
                batcher.admit()
        assert batcher.estimated_wait() == 0.0  # left the blocks: nothing counts as waiting
        batcher.admit()
        return refused.value

    error = asyncio.run(scenario())
    assert error.status == 429 and "3 requests are waiting already (--max_queue 3)" in error.message
    assert batcher.stop(timeout=5)


def test_the_speed_is_a_ratio_of_sums_so_small_batches_do_not_price_tokens_as_slow():
    batcher = Batcher("m", GatedModel(), 8192, 0.0, ServerMetrics(), max_queue_wait_ms=1000)
    batcher.start()

    async def batches():
        for tokens in (1, 5, 1000):  # set-up, a small batch, a large one
            await batcher.submit([{"text": "x"}], {}, tokens=tokens)

    asyncio.run(batches())
    assert batcher.stop(timeout=5)
    # sums, not a mean of per-batch ratios: the 5-token batch's fixed cost is spread over 1,005 tokens
    assert batcher._seconds_per_token == pytest.approx(
        batcher._timed_seconds / batcher._timed_tokens
    ) and batcher._timed_tokens == pytest.approx(0.8 * 5 + 1000)


def test_no_wait_budget_before_the_first_batch_has_run():
    batcher = Batcher("m", GatedModel(), 8192, 0.0, ServerMetrics(), max_queue_wait_ms=0)
    assert batcher.estimated_wait() == 0.0
    batcher.admit()  # no speed measured yet: nothing to estimate with, nothing refused


def test_two_workers_run_two_batches_at_once_each_with_its_own_predict():
    inside = threading.Barrier(2, timeout=10)  # passes only when both workers are inside at once
    seen: list[str] = []

    def worker(tag):
        def predict(inputs, overrides):
            inside.wait()
            seen.append(tag)
            return [{"text": r["text"], "by": tag} for r in inputs]

        return predict

    batcher = Batcher("m", [worker("w0"), worker("w1")], 8192, 0.0, ServerMetrics())
    batcher.start()

    async def two():
        first = batcher.submit([{"text": "a"}], {}, tokens=1)
        await asyncio.sleep(0.05)  # taken by one worker, which now waits inside for the other
        second = batcher.submit([{"text": "b"}], {}, tokens=1)
        return await asyncio.gather(first, second)

    answers = asyncio.run(two())
    assert [a[0]["text"] for a in answers] == ["a", "b"]
    assert {a[0]["by"] for a in answers} == {"w0", "w1"} and sorted(seen) == ["w0", "w1"]
    assert batcher.stop(timeout=5) and not batcher.alive

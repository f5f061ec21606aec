"""Dynamic micro-batching: concurrent requests for one model run together on its own thread.

Each served model has one :class:`Batcher`: requests queue (:meth:`Batcher.submit`, from the event
loop) and a worker thread takes them in arrival order, merging the oldest with the requests behind
it that share its per-request parameters while their token total stays within
``max_batch_tokens`` (a request over the budget alone runs alone). One ``predict`` call answers the
merged inputs (it length-sorts them into forward passes of ``batch_size``); the results are split
back and each request's future is resolved on its event loop. The event loop never runs the model.

When to wait for company: a model that is busy gathers requests by itself (they queue while it
computes), so waiting only pays when traffic is arriving. The worker waits up to ``max_wait_ms``
(from the oldest request's arrival) only while the model is under load: the previous batch merged
several requests, or several are already queued. A lone request on an idle model starts at once,
so batching costs it nothing.

Work is bounded by what it costs. A request's ``tokens`` are the tokens its inputs compute (every
window of a long text counted, :meth:`encoder_tasks.serving.models.ServedModel.costs`); one over
the budget runs alone, in slices of inputs within the budget. Before every forward pass the worker
checks that somebody still waits for the batch (:data:`encoder_tasks.predict.BEFORE_FORWARD`): a
request that timed out or whose client left stops computing at the next pass, not minutes later.

Admission: at most ``max_queue`` requests wait per model, and (``max_queue_wait_ms``) the work
ahead of a new request, the running batch's rest and the queued tokens at the measured seconds per
token, must fit in that wait; one more gets a 429 with ``Retry-After`` at once
(:meth:`Batcher.admit`), not a 503 after the timeout. A request admitted but still being counted
(its tokenizing, off the event loop: :meth:`Batcher.reserved`) counts as waiting, at the tokens
the recent requests had: else a burst of clients arriving at once all pass admission before any
has reached the queue, and the ones refused only after their counting waited ~150 ms for a 429.
The wait budget is what keeps admitted requests at their normal latency under overload: a count
of requests says nothing of how long they take. A request answered elsewhere (timed out, client
gone) leaves the queue and its gauge at once. An exception in a batch fails that
batch's requests only (a task's :class:`~encoder_tasks.errors.UserError` is the client's 400, any
other is a 500 logged with its traceback).

Example:
    >>> import asyncio
    >>> from encoder_tasks.serving.metrics import ServerMetrics
    >>> batcher = Batcher("echo", lambda inputs, overrides: inputs, 8192, 5.0, ServerMetrics(), max_queue=4)
    >>> batcher.start()
    >>> async def ask():
    ...     return await batcher.submit([{"text": "hi"}], {}, tokens=3)
    >>> asyncio.run(ask())
    [{'text': 'hi'}]
    >>> batcher.stop(timeout=5)
    True
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from ..predict import BEFORE_FORWARD
from .errors import ApiError

logger = logging.getLogger(__name__)

Predict = Callable[[list[dict[str, Any]], dict[str, Any]], list[dict[str, Any]]]


class Abandoned(Exception):
    """Raised before a forward pass when nobody waits for the batch any more."""


@dataclass(eq=False)
class Job:
    """One request waiting for its model: its inputs, parameters, tokens (per input) and future."""

    inputs: list[dict[str, Any]]
    overrides: dict[str, Any]
    costs: list[int]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    arrived: float = field(default_factory=time.monotonic)

    @property
    def tokens(self) -> int:
        return sum(self.costs)

    @property
    def key(self) -> str:
        # Requests with different parameters never share a predict call.
        return json.dumps(self.overrides, sort_keys=True, default=str)


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    """Resolve ``future`` on its own loop, unless it was answered already (timeout, disconnect)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _settle_all(answers: list[tuple[asyncio.Future, Any, BaseException | None]]) -> None:
    for future, result, error in answers:
        _settle(future, result, error)


class Batcher:
    """The queue and worker thread(s) of one model; see the module docstring. ``predict``: one
    function, or one per worker thread (``serve --model_workers N``: N batches in flight at once,
    each worker with its own tokenizer, which a second thread must not share)."""

    def __init__(
        self,
        name: str,
        predict: Predict | list[Predict],
        max_batch_tokens: int,
        max_wait_ms: float,
        metrics,
        max_queue: int | None = None,
        max_queue_wait_ms: float | None = None,
    ):
        self.name, self._metrics = name, metrics
        self._predicts = list(predict) if isinstance(predict, list | tuple) else [predict]
        self.max_batch_tokens, self.max_wait = max_batch_tokens, max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.max_queue_wait = None if max_queue_wait_ms is None else max_queue_wait_ms / 1000.0
        # Seconds per token: decayed sums of batch seconds and tokens (a ratio of sums, so a
        # small batch's fixed cost does not pass for a per-token one); 0 until a batch after the
        # first has run (the first forward pays for set-up: it would price every token as slow).
        self._seconds_per_token = 0.0
        self._timed_seconds, self._timed_tokens, self._batches_run = 0.0, 0, 0
        self._reserved = 0  # admitted requests not queued yet (being counted)
        self._tokens_per_request = 0.0  # a moving average of the requests queued
        self._running_tokens: dict[int, tuple[int, float]] = {}  # worker -> (tokens, since)
        self._queue: list[Job] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._abandon = False  # set when the drain time is over: the running batch stops too
        self._running: dict[int, list[Job]] = {}  # worker thread id -> its batch
        self._last_batch_requests = 0
        self._batch_seconds = 0.0  # a moving average, for Retry-After
        self._threads = [
            threading.Thread(
                target=self._work,
                args=(i,),
                name=f"encoder-tasks-model-{name}" + (f"-{i}" if len(self._predicts) > 1 else ""),
                daemon=True,
            )
            for i in range(len(self._predicts))
        ]

    @property
    def predict(self) -> Predict:
        """The (first) worker's predict function; set: every worker's (read at each batch)."""
        return self._predicts[0]

    @predict.setter
    def predict(self, function: Predict) -> None:
        self._predicts = [function] * len(self._predicts)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    @property
    def alive(self) -> bool:
        """Whether a worker thread still runs."""
        return any(thread.is_alive() for thread in self._threads)

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def depth(self) -> int:
        """Requests waiting (not yet taken into a batch, and still waited for)."""
        with self._cond:
            return self._live()

    def _live(self) -> int:
        return sum(1 for job in self._queue if not job.future.done())

    @contextlib.contextmanager
    def reserved(self):
        """While the block runs (a request admitted, its tokens being counted), admission counts
        the request as waiting. Leave the block before :meth:`submit`, which counts it queued.

        Example:
            >>> from encoder_tasks.serving.metrics import ServerMetrics
            >>> batcher = Batcher("echo", lambda inputs, overrides: inputs, 64, 5.0, ServerMetrics(), max_queue=1)
            >>> with batcher.reserved():
            ...     batcher.admit()
            Traceback (most recent call last):
            ...
            encoder_tasks.serving.errors.ApiError: model 'echo': 1 requests are waiting already (--max_queue 1); try again shortly
        """
        with self._cond:
            self._reserved += 1
        try:
            yield
        finally:
            with self._cond:
                self._reserved -= 1

    def retry_after(self) -> int:
        """Seconds a refused client should wait: about the time the queue takes to clear."""
        with self._cond:
            depth = self._live() + self._reserved
        per_request = self._batch_seconds / max(self._last_batch_requests, 1)
        return max(1, min(60, math.ceil(per_request * depth)))

    def estimated_wait(self) -> float:
        """Seconds before a request queued now would start: the running batch's rest and every
        queued token, at the seconds per token the last batches took (0 before any has run)."""
        with self._cond:
            queued = sum(job.tokens for job in self._queue if not job.future.done())
            queued += self._reserved * self._tokens_per_request
            running = list(self._running_tokens.values())
        per_token, now = self._seconds_per_token, time.monotonic()
        rest = sum(max(0.0, tokens * per_token - (now - since)) for tokens, since in running)
        # Several workers clear the queue together (each batch measured at its own, slower pace).
        return (queued * per_token + rest) / len(self._threads)

    def admit(self) -> None:
        """Raise ApiError 429 (with ``Retry-After``) when ``max_queue`` requests already wait, or
        the work ahead would take longer than ``max_queue_wait_ms``."""
        if self.max_queue_wait is not None and self._seconds_per_token:
            wait = self.estimated_wait()
            if wait > self.max_queue_wait:
                self._shed(
                    f"the work ahead would take about {wait * 1000:.0f} ms "
                    f"(--max_queue_wait_ms {self.max_queue_wait * 1000:g})",
                    max(1, math.ceil(wait)),
                )
        if self.max_queue is None:
            return
        with self._cond:
            depth = self._live() + self._reserved
        if depth >= self.max_queue:
            self._shed(
                f"{depth} requests are waiting already (--max_queue {self.max_queue})", self.retry_after()
            )

    def _shed(self, why: str, retry_after: int) -> None:
        """Count a refused request and raise its 429 with ``Retry-After``."""
        self._metrics.shed.inc(model=self.name)
        raise ApiError(
            429,
            f"model {self.name!r}: {why}; try again shortly",
            kind="overloaded",
            headers={"Retry-After": str(retry_after)},
        )

    def submit(
        self, inputs: list[dict[str, Any]], overrides: dict[str, Any], tokens: int | list[int]
    ) -> asyncio.Future:
        """Queue one request (call from the event loop); its future resolves to one record per input.
        ``tokens``: the tokens each input computes (or one total). Raises ApiError 429 when the
        queue is full, 503 when the server is stopping."""
        loop = asyncio.get_running_loop()
        if isinstance(tokens, int):  # one total: spread over the inputs, for slicing
            costs = [tokens // len(inputs)] * len(inputs) if inputs else []
            if costs:
                costs[0] += tokens - sum(costs)
        else:
            costs = list(tokens)
        job = Job(inputs, dict(overrides), costs, loop.create_future(), loop)
        with self._cond:
            if self._stopping:
                raise ApiError(503, f"model {self.name!r}: the server is shutting down")
        self.admit()
        with self._cond:
            self._tokens_per_request = (
                0.8 * self._tokens_per_request + 0.2 * job.tokens if self._tokens_per_request else job.tokens
            )
            self._queue.append(job)
            self._metrics.queue_depth.set(self._live(), model=self.name)
            self._cond.notify()
        job.future.add_done_callback(self._gone)
        return job.future

    def _gone(self, future: asyncio.Future) -> None:
        """A request answered or given up (timeout, disconnect): the gauge stops counting it."""
        with self._cond:
            self._metrics.queue_depth.set(self._live(), model=self.name)

    def stop(self, timeout: float | None = None) -> bool:
        """Answer what is queued, then end the worker; True when it ended within ``timeout``.
        Past ``timeout`` the batch running stops at its next forward pass (its requests have been
        answered 503 by then) and the worker is given a moment to end."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if self.alive:
            self._abandon = True
            for thread in self._threads:
                thread.join(5.0)
        return not self.alive

    def _before_forward(self) -> None:
        """Before each forward pass (worker thread): stop when nobody waits for this batch."""
        mine = self._running.get(threading.get_ident(), [])
        if self._abandon or all(job.future.done() for job in mine):
            raise Abandoned()

    # ---- the worker thread ------------------------------------------------------------------------
    def _work(self, worker: int) -> None:
        BEFORE_FORWARD.set(self._before_forward)  # this thread's context only
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._run(batch, self._predicts[worker])

    def _drop_answered(self) -> None:
        self._queue = [job for job in self._queue if not job.future.done()]

    def _next_batch(self) -> list[Job] | None:
        with self._cond:
            while True:
                self._drop_answered()
                if self._queue:
                    break
                if self._stopping:
                    return None
                self._cond.wait()
            if not self._stopping and (self._last_batch_requests > 1 or len(self._queue) > 1):
                deadline = self._queue[0].arrived + self.max_wait
                # (another worker may take the queue while this one waits: stop waiting then)
                while not self._stopping and self._queue and self._queued_tokens() < self.max_batch_tokens:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                self._drop_answered()
                if not self._queue:  # everyone gave up, or another worker took them, while we waited
                    self._last_batch_requests = 0
                    return []
            batch = self._take()
            self._last_batch_requests = len(batch)
            self._metrics.queue_depth.set(len(self._queue), model=self.name)
            return batch

    def _queued_tokens(self) -> int:
        key = self._queue[0].key
        return sum(job.tokens for job in self._queue if job.key == key)

    def _take(self) -> list[Job]:
        """The oldest request and those behind it with its parameters, within the token budget."""
        first = self._queue[0]
        batch, total = [first], first.tokens
        for job in self._queue[1:]:
            if job.key != first.key:
                continue
            if total + job.tokens > self.max_batch_tokens:
                break  # arrival order: a later, smaller request does not jump the queue
            batch.append(job)
            total += job.tokens
        taken = set(map(id, batch))
        self._queue = [job for job in self._queue if id(job) not in taken]
        return batch

    def _slices(self, batch: list[Job]) -> list[list[dict[str, Any]]]:
        """The inputs of ``batch`` in predict calls: all together, or a lone request over the
        budget in consecutive slices within it (at least one input each)."""
        inputs = [record for job in batch for record in job.inputs]
        if len(batch) > 1 or batch[0].tokens <= self.max_batch_tokens:
            return [inputs]
        slices, current, total = [], [], 0
        for record, cost in zip(batch[0].inputs, batch[0].costs):
            if current and total + cost > self.max_batch_tokens:
                slices.append(current)
                current, total = [], 0
            current.append(record)
            total += cost
        return [*slices, current] if current else slices

    def _run(self, batch: list[Job], predict: Predict | None = None) -> None:
        predict = predict or self._predicts[0]
        batch = [job for job in batch if not job.future.done()]
        if not batch:
            return
        labels = {"model": self.name}
        self._metrics.batch_inputs.observe(sum(len(job.inputs) for job in batch), **labels)
        self._metrics.batch_requests.observe(len(batch), **labels)
        self._metrics.batch_tokens.observe(sum(job.tokens for job in batch), **labels)
        tokens = sum(job.tokens for job in batch)
        start = time.monotonic()
        me = threading.get_ident()
        with self._cond:
            self._running[me], self._running_tokens[me] = batch, (tokens, start)
        try:
            results: list[dict[str, Any]] = []
            for inputs in self._slices(batch):
                self._before_forward()  # between slices too (a slice may be one short input)
                answer = predict(inputs, batch[0].overrides)
                if len(answer) != len(inputs):
                    raise RuntimeError(f"predict returned {len(answer)} records for {len(inputs)} inputs")
                results.extend(answer)
        except Abandoned:
            self._metrics.abandoned.inc(**labels)
            logger.info(
                "model %r: nobody waits for a batch of %d requests; stopped it", self.name, len(batch)
            )
            # answered already, unless the server is past its drain time
            self._resolve(batch, error=ApiError(503, f"model {self.name!r}: the server is shutting down"))
            return
        except UserError as exc:  # a parameter the task refuses (QA doc_stride against max_length)
            self._resolve(batch, error=ApiError(400, str(exc), getattr(exc, "field", None)))
            return
        except Exception as exc:  # one bad batch fails its own requests, never the worker
            logger.exception("model %r: a batch of %d requests failed", self.name, len(batch))
            self._metrics.batch_failures.inc(**labels)
            message = f"model {self.name!r}: prediction failed ({type(exc).__name__}); see the server log"
            self._resolve(batch, error=ApiError(500, message, kind="server_error"))
            return
        finally:
            with self._cond:
                self._running.pop(me, None)
                self._running_tokens.pop(me, None)
            elapsed = time.monotonic() - start
            self._batch_seconds = (
                elapsed if not self._batch_seconds else 0.8 * self._batch_seconds + 0.2 * elapsed
            )
            self._batches_run += 1
            if self._batches_run > 1:
                self._timed_seconds = 0.8 * self._timed_seconds + elapsed
                self._timed_tokens = 0.8 * self._timed_tokens + max(tokens, 1)
                self._seconds_per_token = self._timed_seconds / self._timed_tokens
        self._resolve(batch, results)

    @staticmethod
    def _resolve(
        batch: list[Job], results: list[Any] | None = None, error: BaseException | None = None
    ) -> None:
        """Answer every request of ``batch``: its slice of ``results``, or ``error``. One wake-up
        per event loop for the whole batch (a wake-up per request costs the loop a system call
        and a pass each: 32 of them for a batch of 32 one-sentence requests)."""
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        start = 0
        for job in batch:
            result = None if results is None else results[start : start + len(job.inputs)]
            start += len(job.inputs)
            by_loop.setdefault(job.loop, []).append((job.future, result, error))
        for loop, answers in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, answers)
            except RuntimeError:  # the loop has closed: nobody is waiting any more
                pass

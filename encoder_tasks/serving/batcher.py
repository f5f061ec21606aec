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

A request already answered elsewhere (timed out, client gone) is skipped; an exception in a batch
fails that batch's requests only, and is logged with its traceback.

Example:
    >>> import asyncio
    >>> from encoder_tasks.serving.metrics import ServerMetrics
    >>> batcher = Batcher("echo", lambda inputs, overrides: inputs, 8192, 5.0, ServerMetrics())
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
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import ApiError

logger = logging.getLogger(__name__)

Predict = Callable[[list[dict[str, Any]], dict[str, Any]], list[dict[str, Any]]]


@dataclass(eq=False)
class Job:
    """One request waiting for its model: its inputs, parameters, token count and future."""

    inputs: list[dict[str, Any]]
    overrides: dict[str, Any]
    tokens: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    arrived: float = field(default_factory=time.monotonic)

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


class Batcher:
    """The queue and worker thread of one model; see the module docstring."""

    def __init__(self, name: str, predict: Predict, max_batch_tokens: int, max_wait_ms: float, metrics):
        self.name, self.predict, self._metrics = name, predict, metrics
        self.max_batch_tokens, self.max_wait = max_batch_tokens, max_wait_ms / 1000.0
        self._queue: list[Job] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._last_batch_requests = 0
        self._thread = threading.Thread(target=self._work, name=f"encoder-tasks-model-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def depth(self) -> int:
        """Requests waiting (not yet taken into a batch)."""
        with self._cond:
            return len(self._queue)

    def submit(self, inputs: list[dict[str, Any]], overrides: dict[str, Any], tokens: int) -> asyncio.Future:
        """Queue one request (call from the event loop); its future resolves to one record per input."""
        loop = asyncio.get_running_loop()
        job = Job(inputs, dict(overrides), tokens, loop.create_future(), loop)
        with self._cond:
            if self._stopping:
                raise ApiError(503, f"model {self.name!r}: the server is shutting down")
            self._queue.append(job)
            self._metrics.queue_depth.set(len(self._queue), model=self.name)
            self._cond.notify()
        return job.future

    def stop(self, timeout: float | None = None) -> bool:
        """Answer what is queued, then end the worker; True when it ended within ``timeout``."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    # ---- the worker thread ------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._run(batch)

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
                while not self._stopping and self._queued_tokens() < self.max_batch_tokens:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                self._drop_answered()
                if not self._queue:  # everyone gave up while we waited
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

    def _run(self, batch: list[Job]) -> None:
        batch = [job for job in batch if not job.future.done()]
        if not batch:
            return
        inputs = [record for job in batch for record in job.inputs]
        labels = {"model": self.name}
        self._metrics.batch_inputs.observe(len(inputs), **labels)
        self._metrics.batch_requests.observe(len(batch), **labels)
        self._metrics.batch_tokens.observe(sum(job.tokens for job in batch), **labels)
        try:
            results = self.predict(inputs, batch[0].overrides)
            if len(results) != len(inputs):
                raise RuntimeError(f"predict returned {len(results)} records for {len(inputs)} inputs")
        except Exception as exc:  # one bad batch fails its own requests, never the worker
            logger.exception("model %r: a batch of %d requests failed", self.name, len(batch))
            self._metrics.batch_failures.inc(**labels)
            message = (
                f"model {self.name!r}: prediction failed ({type(exc).__name__}: {exc}); see the server log"
            )
            for job in batch:
                self._resolve(job, None, ApiError(500, message, kind="server_error"))
            return
        start = 0
        for job in batch:
            self._resolve(job, results[start : start + len(job.inputs)], None)
            start += len(job.inputs)

    @staticmethod
    def _resolve(job: Job, result: Any, error: BaseException | None) -> None:
        try:
            job.loop.call_soon_threadsafe(_settle, job.future, result, error)
        except RuntimeError:  # the loop has closed: nobody is waiting any more
            pass

"""Prometheus text exposition of what the server does, written here (no client library needed).

``GET /metrics`` renders :class:`ServerMetrics`: requests and errors by model, route and status
code, request latency, the size of each model batch (inputs, requests, tokens), queue depth,
requests in flight and whether each model is ready. Every value is updated under one lock: the
event loop and the model worker threads both write.

Example:
    >>> metrics = ServerMetrics()
    >>> metrics.requests.inc(model="sst2", route="/v1/models/{name}/predict", code="200")
    >>> 'encoder_tasks_requests_total{code="200",model="sst2",route="/v1/models/{name}/predict"} 1' in (
    ...     metrics.render()
    ... )
    True
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import threading
import time

logger = logging.getLogger(__name__)

#: Seconds: from a millisecond (a tiny model, one short text) to a request that timed out.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Inputs (or requests) in one model batch.
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: Tokens in one model batch.
TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def _labels(labels: dict[str, str], extra: str = "") -> str:
    parts = [f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items())]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help_text: str, lock: threading.Lock):
        self.name, self.help, self._lock = name, help_text, lock
        self._values: dict[tuple, object] = {}

    def _key(self, labels: dict[str, str]) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in labels.items()))

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Metric):
    """A count that only goes up (``inc``)."""

    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        with self._lock:
            key = self._key(labels)
            self._values[key] = self._values.get(key, 0.0) + amount

    def lines(self) -> list[str]:
        return [f"{self.name}{_labels(dict(k))} {_number(v)}" for k, v in sorted(self._values.items())]


class Gauge(Counter):
    """A value that goes up and down (``set``, ``inc`` with a negative amount)."""

    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        with self._lock:
            self._values[self._key(labels)] = float(value)

    def value(self, **labels: str) -> float:
        with self._lock:
            return float(self._values.get(self._key(labels), 0.0))


class Histogram(_Metric):
    """Observations counted into cumulative buckets, with their sum and count."""

    kind = "histogram"

    def __init__(self, name: str, help_text: str, lock: threading.Lock, buckets: tuple[float, ...]):
        super().__init__(name, help_text, lock)
        self.buckets = tuple(buckets)

    def observe(self, value: float, **labels: str) -> None:
        with self._lock:
            key = self._key(labels)
            counts, total = self._values.get(key, ([0] * (len(self.buckets) + 1), 0.0))
            counts[bisect.bisect_left(self.buckets, value)] += 1
            self._values[key] = (counts, total + value)

    def lines(self) -> list[str]:
        out = []
        for key, (counts, total) in sorted(self._values.items()):
            labels, running = dict(key), 0
            for bound, count in zip((*self.buckets, math.inf), counts):
                running += count
                le = 'le="' + _number(bound) + '"'
                out.append(f"{self.name}_bucket{_labels(labels, le)} {running}")
            out.append(f"{self.name}_sum{_labels(labels)} {_number(total)}")
            out.append(f"{self.name}_count{_labels(labels)} {running}")
        return out


class ServerMetrics:
    """Every metric the server exports; ``render()`` is the body of ``GET /metrics``."""

    def __init__(self):
        lock = threading.Lock()
        self._lock = lock
        prefix = "encoder_tasks_"
        self.requests = Counter(prefix + "requests_total", "HTTP requests answered, by status code.", lock)
        self.errors = Counter(
            prefix + "request_errors_total", "HTTP requests answered with 4xx or 5xx.", lock
        )
        self.latency = Histogram(
            prefix + "request_duration_seconds", "Time to answer a request.", lock, LATENCY_BUCKETS
        )
        self.in_flight = Gauge(prefix + "requests_in_flight", "Requests received, not yet answered.", lock)
        self.batch_inputs = Histogram(
            prefix + "batch_size", "Inputs in one model batch (one predict call).", lock, SIZE_BUCKETS
        )
        self.batch_requests = Histogram(
            prefix + "batch_requests", "Requests merged into one model batch.", lock, SIZE_BUCKETS
        )
        self.batch_tokens = Histogram(
            prefix + "batch_tokens", "Tokens in one model batch.", lock, TOKEN_BUCKETS
        )
        self.batch_failures = Counter(prefix + "batch_failures_total", "Model batches that raised.", lock)
        self.queue_depth = Gauge(prefix + "queue_depth", "Requests waiting for their model.", lock)
        self.model_ready = Gauge(prefix + "model_ready", "1 when the model is loaded and warmed up.", lock)
        self.shed = Counter(
            prefix + "requests_shed_total", "Requests refused 429 because the model's queue was full.", lock
        )
        self.abandoned = Counter(
            prefix + "batches_abandoned_total",
            "Model batches stopped between forward passes: nobody waited for them any more.",
            lock,
        )
        self._all = [
            self.requests,
            self.errors,
            self.latency,
            self.in_flight,
            self.batch_inputs,
            self.batch_requests,
            self.batch_tokens,
            self.batch_failures,
            self.queue_depth,
            self.model_ready,
            self.shed,
            self.abandoned,
        ]
        self.in_flight.set(0)

    def answered(self, model: str, route: str, code: int, seconds: float) -> None:
        """Count one answered request."""
        labels = {"model": model, "route": route}
        self.requests.inc(code=str(code), **labels)
        if code >= 400:
            self.errors.inc(code=str(code), **labels)
        self.latency.observe(seconds, **labels)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for metric in self._all:
                lines += metric.header() + metric.lines()
        return "\n".join(lines) + "\n"


class ObserveRequests:
    """ASGI middleware: counts and times every HTTP request by model, route template and status,
    and answers an unexpected exception with a 500 JSON (logged with its traceback) so that no
    request, however bad, takes the server down. Routes name their model in ``request.state.model``
    (:func:`encoder_tasks.serving.models.choose_model` does)."""

    def __init__(self, app, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, sent = time.perf_counter(), {"status": None}

        async def observed_send(message):
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
            await send(message)

        self.metrics.in_flight.inc(1)
        try:
            await self.app(scope, receive, observed_send)
        except Exception:
            logger.exception("unexpected error answering %s %s", scope.get("method"), scope.get("path"))
            if sent["status"] is None:
                await _send_500(scope, send)
            sent["status"] = 500
        finally:
            self.metrics.in_flight.inc(-1)
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.answered(_model_of(scope), route, sent["status"] or 500, time.perf_counter() - start)


def _model_of(scope) -> str:
    """The model a request was for: as its route chose it, else the served name in its path."""
    model = (scope.get("state") or {}).get("model")
    if model is None:
        name = (scope.get("path_params") or {}).get("name")
        app = scope.get("app")
        served = getattr(getattr(app, "state", None), "served", {}) if app is not None else {}
        model = name if name in served else ""
    return model


async def _send_500(scope, send) -> None:
    from .errors import ApiError, style_for

    error = ApiError(500, "internal error; the server log has the traceback", kind="server_error")
    body = json.dumps(error.body(style_for(scope.get("path", "")))).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 500, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def parse_metrics(text: str) -> dict[tuple[str, tuple], float]:
    """``{(name, sorted label pairs): value}`` of an exposition text (what tests and scripts read).

    Example:
        >>> parse_metrics('x_total{a="1",b="q"} 3\\n# HELP x_total\\n')
        {('x_total', (('a', '1'), ('b', 'q'))): 3.0}
    """
    values = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels = []
        for part in _split_labels(rest.rstrip("}")):
            key, _, quoted = part.partition("=")
            labels.append((key, quoted[1:-1].replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")))
        values[(name, tuple(sorted(labels)))] = float(value)
    return values


def _split_labels(text: str) -> list[str]:
    parts, current, quoted, escaped = [], "", False, False
    for char in text:
        if char == "," and not quoted:
            parts.append(current)
            current = ""
            continue
        current += char
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
    if current:
        parts.append(current)
    return parts

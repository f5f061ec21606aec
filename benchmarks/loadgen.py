"""A lean closed-loop HTTP/1.1 client for serving benchmarks: JSON POSTs over keep-alive sockets.

On a 2-core machine the load generator shares the cores with the server it measures: a client
that spends 3 ms of CPU per request (httpx: its request and response objects, header handling,
its connection pool) caps every server near ``cores / (client + server CPU)`` and shrinks the
differences between servers. This client writes pre-rendered request bytes on ``asyncio`` streams
and reads the status line, the headers it needs (``Content-Length``, ``Transfer-Encoding``,
``Connection``) and the body; nothing else. Its own CPU time is returned with every run, so a
result says what share of the machine the client took.

Only the standard library: the benchmark scripts import it before anything else.

Example:
    >>> import asyncio
    >>> async def demo():
    ...     async def handle(reader, writer):
    ...         while await reader.readuntil(b"\\r\\n\\r\\n"):
    ...             writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok")
    ...     server = await asyncio.start_server(handle, "127.0.0.1", 0)
    ...     port = server.sockets[0].getsockname()[1]
    ...     run = await closed_loop("127.0.0.1", port, "/x", lambda n: b"{}", 2, 5, 10)
    ...     server.close()
    ...     return run.statuses, len(run.latencies)
    >>> asyncio.run(demo())
    ({'200': 5}, 5)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class ProtocolError(Exception):
    """An answer this client cannot read (not HTTP/1.1, no length, a cut body)."""


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased


@dataclass
class Run:
    """What one closed loop saw: answers by status, latencies of the 200s, the kept bodies."""

    concurrency: int
    sent: int = 0
    seconds: float = 0.0
    client_cpu_seconds: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    #: status -> seconds to each answer with it
    by_status: dict[str, list[float]] = field(default_factory=dict)
    #: request number -> seconds to its answer, for the 200 answers
    latencies: dict[int, float] = field(default_factory=dict)
    #: request number -> the answer's body, for the 200 answers ``keep_body`` chose
    bodies: dict[int, bytes] = field(default_factory=dict)


class Connection:
    """One keep-alive connection; reopened when the server closes it."""

    def __init__(self, host: str, port: int, timeout: float = 60.0):
        self.host, self.port, self.timeout = host, port, timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        """Connect, unless connected already."""
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, path: str, body: bytes, headers: bytes = b"") -> Answer:
        await self.open()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        ).encode()
        self._writer.write(head + headers + b"\r\n" + body)
        try:
            answer, keep = await asyncio.wait_for(self._read(), self.timeout)
        except BaseException:
            self.close()
            raise
        if not keep:
            self.close()
        return answer

    async def _read(self) -> tuple[Answer, bool]:
        reader = self._reader
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0]!r}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = await _chunked(reader)
        else:
            raise ProtocolError("an answer with neither Content-Length nor chunked encoding")
        keep = headers.get("connection", "").lower() != "close" and parts[0] != "HTTP/1.0"
        return Answer(int(parts[1]), body, headers), keep

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # no trailers are sent by the servers measured here
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def closed_loop(
    host: str,
    port: int,
    path: str,
    body_of: Callable[[int], bytes],
    concurrency: int,
    requests: int,
    max_seconds: float,
    keep_body: Callable[[int], bool] = lambda number: False,
    headers: bytes = b"",
    timeout: float = 60.0,
    pause: Callable[[Answer], float] | None = None,
) -> Run:
    """``concurrency`` clients, each on its own connection, each sending request ``n``
    (``body_of(n)``) as soon as its last was answered (or ``pause(answer)`` seconds after: a
    polite client honouring ``Retry-After``), until ``requests`` are sent or ``max_seconds``
    pass. Latencies are kept by status; bodies of 200 answers where ``keep_body(n)``.
    A request the transport failed (refused, reset, timed out) is counted by exception name.

    Every connection is opened before the clock starts, as a client's keep-alive pool is: 128
    connects at once took the first answers up to 150 ms on 2 cores, a cost of the connect storm,
    not of the server's answer (a connection the server closed is reopened, and that request's
    latency does include its connect)."""
    run = Run(concurrency)
    connections = [Connection(host, port, timeout) for _ in range(concurrency)]
    # A connection that failed to open is tried again by its first request, which counts the failure.
    await asyncio.gather(*(c.open() for c in connections), return_exceptions=True)
    deadline = time.monotonic() + max_seconds

    async def client(connection: Connection) -> None:
        try:
            while run.sent < requests and time.monotonic() < deadline:
                number = run.sent
                run.sent += 1
                body = body_of(number)
                start = time.perf_counter()
                try:
                    answer = await connection.post(path, body, headers)
                except (OSError, asyncio.IncompleteReadError, TimeoutError, ProtocolError) as exc:
                    name = type(exc).__name__
                    run.failures[name] = run.failures.get(name, 0) + 1
                    continue
                seconds = time.perf_counter() - start
                status = str(answer.status)
                run.statuses[status] = run.statuses.get(status, 0) + 1
                run.by_status.setdefault(status, []).append(seconds)
                if answer.status == 200:
                    run.latencies[number] = seconds
                    if keep_body(number):
                        run.bodies[number] = answer.body
                wait = pause(answer) if pause is not None else 0.0
                if wait > 0:
                    await asyncio.sleep(wait)
        finally:
            connection.close()

    cpu, start = time.process_time(), time.perf_counter()
    await asyncio.gather(*(client(c) for c in connections))
    run.seconds = time.perf_counter() - start
    run.client_cpu_seconds = time.process_time() - cpu
    return run

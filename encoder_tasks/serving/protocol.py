"""The HTTP protocol under ``serve``: uvicorn's HTTP/1.1 protocol with the limits an open port needs.

The parser is httptools' (C, uvicorn's own choice when it is installed: the ``serve`` extra
installs it, with uvloop, as ``uvicorn[standard]`` does) or, without it, h11's (pure Python).
On the 2-core development machine the two measured level for one-sentence embedding requests
(``python -m benchmarks.bench_http_parser``: alternated rounds, medians within 2%);
:func:`http_protocol` picks the parser, ``--http h11`` forces the pure-Python one.

uvicorn closes idle keep-alive connections, but a connection that sends half its headers and
then nothing stays open for ever, and every connection is accepted. :func:`guarded_protocol`
adds, over either parser:

- a header timeout: a request's headers must arrive within ``header_timeout`` seconds of the
  connection opening (or of the previous answer), else the connection gets a JSON 408 and closes;
- a connection cap: past ``max_connections`` open connections, a new one gets a JSON 503 with
  ``Retry-After`` and is closed at once (a client never waits on an accept queue for nothing).

The body's own limits (bytes, time) are :class:`encoder_tasks.serving.body.ReadBody`'s.
:func:`uvicorn_config` is the one place the server's uvicorn settings are made (the CLI and the
tests use it).

Example:
    >>> config = uvicorn_config(object(), ServeOptions())  # doctest: +SKIP
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ApiError

#: ``--http`` choices: the fastest installed parser, or one named.
HTTP_PROTOCOLS = ("auto", "httptools", "h11")


def _raw_answer(status: int, reason: str, message: str, extra: str = "") -> bytes:
    body = json.dumps(ApiError(status, message).body()).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"{extra}connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def http_protocol(name: str = "auto") -> type:
    """uvicorn's protocol class for ``name``: ``auto`` is httptools' where it imports, else h11's.

    Example:
        >>> http_protocol("h11").__name__
        'H11Protocol'
    """
    if name not in HTTP_PROTOCOLS:
        raise ValueError(f"--http: expected one of {', '.join(HTTP_PROTOCOLS)}, found {name!r}")
    if name in ("auto", "httptools"):
        try:
            from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

            return HttpToolsProtocol
        except ImportError:
            if name == "httptools":
                raise ValueError(
                    "--http httptools: httptools is not installed (pip install 'encoder-tasks[serve]')"
                ) from None
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return H11Protocol


def guarded_protocol(header_timeout: float, max_connections: int, http: str = "auto") -> type:
    """A subclass of :func:`http_protocol` ``(http)`` with these limits (uvicorn builds one per
    connection)."""
    base = http_protocol(http)

    class GuardedProtocol(base):
        _header_timer: Any = None

        def connection_made(self, transport) -> None:
            if len(self.connections) >= max_connections:
                transport.write(
                    _raw_answer(
                        503,
                        "Service Unavailable",
                        f"the server holds {max_connections} connections already (--max_connections); "
                        "try again shortly",
                        "retry-after: 1\r\n",
                    )
                )
                transport.close()
                return
            super().connection_made(transport)
            self._arm()

        def _waiting_for_headers(self) -> bool:
            cycle = getattr(self, "cycle", None)
            return cycle is None or cycle.response_complete

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def data_received(self, data: bytes) -> None:
            if self._waiting_for_headers():
                self._arm()  # a keep-alive connection starting its next request
            super().data_received(data)
            if not self._waiting_for_headers():
                self._disarm()  # the headers are in: the body has its own timeout

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or not self._waiting_for_headers():
                return
            self.transport.write(
                _raw_answer(
                    408,
                    "Request Timeout",
                    f"request headers: expected them within {header_timeout:g} s (--header_timeout)",
                )
            )
            self.transport.close()

        def connection_lost(self, exc) -> None:
            self._disarm()
            if self.transport is not None:  # refused connections never started
                super().connection_lost(exc)

    GuardedProtocol.__name__ = GuardedProtocol.__qualname__ = f"Guarded{base.__name__}"
    return GuardedProtocol


def uvicorn_config(app, options, log_level: str = "info", **extra: Any):
    """uvicorn's settings for ``app`` under :class:`~encoder_tasks.serving.app.ServeOptions`."""
    import uvicorn

    return uvicorn.Config(
        app,
        log_level=log_level,
        lifespan="on",
        http=guarded_protocol(options.header_timeout, options.max_connections, options.http),
        timeout_keep_alive=options.keep_alive_timeout,
        # SIGTERM's drain is the app's own (it answers what is left 503 at --drain_timeout); this is
        # uvicorn's last resort, a little later, should anything still hang.
        timeout_graceful_shutdown=options.drain_timeout + 5,
        **extra,
    )

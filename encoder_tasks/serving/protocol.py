"""The HTTP protocol under ``serve``: uvicorn's h11 protocol with the limits an open port needs.

uvicorn closes idle keep-alive connections, but a connection that sends half its headers and
then nothing stays open for ever, and every connection is accepted. :class:`GuardedH11Protocol`
adds:

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

from uvicorn.protocols.http.h11_impl import H11Protocol

from .errors import ApiError


def _raw_answer(status: int, reason: str, message: str, extra: str = "") -> bytes:
    body = json.dumps(ApiError(status, message).body()).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"{extra}connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def guarded_protocol(header_timeout: float, max_connections: int) -> type[H11Protocol]:
    """An :class:`H11Protocol` subclass with these limits (uvicorn builds one per connection)."""

    class GuardedH11Protocol(H11Protocol):
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
            return self.cycle is None or self.cycle.response_complete

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

    return GuardedH11Protocol


def uvicorn_config(app, options, log_level: str = "info", **extra: Any):
    """uvicorn's settings for ``app`` under :class:`~encoder_tasks.serving.app.ServeOptions`."""
    import uvicorn

    return uvicorn.Config(
        app,
        log_level=log_level,
        lifespan="on",
        http=guarded_protocol(options.header_timeout, options.max_connections),
        timeout_keep_alive=options.keep_alive_timeout,
        # SIGTERM's drain is the app's own (it answers what is left 503 at --drain_timeout); this is
        # uvicorn's last resort, a little later, should anything still hang.
        timeout_graceful_shutdown=options.drain_timeout + 5,
        **extra,
    )

"""Reading a request body safely, before any route sees it: bounded in bytes and time, and checked
to be JSON a tokenizer can read.

:class:`ReadBody` (ASGI middleware) reads the whole body of every request that has one and answers
at once, with JSON naming what and where, when it is:

- larger than the limit (413): by its ``Content-Length`` unread, and counted as it arrives, so a
  chunked body (no ``Content-Length``) is stopped at the limit too, not read to the end;
- slower than ``body_timeout`` seconds to arrive (408: a client sending a byte a minute holds no
  connection for ever);
- sent in a charset other than UTF-8 (415), or holding bytes that are not UTF-8 (400, the byte
  offset named);
- nested deeper than :data:`MAX_DEPTH` (400), or holding a lone surrogate (``"\\ud800"``: valid
  JSON that no UTF-8 text or tokenizer can hold) in a value or a field name (400 naming the field).

Then the route reads the same bytes (the body is replayed), and the JSON parsed here: a route of
:class:`ParsedBodyRoute` takes it instead of parsing the body again (a 5 MB body is ~7 ms of the
event loop each time it is parsed). Malformed JSON is left to the route's own parser, whose error
names the line and column.

Example:
    >>> check_json(b'{"inputs": [{"text": "a \\\\ud800"}]}')
    Traceback (most recent call last):
    ...
    encoder_tasks.serving.errors.ApiError: inputs[0].text: expected text, found a lone surrogate \\ud800 (half of a UTF-16 pair) at character 2
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from .errors import ApiError, style_for

#: Deepest nesting of arrays and objects a request may have (a real one has 3 or 4 levels).
MAX_DEPTH = 32
#: Bodies above this many bytes are parsed on a worker thread, off the event loop.
_THREAD_PARSE = 1 << 16
#: The scope key where :class:`ReadBody` leaves the JSON it parsed, for :class:`ParsedBodyRequest`.
PARSED_JSON = "encoder_tasks.parsed_json"
#: What :func:`check_json` returns for a body that is not JSON.
NOT_JSON = object()
_UTF8 = ("utf-8", "utf8")
_CHARSET = re.compile(r";\s*charset\s*=\s*\"?([^\";\s]+)", re.IGNORECASE)


def _where(path: list) -> str:
    where = ""
    for part in path:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    return where or "request body"


def _surrogate(text: str) -> tuple[int, str] | None:
    """The first lone surrogate of ``text``: (its position, ``\\udXXX``), or None."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as error:
        return error.start, f"\\u{ord(text[error.start]):04x}"


def check_value(value: Any) -> None:
    """Raise ApiError 400 at the first field nested deeper than :data:`MAX_DEPTH` or holding a lone
    surrogate (in a string or a field name), naming it."""
    stack: list[tuple[Any, list]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise ApiError(
                400,
                f"{_where(path[:MAX_DEPTH])}: expected JSON nested at most {MAX_DEPTH} levels deep, found deeper",
                "request body",
            )
        if isinstance(item, str):
            bad = _surrogate(item)
            if bad is not None:
                where = _where(path)
                raise ApiError(
                    400,
                    f"{where}: expected text, found a lone surrogate {bad[1]} (half of a UTF-16 pair) "
                    f"at character {bad[0]}",
                    where,
                )
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                bad = _surrogate(key)
                if bad is not None:
                    where = _where(path)
                    raise ApiError(
                        400,
                        f"{where}: expected field names of text, found one with a lone surrogate {bad[1]} "
                        f"(half of a UTF-16 pair): {key.encode('utf-8', 'backslashreplace').decode()!r}",
                        where,
                    )
                stack.append((child, [*path, key]))
        elif isinstance(item, list):
            stack.extend((child, [*path, i]) for i, child in reversed(list(enumerate(item))))


def check_json(body: bytes) -> Any:
    """The JSON value of ``body``. Refuses a body that is not UTF-8, nests too deep or holds a
    lone surrogate (ApiError 400); JSON that does not parse is :data:`NOT_JSON`, left to the route,
    whose message names the line and column."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(
            400,
            f"request body: expected UTF-8 text, found the byte 0x{body[error.start]:02x} at byte "
            f"{error.start}, which is not UTF-8 ({error.reason})",
            "request body",
        ) from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise ApiError(
            400,
            f"request body: expected JSON nested at most {MAX_DEPTH} levels deep, found deeper",
            "request body",
        ) from None
    except ValueError:
        return NOT_JSON  # the route's parser says where
    check_value(value)
    return value


class ParsedBodyRequest(Request):
    """A request whose :meth:`json` is the value :class:`ReadBody` parsed, where it parsed one."""

    async def json(self) -> Any:
        parsed = self.scope.get(PARSED_JSON, NOT_JSON)
        return await super().json() if parsed is NOT_JSON else parsed


class ParsedBodyRoute(APIRoute):
    """A route that reads its JSON body as :class:`ReadBody` parsed it (FastAPI's documented
    custom-request pattern), rather than parsing the same bytes a second time.

    Example:
        >>> from fastapi import APIRouter
        >>> router = APIRouter(route_class=ParsedBodyRoute)
    """

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def parsed_once(request: Request):
            return await handler(ParsedBodyRequest(request.scope, request.receive))

        return parsed_once


class ReadBody:
    """ASGI middleware: see the module docstring. ``limit``: the most bytes a body may hold;
    ``timeout``: the most seconds it may take to arrive; ``admit(path)``: raises ApiError (429)
    when the model the path names has a full queue, checked before the body is parsed."""

    def __init__(self, app, limit: int, timeout: float, admit=None):
        self.app, self.limit, self.timeout, self.admit = app, limit, timeout, admit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        style = style_for(scope["path"])
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            return await _refuse(scope, receive, send, self._too_large(int(length)), style)
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        charset = _CHARSET.search(content_type)
        if charset and charset.group(1).lower() not in _UTF8:
            error = ApiError(
                415,
                f"request body: expected JSON in UTF-8 (Content-Type: application/json), found charset "
                f"{charset.group(1)!r}",
                "request body",
            )
            return await _refuse(scope, receive, send, error, style)
        chunks, size, deadline, more = [], 0, time.monotonic() + self.timeout, True
        while more:
            left = deadline - time.monotonic()
            try:
                message = await asyncio.wait_for(receive(), max(left, 0.001))
            except TimeoutError:
                error = ApiError(
                    408,
                    f"request body: expected the whole body within {self.timeout:g} s (--body_timeout), "
                    f"found {size} bytes by then",
                    "request body",
                )
                return await _refuse(scope, receive, send, error, style)
            if message["type"] == "http.disconnect":
                return  # nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return await _refuse(scope, receive, send, self._too_large(size, read=True), style)
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if self.admit is not None:  # a full queue refuses before any parsing: a 429 costs little
            try:
                self.admit(scope["path"])
            except ApiError as error:
                return await _refuse(scope, receive, send, error, style, close=False)
        if body and "json" in content_type.lower() or (body and not content_type):
            try:
                if len(body) > _THREAD_PARSE:
                    parsed = await asyncio.to_thread(check_json, body)
                else:
                    parsed = check_json(body)
            except ApiError as error:
                return await _refuse(scope, receive, send, error, style, close=False)
            if parsed is not NOT_JSON:
                scope[PARSED_JSON] = parsed
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then: the disconnect, when it comes

        return await self.app(scope, replay, send)

    def _too_large(self, size: int, read: bool = False) -> ApiError:
        found = f"more than {self.limit} (stopped reading)" if read else str(size)
        return ApiError(
            413,
            f"request body: expected at most {self.limit} bytes (from --max_inputs_per_request and "
            f"--max_chars_per_input), found {found}",
            "request body",
        )


async def _refuse(scope, receive, send, error: ApiError, style: str, close: bool = True) -> None:
    """Answer ``error`` as JSON; ``close``: the body was not read to its end, so the connection
    cannot carry another request (``Connection: close``)."""
    headers = {**(error.headers or {}), **({"connection": "close"} if close else {})}
    response = JSONResponse(error.body(style), error.status, headers=headers or None)
    await response(scope, receive, send)

"""Who may use the server: an API key, CORS origins, and API docs that need no CDN.

- :class:`RequireKey` (ASGI middleware): with ``--api_key`` (or ``ENCODER_TASKS_API_KEY``) set,
  every request but ``GET``/``HEAD /health`` (liveness: an orchestrator has no key) needs the key,
  as OpenAI's and text-embeddings-inference's clients send it, ``Authorization: Bearer KEY``, or
  as ``X-API-Key: KEY`` / ``api-key: KEY``; without it: 401 JSON with ``WWW-Authenticate``.
  Keys are compared in constant time and never logged.
- :func:`docs_page`: ``/docs`` as one self-contained HTML page built from the OpenAPI schema (no
  script or style from a CDN: it renders offline); ``--docs off`` serves neither it nor
  ``/openapi.json``.

Example:
    >>> key_of({b"authorization": b"Bearer s3cret"}), key_of({b"x-api-key": b"s3cret"}), key_of({})
    ('s3cret', 's3cret', None)
"""

from __future__ import annotations

import hmac
import html
import json
from typing import Any

from fastapi.responses import JSONResponse

from .errors import ApiError, style_for

#: The environment variable that holds the API key when ``--api_key`` is not given.
API_KEY_ENV = "ENCODER_TASKS_API_KEY"
#: Routes open without the key: liveness only (``/ready`` shows the models, so it needs the key).
OPEN_PATHS = frozenset({"/health"})


def key_of(headers: dict[bytes, bytes]) -> str | None:
    """The key a request carries (``Authorization: Bearer``, ``X-API-Key`` or ``api-key``)."""
    value = headers.get(b"authorization")
    if value is not None:
        scheme, _, token = value.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    for name in (b"x-api-key", b"api-key"):
        if headers.get(name):
            return headers[name].decode("latin-1").strip()
    return None


class RequireKey:
    """ASGI middleware: see the module docstring."""

    def __init__(self, app, key: str):
        self.app, self.key = app, key.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or (scope["path"] in OPEN_PATHS and scope["method"] in ("GET", "HEAD")):
            return await self.app(scope, receive, send)
        given = key_of(dict(scope.get("headers") or []))
        if given is not None and hmac.compare_digest(given.encode(), self.key):
            return await self.app(scope, receive, send)
        message = (
            "expected an API key: send Authorization: Bearer KEY (or X-API-Key: KEY)"
            if given is None
            else "the API key sent is not this server's"
        )
        error = ApiError(401, message, kind="authentication_error")
        response = JSONResponse(
            error.body(style_for(scope["path"])),
            401,
            headers={"WWW-Authenticate": 'Bearer realm="encoder-tasks"'},
        )
        await response(scope, receive, send)


_STYLE = (
    "body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;line-height:1.4}"
    "code,pre{background:#f4f4f4;padding:.1em .3em}pre{padding:.6em;overflow:auto}"
    "h2{border-top:1px solid #ccc;padding-top:.6em}.method{font-weight:bold;text-transform:uppercase}"
)


def _example(operation: dict[str, Any], schema: dict[str, Any]) -> Any:
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
    ref = body.get("schema", {}).get("$ref", "")
    target = schema.get("components", {}).get("schemas", {}).get(ref.rsplit("/", 1)[-1], {}) if ref else {}
    examples = target.get("examples") or ([body["example"]] if "example" in body else [])
    return examples[0] if examples else None


def docs_page(schema: dict[str, Any]) -> str:
    """The API docs as one HTML page (every route, its summary, an example body): no CDN."""
    info = schema.get("info", {})
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(info.get('title', 'API'))}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(info.get('title', 'API'))}</h1><p>{html.escape(info.get('description', ''))}</p>",
        "<p>The machine-readable schema: <a href='/openapi.json'>/openapi.json</a>.</p>",
    ]
    for path, operations in sorted(schema.get("paths", {}).items()):
        for method, operation in operations.items():
            parts.append(
                f"<h2><span class='method'>{html.escape(method)}</span> <code>{html.escape(path)}</code></h2>"
                f"<p>{html.escape(operation.get('summary', ''))}</p>"
            )
            example = _example(operation, schema)
            if example is not None:
                parts.append(f"<p>Example body:</p><pre>{html.escape(json.dumps(example, indent=2))}</pre>")
    parts.append("</body></html>")
    return "".join(parts)

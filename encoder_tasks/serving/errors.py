"""The one error a request can end in: a status and a message that names the field.

Every route raises :class:`ApiError`; the app renders it as JSON in the shape the route's
clients read: OpenAI's ``{"error": {"message", "type", "param", "code"}}`` for ``/v1/...`` and the
task-native routes, text-embeddings-inference's ``{"error", "error_type"}`` for ``/embed``,
``/rerank`` and ``/predict``.

Example:
    >>> error = ApiError(400, "inputs[0].text: expected a string, found 3 (int)", field="inputs[0].text")
    >>> error.body()["error"]["param"], error.body(style="tei")["error_type"]
    ('inputs[0].text', 'Validation')
"""

from __future__ import annotations

from typing import Any

#: text-embeddings-inference's error types, by status.
_TEI_TYPES = {
    400: "Validation",
    401: "Unauthorized",
    404: "Validation",
    408: "Validation",
    413: "Validation",
    422: "Validation",
    429: "Overloaded",
    503: "Overloaded",
}


class ApiError(Exception):
    """A request that cannot be answered: ``status`` (4xx: the client's fault; 503: try again)."""

    def __init__(
        self,
        status: int,
        message: str,
        field: str | None = None,
        kind: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.field, self.headers = status, message, field, headers
        self.kind = kind or ("invalid_request_error" if status < 500 else "server_unavailable")

    def body(self, style: str = "openai") -> dict[str, Any]:
        """The JSON body: ``style`` is ``openai`` (also the native routes) or ``tei``."""
        if style == "tei":
            return {"error": self.message, "error_type": _TEI_TYPES.get(self.status, "Backend")}
        return {
            "error": {"message": self.message, "type": self.kind, "param": self.field, "code": self.status}
        }


#: Paths whose clients read text-embeddings-inference's error shape.
TEI_PATHS = frozenset({"/embed", "/rerank", "/predict", "/", "/invocations", "/info"})


def style_for(path: str) -> str:
    """The error style of a request path: ``tei`` for TEI's routes, ``openai`` elsewhere.

    Example:
        >>> style_for("/rerank"), style_for("/v1/models/sst2/predict")
        ('tei', 'openai')
    """
    return "tei" if path in TEI_PATHS else "openai"


#: Names pydantic puts in an error's location for the branch of a union it tried.
_UNION_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none", "tuple", "set"})


def _field_parts(loc: tuple) -> tuple:
    """The field in an error location: without ``body`` and the union branches pydantic tried."""
    parts = loc[1:] if loc and loc[0] == "body" else loc
    return tuple(
        p
        for p in parts
        if isinstance(p, int) or not (p in _UNION_TAGS or "[" in p or p.startswith("function-"))
    )


def _field_path(loc: tuple) -> str:
    """``("body", "inputs", 2, "text")`` -> ``inputs[2].text`` (``request body`` for the body itself)."""
    path = ""
    for part in _field_parts(loc):
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "request body"


def _expected(error: dict[str, Any]) -> str:
    expected = str(error.get("msg", "a valid value"))
    for prefix in ("Input should be ", "Value error, "):
        if expected.startswith(prefix):
            expected = expected[len(prefix) :]
    return expected


def _found(value: Any) -> str:
    from ..inputs import describe

    return describe(value)


def validation_error(errors: list[dict[str, Any]], body: Any = None, content_type: str = "") -> ApiError:
    """One 400 naming the field, what was expected and what was found, for FastAPI's request
    validation errors (the first one: fixing it shows the next).

    Example:
        >>> validation_error([{"type": "missing", "loc": ("body", "inputs"), "msg": "Field required"}]).message
        'inputs: expected a value, found nothing'
        >>> validation_error([{"type": "json_invalid", "loc": ("body", 9), "msg": "JSON decode error",
        ...     "ctx": {"error": "Expecting ',' delimiter"}}], body='{"a": 1 "b": 2}').message
        "request body: expected JSON, found invalid JSON at line 1 column 10 (char 9): Expecting ',' delimiter"
    """
    if not errors:
        return ApiError(400, "request body: expected a valid request, found one that is not")
    # A value that fits no branch of a union fails once per branch: the deepest failure is where
    # it went wrong (a list with one bad item); failures at the same place read "a or b".
    depth = max(len(_field_parts(tuple(e.get("loc", ())))) for e in errors)
    deepest = [e for e in errors if len(_field_parts(tuple(e.get("loc", ())))) == depth]
    error = deepest[0]
    kind, loc = error.get("type", ""), tuple(error.get("loc", ()))
    same_place = [e for e in deepest if _field_path(tuple(e.get("loc", ()))) == _field_path(loc)]
    if kind == "json_invalid":
        pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else 0
        text = body if isinstance(body, str) else ""
        line, column = text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1
        reason = (error.get("ctx") or {}).get("error", "not JSON")
        return ApiError(
            400,
            f"request body: expected JSON, found invalid JSON at line {line} column {column} (char {pos}): {reason}",
            "request body",
        )
    field = _field_path(loc)
    if kind == "missing":
        message = f"{field}: expected a value, found nothing"
    elif field == "request body" and isinstance(error.get("input"), bytes):
        found = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
        message = f"request body: expected JSON sent with Content-Type: application/json, found {found}"
    elif field == "request body" and kind in ("model_attributes_type", "dict_type"):
        message = f"request body: expected a JSON object, found {_found(error.get('input'))}"
    elif kind == "extra_forbidden":
        message = f"{field}: unknown field"
    else:
        expected = " or ".join(dict.fromkeys(_expected(e) for e in same_place))
        message = f"{field}: expected {expected}, found {_found(error.get('input'))}"
    return ApiError(400, message, field)


#: Status of a request whose client went away before its answer (nginx's convention).
CLIENT_CLOSED = 499


class ClientDisconnected(Exception):
    """The client closed the connection while its request waited; nobody reads the answer."""


def install_handlers(app) -> None:
    """Render every error of ``app`` as JSON in its route's style: :class:`ApiError`, FastAPI's
    validation errors (malformed JSON, wrong types), unknown routes and methods. Unexpected
    exceptions are answered 500 by :class:`encoder_tasks.serving.metrics.ObserveRequests`."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException

    def render(request, error: ApiError, headers=None):
        headers = {**(error.headers or {}), **(headers or {})} or None
        return JSONResponse(error.body(style_for(request.url.path)), error.status, headers=headers)

    @app.exception_handler(ApiError)
    async def api_error(request, exc: ApiError):
        return render(request, exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request, exc: RequestValidationError):
        errors, body = list(exc.errors()), getattr(exc, "body", None)
        return render(request, validation_error(errors, body, request.headers.get("content-type", "")))

    @app.exception_handler(HTTPException)
    async def http_error(request, exc: HTTPException):
        method, path = request.method, request.url.path
        if exc.status_code == 404:
            message = f"no route {method} {path}; the routes are listed at /docs"
        elif exc.status_code == 405:
            message = f"{method} is not allowed on {path}; allowed: {(exc.headers or {}).get('Allow', '?')}"
        else:
            message = str(exc.detail)
        return render(request, ApiError(exc.status_code, message), exc.headers)

    @app.exception_handler(ClientDisconnected)
    async def client_gone(request, exc):
        return Response(status_code=CLIENT_CLOSED)

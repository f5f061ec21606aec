"""The FastAPI app of ``encoder-tasks serve``: models load in the background, routes answer JSON.

Routes here: ``GET /health`` (liveness, each model's state), ``GET /ready`` (200 once every model
is loaded and warmed up), ``GET /v1/models`` (OpenAI's model list), ``POST
/v1/models/{name}/predict`` (any task, the records ``predict`` writes), ``GET /metrics``
(Prometheus text). The routes existing clients speak (``/v1/embeddings``, ``/embed``, ``/rerank``,
``/predict``) come from :mod:`encoder_tasks.serving.compat`. OpenAPI docs at ``/docs``.

Example:
    >>> app = create_app({"sst2": "runs/sst2"}, ServeOptions(port=8000))  # doctest: +SKIP
    >>> import uvicorn; uvicorn.run(app, host="127.0.0.1", port=8000)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from ..errors import UserError
from .access import API_KEY_ENV, RequireKey, docs_page
from .body import ParsedBodyRoute, ReadBody
from .errors import install_handlers
from .metrics import ObserveRequests, ServerMetrics
from .models import ServedModel, choose_model

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ServeOptions:
    """How the server listens, batches and limits requests (the flags of ``encoder-tasks serve``)."""

    host: str = "127.0.0.1"
    port: int = 8080
    max_batch_tokens: int = 8192
    max_wait_ms: float = 5.0
    batch_size: int = 64
    model_workers: int = 1
    model_threads: int | None = None  # None: the cores shared between the model_workers
    max_inputs_per_request: int = 2048  # OpenAI's own limit: its clients send up to that many
    max_chars_per_input: int = 20000
    max_request_tokens: int = 65536
    # 32 MiB: OpenAI's own request limits (2,048 inputs, 300k tokens) fit in a few MB; the product of
    # the inputs and characters limits (236 MiB) took a second to read before its 413.
    max_body_bytes: int = 32 << 20
    max_queue: int = 64
    max_queue_wait_ms: float | None = None  # None: --request_timeout (a request that would time out)
    max_top_k: int = 100
    request_timeout: float = 30.0
    precision: str = "auto"
    drain_timeout: float = 30.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive_timeout: float = 5.0
    max_connections: int = 1024
    api_key: str | None = None
    cors_origins: str = ""
    docs: str = "on"
    backend: str = "auto"
    http: str = "auto"

    def __post_init__(self):
        from ..errors import check_choice
        from .protocol import HTTP_PROTOCOLS

        check_choice("precision", self.precision, ("auto", "fp32", "bf16"))
        check_choice("http", self.http, HTTP_PROTOCOLS)
        check_choice("docs", self.docs, ("on", "off"))
        if self.api_key is not None and not self.api_key.strip():
            raise UserError("--api_key: expected a key, found an empty one")
        from ..runtimes import CHOICES

        check_choice("backend", self.backend, CHOICES)
        if not 0 <= self.port <= 65535:
            raise UserError(f"--port must be between 0 and 65535, found {self.port}")
        for name, least in (
            ("max_batch_tokens", 1),
            ("max_wait_ms", 0),
            ("batch_size", 1),
            ("model_workers", 1),
            ("max_inputs_per_request", 1),
            ("max_chars_per_input", 1),
            ("max_request_tokens", 1),
            ("max_body_bytes", 1024),
            ("max_queue", 1),
            ("max_top_k", 1),
            ("drain_timeout", 0),
            ("max_connections", 1),
        ):
            if getattr(self, name) < least:
                raise UserError(f"--{name} must be at least {least}, found {getattr(self, name)}")
        if self.model_threads is not None and self.model_threads < 1:
            raise UserError(f"--model_threads must be at least 1, found {self.model_threads}")
        if self.max_queue_wait_ms is not None and not self.max_queue_wait_ms >= 0:  # NaN too
            raise UserError(f"--max_queue_wait_ms must be at least 0, found {self.max_queue_wait_ms}")
        for name in ("request_timeout", "header_timeout", "body_timeout", "keep_alive_timeout"):
            if not getattr(self, name) > 0:  # NaN too
                raise UserError(f"--{name} must be above 0 seconds, found {getattr(self, name)}")


class PredictRequest(BaseModel):
    """The body of ``POST /v1/models/{name}/predict``."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"inputs": [{"text": "a fine film"}], "parameters": {}}]},
    )
    inputs: Any = Field(
        description="Input records as `predict` reads them (a list, or one object): classification "
        '`{"text"}` (+`"text_pair"`), pair `{"text","text_pair"}`, ner `{"text"}` or `{"tokens"}`, '
        'qa `{"question","context"}`, embedding `{"text"}` (or a pair: its score), mlm `{"text"}` '
        "with [MASK]."
    )
    parameters: dict[str, Any] | None = Field(
        default=None, description='`predict` flags for this request only, e.g. `{"top_k": 3}`.'
    )


def create_app(models: dict[str, str | Path], options: ServeOptions | None = None) -> FastAPI:
    """An app serving ``models`` (name -> run directory); a folder that is no model raises
    :class:`UserError` here, before anything listens. Loading starts with the app."""
    options = options or ServeOptions()
    metrics = ServerMetrics()
    served = {name: ServedModel(name, path, options, metrics) for name, path in models.items()}
    if not served:
        raise UserError("serve: expected at least one RUN_DIR, found none")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        loop = asyncio.get_running_loop()
        app.state.loop, app.state.closing = loop, asyncio.Event()
        for model in served.values():
            model.closing = app.state.closing
        stopping = threading.Event()
        loader = threading.Thread(
            target=_load_all,
            args=(served, loop, stopping, lambda: app.state.on_load_failure),
            name="encoder-tasks-loader",
            daemon=True,
        )
        loader.start()
        app.state.loader = loader
        yield
        stopping.set()  # a model still loading is left unloaded
        await _drain(served, metrics, options)

    app = FastAPI(
        title="encoder-tasks serve",
        description="Fine-tuned encoders of every task, micro-batched. See docs/serving.md.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's page loads its scripts from a CDN: ours is self-contained
        redoc_url=None,
        openapi_url="/openapi.json" if options.docs == "on" else None,
    )
    app.router.route_class = ParsedBodyRoute  # the routes below read the JSON ReadBody parsed
    app.state.served, app.state.options, app.state.metrics = served, options, metrics
    app.state.created = int(time.time())
    #: Called (on the event loop) when a model fails to load: the CLI stops the server, exit 1.
    app.state.on_load_failure = None
    app.state.begin_drain = lambda: _begin_drain(app)
    install_handlers(app)
    app.add_middleware(
        ReadBody, limit=_body_limit(options), timeout=options.body_timeout, admit=_early_admission(served)
    )
    key = options.api_key or os.environ.get(API_KEY_ENV) or None
    if key:  # outside ReadBody: a client without the key has no body read
        app.add_middleware(RequireKey, key=key)
    origins = [o.strip() for o in options.cors_origins.split(",") if o.strip()]
    if origins:  # outside RequireKey: a browser's preflight carries no key
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "HEAD", "POST"],
            allow_headers=["authorization", "content-type", "x-api-key", "api-key"],
        )
    app.add_middleware(ObserveRequests, metrics=metrics)  # outermost: it sees every answer
    _add_routes(app)
    if options.docs == "on":

        @app.get("/docs", include_in_schema=False)
        async def docs():
            return HTMLResponse(docs_page(app.openapi()))

    from .compat import router

    app.include_router(router)
    return app


def _dumps(content: Any) -> bytes:
    # JSONResponse's own rendering (compact, UTF-8, no NaN)
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


async def json_response(content: Any, status_code: int = 200) -> Response:
    """A JSON answer rendered on a worker thread: a large answer (256 inputs, many candidates)
    takes the event loop no time, so ``/health`` and every other request keep answering."""
    body = await asyncio.to_thread(_dumps, content)
    return Response(body, status_code, media_type="application/json")


#: Prediction routes whose model the path names, or that a one-model server answers with it.
_NAMED_ROUTE = re.compile(r"^/v1/models/([^/]+)/predict$")
_ROUTES_OF_THE_ONLY_MODEL = frozenset({"/v1/embeddings", "/embed", "/rerank", "/predict"})


def _early_admission(served: dict[str, ServedModel]):
    """``admit(path)``: 429 for a request whose model has a full queue, before its body is parsed
    or validated (under overload, most requests are refused: each refusal must cost little).
    The route's own admission (:meth:`ServedModel.predict`) still checks every request."""

    def admit(path: str) -> None:
        named = _NAMED_ROUTE.match(path)
        if named:
            model = served.get(named.group(1))
        elif path in _ROUTES_OF_THE_ONLY_MODEL and len(served) == 1:
            model = next(iter(served.values()))
        else:
            return
        if model is not None and model.batcher is not None:
            model.batcher.admit()

    return admit


def _body_limit(options: ServeOptions) -> int:
    """Bytes a request body may hold: ``--max_body_bytes``, or less where the other limits allow
    no larger request (every input at its most characters, JSON-escaped at up to 6 bytes a
    character, with room for field names); a larger body is refused as it arrives."""
    largest = options.max_inputs_per_request * (6 * options.max_chars_per_input + 1024) + (1 << 16)
    return min(options.max_body_bytes, largest)


def _load_all(
    served: dict[str, ServedModel], loop: asyncio.AbstractEventLoop, stopping: threading.Event, on_failure
) -> None:
    """Load and warm up every model, one after the other (on the loader thread). A model that
    fails is marked failed (``/health`` answers 503) and ``on_failure()``, when it returns a
    callable, is called on the event loop: the CLI stops the server then, so that a process
    that cannot serve one of its models exits non-zero instead of answering 503 for ever."""
    for model in served.values():
        start = time.perf_counter()
        try:
            model.load()
            if stopping.is_set():
                return
            # One prediction through the batcher: the first forward pays for lazy set-up.
            asyncio.run_coroutine_threadsafe(model.warm_up(), loop).result()
        except Exception as error:  # the model is marked failed; the others still load
            if stopping.is_set():
                return  # the server stopped while this model loaded
            model.set_state("failed", f"{type(error).__name__}: {error}")
            if isinstance(error, UserError):
                logger.error("model %r (%s) failed to load: %s", model.name, model.model_dir, error)
            else:
                logger.exception("model %r (%s) failed to load", model.name, model.model_dir)
            callback = on_failure()
            if callback is not None:
                loop.call_soon_threadsafe(callback)
                return
            continue
        model.set_state("ready")
        logger.info(
            "model %r (%s, %s) ready in %.1f s",
            model.name,
            model.task,
            model.model_dir,
            time.perf_counter() - start,
        )
    _freeze_loaded_objects()
    if all(m.ready for m in served.values()):
        logger.info("serve: ready (%s)", ", ".join(served))


def _freeze_loaded_objects() -> None:
    """Take every object alive once the models are loaded (modules, tokenizers, the libraries'
    own: about a million) out of the garbage collector's reach. A full collection walks them
    all while holding the GIL: 104-112 ms each, twice in the first 10 s of an overload test, and
    every request of that moment (429s included) waited for it. They live as long as the
    process; what requests allocate is still collected as usual."""
    gc.collect()
    gc.freeze()


def _begin_drain(app: FastAPI) -> None:
    """A stop signal arrived (call from the event loop's thread): requests still waiting for
    their model at ``--drain_timeout`` are answered JSON 503 then, so that every client gets an
    answer and the process exits 0 within the drain time."""
    loop, closing = getattr(app.state, "loop", None), getattr(app.state, "closing", None)
    if loop is not None and closing is not None:  # from a signal handler: hand it to the loop
        loop.call_soon_threadsafe(loop.call_later, app.state.options.drain_timeout, closing.set)


async def _drain(served: dict[str, ServedModel], metrics: ServerMetrics, options: ServeOptions) -> None:
    """Lifespan shutdown: uvicorn has waited for in-flight requests; end each model's worker."""
    left = int(metrics.in_flight.value())
    cut = sum(model.cut_at_drain for model in served.values())
    if left:
        logger.warning(
            "serve: %d requests still in flight after --drain_timeout %g s", left, options.drain_timeout
        )
    elif cut:
        logger.warning(
            "serve: drained: %d request(s) still waiting at --drain_timeout %g s were answered 503, "
            "the others answered",
            cut,
            options.drain_timeout,
        )
    else:
        logger.info("serve: drained: every in-flight request was answered")
    for model in served.values():
        if model.batcher is not None and not await asyncio.to_thread(model.batcher.stop, 0.0 if cut else 5.0):
            logger.warning("serve: model %r still busy; leaving it", model.name)
    logger.info("serve: stopped")


def _add_routes(app: FastAPI) -> None:
    @app.get("/health", summary="Liveness: 200 while the process can serve its models, 503 once one failed")
    async def health(request: Request):
        models = request.app.state.served.values()
        states = {m.name: m.describe(detail=False) for m in models}  # open to all: no paths, no errors
        if any(m.state == "failed" for m in models):
            return JSONResponse({"status": "failed", "models": states}, status_code=503)
        return {"status": "ok", "models": states}

    app.add_api_route("/health", health, methods=["HEAD"], include_in_schema=False)  # probes that send HEAD

    @app.get("/ready", summary="Readiness: 200 once every model is loaded and warmed up, else 503")
    async def ready(request: Request):
        models = request.app.state.served.values()
        states = {m.name: m.describe(detail=False) for m in models}
        if all(m.ready for m in models):
            return {"status": "ready", "models": states}
        status = "failed" if any(m.state == "failed" for m in models) else "loading"
        return JSONResponse({"status": status, "models": states}, status_code=503)

    def model_card(request: Request, model: ServedModel) -> dict[str, Any]:
        return {
            "id": model.name,
            "object": "model",
            "created": request.app.state.created,
            "owned_by": "encoder-tasks",
            "task": model.task,
            "state": model.state,
        }

    @app.get("/v1/models", summary="The served models (OpenAI's list)")
    async def list_models(request: Request) -> dict[str, Any]:
        return {"object": "list", "data": [model_card(request, m) for m in request.app.state.served.values()]}

    @app.get("/v1/models/{name}", summary="One served model (OpenAI's retrieve)")
    async def get_model(name: str, request: Request) -> dict[str, Any]:
        return model_card(request, choose_model(request, name, (), "/v1/models/{name}"))

    @app.post(
        "/v1/models/{name}/predict",
        summary="Predict with any served model: the records the predict CLI writes",
        responses={200: {"content": {"application/json": {"example": _PREDICT_EXAMPLE}}}},
    )
    async def predict(name: str, body: PredictRequest, request: Request):
        model = choose_model(request, name, (), "/v1/models/{name}/predict")
        inputs = model.parse(body.inputs)
        overrides = model.check_overrides(body.parameters)
        predictions = await model.predict(inputs, overrides, request=request)
        return await json_response({"model": model.name, "task": model.task, "predictions": predictions})

    @app.get("/metrics", summary="Prometheus text exposition", response_class=PlainTextResponse)
    async def metrics(request: Request):
        for model in request.app.state.served.values():
            if model.batcher is not None:
                request.app.state.metrics.queue_depth.set(model.batcher.depth, model=model.name)
        return PlainTextResponse(
            request.app.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )


_PREDICT_EXAMPLE = {
    "model": "sst2",
    "task": "classification",
    "predictions": [
        {"text": "a fine film", "label": "pos", "score": 0.97, "probabilities": {"neg": 0.03, "pos": 0.97}}
    ],
}

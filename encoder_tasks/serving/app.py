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
import logging
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import UserError
from .errors import ApiError, install_handlers, style_for
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
    max_inputs_per_request: int = 2048  # OpenAI's own limit: its clients send up to that many
    max_chars_per_input: int = 20000
    request_timeout: float = 30.0
    precision: str = "auto"
    drain_timeout: float = 30.0

    def __post_init__(self):
        from ..errors import check_choice

        check_choice("precision", self.precision, ("auto", "fp32", "bf16"))
        if not 0 <= self.port <= 65535:
            raise UserError(f"--port must be between 0 and 65535, found {self.port}")
        for name, least in (
            ("max_batch_tokens", 1),
            ("max_wait_ms", 0),
            ("batch_size", 1),
            ("max_inputs_per_request", 1),
            ("max_chars_per_input", 1),
            ("drain_timeout", 0),
        ):
            if getattr(self, name) < least:
                raise UserError(f"--{name} must be at least {least}, found {getattr(self, name)}")
        if self.request_timeout <= 0:
            raise UserError(f"--request_timeout must be above 0 seconds, found {self.request_timeout}")


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
        stopping = threading.Event()
        loader = threading.Thread(
            target=_load_all, args=(served, loop, stopping), name="encoder-tasks-loader", daemon=True
        )
        loader.start()
        yield
        stopping.set()  # a model still loading is left unloaded
        await _drain(served, metrics, options)

    app = FastAPI(
        title="encoder-tasks serve",
        description="Fine-tuned encoders of every task, micro-batched. See docs/serving.md.",
        lifespan=lifespan,
    )
    app.state.served, app.state.options, app.state.metrics = served, options, metrics
    app.state.created = int(time.time())
    install_handlers(app)
    app.add_middleware(LimitBody, limit=_body_limit(options))
    app.add_middleware(ObserveRequests, metrics=metrics)  # outermost: it sees every answer
    _add_routes(app)
    from .compat import router

    app.include_router(router)
    return app


def _body_limit(options: ServeOptions) -> int:
    """Bytes a request body may hold: the largest request the limits allow, JSON-escaped (up to 6
    bytes a character), and room for field names; a larger body is refused before it is read."""
    return options.max_inputs_per_request * (6 * options.max_chars_per_input + 1024) + (1 << 16)


class LimitBody:
    """ASGI middleware: a request whose ``Content-Length`` is above ``limit`` gets a 413 unread."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            length = dict(scope.get("headers") or []).get(b"content-length", b"0")
            if length.isdigit() and int(length) > self.limit:
                error = ApiError(
                    413,
                    f"request body: expected at most {self.limit} bytes (from --max_inputs_per_request and "
                    f"--max_chars_per_input), found {int(length)}",
                    "request body",
                )
                response = JSONResponse(error.body(style_for(scope["path"])), 413)
                return await response(scope, receive, send)
        return await self.app(scope, receive, send)


def _load_all(
    served: dict[str, ServedModel], loop: asyncio.AbstractEventLoop, stopping: threading.Event
) -> None:
    """Load and warm up every model, one after the other (on the loader thread)."""
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
            continue
        model.set_state("ready")
        logger.info(
            "model %r (%s, %s) ready in %.1f s",
            model.name,
            model.task,
            model.model_dir,
            time.perf_counter() - start,
        )
    if all(m.ready for m in served.values()):
        logger.info("serve: ready (%s)", ", ".join(served))


async def _drain(served: dict[str, ServedModel], metrics: ServerMetrics, options: ServeOptions) -> None:
    """Lifespan shutdown: uvicorn has waited for in-flight requests; end each model's worker."""
    left = int(metrics.in_flight.value())
    if left:
        logger.warning(
            "serve: %d requests still in flight after --drain_timeout %g s", left, options.drain_timeout
        )
    else:
        logger.info("serve: drained: every in-flight request was answered")
    for model in served.values():
        if model.batcher is not None and not await asyncio.to_thread(
            model.batcher.stop, options.drain_timeout
        ):
            logger.warning(
                "serve: model %r still busy after %g s; leaving it", model.name, options.drain_timeout
            )
    logger.info("serve: stopped")


def _add_routes(app: FastAPI) -> None:
    @app.get("/health", summary="Liveness: the process answers; each model's state")
    async def health(request: Request) -> dict[str, Any]:
        return {"status": "ok", "models": {n: m.describe() for n, m in request.app.state.served.items()}}

    @app.get("/ready", summary="Readiness: 200 once every model is loaded and warmed up, else 503")
    async def ready(request: Request):
        models = request.app.state.served.values()
        states = {m.name: m.describe() for m in models}
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
        return JSONResponse({"model": model.name, "task": model.task, "predictions": predictions})

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

"""The models a server holds: each loaded in the background, checked, limited and micro-batched.

A :class:`ServedModel` wraps an :class:`encoder_tasks.inference.Predictor` and its
:class:`encoder_tasks.serving.batcher.Batcher`. Routes check a request's records with
:meth:`ServedModel.parse` (limits, then the task's own field checks, each failure an
:class:`ApiError` naming the field) and answer it with :meth:`ServedModel.predict`;
:func:`choose_model` picks the model a request names (or the only one of its task).

Example:
    >>> served = ServedModel("sst2", "runs/sst2", ServeOptions(), ServerMetrics())  # doctest: +SKIP
    >>> served.load(); served.parse([{"text": "a fine film"}])  # doctest: +SKIP
    [{'text': 'a fine film'}]
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import threading
from pathlib import Path
from typing import Any

from ..inference import Predictor, task_of
from ..inputs import InputError, describe
from .batcher import Batcher
from .errors import ApiError

logger = logging.getLogger(__name__)

#: Status of a request whose client went away before its answer (nginx's convention).
CLIENT_CLOSED = 499


class ClientDisconnected(Exception):
    """The client closed the connection while its request waited; nobody reads the answer."""


class ServedModel:
    """One model under its name: ``task``, ``predictor`` (once loaded) and ``state``
    (``loading``, ``ready`` or ``failed``, with ``error``)."""

    def __init__(self, name: str, model_dir: str | Path, options, metrics):
        self.name, self.model_dir, self.options, self.metrics = name, str(model_dir), options, metrics
        self.task = task_of(model_dir)  # a folder that is no model fails here, before serving
        self.predictor: Predictor | None = None
        self.state, self.error = "loading", None
        self.batcher: Batcher | None = None
        self._counter: Predictor | None = None
        self._count_lock = threading.Lock()
        metrics.model_ready.set(0, model=name)

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def describe(self) -> dict[str, Any]:
        about = {"task": self.task, "state": self.state, "model_dir": self.model_dir}
        if self.error:
            about["error"] = self.error
        return about

    # ---- loading (on a background thread) ---------------------------------------------------------
    def load(self) -> None:
        """Load the model and start its worker (blocking: the app calls it off the event loop)."""
        options = self.options
        predictor = Predictor.load(
            self.model_dir,
            task=self.task,
            precision=options.precision,
            batch_size=options.batch_size,
            disable_tqdm=True,  # a server's log is no terminal
            # auto, unless chosen: left unset so $ENCODER_TASKS_BACKEND applies as it does to predict
            **({"backend": options.backend} if options.backend != "auto" else {}),
        )
        # A fast tokenizer must not be used by two threads at once (truncation settings live in
        # the Rust object: "Already borrowed"); tokens are counted with a copy, under a lock.
        counting = copy.deepcopy(predictor.tokenizer)
        counting.model_max_length = 1 << 62  # counts only: no "longer than the maximum" warning
        self._counter = dataclasses.replace(predictor, tokenizer=counting)
        self.batcher = Batcher(
            self.name,
            lambda inputs, overrides: predictor.predict(inputs, **overrides),
            options.max_batch_tokens,
            options.max_wait_ms,
            self.metrics,
        )
        self.batcher.start()
        self.predictor = predictor

    def warm_up_record(self) -> dict[str, Any]:
        """An input this model accepts (the first of a few shapes its task's checks let through)."""
        mask = getattr(self.predictor.tokenizer, "mask_token", None) or "[MASK]"
        text = f"The server is warming {mask} up."
        shapes = [
            {"question": "What is warming up?", "context": text},
            {"text": text, "text_pair": "A model is loading."},
            {"text": text},
        ]
        for record in shapes:
            try:
                return self.predictor.parse([record])[0]
            except InputError:
                continue
        raise RuntimeError(f"model {self.name!r}: no warm-up input fits task {self.task}")

    def set_state(self, state: str, error: str | None = None) -> None:
        self.state, self.error = state, error
        self.metrics.model_ready.set(1 if state == "ready" else 0, model=self.name)

    # ---- requests ---------------------------------------------------------------------------------
    def _unavailable(self) -> ApiError:
        if self.state == "failed":
            return ApiError(503, f"model {self.name!r} failed to load: {self.error}")
        return ApiError(503, f"model {self.name!r} is still loading; GET /ready answers 200 once it is ready")

    def parse(self, records: Any, where: str = "inputs") -> list[dict[str, Any]]:
        """Check a request's records: limits first (413), then the task's field checks (400)."""
        if not self.ready:
            raise self._unavailable()
        if isinstance(records, dict):
            records = [records]
        if not isinstance(records, list):
            raise ApiError(
                400,
                f"{where}: expected a list of input objects (or one object), found {describe(records)}",
                where,
            )
        if not records:
            raise ApiError(400, f"{where}: expected at least one input, found an empty list", where)
        limit = self.options.max_inputs_per_request
        if len(records) > limit:
            raise ApiError(
                413,
                f"{where}: expected at most {limit} inputs per request (--max_inputs_per_request), "
                f"found {len(records)}",
                where,
            )
        for i, record in enumerate(records):
            self._check_sizes(record, f"{where}[{i}]")
        try:
            return self.predictor.parse(records, where)
        except InputError as error:
            raise ApiError(400, str(error), error.field) from None

    def _check_sizes(self, record: Any, where: str) -> None:
        if not isinstance(record, dict):
            return  # the task's checks say what was expected
        limit = self.options.max_chars_per_input
        for key, value in record.items():
            if isinstance(value, str):
                size = len(value)
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                size = sum(map(len, value)) + max(len(value) - 1, 0)  # tokens joined by spaces
            else:
                continue
            if size > limit:
                raise ApiError(
                    413,
                    f"{where}.{key}: expected at most {limit} characters (--max_chars_per_input), "
                    f"found {size}",
                    f"{where}.{key}",
                )

    def check_overrides(self, parameters: Any, where: str = "parameters") -> dict[str, Any]:
        """Per-request predict flags (``{"top_k": 3}``), checked; an ApiError 400 names a bad one."""
        if parameters is None:
            return {}
        if not self.ready:
            raise self._unavailable()
        try:
            return self.predictor.check_overrides(parameters, where)
        except InputError as error:
            raise ApiError(400, str(error), error.field) from None

    def _count_tokens(self, inputs: list[dict[str, Any]]) -> int:
        with self._count_lock:
            return sum(self._counter.count_tokens(inputs))

    def token_lengths(self, sequences: list[tuple[str, ...]]) -> list[int]:
        """Tokens per sequence (a text, or a pair encoded together), special tokens included,
        counted on this model's second tokenizer (blocking: call it off the event loop)."""
        with self._count_lock:
            tokenizer = self._counter.tokenizer
            return [len(tokenizer(*seq, add_special_tokens=True)["input_ids"]) for seq in sequences]

    async def predict(
        self, inputs: list[dict[str, Any]], overrides: dict[str, Any] | None = None, request=None
    ):
        """One record per input, through the micro-batcher. ``request`` (a Starlette request): a
        client that disconnects stops waiting (its answer is dropped, nobody else's).

        Raises ApiError 503 when the model is not ready, the server is shutting down, or no answer
        came within ``request_timeout``."""
        if self.batcher is None or self.state == "failed":
            raise self._unavailable()
        answer = asyncio.ensure_future(
            asyncio.wait_for(self._submit(inputs, overrides or {}), self.options.request_timeout)
        )
        if request is None:
            return await self._answer(answer)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if answer not in done:
            answer.cancel()
            logger.info("model %r: a client disconnected before its answer; dropped", self.name)
            raise ClientDisconnected()
        return await self._answer(answer)

    async def warm_up(self) -> None:
        """One prediction through the batcher (no timeout: the first forward pays for set-up)."""
        await self._submit([self.warm_up_record()], {})

    async def _answer(self, answer: asyncio.Future) -> list[dict[str, Any]]:
        try:
            return await answer
        except TimeoutError:
            raise ApiError(
                503,
                f"model {self.name!r}: no answer within {self.options.request_timeout:g} s "
                "(--request_timeout); the server is overloaded, try again",
            ) from None

    async def _submit(self, inputs: list[dict[str, Any]], overrides: dict[str, Any]) -> list[dict[str, Any]]:
        tokens = await asyncio.to_thread(self._count_tokens, inputs)
        return await self.batcher.submit(inputs, overrides, tokens)


async def _disconnected(request) -> None:
    """Return when the client of ``request`` has gone (its body is read: receive waits for that)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def choose_model(request, name: str | None, tasks: tuple[str, ...], route: str) -> ServedModel:
    """The served model a request names, or the only one of ``tasks`` when it names none
    (``tasks`` empty: any task). Records the name for the request's metrics."""
    served: dict[str, ServedModel] = request.app.state.served
    listing = ", ".join(f"{m.name} ({m.task})" for m in served.values())
    if name is None:
        fits = [m for m in served.values() if not tasks or m.task in tasks]
        kinds = " or ".join(tasks) or "any"
        if not fits:
            raise ApiError(404, f"model: no {kinds} model is served; served: {listing}", "model")
        if len(fits) > 1:
            names = ", ".join(m.name for m in fits)
            raise ApiError(
                400, f"model: expected the name of one of the {kinds} models {names}, found none", "model"
            )
        chosen = fits[0]
    elif not isinstance(name, str) or name not in served:
        raise ApiError(404, f"model: no model named {describe(name)} is served; served: {listing}", "model")
    else:
        chosen = served[name]
        if tasks and chosen.task not in tasks:
            raise ApiError(
                400,
                f"model {chosen.name!r} is a {chosen.task} model; {route} serves {' or '.join(tasks)} models",
                "model",
            )
    request.state.model = chosen.name
    return chosen

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
import math
import threading
from pathlib import Path
from typing import Any

from ..inference import Predictor, task_of
from ..inputs import InputError, describe, record_texts
from .batcher import Batcher
from .errors import ApiError, ClientDisconnected

logger = logging.getLogger(__name__)


class ServedModel:
    """One model under its name: ``task``, ``predictor`` (once loaded) and ``state``
    (``loading``, ``ready`` or ``failed``, with ``error``)."""

    def __init__(self, name: str, model_dir: str | Path, options, metrics):
        self.name, self.model_dir, self.options, self.metrics = name, str(model_dir), options, metrics
        from .checks import check_model_dir

        check_model_dir(model_dir)  # a damaged folder fails here, before serving
        self.task = task_of(model_dir)  # a folder that is no model fails here, before serving
        self.predictor: Predictor | None = None
        self.state, self.error = "loading", None
        self.batcher: Batcher | None = None
        self._counter: Predictor | None = None
        #: Set when the server stops (the app's lifespan): at --drain_timeout, waiting requests get 503.
        self.closing: asyncio.Event | None = None
        self.cut_at_drain = 0
        self._count_lock = threading.Lock()
        metrics.model_ready.set(0, model=name)

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def describe(self, detail: bool = True) -> dict[str, Any]:
        """Task and state; with ``detail``, the folder and the load error too (the server log
        has them: an answer to anyone shows neither paths nor exceptions)."""
        about = {"task": self.task, "state": self.state}
        if detail:
            about["model_dir"] = self.model_dir
            if self.error:
                about["error"] = self.error
        elif self.state == "failed":
            about["error"] = "failed to load; the server log says why"
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
        if self.task != "mlm" and hasattr(predictor.tokenizer, "split_special_tokens"):
            # "[SEP]" or "[CLS]" typed in a request is text, not a separator the client can inject
            # (MLM keeps special tokens: its inputs hold [MASK] on purpose).
            predictor.tokenizer.split_special_tokens = True
        # A fast tokenizer must not be used by two threads at once (truncation settings live in
        # the Rust object: "Already borrowed"); tokens are counted with a copy, under a lock.
        counting = copy.deepcopy(predictor.tokenizer)
        counting.model_max_length = 1 << 62  # counts only: no "longer than the maximum" warning
        self._counter = dataclasses.replace(predictor, tokenizer=counting)
        workers = self._workers(predictor)
        self.batcher = Batcher(
            self.name,
            [lambda inputs, overrides, p=p: p.predict(inputs, **overrides) for p in workers],
            options.max_batch_tokens,
            options.max_wait_ms,
            self.metrics,
            max_queue=options.max_queue,
            # Unset: a request whose wait alone would pass --request_timeout is refused at once
            # (429) instead of answered 503 when that time is up.
            max_queue_wait_ms=(
                options.request_timeout * 1000
                if options.max_queue_wait_ms is None
                else options.max_queue_wait_ms
            ),
        )
        self.batcher.start()
        self.predictor = predictor

    def _workers(self, predictor: Predictor) -> list[Predictor]:
        """One predictor per worker (``--model_workers``): the same model, set up for that many
        batches at once, each with its own copy of the tokenizer (a fast tokenizer is not to be
        shared between threads)."""
        count, threads = self.options.model_workers, self.options.model_threads
        if count > 1 or threads is not None:
            from ..runtimes import share_between

            logger.info("model %r: %s", self.name, share_between(predictor.model, count, threads))
        copies = [
            dataclasses.replace(predictor, tokenizer=copy.deepcopy(predictor.tokenizer))
            for _ in range(count - 1)
        ]
        return [predictor, *copies]

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
            return ApiError(503, f"model {self.name!r} failed to load; the server log says why")
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
        if isinstance(parameters, dict):  # ranges first: they name the field, the task's checks do not
            known = {f.name for f in dataclasses.fields(self.predictor.args)}
            self._check_ranges({k: v for k, v in parameters.items() if k in known}, where)
        try:
            return self.predictor.check_overrides(parameters, where)
        except InputError as error:
            raise ApiError(400, str(error), error.field) from None

    def _check_ranges(self, checked: dict[str, Any], where: str) -> None:
        """Bounds on what a parameter may cost: a stride that leaves a window nothing new moves
        it by one word (hundreds of passes for one text), a ``top_k`` of the whole vocabulary is
        an answer of hundreds of megabytes; thresholds must be numbers a comparison can use."""
        top = self.options.max_top_k
        for name, value in checked.items():
            field = f"{where}.{name}"
            if isinstance(value, float) and not math.isfinite(value):
                raise ApiError(400, f"{field}: expected a finite number, found {value!r}", field)
            low, high = _RANGES.get(name, (None, None))
            if name in ("top_k", "n_best"):
                high = top
            if isinstance(value, int) and not isinstance(value, bool):
                if (low is not None and value < low) or (high is not None and value > high):
                    expected = f"{low} to {high}" if high is not None else f"at least {low}"
                    cap = " (--max_top_k)" if high == top and name in ("top_k", "n_best") else ""
                    raise ApiError(400, f"{field}: expected {expected}{cap}, found {value}", field)

        def number(value: Any) -> bool:  # the type checks that follow name any other value
            return isinstance(value, int) and not isinstance(value, bool)

        for name in ("window_stride", "doc_stride"):
            if not hasattr(self.predictor.args, name):
                continue
            # The saved stride meets a max_length given here too (classification halves its own)
            given = name in checked or ("max_length" in checked and self.task != "classification")
            stride = checked.get(name, _flag(self.predictor, name))
            max_length = checked.get("max_length") or _flag(self.predictor, "max_length")
            if not given or not number(stride) or not number(max_length):
                continue
            room = int(max_length) - self.predictor.tokenizer.num_special_tokens_to_add(
                pair=name == "doc_stride"
            )
            room -= 1 if name == "doc_stride" else 0  # a question takes at least a token
            if stride >= room:
                field = f"{where}.{name if name in checked else 'max_length'}"
                raise ApiError(
                    400,
                    f"{field}: {name} {stride} must be less than {room}, the tokens a window of max_length "
                    f"{max_length} holds (each window must move on by at least one token)",
                    field,
                )

    def costs(self, inputs: list[dict[str, Any]], overrides: dict[str, Any] | None = None) -> list[int]:
        """Tokens each input computes with these parameters: every window of a long text counted
        at the full window length (a 20,000-character text is dozens of forward rows, not one),
        truncated texts at most ``max_length``. What the batch budget and ``--max_request_tokens``
        count (blocking: call it off the event loop)."""
        with self._count_lock:
            return _costs(self._counter, self.task, inputs, overrides or {})

    def check_cost(
        self, costs: list[int], where: str = "inputs", at_least: bool = False, of: int | None = None
    ) -> None:
        """ApiError 413 when a request computes more tokens than ``--max_request_tokens``
        (``at_least``: ``costs`` is a lower bound; ``of``: the request's inputs, where ``costs``
        covers only the first of them)."""
        total, limit = sum(costs), self.options.max_request_tokens
        if total > limit:
            counted = f"the first {len(costs)} of {of}" if of and of > len(costs) else str(len(costs))
            raise ApiError(
                413,
                f"{where}: expected at most {limit} tokens of work per request (--max_request_tokens; "
                f"every window of a long text counts), found {'at least ' if at_least else ''}{total} "
                f"in {counted} inputs; send fewer or shorter inputs",
                where,
            )

    def token_lengths(self, sequences: list[tuple[str, ...]], wait: bool = True) -> list[int] | None:
        """Tokens per sequence (a text, or a pair encoded together), special tokens included,
        counted on this model's second tokenizer (blocking: call it off the event loop).
        ``wait=False``: None at once when another thread is counting (the event loop must not
        wait for a worker thread's long count)."""
        if not self._count_lock.acquire(blocking=wait):
            return None
        try:
            return count_tokens(self._counter.tokenizer, sequences)
        finally:
            self._count_lock.release()

    async def predict(
        self,
        inputs: list[dict[str, Any]],
        overrides: dict[str, Any] | None = None,
        request=None,
        costs: list[int] | None = None,
    ):
        """One record per input, through the micro-batcher. ``request`` (a Starlette request): a
        client that disconnects stops waiting (its answer is dropped, nobody else's). ``costs``:
        the tokens each input computes, where the route counted them already (else counted here,
        as :meth:`costs` does).

        Raises ApiError 503 when the model is not ready, the server is shutting down, or no answer
        came within ``request_timeout``."""
        if self.batcher is None or self.state == "failed":
            raise self._unavailable()
        self.batcher.admit()  # a full queue refuses at once, before any work is spent on counting
        answer = asyncio.ensure_future(
            asyncio.wait_for(self._submit(inputs, overrides or {}, costs), self.options.request_timeout)
        )
        waits = {answer}
        gone = asyncio.ensure_future(_disconnected(request)) if request is not None else None
        closed = asyncio.ensure_future(self.closing.wait()) if self.closing is not None else None
        waits |= {w for w in (gone, closed) if w is not None}
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (gone, closed):
                if waiter is not None:
                    waiter.cancel()
        if answer in done:
            return await self._answer(answer)
        answer.cancel()
        if gone is not None and gone in done:
            logger.info("model %r: a client disconnected before its answer; dropped", self.name)
            raise ClientDisconnected()
        self.cut_at_drain += 1
        raise ApiError(
            503,
            f"model {self.name!r}: the server is shutting down and this request was still waiting at "
            "--drain_timeout; try again (another replica)",
            headers={"Retry-After": "1"},
        )

    async def warm_up(self) -> None:
        """Two predictions through the batcher (no timeout). The first forward pays for set-up
        and is not timed; the second, of :data:`WARM_UP_TIMED_INPUTS` inputs, gives admission its
        first seconds per token. Without it the first burst of clients was admitted by count
        alone (``--max_queue``): 64 requests queued, ~2 s of work, and the shed ones waited up
        to 200 ms behind their parsing."""
        record = self.warm_up_record()
        await self._submit([record], {})
        await self._submit([record] * WARM_UP_TIMED_INPUTS, {})

    async def _answer(self, answer: asyncio.Future) -> list[dict[str, Any]]:
        try:
            return await answer
        except TimeoutError:
            raise ApiError(
                503,
                f"model {self.name!r}: no answer within {self.options.request_timeout:g} s "
                "(--request_timeout); the server is overloaded, try again",
            ) from None

    async def _submit(
        self, inputs: list[dict[str, Any]], overrides: dict[str, Any], costs: list[int] | None = None
    ) -> list[dict[str, Any]]:
        with self.batcher.reserved():  # admission counts it while it is counted
            if costs is None:
                costs = await asyncio.to_thread(self._checked_costs, inputs, overrides)
            self.check_cost(costs)
        return await self.batcher.submit(inputs, overrides, costs)

    def _checked_costs(self, inputs: list[dict[str, Any]], overrides: dict[str, Any]) -> list[int]:
        # A request far over the cap is refused from its word count, before it is tokenized,
        # and the count stops once past the cap: splitting a 5 MB body's million words held the
        # GIL ~25 ms, and a request answered meanwhile waited for all of it. Both in one trip off
        # the event loop (a trip costs a one-sentence request as much as its counting).
        limit = self.options.max_request_tokens
        words = _costs(self._counter, self.task, inputs, overrides, True, stop_above=limit)
        self.check_cost(words, at_least=True, of=len(inputs))
        return self.costs(inputs, overrides)


def count_tokens(tokenizer, sequences: list[tuple[str, ...]]) -> list[int]:
    """Tokens per sequence (a text, or a pair), special tokens included, as ``len(tokenizer(*seq)
    ["input_ids"])`` gives them untruncated. A fast tokenizer's Rust tokenizer is called directly:
    the same ids without transformers' Python around each call (on the event loop of a served
    embedding model, about a third of a short sentence's count; docs/speed.md). It changes the
    Rust tokenizer's truncation and padding, which ``tokenizer(...)`` sets again on every call:
    use a tokenizer of its own (the server's counting copy), from one thread at a time.

    Example:
        >>> from encoder_tasks.testing import make_tiny_tokenizer
        >>> tok = make_tiny_tokenizer()
        >>> sequences = [("hello world",), ("hello", "world"), ("hello", "")]
        >>> counts = count_tokens(tok, sequences)
        >>> counts, counts == [len(tok(*seq)["input_ids"]) for seq in sequences]
        ([12, 13, 7], True)
    """
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is None:
        return [len(tokenizer(*seq, add_special_tokens=True)["input_ids"]) for seq in sequences]
    if backend.truncation is not None:
        backend.no_truncation()
    if backend.padding is not None:
        backend.no_padding()
    # "[SEP]" typed in a request is text where the tokenizer says so (split_special_tokens).
    backend.encode_special_tokens = bool(getattr(tokenizer, "split_special_tokens", False))
    # An empty second text is no pair, as tokenizer(text, "") reads it.
    return [len(backend.encode(seq[0], seq[1] if len(seq) > 1 and seq[1] else None).ids) for seq in sequences]


#: Inputs of the timed warm-up batch (see :meth:`ServedModel.warm_up`): a small batch, whose
#: fixed costs make its seconds per token an over- rather than an underestimate.
WARM_UP_TIMED_INPUTS = 8

#: Lowest (and highest) value of the per-request parameters that have one (``top_k``'s highest
#: is ``--max_top_k``).
_RANGES: dict[str, tuple[int | None, int | None]] = {
    "window_stride": (0, None),
    "doc_stride": (0, None),
    "max_answer_length": (1, None),
    "max_question_length": (1, None),
    "top_k": (1, None),
    "n_best": (1, None),
    "dimensions": (1, None),
}


def _flag(predictor: Predictor, name: str) -> Any:
    """A predict flag as the model runs it: the loaded flag, else the saved setting."""
    value = getattr(predictor.args, name, None)
    if value is None and predictor.settings is not None:
        value = getattr(predictor.settings, name, None)
    return value


def _windows(length: int, room: int, stride: int) -> int:
    """Windows of ``room`` tokens, neighbours sharing ``stride``, that cover ``length`` tokens."""
    if length <= room:
        return 1
    step = max(room - max(stride, 0), 1)
    return 1 + -(-(length - room) // step)


def _costs(
    predictor: Predictor,
    task: str,
    inputs: list[dict[str, Any]],
    overrides: dict[str, Any],
    words_only: bool = False,
    stop_above: int | None = None,
) -> list[int]:
    """See :meth:`ServedModel.costs`; ``predictor`` holds the counting tokenizer. ``words_only``:
    a lower bound without tokenizing, each whitespace-separated word taken as one token (a word
    is at least one), to refuse a request far over the cap at once. ``stop_above``: the costs of
    the first inputs only, once their sum is past it (the rest would not change the answer)."""
    tokenizer, args, settings = predictor.tokenizer, predictor.args, predictor.settings

    def flag(name: str, default: Any = None) -> Any:
        value = overrides.get(name, getattr(args, name, None))
        if value is None and settings is not None:
            value = getattr(settings, name, None)
        return default if value is None else value

    real_limit = getattr(predictor.tokenizer, "init_kwargs", {}).get("model_max_length") or 512
    max_length = int(flag("max_length", real_limit if real_limit < 1 << 20 else 512))
    single = tokenizer.num_special_tokens_to_add(pair=False)
    paired = tokenizer.num_special_tokens_to_add(pair=True)
    texts = [text for record in inputs for text in record_texts(record)]
    if words_only:
        lengths = iter(len(text.split()) for text in texts)
    else:
        lengths = iter(
            len(ids) for ids in (tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else [])
        )
    costs, total = [], 0
    for record in inputs:
        # record_texts: the string (and token list) fields, in the record's order
        names = [k for k, v in record.items() if isinstance(v, str | list)]
        sizes = {name: next(lengths) for name in names}
        counts = [n for name, n in sizes.items() if name != "id"]
        if task == "qa":
            question = min(sizes["question"], int(flag("max_question_length", sizes["question"])))
            context = sizes["context"]
            room = max(max_length - paired - question, 1)
            windows = _windows(context, room, int(flag("doc_stride", 0)))
            costs.append(windows * max_length if windows > 1 else question + context + paired)
        elif (
            task in ("classification", "ner")
            and len(counts) == 1
            and (task == "ner" or flag("long_text", "window") == "window")
        ):
            windows = _windows(counts[0], max_length - single, int(flag("window_stride", 0)))
            costs.append(windows * max_length if windows > 1 else counts[0] + single)
        elif task in ("classification", "pair") and len(counts) == 2:
            costs.append(min(sum(counts) + paired, max_length))  # one sequence, truncated
        else:  # each text its own sequence, truncated (embedding, mlm)
            costs.append(sum(min(n + single, max_length) for n in counts) or 1)
        total += costs[-1]
        if stop_above is not None and total > stop_above:
            break
    return costs


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

"""OpenAI's ``POST /v1/embeddings``, and the embedding steps text-embeddings-inference shares.

A served embedding model answers ``{"text"}`` records with the vectors ``embedding encode``
writes (:meth:`encoder_tasks.serving.models.ServedModel.predict`, micro-batched); this module
turns them into what the OpenAI client reads: floats, or base64 of little-endian float32 bytes
(what ``openai`` decodes, and asks for by default), cut to ``dimensions`` when the model was
trained for that (``matryoshka_dims`` in its saved settings) and re-normalised.

Example (the pure steps):
    >>> import numpy as np
    >>> encode_base64(np.array([1.0, -2.0], dtype=np.float32))
    'AACAPwAAAMA='
    >>> cut_dimensions(np.array([[3.0, 4.0, 12.0]]), 2).tolist()
    [[0.6000000238418579, 0.800000011920929]]
    >>> check_dimensions(8, full=384, matryoshka_dims=[64, 128])
    Traceback (most recent call last):
    ...
    encoder_tasks.serving.errors.ApiError: dimensions: expected one of 64, 128, 384 (this model's full size and its matryoshka_dims), found 8
"""

from __future__ import annotations

import asyncio
import base64
import re
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictStr, WithJsonSchema

from ..inputs import describe
from .body import ParsedBodyRoute
from .errors import ApiError
from .models import choose_model

router = APIRouter(tags=["OpenAI-compatible"], route_class=ParsedBodyRoute)

#: ``str | list[str]`` in /docs; checked by :func:`check_texts` (one message naming the field).
Texts = Annotated[
    Any,
    WithJsonSchema(
        {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]}
    ),
]


# ---- pure steps ---------------------------------------------------------------------------------
def check_texts(value: Any, field: str) -> list[str]:
    """A text or a non-empty list of texts, as a list; token-id arrays are refused (send text).

    Example:
        >>> check_texts("a", "input"), check_texts(["a", "b"], "input")
        (['a'], ['a', 'b'])
        >>> check_texts([[101, 2023]], "input")
        Traceback (most recent call last):
        ...
        encoder_tasks.serving.errors.ApiError: input[0]: token ids are not accepted (the server tokenizes with the model's own tokenizer); send text, a string or a list of strings
    """
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise ApiError(
            400, f"{field}: expected a string or a list of strings, found {describe(value)}", field
        )
    if not value:
        raise ApiError(400, f"{field}: expected at least one text, found an empty list", field)
    if all(map(_is_token_id, value)):
        raise ApiError(400, f"{field}: {_TOKEN_IDS}", field)
    for i, item in enumerate(value):
        if isinstance(item, list) and item and all(map(_is_token_id, item)):
            raise ApiError(400, f"{field}[{i}]: {_TOKEN_IDS}", f"{field}[{i}]")
        if not isinstance(item, str):
            raise ApiError(400, f"{field}[{i}]: expected a string, found {describe(item)}", f"{field}[{i}]")
    return value


_TOKEN_IDS = (
    "token ids are not accepted (the server tokenizes with the model's own tokenizer); "
    "send text, a string or a list of strings"
)


def _is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_dimensions(value: Any, full: int | None, matryoshka_dims: Any) -> int | None:
    """``dimensions`` checked against what the model allows: its full size, or one of the
    ``matryoshka_dims`` it was trained for (``full=None``: not known yet, only the type is checked)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ApiError(400, f"dimensions: expected a positive integer, found {describe(value)}", "dimensions")
    if full is None:
        return value
    allowed = sorted({int(d) for d in matryoshka_dims or () if int(d) < full} | {full})
    if value not in allowed:
        how = (
            "full size and its matryoshka_dims"
            if len(allowed) > 1
            else "full size: it was not trained with matryoshka_dims"
        )
        raise ApiError(
            400,
            f"dimensions: expected {'one of ' if len(allowed) > 1 else ''}{', '.join(map(str, allowed))} "
            f"(this model's {how}), found {value}",
            "dimensions",
        )
    return value


def cut_dimensions(vectors: np.ndarray, dimensions: int | None, normalize: bool = True) -> np.ndarray:
    """The first ``dimensions`` of each row (Matryoshka), rescaled to unit length (``normalize``;
    a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if dimensions is not None:
        vectors = vectors[:, :dimensions]
    if not normalize:
        return vectors
    # Shared code imports no task package (tests/unit/test_architecture.py): the division is here.
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def encode_base64(vector: np.ndarray) -> str:
    """Little-endian float32 bytes in base64: what the ``openai`` client decodes (``encoding_format="base64"``)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def matryoshka_dims(served) -> list[int] | None:
    """The sizes a model was trained to be cut to (saved as ``matryoshka_dims``), if any."""
    settings = served.predictor.settings
    return settings.get("matryoshka_dims") if settings is not None else None


def max_tokens(predictor) -> int:
    """The most tokens one text of ``predictor`` is read with (longer texts are cut): as ``encode``
    and ``predict`` resolve it (flag, then saved setting, then the tokenizer's own, at most 512)."""
    settings = predictor.settings
    saved = settings.max_length if settings is not None else None
    return int(predictor.args.max_length or saved or min(predictor.tokenizer.model_max_length, 512))


#: Texts that total at most this many characters are counted on the event loop, longer ones on
#: a worker thread. A sentence's count takes ~40 us; the trip to a thread and back cost a
#: one-sentence request more than that, and under load each trip is two more hand-overs of
#: the GIL between threads (docs/serving.md, "Micro-batching").
INLINE_COUNT_CHARACTERS = 1000


async def token_lengths(served, sequences: list[tuple[str, ...]]) -> list[int]:
    """:meth:`ServedModel.token_lengths`: on the event loop for short texts (while no worker
    thread is counting), else off it, so a long request never holds the loop."""
    if sum(len(text) for sequence in sequences for text in sequence) <= INLINE_COUNT_CHARACTERS:
        counted = served.token_lengths(sequences, wait=False)
        if counted is not None:
            return counted
    return await asyncio.to_thread(served.token_lengths, sequences)


def refuse_long(lengths: list[int], limit: int, fields: list[str]) -> None:
    """413 for the first input over ``limit`` tokens (``truncate`` false), as text-embeddings-inference does."""
    for length, field in zip(lengths, fields):
        if length > limit:
            raise ApiError(
                413,
                f"{field}: expected at most {limit} tokens (the model's max_length), found {length}; "
                "send a shorter text or set truncate to true",
                field,
            )


def parse_named(served, records: list[dict[str, Any]], where: str, name) -> list[dict[str, Any]]:
    """``records`` through the served model's limits and checks, an error naming the field as the
    client sent it: ``name(i, key)`` for record ``i``'s field ``key`` (``input[2]``, not ``input[2].text``)."""
    try:
        return served.parse(records, where)
    except ApiError as error:
        found = re.fullmatch(rf"{re.escape(where)}\[(\d+)\]\.(\w+)", error.field or "")
        if found:
            field = name(int(found[1]), found[2])
            error.message = error.message.replace(error.field, field, 1)
            error.field, error.args = field, (error.message,)
        raise


async def embed(served, texts: list[str], field: str, request: Request, truncate: bool = True):
    """Vectors of ``texts`` (as ``embedding encode`` writes them) and the tokens each was read with."""
    records = parse_named(served, [{"text": t} for t in texts], field, lambda i, _: f"{field}[{i}]")
    lengths = await token_lengths(served, [(t,) for t in texts])
    limit = max_tokens(served.predictor)
    if not truncate:
        refuse_long(lengths, limit, [f"{field}[{i}]" for i in range(len(texts))])
    # Each text is its own sequence, cut at ``limit``: the tokens it computes, counted once
    # (the batch budget's count, as ServedModel.costs gives it for an embedding input).
    results = await served.predict(records, request=request, costs=[min(n, limit) for n in lengths])
    # float64 keeps the written values exactly (float32 would not round-trip their decimals).
    vectors = np.asarray([r["embedding"] for r in results], dtype=np.float64)
    return vectors, [min(n, limit) for n in lengths]


# ---- the route -----------------------------------------------------------------------------------
class EmbeddingsRequest(BaseModel):
    """OpenAI's embeddings request (https://platform.openai.com/docs/api-reference/embeddings)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"model": "my-embedder", "input": ["a cat", "a dog"]}]},
    )

    input: Texts = Field(description="A text or a list of texts (token-id arrays are refused).")
    model: StrictStr | None = Field(
        default=None, description="A served embedding model's name (optional when only one is served)."
    )
    encoding_format: StrictStr = Field(
        default="float", description="float, or base64 (little-endian float32)."
    )
    dimensions: Annotated[Any, WithJsonSchema({"type": "integer", "minimum": 1})] = Field(
        default=None,
        description="Cut vectors to this size: the full size or one of the model's matryoshka_dims.",
    )
    user: StrictStr | None = Field(default=None, description="Accepted and ignored.")


_EMBEDDINGS_EXAMPLE = {
    "object": "list",
    "data": [{"object": "embedding", "index": 0, "embedding": [0.0123, -0.0456, 0.0789]}],
    "model": "my-embedder",
    "usage": {"prompt_tokens": 4, "total_tokens": 4},
}


@router.post(
    "/v1/embeddings",
    summary="OpenAI-compatible embeddings (the openai client works unchanged)",
    responses={200: {"content": {"application/json": {"example": _EMBEDDINGS_EXAMPLE}}}},
)
async def create_embeddings(body: EmbeddingsRequest, request: Request) -> dict:
    """Embed ``input`` with ``model``: the ``openai`` client works unchanged against this route."""
    if body.encoding_format not in ("float", "base64"):
        raise ApiError(
            400,
            f"encoding_format: expected float or base64, found {describe(body.encoding_format)}",
            "encoding_format",
        )
    texts = check_texts(body.input, "input")
    served = choose_model(request, body.model, ("embedding",), "/v1/embeddings")
    check_dimensions(body.dimensions, None, None)
    vectors, tokens = await embed(served, texts, "input", request)
    if body.dimensions is not None:
        check_dimensions(body.dimensions, vectors.shape[1], matryoshka_dims(served))
        vectors = cut_dimensions(vectors, body.dimensions)
    if body.encoding_format == "base64":
        encoded = [encode_base64(v) for v in vectors]
    else:
        encoded = vectors.tolist()  # float64 rows: the same Python floats, without a loop per value
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)],
        "model": served.name,
        "usage": {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)},
    }

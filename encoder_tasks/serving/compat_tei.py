"""text-embeddings-inference's ``POST /embed``, ``/rerank`` and ``/predict``, on this toolkit's models.

Request fields and answers follow TEI's router (``inputs``, ``normalize``, ``truncate``,
``raw_scores``, ``return_text``; a list of vectors, ``[{"index", "score"}]``, ``[{"label",
"score"}]``), errors are TEI's ``{"error", "error_type"}``. One server may hold several models,
so each body may name one in ``model`` (an extension: with one model of the route's task it is
not needed). A text over the model's ``max_length`` with ``truncate`` false is a 413, as in TEI.

Scores (pure, below): a cross-encoder reranks by its regression score, or, for a label model, by
the probability of its last label (the positive class of a binary model); ``raw_scores`` gives
the regression score or that label's log-odds (the logit a one-output reranker would give). An
embedding model reranks by cosine similarity.

Example:
    >>> record = {"label": "1", "score": 0.8, "probabilities": {"0": 0.2, "1": 0.8}}
    >>> rerank_score(record, raw=False), round(rerank_score(record, raw=True), 4)
    (0.8, 1.3863)
    >>> tei_predictions(record, raw=False)
    [{'label': '1', 'score': 0.8}, {'label': '0', 'score': 0.2}]
    >>> predict_inputs(["a question", "a passage"])
    (False, [('a question', 'a passage')])
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, WithJsonSchema

from ..inputs import describe
from .compat_openai import (
    Texts,
    check_dimensions,
    check_texts,
    cut_dimensions,
    embed,
    matryoshka_dims,
    max_tokens,
    parse_named,
    refuse_long,
    token_lengths,
)
from .errors import ApiError
from .models import choose_model

router = APIRouter(tags=["text-embeddings-inference-compatible"])

#: Probabilities are written with 6 decimals: log-odds are taken within these bounds.
_EPSILON = 1e-7


# ---- pure steps ---------------------------------------------------------------------------------
def _log_odds(p: float) -> float:
    p = min(max(p, _EPSILON), 1 - _EPSILON)
    return math.log(p / (1 - p))


def rerank_score(record: dict[str, Any], raw: bool) -> float:
    """A pair record's relevance: the regression (or cosine) ``score``; for a label model the
    probability of its last label (``raw``: that label's log-odds)."""
    probabilities = record.get("probabilities")
    if probabilities is None:
        return float(record["score"])
    p = float(probabilities[list(probabilities)[-1]])
    return _log_odds(p) if raw else p


def tei_predictions(record: dict[str, Any], raw: bool) -> list[dict[str, Any]]:
    """``[{"label", "score"}]`` over every label, highest first, from a classification record:
    single-label probabilities (``raw``: their logs, the logits up to a constant), multi-label
    probabilities (``raw``: each label's logit), or ``[{"label": "score", "score": value}]``."""
    probabilities = record.get("probabilities")
    if probabilities is None:
        return [{"label": "score", "score": float(record["score"])}]
    multi = "labels" in record
    if raw:
        scale = _log_odds if multi else (lambda p: math.log(max(p, _EPSILON)))
        scores = {label: scale(float(p)) for label, p in probabilities.items()}
    else:
        scores = {label: float(p) for label, p in probabilities.items()}
    return [{"label": label, "score": s} for label, s in sorted(scores.items(), key=lambda kv: -kv[1])]


def _sequence(value: Any, where: str) -> tuple[str, ...]:
    """One TEI sequence: ``[text]`` or ``[text, text_pair]``."""
    if not isinstance(value, list) or not 1 <= len(value) <= 2 or not all(isinstance(v, str) for v in value):
        raise ApiError(
            400, f"{where}: expected a string, [text] or [text, text_pair], found {describe(value)}", where
        )
    return tuple(value)


def predict_inputs(value: Any) -> tuple[bool, list[tuple[str, ...]]]:
    """TEI's ``inputs`` of ``/predict``: ``(batch, sequences)``. A string or ``[text, text_pair]``
    is one input; a list of strings and ``[text]``/``[text, text_pair]`` lists is a batch (as in
    TEI, a list of two strings is one pair: send ``[["a"], ["b"]]`` for two texts)."""
    if isinstance(value, str):
        return False, [(value,)]
    if not isinstance(value, list) or not value:
        found = "an empty list" if value == [] else describe(value)
        raise ApiError(
            400,
            f"inputs: expected a string, a [text, text_pair] pair or a list of them, found {found}",
            "inputs",
        )
    if isinstance(value[0], str):
        if len(value) > 2:
            raise ApiError(
                400,
                f"inputs: a list of strings is one input, [text] or [text, text_pair]; found {len(value)} "
                'strings (a batch is a list of lists: [["a"], ["b"], ["c"]])',
                "inputs",
            )
        return False, [_sequence(value, "inputs")]
    return True, [(v,) if isinstance(v, str) else _sequence(v, f"inputs[{i}]") for i, v in enumerate(value)]


def _input_field(value: Any, batch: bool, i: int, key: str) -> str:
    """Where record ``i``'s ``key`` was in TEI's ``inputs``: ``inputs``, ``inputs[1]``, ``inputs[2][1]``."""
    item = value[i] if batch else value
    where = f"inputs[{i}]" if batch else "inputs"
    return f"{where}[{int(key == 'text_pair')}]" if isinstance(item, list) else where


# ---- requests ------------------------------------------------------------------------------------
_MODEL = Field(default=None, description="The served model (optional when one model fits the route).")
_TRUNCATE = Field(
    default=False, description="Cut texts over the model's max_length (false: refuse them, 413)."
)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: StrictStr | None = _MODEL
    truncate: StrictBool = _TRUNCATE
    truncation_direction: StrictStr = Field(
        default="right", description="right only (tokens cut at the end)."
    )

    def check_direction(self) -> None:
        if self.truncation_direction.lower() != "right":
            raise ApiError(
                400,
                f"truncation_direction: expected right (the only one supported), found "
                f"{describe(self.truncation_direction)}",
                "truncation_direction",
            )


class EmbedRequest(_Request):
    inputs: Texts = Field(description="A text or a list of texts.")
    normalize: StrictBool = Field(default=True, description="Scale vectors to unit length.")
    dimensions: Annotated[Any, WithJsonSchema({"type": "integer", "minimum": 1})] = Field(
        default=None,
        description="Cut vectors to this size: the full size or one of the model's matryoshka_dims.",
    )


class RerankRequest(_Request):
    query: StrictStr = Field(description="The text the others are ranked against.")
    texts: Texts = Field(description="The texts to rank.")
    raw_scores: StrictBool = Field(
        default=False, description="Regression score or log-odds, not a probability."
    )
    return_text: StrictBool = Field(default=False, description="Add each text to its rank.")


class TeiPredictRequest(_Request):
    inputs: Annotated[
        Any,
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
                    {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
                    },
                ]
            }
        ),
    ] = Field(description='A text, a [text, text_pair] pair, or a batch: [["a"], ["b", "b2"], ...].')
    raw_scores: StrictBool = Field(
        default=False, description="Logits (up to a constant) instead of probabilities."
    )


# ---- routes --------------------------------------------------------------------------------------
def _example(answer: Any) -> dict:
    """A 200 answer example for /docs."""
    return {200: {"content": {"application/json": {"example": answer}}}}


@router.post(
    "/embed",
    summary="text-embeddings-inference: one vector per input",
    responses=_example([[0.0123, -0.0456, 0.0789]]),
)
async def tei_embed(body: EmbedRequest, request: Request) -> list[list[float]]:
    """One vector per input, as ``embedding encode`` gives it (``normalize``: at unit length)."""
    body.check_direction()
    texts = check_texts(body.inputs, "inputs")
    served = choose_model(request, body.model, ("embedding",), "/embed")
    check_dimensions(body.dimensions, None, None)
    vectors, _ = await embed(served, texts, "inputs", request, truncate=body.truncate)
    if body.dimensions is not None:
        check_dimensions(body.dimensions, vectors.shape[1], matryoshka_dims(served))
    if body.dimensions is None and not body.normalize:
        return vectors.tolist()
    return cut_dimensions(vectors, body.dimensions, body.normalize).tolist()


class EmbedSparseRequest(_Request):
    inputs: Texts = Field(description="A text or a list of texts.")


@router.post(
    "/embed_sparse",
    summary="text-embeddings-inference: the non-zero token weights of each input (a sparse model)",
    responses=_example([[{"index": 2003, "value": 1.25}, {"index": 4937, "value": 0.5}]]),
)
async def tei_embed_sparse(body: EmbedSparseRequest, request: Request) -> list[list[dict[str, Any]]]:
    """Per input, ``{"index", "value"}`` for every non-zero weight (token ids ascending), as
    ``embedding encode`` writes a sparse model's vectors; a dense model answers 400."""
    body.check_direction()
    texts = check_texts(body.inputs, "inputs")
    served = choose_model(request, body.model, ("embedding",), "/embed_sparse")
    records = parse_named(
        served, [{"text": t, "sparse": True} for t in texts], "inputs", lambda i, _: f"inputs[{i}]"
    )
    lengths = await token_lengths(served, [(t,) for t in texts])
    if not body.truncate:
        refuse_long(lengths, max_tokens(served.predictor), [f"inputs[{i}]" for i in range(len(texts))])
    results = await served.predict(records, request=request)
    return [[{"index": i, "value": v} for i, v in zip(r["indices"], r["values"])] for r in results]


@router.post(
    "/rerank",
    summary="text-embeddings-inference: texts ranked against a query",
    responses=_example([{"index": 1, "score": 0.93}, {"index": 0, "score": 0.12}]),
)
async def tei_rerank(body: RerankRequest, request: Request) -> list[dict[str, Any]]:
    """``texts`` ranked by relevance to ``query``, highest first: a pair model's score or an
    embedding model's cosine similarity."""
    body.check_direction()
    texts = check_texts(body.texts, "texts")
    served = choose_model(request, body.model, ("pair", "embedding"), "/rerank")
    records = parse_named(
        served,
        [{"text": body.query, "text_pair": t} for t in texts],
        "texts",
        lambda i, key: "query" if key == "text" else f"texts[{i}]",
    )
    limit = max_tokens(served.predictor)
    if served.task == "embedding":  # query and text are read apart
        lengths = await token_lengths(served, [(body.query,), *((t,) for t in texts)])
        refused = ["query", *(f"texts[{i}]" for i in range(len(texts)))]
    else:
        lengths = await token_lengths(served, [(body.query, t) for t in texts])
        refused = [f"texts[{i}]" for i in range(len(texts))]
    if not body.truncate:
        refuse_long(lengths, limit, refused)
    results = await served.predict(records, request=request)
    ranks = []
    for index, record in enumerate(results):
        rank = {"index": index, "score": rerank_score(record, body.raw_scores)}
        if body.return_text:
            rank["text"] = texts[index]
        ranks.append(rank)
    return sorted(ranks, key=lambda r: -r["score"])


@router.post(
    "/predict",
    summary="text-embeddings-inference: every label with its score",
    responses=_example([{"label": "pos", "score": 0.97}, {"label": "neg", "score": 0.03}]),
)
async def tei_predict(body: TeiPredictRequest, request: Request) -> list[Any]:
    """Every label with its score, highest first, per input (a list of those for a batch)."""
    body.check_direction()
    batch, sequences = predict_inputs(body.inputs)
    served = choose_model(request, body.model, ("classification", "pair"), "/predict")
    pairs = bool(getattr(served.predictor.settings, "text_pair_column", None))
    kinds = {len(s) == 2 for s in sequences}
    if len(kinds) > 1:
        raise ApiError(400, "inputs: mixes single texts and [text, text_pair] pairs; send one kind", "inputs")
    if kinds != {pairs}:
        where = "inputs[0]" if batch else "inputs"
        wanted, found = ("[text, text_pair] pairs", "a single text") if pairs else ("single texts", "a pair")
        raise ApiError(400, f"{where}: model {served.name!r} reads {wanted}; found {found}", where)
    records = parse_named(
        served,
        [dict(zip(("text", "text_pair"), s)) for s in sequences],
        "inputs",
        lambda i, key: _input_field(body.inputs, batch, i, key),
    )
    lengths = await token_lengths(served, sequences)
    limit = max_tokens(served.predictor)
    long = [n > limit for n in lengths]
    if not body.truncate:
        refuse_long(lengths, limit, [f"inputs[{i}]" if batch else "inputs" for i in range(len(sequences))])
    # truncate: TEI cuts a long text; without this a single text would be read in windows.
    overrides = {"long_text": "truncate"} if any(long) and not pairs else None
    results = await served.predict(records, overrides, request=request)
    answers = [tei_predictions(r, body.raw_scores) for r in results]
    return answers if batch else answers[0]

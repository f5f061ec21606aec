"""text-embeddings-inference's ``POST /embed``, ``/rerank``, ``/predict``, ``/`` and
``/invocations`` and ``GET /info``, on this toolkit's models.

Request fields and answers follow TEI's router (``inputs``, ``normalize``, ``truncate``,
``raw_scores``, ``return_text``; a list of vectors, ``[{"index", "score"}]``, ``[{"label",
"score"}]``), errors are TEI's ``{"error", "error_type"}``. One server may hold several models,
so each body may name one in ``model`` (an extension: with one model of the route's task it is
not needed). A text over the model's ``max_length`` with ``truncate`` false is a 413, as in TEI.
Fields TEI does not know are ignored, as TEI ignores them (``huggingface_hub``'s client always
sends ``"parameters"``): the answer names them in its ``X-Ignored-Fields`` header, and the log
says so once per route.

``POST /`` and ``/invocations`` (what ``huggingface_hub.InferenceClient(base_url=...)`` and
SageMaker post to) answer by the kind of the model: embed for an embedding model (rerank when the
body holds ``query`` and ``texts``; ``{"source_sentence", "sentences"}`` gets the cosine
similarities, the Inference API's sentence-similarity), predict for a classification or pair
model (rerank for a pair model given ``query``), and, where TEI has no route, the Inference API's
answers: token classification (``[{"entity_group", "score", "word", "start", "end"}]``) for NER,
question answering (``{"answer", "score", "start", "end"}``) for QA and fill-mask for MLM.

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
    >>> token_groups({"entities": [{"type": "PER", "text": "Ann", "start": 0, "end": 3, "score": 0.9}]})
    [{'entity_group': 'PER', 'score': 0.9, 'word': 'Ann', 'start': 0, 'end': 3}]
"""

from __future__ import annotations

import logging
import math
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Body, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError, WithJsonSchema

from ..inputs import describe
from .body import ParsedBodyRoute
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

logger = logging.getLogger(__name__)

router = APIRouter(tags=["text-embeddings-inference-compatible"], route_class=ParsedBodyRoute)

#: The answer header naming the request fields a TEI route ignored.
IGNORED_HEADER = "X-Ignored-Fields"

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


def token_groups(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The Inference API's token-classification answer (``aggregation_strategy="simple"``: one
    group per entity) from an NER record: type, mean tag probability, text and character offsets."""
    return [
        {
            "entity_group": e["type"],
            "score": e["score"],
            "word": e["text"],
            "start": e["start"],
            "end": e["end"],
        }
        for e in record["entities"]
    ]


def qa_answer(record: dict[str, Any]) -> dict[str, Any]:
    """The Inference API's question-answering answer from a QA record; an abstention (SQuAD 2.0)
    is the empty answer at 0, as transformers' pipeline gives it with ``handle_impossible_answer``."""
    if record["no_answer"]:
        return {"answer": "", "score": float(record.get("score") or 0.0), "start": 0, "end": 0}
    return {
        "answer": record["answer"],
        "score": record["score"],
        "start": record["start"],
        "end": record["end"],
    }


def fill_mask_answer(record: dict[str, Any], tokenizer) -> list[Any]:
    """The Inference API's fill-mask answer from an MLM record: for each candidate of the first
    mask its ``score``, ``token`` id, ``token_str`` and the text with it filled in (a text of
    several masks gets one such list per mask, as transformers' pipeline answers)."""
    mask = tokenizer.mask_token
    pieces = record["text"].replace("[MASK]", mask).replace("<mask>", mask).split(mask)
    answers = []
    for i, candidates in enumerate(record["masks"]):
        before, after = mask.join(pieces[: i + 1]), mask.join(pieces[i + 1 :])
        answer = []
        for c in candidates:
            word = tokenizer.convert_tokens_to_string([c["token"]]).strip()
            answer.append(
                {
                    "score": c["score"],
                    "token": int(tokenizer.convert_tokens_to_ids(c["token"])),
                    "token_str": word,
                    "sequence": f"{before}{word}{after}",
                }
            )
        answers.append(answer)
    return answers[0] if len(answers) == 1 else answers


def cosines(query: np.ndarray, others: np.ndarray) -> list[float]:
    """Cosine similarity of ``query`` to each row of ``others`` (the Inference API's sentence similarity).

    Example:
        >>> cosines(np.array([1.0, 0.0]), np.array([[2.0, 0.0], [0.0, 3.0]]))
        [1.0, 0.0]
    """
    q = query / max(np.linalg.norm(query), 1e-12)
    o = others / np.maximum(np.linalg.norm(others, axis=1, keepdims=True), 1e-12)
    return [float(x) for x in o @ q]


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
    # TEI ignores fields it does not know (huggingface_hub's client always sends "parameters"):
    # kept here only to be named in the answer's X-Ignored-Fields header.
    model_config = ConfigDict(extra="allow")
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


class InferenceRequest(_Request):
    """``POST /`` for a model TEI has no route for (NER, QA, MLM): the Inference API's body."""

    inputs: Any = Field(
        description='NER and MLM: a text or a list of texts; QA: {"question", "context"} or a list of them.'
    )


#: (route, ignored fields) already logged: the log says it once, the header on every answer.
_LOGGED_IGNORED: set[tuple[str, tuple[str, ...]]] = set()


def note_ignored(body: BaseModel, request: Request, response: Response) -> None:
    """Name the fields of ``body`` this route ignored in the answer's header; log them once."""
    ignored = tuple(sorted(body.model_extra or ()))
    if not ignored:
        return
    response.headers[IGNORED_HEADER] = ", ".join(ignored)
    key = (request.url.path, ignored)
    if key not in _LOGGED_IGNORED:
        _LOGGED_IGNORED.add(key)
        logger.info(
            "POST %s: ignored the field(s) %s, unknown to this route (as text-embeddings-inference "
            "ignores them); each such answer names them in its %s header",
            request.url.path,
            ", ".join(ignored),
            IGNORED_HEADER,
        )


def _validated(model: type[BaseModel], body: dict[str, Any]):
    """``body`` as ``model``; a bad field is the same 400 FastAPI gives on the route of its own."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in error.errors()], body=body
        ) from None


# ---- routes --------------------------------------------------------------------------------------
def _example(answer: Any) -> dict:
    """A 200 answer example for /docs."""
    return {200: {"content": {"application/json": {"example": answer}}}}


@router.post(
    "/embed",
    summary="text-embeddings-inference: one vector per input",
    responses=_example([[0.0123, -0.0456, 0.0789]]),
)
async def tei_embed(body: EmbedRequest, request: Request, response: Response) -> list[list[float]]:
    """One vector per input, as ``embedding encode`` gives it (``normalize``: at unit length)."""
    note_ignored(body, request, response)
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
async def tei_rerank(body: RerankRequest, request: Request, response: Response) -> list[dict[str, Any]]:
    """``texts`` ranked by relevance to ``query``, highest first: a pair model's score or an
    embedding model's cosine similarity."""
    note_ignored(body, request, response)
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
async def tei_predict(body: TeiPredictRequest, request: Request, response: Response) -> list[Any]:
    """Every label with its score, highest first, per input (a list of those for a batch)."""
    note_ignored(body, request, response)
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


#: What ``POST /`` answers for each kind of model (in /docs and in the error naming the routes).
ROOT_ANSWERS = {
    "embedding": "embed (rerank given query and texts; sentence similarity given source_sentence and sentences)",
    "classification": "predict",
    "pair": "predict (rerank given query and texts)",
    "ner": "token classification",
    "qa": "question answering",
    "mlm": "fill-mask",
}


def _root_model(request: Request, name: Any, route: str):
    """The model ``POST /`` answers for: the one named, or the only one served."""
    served = request.app.state.served
    if name is None and len(served) > 1:
        listing = ", ".join(f"{m.name} ({m.task})" for m in served.values())
        raise ApiError(
            400,
            f"model: {route} answers by the kind of one model and {len(served)} are served ({listing}); "
            "name one in model, or post to a route of its kind (/embed, /predict, /rerank, "
            "/v1/models/NAME/predict)",
            "model",
        )
    return choose_model(request, name, (), route)


def _texts(value: Any) -> tuple[bool, list[str]]:
    """(batch, texts) of a NER or MLM ``inputs``: a text, or a non-empty list of texts."""
    if isinstance(value, str):
        return False, [value]
    return True, check_texts(value, "inputs")


async def _similarity(served, body: dict[str, Any], request: Request) -> list[float]:
    """The Inference API's sentence similarity: ``source_sentence`` against each of ``sentences``."""
    inputs = body["inputs"]
    source = inputs.get("source_sentence")
    if not isinstance(source, str):
        raise ApiError(
            400,
            f"inputs.source_sentence: expected a string, found {describe(source)}",
            "inputs.source_sentence",
        )
    sentences = check_texts(inputs.get("sentences"), "inputs.sentences")
    vectors, _ = await embed(served, [source, *sentences], "inputs", request)
    return cosines(vectors[0], vectors[1:])


async def _inference_answer(served, body: InferenceRequest, request: Request) -> Any:
    """NER, QA and MLM on ``POST /``: the Inference API's answer for the model's kind."""
    if served.task == "qa":
        batch = isinstance(body.inputs, list)
        items = body.inputs if batch else [body.inputs]
        records = parse_named(
            served, items, "inputs", lambda i, key: f"inputs[{i}].{key}" if batch else f"inputs.{key}"
        )
        answers = [qa_answer(r) for r in await served.predict(records, request=request)]
    else:
        batch, texts = _texts(body.inputs)
        records = parse_named(
            served, [{"text": t} for t in texts], "inputs", lambda i, _: f"inputs[{i}]" if batch else "inputs"
        )
        results = await served.predict(records, request=request)
        if served.task == "ner":
            answers = [token_groups(r) for r in results]
        else:
            answers = [fill_mask_answer(r, served.predictor.tokenizer) for r in results]
    return answers if batch else answers[0]


@router.post(
    "/",
    summary="text-embeddings-inference: answered by the model's kind (embed, predict, rerank, ...)",
    description="Embedding model: embed; classification or pair: predict; a body with query and "
    "texts: rerank; NER: token classification; QA: question answering; MLM: fill-mask (the Inference "
    "API's answers). The body of the route it stands for.",
)
@router.post(
    "/invocations",
    summary="As POST /, under SageMaker's path",
)
async def tei_root(request: Request, response: Response, body: Any = Body(...)) -> Any:
    """What ``huggingface_hub.InferenceClient(base_url=server)`` posts to, whatever its task."""
    if not isinstance(body, dict):
        raise ApiError(400, f"request body: expected a JSON object, found {describe(body)}", "request body")
    route = request.url.path
    served = _root_model(request, body.get("model"), route)
    task = served.task
    if task in ("pair", "embedding") and "query" in body:
        return await tei_rerank(_validated(RerankRequest, body), request, response)
    if task == "embedding":
        if isinstance(body.get("inputs"), dict):
            note_ignored(_validated(InferenceRequest, body), request, response)
            return await _similarity(served, body, request)
        return await tei_embed(_validated(EmbedRequest, body), request, response)
    if task in ("classification", "pair"):
        return await tei_predict(_validated(TeiPredictRequest, body), request, response)
    parsed = _validated(InferenceRequest, body)
    note_ignored(parsed, request, response)
    return await _inference_answer(served, parsed, request)


def _model_type(served) -> dict[str, Any]:
    """TEI's ``model_type``: ``embedding`` (with its pooling), ``classifier`` (labels) or
    ``reranker`` (a pair model), and this toolkit's other tasks under their own names."""
    settings = served.predictor.settings if served.predictor is not None else None
    if served.task == "embedding":
        return {"embedding": {"pooling": str(getattr(settings, "pooling", None) or "mean")}}
    if served.task in ("classification", "pair"):
        labels = list(getattr(settings, "label_names", None) or [])
        kind = "reranker" if served.task == "pair" else "classifier"
        return {kind: {"id2label": dict(enumerate(labels)), "label2id": {n: i for i, n in enumerate(labels)}}}
    return {served.task: {}}


@router.get("/info", summary="text-embeddings-inference: the served model, its kind and limits")
async def tei_info(request: Request, model: str | None = None) -> dict[str, Any]:
    """TEI's ``/info`` for the one model served (or the one ``?model=NAME`` names)."""
    from .. import __version__

    served = _root_model(request, model, "/info")
    options = request.app.state.options
    limit = max_tokens(served.predictor) if served.predictor is not None else None
    return {
        "model_id": served.name,
        "model_sha": None,
        "model_dtype": options.precision,
        "model_type": _model_type(served),
        "max_concurrent_requests": None,
        "max_input_length": limit,
        "max_batch_tokens": options.max_batch_tokens,
        "max_batch_requests": None,
        "max_client_batch_size": options.max_inputs_per_request,
        "auto_truncate": False,
        "tokenization_workers": 1,
        "version": __version__,
        "sha": None,
        "docker_label": None,
        "task": served.task,
        "model_dir": served.model_dir,
        "state": served.state,
    }

"""``encoder-tasks embedding predict``: the cosine similarity of the two texts of every row.

A run saved here loads through the shared path (:func:`encoder_tasks.predict.load_for_prediction`:
saved settings fill the flags left unset); any other encoder or sentence-transformers folder
loads as a bi-encoder with its own pooling. Either way ``--precision`` and ``--batch_size``
apply to every forward pass.
"""

from __future__ import annotations

import logging

import numpy as np

from ...data import LINE_COLUMN, resolve_column
from ...data.columns import column_texts
from .args import EmbeddingPredictArguments

logger = logging.getLogger(__name__)


def load_model(args, settings_skip: tuple[str, ...] = (), check: bool = True):
    """``(model, tokenizer)`` for predict, encode and retrieve, on the inference device.

    Example:
        >>> model, tokenizer = load_model(EmbeddingPredictArguments(model_dir="runs/emb",
        ...     input_file="pairs.tsv", output_file="scores.jsonl"))  # doctest: +SKIP
    """
    from ...predict import load_for_prediction
    from .model import load_bi_encoder

    # A saved run, any encoder (mean pooling) or a sentence-transformers folder (its own pooling).
    # Vectors are the encoder's last layer norm, pooled and normalised: with bf16 weights that
    # layer would be rounded (norms off by ~6e-4, near-tied neighbours swapping), so the weights
    # stay fp32 and only the matrix products run in bf16 (autocast).
    return load_for_prediction(
        args, "embedding", settings_skip, load=load_bi_encoder, fp32_weights=True, check=check
    )


def encode_for(args, model, tokenizer, texts) -> np.ndarray:
    """:func:`.model.encode_texts` with the command's batch size, token limit and precision."""
    from .model import encode_texts

    return encode_texts(
        model, tokenizer, texts, args.batch_size, args.max_length, args.precision, args.disable_tqdm or None
    )


def predict_file(args: EmbeddingPredictArguments) -> dict:
    """Write ``{"line", "text", "text_pair", "score"}`` per row (cosine similarity), in input order.

    Example:
        >>> predict_file(EmbeddingPredictArguments(model_dir="runs/emb", input_file="pairs.tsv",
        ...              output_file="scores.jsonl"))  # doctest: +SKIP
    """
    from ...predict import stream_predictions
    from .retrieval import normalize

    args.check()
    chunks = args.read_input_chunks()
    model, tokenizer = load_model(args)  # resolves the columns from the saved settings too

    def predict_chunk(split) -> list[dict]:  # a chunk of rows (read as predict goes)
        first = column_texts(split, resolve_column(split, args.text_column, "text"))
        second = column_texts(split, resolve_column(split, args.text_pair_column, "text_pair"))
        unique = list(dict.fromkeys([*first, *second]))  # a text repeated within the chunk: encoded once
        vectors = normalize(encode_for(args, model, tokenizer, unique))
        index = {t: i for i, t in enumerate(unique)}
        scores = np.sum(vectors[[index[t] for t in first]] * vectors[[index[t] for t in second]], axis=1)
        return [
            {"line": line, "text": a, "text_pair": b, "score": round(float(s), 6)}
            for line, a, b, s in zip(split.dataset[LINE_COLUMN], first, second, scores)
        ]

    count = stream_predictions(args, chunks, predict_chunk, what="similarity scores")
    return {"predictions": count}


def parse_input(record, where: str, settings=None) -> dict:
    """One JSON input: ``{"text"}`` (its vector) or ``{"text", "text_pair"}`` (their cosine similarity);
    ``{"text", "sparse": true}`` (a sparse model: the text's non-zero token ids and weights).

    Example:
        >>> parse_input({"text": "a", "text_pair": "b"}, "inputs[0]")
        {'text': 'a', 'text_pair': 'b'}
    """
    from ...inputs import InputError, check_record, describe, require_text

    check_record(record, where, ("text", "text_pair", "sparse"))
    parsed = {"text": require_text(record, "text", where)}
    if "sparse" in record:
        if not isinstance(record["sparse"], bool):
            raise InputError(f"{where}.sparse", f"expected true or false, found {describe(record['sparse'])}")
        if record["sparse"]:
            if settings is None or settings.get("model_type") != "sparse":
                raise InputError(
                    f"{where}.sparse", "this model is dense; sparse vectors need a --model_type sparse model"
                )
            if "text_pair" in record:
                raise InputError(f"{where}.sparse", "a sparse vector is of one text; drop text_pair")
            parsed["sparse"] = True
    pair = require_text(record, "text_pair", where, required=False)
    if pair is not None:
        parsed["text_pair"] = pair
    return parsed


def predict_inputs(model, tokenizer, inputs: list[dict], args) -> list[dict]:
    """``{"text", "embedding"}`` as ``encode`` writes it for a single text, ``{"text",
    "text_pair", "score"}`` as ``predict`` writes it for a pair; every distinct text encoded once."""
    from .retrieval import normalize

    if any(r.get("sparse") for r in inputs):
        return _with_sparse(model, tokenizer, inputs, args)
    unique = list(dict.fromkeys(t for r in inputs for t in (r["text"], r.get("text_pair")) if t is not None))
    vectors = encode_for(args, model, tokenizer, unique)
    unit = normalize(vectors)
    index = {t: i for i, t in enumerate(unique)}
    values = rounded_rows(vectors) if any("text_pair" not in r for r in inputs) else []
    records = []
    for r in inputs:
        first = index[r["text"]]
        if "text_pair" in r:
            score = float(np.dot(unit[first], unit[index[r["text_pair"]]]))
            records.append({**r, "score": round(score, 6)})
        else:
            records.append({**r, "embedding": values[first]})
    return records


def rounded_rows(vectors: np.ndarray, digits: int = 7) -> list[list[float]]:
    """Each row as a list of floats rounded to ``digits`` decimals, as ``encode`` writes vectors.

    One numpy pass: Python's ``round`` on each value took 0.24 ms a 384-dimension vector, a fifth
    of a served batch's time on the model's thread. numpy rounds ``rint(x * 10**digits) /
    10**digits``, whose quotient of two exact numbers is the double nearest the decimal, as
    ``round`` gives (equal on 768,000 values of MiniLM-sized vectors).

    Example:
        >>> rounded_rows(np.array([[0.123456789, -1.0]], dtype=np.float32))
        [[0.1234568, -1.0]]
    """
    return np.round(np.asarray(vectors, dtype=np.float64), digits).tolist()


def _sparse_records(model, tokenizer, inputs: list[dict], args) -> list[dict]:
    """``{"text", "indices", "values", "tokens"}``: a sparse model's non-zero weights per text."""
    from .sparse import encode_sparse

    texts = [r["text"] for r in inputs]
    vectors = encode_sparse(
        model, tokenizer, texts, args.batch_size, args.max_length, args.precision, args.disable_tqdm or None
    )
    return [
        {"text": r["text"], "indices": ids.tolist(), "values": [round(float(w), 6) for w in ws],
         "tokens": tokenizer.convert_ids_to_tokens(ids.tolist())}
        for r, (ids, ws) in zip(inputs, vectors)
    ]  # fmt: skip


def _with_sparse(model, tokenizer, inputs: list[dict], args) -> list[dict]:
    """A batch holding sparse requests (micro-batching may join them with dense ones): each kind
    answered by its own path, in input order."""
    sparse = [i for i, r in enumerate(inputs) if r.get("sparse")]
    dense = [i for i, r in enumerate(inputs) if not r.get("sparse")]
    out: list = [None] * len(inputs)
    for i, rec in zip(sparse, _sparse_records(model, tokenizer, [inputs[i] for i in sparse], args)):
        out[i] = rec
    if dense:
        for i, rec in zip(dense, predict_inputs(model, tokenizer, [inputs[i] for i in dense], args)):
            out[i] = rec
    return out

"""``encoder-tasks embedding encode`` and ``retrieve``: texts to vectors, queries to nearest texts.

- ``encode``: texts of a file to vectors, written as ``.npy`` (float32 ``[n, dim]``) plus an id
  file ``<name>.ids.json``, or as JSONL (``{"id", "text", "embedding"}`` per line). Texts are
  batched in length order (little padding); output keeps input order. Neither file replaces
  an existing one unless ``--overwrite_output``.
- ``retrieve``: query texts against an encoded corpus; exact top-k by one matrix product
  per block of queries (cosine when the model normalises, else dot product); or in a
  compressed index (``--index int8|binary``, :mod:`.quantized_index`); optionally re-ranked by
  a cross-encoder (``--rerank RUN_DIR --rerank_top_k K``, :mod:`.rerank`).
- ``--dimensions N`` (both): the first N dimensions, re-normalised, of a model trained with
  ``--matryoshka_dims`` (:mod:`.matryoshka`).

Both run like ``predict`` (:mod:`.predict`): the saved settings fill unset flags, and
``--precision`` and ``--batch_size`` apply.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from ...data import LINE_COLUMN, Split, resolve_column
from ...data.columns import column_texts
from ...errors import UserError
from .args import EncodeArguments, RetrieveArguments
from .predict import encode_for, load_model, rounded_rows
from .sparse import is_sparse

logger = logging.getLogger(__name__)

#: Flags of encode/retrieve that are not the training columns of the same name: the corpus
#: and query files have their own text column.
_NOT_SAVED = ("text_column",)


def _cut(args, model, vectors: np.ndarray, warn: bool = True) -> np.ndarray:
    """``--dimensions``: the first N dimensions (re-normalised when the model normalises);
    ``warn``: say so when the model was not trained for that size (once per input, not per chunk)."""
    from .matryoshka import truncate

    if args.dimensions is None or args.dimensions == vectors.shape[1]:
        return vectors
    trained = model.settings.get("matryoshka_dims") if model.settings is not None else None
    if warn and (not trained or args.dimensions not in trained):
        logger.warning(
            "--dimensions %d: the model was trained for %s; a cut it was not trained for loses accuracy",
            args.dimensions,
            f"sizes {trained} (Matryoshka)" if trained else "its full size only",
        )
    return truncate(vectors, args.dimensions, renormalize=model.normalize)


ID_FILE_FLAG = "--output_file's id file"


def ids_path(output_file: str | Path) -> Path:
    """Where the ids of ``vectors.npy`` go: ``vectors.ids.json``.

    Example:
        >>> ids_path("out/vectors.npy").as_posix()
        'out/vectors.ids.json'
    """
    path = Path(output_file)
    return path.with_name(path.stem + ".ids.json")


def _read_texts(args, column_spec: str, id_column: str | None = None):
    split = Split("input", args.input_file, args.read_input())
    texts = column_texts(split, resolve_column(split, column_spec, "text"))
    lines = split.dataset[LINE_COLUMN]
    if id_column:
        ids = [str(v) for v in split.dataset[resolve_column(split, id_column, "id")]]
    else:
        ids = [str(line) if line is not None else str(i) for i, line in enumerate(lines, start=1)]
    return texts, ids, lines


def _chunk_texts(args, split) -> tuple[list[str], list[str]]:
    """Texts and ids of one chunk of ``encode``'s input: ``--id_column``, else the line (the row
    number in the file where there is none)."""
    texts = column_texts(split, resolve_column(split, args.text_column, "text"))
    if args.id_column:
        return texts, [str(v) for v in split.dataset[resolve_column(split, args.id_column, "id")]]
    lines = split.dataset[LINE_COLUMN]
    first = split.first_index + 1
    return texts, [str(line) if line is not None else str(first + i) for i, line in enumerate(lines)]


def encode_file(args: EncodeArguments) -> dict:
    """Encode every text of ``args.input_file``; returns ``{"texts": n, "dimension": d}``.

    The input is read, encoded and written a chunk of rows at a time
    (:func:`encoder_tasks.predict.stream_predictions`): memory stays flat in the input's size,
    for JSON lines and for ``.npy`` (written under a temporary name as it goes, its row count set
    once the last chunk is in).

    Example:
        >>> encode_file(EncodeArguments(model_dir="runs/emb", input_file="corpus.jsonl",
        ...             output_file="corpus.npy"))  # doctest: +SKIP
    """
    from ...data.writers import check_new_file
    from ...predict import stream_predictions

    args.check()
    as_npy = Path(args.output_file).suffix.lower() == ".npy"
    if as_npy:  # before any work: the id file must not replace another run's either
        check_new_file(ids_path(args.output_file), args.overwrite_output, flag=ID_FILE_FLAG)
    chunks = args.read_input_chunks()
    model, tokenizer = load_model(args, settings_skip=_NOT_SAVED)
    if is_sparse(model) or args.sparse:
        return _encode_sparse_file(args, model, tokenizer, chunks)
    if args.queries:
        logger.warning("--queries: a dense model encodes queries and texts alike")
    seen = {"texts": 0, "dimension": None}

    def vectors_of(split) -> tuple[list[str], list[str], np.ndarray]:
        texts, ids = _chunk_texts(args, split)
        vectors = _cut(args, model, encode_for(args, model, tokenizer, texts), warn=seen["dimension"] is None)
        seen["texts"] += len(texts)
        seen["dimension"] = int(vectors.shape[1])
        return texts, ids, vectors

    if as_npy:
        _write_npy(args, (vectors_of(split) for split in chunks), model.normalize)
    else:

        def records(split):
            texts, ids, vectors = vectors_of(split)
            return [
                {"id": i, "text": t, "embedding": v} for i, t, v in zip(ids, texts, rounded_rows(vectors))
            ]

        stream_predictions(args, chunks, records, what=lambda: f"embeddings ({seen['dimension']} dimensions)")
    return {"texts": seen["texts"], "dimension": seen["dimension"]}


def _encode_sparse_file(args, model, tokenizer, chunks) -> dict:
    """``encode`` of a sparse model: JSON lines ``{id, text, indices, values, tokens}``."""
    from ...predict import stream_predictions
    from .sparse import encode_sparse

    if not is_sparse(model):
        raise UserError(f"--sparse: {args.model_dir} is a dense model (train one with --model_type sparse)")
    if Path(args.output_file).suffix.lower() != ".jsonl":
        raise UserError(
            f"--output_file {args.output_file}: a sparse model writes .jsonl (token ids and weights)"
        )
    if args.dimensions is not None:
        raise UserError("--dimensions cuts dense vectors; a sparse model has one weight per vocabulary token")
    counts = {"texts": 0, "nonzeros": 0, "min": None, "max": 0}

    def records(split) -> list[dict]:
        texts, ids = _chunk_texts(args, split)
        vectors = encode_sparse(
            model, tokenizer, texts, args.batch_size, args.max_length, args.precision, args.disable_tqdm or None,
            queries=args.queries,
        )  # fmt: skip
        for indices, _ in vectors:  # sparsity() over the whole input, counted chunk by chunk
            counts["texts"] += 1
            counts["nonzeros"] += len(indices)
            counts["min"] = len(indices) if counts["min"] is None else min(counts["min"], len(indices))
            counts["max"] = max(counts["max"], len(indices))
        return [
            {"id": i, "text": t, "indices": v[0].tolist(), "values": [round(float(x), 6) for x in v[1]],
             "tokens": tokenizer.convert_ids_to_tokens(v[0].tolist())}
            for i, t, v in zip(ids, texts, vectors)
        ]  # fmt: skip

    def stats() -> dict:
        n = counts["texts"]
        return {
            "nonzeros_mean": float(counts["nonzeros"] / n) if n else 0.0,
            "nonzeros_min": int(counts["min"] or 0),
            "nonzeros_max": int(counts["max"]),
        }

    stream_predictions(
        args,
        chunks,
        records,
        what=lambda: f"sparse vectors ({stats()['nonzeros_mean']:.1f} non-zeros per text)",
    )
    return {"texts": counts["texts"], "dimension": int(model.config.vocab_size), **stats()}


def _write_npy(args, chunks, normalized: bool) -> None:
    """``.npy`` vectors (and their id file) from ``(texts, ids, vectors)`` chunks, written as they
    come under a temporary name; the header's row count is set once the last chunk is in."""
    from ...data.writers import check_new_file, write_json

    output, id_file = Path(args.output_file), ids_path(args.output_file)
    # Checked again: a file may have appeared while the model loaded.
    check_new_file(output, args.overwrite_output)
    check_new_file(id_file, args.overwrite_output, flag=ID_FILE_FLAG)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.stem}.tmp.npy")
    ids: list[str] = []
    dimension = None
    try:
        with open(tmp, "wb") as handle:
            handle.write(_npy_header(0, 0))  # a placeholder of the final header's size
            for _, chunk_ids, vectors in chunks:
                dimension = vectors.shape[1]
                handle.write(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
                ids.extend(chunk_ids)
            handle.seek(0)
            handle.write(_npy_header(len(ids), dimension or 0))
        check_new_file(output, args.overwrite_output)
        tmp.replace(output)
    finally:
        tmp.unlink(missing_ok=True)
    write_json(id_file, {"model": str(args.model_dir), "normalized": normalized, "ids": ids})
    logger.info("wrote %d embeddings (%d dimensions) to %s and %s", len(ids), dimension, output, id_file)


#: Bytes of the ``.npy`` header :func:`_write_npy` writes (a multiple of 64, room for any shape).
_NPY_HEADER_BYTES = 128


def _npy_header(rows: int, dimension: int) -> bytes:
    """A ``.npy`` version 1.0 header of float32 ``[rows, dimension]``, padded with spaces to
    :data:`_NPY_HEADER_BYTES` (the format allows it), so it can be written before the row count is
    known and rewritten in place after.

    Example:
        >>> import io
        >>> buffer = io.BytesIO(_npy_header(2, 3) + np.arange(6, dtype="<f4").tobytes())
        >>> np.load(buffer).tolist()
        [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    """
    text = repr({"descr": "<f4", "fortran_order": False, "shape": (rows, dimension)})
    room = _NPY_HEADER_BYTES - 10  # magic (6), version (2), header length (2)
    return b"\x93NUMPY\x01\x00" + room.to_bytes(2, "little") + (text.ljust(room - 1) + "\n").encode("latin1")


def load_corpus(path: str | Path) -> tuple[np.ndarray, list[str], list[str] | None]:
    """Vectors, ids and (for JSONL) texts of an encoded corpus.

    Example:
        >>> vectors, ids, texts = load_corpus("corpus.npy")  # doctest: +SKIP
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--corpus_file {path}: no such file")
    if path.suffix.lower() == ".npy":
        try:
            vectors = np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise UserError(f"{path}: not a .npy array written by `encode` ({exc})") from None
        id_file = ids_path(path)
        if not id_file.is_file():
            raise UserError(f"{path}: its id file {id_file} is missing")
        ids = json.loads(id_file.read_text(encoding="utf-8"))["ids"]
        if len(ids) != len(vectors):
            raise UserError(f"{id_file}: {len(ids)} ids for {len(vectors)} vectors in {path}")
        return np.asarray(vectors, dtype=np.float32), ids, None
    if _is_sparse_file(path):
        raise UserError(f"{path}: holds sparse vectors (indices/values); retrieve them with the sparse model")
    vectors, ids, texts = [], [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            vectors.append(record["embedding"])
            ids.append(str(record.get("id", number)))
            texts.append(record.get("text"))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise UserError(
                f"{path} line {number}: expected a JSON object with an 'embedding' list"
            ) from None
    if not vectors or len({len(v) for v in vectors}) != 1:
        raise UserError(f"{path}: expected embeddings of one dimension on every line")
    return np.asarray(vectors, dtype=np.float32), ids, texts


def _is_sparse_file(path: Path) -> bool:
    if path.suffix.lower() != ".jsonl":
        return False
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                try:
                    return "indices" in json.loads(line)
                except (json.JSONDecodeError, TypeError):
                    return False
    return False


def load_sparse_corpus(path: str | Path, vocab_size: int):
    """The inverted index, ids and texts of a corpus written by ``encode`` with a sparse model.

    Example:
        >>> index, ids, texts = load_sparse_corpus("corpus.jsonl", 30522)  # doctest: +SKIP
    """
    from .sparse import InvertedIndex

    path = Path(path)
    if not path.is_file():
        raise UserError(f"--corpus_file {path}: no such file")
    vectors, ids, texts = [], [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            pair = ([int(i) for i in record["indices"]], [float(v) for v in record["values"]])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise UserError(
                f"{path} line {number}: expected a JSON object with 'indices' and 'values' lists "
                "(encode with a sparse model)"
            ) from None
        if len(pair[0]) != len(pair[1]):
            raise UserError(f"{path} line {number}: {len(pair[0])} indices for {len(pair[1])} values")
        vectors.append(pair)
        ids.append(str(record.get("id", number)))
        texts.append(record.get("text"))
    if not vectors:
        raise UserError(f"{path}: no sparse vectors")
    try:
        index = InvertedIndex.build(vectors, vocab_size)
    except UserError as exc:
        raise UserError(f"{path}: {exc} of the model; encode the corpus with this model") from None
    return index, ids, texts


def _ranking(args, model, tokenizer, corpus_file: str, queries: list[str], depth: int):
    """``(indices, scores, corpus ids, corpus texts)`` of one model over its encoded corpus."""
    from .quantized_index import search
    from .retrieval import normalize

    if is_sparse(model):
        from .sparse import encode_sparse

        index, corpus_ids, corpus_texts = load_sparse_corpus(corpus_file, model.config.vocab_size)
        logger.info("sparse index: %s", index.stats())
        vectors = encode_sparse(
            model, tokenizer, queries, args.batch_size, args.max_length, args.precision,
            args.disable_tqdm or None, queries=True,
        )  # fmt: skip
        indices, scores = index.search(vectors, depth)
        return indices, scores, corpus_ids, corpus_texts
    corpus, corpus_ids, corpus_texts = load_corpus(corpus_file)
    size = args.dimensions or model.config.hidden_size
    if corpus.shape[1] != size:
        hint = (
            f"pass --dimensions {corpus.shape[1]} if it was encoded with --dimensions"
            if corpus.shape[1] < model.config.hidden_size and not args.dimensions
            else "encode the corpus with this model and the same --dimensions"
        )
        raise UserError(
            f"--corpus_file {corpus_file}: vectors have {corpus.shape[1]} dimensions, the model "
            f"{args.model_dir} makes {size}; {hint}"
        )
    vectors = _cut(args, model, encode_for(args, model, tokenizer, queries))
    if model.normalize:  # cosine: the corpus is unit-length too (it may have been edited)
        corpus, vectors = normalize(corpus), normalize(vectors)
    indices, scores = search(args.index, vectors, corpus, depth, args.rescore_multiplier)
    return indices, scores, corpus_ids, corpus_texts


def _hybrid(args, queries, first, first_ids):
    """Fuse this model's ranking with ``--hybrid_model``'s over the same corpus (same ids)."""
    import copy

    from .sparse import reciprocal_rank_fusion, score_fusion

    other_args = copy.copy(args)
    other_args.model_dir = args.hybrid_model
    other, tokenizer = load_model(other_args, settings_skip=_NOT_SAVED)
    indices, scores, ids, _ = _ranking(
        other_args, other, tokenizer, args.hybrid_corpus_file, queries, args.fusion_depth
    )
    if sorted(ids) != sorted(first_ids):
        raise UserError(
            f"--hybrid_corpus_file {args.hybrid_corpus_file}: its ids are not those of --corpus_file "
            f"{args.corpus_file} ({len(ids)} and {len(first_ids)} texts); encode the same corpus with both models"
        )
    position = {i: n for n, i in enumerate(first_ids)}
    mapped = np.array([position[i] for i in ids])
    indices = np.where(indices >= 0, mapped[np.maximum(indices, 0)], -1)
    if args.fusion == "rrf":
        return reciprocal_rank_fusion([first[0], indices], args.top_k)
    return score_fusion([first, (indices, scores)], args.top_k, weights=[1.0, args.fusion_weight])


def retrieve_file(args: RetrieveArguments) -> dict:
    """Top-k corpus results for every query; JSONL ``{"line", "query", "results": [...]}``.

    Example:
        >>> retrieve_file(RetrieveArguments(model_dir="runs/emb", corpus_file="corpus.npy",
        ...             input_file="queries.txt", output_file="hits.jsonl"))  # doctest: +SKIP
    """
    from ...predict import write_predictions

    args.check()
    queries, _, lines = _read_texts(args, args.text_column)
    model, tokenizer = load_model(args, settings_skip=_NOT_SAVED)
    depth = max(args.top_k, args.rerank_top_k) if args.rerank else args.top_k
    if args.hybrid_model:
        depth = args.fusion_depth
    indices, scores, corpus_ids, corpus_texts = _ranking(
        args, model, tokenizer, args.corpus_file, queries, depth
    )
    if args.rerank and (corpus_texts is None or any(t is None for t in corpus_texts)):
        raise UserError(
            f"--rerank needs the corpus texts, and {args.corpus_file} has none: encode the corpus to a "
            ".jsonl file (it keeps each text beside its vector)"
        )
    if args.hybrid_model:
        indices, scores = _hybrid(args, queries, (indices, scores), corpus_ids)
    retrieval_scores = None
    if args.rerank:
        from .rerank import CrossEncoderScorer, rerank

        scorer = CrossEncoderScorer.load(args.rerank, batch_size=args.batch_size, precision=args.precision)
        first = {
            (q, int(i)): float(s) for q, (row, ss) in enumerate(zip(indices, scores)) for i, s in zip(row, ss)
        }
        indices, scores = rerank(scorer, queries, indices, corpus_texts, args.top_k)
        retrieval_scores = first
    records = []
    for q, (line, query, row, row_scores) in enumerate(zip(lines, queries, indices, scores)):
        results = []
        for rank, (i, s) in enumerate(zip(row, row_scores), start=1):
            if i < 0:
                break
            hit = {"rank": rank, "id": corpus_ids[i], "score": round(float(s), 6)}
            if retrieval_scores is not None:
                hit["retrieval_score"] = round(retrieval_scores[(q, int(i))], 6)
            if corpus_texts is not None:
                hit["text"] = corpus_texts[i]
            results.append(hit)
        records.append({"line": line, "query": query, "results": results})
    write_predictions(args, records, what=f"results of {len(queries)} queries in {len(corpus_ids)} texts")
    return {"queries": len(queries), "corpus": len(corpus_ids)}

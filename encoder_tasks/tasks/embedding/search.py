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
from .predict import encode_for, load_model
from .sparse import is_sparse

logger = logging.getLogger(__name__)

#: Flags of encode/retrieve that are not the training columns of the same name: the corpus
#: and query files have their own text column.
_NOT_SAVED = ("text_column",)


def _cut(args, model, vectors: np.ndarray) -> np.ndarray:
    """``--dimensions``: the first N dimensions (re-normalised when the model normalises)."""
    from .matryoshka import truncate

    if args.dimensions is None or args.dimensions == vectors.shape[1]:
        return vectors
    trained = model.settings.get("matryoshka_dims") if model.settings is not None else None
    if not trained or args.dimensions not in trained:
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


def encode_file(args: EncodeArguments) -> dict:
    """Encode every text of ``args.input_file``; returns ``{"texts": n, "dimension": d}``.

    Example:
        >>> encode_file(EncodeArguments(model_dir="runs/emb", input_file="corpus.jsonl",
        ...             output_file="corpus.npy"))  # doctest: +SKIP
    """
    from ...data.writers import check_new_file
    from ...predict import write_predictions

    args.check()
    as_npy = Path(args.output_file).suffix.lower() == ".npy"
    if as_npy:  # before any work: the id file must not replace another run's either
        check_new_file(ids_path(args.output_file), args.overwrite_output, flag=ID_FILE_FLAG)
    texts, ids, _ = _read_texts(args, args.text_column, args.id_column)
    model, tokenizer = load_model(args, settings_skip=_NOT_SAVED)
    if is_sparse(model) or args.sparse:
        return _encode_sparse_file(args, model, tokenizer, texts, ids)
    if args.queries:
        logger.warning("--queries: a dense model encodes queries and texts alike")
    vectors = _cut(args, model, encode_for(args, model, tokenizer, texts))
    if as_npy:
        _write_npy(args, vectors, ids, model.normalize)
    else:
        records = (
            {"id": i, "text": t, "embedding": [round(float(x), 7) for x in v]}
            for i, t, v in zip(ids, texts, vectors)
        )
        write_predictions(args, records, what=f"embeddings ({vectors.shape[1]} dimensions)")
    return {"texts": len(texts), "dimension": int(vectors.shape[1])}


def _encode_sparse_file(args, model, tokenizer, texts, ids) -> dict:
    """``encode`` of a sparse model: JSON lines ``{id, text, indices, values, tokens}``."""
    from ...predict import write_predictions
    from .sparse import encode_sparse, sparsity

    if not is_sparse(model):
        raise UserError(f"--sparse: {args.model_dir} is a dense model (train one with --model_type sparse)")
    if Path(args.output_file).suffix.lower() != ".jsonl":
        raise UserError(
            f"--output_file {args.output_file}: a sparse model writes .jsonl (token ids and weights)"
        )
    if args.dimensions is not None:
        raise UserError("--dimensions cuts dense vectors; a sparse model has one weight per vocabulary token")
    vectors = encode_sparse(
        model, tokenizer, texts, args.batch_size, args.max_length, args.precision, args.disable_tqdm or None,
        queries=args.queries,
    )  # fmt: skip
    records = (
        {"id": i, "text": t, "indices": v[0].tolist(), "values": [round(float(x), 6) for x in v[1]],
         "tokens": tokenizer.convert_ids_to_tokens(v[0].tolist())}
        for i, t, v in zip(ids, texts, vectors)
    )  # fmt: skip
    stats = sparsity(vectors)
    write_predictions(args, records, what=f"sparse vectors ({stats['nonzeros_mean']:.1f} non-zeros per text)")
    return {"texts": len(texts), "dimension": int(model.config.vocab_size), **stats}


def _write_npy(args, vectors: np.ndarray, ids: list[str], normalized: bool) -> None:
    from ...data.writers import check_new_file, write_json

    output, id_file = Path(args.output_file), ids_path(args.output_file)
    # Checked again: a file may have appeared while the model ran.
    check_new_file(output, args.overwrite_output)
    check_new_file(id_file, args.overwrite_output, flag=ID_FILE_FLAG)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.stem}.tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(output)
    write_json(id_file, {"model": str(args.model_dir), "normalized": normalized, "ids": ids})
    logger.info(
        "wrote %d embeddings (%d dimensions) to %s and %s", len(ids), vectors.shape[1], output, id_file
    )


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

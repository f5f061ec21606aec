"""``encoder-tasks embedding encode`` and ``retrieve``: texts to vectors, queries to nearest texts.

- ``encode``: texts of a file to vectors, written as ``.npy`` (float32 ``[n, dim]``) plus an id
  file ``<name>.ids.json``, or as JSONL (``{"id", "text", "embedding"}`` per line). Texts are
  batched in length order (little padding); output keeps input order.
- ``retrieve``: query texts against an encoded corpus; exact top-k by one matrix product
  per block of queries (cosine when the model normalises, else dot product).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import PredictArguments
from ..data.loading import Split
from ..errors import UserError

OUTPUT_SUFFIXES = (".npy", ".jsonl")


def ids_path(output_file: str | Path) -> Path:
    """Where the ids of ``vectors.npy`` go: ``vectors.ids.json``."""
    path = Path(output_file)
    return path.with_name(path.stem + ".ids.json")


@dataclass
class EncodeArguments(PredictArguments):
    """Encode the texts of ``input_file`` to ``output_file`` (.npy + ids file, or .jsonl)."""

    text_column: str = field(default="text", metadata={"help": "Column with the text ('|' alternatives)."})
    id_column: str | None = field(
        default=None, metadata={"help": "Column with an id per text (default: the line number)."}
    )

    def check(self) -> None:
        super().check()
        if Path(self.output_file).suffix.lower() not in OUTPUT_SUFFIXES:
            raise UserError(f"--output_file {self.output_file}: expected a .npy or .jsonl file")


@dataclass
class RetrieveArguments(PredictArguments):
    """Find the ``top_k`` nearest corpus texts for every query text of ``input_file``."""

    corpus_file: str = field(
        default=None, metadata={"help": "Vectors written by `encode` (.npy with its .ids.json, or .jsonl)."}
    )
    text_column: str = field(default="text", metadata={"help": "Column with the query text."})
    top_k: int = field(default=10, metadata={"help": "Results per query."})

    def check(self) -> None:
        super().check()
        if not self.corpus_file:
            raise UserError("retrieve: --corpus_file is required (vectors written by `encode`)")
        if self.top_k < 1:
            raise UserError(f"--top_k must be at least 1, found {self.top_k}")


def _read_texts(args, column_spec: str, id_column: str | None = None):
    from ..data import read_file
    from .classification import _texts, resolve_column

    column_names = [c.strip() for c in args.column_names.split(",")] if args.column_names else None
    split = Split(
        "input", args.input_file, read_file(args.input_file, args.delimiter, column_names, args.encoding)
    )
    texts = _texts(split, resolve_column(split, column_spec, "text"))
    lines = split.dataset["_line"]
    if id_column:
        ids = [str(v) for v in split.dataset[resolve_column(split, id_column, "id")]]
    else:
        ids = [str(line) if line is not None else str(i) for i, line in enumerate(lines, start=1)]
    return texts, ids, lines


def _model(model_dir: str):
    import torch

    from ..backbone import load_tokenizer, resolve_model_path
    from .embedding import load_bi_encoder

    model = load_bi_encoder(model_dir)
    if torch.cuda.is_available():
        model.cuda()
    return model, load_tokenizer(resolve_model_path(model_dir))


def encode_file(args: EncodeArguments) -> dict:
    """Encode every text of ``args.input_file``; returns ``{"texts": n, "dimension": d}``.

    Example:
        >>> encode_file(EncodeArguments(model_dir="runs/emb", input_file="corpus.jsonl",
        ...             output_file="corpus.npy"))  # doctest: +SKIP
    """
    from ..run import write_json, write_jsonl
    from .embedding import encode_texts

    args.check()
    texts, ids, _ = _read_texts(args, args.text_column, args.id_column)
    model, tokenizer = _model(args.model_dir)
    vectors = encode_texts(model, tokenizer, texts, args.batch_size, args.max_length)
    output = Path(args.output_file)
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.suffix.lower() == ".npy":
        tmp = output.with_name(f".{output.stem}.tmp.npy")
        np.save(tmp, vectors)
        tmp.replace(output)
        write_json(
            ids_path(output), {"model": str(args.model_dir), "normalized": model.normalize, "ids": ids}
        )
        where = f"{output} and {ids_path(output)}"
    else:
        write_jsonl(
            output,
            [
                {"id": i, "text": t, "embedding": [round(float(x), 7) for x in v]}
                for i, t, v in zip(ids, texts, vectors)
            ],
        )
        where = str(output)
    print(f"[encoder-tasks] encoded {len(texts)} texts ({vectors.shape[1]} dimensions) to {where}")
    return {"texts": len(texts), "dimension": int(vectors.shape[1])}


def load_corpus(path: str | Path) -> tuple[np.ndarray, list[str], list[str] | None]:
    """Vectors, ids and (for JSONL) texts of an encoded corpus."""
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


def retrieve_file(args: RetrieveArguments) -> dict:
    """Top-k corpus results for every query; JSONL ``{"line", "query", "results": [...]}``.

    Example:
        >>> retrieve_file(RetrieveArguments(model_dir="runs/emb", corpus_file="corpus.npy",
        ...             input_file="queries.txt", output_file="hits.jsonl"))  # doctest: +SKIP
    """
    from ..retrieval import exact_search, normalize
    from ..run import write_jsonl
    from .embedding import encode_texts

    args.check()
    corpus, corpus_ids, corpus_texts = load_corpus(args.corpus_file)
    queries, _, lines = _read_texts(args, args.text_column)
    model, tokenizer = _model(args.model_dir)
    if corpus.shape[1] != model.config.hidden_size:
        raise UserError(
            f"--corpus_file {args.corpus_file}: vectors have {corpus.shape[1]} dimensions, the model "
            f"{args.model_dir} makes {model.config.hidden_size}; encode the corpus with this model"
        )
    vectors = encode_texts(model, tokenizer, queries, args.batch_size, args.max_length)
    if model.normalize:  # cosine: the corpus is unit-length too (it may have been edited)
        corpus, vectors = normalize(corpus), normalize(vectors)
    indices, scores = exact_search(vectors, corpus, args.top_k)
    records = []
    for line, query, row, row_scores in zip(lines, queries, indices, scores):
        results = []
        for rank, (i, s) in enumerate(zip(row, row_scores), start=1):
            if i < 0:
                break
            hit = {"rank": rank, "id": corpus_ids[i], "score": round(float(s), 6)}
            if corpus_texts is not None:
                hit["text"] = corpus_texts[i]
            results.append(hit)
        records.append({"line": line, "query": query, "results": results})
    write_jsonl(args.output_file, records)
    print(f"[encoder-tasks] searched {len(queries)} queries in {len(corpus)} texts; wrote {args.output_file}")
    return {"queries": len(queries), "corpus": len(corpus)}

"""``encoder-tasks embedding mine``: hard negatives for (query, positive) pairs.

In-batch negatives are mostly easy (random passages); a retriever learns the fine distinctions
from *hard* negatives: passages the current model ranks high that are not the answer. Mining:

1. candidates per query: the corpus ranked by the model's cosine (``--candidates model``), by
   BM25 (``bm25``, through the ``bm25s`` package, on the model tokenizer's tokens so any
   language works) or both interleaved; the query's own positives (every row of that query)
   and the query text itself are never candidates;
2. the rank range ``[--range_min, --range_max)`` of each list: skipping the very top avoids
   the likeliest false negatives (unlabelled passages that answer the query too);
3. guards against false negatives, on the model's cosine or, with ``--cross_encoder``, on a
   pair model's relevance: keep a candidate only if ``score <= positive's score - margin``
   and ``score <= max_score_ratio x positive's score``;
4. ``--num_negatives`` of the kept ones, the best (``top``) or a seeded sample (``random``).

Output (JSON lines): ``{"query", "positive", "negative_1", ..., "negative_N"}`` rows (rows that
found fewer than N negatives are dropped and counted), which
``embedding train --negative_columns negative_1,...,negative_N`` reads; or ``labeled-pair``
rows ``{"text1", "text2", "label"}`` (1 for the positive, 0 per negative) for ``pair train``,
the reranker.

Example:
    >>> select_negatives([5, 6, 7, 8], np.array([0.9, 0.7, 0.5, 0.1]), positive_score=0.8,
    ...                  num_negatives=2, margin=0.2)
    [7, 8]
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

import numpy as np

from ...data import Split, resolve_column
from ...data.columns import column_texts
from ...errors import UserError
from .args import MineArguments

logger = logging.getLogger(__name__)


def ranked_candidates(scores: np.ndarray, banned: set[int], range_min: int, range_max: int) -> list[int]:
    """Corpus rows by descending score (ties: lower row first), ``banned`` rows left out, ranks
    ``[range_min, range_max)`` of what remains."""
    order = np.argsort(-scores, kind="stable")
    out: list[int] = []
    for row in order[: range_max + len(banned)]:
        if int(row) not in banned:
            out.append(int(row))
        if len(out) == range_max:
            break
    return out[range_min:]


def interleave(*lists: Sequence[int]) -> list[int]:
    """``[a1, b1, a2, b2, ...]`` without repeats (the first occurrence wins).

    Example:
        >>> interleave([1, 2, 3], [2, 4])
        [1, 2, 4, 3]
    """
    seen, out = set(), []
    for i in range(max((len(x) for x in lists), default=0)):
        for x in lists:
            if i < len(x) and x[i] not in seen:
                seen.add(x[i])
                out.append(x[i])
    return out


def select_negatives(
    candidates: Sequence[int],
    candidate_scores: np.ndarray,
    positive_score: float,
    num_negatives: int,
    margin: float | None = None,
    max_score_ratio: float | None = None,
    sampling: str = "top",
    rng: random.Random | None = None,
) -> list[int]:
    """The negatives among ``candidates`` (best first) that pass the guards: at most
    ``num_negatives``, the first ones (``top``) or a sample kept in rank order (``random``)."""
    kept = [
        c
        for c, s in zip(candidates, candidate_scores)
        if (margin is None or s <= positive_score - margin)
        and (max_score_ratio is None or s <= max_score_ratio * positive_score)
    ]
    if sampling == "random" and len(kept) > num_negatives:
        picked = set((rng or random.Random(0)).sample(range(len(kept)), num_negatives))
        return [c for i, c in enumerate(kept) if i in picked]
    return kept[:num_negatives]


def bm25_rankings(tokenizer, queries: list[str], corpus: list[str], depth: int) -> list[list[int]]:
    """The ``depth`` best corpus rows per query by BM25 over the tokenizer's tokens."""
    try:
        import bm25s
    except ImportError:
        raise UserError(
            "--candidates bm25/both needs the bm25s package: pip install 'encoder-tasks[retrieval]'"
        ) from None
    retriever = bm25s.BM25()
    retriever.index([tokenizer.tokenize(t) or ["[empty]"] for t in corpus], show_progress=False)
    k = min(depth, len(corpus))
    tokens = [tokenizer.tokenize(q) or ["[empty]"] for q in queries]
    found = retriever.retrieve(tokens, k=k, show_progress=False)
    return [
        [int(d) for d, s in zip(docs, scores) if s > 0] for docs, scores in zip(found.documents, found.scores)
    ]


def _read_corpus(args: MineArguments, positives: list[str]) -> list[str]:
    if not args.corpus_file:
        return list(dict.fromkeys(positives))
    from ...data import read_file

    split = Split(
        "corpus", args.corpus_file, read_file(args.corpus_file, args.delimiter, None, args.encoding)
    )
    texts = column_texts(split, resolve_column(split, args.corpus_column, "text", flag="--corpus_column"))
    # Positives are candidates' texts too: a positive missing from the corpus is added, so
    # guards and ranks see it (and it is never mined as a negative of its own query).
    return list(dict.fromkeys([*texts, *positives]))


def mine_file(args: MineArguments) -> dict:
    """Mine negatives for every row of ``args.input_file``; returns counts.

    Example:
        >>> mine_file(MineArguments(model_dir="runs/emb", input_file="train.jsonl",
        ...           output_file="mined.jsonl", range_min=5, max_score_ratio=0.95))  # doctest: +SKIP
        {'rows': 1000, 'written': 987, 'dropped': 13, 'corpus': 1000}
    """
    from ...predict import write_predictions
    from .predict import encode_for, load_model
    from .retrieval import normalize

    args.check()
    split = Split("input", args.input_file, args.read_input())
    queries = column_texts(split, resolve_column(split, args.text_column, "text"))
    positives = column_texts(split, resolve_column(split, args.text_pair_column, "text_pair"))
    corpus = _read_corpus(args, positives)
    row_of = {t: i for i, t in enumerate(corpus)}
    model, tokenizer = load_model(args, settings_skip=("text_column", "text_pair_column"))
    distinct_queries = list(dict.fromkeys(queries))
    q_index = {q: i for i, q in enumerate(distinct_queries)}
    q_vectors = normalize(encode_for(args, model, tokenizer, distinct_queries))
    c_vectors = normalize(encode_for(args, model, tokenizer, corpus))
    banned: dict[str, set[int]] = {}
    for q, p in zip(queries, positives):
        banned.setdefault(q, set()).add(row_of[p])
        if q in row_of:
            banned[q].add(row_of[q])
    bm25 = None
    if args.candidates in ("bm25", "both"):
        bm25 = bm25_rankings(tokenizer, distinct_queries, corpus, args.range_max + 64)
    scorer = None
    if args.cross_encoder:
        from .rerank import CrossEncoderScorer

        scorer = CrossEncoderScorer.load(args.cross_encoder, batch_size=args.batch_size)

    from ...reporting.tracking import progress

    candidate_lists = []
    for q in progress(distinct_queries, desc="mining", total=len(distinct_queries), unit="query"):
        lists = []
        sims = c_vectors @ q_vectors[q_index[q]]
        if args.candidates in ("model", "both"):
            lists.append(ranked_candidates(sims, banned[q], args.range_min, args.range_max))
        if bm25 is not None:
            order = np.full(len(corpus), -np.inf, dtype=np.float32)
            ranked = bm25[q_index[q]]
            order[ranked] = -np.arange(len(ranked), dtype=np.float32)  # BM25 rank as a score
            lists.append(ranked_candidates(order, banned[q], args.range_min, args.range_max))
            lists[-1] = [c for c in lists[-1] if np.isfinite(order[c])]
        candidate_lists.append(interleave(*lists))

    # Guard scores: the model's cosine, or the cross-encoder's relevance of every pair needed.
    if scorer is None:

        def guard(q: str, rows: Sequence[int]) -> np.ndarray:
            return c_vectors[list(rows)] @ q_vectors[q_index[q]] if rows else np.zeros(0)
    else:
        needed = {(q, c) for q, cands in zip(distinct_queries, candidate_lists) for c in cands}
        needed |= {(q, row_of[p]) for q, p in zip(queries, positives)}
        needed_list = sorted(needed, key=lambda qc: (q_index[qc[0]], qc[1]))
        relevance = scorer.scores([(q, corpus[c]) for q, c in needed_list])
        table = dict(zip(needed_list, relevance))

        def guard(q: str, rows: Sequence[int]) -> np.ndarray:
            return np.array([table[(q, c)] for c in rows], dtype=np.float64)

    rng = random.Random(args.seed)
    records, dropped = [], 0
    for q, p in zip(queries, positives):
        cands = candidate_lists[q_index[q]]
        positive_score = float(guard(q, [row_of[p]])[0])
        negatives = select_negatives(
            cands, guard(q, cands), positive_score, args.num_negatives, args.margin,
            args.max_score_ratio, args.sampling, rng,
        )  # fmt: skip
        if args.output_format == "labeled-pair":
            records.append({"text1": q, "text2": p, "label": 1})
            records.extend({"text1": q, "text2": corpus[n], "label": 0} for n in negatives)
        elif len(negatives) < args.num_negatives:
            dropped += 1
        else:
            row = {"query": q, "positive": p}
            row.update({f"negative_{i}": corpus[n] for i, n in enumerate(negatives, start=1)})
            records.append(row)
    if dropped:
        logger.warning(
            "%d of %d rows found fewer than %d negatives within ranks %d-%d and the guards; dropped",
            dropped, len(queries), args.num_negatives, args.range_min, args.range_max,
        )  # fmt: skip
    if not records:
        raise UserError(
            f"mine: no row kept (each needs {args.num_negatives} negatives): widen --range_max, loosen "
            "--margin/--max_score_ratio or lower --num_negatives"
        )
    write_predictions(args, records, what=f"rows with mined negatives ({args.output_format})")
    return {"rows": len(queries), "written": len(records), "dropped": dropped, "corpus": len(corpus)}

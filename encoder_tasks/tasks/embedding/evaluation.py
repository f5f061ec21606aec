"""Evaluation of bi-encoders: STS (correlation of cosine with scores) and retrieval.

Retrieval needs no separate corpus file: the pairs of the evaluation file are the queries and
their relevant texts, and every distinct text of the file is the corpus (see
:func:`retrieval_corpus`).
"""

from __future__ import annotations

import numpy as np

from ...errors import UserError
from .args import EmbeddingSettings
from .model import encode_texts
from .retrieval import exact_search, normalize, retrieval_metrics


def sts_metrics(model, tokenizer, anchors, positives, scores, batch_size=64, details=None) -> dict:
    """Pearson and Spearman of the cosine similarity of each pair against its score; ``details``
    (a dict) receives the cosine of every pair under ``"pairs"`` (:func:`evaluation_records`)."""
    from ...metrics import regression_metrics

    unique = list(dict.fromkeys([*anchors, *positives]))
    vectors = encode_texts(model, tokenizer, unique, batch_size)
    index = {t: i for i, t in enumerate(unique)}
    a = vectors[[index[t] for t in anchors]]
    b = vectors[[index[t] for t in positives]]
    cos = np.sum(normalize(a) * normalize(b), axis=1)
    if details is not None:
        details["pairs"] = {
            "anchor": list(anchors),
            "positive": list(positives),
            "score": scores,
            "cosine": cos,
        }
    m = regression_metrics(cos, scores)
    return {"cosine_pearson": m["pearson"], "cosine_spearman": m["spearman"]}


def retrieval_corpus(anchors, positives, scores=None, min_score=None):
    """Queries, corpus and relevance from pairs.

    Every pair with ``score >= min_score`` (all pairs when unscored) makes its first text a
    query and its second text relevant to it. The corpus is every distinct text of the file
    (both columns, all pairs, so the rest are distractors); a query never retrieves itself.
    """
    corpus = list(dict.fromkeys([*anchors, *positives]))
    index = {t: i for i, t in enumerate(corpus)}
    relevant: dict[str, set[int]] = {}
    for i, (a, p) in enumerate(zip(anchors, positives)):
        if scores is not None and min_score is not None and scores[i] < min_score:
            continue
        if a != p:
            relevant.setdefault(a, set()).add(index[p])
    queries = list(relevant)
    return queries, corpus, [relevant[q] for q in queries], [{index[q]} for q in queries]


def retrieval_scores(
    model,
    tokenizer,
    anchors,
    positives,
    scores=None,
    min_score=None,
    ks=(1, 5, 10),
    batch_size=64,
    matryoshka_dims=None,
    details=None,
) -> dict:
    """Retrieval metrics over the pairs (:func:`retrieval_corpus`); for a Matryoshka model also
    at each smaller size, as ``<metric>_dim<N>`` (vectors cut to N dimensions, re-normalised).
    ``details`` (a dict) receives every query's ranking at full size under ``"queries"``."""
    from .matryoshka import truncate

    queries, corpus, relevant, exclude = retrieval_corpus(anchors, positives, scores, min_score)
    if not queries:
        raise UserError("retrieval evaluation: no query has a relevant text (check --positive_min_score)")
    full = encode_texts(model, tokenizer, corpus, batch_size)
    position = {t: i for i, t in enumerate(corpus)}
    rows = [position[q] for q in queries]
    metrics: dict = {}
    for dims in [None, *[d for d in matryoshka_dims or () if d < full.shape[1]]]:
        corpus_vectors = truncate(full, dims) if dims else normalize(full)
        ranked, found = exact_search(corpus_vectors[rows], corpus_vectors, max([*ks, 10]), exclude)
        if details is not None and dims is None:
            details["queries"] = {
                "query": queries,
                "corpus": corpus,
                "relevant": relevant,
                "ranked": ranked,
                "scores": found,
                "ks": tuple(ks),
            }
        suffix = f"_dim{dims}" if dims else ""
        metrics.update({f"{k}{suffix}": v for k, v in retrieval_metrics(ranked, relevant, ks).items()})
    metrics.update({"queries": len(queries), "corpus_size": len(corpus)})
    return metrics


def evaluate_embeddings(
    model, tokenizer, dataset, settings: EmbeddingSettings, batch_size: int = 64, details: dict | None = None
) -> dict:
    """STS and/or retrieval metrics of ``model`` on an evaluation dataset from :func:`.data.prepare`
    (``settings``: the prepared settings, which name the evaluation mode and cut-offs); ``details``
    (a dict) receives what each pair and query got, for :func:`evaluation_records`.

    Example:
        >>> evaluate_embeddings(model, tokenizer, prepared.eval, prepared.settings)  # doctest: +SKIP
        {'cosine_pearson': 0.83, 'cosine_spearman': 0.82}
    """
    mode = settings.evaluation_mode or "sts"
    anchors, positives = dataset["anchor"], dataset["positive"]
    scores = dataset["score"] if "score" in dataset.column_names else None
    out: dict[str, float] = {}
    if mode in ("sts", "both"):
        out.update(sts_metrics(model, tokenizer, anchors, positives, scores, batch_size, details))
    if mode in ("retrieval", "both"):
        out.update(
            retrieval_scores(
                model,
                tokenizer,
                anchors,
                positives,
                scores,
                settings.positive_min_score,
                settings.ks,
                batch_size,
                settings.get("matryoshka_dims"),
                details,
            )
        )
    return out


def evaluation_records(details: dict) -> list[dict]:
    """``evaluate --write_predictions``: what :func:`evaluate_embeddings` saw, example by example.

    - STS, one record per pair (``"kind": "pair"``): the two texts, the gold score, the predicted
      cosine, and both ranks among the file's pairs (1 = most similar; ties share their mean rank,
      as Spearman ranks them) with ``rank_error`` = predicted - gold rank. STS is scored by
      correlation, so a pair is not right or wrong on its own: no ``correct`` field.
    - Retrieval, one record per query (``"kind": "query"``): the query, its relevant texts, the
      texts retrieved (best first, with their cosine, as many as the metrics look at), the rank of
      the first relevant one (null: not among them) and ``correct``: the top hit is relevant
      (what ``recall@1`` counts when a query has one relevant text).

    Example:
        >>> details = {"pairs": {"anchor": ["a", "b"], "positive": ["c", "d"], "score": [1.0, 0.0],
        ...                      "cosine": np.array([0.2, 0.9])}}
        >>> [(r["gold_rank"], r["predicted_rank"]) for r in evaluation_records(details)]
        [(1.0, 2.0), (2.0, 1.0)]
    """
    from scipy.stats import rankdata

    records: list[dict] = []
    pairs = details.get("pairs")
    if pairs is not None:
        cosine = np.asarray(pairs["cosine"], dtype=np.float64)
        gold = np.asarray(pairs["score"], dtype=np.float64) if pairs["score"] is not None else None
        predicted_rank = rankdata(-cosine, method="average")
        gold_rank = rankdata(-gold, method="average") if gold is not None else None
        for i, (anchor, positive) in enumerate(zip(pairs["anchor"], pairs["positive"])):
            record = {"kind": "pair", "anchor": anchor, "positive": positive}
            if gold is not None:
                record["gold"] = float(gold[i])
            record["prediction"] = round(float(cosine[i]), 6)
            if gold_rank is not None:
                record["gold_rank"] = float(gold_rank[i])
                record["predicted_rank"] = float(predicted_rank[i])
                record["rank_error"] = float(predicted_rank[i] - gold_rank[i])
            records.append(record)
    queries = details.get("queries")
    if queries is not None:
        corpus = queries["corpus"]
        depth = max([*queries["ks"], 10])
        for query, relevant, ranked, found in zip(
            queries["query"], queries["relevant"], queries["ranked"], queries["scores"]
        ):
            hits = [(int(d), float(c)) for d, c in zip(ranked[:depth], found[:depth]) if d >= 0]
            first = next((rank for rank, (d, _) in enumerate(hits, start=1) if d in relevant), None)
            records.append(
                {
                    "kind": "query",
                    "query": query,
                    "relevant": [corpus[d] for d in sorted(relevant)],
                    "retrieved": [{"text": corpus[d], "score": round(c, 6)} for d, c in hits],
                    "first_relevant_rank": first,
                    "correct": first == 1,
                }
            )
    return records

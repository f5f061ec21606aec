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


def sts_metrics(model, tokenizer, anchors, positives, scores, batch_size=64) -> dict:
    """Pearson and Spearman of the cosine similarity of each pair against its score."""
    from ...metrics import regression_metrics

    unique = list(dict.fromkeys([*anchors, *positives]))
    vectors = encode_texts(model, tokenizer, unique, batch_size)
    index = {t: i for i, t in enumerate(unique)}
    a = vectors[[index[t] for t in anchors]]
    b = vectors[[index[t] for t in positives]]
    cos = np.sum(normalize(a) * normalize(b), axis=1)
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
) -> dict:
    """Retrieval metrics over the pairs (:func:`retrieval_corpus`); for a Matryoshka model also
    at each smaller size, as ``<metric>_dim<N>`` (vectors cut to N dimensions, re-normalised)."""
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
        ranked, _ = exact_search(corpus_vectors[rows], corpus_vectors, max([*ks, 10]), exclude)
        suffix = f"_dim{dims}" if dims else ""
        metrics.update({f"{k}{suffix}": v for k, v in retrieval_metrics(ranked, relevant, ks).items()})
    metrics.update({"queries": len(queries), "corpus_size": len(corpus)})
    return metrics


def evaluate_embeddings(model, tokenizer, dataset, settings: EmbeddingSettings, batch_size: int = 64) -> dict:
    """STS and/or retrieval metrics of ``model`` on an evaluation dataset from :func:`.data.prepare`
    (``settings``: the prepared settings, which name the evaluation mode and cut-offs).

    Example:
        >>> evaluate_embeddings(model, tokenizer, prepared.eval, prepared.settings)  # doctest: +SKIP
        {'cosine_pearson': 0.83, 'cosine_spearman': 0.82}
    """
    mode = settings.evaluation_mode or "sts"
    anchors, positives = dataset["anchor"], dataset["positive"]
    scores = dataset["score"] if "score" in dataset.column_names else None
    out: dict[str, float] = {}
    if mode in ("sts", "both"):
        out.update(sts_metrics(model, tokenizer, anchors, positives, scores, batch_size))
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
            )
        )
    return out

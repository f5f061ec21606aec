"""Back from token scores to answers: the best spans of one question over all its windows.

- :func:`best_spans`: the exact n-best span search in one window (every valid start/end pair);
- :func:`postprocess_example`: one question's answer from all its windows, as text and
  character offsets, with the v2.0 "no answer" decision by a null-score threshold.

Example:
    >>> import numpy as np
    >>> window = (np.array([0.0, 5.0, 1.0]), np.array([0.0, 1.0, 4.0]), [None, (0, 4), (5, 10)], 0)
    >>> postprocess_example("john smith", [window])["answer"]
    'john smith'
"""

from __future__ import annotations

import math

import numpy as np

NO_ANSWER = ""


def best_spans(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    offsets: list[tuple[int, int] | None],
    max_answer_length: int,
    n_best: int,
) -> list[tuple[float, int, int]]:
    """The ``n_best`` highest ``(start + end score, start, end)`` over all valid spans, best first.

    Valid: both ends are context tokens, end >= start, at most ``max_answer_length`` tokens.
    The search is exact (every valid pair is scored), unlike taking the top-n starts and
    ends first, which can miss the best valid pair.

    Example:
        >>> best_spans(np.array([0., 5., 1.]), np.array([0., 1., 4.]), [None, (0, 2), (3, 5)], 30, 2)
        [(9.0, 1, 2), (6.0, 1, 1)]
    """
    context = np.array([t for t, offset in enumerate(offsets) if offset is not None], dtype=np.int64)
    if context.size == 0:
        return []
    starts = np.asarray(start_logits, dtype=np.float64)[context]
    ends = np.asarray(end_logits, dtype=np.float64)[context]
    scores = starts[:, None] + ends[None, :]
    length = context[None, :] - context[:, None] + 1
    valid = (length >= 1) & (length <= max_answer_length)
    scores = np.where(valid, scores, -np.inf)
    flat = scores.ravel()
    k = min(n_best, int(valid.sum()))
    if k == 0:
        return []
    top = np.argpartition(-flat, k - 1)[:k]
    top = top[np.argsort(-flat[top], kind="stable")]
    n = len(context)
    return [(float(flat[i]), int(context[i // n]), int(context[i % n])) for i in top]


def postprocess_example(
    context: str,
    window_logits: list[tuple[np.ndarray, np.ndarray, list, int]],
    max_answer_length: int = 30,
    n_best: int = 20,
    version_2_with_negative: bool = False,
    null_threshold: float = 0.0,
) -> dict:
    """Best answer of one question from all its windows.

    ``window_logits``: ``(start_logits, end_logits, offsets, null_index)`` per window. The
    null score is the smallest start+end score at the null position over the windows (the
    window most sure there is an answer speaks for the question, as in the BERT reference).
    Returns ``answer`` (``""`` for no answer), ``start``/``end`` character offsets, ``score``
    (start + end logit), ``null_score_diff`` (null score - best span score; > threshold means
    no answer) and the ``n_best`` candidates with their probabilities.
    """
    candidates = []
    null_score = math.inf
    for start_logits, end_logits, offsets, null_index in window_logits:
        null_score = min(null_score, float(start_logits[null_index]) + float(end_logits[null_index]))
        for score, s, e in best_spans(start_logits, end_logits, offsets, max_answer_length, n_best):
            candidates.append((score, offsets[s][0], offsets[e][1]))
    candidates.sort(key=lambda c: -c[0])
    # The same character span reached from two windows is one candidate (its best score).
    unique, seen = [], set()
    for score, start, end in candidates:
        if (start, end) not in seen:
            seen.add((start, end))
            unique.append((score, start, end))
        if len(unique) == n_best:
            break
    scores = np.array([c[0] for c in unique] + ([null_score] if version_2_with_negative else []))
    probabilities = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum() if len(scores) else []
    n_best_list = [
        {"text": context[s:e], "start": s, "end": e, "score": sc, "probability": float(p)}
        for (sc, s, e), p in zip(unique, probabilities)
    ]
    if unique:
        best_score, start, end = unique[0]
        result = {"answer": context[start:end], "start": start, "end": end, "score": best_score}
    else:
        result = {"answer": NO_ANSWER, "start": None, "end": None, "score": None}
    result["best_span"] = result["answer"]
    if version_2_with_negative:
        diff = null_score - result["score"] if unique else math.inf
        result["null_score_diff"] = diff
        if diff > null_threshold:
            result.update(answer=NO_ANSWER, start=None, end=None, score=null_score)
    result["no_answer"] = result["answer"] == NO_ANSWER
    result["n_best"] = n_best_list
    return result

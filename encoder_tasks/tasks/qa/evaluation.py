"""The official SQuAD v1.1 / v2.0 and CMRC 2018 scores, re-implemented faithfully.

Nothing here downloads a metric script: the functions follow the official evaluation
scripts line by line (``evaluate-v1.1.py``, ``evaluate-v2.0.py`` from the SQuAD explorer and
``cmrc2018_evaluate.py`` v5), with their quirks kept:

- v1.1: exact match and F1 of the normalised answer (lowercase, punctuation removed,
  articles a/an/the removed, whitespace collapsed), the maximum over the gold answers;
  an empty prediction scores 0.
- v2.0: a question is answerable (HasAns) when it has any gold answer, before
  normalisation (the official ``make_qid_to_has_ans``: ``bool(qa['answers'])``); for the
  exact/F1 scores, gold answers that normalise to nothing are dropped (none left: the only
  correct answer is ``""``, even for a HasAns question whose golds are all "the" or "a.");
  F1 of two empty answers is 1; a no-answer probability above the threshold turns the
  prediction into "no answer" (right only for NoAns questions); HasAns/NoAns splits;
  ``best_exact``/``best_f1`` and their thresholds from the same search as the official
  script. Where the official script has no answer, :func:`squad_v2_scores` says what it
  does instead: missing predictions, empty totals, ``best_*`` without no-answer scores.
- CMRC 2018: F1 from the longest common *substring* of character segments (Chinese
  characters one by one, other text as words), exact match after removing Chinese and
  ASCII punctuation. The official script segments non-Chinese runs with
  ``nltk.word_tokenize``; here a regular expression (words and single punctuation marks)
  does it, so scores can differ on English fragments inside Chinese answers (contractions).

Scores are percentages (0-100) as in the official scripts.

Example:
    >>> squad_v1_scores({"q1": ["the Eiffel Tower"]}, {"q1": "Eiffel tower"})["exact"]
    100.0
"""

from __future__ import annotations

import collections
import re
import string

# ---- SQuAD ---------------------------------------------------------------------------------
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace.

    Example:
        >>> normalize_answer("The  Cat's hat!")
        'cats hat'
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def get_tokens(text: str) -> list[str]:
    return normalize_answer(text).split() if text else []


def exact_score(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_v1(gold: str, prediction: str) -> float:
    """F1 as ``evaluate-v1.1.py``: no overlap (including an empty side) scores 0."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def f1_v2(gold: str, prediction: str) -> float:
    """F1 as ``evaluate-v2.0.py``: if either side is empty, 1 when both are, else 0."""
    gold_toks = get_tokens(gold)
    pred_toks = get_tokens(prediction)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return float(gold_toks == pred_toks)
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def squad_v1_scores(golds: dict[str, list[str]], predictions: dict[str, str]) -> dict:
    """``evaluate-v1.1.py``: ``golds`` maps question id to its gold answer texts.

    A question without a prediction scores 0 (the official script prints "Unanswered
    question ... will receive score 0"); ``missing`` counts them.
    """
    exact = f1 = 0.0
    missing = 0
    for qid, answers in golds.items():
        if qid not in predictions:
            missing += 1
            continue
        prediction = predictions[qid]
        exact += max(exact_score(a, prediction) for a in answers) if answers else 0
        f1 += max(f1_v1(a, prediction) for a in answers) if answers else 0
    total = len(golds)
    return {
        "exact": 100.0 * exact / total if total else 0.0,
        "f1": 100.0 * f1 / total if total else 0.0,
        "total": total,
        "missing": missing,
    }


def make_qid_to_has_ans(golds: dict[str, list[str]]) -> dict[str, bool]:
    """Answerable or not, as the official script: any gold answer at all, even one that
    normalises to nothing (``"The"``), makes a question HasAns.

    Example:
        >>> make_qid_to_has_ans({"a": ["Paris"], "b": [], "c": ["The"]})
        {'a': True, 'b': False, 'c': True}
    """
    return {qid: bool(answers) for qid, answers in golds.items()}


def get_raw_scores(golds: dict[str, list[str]], predictions: dict[str, str]):
    """Per-question exact and F1 before any no-answer threshold (``evaluate-v2.0.py``).

    Gold answers that normalise to nothing are dropped here (and only here); with none left
    the only correct answer is ``""``.

    Example:
        >>> get_raw_scores({"a": ["The"], "b": ["blue whale"]}, {"a": "", "b": "whale"})
        ({'a': 1, 'b': 0}, {'a': 1.0, 'b': 0.6666666666666666})
    """
    exact, f1 = {}, {}
    for qid, answers in golds.items():
        gold_answers = [a for a in answers if normalize_answer(a)]
        if not gold_answers:
            gold_answers = [""]  # for unanswerable questions the only correct answer is ""
        if qid not in predictions:
            continue
        prediction = predictions[qid]
        exact[qid] = max(exact_score(a, prediction) for a in gold_answers)
        f1[qid] = max(f1_v2(a, prediction) for a in gold_answers)
    return exact, f1


def apply_no_ans_threshold(scores, na_probs, qid_to_has_ans, na_prob_thresh):
    new_scores = {}
    for qid, score in scores.items():
        pred_na = na_probs[qid] > na_prob_thresh
        new_scores[qid] = float(not qid_to_has_ans[qid]) if pred_na else score
    return new_scores


def make_eval_dict(exact_scores, f1_scores, qid_list=None) -> dict:
    # ``not qid_list`` as the official script: an empty list means every question.
    if not qid_list:
        total = len(exact_scores)
        return {
            "exact": 100.0 * sum(exact_scores.values()) / total if total else 0.0,
            "f1": 100.0 * sum(f1_scores.values()) / total if total else 0.0,
            "total": total,
        }
    total = len(qid_list)
    return {
        "exact": 100.0 * sum(exact_scores[k] for k in qid_list) / total if total else 0.0,
        "f1": 100.0 * sum(f1_scores[k] for k in qid_list) / total if total else 0.0,
        "total": total,
    }


def find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    """The official search: start from "no answer everywhere", then switch questions to their
    answer in increasing no-answer probability and keep the best running score."""
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores) if scores else 0.0, best_thresh


def squad_v2_scores(
    golds: dict[str, list[str]],
    predictions: dict[str, str],
    na_probs: dict[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict:
    """``evaluate-v2.0.py``: ``golds`` maps question id to gold texts (empty for "no answer").

    ``predictions`` are answer texts (``""`` means no answer); ``na_probs`` the no-answer score
    of each question (higher = more likely unanswerable; default 0 for all, as the official
    script without ``--na-prob-file``). A question whose ``na_prob > na_prob_thresh`` counts as
    answered "no answer". Returns exact/f1/total, the HasAns_*/NoAns_* splits, and
    best_exact/best_f1 with their thresholds: the official script's numbers, key for key.

    Where the official script has no answer: a question without a prediction (the official
    script leaves it out of its totals, or fails on it) is scored wrong and counted in
    ``missing``; an empty set scores 0 (not a division by zero); ``best_*`` is reported even
    without ``na_probs`` (the official script only prints it with ``--na-prob-file``).

    Example:
        >>> m = squad_v2_scores({"a": ["Paris"], "b": []}, {"a": "paris", "b": "London"},
        ...                     {"a": -2.0, "b": 3.0}, na_prob_thresh=0.0)
        >>> m["exact"], m["HasAns_exact"], m["NoAns_exact"]
        (100.0, 100.0, 100.0)
    """
    if na_probs is None:
        na_probs = {k: 0.0 for k in predictions}
    qid_to_has_ans = make_qid_to_has_ans(golds)
    has_ans = [k for k, v in qid_to_has_ans.items() if v]
    no_ans = [k for k, v in qid_to_has_ans.items() if not v]
    exact_raw, f1_raw = get_raw_scores(golds, predictions)
    missing = len(golds) - len(exact_raw)
    # The official script leaves questions without a prediction out of its totals (and fails
    # on them in the HasAns split); here a missing prediction is scored wrong, whatever the
    # threshold, so totals always cover every question, and ``missing`` says how many.
    na_probs = dict(na_probs)
    for qid in golds:
        if qid not in exact_raw:
            exact_raw[qid] = f1_raw[qid] = 0.0
            na_probs[qid] = float("-inf")
    exact_thresh = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    f1_thresh = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    out = make_eval_dict(exact_thresh, f1_thresh)
    if has_ans:
        for key, value in make_eval_dict(exact_thresh, f1_thresh, qid_list=has_ans).items():
            out[f"HasAns_{key}"] = value
    if no_ans:
        for key, value in make_eval_dict(exact_thresh, f1_thresh, qid_list=no_ans).items():
            out[f"NoAns_{key}"] = value
    # A missing prediction stays wrong in the threshold search too (a non-empty placeholder).
    preds_for_search = {qid: predictions.get(qid, "<missing>") for qid in golds}
    best_exact, exact_thresh_value = find_best_thresh(preds_for_search, exact_raw, na_probs, qid_to_has_ans)
    best_f1, f1_thresh_value = find_best_thresh(preds_for_search, f1_raw, na_probs, qid_to_has_ans)
    out.update(
        best_exact=best_exact,
        best_exact_thresh=exact_thresh_value,
        best_f1=best_f1,
        best_f1_thresh=f1_thresh_value,
        missing=missing,
    )
    return out


# ---- CMRC 2018 -----------------------------------------------------------------------------
#: Punctuation the official CMRC 2018 script removes (ASCII symbols and Chinese marks).
CMRC_PUNCTUATION = [
    "-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=",
    "，", "。", "：", "？", "！", "“", "”", "；", "’", "《", "》", "……", "·", "、",
    "「", "」", "（", "）", "－", "～", "『", "』",
]  # fmt: skip
_CMRC_PUNCT_SET = set(CMRC_PUNCTUATION)
_CHINESE = re.compile(r"[\u4e00-\u9fa5]")
_WORDS = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def mixed_segmentation(text: str, rm_punc: bool = False) -> list[str]:
    """Chinese characters one by one, other runs split into words (official ``mixed_segmentation``).

    Example:
        >>> mixed_segmentation("光荣和ω-force", rm_punc=True)
        ['光', '荣', '和', 'ωforce']
    """
    text = str(text).lower().strip()
    segments: list[str] = []
    pending = ""
    for char in text:
        if rm_punc and char in _CMRC_PUNCT_SET:
            continue
        if _CHINESE.search(char) or char in _CMRC_PUNCT_SET:
            if pending:
                segments.extend(_WORDS.findall(pending))
                pending = ""
            segments.append(char)
        else:
            pending += char
    if pending:
        segments.extend(_WORDS.findall(pending))
    return segments


def remove_punctuation(text: str) -> str:
    text = str(text).lower().strip()
    return "".join(ch for ch in text if ch not in _CMRC_PUNCT_SET)


def find_lcs(first: list[str], second: list[str]) -> tuple[list[str], int]:
    """Longest common substring (contiguous) of two segment lists, and its length."""
    table = [[0] * (len(second) + 1) for _ in range(len(first) + 1)]
    best = end = 0
    for i, a in enumerate(first):
        for j, b in enumerate(second):
            if a == b:
                table[i + 1][j + 1] = table[i][j] + 1
                if table[i + 1][j + 1] > best:
                    best = table[i + 1][j + 1]
                    end = i + 1
    return first[end - best : end], best


def cmrc_f1(answers: list[str], prediction: str) -> float:
    scores = []
    prediction_segs = mixed_segmentation(prediction, rm_punc=True)
    for answer in answers:
        answer_segs = mixed_segmentation(answer, rm_punc=True)
        _, lcs_len = find_lcs(answer_segs, prediction_segs)
        if lcs_len == 0:
            scores.append(0.0)
            continue
        precision = lcs_len / len(prediction_segs)
        recall = lcs_len / len(answer_segs)
        scores.append((2 * precision * recall) / (precision + recall))
    return max(scores) if scores else 0.0


def cmrc_em(answers: list[str], prediction: str) -> int:
    cleaned = remove_punctuation(prediction)
    return int(any(remove_punctuation(answer) == cleaned for answer in answers))


def cmrc2018_scores(golds: dict[str, list[str]], predictions: dict[str, str]) -> dict:
    """CMRC 2018 F1/EM (percent) and their average, as the official script; missing = 0.

    Example:
        >>> m = cmrc2018_scores({"q": ["光荣和ω-force"]}, {"q": "光荣和ω－force。"})
        >>> m["exact"], m["f1"]
        (100.0, 100.0)
    """
    f1 = exact = 0.0
    missing = 0
    for qid, answers in golds.items():
        if qid not in predictions:
            missing += 1
            continue
        f1 += cmrc_f1(answers, predictions[qid])
        exact += cmrc_em(answers, predictions[qid])
    total = len(golds)
    f1_score = 100.0 * f1 / total if total else 0.0
    em_score = 100.0 * exact / total if total else 0.0
    return {
        "exact": em_score,
        "f1": f1_score,
        "average": (em_score + f1_score) * 0.5,
        "total": total,
        "missing": missing,
    }

"""``compute_metrics`` for QA: windows back into questions, post-processed, officially scored.

Example:
    >>> score_predictions({"q": ["Paris"]}, {"q": "paris"}, None, "squad")["exact"]
    100.0
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict

import numpy as np

from ...data.fingerprint import warn_if_tuned_on
from ...errors import UserError
from ...metrics import binary_calibration_metrics
from .evaluation import cmrc2018_scores, cmrc_em, exact_score, squad_v1_scores, squad_v2_scores
from .scoring import postprocess_example

logger = logging.getLogger(__name__)

_CJK = re.compile(r"[\u4e00-\u9fff]")
CMRC_HAS_NO_V2 = "--metric cmrc2018 scores answerable questions only; it has no v2.0 'no answer' mode"


def looks_chinese(contexts: list[str], sample: int = 200) -> bool:
    """True when most non-space characters of (a sample of) the contexts are Chinese.

    Example:
        >>> looks_chinese(["北京是中国的首都。"]), looks_chinese(["Paris is big."])
        (True, False)
    """
    text = "".join(contexts[:sample])
    chars = [c for c in text if not c.isspace()]
    return bool(chars) and len(_CJK.findall(text)) / len(chars) > 0.3


def resolve_metric(metric: str, contexts: list[str] | None, version_2_with_negative: bool) -> str:
    """``squad`` or ``cmrc2018`` for ``--metric`` (``auto`` looks at the evaluation contexts)."""
    if metric == "auto":
        metric = "cmrc2018" if contexts is not None and looks_chinese(contexts) else "squad"
    if metric == "cmrc2018" and version_2_with_negative:
        raise UserError(CMRC_HAS_NO_V2)
    return metric


def score_predictions(
    golds: dict[str, list[str]],
    best_spans_by_id: dict[str, str],
    null_diffs: dict[str, float] | None,
    metric: str,
    null_threshold: float = 0.0,
) -> dict:
    """Official scores: v1.1 (no null diffs), v2.0 (with them), or CMRC 2018.

    For v2.0 ``best_spans_by_id`` holds the best *span* of each question before the
    no-answer decision and ``null_diffs`` the no-answer scores: the official script's
    threshold is applied to them, and its best-threshold search sees every question's span.
    """
    if metric == "cmrc2018":
        if null_diffs is not None:
            raise UserError(CMRC_HAS_NO_V2)
        return cmrc2018_scores(golds, best_spans_by_id)
    if null_diffs is None:
        return squad_v1_scores(golds, best_spans_by_id)
    return squad_v2_scores(golds, best_spans_by_id, null_diffs, na_prob_thresh=null_threshold)


def answer_calibration(golds: dict[str, list[str]], results: dict, metric: str = "squad") -> dict:
    """Calibration of the best span's probability (its share of the n-best candidates, the null
    answer's among them in v2.0: what ``predict`` reports) against whether that span matches a
    gold answer exactly: ``answer_ece``, ``answer_brier``, ``answer_nll``,
    ``answer_reliability``, ``answer_calibration_examples``. An unanswerable question's gold is
    the empty answer, which no span matches.

    Example:
        >>> results = {0: {"best_span": "Paris", "n_best": [{"probability": 0.8}]},
        ...            1: {"best_span": "Rome", "n_best": [{"probability": 0.6}]}}
        >>> m = answer_calibration({"0": ["Paris"], "1": ["Milan"]}, results)
        >>> round(m["answer_brier"], 4), m["answer_calibration_examples"]
        (0.2, 2)
    """
    confidence, correct = [], []
    for key, result in results.items():
        if not result.get("n_best"):
            continue
        answers = golds.get(str(key)) or [""]
        span = result["best_span"]
        if metric == "cmrc2018":
            matched = bool(cmrc_em(answers, span))
        else:
            matched = any(exact_score(gold, span) for gold in answers)
        confidence.append(result["n_best"][0]["probability"])
        correct.append(matched)
    return {f"answer_{k}": v for k, v in binary_calibration_metrics(confidence, correct).items()}


class QAEvaluator:
    """``compute_metrics`` for QA.

    The Trainer hands it ``predictions = (start_logits, end_logits)`` and, as ``label_ids``,
    the index of the window each row came from (see
    :class:`~encoder_tasks.tasks.qa.trainer.QATrainer`). Rows may come in any order
    (length-sorted evaluation) and some twice (the tail a multi-process gather repeats): each
    window is taken once, grouped by question, and every question is scored exactly once
    (``eval_total`` equals the number of questions; ``eval_missing`` counts questions no
    window came back for, scored as wrong).

    ``settings`` (a :class:`~encoder_tasks.tasks.qa.args.QASettings`) gives the span search
    sizes, the v2.0 mode and the threshold; ``metric`` is ``squad`` or ``cmrc2018``.
    """

    def __init__(self, examples, windows, settings, metric: str = "squad"):
        self.examples = examples
        self.windows = windows
        self.settings = settings
        self.metric = metric
        self.last_predictions: dict[str, dict] = {}
        self.last_counts: dict[str, int] = {}
        self._rows: dict[int, int] = {}

    @property
    def source(self) -> str:
        """Where the evaluation questions came from (the file the null threshold is tuned on)."""
        return self.examples.source

    def assemble(self, window_ids) -> dict[int, list[int]]:
        """Windows of each question (by example index), each window taken once."""
        rows_by_window: dict[int, int] = {}
        duplicates = 0
        for row, window in enumerate(np.asarray(window_ids).reshape(-1).tolist()):
            if window < 0 or window >= len(self.windows):
                continue  # padding rows
            if window in rows_by_window:
                duplicates += 1
                continue
            rows_by_window[window] = row
        by_example: dict[int, list[int]] = defaultdict(list)
        for window in sorted(rows_by_window):
            by_example[self.windows.example_index[window]].append(window)
        self.last_counts = {
            "windows": len(self.windows),
            "windows_seen": len(rows_by_window),
            "duplicate_rows": duplicates,
        }
        self._rows = rows_by_window
        return by_example

    def predict(self, start_logits, end_logits, window_ids) -> dict[int, dict]:
        """The post-processed answer of every question some window came back for."""
        start_logits = np.asarray(start_logits)
        end_logits = np.asarray(end_logits)
        by_example = self.assemble(window_ids)
        s = self.settings
        results = {}
        for example, windows in by_example.items():
            parts = []
            for window in windows:
                row = self._rows[window]
                n = len(self.windows.offsets[window])
                parts.append(
                    (
                        start_logits[row, :n],
                        end_logits[row, :n],
                        self.windows.offsets[window],
                        self.windows.null_index[window],
                    )
                )
            results[example] = postprocess_example(
                self.examples.contexts[example],
                parts,
                max_answer_length=s.max_answer_length,
                n_best=s.n_best,
                version_2_with_negative=s.version_2_with_negative,
                null_threshold=s.null_threshold,
            )
        return results

    def __call__(self, eval_pred) -> dict:
        start_logits, end_logits = eval_pred.predictions[:2]
        results = self.predict(start_logits, end_logits, eval_pred.label_ids)
        missing = len(self.examples) - len(results)
        if missing:
            logger.warning(
                "%d of %d questions got no prediction back; scored as wrong", missing, len(self.examples)
            )
        # Keys are row numbers, so repeated ids in a file never merge two questions.
        golds = {str(i): list(a["text"]) for i, a in enumerate(self.examples.answers)}
        v2 = self.settings.version_2_with_negative
        if v2:
            spans = {str(i): r["best_span"] for i, r in results.items()}
            diffs = {str(i): r["null_score_diff"] for i, r in results.items()}
        else:
            spans = {str(i): r["answer"] for i, r in results.items()}
            diffs = None
        metrics = score_predictions(golds, spans, diffs, self.metric, self.settings.null_threshold)
        # A model that abstains on every question is told apart (encoder_tasks.diagnosis).
        # (v2.0: as the official script decides, a null score difference above the threshold abstains.)
        threshold = self.settings.null_threshold
        metrics["answered"] = sum(
            1 for key, span in spans.items() if span and (diffs is None or diffs[key] <= threshold)
        )
        metrics["questions"] = len(self.examples)
        metrics.update(answer_calibration(golds, results, self.metric))
        self.last_predictions = {self.examples.ids[i]: r for i, r in results.items()}
        return metrics


def warn_if_evaluating_on_tuning_data(settings, saved, source: str) -> bool:
    """``evaluate`` on a saved v2.0 model: warn when its tuned null threshold is in use
    (``settings``, resolved from the flags, keeps ``saved``'s) on the data it was tuned on.

    Example:
        >>> from encoder_tasks.tasks.qa.args import QASettings
        >>> saved = QASettings(version_2_with_negative=True, null_threshold=-1.0)
        >>> warn_if_evaluating_on_tuning_data(saved, saved, "dev.json")  # tuned on no recorded data
        False
    """
    if not settings.version_2_with_negative or settings.null_threshold != saved.null_threshold:
        return False
    return warn_if_tuned_on(
        saved.null_threshold_tuned_on,
        source,
        f"the model's v2.0 null threshold ({saved.null_threshold:g})",
        "give --null_threshold to score at another value, or evaluate on data the model has not seen",
    )


def evaluation_records(evaluator: QAEvaluator, predictions, label_ids) -> list[dict]:
    """``evaluate --write_predictions``: per question its id, question, gold answers, the answer
    given (``""``: abstained, as the v2.0 threshold decides) and whether it matches one exactly."""
    from .evaluation import exact_score

    start_logits, end_logits = predictions[:2]
    results = evaluator.predict(start_logits, end_logits, label_ids)
    examples, settings = evaluator.examples, evaluator.settings
    records = []
    for i in range(len(examples)):
        result = results.get(i)
        if result is None:
            answer = ""
        elif settings.version_2_with_negative:
            abstains = result["null_score_diff"] > settings.null_threshold
            answer = "" if abstains else result["best_span"]
        else:
            answer = result["answer"]
        golds = list(examples.answers[i]["text"]) or [""]
        records.append(
            {
                "id": examples.ids[i],
                "question": examples.questions[i],
                "gold": [g for g in golds if g],
                "prediction": answer,
                "correct": any(exact_score(g, answer) for g in golds),
            }
        )
    return records

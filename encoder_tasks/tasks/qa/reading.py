"""SQuAD-style question answering data: read, flatten, check every answer against its context,
split by article.

Accepted forms, all turned into one flat row per question with the columns
``id, title, context, question, answers = {"text": [...], "answer_start": [...]},
is_impossible`` (the layout of the Hub's ``squad``/``squad_v2`` datasets):

- SQuAD v1.1 / v2.0 JSON as published: ``{"data": [{"title", "paragraphs": [{"context",
  "qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}``
  (CMRC 2018 uses the same layout);
- a folder of such JSON files (read as one, e.g. both SQuADShifts files);
- flattened JSON Lines / JSON arrays / ``save_to_disk`` folders / Hub datasets whose
  ``answers`` is either ``{"text": [...], "answer_start": [...]}`` or a list of
  ``{"text", "answer_start"}`` objects.

:func:`check_answers` compares each ``answer_start`` with its context and reports every
mismatch (how many, which ids) instead of training on a silently wrong span.

Example:
    >>> import json, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "tiny.json"
    >>> _ = path.write_text(json.dumps({"data": [{"title": "T", "paragraphs": [{"context": "Paris is big.",
    ...     "qas": [{"id": "q1", "question": "What is big?", "answers": [{"text": "Paris", "answer_start": 0}]}]}]}]}))
    >>> ds = read_squad(path)
    >>> ds[0]["answers"], ds[0]["is_impossible"]
    ({'text': ['Paris'], 'answer_start': [0]}, False)
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from ...data.readers import LINE_COLUMN, read_file, read_text, rows_to_dataset
from ...errors import UserError
from .args import ANSWER_CHECKS

logger = logging.getLogger(__name__)


# ---- reading ---------------------------------------------------------------------------------
def is_squad_json(data) -> bool:
    """True for the nested SQuAD layout (``data`` -> articles -> ``paragraphs``)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("data"), list)
        and all(isinstance(a, dict) and "paragraphs" in a for a in data["data"][:5])
        and bool(data["data"])
    )


def flatten_squad(data: dict, source: str) -> list[dict]:
    """One row per question from nested SQuAD JSON; structural problems name the place."""
    rows = []
    for a_index, article in enumerate(data["data"]):
        title = str(article.get("title", article.get("id", a_index)))
        paragraphs = article.get("paragraphs")
        if not isinstance(paragraphs, list):
            raise UserError(f"{source}: article {a_index} ({title!r}) has no 'paragraphs' list")
        for p_index, paragraph in enumerate(paragraphs):
            where = f"{source}: article {a_index} ({title!r}) paragraph {p_index}"
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            if not isinstance(context, str):
                raise UserError(f"{where}: expected a 'context' string, found {type(context).__name__}")
            qas = paragraph.get("qas")
            if not isinstance(qas, list):
                raise UserError(f"{where}: expected a 'qas' list, found {type(qas).__name__}")
            for q_index, qa in enumerate(qas):
                if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
                    raise UserError(
                        f"{where} question {q_index}: expected an object with a 'question' string"
                    )
                qid = str(qa.get("id", f"{a_index}-{p_index}-{q_index}"))
                answers = normalize_answers(qa.get("answers", []), f"{where} question id {qid}")
                impossible = bool(qa.get("is_impossible", False))
                if impossible:
                    # v2.0 keeps "plausible_answers" apart; an impossible question has no gold span.
                    answers = {"text": [], "answer_start": []}
                rows.append(
                    {
                        "id": qid,
                        "title": title,
                        "context": context,
                        "question": qa["question"],
                        "answers": answers,
                        "is_impossible": impossible,
                        LINE_COLUMN: None,
                    }
                )
    if not rows:
        raise UserError(f"{source}: no questions found")
    return rows


def normalize_answers(value, where: str) -> dict:
    """``{"text": [...], "answer_start": [...]}`` from either published answer layout."""
    if value is None:
        return {"text": [], "answer_start": []}
    if isinstance(value, dict):
        texts = value.get("text", [])
        starts = value.get("answer_start", [])
        if isinstance(texts, str):
            texts, starts = [texts], [starts]
    elif isinstance(value, list):
        if not all(isinstance(a, dict) for a in value):
            raise UserError(
                f"{where}: 'answers' must hold {{'text', 'answer_start'}} objects, found {value!r:.80}"
            )
        texts = [a.get("text") for a in value]
        starts = [a.get("answer_start") for a in value]
    else:
        raise UserError(
            f"{where}: 'answers' must be a list of {{'text', 'answer_start'}} or "
            f"{{'text': [...], 'answer_start': [...]}}, found {type(value).__name__}"
        )
    if len(texts) != len(starts):
        raise UserError(f"{where}: {len(texts)} answer texts but {len(starts)} answer_start values")
    clean_starts = []
    for text, start in zip(texts, starts):
        if not isinstance(text, str):
            raise UserError(f"{where}: answer text must be a string, found {text!r}")
        try:
            clean_starts.append(int(start))
        except (TypeError, ValueError):
            raise UserError(f"{where}: answer_start must be an integer, found {start!r}") from None
    return {"text": list(texts), "answer_start": clean_starts}


def _read_squad_json(path: Path, encoding: str):
    text = read_text(path, encoding)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    return flatten_squad(data, str(path)) if is_squad_json(data) else None


def read_squad(
    path: str | os.PathLike,
    delimiter: str = "auto",
    column_names: list[str] | None = None,
    encoding: str = "utf-8",
    split: str | None = None,
):
    """Read QA data in any accepted form into a flat ``datasets.Dataset`` (see module doc).

    This is the QA task's ``read_split``: nested SQuAD JSON (or a folder of it) is
    flattened; anything else goes through the generic reader and its ``answers`` column is
    normalised to the ``{"text": [...], "answer_start": [...]}`` layout.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if p.is_file())
        if files and not (path / "dataset_info.json").exists() and not (path / "dataset_dict.json").exists():
            rows = []
            for file in files:
                flat = _read_squad_json(file, encoding)
                if flat is None:
                    raise UserError(f"{file}: not SQuAD JSON (expected {{'data': [{{'paragraphs': ...}}]}})")
                rows.extend(flat)
            return rows_to_dataset(rows, str(path))
    elif path.suffix.lower() == ".json" and path.is_file():
        rows = _read_squad_json(path, encoding)
        if rows is not None:
            return rows_to_dataset(rows, str(path))
    return read_file(path, delimiter=delimiter, column_names=column_names, encoding=encoding, split=split)


# ---- answer checks ---------------------------------------------------------------------------
@dataclass
class AnswerCheck:
    """What :func:`check_answers` found: counts and the ids concerned."""

    source: str
    answers: int = 0
    relocated: list[str] = field(default_factory=list)  # ids whose text was found elsewhere
    absent: list[str] = field(default_factory=list)  # ids whose text is not in the context
    unusable_questions: list[str] = field(default_factory=list)  # answerable, but no span left

    @property
    def mismatched(self) -> int:
        return len(self.relocated) + len(self.absent)

    def summary(self, shown: int = 10) -> str:
        if not self.mismatched:
            return f"{self.source}: all {self.answers} answers match their contexts"

        def ids(values):
            unique = list(dict.fromkeys(values))
            more = f" (+{len(unique) - shown} more)" if len(unique) > shown else ""
            return ", ".join(unique[:shown]) + more

        parts = [
            f"{self.source}: {self.mismatched} of {self.answers} answers do not match the context at answer_start"
        ]
        if self.relocated:
            parts.append(
                f"{len(self.relocated)} found elsewhere in the context and moved to the nearest occurrence "
                f"(ids {ids(self.relocated)})"
            )
        if self.absent:
            parts.append(
                f"{len(self.absent)} whose text is not in the context, not used as a training span "
                f"(ids {ids(self.absent)})"
            )
        if self.unusable_questions:
            parts.append(
                f"{len(self.unusable_questions)} answerable questions are left without any usable span "
                f"and are not trained on (ids {ids(self.unusable_questions)})"
            )
        return "; ".join(parts)


def check_answers(rows_answers, contexts, ids, source: str, policy: str = "fix"):
    """Check every ``answer_start`` against its context.

    Returns ``(spans, report)``: for each question the ``(start, end)`` character span to
    train on (the first answer that checks out), or None when it has none (unanswerable, or
    every answer is off). ``policy``:

    - ``fix`` (default): an answer whose text occurs elsewhere in the context is moved to
      the occurrence nearest the given start; one whose text is absent is not trained on;
    - ``skip``: any mismatched answer is not trained on;
    - ``error``: stop with a :class:`UserError` listing the mismatches.

    Gold texts are kept as they are for scoring either way (scores compare text only).

    Example:
        >>> spans, report = check_answers([{"text": ["cat"], "answer_start": [4]}], ["the cat"], ["q1"], "f")
        >>> spans, report.mismatched
        ([(4, 7)], 0)
    """
    if policy not in ANSWER_CHECKS:
        raise UserError(f"--answer_check must be one of {', '.join(ANSWER_CHECKS)}, found {policy!r}")
    report = AnswerCheck(source)
    spans: list[tuple[int, int] | None] = []
    for answers, context, qid in zip(rows_answers, contexts, ids):
        chosen = None
        usable_texts = 0
        for text, start in zip(answers["text"], answers["answer_start"]):
            report.answers += 1
            if not text.strip():
                report.absent.append(qid)
                continue
            usable_texts += 1
            if 0 <= start and context[start : start + len(text)] == text:
                span = (start, start + len(text))
            else:
                span = None
                nearest = _nearest_occurrence(context, text, start)
                if nearest is None:
                    report.absent.append(qid)
                else:
                    report.relocated.append(qid)
                    if policy == "fix":
                        span = (nearest, nearest + len(text))
            if chosen is None and span is not None:
                chosen = span
        if chosen is None and usable_texts:
            report.unusable_questions.append(qid)
        spans.append(chosen)
    if report.mismatched:
        if policy == "error":
            raise UserError(report.summary(shown=50) + ". Fix the data or pass --answer_check fix|skip")
        logger.warning("%s", report.summary())
    return spans, report


def _nearest_occurrence(context: str, text: str, start: int) -> int | None:
    best = None
    index = context.find(text)
    while index != -1:
        if best is None or abs(index - start) < abs(best - start):
            best = index
        index = context.find(text, index + 1)
    return best


# ---- splitting by article --------------------------------------------------------------------
def split_by_article(
    dataset,
    fraction: float,
    seed: int = 42,
    title_column: str = "title",
    flag: str = "--eval_split_by_article",
):
    """Split a dataset into (train, eval) with no article in both; ``fraction`` of articles to eval.

    Articles are ordered by title, shuffled with ``seed``, and the first
    ``ceil(fraction * articles)`` go to evaluation, so the same call always gives the
    same split (train and evaluate commands agree).

    Example:
        >>> import datasets
        >>> ds = datasets.Dataset.from_dict({"title": ["a", "a", "b", "c"], "id": ["1", "2", "3", "4"]})
        >>> train, held = split_by_article(ds, 0.34, seed=0)
        >>> sorted(set(train["title"]) & set(held["title"])), len(train) + len(held)
        ([], 4)
    """
    if not 0.0 < fraction < 1.0:
        raise UserError(f"{flag} must be a fraction between 0 and 1, found {fraction}")
    if title_column not in dataset.column_names:
        raise UserError(
            f"{flag} needs a {title_column!r} column (article titles); found {dataset.column_names}"
        )
    titles = sorted({str(t) for t in dataset[title_column]})
    if len(titles) < 2:
        raise UserError(
            f"{flag}: the data holds {len(titles)} article(s) ({title_column!r}); at least 2 are needed"
        )
    random.Random(seed).shuffle(titles)
    n_eval = min(len(titles) - 1, max(1, math.ceil(fraction * len(titles))))
    held = set(titles[:n_eval])
    column = [str(t) for t in dataset[title_column]]
    train_idx = [i for i, t in enumerate(column) if t not in held]
    eval_idx = [i for i, t in enumerate(column) if t in held]
    return dataset.select(train_idx), dataset.select(eval_idx)

"""Small classification and pair datasets built from the real data in ``../shared/data``.

Only a few folders there are classification or pair data (SST-2, STS-B), so a choice that must
hold "across datasets" (issue 31's pooling default, at least four datasets per head type) also
uses real labels that the QA and NER files already carry:

- single-label classification: ``sst2`` (sentiment), ``topic`` (which of 35 Wikipedia articles
  a SQuAD-v2 question is about), ``wikiann-type`` (the type of a WikiANN-en sentence's first
  entity: PER/LOC/ORG), ``wnut17-entity`` (does a tweet mention an entity at all);
- regression pairs: ``stsb`` and its three genres as their own datasets, ``stsb-captions``,
  ``stsb-news``, ``stsb-forums`` (each genre's own train and dev pairs: image captions, news
  headlines and forum posts are different distributions, though one annotation effort);
- classification pairs: ``stsb-binary`` (score >= 3), ``stsb-3class`` (< 2, 2 to 4, >= 4; the
  same sentences as ``stsb-binary``), ``qnli-squadshifts`` and ``qnli-squad2`` (does a sentence of
  the paragraph contain the answer to the question: GLUE's QNLI recipe, on SQuADShifts' Reddit
  and Amazon questions and on SQuAD-v2 dev's Wikipedia questions; one positive and one random
  other sentence of the same paragraph per question).

Every set has ``train``, ``validation`` and ``test`` JSONL files. Published splits are kept
where they exist (STS-B, WikiANN, WNUT17: train / dev / test); elsewhere the rows are carved
with seed 0 (never a training seed), whole paragraphs at a time for QNLI so that no sentence is
in two splits. ``--max_train_samples`` then draws each run's training subset with its seed.

    >>> sorted(DERIVED_SETS)[:3], DERIVED_SETS["stsb-news"].head
    (['qnli-squad2', 'qnli-squadshifts', 'sst2'], 'regression_pair')
"""

from __future__ import annotations

import csv
import json
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import DATA

#: The seed every carve uses (never a training seed).
CARVE_SEED = 0
SQUAD2 = "qa/squad-v2-dev/dev-v2.0.json"
SHIFTS = (
    "qa/squadshifts/squadshifts_reddit_v1.0.json",
    "qa/squadshifts/squadshifts_amazon_reviews_v1.0.json",
)
STSB = {
    "train": "pair/stsb/sts-train.csv",
    "validation": "pair/stsb/sts-dev.csv",
    "test": "pair/stsb/sts-test.csv",
}
WIKIANN = {"train": "ner/wikiann-en/train", "validation": "ner/wikiann-en/dev", "test": "ner/wikiann-en/test"}
WNUT = {
    "train": "ner/wnut17/wnut17train.conll",
    "validation": "ner/wnut17/emerging.dev.conll",
    "test": "ner/wnut17/emerging.test.annotated",
}
CLASSIFICATION_FLAGS = ("--text_column", "text", "--label_column", "label")
PAIR_FLAGS = ("--text_column", "sentence1", "--text_pair_column", "sentence2", "--label_column", "label")


@dataclass(frozen=True)
class DerivedSet:
    """One dataset: its task, head type, validation metric (a ``metrics.json`` key), the files
    it reads, the toolkit flags naming its columns, and how its split files are built."""

    name: str
    task: str
    head: str  # single_label, regression_pair or classification_pair
    metric: str
    description: str
    needs: tuple[str, ...]
    flags: tuple[str, ...]
    build: Callable[[Path, int], dict[str, Path]]

    def files(self, folder: Path, held_out: int = 1000) -> dict[str, Path]:
        """The set's ``train``/``validation``/``test`` files under ``folder`` (built once);
        ``held_out``: the size of each carved (or cut) validation and test split."""
        folder = folder / self.name
        done = {split: folder / f"{split}.jsonl" for split in ("train", "validation", "test")}
        if all(path.is_file() for path in done.values()):
            return done
        folder.mkdir(parents=True, exist_ok=True)
        return self.build(folder, held_out)


# ---- writing and carving -----------------------------------------------------------------------
def _write(folder: Path, splits: dict[str, list[dict]]) -> dict[str, Path]:
    out = {}
    for split, rows in splits.items():
        out[split] = folder / f"{split}.jsonl"
        out[split].write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    return out


def carve(groups: list[list[dict]], held_out: int) -> dict[str, list[dict]]:
    """Validation and test of about ``held_out`` rows each, whole groups at a time (seed 0), the
    rest for training: no group is in two splits.

    Example:
        >>> split = carve([[{"i": i}, {"i": i}] for i in range(10)], held_out=4)
        >>> [len(split[s]) for s in ("train", "validation", "test")]
        [12, 4, 4]
    """
    groups = list(groups)
    random.Random(CARVE_SEED).shuffle(groups)
    out: dict[str, list[dict]] = {"validation": [], "test": [], "train": []}
    for group in groups:
        split = next((s for s in ("validation", "test") if len(out[s]) < held_out), "train")
        out[split].extend(group)
    return {s: out[s] for s in ("train", "validation", "test")}


def _cut(rows: list[dict], limit: int) -> list[dict]:
    """A seed-0 sample of ``limit`` rows (published files are often ordered by source)."""
    rows = list(rows)
    random.Random(CARVE_SEED).shuffle(rows)
    return rows[:limit]


# ---- single-label classification ---------------------------------------------------------------
def _sst2(folder: Path, held_out: int) -> dict[str, Path]:
    from encoder_tasks.data import read_file

    rows = [{"text": r["sentence"], "label": int(r["label"])} for r in read_file(DATA / "cls/sst2/train.tsv")]
    # dev.tsv is the training benchmark's test split: left alone.
    return _write(folder, carve([[r] for r in rows], held_out))


def _squad_articles(path: str) -> list[dict]:
    return json.loads((DATA / path).read_text(encoding="utf-8"))["data"]


def _topic(folder: Path, held_out: int) -> dict[str, Path]:
    rows = [
        {"text": qa["question"].strip(), "label": article["title"]}
        for article in _squad_articles(SQUAD2)
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    return _write(folder, carve([[r] for r in rows], held_out))


def read_tagged(path: Path) -> Iterable[tuple[list[str], list[str]]]:
    """(words, tags) per sentence of a CoNLL file: first column the word (a ``xx:`` language
    prefix as WikiANN writes it removed), last column the tag, a blank line between sentences."""
    words: list[str] = []
    tags: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if not fields:
            if words:
                yield words, tags
            words, tags = [], []
            continue
        words.append(re.sub(r"^[a-z]{2}:", "", fields[0]))
        tags.append(fields[-1])
    if words:
        yield words, tags


def _entity_rows(split: str, files: dict[str, str], label: Callable[[list[str]], object]) -> list[dict]:
    rows = [{"text": " ".join(w), "label": label(t)} for w, t in read_tagged(DATA / files[split])]
    return [r for r in rows if r["label"] is not None]


def _first_entity_type(tags: list[str]) -> str | None:
    return next((t[2:] for t in tags if t.startswith("B-")), None)


def _wikiann_type(folder: Path, held_out: int) -> dict[str, Path]:
    splits = {s: _entity_rows(s, WIKIANN, _first_entity_type) for s in ("train", "validation", "test")}
    return _write(folder, {s: rows if s == "train" else _cut(rows, held_out) for s, rows in splits.items()})


def _wnut_entity(folder: Path, held_out: int) -> dict[str, Path]:
    def mentions(tags):
        return int(any(t != "O" for t in tags))

    splits = {s: _entity_rows(s, WNUT, mentions) for s in ("train", "validation", "test")}
    return _write(folder, {s: rows if s == "train" else _cut(rows, held_out) for s, rows in splits.items()})


# ---- regression and classification pairs from STS-B -------------------------------------------
def stsb_rows(split: str, genre: str | None = None) -> list[dict]:
    """STS-B pairs of one published split (one genre's: ``captions``, ``news``, ``forum``)."""
    rows = []
    with (DATA / STSB[split]).open(encoding="utf-8") as handle:
        for fields in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(fields) >= 7 and (genre is None or fields[0].startswith(f"main-{genre}")):
                rows.append({"sentence1": fields[5], "sentence2": fields[6], "score": float(fields[4])})
    return rows


def _stsb(genre: str | None = None, label: Callable[[float], object] | None = None):
    def build(folder: Path, held_out: int) -> dict[str, Path]:
        splits = {}
        for split in ("train", "validation", "test"):
            rows = stsb_rows(split, genre)
            rows = [
                {
                    "sentence1": r["sentence1"],
                    "sentence2": r["sentence2"],
                    "label": label(r["score"]) if label else r["score"],
                }
                for r in rows
            ]
            splits[split] = rows if split == "train" else _cut(rows, held_out)
        return _write(folder, splits)

    return build


def _binary(score: float) -> int:
    return int(score >= 3.0)


def _three_classes(score: float) -> int:
    return 0 if score < 2.0 else 1 if score < 4.0 else 2


# ---- QNLI-style pairs from QA files -----------------------------------------------------------
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences_with_offsets(context: str) -> list[tuple[int, str]]:
    """The context's sentences (split after ``.``, ``!`` or ``?`` and white space) with the
    character offset each starts at.

    Example:
        >>> sentences_with_offsets("A cat. The dog ran! Why?")
        [(0, 'A cat.'), (7, 'The dog ran!'), (20, 'Why?')]
    """
    out, start = [], 0
    for match in _SENTENCE_END.finditer(context):
        out.append((start, context[start : match.start()]))
        start = match.end()
    out.append((start, context[start:]))
    return [(s, text) for s, text in out if text.strip()]


def qnli_groups(articles: list[dict], rng: random.Random) -> list[list[dict]]:
    """Per paragraph, two rows per answerable question: (question, the sentence holding the
    first answer's start) labelled 1, and (question, another sentence of the paragraph) labelled
    0. Paragraphs of one sentence give none."""
    groups = []
    for article in articles:
        for paragraph in article["paragraphs"]:
            sentences = sentences_with_offsets(paragraph["context"])
            if len(sentences) < 2:
                continue
            group = []
            for qa in paragraph["qas"]:
                if qa.get("is_impossible") or not qa.get("answers"):
                    continue
                start = qa["answers"][0]["answer_start"]
                hit = max(i for i, (offset, _) in enumerate(sentences) if offset <= start)
                other = rng.choice([i for i in range(len(sentences)) if i != hit])
                for i, label in ((hit, 1), (other, 0)):
                    group.append(
                        {"sentence1": qa["question"].strip(), "sentence2": sentences[i][1], "label": label}
                    )
            if group:
                groups.append(group)
    return groups


def _qnli(paths: tuple[str, ...]):
    def build(folder: Path, held_out: int) -> dict[str, Path]:
        rng = random.Random(CARVE_SEED)
        groups = [g for path in paths for g in qnli_groups(_squad_articles(path), rng)]
        return _write(folder, carve(groups, held_out))

    return build


# ---- the catalogue ----------------------------------------------------------------------------
def _set(name, task, head, metric, description, needs, build) -> DerivedSet:
    flags = CLASSIFICATION_FLAGS if task == "classification" else PAIR_FLAGS
    if head == "regression_pair":
        flags = (*flags, "--problem_type", "regression")
    return DerivedSet(name, task, head, metric, description, tuple(needs), flags, build)


_STSB_FILES = tuple(STSB.values())
DERIVED_SETS: dict[str, DerivedSet] = {
    s.name: s
    for s in (
        _set("sst2", "classification", "single_label", "eval_accuracy",
             "SST-2 sentiment, 2 classes; validation/test carved from train.tsv", ["cls/sst2/train.tsv"], _sst2),
        _set("topic", "classification", "single_label", "eval_accuracy",
             "SQuAD-v2 dev question -> its article, 35 classes; carved", [SQUAD2], _topic),
        _set("wikiann-type", "classification", "single_label", "eval_accuracy",
             "WikiANN-en sentence -> its first entity's type (PER/LOC/ORG); published splits",
             WIKIANN.values(), _wikiann_type),
        _set("wnut17-entity", "classification", "single_label", "eval_accuracy",
             "WNUT17 tweet -> mentions an entity or not; published splits", WNUT.values(), _wnut_entity),
        _set("stsb", "pair", "regression_pair", "eval_spearman",
             "STS-B, score 0-5; published splits", _STSB_FILES, _stsb()),
        _set("stsb-captions", "pair", "regression_pair", "eval_spearman",
             "STS-B image-caption pairs only; published splits", _STSB_FILES, _stsb("captions")),
        _set("stsb-news", "pair", "regression_pair", "eval_spearman",
             "STS-B news pairs only; published splits", _STSB_FILES, _stsb("news")),
        _set("stsb-forums", "pair", "regression_pair", "eval_spearman",
             "STS-B forum pairs only (450 training pairs); published splits", _STSB_FILES, _stsb("forum")),
        _set("stsb-binary", "pair", "classification_pair", "eval_accuracy",
             "STS-B pairs, label score >= 3; published splits", _STSB_FILES, _stsb(label=_binary)),
        _set("stsb-3class", "pair", "classification_pair", "eval_accuracy",
             "STS-B pairs as < 2, 2-4, >= 4 (the sentences of stsb-binary)", _STSB_FILES,
             _stsb(label=_three_classes)),
        _set("qnli-squadshifts", "pair", "classification_pair", "eval_accuracy",
             "QNLI recipe on SQuADShifts Reddit + Amazon questions; carved by paragraph", SHIFTS, _qnli(SHIFTS)),
        _set("qnli-squad2", "pair", "classification_pair", "eval_accuracy",
             "QNLI recipe on SQuAD-v2 dev's answerable questions; carved by paragraph", [SQUAD2], _qnli((SQUAD2,))),
    )
}  # fmt: skip

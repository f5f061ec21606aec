"""The tiny data sets the tests write to files, one per task, shared by every tier.

Plain Python values (no torch, no ``encoder_tasks`` at import time), so any test, and
``tests/assets/format1/make_fixtures.py`` running against an older checkout, can use them.

Example:
    >>> REVIEWS_CSV.splitlines()[:2]
    ['text,label', 'the film was good and fun,pos']
    >>> questions_in(squad_json(v2=True))
    6
"""

from __future__ import annotations

# ---- classification: four reviews, two labels ----------------------------------------------------
REVIEWS = [
    "the film was good and fun,pos",
    "the movie was bad and boring,neg",
    "I love this great movie,pos",
    "I hate this awful film,neg",
]


def csv_rows(rows: list[str], header: str = "text,label") -> str:
    """``rows`` (already comma-joined) under ``header``, one per line."""
    return header + "\n" + "\n".join(rows) + "\n"


#: 16 rows: the four reviews four times (batch 4 gives four steps per epoch).
REVIEWS_CSV = csv_rows(REVIEWS * 4)

# ---- ner: four IOB2 sentences --------------------------------------------------------------------
SENTENCES = [
    (["john", "smith", "lives", "in", "paris", "."], ["B-PER", "I-PER", "O", "O", "B-LOC", "O"]),
    (
        ["acme", "inc", "works", "in", "new", "york", "city"],
        ["B-ORG", "I-ORG", "O", "O", "B-LOC", "I-LOC", "I-LOC"],
    ),
    (["the", "cat", "sat", "on", "the", "mat"], ["O"] * 6),
    (["who", "lives", "in", "london", "?", "john", "does"], ["O", "O", "O", "B-LOC", "O", "B-PER", "O"]),
]


def conll(scheme: str = "iob2", sentences=SENTENCES, separator: str = "\t") -> str:
    """The sentences three times as a CoNLL file (after a ``-DOCSTART-`` line), tags in ``scheme``."""
    from encoder_tasks.tasks.ner.schemes import from_iob2

    blocks = []
    for words, tags in sentences * 3:
        tags = from_iob2(tags, scheme)
        blocks.append("\n".join(f"{w}{separator}{t}" for w, t in zip(words, tags)))
    return "-DOCSTART-\tO\n\n" + "\n\n".join(blocks) + "\n"


# ---- qa: two SQuAD articles ----------------------------------------------------------------------
CONTEXTS = [
    "john smith lives in paris . the cat sat on the mat .",
    "acme inc works in new york city . the dog played with a red ball .",
]
#: (question, answer or None, impossible) per article of CONTEXTS.
QUESTIONS = [
    [
        ("who lives in paris ?", "john smith", False),
        ("where did the cat sit ?", "the mat", False),
        ("what did the dog do ?", None, True),
    ],
    [
        ("where does acme inc work ?", "new york city", False),
        ("what did the dog play with ?", "a red ball", False),
        ("who lives in london ?", None, True),
    ],
]


def squad_json(v2: bool = False) -> dict:
    """SQuAD 1.1 (answerable questions only), or 2.0 with ``is_impossible`` on every question."""
    articles = []
    for a, (context, questions) in enumerate(zip(CONTEXTS, QUESTIONS)):
        items = []
        for q, (question, answer, impossible) in enumerate(questions):
            if impossible and not v2:
                continue
            answers = [] if impossible else [{"text": answer, "answer_start": context.index(answer)}]
            item = {"id": f"a{a}q{q}", "question": question, "answers": answers}
            if v2:
                item["is_impossible"] = impossible
            items.append(item)
        articles.append({"title": f"article {a}", "paragraphs": [{"context": context, "qas": items}]})
    return {"version": "v2.0" if v2 else "1.1", "data": articles}


def questions_in(data: dict) -> int:
    return sum(len(p["qas"]) for a in data["data"] for p in a["paragraphs"])


# ---- pair: STS-B-like scored sentence pairs ------------------------------------------------------
#: (score, sentence1, sentence2)
STS_ROWS = [
    ("5.000", "the film was good", "the movie was good"),
    ("0.400", "the film was good", "john lives in paris"),
    ("4.200", "the cat sat on the mat", "a cat sat on a mat"),
    ("1.200", "the dog ran", "the cat sat"),
    ("3.600", "john lives in paris", "john smith lives in paris"),
    ("0.800", "big red dog", "small blue cat"),
]
#: The columns of the headerless STS-B files that ``sts_lines`` writes.
STS_COLUMNS = ["--column_names", "genre,source,year,id,score,sentence1,sentence2"]


def sts_lines() -> list[str]:
    """STS_ROWS three times in the headerless STS-B layout (18 lines, no trailing newline)."""
    return [f"main\tsrc\t2012\t{i:04d}\t{s}\t{a}\t{b}" for i, (s, a, b) in enumerate(STS_ROWS * 3)]


# ---- embedding: scored pairs for CoSENT ----------------------------------------------------------
#: (sentence1, sentence2, score)
SCORED_PAIRS = [
    ("the film was good", "the movie was good", 4.8),
    ("the cat sat on the mat", "a cat sat on a mat", 4.6),
    ("john lives in paris", "john smith lives in paris", 4.0),
    ("the dog ran", "the cat sat", 1.0),
    ("big red dog", "small blue cat", 0.4),
    ("I love this movie", "I hate this film", 1.6),
    ("what did the cat do", "the cat sat", 2.5),
    ("acme inc works in new york", "acme works in new york city", 4.2),
]


def scored_pairs_tsv() -> str:
    lines = ["sentence1\tsentence2\tscore"] + [f"{a}\t{b}\t{s}" for a, b, s in SCORED_PAIRS]
    return "\n".join(lines) + "\n"


# ---- mlm: a small vocabulary for corpora -----------------------------------------------------------
MLM_WORDS = "the a film movie good bad great cat dog sat mat john smith lives in paris".split()


def cycled_docs(step: int, shortest: int, count: int = 40) -> list[str]:
    """``count`` documents of MLM_WORDS taken cyclically (``step`` words apart), of varied lengths."""
    n = len(MLM_WORDS)
    return [" ".join(MLM_WORDS[(i * step + j) % n] for j in range(shortest + i % 9)) for i in range(count)]

"""Every task LEARNS: a tiny model, a short run, a separable synthetic set, a stated score.

Each data set is drawn here, with a fixed seed, from a rule the model can learn: a keyword gives
the label, entity words come from a fixed lexicon, the question's first word names the kind of
word that answers it, a pair is "same" when both sides hold the same key word, paraphrases use
synonyms, a line alternates two words. A model trained on one draw is scored on another draw,
and must reach the threshold stated in ``CASES``. A run that stops learning (labels or answer
positions shifted against their texts, a loss on the wrong positions) misses it; parameter
groups that leave the encoder or the head out of the optimiser leave those weights where they
started, which is checked too (the other weights can still learn the task).
``test_untrained_misses_the_threshold`` runs some cases again with every learning rate at 0:
they miss, so the thresholds are not met by a model that has learned nothing.

Margins, measured over seeds 1-3 (``SEED``, which draws the data and seeds the run) when the
cases were written: accuracy 1.0/1.0/1.0 (single-label and pair, threshold 0.9), micro F1
1.0/1.0/1.0 (multi-label, 0.9), Spearman 0.968/0.964/0.965 (regression, 0.8; 4 tied score levels
cap it at about 0.97) and 0.939/0.908/0.943 (embedding, 0.8; 3 levels cap it at about 0.94),
strict F1 1.0/1.0/1.0 (NER softmax) and 1.0/1.0/0.96 (CRF, 0.9), QA F1 100/100/100 (80),
masked accuracy 0.46/0.44/0.64 (MLM, 5x chance = 0.21); the same with mean pooling as with the
default cls. With every learning rate at 0, the best of the three: single-label 0.40, multi-label
0.62, regression 0.61, pair 0.5, NER 0.11, QA 28, embedding 0.20, MLM 0.0.

The words are one token each in the tiny WordPiece vocabulary of ``encoder_tasks.testing``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.helpers import run_train, write

FILLERS = "the a an is was it this that film movie and or of to on for with by from very".split()
#: Quiet, fp32 (the same numbers on every CPU), no checkpoints.
QUIET = ["--logging_steps", "1000", "--save_strategy", "no", "--report_to", "none", "--mixed_precision", "no"]
SEED = 1


def fillers(rng: random.Random, low: int, high: int) -> list[str]:
    return [rng.choice(FILLERS) for _ in range(rng.randint(low, high))]


def insert(rng: random.Random, words: list[str], piece: list[str]) -> list[str]:
    at = rng.randint(0, len(words))
    return words[:at] + piece + words[at:]


# ---- classification ------------------------------------------------------------------------------
KEYWORDS = {
    "pos": ["good", "great", "love", "fun"],
    "neg": ["bad", "awful", "hate", "boring"],
    "place": ["paris", "london", "york", "city"],
}


def keyword_rows(seed: int, n: int) -> str:
    """``text,label``: fillers around one keyword, whose group is the label."""
    rng = random.Random(seed)
    rows = ["text,label"]
    for _ in range(n):
        label = rng.choice(sorted(KEYWORDS))
        rows.append(" ".join(insert(rng, fillers(rng, 3, 6), [rng.choice(KEYWORDS[label])])) + f",{label}")
    return "\n".join(rows) + "\n"


TOPICS = {
    "animal": ["cat", "dog"],
    "colour": ["red", "blue"],
    "person": ["john", "smith"],
    "place": ["paris", "london"],
}


def topic_rows(seed: int, n: int) -> str:
    """JSON lines ``{"text", "label": [topics]}``: each topic is present (a word of it in the
    text) or not at random, at least one per text."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        labels = [t for t in sorted(TOPICS) if rng.random() < 0.5] or [rng.choice(sorted(TOPICS))]
        words = fillers(rng, 2, 4)
        for topic in labels:
            words = insert(rng, words, [rng.choice(TOPICS[topic])])
        lines.append(json.dumps({"text": " ".join(words), "label": labels}))
    return "\n".join(lines) + "\n"


def count_rows(seed: int, n: int) -> str:
    """``text,label``: six words, ``k`` of them "good"; the score is ``k + 0.5`` (k in 0..3)."""
    rng = random.Random(seed)
    rows = ["text,label"]
    for _ in range(n):
        k = rng.randint(0, 3)
        words = [rng.choice(FILLERS) for _ in range(6 - k)]
        for _ in range(k):
            words = insert(rng, words, ["good"])
        rows.append(f"{' '.join(words)},{k + 0.5}")
    return "\n".join(rows) + "\n"


# ---- pair ----------------------------------------------------------------------------------------
KEYS = "one two three four".split()


def same_key_rows(seed: int, n: int) -> str:
    """``sentence1,sentence2,label``: "same" when both sides are the same key word (half the rows)."""
    rng = random.Random(seed)
    rows = ["sentence1,sentence2,label"]
    for i in range(n):
        first = rng.choice(KEYS)
        second = first if i % 2 == 0 else rng.choice([k for k in KEYS if k != first])
        rows.append(f"{first},{second},{'same' if first == second else 'different'}")
    return "\n".join(rows) + "\n"


# ---- ner -----------------------------------------------------------------------------------------
ENTITIES = {
    "PER": [["john", "smith"], ["john"]],
    "LOC": [["paris"], ["london"], ["new", "york", "city"], ["new", "york"]],
    "ORG": [["acme", "inc"], ["google"], ["acme"]],
}


def tagged_conll(seed: int, n: int) -> str:
    """CoNLL sentences of fillers with one or two entities of ENTITIES, tagged in IOB2."""
    rng = random.Random(seed)
    blocks = []
    for _ in range(n):
        chunks = [[(w, "O")] for w in fillers(rng, 2, 5)]
        for _ in range(rng.randint(1, 2)):
            kind = rng.choice(sorted(ENTITIES))
            words = rng.choice(ENTITIES[kind])
            tags = [f"B-{kind}"] + [f"I-{kind}"] * (len(words) - 1)
            chunks.insert(rng.randint(0, len(chunks)), list(zip(words, tags)))
        blocks.append("\n".join(f"{w}\t{t}" for chunk in chunks for w, t in chunk))
    return "\n\n".join(blocks) + "\n"


# ---- qa ------------------------------------------------------------------------------------------
#: The question is a cue word that names the kind of word answering it.
KINDS = {
    "who": ["john", "smith"],
    "where": ["paris", "london"],
    "what": ["cat", "dog"],
    "when": ["one", "two", "three"],
}


def cued_squad(seed: int, n: int) -> str:
    """SQuAD 1.1: each context holds one word of every kind among fillers; the question asks
    for one kind ("who ?")."""
    rng = random.Random(seed)
    paragraphs = []
    for i in range(n):
        chosen = {kind: rng.choice(words) for kind, words in KINDS.items()}
        words = fillers(rng, 2, 4)
        for word in chosen.values():
            words = insert(rng, words, [word])
        kind = rng.choice(sorted(KINDS))
        start = len(" ".join(words[: words.index(chosen[kind])] + [""]))  # characters before it
        answers = [{"text": chosen[kind], "answer_start": start}]
        qa = {"id": f"q{i}", "question": f"{kind} ?", "answers": answers}
        paragraphs.append({"context": " ".join(words), "qas": [qa]})
    return json.dumps({"version": "1.1", "data": [{"title": "cued", "paragraphs": paragraphs}]})


# ---- embedding -----------------------------------------------------------------------------------
#: Two words per concept: the two sides of a pair use different words, so only training relates them.
CONCEPTS = [
    ("good", "great"),
    ("bad", "awful"),
    ("paris", "london"),
    ("red", "blue"),
    ("one", "two"),
    ("big", "small"),
    ("cat", "dog"),
    ("love", "fun"),
]


def synonym_pairs(seed: int, n: int) -> str:
    """``sentence1\\tsentence2\\tscore``: two concepts a side; the score grows with the shared ones."""
    rng = random.Random(seed)
    lines = ["sentence1\tsentence2\tscore"]
    for i in range(n):
        shared = i % 3
        first = rng.sample(range(len(CONCEPTS)), 2)
        others = [c for c in range(len(CONCEPTS)) if c not in first]
        second = first[:shared] + rng.sample(others, 2 - shared)
        a = " ".join(CONCEPTS[c][0] for c in first)
        b = " ".join(CONCEPTS[c][1] for c in second)
        lines.append(f"{a}\t{b}\t{shared * 2.0 + 0.5}")
    return "\n".join(lines) + "\n"


# ---- mlm -----------------------------------------------------------------------------------------
#: A line alternates the two words of one pair ("cat dog cat dog ..."): a masked word is the other
#: word of the pair its neighbours come from. 24 words: a guess is right 1 time in 24.
WORD_PAIRS = [
    ("cat", "dog"),
    ("sat", "mat"),
    ("john", "smith"),
    ("lives", "paris"),
    ("acme", "inc"),
    ("works", "google"),
    ("red", "blue"),
    ("big", "small"),
    ("one", "two"),
    ("three", "four"),
    ("five", "six"),
    ("seven", "eight"),
]
MLM_CHANCE = 1 / (2 * len(WORD_PAIRS))


def alternating_lines(seed: int, n: int) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        first, second = rng.sample(rng.choice(WORD_PAIRS), 2)
        lines.append(" ".join([first, second] * 4))
    return "\n".join(lines) + "\n"


# ---- the cases -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    task: str
    rows: Callable[[int, int], str]  # (seed, count) -> the file's text
    suffix: str
    metric: str
    threshold: float
    epochs: int
    flags: tuple[str, ...] = ()
    train_rows: int = 256
    batch: int = 8


CASES = {
    "classification-single-label": Case("classification", keyword_rows, "csv", "eval_accuracy", 0.9, 6),
    "classification-multi-label": Case("classification", topic_rows, "jsonl", "eval_micro_f1", 0.9, 8),
    "classification-regression": Case("classification", count_rows, "csv", "eval_spearman", 0.8, 6),
    "pair": Case("pair", same_key_rows, "csv", "eval_accuracy", 0.9, 12),
    "ner-softmax": Case("ner", tagged_conll, "conll", "eval_f1_strict", 0.9, 4, train_rows=128),
    "ner-crf": Case("ner", tagged_conll, "conll", "eval_f1_strict", 0.9, 4, ("--crf",), train_rows=128),
    # 10 epochs: at 6, F1 over seeds 1-5 ranged 38-100 whatever the padding, and this seed fell
    # from 95.8 to 76.7 when batches stopped being padded to 8 on a CPU (other dropout draws).
    "qa": Case("qa", cued_squad, "json", "eval_f1", 80.0, 10, ("--max_length", "48", "--doc_stride", "16")),
    "embedding": Case("embedding", synonym_pairs, "tsv", "eval_cosine_spearman", 0.8, 6),
    "mlm": Case(
        "mlm",
        alternating_lines,
        "txt",
        "eval_masked_accuracy",
        5 * MLM_CHANCE,
        16,
        ("--line_by_line", "true", "--max_length", "16"),
        batch=16,
    ),
}
#: Every learning rate at 0 (NER's head and CRF have their own).
NO_LEARNING = {"ner": ["--head_learning_rate", "0", "--crf_learning_rate", "0"]}


@pytest.fixture(scope="module")
def learner(tiny_bert, tmp_path_factory):
    """``tiny_bert`` initialised at ``initializer_range`` 0.1. From the default 0.02, the cases
    where words must attend to each other (pair, QA, MLM) stayed well below their thresholds for
    hundreds of steps: attention learns slowly from small weights."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    out = tmp_path_factory.mktemp("learner")
    config = AutoConfig.from_pretrained(tiny_bert)
    config.initializer_range = 0.1
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(out)
    return str(out)


@pytest.fixture(autouse=True)
def no_plots(monkeypatch):
    """Plots take longer than these runs; the scores are what is checked here."""
    monkeypatch.setattr("encoder_tasks.reporting.plots.plot_run", lambda *args, **kwargs: [])


@pytest.fixture(scope="module")
def runs(learner, tmp_path_factory):
    """``run(name, learning=True) -> (score, metrics, run folder)``, each run once per module."""
    done = {}

    def run(name: str, learning: bool = True):
        if (name, learning) not in done:
            case, folder = CASES[name], tmp_path_factory.mktemp(name)
            train = write(folder / f"train.{case.suffix}", case.rows(SEED, case.train_rows))
            dev = write(folder / f"dev.{case.suffix}", case.rows(SEED + 1, 48))
            flags = [*QUIET, "--seed", str(SEED), "--learning_rate", "5e-3", *case.flags]
            flags += [
                "--num_train_epochs",
                str(case.epochs),
                "--per_device_train_batch_size",
                str(case.batch),
            ]
            if not learning:
                flags += ["--learning_rate", "0", *NO_LEARNING.get(case.task, [])]
            metrics = run_train(case.task, learner, train, folder / "run", *flags, validation=dev)
            done[name, learning] = metrics[case.metric], metrics, folder / "run"
        return done[name, learning]

    return run


def weights(folder) -> dict:
    """The saved weights of ``folder``, named as in the bare encoder (a run's ``encoder.`` prefix
    dropped; the embedding task saves the bare encoder)."""
    from safetensors.torch import load_file

    saved = load_file(str(Path(folder) / "model.safetensors"))
    wrapped = any(k.startswith("encoder.embeddings.") for k in saved)
    return {(k.removeprefix("encoder.") if wrapped else k): v for k, v in saved.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_task_learns(runs, learner, name):
    case = CASES[name]
    value, metrics, out = runs(name)
    assert value >= case.threshold, f"{name}: {case.metric} {value:.4f} < {case.threshold}: {metrics}"
    # Every encoder weight was trained (an encoder left out of the optimiser can still score).
    start, end = weights(Path(learner)), weights(out)
    unmoved = [k for k in start if not k.startswith("pooler.") and torch.equal(start[k], end[k])]
    assert not unmoved, f"{name}: encoder weights never updated: {unmoved}"


@pytest.mark.parametrize("name", ["classification-single-label", "ner-crf", "qa", "mlm"])
def test_untrained_misses_the_threshold(runs, name):
    """The negative control: the same run with every learning rate at 0 stays below the
    threshold; and every weight of the trained model, head included, differs from it (the runs
    start from the same seeded weights)."""
    case = CASES[name]
    value, metrics, untrained = runs(name, learning=False)
    assert value < case.threshold, f"{name} reached {value:.4f} without learning: {metrics}"
    start, end = weights(untrained), weights(runs(name)[2])
    assert start.keys() == end.keys()
    unmoved = [k for k in start if torch.equal(start[k], end[k])]
    assert not unmoved, f"{name}: weights never updated: {unmoved}"

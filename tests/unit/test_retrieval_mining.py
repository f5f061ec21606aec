"""Hard-negative mining: rank range, guards against false negatives, output rows."""

import json
import random

import numpy as np
import pytest

from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.errors import UserError
from encoder_tasks.tasks.embedding.args import MineArguments
from encoder_tasks.tasks.embedding.mining import (
    bm25_rankings,
    interleave,
    mine_file,
    ranked_candidates,
    select_negatives,
)
from encoder_tasks.tasks.embedding.model import encode_texts, load_bi_encoder
from encoder_tasks.tasks.embedding.retrieval import normalize
from encoder_tasks.testing import make_tiny_model
from tests.helpers import read_jsonl, write

QUERIES = ["the cat sat", "a dog ran", "red car fast", "blue sky high", "green tree tall", "old man walks"]
PASSAGES = [
    "cat on the mat",
    "dog in the park",
    "a fast red car",
    "sky is blue",
    "tall green tree",
    "man walks slowly",
]
DISTRACTORS = [
    f"{w} text number {i}" for i, w in enumerate("cat dog car sky tree man film book song rain".split())
]


def test_ranked_candidates_skip_banned_and_respect_the_range():
    scores = np.array([0.1, 0.9, 0.8, 0.7, 0.7, 0.2])
    assert ranked_candidates(scores, set(), 0, 6) == [1, 2, 3, 4, 5, 0]  # ties: lower row first
    assert ranked_candidates(scores, {2}, 0, 3) == [1, 3, 4]
    assert ranked_candidates(scores, {2}, 1, 3) == [3, 4]  # ranks counted without the positive
    assert interleave([1, 2, 3], [2, 4]) == [1, 2, 4, 3]


def test_guards_margin_ratio_and_sampling():
    cands, scores = [10, 11, 12, 13, 14], np.array([0.95, 0.85, 0.7, 0.5, 0.3])
    assert select_negatives(cands, scores, 0.9, 5) == cands
    assert select_negatives(cands, scores, 0.9, 5, margin=0.1) == [12, 13, 14]  # <= 0.8
    assert select_negatives(cands, scores, 0.9, 5, max_score_ratio=0.8) == [12, 13, 14]  # <= 0.72
    assert select_negatives(cands, scores, 0.9, 2, margin=0.0) == [11, 12]
    picked = select_negatives(cands, scores, 1.0, 3, sampling="random", rng=random.Random(0))
    assert len(picked) == 3 and picked == sorted(picked)  # a sample, kept in rank order
    assert picked == select_negatives(cands, scores, 1.0, 3, sampling="random", rng=random.Random(0))


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return make_tiny_model("bert", str(tmp_path_factory.mktemp("mine") / "bert"))


def _pairs(tmp_path):
    rows = "".join(json.dumps({"query": q, "positive": p}) + "\n" for q, p in zip(QUERIES, PASSAGES))
    corpus = "".join(json.dumps({"text": t}) + "\n" for t in [*PASSAGES, *DISTRACTORS])
    return write(tmp_path / "pairs.jsonl", rows), write(tmp_path / "corpus.jsonl", corpus)


def _mine(encoder, tmp_path, name, **flags):
    pairs, corpus = _pairs(tmp_path)
    out = tmp_path / f"{name}.jsonl"
    args = MineArguments(model_dir=encoder, input_file=str(pairs), output_file=str(out),
                         corpus_file=str(corpus), precision="fp32", **flags)  # fmt: skip
    return mine_file(args), read_jsonl(out)


def test_mined_rows_follow_the_model_ranking_within_the_range(encoder, tmp_path):
    summary, rows = _mine(encoder, tmp_path, "top", num_negatives=2, range_min=1, range_max=6)
    assert summary["written"] == len(QUERIES) and summary["corpus"] == len(PASSAGES) + len(DISTRACTORS)
    model, tokenizer = load_bi_encoder(encoder), load_tokenizer(encoder)
    corpus = [*PASSAGES, *DISTRACTORS]
    vectors = normalize(encode_texts(model, tokenizer, corpus))
    for row, q, p in zip(rows, QUERIES, PASSAGES):
        assert (
            row["query"] == q
            and row["positive"] == p
            and set(row) == {"query", "positive", "negative_1", "negative_2"}
        )
        sims = vectors @ normalize(encode_texts(model, tokenizer, [q]))[0]
        expected = ranked_candidates(sims, {corpus.index(p)}, 1, 6)[:2]
        assert [row["negative_1"], row["negative_2"]] == [corpus[i] for i in expected]
        assert p not in (row["negative_1"], row["negative_2"])


def test_guards_drop_rows_and_labeled_pairs(encoder, tmp_path):
    # a random tiny model scores everything alike: a big margin leaves no negative anywhere
    with pytest.raises(UserError, match="no row kept"):
        _mine(encoder, tmp_path, "none", margin=2.0)
    summary, rows = _mine(encoder, tmp_path, "labeled", num_negatives=2, output_format="labeled-pair")
    assert [r["label"] for r in rows[:3]] == [1, 0, 0] and rows[0]["text2"] == PASSAGES[0]
    assert len(rows) == 3 * len(QUERIES) and {r["text1"] for r in rows} == set(QUERIES)


def test_bm25_candidates(encoder, tmp_path):
    pytest.importorskip("bm25s")
    tokenizer = load_tokenizer(encoder)
    corpus = [*PASSAGES, *DISTRACTORS]
    ranked = bm25_rankings(tokenizer, ["cat"], corpus, 5)[0]
    assert {corpus[i] for i in ranked} >= {"cat on the mat", "cat text number 0"}
    _, rows = _mine(encoder, tmp_path, "bm25", candidates="bm25", num_negatives=1)
    cat = next(r for r in rows if r["query"] == "the cat sat")
    assert "cat" in cat["negative_1"] or "the" in cat["negative_1"]  # lexical overlap, not the positive


def test_bad_flags_name_the_flag(encoder, tmp_path):
    with pytest.raises(UserError, match="--range_min/--range_max"):
        _mine(encoder, tmp_path, "bad", range_min=5, range_max=5)
    with pytest.raises(UserError, match="--candidates must be one of"):
        _mine(encoder, tmp_path, "bad2", candidates="tfidf")

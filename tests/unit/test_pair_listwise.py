"""Listwise reranker training (pair --listwise_negatives): groups, the loss, the sampler, a run."""

from __future__ import annotations

import json
import math

import datasets
import pytest
import torch

from encoder_tasks.collators import PaddingCollator
from encoder_tasks.data import Split
from encoder_tasks.errors import UserError
from encoder_tasks.sampling import EpochSeededCollator, GroupBatchSampler
from encoder_tasks.tasks.pair.args import LISTWISE_IN_BATCH_NEGATIVES, PairArguments
from encoder_tasks.tasks.pair.listwise import (
    GROUP_SIZE_KEY,
    PAIR_INDEX,
    InBatchNegatives,
    expand_groups,
    listwise_loss,
)
from encoder_tasks.testing import make_tiny_tokenizer
from tests.helpers import FAST_TRAINING, read_json, read_jsonl, run_predict, run_train, write


def test_the_loss_is_the_positives_cross_entropy_within_its_group():
    torch.manual_seed(0)
    logits = torch.randn(12, 2)
    found = listwise_loss(logits, group_size=3)
    relevance = (logits[:, 1] - logits[:, 0]).tolist()
    expected = 0.0
    for g in range(4):
        scores = relevance[3 * g : 3 * g + 3]
        expected += -scores[0] + math.log(sum(math.exp(s) for s in scores))
    assert float(found) == pytest.approx(expected / 4, rel=1e-5)
    with pytest.raises(ValueError, match="not whole groups"):
        listwise_loss(logits[:11], group_size=3)


def test_the_bounded_loss_softmaxes_scale_times_p_relevant():
    torch.manual_seed(1)
    logits = torch.randn(8, 2) * 3
    found = listwise_loss(logits, group_size=4, scale=10.0)
    p_relevant = torch.softmax(logits, dim=1)[:, 1].tolist()  # P("1") of the two-label head
    expected = 0.0
    for g in range(2):
        scores = [10.0 * p for p in p_relevant[4 * g : 4 * g + 4]]
        expected += -scores[0] + math.log(sum(math.exp(s) for s in scores))
    assert float(found) == pytest.approx(expected / 2, rel=1e-5)
    # Bounded: however far the positive is ahead, the loss stays above the bound's floor, where
    # the unbounded relevance drives it to zero.
    apart = torch.tensor([[0.0, 50.0], [50.0, 0.0], [50.0, 0.0], [50.0, 0.0]])
    floor = math.log(1 + 3 * math.exp(-10.0))
    assert float(listwise_loss(apart, 4, scale=10.0)) == pytest.approx(floor, rel=1e-3)
    assert float(listwise_loss(apart, 4)) < 1e-20


def test_listwise_scale_needs_listwise_training_and_a_positive_value():
    with pytest.raises(UserError, match="--listwise_scale applies to listwise training"):
        PairArguments(text_pair_column="positive", listwise_scale=10.0)
    with pytest.raises(UserError, match="--listwise_scale: expected a number above 0, found 0"):
        PairArguments(text_pair_column="positive", listwise_negatives="negative_1", listwise_scale=0.0)


def test_in_batch_negatives_need_listwise_training_and_a_count_of_zero_or_more():
    with pytest.raises(UserError, match="--listwise_in_batch_negatives applies to listwise training"):
        PairArguments(text_pair_column="positive", listwise_in_batch_negatives=4)
    with pytest.raises(UserError, match="--listwise_in_batch_negatives: expected 0 or more, found -1"):
        PairArguments(
            text_pair_column="positive", listwise_negatives="negative_1", listwise_in_batch_negatives=-1
        )


def test_in_batch_negatives_default_to_four_for_listwise_training_only():
    assert PairArguments(text_pair_column="positive").listwise_in_batch_negatives == 0
    listwise = PairArguments(text_pair_column="positive", listwise_negatives="negative_1")
    assert listwise.listwise_in_batch_negatives == LISTWISE_IN_BATCH_NEGATIVES == 4
    off = PairArguments(
        text_pair_column="positive", listwise_negatives="negative_1", listwise_in_batch_negatives=0
    )
    assert off.listwise_in_batch_negatives == 0


def _tokenised_groups(tokenizer, groups):
    """Rows as the pair task's training set holds them: each group's (query, passage) pairs
    tokenised, the positive first, each with its index into the flat text lists."""
    queries = [q for q, passages in groups for _ in passages]
    passages = [p for _, group in groups for p in group]
    rows = [
        {**tokenizer(q, p), "labels": int(j == 0), PAIR_INDEX: i}
        for i, (q, p, j) in enumerate(zip(queries, passages, [j for _, g in groups for j in range(len(g))]))
    ]
    return queries, passages, rows


def test_in_batch_negatives_are_other_groups_passages_tokenised_with_the_query():
    tokenizer = make_tiny_tokenizer()
    groups = [("red cat", ["the red cat", "a dog", "blue"]), ("blue dog", ["the blue dog", "red", "a dog"]),
              ("sun", ["the sun", "moon", "the red cat"]), ("moon", ["the moon", "sun", "bird"])]  # fmt: skip
    queries, passages, rows = _tokenised_groups(tokenizer, groups)
    collate = EpochSeededCollator(InBatchNegatives(PaddingCollator(tokenizer), tokenizer, queries, passages, 3,
                                                   count=4, max_length=6), seed=0)  # fmt: skip
    batch = collate(rows)
    assert int(batch[GROUP_SIZE_KEY]) == 7 and batch["input_ids"].shape[0] == 28
    assert batch["labels"].tolist() == [1, 0, 0, 0, 0, 0, 0] * 4
    for g, (query, own) in enumerate(groups):
        block = batch["input_ids"][7 * g : 7 * g + 7]
        others = [p for h, (_, group) in enumerate(groups) if h != g for p in group if p != own[0]]
        for k in range(3):  # the group's own rows, untouched
            assert block[k][: len(rows[3 * g + k]["input_ids"])].tolist() == rows[3 * g + k]["input_ids"]
        for k in range(3, 7):  # each drawn pair: the query with another group's passage, truncated alike
            candidates = [tokenizer(query, p, truncation=True, max_length=6)["input_ids"] for p in others]
            found = [t for t in block[k].tolist() if t != tokenizer.pad_token_id]
            assert found in candidates
    # Group "sun" lists "the red cat", the first group's positive: never drawn as its negative.
    first = [tokenizer("red cat", p, truncation=True, max_length=6)["input_ids"] for p in ("the red cat",)]
    for epoch in range(20):  # (drawing 4 of 9 without the filter would hit it in all but 0.001% of runs)
        collate.set_epoch(epoch)
        drawn = collate(rows)["input_ids"][3:7]
        assert not any([t for t in row.tolist() if t != tokenizer.pad_token_id] in first for row in drawn)
    # Seeded per batch and epoch: the same batch draws the same negatives, another epoch others.
    collate.set_epoch(0)
    assert torch.equal(collate(rows)["input_ids"], batch["input_ids"])
    draws = set()
    for epoch in range(1, 6):
        collate.set_epoch(epoch)
        draws.add(tuple(collate(rows)["input_ids"].flatten().tolist()))
    assert len(draws) > 1


def test_in_batch_negatives_shrink_to_the_smallest_pool_and_skip_evaluation_rows():
    tokenizer = make_tiny_tokenizer()
    groups = [("a", ["b", "c"]), ("d", ["b", "e"])]  # group "d": pool ["b", "c"] minus its positive "b"
    queries, passages, rows = _tokenised_groups(tokenizer, groups)
    collate = InBatchNegatives(
        PaddingCollator(tokenizer), tokenizer, queries, passages, 2, count=4, max_length=8
    )
    batch = collate(rows)
    assert int(batch[GROUP_SIZE_KEY]) == 3 and batch["input_ids"].shape[0] == 6
    evaluation = [{k: v for k, v in row.items() if k != PAIR_INDEX} for row in rows]
    assert GROUP_SIZE_KEY not in collate(evaluation) and collate(evaluation)["input_ids"].shape[0] == 4
    # A batch of one group (an epoch's last) has nothing to draw: it trains on its own rows.
    alone = collate(rows[:2])
    assert int(alone[GROUP_SIZE_KEY]) == 2 and alone["labels"].tolist() == [1, 0]


def test_rows_become_consecutive_labelled_groups_positive_first():
    rows = {"query": ["q1", "q2"], "pos": ["p1", "p2"], "negative_1": ["a", "b"], "negative_2": ["c", "d"]}
    split = Split("train", "mined.jsonl", datasets.Dataset.from_dict(rows))
    out = expand_groups(split, "query", "pos", ["negative_1", "negative_2"]).dataset
    assert out["query"] == ["q1"] * 3 + ["q2"] * 3
    assert out["pos"] == ["p1", "a", "c", "p2", "b", "d"]
    assert out["label"] == ["1", "0", "0", "1", "0", "0"]
    with pytest.raises(
        UserError, match=r"mined.jsonl: --listwise_negatives names column\(s\) \['negative_3'\]"
    ):
        expand_groups(split, "query", "pos", ["negative_3"])


def test_batches_hold_whole_groups_and_every_group_once_an_epoch():
    sampler = GroupBatchSampler(groups=10, group_size=3, batch_groups=4, seed=1)
    batches = list(sampler)
    rows = [r for b in batches for r in b]
    assert sorted(rows) == list(range(30))
    assert all(
        len(b) % 3 == 0 and all(b[i] // 3 == b[i + 2] // 3 for i in range(0, len(b), 3)) for b in batches
    )
    sampler.set_epoch(1)
    assert [r for b in sampler for r in b] != rows  # another order next epoch
    shares = [list(GroupBatchSampler(10, 3, 2, seed=1, rank=r, world_size=2)) for r in (0, 1)]
    assert len(shares[0]) == len(shares[1])
    assert not {r for b in shares[0] for r in b} & {r for b in shares[1] for r in b}


@pytest.mark.parametrize(
    ("extra", "group_size"),
    [
        (["--listwise_in_batch_negatives", "0"], 3),
        (["--listwise_scale", "10", "--listwise_in_batch_negatives", "0"], 3),
        ([], 3 + LISTWISE_IN_BATCH_NEGATIVES),  # 4 queries a batch: 9 passages of others to draw from
    ],
    ids=["unbounded", "listwise_scale-10", "in-batch-default"],
)
def test_a_listwise_reranker_trains_learns_and_predicts(tiny_bert, tmp_path, extra, group_size):
    # The positive repeats the query's words; the negatives do not: a ranking it can learn.
    words = ["red", "blue", "green", "cat", "dog", "bird", "sun", "moon"]
    lines = []
    for i in range(9):  # 9 queries at 4 a batch: each epoch ends on a batch of one
        query = f"{words[i % 8]} {words[(i + 3) % 8]}"
        lines.append({"query": query, "positive": f"the {query} here", "negative_1": f"a {words[(i + 1) % 8]}",
                      "negative_2": f"no {words[(i + 5) % 8]} at all"})  # fmt: skip
    data = write(tmp_path / "mined.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
    flags = [
        *FAST_TRAINING,
        "--num_train_epochs",
        "30",
        "--learning_rate",
        "1e-3",
        "--per_device_train_batch_size",
        "4",
    ]
    flags += ["--text_column", "query", "--text_pair_column", "positive"]
    flags += ["--listwise_negatives", "negative_1,negative_2"]
    flags += extra
    out = tmp_path / "run"
    metrics = run_train("pair", tiny_bert, data, out, *flags, validation=data)
    assert read_json(out / "encoder_tasks.json")["settings"]["label_names"] == ["0", "1"]
    assert metrics["eval_calibration_examples"] == 27  # validation scored as 9 x 3 labelled pairs
    losses = [r["loss"] for r in read_jsonl(out / "log.jsonl") if "loss" in r]
    # The first loss is near log(passages per query): in-batch negatives make the lists longer.
    assert losses[0] > 0.9 * math.log(group_size) and sum(losses[-4:]) / 4 < 0.5 * losses[0]
    # As a reranker: the positive gets the higher probability of "1" for most queries.
    pairs = [{"query": r["query"], "positive": p} for r in lines for p in (r["positive"], r["negative_1"])]
    records = run_predict("pair", out, write(tmp_path / "pairs.jsonl", "".join(json.dumps(p) + "\n" for p in pairs)),
                          tmp_path / "scored.jsonl")  # fmt: skip
    relevance = [r["probabilities"]["1"] for r in records]
    assert sum(relevance[2 * i] > relevance[2 * i + 1] for i in range(8)) >= 7

"""``--max_tokens_per_batch``: token-budget training batches (``encoder_tasks.token_batches``).

The sampler is checked by brute force over many draws (budget, every example once, the same
batches for the same (seed, epoch), the same count every epoch); the trainer's loader with the
real collator (what the model is fed stays under the budget); the flags (auto batch rule off,
embedding refused). Training with it and resuming it exactly: tests/cli/test_token_batches_cli.py.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from encoder_tasks.errors import UserError
from encoder_tasks.token_batches import TokenBudgetBatchSampler, padded_length
from tests.helpers import batch_rule


def draw_lengths(seed: int, count: int, low: int = 3, high: int = 120) -> list[int]:
    rng = random.Random(seed)
    # Mostly short texts with a long tail, as real data has.
    return [min(high, low + int(rng.expovariate(1 / 20))) for _ in range(count)]


def cost(batch: list[int], lengths: list[int], multiple: int | None) -> int:
    return len(batch) * max(padded_length(lengths[i], multiple) for i in batch)


def epoch_batches(lengths, budget, multiple, seed, epoch, processes):
    """Each process's batches of one epoch, from a sampler per process (as each process builds it)."""
    shares = []
    for rank in range(processes):
        sampler = TokenBudgetBatchSampler(
            lengths,
            budget,
            pad_to_multiple_of=multiple,
            seed=seed,
            num_processes=processes,
            process_index=rank,
        )
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
        assert len(sampler) == len(shares[-1])  # len() is what iterating gives
    return shares


@pytest.mark.parametrize("processes", [1, 2, 3])
@pytest.mark.parametrize("multiple", [None, 8])
@pytest.mark.parametrize("budget", [120, 512, 2048])
def test_every_batch_fits_the_budget_and_every_example_comes_once(budget, multiple, processes):
    for draw in range(5):
        lengths = draw_lengths(draw, random.Random(draw).randint(40, 400))
        for epoch in (0, 1, 2):
            shares = epoch_batches(lengths, budget, multiple, seed=draw, epoch=epoch, processes=processes)
            # the same number of whole batches on every process: the same number of steps
            assert len({len(share) for share in shares}) == 1
            batches = [batch for share in shares for batch in share]
            over = [cost(b, lengths, multiple) for b in batches if cost(b, lengths, multiple) > budget]
            assert not over, f"batches over the budget of {budget}: {over[:3]}"
            assert sorted(i for b in batches for i in b) == list(range(len(lengths)))


def test_short_texts_make_big_batches_and_padding_stays_small():
    lengths = draw_lengths(7, 2000)
    sampler = TokenBudgetBatchSampler(lengths, 1024, pad_to_multiple_of=8, seed=1)
    batches = list(sampler)
    shortest = min(batches, key=lambda b: max(lengths[i] for i in b))
    longest = max(batches, key=lambda b: max(lengths[i] for i in b))
    assert len(shortest) > 8 * len(longest)
    # Grouped by length: beyond rounding each text up to a multiple of 8, grouping adds a few
    # percent of padding (0.975 measured), and the mean batch fills most of the budget (0.97).
    assert sampler.padded_tokens() == sum(cost(b, lengths, 8) for b in batches)
    assert sum(sampler.padded) / sampler.padded_tokens() > 0.95
    assert sampler.padded_tokens() / len(batches) > 0.9 * 1024


def test_batches_depend_on_seed_and_epoch_only():
    lengths = draw_lengths(3, 300)

    def batches(seed, epoch):
        sampler = TokenBudgetBatchSampler(lengths, 256, pad_to_multiple_of=8, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert batches(5, 1) == batches(5, 1)  # a resumed run rebuilds the same epoch
    assert batches(5, 0) != batches(5, 1)
    assert batches(5, 0) != batches(6, 0)
    # Not only the order: which texts share a batch changes between epochs too.
    assert {tuple(sorted(b)) for b in batches(5, 0)} != {tuple(sorted(b)) for b in batches(5, 1)}
    # The batch holding the longest text comes first: running out of memory shows at step 1.
    for epoch in (0, 1):
        assert max(lengths) in [lengths[i] for i in batches(5, epoch)[0]]


def test_the_number_of_batches_is_the_same_every_epoch():
    # The Trainer sizes the LR schedule from len() once, and resuming finds its place as
    # global_step % steps_per_epoch: the count may not change between epochs.
    lengths = draw_lengths(11, 500)
    for processes in (1, 4):
        sampler = TokenBudgetBatchSampler(lengths, 300, seed=2, num_processes=processes)
        counts = set()
        for epoch in range(6):
            sampler.set_epoch(epoch)
            counts.add(len(list(sampler)))
        assert counts == {len(sampler)}


def test_skipping_consumed_batches_gives_the_rest_of_the_same_epoch():
    """What a resumed run sees: accelerate's skip over the sampler rebuilt for the same epoch."""
    from accelerate.data_loader import SkipBatchSampler

    lengths = draw_lengths(4, 200)
    first = TokenBudgetBatchSampler(lengths, 256, seed=9)
    first.set_epoch(2)
    whole = list(first)
    again = TokenBudgetBatchSampler(lengths, 256, seed=9)
    again.set_epoch(2)
    assert list(SkipBatchSampler(again, skip_batches=5)) == whole[5:]


def test_an_example_longer_than_the_budget_is_refused_with_its_length():
    with pytest.raises(UserError) as caught:
        TokenBudgetBatchSampler([10, 61, 20], 60, pad_to_multiple_of=8)
    message = str(caught.value)
    assert "--max_tokens_per_batch 60" in message and "61 tokens" in message and "64" in message
    TokenBudgetBatchSampler([10, 61, 20], 64, pad_to_multiple_of=8)  # exactly the padded length fits
    with pytest.raises(UserError, match="positive"):
        TokenBudgetBatchSampler([10], 0)


def test_fewer_examples_than_processes_is_refused():
    with pytest.raises(UserError, match="3 processes"):
        TokenBudgetBatchSampler([5, 5], 100, num_processes=3)
    # One example per batch but enough of them: fine.
    assert len(TokenBudgetBatchSampler([50, 50, 50, 50], 60, num_processes=2)) == 2


# ---- the trainer's loader and the flags ------------------------------------------------------------
def test_the_trainer_feeds_batches_under_the_budget_with_the_real_collator(tiny_bert, tmp_path):
    import datasets

    from encoder_tasks.backbone import load_encoder, load_tokenizer
    from encoder_tasks.collators import PaddingCollator
    from encoder_tasks.tasks.classification.model import SequenceClassifier
    from encoder_tasks.trainer import EncoderTaskTrainer
    from encoder_tasks.training_args import EncoderTrainingArguments

    lengths = draw_lengths(5, 120, low=3, high=60)
    ids = [[2] + [7] * (n - 2) + [3] for n in lengths]
    data = datasets.Dataset.from_dict(
        {
            "input_ids": ids,
            "attention_mask": [[1] * len(i) for i in ids],
            "labels": [n % 2 for n in lengths],
            "length": lengths,
            "text": ["unused"] * len(ids),  # dropped before collating, as the Trainer does
        }
    )
    budget = 256
    args = EncoderTrainingArguments(
        output_dir=str(tmp_path),
        report_to="none",
        max_tokens_per_batch=budget,
        use_cpu=True,
        pad_to_multiple_of=8,  # the sampler counts the collator's padding (auto is none on a CPU)
    )
    trainer = EncoderTaskTrainer(
        model=SequenceClassifier(load_encoder(tiny_bert), num_labels=2),
        args=args,
        train_dataset=data,
        data_collator=PaddingCollator(load_tokenizer(tiny_bert), pad_to_multiple_of=8),
    )
    loader = trainer.get_train_dataloader()
    batches = list(loader)
    assert len(batches) == len(loader)
    assert all(b["input_ids"].numel() <= budget for b in batches)
    assert sorted(int(n) for b in batches for n in b["attention_mask"].sum(1)) == sorted(lengths)
    assert len({len(b["input_ids"]) for b in batches}) > 2  # batch sizes follow the lengths


def budget_args(**changes) -> SimpleNamespace:
    """What resolve_batch_size reads, as parse_args leaves it with no batch size given."""
    fields = dict(
        auto_batch_size=True, given_fields=frozenset(), max_steps=-1, per_device_train_batch_size=16,
        num_train_epochs=1, world_size=1, gradient_accumulation_steps=1, max_tokens_per_batch=2048,
    )  # fmt: skip
    return SimpleNamespace(**{**fields, **changes})


def test_the_auto_batch_rule_stays_off_under_a_token_budget(caplog):
    from encoder_tasks.training_args import resolve_batch_size

    assert (
        resolve_batch_size(budget_args(max_tokens_per_batch=None), "ner", 100, **batch_rule("ner")) == 8
    )  # the rule, without
    args = budget_args()
    assert (
        resolve_batch_size(args, "ner", 100, **batch_rule("ner")) is None
        and args.per_device_train_batch_size == 16
    )
    with caplog.at_level("WARNING"):
        resolve_batch_size(
            budget_args(given_fields=frozenset({"per_device_train_batch_size"})),
            "ner",
            100,
            **batch_rule("ner"),
        )
    assert "--per_device_train_batch_size not used for training" in caplog.text


def test_embedding_refuses_a_token_budget_mlm_takes_it():
    from encoder_tasks.training_args import check_token_budget, resolve_batch_size

    args = budget_args()
    with pytest.raises(UserError, match="negatives"):
        resolve_batch_size(args, "embedding", 100, **batch_rule("embedding"))
    for task in ("classification", "pair", "ner", "qa", "mlm"):
        check_token_budget(args, task, batch_rule(task)["token_budget_refusal"])


def test_the_flag_must_be_positive_and_not_meet_auto_find_batch_size(tmp_path):
    from encoder_tasks.training_args import EncoderTrainingArguments

    with pytest.raises(UserError, match="positive"):
        EncoderTrainingArguments(output_dir=str(tmp_path), max_tokens_per_batch=0)
    with pytest.raises(UserError, match="--auto_find_batch_size"):
        EncoderTrainingArguments(
            output_dir=str(tmp_path), max_tokens_per_batch=512, auto_find_batch_size=True
        )

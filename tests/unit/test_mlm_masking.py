"""Masking: rates and the 80/10/10 split measured over many tokens, whole words, special tokens, seeds."""

import math
import random

import pytest
import torch

from encoder_tasks.errors import UserError
from encoder_tasks.tasks.mlm.masking import MaskingCollator, check_masking, word_start_flags
from encoder_tasks.testing import make_tiny_tokenizer

LETTERS = "abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer()


def random_texts(n, seed=0):
    rng = random.Random(seed)
    # Random letter strings split into several word pieces (x ##y ##z): words of 1-6 tokens.
    return [
        " ".join(
            "".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(20, 40))
        )
        for _ in range(n)
    ]


def features(tok, texts):
    enc = tok(texts, return_offsets_mapping=True)
    return [
        {
            "input_ids": enc["input_ids"][i],
            "word_starts": word_start_flags(enc.word_ids(i), enc["offset_mapping"][i], text),
        }
        for i, text in enumerate(texts)
    ]


def within(observed, expected, n, sigmas=5.0):
    """Binomial proportion within ``sigmas`` standard deviations (false alarm rate < 1e-6)."""
    return abs(observed - expected) <= sigmas * math.sqrt(expected * (1 - expected) / n)


def measure(collate, feats):
    batch = collate(feats)
    originals = torch.full_like(batch["input_ids"], -1)
    for i, f in enumerate(feats):
        originals[i, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
    picked = batch["labels"] != -100
    maskable = (batch["attention_mask"] == 1) & ~torch.isin(originals, collate.special_ids)
    seen = batch["input_ids"][picked]
    true = originals[picked]
    return {
        "maskable": int(maskable.sum()),
        "picked": int(picked.sum()),
        "mask": int((seen == collate.mask_id).sum()),
        "kept": int((seen == true).sum()),
        "random": int(((seen != collate.mask_id) & (seen != true)).sum()),
        "labels_are_originals": bool((batch["labels"][picked] == true).all()),
    }


@pytest.mark.parametrize(
    ("rate", "replace", "random_prob"), [(0.15, 0.8, 0.1), (0.3, 0.8, 0.1), (0.2, 0.5, 0.5)]
)
@pytest.mark.parametrize("whole_word", [False, True])
def test_rates_and_split(tok, rate, replace, random_prob, whole_word):
    feats = features(tok, random_texts(400))
    collate = MaskingCollator(
        tok,
        mask_rate=rate,
        mask_replace_prob=replace,
        random_replace_prob=random_prob,
        whole_word_masking=whole_word,
    )
    torch.manual_seed(0)
    m = measure(collate, feats)
    assert m["labels_are_originals"]
    if whole_word:
        # Words, not tokens, are drawn: the token proportion has the variance of ~n/avg_word_len draws.
        words = sum(sum(f["word_starts"][1:-1]) for f in feats)
        assert within(m["picked"] / m["maskable"], rate, words)
    else:
        assert within(m["picked"] / m["maskable"], rate, m["maskable"])
    keep = 1 - replace - random_prob
    n = m["picked"]
    assert within(m["mask"] / n, replace, n)
    # A random replacement can draw the original token (1 in ~130 here): counted as kept.
    assert within(m["random"] / n, random_prob, n, sigmas=6)
    if keep > 0:
        assert within(m["kept"] / n, keep, n, sigmas=6)
    else:
        assert m["kept"] / n < 0.01


def test_whole_word_masking_never_splits_a_word(tok):
    feats = features(tok, random_texts(100, seed=1))
    collate = MaskingCollator(tok, mask_rate=0.4, whole_word_masking=True)
    batch = collate(feats)
    multi = 0
    for i, f in enumerate(feats):
        picked = (batch["labels"][i, : len(f["input_ids"])] != -100).tolist()
        starts = f["word_starts"]
        word = []
        for j in range(1, len(starts) - 1):  # inside [CLS] ... [SEP]
            if starts[j] and word:
                assert len(set(word)) == 1, f"word split at sequence {i}, token {j}"
                multi += len(word) > 1
                word = []
            word.append(picked[j])
    assert multi > 50  # multi-token words were really exercised


def test_special_tokens_and_padding_never_masked(tok):
    texts = ["the film was good [UNK] and fun", "a cat"]
    feats = features(tok, texts)
    collate = MaskingCollator(tok, mask_rate=0.99, mask_replace_prob=0.0, random_replace_prob=1.0)
    for seed in range(20):
        torch.manual_seed(seed)
        batch = collate(feats)
        ids = batch["input_ids"]
        special = torch.isin(ids, collate.special_ids)
        for i, f in enumerate(feats):
            original = torch.tensor(f["input_ids"])
            is_special = torch.isin(original, collate.special_ids)
            assert (batch["labels"][i, : len(original)][is_special] == -100).all()
            assert (ids[i, : len(original)][is_special] == original[is_special]).all()
        assert (batch["labels"][batch["attention_mask"] == 0] == -100).all()
        # random replacements are never special tokens
        picked = batch["labels"] != -100
        assert not special[picked].any()


def test_evaluation_masks_are_deterministic_and_independent_of_batching(tok):
    feats = features(tok, random_texts(12, seed=3))
    collate = MaskingCollator(tok, eval_seed=7).for_evaluation()
    whole = collate(feats)
    torch.manual_seed(123)  # the global RNG plays no part
    again = collate(feats)
    assert torch.equal(whole["input_ids"], again["input_ids"]) and torch.equal(
        whole["labels"], again["labels"]
    )
    # same sequence, same mask, whatever batch it lands in and in whatever order
    single = collate([feats[5]])
    length = len(feats[5]["input_ids"])
    assert torch.equal(single["labels"][0, :length], whole["labels"][5, :length])
    reordered = collate(feats[::-1])
    assert torch.equal(
        reordered["labels"][-1, : len(feats[0]["input_ids"])],
        whole["labels"][0, : len(feats[0]["input_ids"])],
    )
    other = MaskingCollator(tok, eval_seed=8).for_evaluation()(feats)
    assert not torch.equal(other["labels"], whole["labels"])


def test_training_masks_follow_the_global_seed(tok):
    feats = features(tok, random_texts(4))
    collate = MaskingCollator(tok)
    torch.manual_seed(1)
    a = collate(feats)
    b = collate(feats)
    torch.manual_seed(1)
    c = collate(feats)
    assert torch.equal(a["labels"], c["labels"]) and not torch.equal(a["labels"], b["labels"])


def test_pad_to_multiple(tok):
    batch = MaskingCollator(tok, pad_to_multiple_of=8)(features(tok, ["the cat sat"]))
    assert batch["input_ids"].shape[1] == 8 and batch["attention_mask"].sum() == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0, 0.8, 0.1), "mask_rate"),
        ((1.5, 0.8, 0.1), "mask_rate"),
        ((0.15, 0.9, 0.2), "must not exceed 1"),
        ((0.15, -0.1, 0.1), "mask_replace_prob"),
    ],
)
def test_bad_rates(args, message):
    with pytest.raises(UserError, match=message):
        check_masking(*args)


def test_tokenizer_without_mask_token():
    tok = make_tiny_tokenizer()
    tok.mask_token = None
    with pytest.raises(UserError, match="no mask token"):
        MaskingCollator(tok)


def test_chinese_words_from_segmenter_else_characters():
    text = "我爱北京天安门"
    word_ids = [None, 0, 1, 2, 3, 4, 5, 6, None]
    offsets = [(0, 0)] + [(i, i + 1) for i in range(7)] + [(0, 0)]
    assert word_start_flags(word_ids, offsets, text) == [1, 1, 1, 1, 1, 1, 1, 1, 1]  # characters
    segment = lambda t: ["我", "爱", "北京", "天安门"]  # noqa: E731 - a fixed segmenter
    assert word_start_flags(word_ids, offsets, text, segment) == [1, 1, 1, 1, 0, 1, 0, 0, 1]


def test_jieba_segmenter_when_installed():
    pytest.importorskip("jieba")
    from encoder_tasks.tasks.mlm.masking import load_segmenter

    segment = load_segmenter("auto")
    assert "".join(segment("我爱北京天安门")) == "我爱北京天安门"
    assert any(len(w) > 1 for w in segment("我爱北京天安门"))
    with pytest.raises(UserError, match="chinese_segmenter"):
        load_segmenter("thulac")

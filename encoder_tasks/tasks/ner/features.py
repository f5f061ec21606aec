"""Words to model inputs and back: sub-word alignment, sliding windows, stitching.

A sentence (a list of words) becomes one or more *features*. Each feature holds the
sub-token ids of a run of whole words and ``word_index``: the position of each word's
first sub-token. Sentences longer than ``max_length`` sub-tokens are split into windows
of whole words that overlap by about ``stride`` sub-tokens; every word is in at least one
window, and a word longer than a whole window is cut to its first sub-tokens (its first
sub-token, the one that is labelled, always stays). Predictions per word are stitched
back from the window where the word has the most context on both sides.

Example:
    >>> from encoder_tasks.testing import make_tiny_tokenizer
    >>> tok = make_tiny_tokenizer()
    >>> feats = featurize([["john", "smith", "lives", "in", "paris"]], tok, max_length=5, stride=1)
    >>> [(f["word_offset"], len(f["word_index"])) for f in feats]
    [(0, 3), (2, 3)]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

logger = logging.getLogger(__name__)

IGNORE = -100


def plan_windows(counts: list[int], budget: int, stride: int) -> list[tuple[int, int]]:
    """Windows ``(start, end)`` over words with ``counts`` sub-tokens each.

    Each window holds at most ``budget`` sub-tokens (a word over budget counts as
    ``budget``: it is cut), neighbours share up to ``stride`` sub-tokens of whole words,
    and together they cover every word.

    Example:
        >>> plan_windows([1, 1, 1, 1, 1], budget=3, stride=1)
        [(0, 3), (2, 5)]
    """
    if budget < 1:
        raise ValueError("budget must be at least 1 sub-token")
    n = len(counts)
    cost = [min(c, budget) for c in counts]
    windows = []
    start = 0
    while True:
        end, total = start, 0
        while end < n and total + cost[end] <= budget:
            total += cost[end]
            end += 1
        windows.append((start, end))
        if end >= n:
            return windows
        # Step back over whole words for the overlap, but always move forward.
        nxt, shared = end, 0
        while nxt - 1 > start and shared + cost[nxt - 1] <= stride:
            shared += cost[nxt - 1]
            nxt -= 1
        start = nxt


def _first_positions(word_ids: list[int | None]) -> dict[int, int]:
    first: dict[int, int] = {}
    for position, word in enumerate(word_ids):
        if word is not None and word not in first:
            first[word] = position
    return first


def _safe_words(tokenizer, sentences: list[list[str]]) -> tuple[list[list[str]], int]:
    """Words that tokenise to nothing (a lone zero-width or control character) would vanish;
    they are replaced by the unknown token so every word keeps a position."""
    encoded = tokenizer(sentences, is_split_into_words=True, add_special_tokens=False)
    replaced = 0
    out = []
    placeholder = tokenizer.unk_token or "?"
    for i, words in enumerate(sentences):
        present = {w for w in encoded.word_ids(i) if w is not None}
        if len(present) == len(words):
            out.append(words)
            continue
        fixed = [w if j in present else placeholder for j, w in enumerate(words)]
        replaced += len(words) - len(present)
        out.append(fixed)
    return out, replaced


def featurize(
    sentences: list[list[str]],
    tokenizer,
    max_length: int,
    stride: int = 32,
    labels: list[list[int]] | None = None,
    all_subtokens: bool = False,
    continuation: list[int] | None = None,
) -> list[dict]:
    """Tokenise word lists into features (see the module docstring).

    ``labels`` (per word ids) become ``labels`` per feature word; with ``all_subtokens``
    each feature also gets ``subtoken_targets``: the word's label on its first sub-token
    and ``continuation[label]`` (``I-X`` for ``B-X``) on the others, ``-100`` on specials.
    """
    sentences, replaced = _safe_words(tokenizer, sentences)
    if replaced:
        logger.warning("%d words tokenise to nothing and were read as %s", replaced, tokenizer.unk_token)
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    budget = max_length - specials
    if budget < 1:
        raise ValueError(f"max_length={max_length} leaves no room next to {specials} special tokens")
    whole = tokenizer(sentences, is_split_into_words=True, truncation=False)
    plans: list[tuple[int, int, int]] = []  # (sentence, start word, end word)
    for i, words in enumerate(sentences):
        if len(whole["input_ids"][i]) <= max_length:
            plans.append((i, 0, len(words)))
            continue
        counts = np.bincount([w for w in whole.word_ids(i) if w is not None], minlength=len(words))
        plans.extend((i, s, e) for s, e in plan_windows(counts.tolist(), budget, stride))
    windowed = [p for p in plans if not (p[1] == 0 and p[2] == len(sentences[p[0]]))]
    window_enc = None
    if windowed:
        window_enc = tokenizer(
            [sentences[i][s:e] for i, s, e in windowed],
            is_split_into_words=True,
            truncation=True,
            max_length=max_length,
        )
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in whole]
    features = []
    w = 0
    for i, start, end in plans:
        if start == 0 and end == len(sentences[i]):
            source, row = whole, i
        else:
            source, row = window_enc, w
            w += 1
        word_ids = source.word_ids(row)
        first = _first_positions(word_ids)
        n_words = end - start
        if len(first) != n_words:  # cannot happen: every window holds whole words within budget
            raise RuntimeError(f"sentence {i}: {n_words - len(first)} words lost in a window")
        feature = {k: source[k][row] for k in keys}
        feature["word_index"] = [first[j] for j in range(n_words)]
        feature["example_index"] = i
        feature["word_offset"] = start
        feature["sentence_start"] = start == 0
        feature["length"] = len(feature["input_ids"])
        if labels is not None:
            word_labels = labels[i][start:end]
            feature["labels"] = list(word_labels)
            if all_subtokens:
                targets = []
                for position, word in enumerate(word_ids):
                    if word is None:
                        targets.append(IGNORE)
                    elif first[word] == position:
                        targets.append(word_labels[word])
                    else:
                        label = word_labels[word]
                        targets.append(continuation[label] if label >= 0 and continuation else label)
                feature["subtoken_targets"] = targets
        features.append(feature)
    for index, feature in enumerate(features):
        feature["feature_index"] = index
    return features


def stitch(
    features: list[dict], per_feature: list[np.ndarray], sentence_lengths: list[int]
) -> list[np.ndarray]:
    """Per-word rows of each sentence from its windows' rows, taking each word from the
    window where it sits farthest from a cut edge (the sentence's own ends are not cuts).

    Example:
        >>> feats = [{"example_index": 0, "word_offset": 0}, {"example_index": 0, "word_offset": 2}]
        >>> rows = [np.array([[0.0], [0.0], [0.0]]), np.array([[1.0], [1.0], [1.0]])]
        >>> stitch(feats, rows, [5])[0].ravel().tolist()
        [0.0, 0.0, 0.0, 1.0, 1.0]
    """
    width = per_feature[0].shape[-1] if per_feature else 0
    out = [np.zeros((n, width), dtype=np.float32) for n in sentence_lengths]
    best = [np.full(n, -1.0) for n in sentence_lengths]
    for feature, rows in zip(features, per_feature):
        sentence, offset = feature["example_index"], feature["word_offset"]
        n = rows.shape[0]
        total = sentence_lengths[sentence]
        j = np.arange(n, dtype=np.float64)
        left = j if offset > 0 else np.full(n, np.inf)
        right = (n - 1 - j) if offset + n < total else np.full(n, np.inf)
        context = np.minimum(left, right)
        target = best[sentence][offset : offset + n]
        better = context > target
        out[sentence][offset : offset + n][better] = rows[better]
        target[better] = context[better]
    missing = [i for i, b in enumerate(best) if (b < 0).any()]
    if missing:
        raise RuntimeError(f"sentences {missing[:5]} have words no window covers")
    return out


@dataclass
class TaggingCollator:
    """Pad token inputs (tokenizer), ``word_index`` (-1), word ``labels`` and sub-token
    targets (-100); pass ``feature_index`` and ``sentence_start`` through.

    Example:
        >>> from encoder_tasks.testing import make_tiny_tokenizer
        >>> collate = TaggingCollator(make_tiny_tokenizer())
        >>> batch = collate([{"input_ids": [2, 5, 3], "word_index": [1], "labels": [0]},
        ...                  {"input_ids": [2, 5, 6, 3], "word_index": [1, 2], "labels": [1, 2]}])
        >>> batch["word_index"].tolist(), batch["labels"].tolist()
        ([[1, -1], [1, 2]], [[0, -100], [1, 2]])
    """

    tokenizer: object
    pad_to_multiple_of: int | None = None

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        inputs = [
            {k: f[k] for k in ("input_ids", "attention_mask", "token_type_ids") if f.get(k) is not None}
            for f in features
        ]
        batch = dict(
            self.tokenizer.pad(
                inputs, padding=True, pad_to_multiple_of=self.pad_to_multiple_of or None, return_tensors="pt"
            )
        )
        width = max(len(f["word_index"]) for f in features)
        batch["word_index"] = _pad([f["word_index"] for f in features], width, -1)
        if features[0].get("labels") is not None:
            batch["labels"] = _pad([f["labels"] for f in features], width, IGNORE)
        if features[0].get("subtoken_targets") is not None:
            seq = batch["input_ids"].shape[1]
            batch["subtoken_targets"] = _pad([f["subtoken_targets"] for f in features], seq, IGNORE)
        if "sentence_start" in features[0]:
            batch["sentence_start"] = torch.tensor([bool(f["sentence_start"]) for f in features])
        if "feature_index" in features[0]:
            batch["feature_index"] = torch.tensor([int(f["feature_index"]) for f in features])
        return batch


def _pad(rows: list[list[int]], width: int, value: int) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
    return out

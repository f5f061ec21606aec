"""Masking for masked-language modelling: which tokens to predict, and what the model sees.

:class:`MaskingCollator` picks a fraction ``mask_rate`` of the real tokens (never special
tokens, never padding) and replaces each picked token by ``[MASK]`` with probability
``mask_replace_prob``, by a random ordinary token with probability ``random_replace_prob``, and
leaves it unchanged otherwise (BERT's 80/10/10). ``labels`` hold the original id at picked
positions and -100 elsewhere.

Whole-word masking picks words instead of tokens: every token of a picked word is masked,
and no word is ever split. Word boundaries come from the ``word_starts`` column written at
tokenisation (from ``word_ids()``, or from a Chinese segmenter, see
:func:`word_start_flags`). Each word is picked with probability ``mask_rate``, so each token
is masked with probability ``mask_rate`` in expectation, exactly as in token masking.

Identifier masking (``masking="identifiers"``, for source code) picks identifiers instead: only
tokens inside an identifier or a dotted API name (``os.path.join``: one name) can be picked, and
every token of a picked one is masked (a ``snake_case`` name that the tokenizer cuts into
``snake``, ``_``, ``case`` is hidden whole, so the model cannot copy one half from the other).
The spans come from the ``identifiers`` column (:func:`encoder_tasks.data.code.identifier_flags`:
1 starts an identifier, 2 continues it, 0 is not one). So that the three maskings predict as many
tokens, each identifier is picked with probability ``mask_rate * real tokens / identifier tokens``
(at most 1): a ``mask_rate`` share of the sequence's tokens in expectation, all on identifiers.
The 80/10/10 rule then applies to every picked token as in the other modes. A sequence without
identifiers has nothing to predict.

With ``seed`` set the masks depend only on the seed and the sequence itself (not on batch
composition or order), so evaluation numbers are comparable between runs.
"""

from __future__ import annotations

import logging
import re
import zlib
from dataclasses import dataclass, replace

import numpy as np
import torch

from ...errors import UserError
from .args import check_masking, check_segmenter, masking_mode

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]")


# ---- word boundaries ----------------------------------------------------------------------
def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def load_segmenter(choice: str):
    """The Chinese word segmenter to use: ``auto`` (jieba when installed), ``jieba`` or ``none``.

    Returns a function ``text -> list of words`` or None (masking then works character by
    character for Chinese, which is what ``word_ids()`` gives: every CJK character is a word).
    """
    check_segmenter(choice)
    if choice == "none":
        return None
    try:
        import jieba
    except ImportError:
        if choice == "jieba":
            raise UserError("--chinese_segmenter jieba: jieba is not installed (pip install jieba)") from None
        return None
    jieba.setLogLevel(logging.WARNING)
    return lambda text: list(jieba.cut(text))


def word_start_flags(word_ids: list, offsets: list, text: str, segmenter=None) -> list[int]:
    """1 where a token starts a word, else 0 (special tokens are their own word).

    Words are what the tokenizer's pre-tokenizer yields (``word_ids()``); for text with CJK
    characters and a ``segmenter``, tokens are also joined into the segmenter's words, so a
    two-character Chinese word is masked as a whole.

    Example:
        >>> word_start_flags([None, 0, 0, 1, None], [(0, 0), (0, 3), (3, 5), (6, 9), (0, 0)], "playing fun")
        [1, 1, 0, 1, 1]
    """
    boundaries = None
    if segmenter is not None and has_cjk(text):
        boundaries, position = set(), 0
        for word in segmenter(text):
            boundaries.add(position)
            position += len(word)
    flags, previous = [], object()
    for word, (start, _end) in zip(word_ids, offsets):
        if word is None:
            flags.append(1)
            previous = object()
            continue
        starts = word != previous
        if starts and boundaries is not None and start not in boundaries:
            starts = False  # inside a segmenter word: same word as the token before
        flags.append(int(starts))
        previous = word
    return flags


# ---- the collator -------------------------------------------------------------------------
@dataclass
class MaskingCollator:
    """Mask, then pad, a list of tokenised examples into an MLM batch.

    Each feature holds ``input_ids`` and optionally ``word_starts`` (for whole-word masking).
    Returns ``input_ids``, ``attention_mask`` and ``labels`` (-100 where nothing is predicted).

    Example:
        >>> from encoder_tasks.testing import make_tiny_tokenizer
        >>> tok = make_tiny_tokenizer()
        >>> collate = MaskingCollator(tok, mask_rate=0.5, seed=0)
        >>> batch = collate([{"input_ids": tok("the film was good and fun")["input_ids"]}])
        >>> sorted(batch), bool((batch["labels"] != -100).any())
        (['attention_mask', 'input_ids', 'labels'], True)
    """

    tokenizer: object
    mask_rate: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    whole_word_masking: bool = False
    #: ``tokens``, ``words`` or ``identifiers`` (``whole_word_masking`` true means ``words``).
    masking: str = "tokens"
    seed: int | None = None
    pad_to_multiple_of: int | None = None
    #: Seed of the masks used for evaluation (see :meth:`for_evaluation`).
    eval_seed: int | None = 1234

    def __post_init__(self):
        check_masking(self.mask_rate, self.mask_replace_prob, self.random_replace_prob)
        self.mode = masking_mode(self.masking, self.whole_word_masking)
        tok = self.tokenizer
        if tok.mask_token_id is None:
            raise UserError(
                f"tokenizer {getattr(tok, 'name_or_path', '')!r} has no mask token; masked-LM training needs one"
            )
        self.mask_id = int(tok.mask_token_id)
        self.pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else 0)
        special = sorted({int(i) for i in tok.all_special_ids} | {self.pad_id})
        self.special_ids = torch.tensor(special, dtype=torch.long)
        # Random replacements are ordinary tokens: a random [CLS] would teach nothing.
        vocab = len(tok)
        ordinary = np.setdiff1d(np.arange(vocab), np.array(special))
        self.ordinary_ids = torch.from_numpy(ordinary).long()

    def for_evaluation(self) -> MaskingCollator:
        """The same collator with fixed, content-seeded masks (``eval_seed``)."""
        return replace(self, seed=self.eval_seed)

    def _generator(self, ids: torch.Tensor) -> torch.Generator | None:
        if self.seed is None:
            return None  # the global RNG, seeded by the Trainer
        digest = zlib.crc32(ids.numpy().astype(np.int64).tobytes())
        return torch.Generator().manual_seed((self.seed * 1_000_003 + digest) % (2**63))

    def mask_one(self, input_ids, word_starts=None, identifiers=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Mask one unpadded sequence; returns (masked input ids, labels)."""
        ids = torch.as_tensor(input_ids, dtype=torch.long)
        gen = self._generator(ids)
        maskable = ~torch.isin(ids, self.special_ids)
        if self.mode == "identifiers":
            if identifiers is None:
                raise UserError(
                    "--masking identifiers: the examples carry no identifier spans (tokenise them with "
                    "--masking identifiers, which marks the identifiers of the code)"
                )
            picked = self._pick_identifiers(torch.as_tensor(identifiers, dtype=torch.long), maskable, gen)
        elif self.mode == "words" and word_starts is not None:
            starts = torch.as_tensor(word_starts, dtype=torch.long).clone()
            starts[0] = 1
            word_index = torch.cumsum(starts, 0) - 1  # the word each token belongs to
            picked_words = torch.rand(int(word_index[-1]) + 1, generator=gen) < self.mask_rate
            picked = picked_words[word_index] & maskable
        else:
            picked = (torch.rand(ids.shape, generator=gen) < self.mask_rate) & maskable
        labels = torch.where(picked, ids, torch.full_like(ids, IGNORE_INDEX))
        # One draw per token decides [MASK] / random / keep, so the split is exact in expectation.
        action = torch.rand(ids.shape, generator=gen)
        to_mask = picked & (action < self.mask_replace_prob)
        to_random = (
            picked
            & (action >= self.mask_replace_prob)
            & (action < self.mask_replace_prob + self.random_replace_prob)
        )
        masked = ids.clone()
        masked[to_mask] = self.mask_id
        if to_random.any():
            choice = torch.randint(len(self.ordinary_ids), (int(to_random.sum()),), generator=gen)
            masked[to_random] = self.ordinary_ids[choice]
        return masked, labels

    def _pick_identifiers(self, flags: torch.Tensor, maskable: torch.Tensor, gen) -> torch.Tensor:
        """Whole identifiers, each with the probability that gives ``mask_rate`` of the tokens."""
        inside = (flags > 0) & maskable
        count = int(inside.sum())
        if count == 0:
            return inside
        # Units come from the flags alone: a new identifier where one starts, or where one continues
        # after a token outside any (a block cut in the middle of a name). An unknown token inside
        # a name ([UNK] is a special token) stays as it is; the rest of the name is masked.
        before = torch.cat([torch.zeros(1, dtype=torch.long), flags[:-1]])
        starts = (flags == 1) | ((flags == 2) & (before == 0))
        unit = torch.cumsum(starts.long(), 0) - 1
        rate = min(1.0, self.mask_rate * int(maskable.sum()) / count)
        picked_units = torch.rand(int(unit.max()) + 1, generator=gen) < rate
        return inside & picked_units[unit.clamp(min=0)]

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        rows = [self.mask_one(f["input_ids"], f.get("word_starts"), f.get("identifiers")) for f in features]
        length = max(len(ids) for ids, _ in rows)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        input_ids = torch.full((len(rows), length), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), length), IGNORE_INDEX, dtype=torch.long)
        attention = torch.zeros((len(rows), length), dtype=torch.long)
        for i, (ids, lab) in enumerate(rows):
            input_ids[i, : len(ids)] = ids
            labels[i, : len(ids)] = lab
            attention[i, : len(ids)] = 1
        return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}

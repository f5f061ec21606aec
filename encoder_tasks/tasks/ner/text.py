"""Raw text to words with character offsets, and vocabulary extension for CJK characters.

Two ways to cut raw text into the words a tagger was trained on:
- ``word``: words, numbers and punctuation marks, English-style (``It's`` -> ``It 's``;
  ``U.S`` and ``e-mail`` stay whole), with every CJK character a word of its own;
- ``char``: every non-space character is a word (Chinese character-level corpora).

Example:
    >>> split_words("John lives in New York.", "word")
    [('John', 0, 4), ('lives', 5, 10), ('in', 11, 13), ('New', 14, 17), ('York', 18, 22), ('.', 22, 23)]
    >>> split_words("吴重阳，男", "char")[:2]
    [('吴', 0, 1), ('重', 1, 2)]
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable

# Han (incl. extensions and compatibility ideographs), kana, Hangul, CJK punctuation, fullwidth forms.
_CJK_RANGES = (
    (0x3000, 0x303F),
    (0x3040, 0x30FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF),
    (0x20000, 0x2FA1F),
)
_CJK_CLASS = "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _CJK_RANGES)
_LETTERS = rf"[^\W{_CJK_CLASS}]+"
# A CJK character | a word with inner '.'/'-' | a clitic after a word ('s, 're, n't -> n 't) | any other mark.
_WORD = re.compile(rf"[{_CJK_CLASS}]|{_LETTERS}(?:[.\-]{_LETTERS})*|(?<=\w)['’]{_LETTERS}|[^\s{_CJK_CLASS}]")


def is_cjk(char: str) -> bool:
    """True for a CJK ideograph, kana, Hangul syllable or CJK/fullwidth punctuation."""
    code = ord(char)
    return any(a <= code <= b for a, b in _CJK_RANGES)


def split_words(text: str, level: str = "word") -> list[tuple[str, int, int]]:
    """``(word, start, end)`` character spans of the words of ``text``."""
    if level == "char":
        return [(c, i, i + 1) for i, c in enumerate(text) if not c.isspace()]
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def join_words(words: list[str], separator: str) -> tuple[str, list[tuple[int, int]]]:
    """Text of pre-tokenised words joined by ``separator`` and each word's character span."""
    spans = []
    position = 0
    for i, word in enumerate(words):
        if i:
            position += len(separator)
        spans.append((position, position + len(word)))
        position += len(word)
    return separator.join(words), spans


def guess_level(sentences: Iterable[list[str]]) -> str:
    """``char`` when nearly every token is one character (a character-level corpus)."""
    total = single = 0
    for words in sentences:
        total += len(words)
        single += sum(len(w) == 1 for w in words)
    return "char" if total and single / total >= 0.95 else "word"


def missing_characters(
    tokenizer, sentences: Iterable[list[str]], mode: str = "auto", min_count: int = 2
) -> list[str]:
    """Characters of the data the tokenizer only knows as unknown (``[UNK]``).

    ``auto`` looks at CJK characters only (the case of English vocabularies on Chinese
    text), ``all`` at every character; characters seen fewer than ``min_count`` times are
    left out (their embeddings would barely train). Byte-level tokenizers, which have no
    unknown token, never miss a character.

    Example:
        >>> from encoder_tasks.testing import make_tiny_tokenizer
        >>> missing_characters(make_tiny_tokenizer(), [["高", "勇"], ["高", "a"]], min_count=2)
        ['高']
    """
    if mode == "none" or tokenizer.unk_token_id is None:
        return []
    counts = Counter(unicodedata.normalize("NFC", c) for words in sentences for w in words for c in w)
    candidates = sorted(
        c for c, n in counts.items() if n >= min_count and not c.isspace() and (mode == "all" or is_cjk(c))
    )
    if not candidates:
        return []
    encoded = tokenizer(candidates, add_special_tokens=False)["input_ids"]
    unk = tokenizer.unk_token_id
    return [c for c, ids in zip(candidates, encoded) if not ids or unk in ids]

"""Question + context windows and answer spans: the token <-> character bookkeeping of QA.

- :func:`make_windows` cuts question + context pairs into overlapping windows with the fast
  tokenizer's overflow and offsets, and marks which tokens are context;
- :func:`label_windows` turns a character span into start/end token labels per window (the
  "no answer" position where the answer is not wholly inside).

:mod:`.scoring` goes back: the best answer spans of one question over all its windows.

Example:
    >>> from encoder_tasks.backbone import load_tokenizer
    >>> from encoder_tasks.testing import make_tiny_model
    >>> tok = load_tokenizer(make_tiny_model("bert"))
    >>> context = "john smith lives in paris"
    >>> w = make_windows(tok, ["who lives in paris ?"], [context], max_length=32, doc_stride=4)
    >>> starts, ends = label_windows(w, [(0, 10)])
    >>> context[w.offsets[0][starts[0]][0] : w.offsets[0][ends[0]][1]]
    'john smith'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import UserError


@dataclass
class Windows:
    """Tokenised windows of a set of examples, with what labelling and post-processing need.

    ``offsets[i][t]`` is the character span of token ``t`` of window ``i`` in its context, or
    None for tokens that are not context (question, special tokens): only context tokens can
    be part of an answer. ``null_index[i]`` is the position that stands for "no answer".
    """

    encodings: dict[str, list]
    example_index: list[int]
    offsets: list[list[tuple[int, int] | None]]
    null_index: list[int]

    def __len__(self) -> int:
        return len(self.example_index)


def resolve_context_position(tokenizer, setting: str) -> str:
    """``first`` or ``second`` for ``--context_position`` (``auto`` asks the tokenizer).

    Example:
        >>> class LeftPadding: padding_side = "left"
        >>> resolve_context_position(LeftPadding(), "auto"), resolve_context_position(LeftPadding(), "second")
        ('first', 'second')
    """
    if setting != "auto":
        return setting
    # XLNet-style tokenizers pad on the left and put the context first (as run_qa.py decides).
    return "first" if getattr(tokenizer, "padding_side", "right") == "left" else "second"


def _truncate_questions(tokenizer, questions: list[str], max_tokens: int) -> tuple[list[str], int]:
    """Cut questions to ``max_tokens`` tokens (at a token's character end); also return the longest."""
    encoded = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
    out, longest = [], 0
    for question, offsets in zip(questions, encoded["offset_mapping"]):
        if len(offsets) > max_tokens:
            question = question[: offsets[max_tokens - 1][1]]
        longest = max(longest, min(len(offsets), max_tokens))
        out.append(question)
    return out, longest


def make_windows(
    tokenizer,
    questions: list[str],
    contexts: list[str],
    max_length: int,
    doc_stride: int,
    max_question_length: int = 64,
    context_position: str = "second",
) -> Windows:
    """Encode question + context pairs as overlapping windows over the context.

    Uses the fast tokenizer's overflow (``stride`` = ``doc_stride`` tokens shared by
    neighbouring windows) and ``offset_mapping``; context tokens are found from the
    tokenizer's ``sequence_ids`` (so no family's layout is assumed), and the "no answer"
    position is the tokenizer's own CLS token when it has one in the window, else its first
    special token, else position 0.

    Example:
        >>> from encoder_tasks.backbone import load_tokenizer
        >>> from encoder_tasks.testing import make_tiny_model
        >>> tok = load_tokenizer(make_tiny_model("bert"))
        >>> w = make_windows(tok, ["who ?"], ["john smith lives in paris " * 6], max_length=24, doc_stride=4)
        >>> len(w) > 1, set(w.example_index)
        (True, {0})
    """
    questions, longest = _truncate_questions(tokenizer, list(questions), max_question_length)
    room = max_length - tokenizer.num_special_tokens_to_add(pair=True) - longest
    if room <= doc_stride:
        raise UserError(
            f"max_length={max_length} leaves {room} tokens for the context after the question "
            f"({longest} tokens) and special tokens, which must exceed doc_stride={doc_stride}: "
            "raise --max_length or lower --doc_stride / --max_question_length"
        )
    context_first = context_position == "first"
    first, second = (contexts, questions) if context_first else (questions, contexts)
    enc = tokenizer(
        list(first),
        list(second),
        truncation="only_first" if context_first else "only_second",
        max_length=max_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=False,
    )
    context_id = 0 if context_first else 1
    cls_id = getattr(tokenizer, "cls_token_id", None)
    offsets_out, nulls = [], []
    for i, ids in enumerate(enc["input_ids"]):
        sequence_ids = enc.sequence_ids(i)
        context = contexts[enc["overflow_to_sample_mapping"][i]]
        offsets_out.append(
            [
                _trim(context, *offset) if seq == context_id else None
                for offset, seq in zip(enc["offset_mapping"][i], sequence_ids)
            ]
        )
        if cls_id is not None and cls_id in ids:
            nulls.append(ids.index(cls_id))
        else:
            specials = [t for t, seq in enumerate(sequence_ids) if seq is None]
            nulls.append(specials[0] if specials else 0)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    return Windows(
        encodings={k: enc[k] for k in keys},
        example_index=list(enc["overflow_to_sample_mapping"]),
        offsets=offsets_out,
        null_index=nulls,
    )


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """Offsets without surrounding whitespace (byte-level BPE tokens without trim_offsets
    include the space before a word; an answer should not)."""
    while start < end - 1 and text[start].isspace():
        start += 1
    while end > start + 1 and text[end - 1].isspace():
        end -= 1
    return start, end


def span_to_tokens(offsets: list[tuple[int, int] | None], start: int, end: int) -> tuple[int, int] | None:
    """Token positions ``(first, last)`` covering characters ``[start, end)`` in one window.

    None when the answer is not wholly inside the window's context tokens.

    Example:
        >>> span_to_tokens([None, (0, 4), (5, 10), (11, 14), None], 5, 14)
        (2, 3)
    """
    context = [t for t, offset in enumerate(offsets) if offset is not None]
    if not context:
        return None
    first, last = context[0], context[-1]
    if offsets[first][0] > start or offsets[last][1] < end:
        return None
    token_start = first
    # the first token that ends after the answer starts (skips tokens wholly before it)
    while token_start <= last and (offsets[token_start] is None or offsets[token_start][1] <= start):
        token_start += 1
    token_end = last
    # the last token that starts before the answer ends
    while token_end >= first and (offsets[token_end] is None or offsets[token_end][0] >= end):
        token_end -= 1
    if token_start > token_end:
        return None
    return token_start, token_end


def label_windows(windows: Windows, spans: list[tuple[int, int] | None]) -> tuple[list[int], list[int]]:
    """Start/end token labels per window; the null position where the answer is not inside."""
    starts, ends = [], []
    for i, example in enumerate(windows.example_index):
        span = spans[example]
        tokens = span_to_tokens(windows.offsets[i], *span) if span is not None else None
        if tokens is None:
            tokens = (windows.null_index[i], windows.null_index[i])
        starts.append(tokens[0])
        ends.append(tokens[1])
    return starts, ends


def windows_dataset(windows: Windows, starts=None, ends=None, with_index: bool = False):
    """The windows as a ``datasets.Dataset`` (with ``length`` for length-grouped batches; with
    ``feature_index`` for evaluation, see :class:`~encoder_tasks.tasks.qa.trainer.QATrainer`).

    Example:
        >>> w = Windows({"input_ids": [[2, 5, 3]]}, [0], [[None, (0, 2), None]], [0])
        >>> windows_dataset(w, [1], [1], with_index=True)[0]["feature_index"]
        0
    """
    import datasets

    columns: dict[str, Any] = dict(windows.encodings)
    columns["length"] = [len(ids) for ids in windows.encodings["input_ids"]]
    if starts is not None:
        columns["start_positions"] = starts
        columns["end_positions"] = ends
    if with_index:
        columns["feature_index"] = list(range(len(windows)))
    return datasets.Dataset.from_dict(columns)

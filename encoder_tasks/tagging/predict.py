"""Tagging with a saved model: pre-tokenised sentences or raw text in, tags (in the training
data's scheme) and entities with character offsets and scores out.

Example:
    >>> from encoder_tasks.backbone import load_tokenizer  # doctest: +SKIP
    >>> from encoder_tasks.tasks.ner import TokenTagger  # doctest: +SKIP
    >>> model = TokenTagger.from_pretrained("runs/ner/wnut17-minilm")  # doctest: +SKIP
    >>> predict_texts(model, load_tokenizer("runs/ner/wnut17-minilm"), ["John lives in Paris."])  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..tag_schemes import from_iob2, spans_from_iob2
from .decoding import cpu_crf_copy, decode, decoding_mode
from .features import TaggingCollator, featurize, stitch
from .text import join_words, split_words


@torch.inference_mode()
def _scores(model, tokenizer, sentences, max_length, stride, batch_size) -> list[np.ndarray]:
    features = featurize(sentences, tokenizer, max_length, stride)
    collate = TaggingCollator(tokenizer)
    order = sorted(range(len(features)), key=lambda i: features[i]["length"])
    rows: list[Any] = [None] * len(features)
    device = model.device
    from ..tracking import progress

    for begin in progress(range(0, len(order), batch_size), desc="tagging", unit="batch"):
        chunk = order[begin : begin + batch_size]
        batch = collate([features[i] for i in chunk])
        batch.pop("feature_index")
        out = model(**{k: v.to(device) for k, v in batch.items()})
        logits = out.logits.float().cpu().numpy()
        for row, i in enumerate(chunk):
            rows[i] = logits[row, : len(features[i]["word_index"])]
    return stitch(features, rows, [len(s) for s in sentences])


def predict_sentences(
    model,
    tokenizer,
    sentences: list[list[str]],
    batch_size: int = 64,
    max_length=None,
    stride=None,
) -> tuple[list[list[str]], list[np.ndarray]]:
    """IOB2 tags and per-word probabilities for pre-tokenised sentences (any length).

    Example:
        >>> model = TokenTagger.from_pretrained("runs/ner/wnut17")  # doctest: +SKIP
        >>> predict_sentences(model, tokenizer, [["John", "lives", "in", "Paris"]])[0]  # doctest: +SKIP
        [['B-person', 'O', 'O', 'B-location']]
    """
    meta = model.metadata
    max_length = max_length or meta.get("max_length") or tokenizer.model_max_length
    stride = meta.get("window_stride", 32) if stride is None else stride
    scores = _scores(model, tokenizer, sentences, max_length, stride, batch_size)
    crf = cpu_crf_copy(model)
    return decode(scores, meta["label_names"], crf, decoding_mode(meta))


def entities(words: list[str], spans: list[tuple[int, int]], text: str, iob2: list[str], probs) -> list[dict]:
    """Entities with character offsets into ``text`` and a score (mean probability of their tags)."""
    found = []
    for kind, start, end in spans_from_iob2(iob2):
        char_start, char_end = spans[start][0], spans[end - 1][1]
        found.append(
            {
                "type": kind,
                "text": text[char_start:char_end],
                "start": char_start,
                "end": char_end,
                "token_start": start,
                "token_end": end,
                "score": round(float(np.mean(probs[start:end])), 6),
            }
        )
    return found


def predict_texts(model, tokenizer, texts: list[str], **kwargs) -> list[dict]:
    """Tag raw texts: words cut as in training (``word`` or ``char``), entities with offsets.

    Example:
        >>> predict_texts(model, tokenizer, ["John lives in Paris."])[0]["entities"]  # doctest: +SKIP
        [{'type': 'PER', 'text': 'John', 'start': 0, 'end': 4, ...}, ...]
    """
    level = model.metadata.get("tokenization", "word")
    cut = [split_words(t, level) for t in texts]
    sentences = [[w for w, _, _ in words] for words in cut]
    return _results(
        model, tokenizer, texts, sentences, [[(s, e) for _, s, e in words] for words in cut], **kwargs
    )


def predict_tokens(model, tokenizer, sentences: list[list[str]], **kwargs) -> list[dict]:
    """Tag pre-tokenised sentences; character offsets refer to the tokens joined by the
    training data's separator (a space, or nothing for character-level data)."""
    separator = model.metadata.get("token_separator", " ")
    joined = [join_words(words, separator) for words in sentences]
    return _results(model, tokenizer, [t for t, _ in joined], sentences, [s for _, s in joined], **kwargs)


def _results(model, tokenizer, texts, sentences, spans, **kwargs) -> list[dict]:
    results: list[dict | None] = [None] * len(texts)
    nonempty = [i for i, words in enumerate(sentences) if words]
    tags, probs = (
        predict_sentences(model, tokenizer, [sentences[i] for i in nonempty], **kwargs)
        if nonempty
        else ([], [])
    )
    scheme = model.metadata["tag_scheme"]
    for i in range(len(texts)):
        results[i] = {"text": texts[i], "tokens": [], "tags": [], "entities": []}
    for i, iob2, p in zip(nonempty, tags, probs):
        results[i] = {
            "text": texts[i],
            "tokens": sentences[i],
            "tags": from_iob2(iob2, scheme),
            "entities": [] if scheme == "none" else entities(sentences[i], spans[i], texts[i], iob2, p),
        }
        if scheme == "none":
            results[i]["scores"] = [round(float(x), 6) for x in p]
    return results

"""Tagging with a saved model: pre-tokenised sentences or raw text in, tags (in the training
data's scheme) and entities with character offsets and scores out; ``predict`` over a file.

Example:
    >>> from encoder_tasks.backbone import load_tokenizer  # doctest: +SKIP
    >>> from encoder_tasks.tasks.ner.model import TokenTagger  # doctest: +SKIP
    >>> model = TokenTagger.from_pretrained("runs/ner/wnut17-minilm")  # doctest: +SKIP
    >>> predict_texts(model, load_tokenizer("runs/ner/wnut17-minilm"), ["John lives in Paris."])  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ...data.loading import Split
from ...errors import UserError
from ...predict import load_for_prediction, run_batches, stream_predictions
from .args import NerPredictArguments, NerSettings
from .decoding import cpu_crf_copy, decode, decoding_mode, entity_probabilities
from .features import TaggingCollator, featurize, stitch
from .reading import RECORD_SUFFIXES, read_sentences
from .schemes import from_iob2, spans_from_iob2
from .text import join_words, split_words

logger = logging.getLogger(__name__)


def predict_sentences(
    model,
    tokenizer,
    sentences: list[list[str]],
    batch_size: int = 64,
    max_length: int | None = None,
    stride: int | None = None,
    precision: str = "fp32",
) -> tuple[list[list[str]], list[np.ndarray]]:
    """IOB2 tags and per-word probabilities for pre-tokenised sentences (any length).

    ``max_length``/``stride`` default to the model's saved ones; ``precision`` as ``--precision``
    (the default leaves any surrounding autocast in charge).

    Example:
        >>> model = TokenTagger.from_pretrained("runs/ner/wnut17")  # doctest: +SKIP
        >>> predict_sentences(model, tokenizer, [["John", "lives", "in", "Paris"]])[0]  # doctest: +SKIP
        [['B-person', 'O', 'O', 'B-location']]
    """
    tags, probs, _ = _tag_sentences(model, tokenizer, sentences, batch_size, max_length, stride, precision)
    return tags, probs


def _tag_sentences(
    model, tokenizer, sentences, batch_size=64, max_length=None, stride=None, precision="fp32"
):
    """:func:`predict_sentences`, plus each sentence's stitched per-word scores (emissions)."""
    settings: NerSettings = model.settings
    # A tagger built by hand saved no max_length: it reads up to the tokenizer's own limit.
    max_length = max_length or settings.max_length or tokenizer.model_max_length
    stride = settings.window_stride if stride is None else stride
    features = featurize(sentences, tokenizer, max_length, stride)

    def word_rows(output, chunk: list[int]) -> list[np.ndarray]:
        logits = output.logits.float().cpu().numpy()
        return [logits[row, : len(features[i]["word_index"])] for row, i in enumerate(chunk)]

    rows = run_batches(
        model, features, TaggingCollator(tokenizer), batch_size, precision, read=word_rows, desc="tagging"
    )
    scores = stitch(features, rows, [len(s) for s in sentences])
    tags, probs = decode(scores, settings.label_names, cpu_crf_copy(model), decoding_mode(settings))
    return tags, probs, scores


def entities(
    words: list[str],
    spans: list[tuple[int, int]],
    text: str,
    iob2: list[str],
    probs,
    scored: list[tuple[str, int, int, float]] | None = None,
    abstain_below: float | None = None,
) -> list[dict]:
    """Entities with character offsets into ``text`` and a ``score``: the model's probability of
    the entity (``scored``, from :func:`~.decoding.entity_probabilities`: CRF forward-backward or
    the softmax product), else the mean probability of its tags.

    With ``abstain_below``, an entity scored under it keeps its span but has ``type`` None and an
    ``unsure`` field (its best type, probability and the threshold).
    """
    found = []
    given = {(start, end): p for _, start, end, p in scored or ()}
    for kind, start, end in spans_from_iob2(iob2):
        char_start, char_end = spans[start][0], spans[end - 1][1]
        score = given.get((start, end), float(np.mean(probs[start:end])))
        entity = {
            "type": kind,
            "text": text[char_start:char_end],
            "start": char_start,
            "end": char_end,
            "token_start": start,
            "token_end": end,
            "score": round(float(score), 6),
        }
        if abstain_below is not None and score < abstain_below:
            entity["type"] = None
            entity["unsure"] = {
                "best_type": kind,
                "probability": entity["score"],
                "abstain_below": abstain_below,
            }
        found.append(entity)
    return found


def predict_texts(model, tokenizer, texts: list[str], **kwargs) -> list[dict]:
    """Tag raw texts: words cut as in training (``word`` or ``char``), entities with offsets.

    Example:
        >>> predict_texts(model, tokenizer, ["John lives in Paris."])[0]["entities"]  # doctest: +SKIP
        [{'type': 'PER', 'text': 'John', 'start': 0, 'end': 4, ...}, ...]
    """
    level = model.settings.tokenization
    cut = [split_words(t, level) for t in texts]
    sentences = [[w for w, _, _ in words] for words in cut]
    return _results(
        model, tokenizer, texts, sentences, [[(s, e) for _, s, e in words] for words in cut], **kwargs
    )


def predict_tokens(model, tokenizer, sentences: list[list[str]], **kwargs) -> list[dict]:
    """Tag pre-tokenised sentences; character offsets refer to the tokens joined by the
    training data's separator (a space, or nothing for character-level data)."""
    separator = model.settings.token_separator
    joined = [join_words(words, separator) for words in sentences]
    return _results(model, tokenizer, [t for t, _ in joined], sentences, [s for _, s in joined], **kwargs)


def _results(model, tokenizer, texts, sentences, spans, abstain_below=None, **kwargs) -> list[dict]:
    results: list[dict | None] = [None] * len(texts)
    nonempty = [i for i, words in enumerate(sentences) if words]
    tags, probs, emissions = (
        _tag_sentences(model, tokenizer, [sentences[i] for i in nonempty], **kwargs)
        if nonempty
        else ([], [], [])
    )
    scheme = model.settings.tag_scheme
    scored = (
        entity_probabilities(emissions, tags, model.settings.label_names, cpu_crf_copy(model))
        if scheme != "none" and nonempty
        else [None] * len(tags)
    )
    for i in range(len(texts)):
        results[i] = {"text": texts[i], "tokens": [], "tags": [], "entities": []}
    for i, iob2, p, found in zip(nonempty, tags, probs, scored):
        results[i] = {
            "text": texts[i],
            "tokens": sentences[i],
            "tags": from_iob2(iob2, scheme),
            "entities": []
            if scheme == "none"
            else entities(sentences[i], spans[i], texts[i], iob2, p, found, abstain_below),
        }
        if scheme == "none":
            results[i]["scores"] = [round(float(x), 6) for x in p]
    return results


def read_inputs(args: NerPredictArguments, settings: NerSettings) -> tuple[list[int | None], list]:
    """(line per input, inputs): each input is a raw text (str) or a token list; the whole file
    (the Ray engine's driver), as :func:`input_chunks` reads it.

    ``args`` is resolved against the model (``--tokens_column`` is the training one unless given).
    """
    lines: list[int | None] = []
    inputs: list = []
    for chunk_lines, chunk_inputs in input_chunks(args, settings):
        lines.extend(chunk_lines)
        inputs.extend(chunk_inputs)
    return lines, inputs


def input_chunks(args: NerPredictArguments, settings: NerSettings, rows: int | None = None):
    """``(lines, inputs)`` of ``args.input_file``, a chunk of at most ``rows`` inputs at a time
    (default :func:`encoder_tasks.data.chunks.chunk_rows`): raw text lines, CoNLL sentences and
    JSON lines are read line by line as the chunks are taken; a JSON array is read whole."""
    import itertools

    from ...data.chunks import chunk_rows
    from ...data.readers import file_lines, jsonl_rows, read_json, row_location, rows_to_dataset
    from .conll import stream_conll

    path = Path(args.input_file)
    if not path.exists() or path.is_dir():  # a file, or a pipe: read as it goes
        raise UserError(f"--input_file {path}: no such file")
    rows = rows or chunk_rows()
    fmt = args.input_format
    suffix = path.suffix.lower()
    if fmt == "auto":
        fmt = "text" if suffix == ".txt" else "json" if suffix in RECORD_SUFFIXES else "conll"

    def numbered_lines():
        return file_lines(path, args.encoding)

    def chunked(pairs):  # (line, input) pairs -> (lines, inputs) chunks
        while block := list(itertools.islice(pairs, rows)):
            yield [line for line, _ in block], [item for _, item in block]

    if fmt == "text" and suffix not in RECORD_SUFFIXES:

        def texts():
            number = 0
            for _, raw in numbered_lines():
                for line in raw.splitlines() or [""]:  # numbered as str.splitlines numbers them
                    number += 1
                    if line.strip():
                        yield number, line

        yield from chunked(texts())
        return
    spec = args.tokens_column
    prefix = settings.token_prefix
    if fmt in ("conll", "tokens") and suffix not in RECORD_SUFFIXES:
        names = [c.strip() for c in args.column_names.split(",")] if args.column_names else None
        sentences = stream_conll(path, args.delimiter, names, args.encoding)
        first = 0
        while block := list(itertools.islice(sentences, rows)):
            split = Split("predict", str(path), rows_to_dataset(block, str(path)), first_index=first)
            words, _ = read_sentences(split, spec, None, prefix)
            yield list(split.dataset["_line"]), words
            first += len(block)
        return
    # JSON/JSONL: each record holds raw text or a token list (records may mix the two, so the
    # records are read as they are, not as a table whose columns come from the first one).
    if suffix in (".jsonl", ".ndjson"):
        records = ({**record, "_line": line} for line, _, record in jsonl_rows(numbered_lines(), str(path)))
    else:
        records = iter(read_json(path, args.encoding))
    token_fields = spec.split("|")

    def record_inputs():
        for i, record in enumerate(records):
            text = record.get(args.text_column) if fmt != "tokens" else None
            words = next((record[f] for f in token_fields if f in record), None)
            if isinstance(text, str):
                yield record.get("_line"), text
            elif isinstance(words, list) and words and all(isinstance(w, str) and w.strip() for w in words):
                yield (
                    record.get("_line"),
                    [w[len(prefix) :] if prefix and w.startswith(prefix) else w for w in words],
                )
            else:
                raise UserError(
                    f"{row_location(str(path), record.get('_line'), i)}: expected a {args.text_column!r} string or "
                    f"a non-empty {spec!r} list of token strings, found {sorted(k for k in record if k != '_line')}"
                )

    yield from chunked(record_inputs())


def predict_file(args: NerPredictArguments) -> dict:
    """Tag every input of ``input_file``; write JSONL (input order); return a summary.

    Each line: ``{"line", "text", "tokens", "tags" (the training data's scheme), "entities":
    [{"type", "text", "start", "end", "token_start", "token_end", "score"}]}``. The input is read,
    tagged and written a chunk at a time (:func:`input_chunks`,
    :func:`encoder_tasks.predict.stream_predictions`).

    Example:
        >>> predict_file(NerPredictArguments(model_dir="runs/ner", input_file="in.txt",
        ...              output_file="tags.jsonl"))  # doctest: +SKIP
    """
    model, tokenizer = load_for_prediction(args, "ner")
    found = {"entities": 0}

    def predict_chunk(chunk) -> list[dict]:  # a chunk of inputs (read as predict goes)
        lines, inputs = chunk
        records_in = [{"text": item} if isinstance(item, str) else {"tokens": item} for item in inputs]
        results = predict_inputs(model, tokenizer, records_in, args)
        found["entities"] += sum(len(r["entities"]) for r in results)
        return [{"line": line, **result} for line, result in zip(lines, results)]

    chunks = input_chunks(args, model.settings)
    count = stream_predictions(
        args, chunks, predict_chunk, lambda: f"predictions ({found['entities']} entities)"
    )
    return {"predictions": count, "entities": found["entities"]}


def parse_input(record, where: str, settings: NerSettings | None = None) -> dict:
    """One JSON input: ``{"text": raw text}`` (cut into words as in training) or
    ``{"tokens": [words]}`` (pre-tokenised), not both.

    Example:
        >>> parse_input({"tokens": ["John", "lives"]}, "inputs[0]")
        {'tokens': ['John', 'lives']}
    """
    from ...inputs import InputError, check_record, require_text, require_tokens

    check_record(record, where, ("text", "tokens"))
    if ("text" in record) == ("tokens" in record):
        raise InputError(
            where, f"expected either a 'text' string or a 'tokens' list, found fields {sorted(record)}"
        )
    if "text" in record:
        return {"text": require_text(record, "text", where)}
    return {"tokens": require_tokens(record, "tokens", where)}


def predict_inputs(model, tokenizer, inputs: list[dict], args: NerPredictArguments) -> list[dict]:
    """Records as ``predict`` writes them (without ``line``), raw texts and token lists mixed."""
    options = {
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "stride": args.window_stride,
        "precision": args.precision,
        "abstain_below": args.abstain_below,
    }
    results: list = [None] * len(inputs)
    for kind, run in (("text", predict_texts), ("tokens", predict_tokens)):
        chosen = [i for i, item in enumerate(inputs) if kind in item]
        if chosen:
            for i, result in zip(chosen, run(model, tokenizer, [inputs[i][kind] for i in chosen], **options)):
                results[i] = result
    return results

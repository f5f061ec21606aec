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

from ...data import name_list
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

#: The field of a prediction record that holds the input's own tags, where it has them.
GOLD_FIELD = "gold_tags"


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
    """``(lines, inputs)`` of ``args.input_file``: raw text lines, CoNLL sentences (token lists) or
    JSON records (text or tokens), with the file line of each.

    ``args`` is resolved against the model (``--tokens_column`` is the training one unless given).
    """
    lines, inputs, _ = read_labelled_inputs(args, settings)
    return lines, inputs


def read_labelled_inputs(
    args: NerPredictArguments, settings: NerSettings
) -> tuple[list[int | None], list, list[list[str]] | None]:
    """:func:`read_inputs`, plus the gold tags (as written in the file) where the whole input
    carries them (:func:`input_chunks`), else None."""
    lines: list[int | None] = []
    inputs: list = []
    gold: list[list[str]] | None = []
    for chunk_lines, chunk_inputs, chunk_gold in input_chunks(args, settings):
        lines.extend(chunk_lines)
        inputs.extend(chunk_inputs)
        gold = None if gold is None or chunk_gold is None else gold + chunk_gold
    return lines, inputs, gold or None


def input_chunks(args: NerPredictArguments, settings: NerSettings, rows: int | None = None):
    """``(lines, inputs, gold)`` of ``args.input_file``, a chunk of at most ``rows`` inputs at a
    time (default :func:`encoder_tasks.data.chunks.chunk_rows`): raw text lines, CoNLL sentences
    and JSON lines are read line by line as the chunks are taken; a JSON array is read whole.
    ``gold``: the chunk's gold tags as written, where every input of it carries them (a CoNLL tags
    column, ``tags``, the last of two or more; JSON token records holding the training's tags
    field, ``tags|ner_tags|labels``), else None."""
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

    def chunked(items):  # (line, input, tags or None) -> (lines, inputs, gold) chunks
        while block := list(itertools.islice(items, rows)):
            tags = [t for _, _, t in block]
            gold = None if any(t is None for t in tags) else tags
            yield [line for line, _, _ in block], [item for _, item, _ in block], gold

    if fmt == "text" and suffix not in RECORD_SUFFIXES:

        def texts():
            number = 0
            for _, raw in numbered_lines():
                for line in raw.splitlines() or [""]:  # numbered as str.splitlines numbers them
                    number += 1
                    if line.strip():
                        yield number, line, None  # raw text: no tags can line up with its words

        yield from chunked(texts())
        return
    spec = args.tokens_column
    prefix = settings.token_prefix
    if fmt in ("conll", "tokens") and suffix not in RECORD_SUFFIXES:
        names = name_list(args.column_names) or None
        sentences = stream_conll(path, args.delimiter, names, args.encoding)
        first = 0
        while block := list(itertools.islice(sentences, rows)):
            split = Split("predict", str(path), rows_to_dataset(block, str(path)), first_index=first)
            columns = split.dataset.column_names
            tags_column = next((c for c in settings.tags_column.split("|") if c in columns), None)
            words, gold = read_sentences(split, spec, tags_column, prefix)
            yield list(split.dataset["_line"]), words, gold
            first += len(block)
        return
    # JSON/JSONL: each record holds raw text or a token list (records may mix the two, so the
    # records are read as they are, not as a table whose columns come from the first one).
    if suffix in (".jsonl", ".ndjson"):
        records = ({**record, "_line": line} for line, _, record in jsonl_rows(numbered_lines(), str(path)))
    else:
        records = iter(read_json(path, args.encoding))
    token_fields = spec.split("|")
    tag_fields = settings.tags_column.split("|")

    def record_inputs():
        for i, record in enumerate(records):
            text = record.get(args.text_column) if fmt != "tokens" else None
            words = next((record[f] for f in token_fields if f in record), None)
            if isinstance(text, str):
                yield record.get("_line"), text, None
            elif isinstance(words, list) and words and all(isinstance(w, str) and w.strip() for w in words):
                tags = next((record[f] for f in tag_fields if f in record), None)
                where = row_location(str(path), record.get("_line"), i)
                yield (
                    record.get("_line"),
                    [w[len(prefix) :] if prefix and w.startswith(prefix) else w for w in words],
                    None if tags is None else _gold_tags(tags, len(words), where),
                )
            else:
                raise UserError(
                    f"{row_location(str(path), record.get('_line'), i)}: expected a {args.text_column!r} string or "
                    f"a non-empty {spec!r} list of token strings, found {sorted(k for k in record if k != '_line')}"
                )

    yield from chunked(record_inputs())


def _gold_tags(tags, n_words: int, where: str) -> list[str]:
    """A JSON record's gold tags, checked against its tokens."""
    if not isinstance(tags, list) or not all(isinstance(t, str) and t.strip() for t in tags):
        raise UserError(f"{where}: the tags field must be a list of tag strings, found {tags!r}")
    if len(tags) != n_words:
        raise UserError(f"{where}: {n_words} tokens but {len(tags)} tags; every token needs one tag")
    return [t.strip() for t in tags]


def predict_file(args: NerPredictArguments) -> dict:
    """Tag every input of ``input_file``; write JSONL (input order); return a summary.

    Each line: ``{"line", "text", "tokens", "tags" (the training data's scheme), "entities":
    [{"type", "text", "start", "end", "token_start", "token_end", "score"}]}``; where the input
    carries gold tags (:func:`input_chunks`), also ``"gold_tags"`` (as in the file), and the
    summary holds the scores :func:`score_against_gold` logs. The input is read, tagged and
    written a chunk at a time (:func:`encoder_tasks.predict.stream_predictions`).

    Example:
        >>> predict_file(NerPredictArguments(model_dir="runs/ner", input_file="in.txt",
        ...              output_file="tags.jsonl"))  # doctest: +SKIP
    """
    from .schemes import to_iob2

    model, tokenizer = load_for_prediction(args, "ner")
    scheme = model.settings.tag_scheme
    found = {"entities": 0}
    # Scored at the end where every chunk carried gold: only the tags are kept for it.
    scored: dict = {"gold": [], "predicted": [], "labelled": True}

    def predict_chunk(chunk) -> list[dict]:  # a chunk of inputs (read as predict goes)
        lines, inputs, gold = chunk
        records_in = [{"text": item} if isinstance(item, str) else {"tokens": item} for item in inputs]
        results = predict_inputs(model, tokenizer, records_in, args)
        found["entities"] += sum(len(r["entities"]) for r in results)
        records = [{"line": line, **result} for line, result in zip(lines, results)]
        if gold is None:
            scored["labelled"] = False
        else:
            for record, tags in zip(records, gold):
                record[GOLD_FIELD] = tags
            if scored["labelled"]:
                scored["gold"] += gold
                scored["predicted"] += [to_iob2(r["tags"], scheme)[0] for r in records]
        return records

    chunks = input_chunks(args, model.settings)
    count = stream_predictions(
        args, chunks, predict_chunk, lambda: f"predictions ({found['entities']} entities)"
    )
    summary = {"predictions": count, "entities": found["entities"]}
    if scored["labelled"] and scored["gold"]:
        references = gold_in_iob2(args.input_file, scored["gold"], scheme)
        summary.update(score_against_gold(args.input_file, scored["predicted"], references, model.settings))
    return summary


def gold_in_iob2(source: str, gold: list[list[str]], scheme: str) -> list[list[str]]:
    """The gold tags of a labelled input in IOB2, read in the model's ``scheme``, or in BIOES/BMES
    where they are written so (their E-/S-/M- tags say it; IOB1 and IOB2 read alike here).
    Sequences an evaluation would refuse are repaired and counted in one warning: a predict is not
    refused for one ill-formed gold sentence.

    Example:
        >>> gold_in_iob2("in.conll", [["S-PER", "O", "B-LOC", "E-LOC"]], "iob2")
        [['B-PER', 'O', 'B-LOC', 'I-LOC']]
    """
    from .schemes import InvalidTagSequence, detect_scheme, to_iob2

    if scheme != "none":
        written = detect_scheme(gold)
        if written in ("bioes", "bmes") and written != scheme:
            logger.info(
                "%s: gold tags read as %s (the model writes %s)", source, written.upper(), scheme.upper()
            )
            scheme = written
    references, repairs = [], 0
    for row, tags in enumerate(gold):
        try:
            iob2, fixed = to_iob2(tags, scheme, repair=True)
        except InvalidTagSequence as exc:
            raise UserError(f"{source}: gold tags of sentence {row + 1}: {exc}") from None
        references.append(iob2)
        repairs += fixed
    if repairs:
        logger.warning(
            "%s: repaired %d invalid %s gold tag sequences before scoring", source, repairs, scheme.upper()
        )
    return references


def score_against_gold(
    source: str, predictions: list[list[str]], references: list[list[str]], settings: NerSettings
) -> dict:
    """IOB2 predictions of a labelled input scored against its IOB2 tags as ``evaluate`` scores
    them (seqeval strict entity F1; token accuracy and macro F1 for plain tags), said in one line.

    Example:
        >>> settings = NerSettings(label_names=["O", "B-PER", "I-PER"])
        >>> score_against_gold("in.conll", [["B-PER", "O"]], [["B-PER", "O"]], settings)["f1_strict"]
        1.0
    """
    from .metrics import entity_metrics, plain_tag_metrics

    scheme = settings.tag_scheme
    hint = (
        f"`encoder-tasks ner evaluate --model_name_or_path RUN --validation_file {source} --write_predictions "
        "OUT.jsonl` adds per-type scores and the errors by kind"
    )
    if scheme == "none":
        metrics = plain_tag_metrics(references, predictions, settings.label_names)
        logger.info(
            "%s holds tags: token accuracy %.4f, macro F1 %.4f over %d sentences (%s)",
            source,
            metrics["accuracy"],
            metrics["macro_f1"],
            len(references),
            hint,
        )
        return {"accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"]}
    metrics = entity_metrics(references, predictions)
    logger.info(
        "%s holds tags: strict entity F1 %.4f (precision %.4f, recall %.4f; %d gold, %d predicted entities) "
        "over %d sentences (%s)",
        source,
        metrics["f1_strict"],
        metrics["precision_strict"],
        metrics["recall_strict"],
        metrics["gold_entities"],
        metrics["predicted_entities"],
        len(references),
        hint,
    )
    keys = ("f1_strict", "precision_strict", "recall_strict", "accuracy")
    return {key: metrics[key] for key in keys}


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

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
from ...predict import load_for_prediction, run_batches, write_predictions
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
    """(line per input, inputs): each input is a raw text (str) or a token list.

    ``args`` is resolved against the model (``--tokens_column`` is the training one unless given).
    """
    lines, inputs, _ = read_labelled_inputs(args, settings)
    return lines, inputs


def read_labelled_inputs(
    args: NerPredictArguments, settings: NerSettings
) -> tuple[list[int | None], list, list[list[str]] | None]:
    """:func:`read_inputs`, plus the gold tags (as written in the file) where the input carries
    them: a CoNLL file with a tags column (``tags``, the last of two or more columns), or JSON
    token records that all hold the training's tags field (``tags|ner_tags|labels``); else None."""
    from ...data.readers import read_json, read_jsonl, read_text, row_location
    from .conll import read_conll

    path = Path(args.input_file)
    if not path.is_file():
        raise UserError(f"--input_file {path}: no such file")
    fmt = args.input_format
    suffix = path.suffix.lower()
    if fmt == "auto":
        fmt = "text" if suffix == ".txt" else "json" if suffix in RECORD_SUFFIXES else "conll"
    if fmt == "text" and suffix not in RECORD_SUFFIXES:
        lines = read_text(path, args.encoding).splitlines()
        rows = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
        return [n for n, _ in rows], [line for _, line in rows], None
    spec = args.tokens_column
    prefix = settings.token_prefix
    if fmt in ("conll", "tokens") and suffix not in RECORD_SUFFIXES:
        split = Split("predict", str(path), args.read_input(reader=read_conll))
        columns = split.dataset.column_names
        tags_column = next((c for c in settings.tags_column.split("|") if c in columns), None)
        sentences, gold = read_sentences(split, spec, tags_column, prefix)
        return list(split.dataset["_line"]), sentences, gold
    # JSON/JSONL: each record holds raw text or a token list (records may mix the two, so the
    # records are read as they are, not as a table whose columns come from the first one).
    records = (
        read_jsonl(path, args.encoding) if suffix in (".jsonl", ".ndjson") else read_json(path, args.encoding)
    )
    token_fields = spec.split("|")
    tag_fields = settings.tags_column.split("|")
    inputs: list = []
    gold: list[list[str]] | None = []
    for i, record in enumerate(records):
        text = record.get(args.text_column) if fmt != "tokens" else None
        words = next((record[f] for f in token_fields if f in record), None)
        if isinstance(text, str):
            inputs.append(text)
            gold = None  # raw text: its words are cut here, so tags cannot be lined up with them
        elif isinstance(words, list) and words and all(isinstance(w, str) and w.strip() for w in words):
            inputs.append([w[len(prefix) :] if prefix and w.startswith(prefix) else w for w in words])
            tags = next((record[f] for f in tag_fields if f in record), None)
            if tags is None:
                gold = None
            elif gold is not None:
                gold.append(_gold_tags(tags, len(words), row_location(str(path), record.get("_line"), i)))
        else:
            raise UserError(
                f"{row_location(str(path), record.get('_line'), i)}: expected a {args.text_column!r} string or a "
                f"non-empty {spec!r} list of token strings, found {sorted(k for k in record if k != '_line')}"
            )
    return [r.get("_line") for r in records], inputs, gold or None


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
    carries gold tags (:func:`read_labelled_inputs`), also ``"gold_tags"`` (as in the file), and
    the summary holds the scores :func:`score_against_gold` logs.

    Example:
        >>> predict_file(NerPredictArguments(model_dir="runs/ner", input_file="in.txt",
        ...              output_file="tags.jsonl"))  # doctest: +SKIP
    """
    model, tokenizer = load_for_prediction(args, "ner")
    lines, inputs, gold = read_labelled_inputs(args, model.settings)
    records_in = [{"text": item} if isinstance(item, str) else {"tokens": item} for item in inputs]
    results = predict_inputs(model, tokenizer, records_in, args)
    records = [{"line": line, **result} for line, result in zip(lines, results)]
    if gold is not None:
        from .schemes import to_iob2

        scheme = model.settings.tag_scheme
        references = gold_in_iob2(args.input_file, gold, scheme)
        predictions = [to_iob2(r["tags"], scheme)[0] for r in records]
        for record, tags in zip(records, gold):
            record[GOLD_FIELD] = tags
    n_entities = sum(len(r["entities"]) for r in records)
    write_predictions(args, records, f"predictions ({n_entities} entities)")
    summary = {"predictions": len(records), "entities": n_entities}
    if gold is not None:
        summary.update(score_against_gold(args.input_file, predictions, references, model.settings))
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

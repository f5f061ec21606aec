"""``encoder-tasks qa predict``: question + context (or a file of them) to answer text,
character offsets and score, on the shared prediction path (:mod:`encoder_tasks.predict`)."""

from __future__ import annotations

import json
import logging
import math
import sys
from collections import defaultdict

from .args import QAPredictArguments, QASettings

logger = logging.getLogger(__name__)


def predict_answers(
    model,
    tokenizer,
    questions: list[str],
    contexts: list[str],
    batch_size: int = 32,
    precision: str = "auto",
    disable_tqdm: bool | None = None,
    **overrides,
) -> list[dict]:
    """Answer each question from its context (one result per question, input order).

    Windows, span search and threshold come from the model's saved settings
    (``null_threshold``: the tuned one); ``overrides`` replaces any of them (``doc_stride=64``).
    The model runs under ``precision`` (see :func:`encoder_tasks.predict.autocast_for`).

    Example:
        >>> results = predict_answers(model, tokenizer, ["Who lives in Paris?"],
        ...                           ["John Smith lives in Paris."])  # doctest: +SKIP
        >>> results[0]["answer"], results[0]["start"]  # doctest: +SKIP
        ('John Smith', 0)
    """
    from ...predict import run_batches
    from .scoring import postprocess_example
    from .windows import make_windows

    settings = (model.settings or QASettings()).replace(**overrides)
    windows = make_windows(
        tokenizer,
        [q.lstrip() for q in questions],
        list(contexts),
        max_length=settings.max_length or tokenizer.model_max_length,
        doc_stride=settings.doc_stride,
        max_question_length=settings.max_question_length,
        context_position=settings.context_position,
    )
    keys = list(windows.encodings)
    features = [{k: windows.encodings[k][i] for k in keys} for i in range(len(windows))]

    def read(output, chunk):
        # Each window's own tokens, in fp32 on the CPU (the batch's padding cut off again).
        starts = output.start_logits.float().cpu().numpy()
        ends = output.end_logits.float().cpu().numpy()
        lengths = [len(features[i]["input_ids"]) for i in chunk]
        return [(starts[row, :n], ends[row, :n]) for row, n in enumerate(lengths)]

    logits = run_batches(
        model,
        features,
        lambda rows: tokenizer.pad(rows, return_tensors="pt"),
        batch_size,
        precision,
        read=read,
        desc="answering",
        disable_tqdm=disable_tqdm,
    )
    by_example: dict[int, list[int]] = defaultdict(list)
    for i, example in enumerate(windows.example_index):
        by_example[example].append(i)
    results = []
    for example, context in enumerate(contexts):
        parts = [(*logits[i], windows.offsets[i], windows.null_index[i]) for i in by_example[example]]
        result = postprocess_example(
            context,
            parts,
            max_answer_length=settings.max_answer_length,
            n_best=settings.n_best,
            version_2_with_negative=settings.version_2_with_negative,
            null_threshold=float(settings.null_threshold),
        )
        result["windows"] = len(parts)
        results.append(result)
    return results


def _record(result: dict, top_k: int) -> dict:
    record = {
        "answer": result["answer"] if not result["no_answer"] else "no answer",
        "no_answer": result["no_answer"],
        "start": result["start"],
        "end": result["end"],
        "score": None if result["score"] is None else round(result["score"], 6),
    }
    if not result["no_answer"] and result["n_best"]:
        # The answer's share of the candidates: what eval_answer_ece judges (qa/metrics.py).
        record["probability"] = round(result["n_best"][0]["probability"], 6)
    if "null_score_diff" in result and math.isfinite(result["null_score_diff"]):
        record["null_score_diff"] = round(result["null_score_diff"], 6)
    if top_k > 1:
        record["candidates"] = [
            {**c, "score": round(c["score"], 6), "probability": round(c["probability"], 6)}
            for c in result["n_best"][:top_k]
        ]
    if result.get("windows", 1) > 1:
        record["windows"] = result["windows"]
    return record


def _options(model, args: QAPredictArguments) -> tuple[dict, dict]:
    """(settings overrides, run options) from ``predict``'s flags."""
    overrides = {
        "max_length": args.max_length,
        "doc_stride": args.doc_stride,
        "max_answer_length": args.max_answer_length,
        "null_threshold": args.null_threshold,
        "n_best": max(args.top_k, (model.settings or QASettings()).n_best),
    }
    options = {"batch_size": args.batch_size, "precision": args.precision, "disable_tqdm": args.disable_tqdm}
    return overrides, options


def parse_input(record, where: str, settings: QASettings | None = None) -> dict:
    """One JSON input: ``{"question", "context"}`` and an optional ``"id"`` (kept in the answer).

    Example:
        >>> parse_input({"context": "Ann lives in Oslo."}, "inputs[0]")
        Traceback (most recent call last):
        ...
        encoder_tasks.inputs.InputError: inputs[0].question: expected a string, found nothing
    """
    from ...inputs import InputError, check_record, require_text

    check_record(record, where, ("id", "question", "context"))
    parsed = {
        "question": require_text(record, "question", where),
        "context": require_text(record, "context", where),
    }
    if "id" in record:
        if not isinstance(record["id"], str | int):
            raise InputError(f"{where}.id", f"expected a string or an integer, found {record['id']!r}")
        parsed = {"id": record["id"], **parsed}
    return parsed


def predict_inputs(model, tokenizer, inputs: list[dict], args: QAPredictArguments) -> list[dict]:
    """Answers as ``predict`` writes them (without ``line``; ``id`` where the input had one)."""
    overrides, options = _options(model, args)
    options["disable_tqdm"] = True
    results = predict_answers(
        model,
        tokenizer,
        [r["question"] for r in inputs],
        [r["context"] for r in inputs],
        **options,
        **overrides,
    )
    return [
        {**({"id": r["id"]} if "id" in r else {}), "question": r["question"], **_record(result, args.top_k)}
        for r, result in zip(inputs, results)
    ]


def predict_file(args: QAPredictArguments) -> dict:
    """Answer every question of ``input_file`` (or the one ``--question``); write JSONL in input order.

    Each line: ``id``, ``question``, ``answer`` (``"no answer"`` when the model says so, with
    ``no_answer: true``), ``start``/``end`` character offsets into the context, ``score``.
    One ``--question`` is answered on stdout (one JSON line), and in ``--output_file`` too when
    one is given (never over an existing file unless ``--overwrite_output``).

    Example:
        >>> predict_file(QAPredictArguments(model_dir="runs/qa", question="Who lives in Paris?",
        ...         context="John Smith lives in Paris."))  # doctest: +SKIP
    """
    from ...data.chunks import STREAMED_SUFFIXES
    from ...predict import load_for_prediction, stream_predictions, write_predictions
    from .data import read_examples
    from .reading import read_squad

    model, tokenizer = load_for_prediction(args, "qa")  # flags left unset: the saved settings
    overrides, options = _options(model, args)
    if args.question is not None:
        result = predict_answers(model, tokenizer, [args.question], [args.context], **options, **overrides)[0]
        record = {"question": args.question, **_record(result, args.top_k)}
        if args.output_file:
            write_predictions(args, [record], what="answers")
        # The answer itself is the command's output (data, not a message): one JSON line on stdout.
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        sys.stdout.flush()
        return {"predictions": 1}
    counts = {"no_answer": 0}

    def predict_chunk(split) -> list[dict]:  # a chunk of questions (read as predict goes)
        examples = read_examples(split, args, need_answers=False)
        results = predict_answers(
            model, tokenizer, examples.questions, examples.contexts, **options, **overrides
        )
        counts["no_answer"] += sum(r["no_answer"] for r in results)
        return [
            {"line": line, "id": qid, "question": q, **_record(r, args.top_k)}
            for line, qid, q, r in zip(split.dataset["_line"], examples.ids, examples.questions, results)
        ]

    # JSON lines and tables are read as predict goes; SQuAD JSON (nested articles) is read whole.
    chunks = args.read_input_chunks(read_squad, streamed=STREAMED_SUFFIXES)
    count = stream_predictions(args, chunks, predict_chunk, what="answers")
    if counts["no_answer"]:
        logger.info("%d of %d questions answered 'no answer'", counts["no_answer"], count)
    return {"predictions": count, "no_answer": counts["no_answer"]}

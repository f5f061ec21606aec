"""Prediction with a saved classification or pair model: texts in, labels or scores out.

Texts longer than ``max_length`` are split into overlapping windows whose logits are averaged
(``--long_text window``, single texts only) or cut (``truncate``); batches are length-sorted
and run under ``--precision`` through :func:`encoder_tasks.predict.run_batches`.

Example:
    >>> from encoder_tasks.tasks.classification.args import ClassificationSettings
    >>> settings = ClassificationSettings(label_names=["neg", "pos"])
    >>> describe_prediction(np.array([0.0, 0.0]), settings)
    {'label': 'neg', 'score': 0.5, 'probabilities': {'neg': 0.5, 'pos': 0.5}}
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ...collators import PaddingCollator
from ...data import Split, resolve_column
from ...data.columns import column_texts
from ...errors import UserError
from ...metrics import softmax
from ...predict import load_for_prediction, run_batches, stream_predictions
from .args import ClassificationPredictArguments, ClassificationSettings
from .metrics import sigmoid

logger = logging.getLogger(__name__)


def predict_texts(
    model,
    tokenizer,
    texts,
    pairs=None,
    batch_size=64,
    max_length=None,
    long_text="window",
    stride=64,
    precision="auto",
    disable_tqdm: bool | None = None,
    abstain_below: float | None = None,
) -> tuple[list[dict], int]:
    """Predict labels for texts; returns one result per text in input order, and how many
    texts were longer than ``max_length`` (windowed or truncated).

    ``max_length`` defaults to the model's saved one; ``abstain_below`` as in
    :func:`describe_prediction` (single-label models only).

    Example:
        >>> results, long_count = predict_texts(model, tokenizer, ["a fine film"])  # doctest: +SKIP
        >>> results[0]["label"]  # doctest: +SKIP
        'pos'
    """
    texts = list(texts)
    if not texts:
        return [], 0
    settings = model.settings
    if abstain_below is not None and settings is not None and settings.problem_type != "single_label":
        raise UserError(
            f"--abstain_below applies to single-label models; this model is {settings.problem_type}"
        )
    max_length = max_length or (settings.max_length if settings else None) or tokenizer.model_max_length
    use_windows = long_text == "window" and pairs is None
    room = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    if use_windows and stride >= room:
        # The tokenizer refuses a stride that leaves windows no new tokens (short saved max_length).
        logger.warning(
            "--window_stride %d leaves windows of %d tokens nothing new; using %d", stride, room, room // 2
        )
        stride = room // 2
    second = list(pairs) if pairs is not None else None
    enc = tokenizer(
        texts,
        second,
        truncation=True,
        max_length=max_length,
        return_overflowing_tokens=use_windows,
        stride=stride if use_windows else 0,
    )
    owners = enc["overflow_to_sample_mapping"] if use_windows else list(range(len(texts)))
    counts = np.bincount(owners, minlength=len(texts))
    if use_windows:
        long_count = int((counts > 1).sum())
    else:
        full = tokenizer(texts, second)["input_ids"]
        long_count = sum(len(ids) > max_length for ids in full)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    features = [{k: enc[k][i] for k in keys} for i in range(len(owners))]
    rows = run_batches(
        model, features, PaddingCollator(tokenizer), batch_size, precision, disable_tqdm=disable_tqdm
    )
    # Aggregate windows: the mean of window logits per text.
    sums = np.zeros((len(texts), rows[0].shape[-1]), dtype=np.float64)
    for owner, row in zip(owners, rows):
        sums[owner] += row
    logits = sums / counts[:, None]
    records = [describe_prediction(row, settings, int(n), abstain_below) for row, n in zip(logits, counts)]
    return records, long_count


def describe_prediction(
    logits: np.ndarray,
    settings: ClassificationSettings | None,
    windows: int = 1,
    abstain_below: float | None = None,
) -> dict:
    """One prediction record: label, score and probabilities (single-label), labels over their
    thresholds (multi-label) or the score (regression).

    Single-label probabilities are ``softmax(logits / temperature)`` with the temperature saved
    by ``--calibrate temperature`` (1 without). With ``abstain_below``, a top probability under
    it gives ``label`` None and an ``unsure`` field saying why (best label, its probability, the
    threshold); score and probabilities stay.

    Example:
        >>> s = ClassificationSettings(label_names=["neg", "pos"], temperature=2.0)
        >>> describe_prediction(np.array([0.0, 2.0 * np.log(3.0)]), s)["probabilities"]
        {'neg': 0.25, 'pos': 0.75}
        >>> describe_prediction(np.array([0.0, 2.0 * np.log(3.0)]), s, abstain_below=0.8)["unsure"]
        {'best_label': 'pos', 'probability': 0.75, 'abstain_below': 0.8}
    """
    settings = settings or ClassificationSettings()
    names = settings.label_names or [f"LABEL_{i}" for i in range(len(logits))]
    result: dict[str, Any] = {}
    if settings.problem_type == "regression":
        result["score"] = float(logits[0])
    elif settings.problem_type == "multi_label":
        probs = sigmoid(logits)
        thresholds = settings.thresholds or [0.5] * len(names)
        result["labels"] = [n for n, p, t in zip(names, probs, thresholds) if p >= t]
        result["probabilities"] = {n: round(float(p), 6) for n, p in zip(names, probs)}
    else:
        probs = softmax(logits, settings.temperature or 1.0)
        best = int(probs.argmax())
        result["label"] = names[best]
        result["score"] = round(float(probs[best]), 6)
        result["probabilities"] = {n: round(float(p), 6) for n, p in zip(names, probs)}
        if abstain_below is not None and probs[best] < abstain_below:
            result["label"] = None
            result["unsure"] = {
                "best_label": names[best],
                "probability": result["score"],
                "abstain_below": abstain_below,
            }
    if windows > 1:
        result["windows"] = windows
    return result


def predict_file(args: ClassificationPredictArguments, task_name: str = "classification") -> dict:
    """Predict every row of ``input_file``; write JSON lines (input order); return a summary.

    Columns and ``max_length`` left unset take the values the model was trained with. Where the
    input has the training's label column, each record adds ``"gold"`` (the row's label, label
    list or score) and the summary the scores :func:`score_against_labels` logs.

    Example:
        >>> predict_file(ClassificationPredictArguments(model_dir="runs/sst2", input_file="new.tsv",
        ...              output_file="preds.jsonl"))  # doctest: +SKIP
    """
    model, tokenizer = load_for_prediction(args, task_name)
    totals = {"inputs": 0, "long": 0, "pairs": False}
    settings = model.settings
    # A labelled input: each row's gold written beside its prediction, the score said at the end
    # (what is kept for it is the few fields scoring reads, not the records).
    labelled: dict = {"column": None, "results": [], "gold": []}

    def predict_chunk(split) -> list[dict]:  # a chunk of rows (read as predict goes)
        text_col = resolve_column(split, args.text_column or "text", "text")
        texts = column_texts(split, text_col)
        pair_col = resolve_column(split, args.text_pair_column, "text_pair")
        pairs = column_texts(split, pair_col) if pair_col else None
        inputs = (
            [{"text": t} for t in texts]
            if pairs is None
            else [{"text": t, "text_pair": p} for t, p in zip(texts, pairs)]
        )
        results, long_count = _records(model, tokenizer, inputs, args, disable_tqdm=args.disable_tqdm)
        totals["inputs"] += len(texts)
        totals["long"] += long_count
        totals["pairs"] = pairs is not None
        records = [{"line": line, **result} for line, result in zip(split.dataset["_line"], results)]
        label_col = _label_column(split, settings, exclude={text_col, pair_col})
        if label_col is not None:
            from .labels import read_labels

            gold = read_labels(split, label_col, settings.problem_type, settings.label_separator)
            for record, value in zip(records, gold):
                record["gold"] = value
            labelled["column"] = label_col
            labelled["results"] += [
                {k: r[k] for k in ("label", "labels", "score") if k in r} for r in results
            ]
            labelled["gold"] += list(gold)
        return records

    def summary() -> str:  # once every chunk is written: counts over the whole input
        if not totals["long"]:
            return "predictions"
        windowed = args.long_text == "window" and not totals["pairs"]
        how = "split into overlapping windows" if windowed else "truncated"
        logger.warning(
            "%d of %d inputs were longer than max_length and were %s", totals["long"], totals["inputs"], how
        )
        return f"predictions ({totals['long']} long inputs {'windowed' if windowed else 'truncated'})"

    count = stream_predictions(args, args.read_input_chunks(), predict_chunk, summary)
    found = {"predictions": count, "long_inputs": totals["long"]}
    if labelled["column"] is not None:
        found.update(
            score_against_labels(
                args.input_file, labelled["column"], labelled["results"], labelled["gold"], settings
            )
        )
    return found


def _label_column(split: Split, settings: ClassificationSettings, exclude) -> str | None:
    """The training's label column where the input has it (and it is not a text column), else None."""
    names = split.dataset.column_names
    wanted = (settings.label_column or "label").split("|") if settings is not None else ["label"]
    return next((c for c in wanted if c in names and c not in exclude), None)


def score_against_labels(source: str, column: str, results: list[dict], gold: list, settings) -> dict:
    """Predictions of a labelled input scored against its ``column``, as ``evaluate`` scores them
    (single-label: accuracy and macro F1, an abstention counting as wrong; multi-label: the share of
    rows whose label set is exactly right; regression: Pearson and Spearman), said in one line.

    Example:
        >>> s = ClassificationSettings(label_names=["neg", "pos"])
        >>> score_against_labels("in.csv", "label", [{"label": "pos"}, {"label": "pos"}], ["pos", "neg"], s)
        {'accuracy': 0.5, 'macro_f1': 0.3333333333333333}
    """
    from ...metrics import classification_metrics, regression_metrics

    hint = (
        f"`evaluate --model_name_or_path RUN --validation_file {source} --write_predictions OUT.jsonl` "
        "adds the per-label table"
    )
    if settings.problem_type == "regression":
        metrics = regression_metrics([r["score"] for r in results], gold)
        found = {"pearson": metrics["pearson"], "spearman": metrics["spearman"]}
        said = f"Pearson {found['pearson']:.4f}, Spearman {found['spearman']:.4f}"
    elif settings.problem_type == "multi_label":
        exact = float(np.mean([sorted(r["labels"]) == sorted(g) for r, g in zip(results, gold)]))
        found = {"exact_match": exact}
        said = f"exact label sets {exact:.4f}"
    else:
        index = {name: i for i, name in enumerate(settings.label_names)}
        outside = len(settings.label_names)  # a label the model never saw, or an abstention: wrong
        predicted = [index.get(r.get("label"), -1) for r in results]
        metrics = classification_metrics(
            predicted, [index.get(g, outside) for g in gold], settings.label_names
        )
        found = {"accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"]}
        said = f"accuracy {found['accuracy']:.4f}, macro F1 {found['macro_f1']:.4f}"
    logger.info("%s holds %r: %s over %d rows (%s)", source, column, said, len(gold), hint)
    return found


def parse_input(record, where: str, settings: ClassificationSettings | None) -> dict:
    """One JSON input: ``{"text"}``, plus ``"text_pair"`` for a model trained on pairs (required
    there, refused elsewhere: a second text the model never saw in training would be ignored
    or misread).

    Example:
        >>> parse_input({"text": "ok"}, "inputs[0]", ClassificationSettings(label_names=["a", "b"]))
        {'text': 'ok'}
    """
    from ...inputs import InputError, check_record, require_text

    pairs = bool(settings and settings.text_pair_column)
    check_record(record, where, ("text", "text_pair") if pairs else ("text",))
    parsed = {"text": require_text(record, "text", where)}
    if pairs:
        parsed["text_pair"] = require_text(record, "text_pair", where)
    elif "text_pair" in record:  # pragma: no cover - check_record refuses it first
        raise InputError(f"{where}.text_pair", "this model was trained on single texts")
    return parsed


def predict_inputs(model, tokenizer, inputs: list[dict], args: ClassificationPredictArguments) -> list[dict]:
    """Records as ``predict`` writes them (without ``line``) for checked inputs, in input order."""
    return _records(model, tokenizer, inputs, args, disable_tqdm=True)[0]


def _records(model, tokenizer, inputs: list[dict], args, disable_tqdm) -> tuple[list[dict], int]:
    """(records, how many inputs were longer than ``max_length``): the one path of ``predict``,
    the server and Ray."""
    texts = [r["text"] for r in inputs]
    pairs = [r["text_pair"] for r in inputs] if inputs and "text_pair" in inputs[0] else None
    results, long_count = predict_texts(
        model,
        tokenizer,
        texts,
        pairs,
        batch_size=args.batch_size,
        max_length=args.max_length,
        long_text=args.long_text,
        stride=args.window_stride,
        precision=args.precision,
        disable_tqdm=disable_tqdm,
        abstain_below=args.abstain_below,
    )
    return [{**r, **result} for r, result in zip(inputs, results)], long_count

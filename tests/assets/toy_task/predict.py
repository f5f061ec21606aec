"""``toy predict``: the shared prediction path does the work."""

from __future__ import annotations

from encoder_tasks.collators import PaddingCollator
from encoder_tasks.data import Split, resolve_column
from encoder_tasks.predict import load_for_prediction, run_batches, write_predictions


def predict(args) -> dict:
    model, tokenizer = load_for_prediction(args, "toy")
    split = Split("predict", args.input_file, args.read_input())
    texts = list(split.dataset[resolve_column(split, args.text_column, "text")])
    features = [dict(f) for f in _features(tokenizer, texts, args.max_length)]
    logits = run_batches(model, features, PaddingCollator(tokenizer), args.batch_size, args.precision)
    records = [
        {"line": line, "text": text, "mentions": bool(row.argmax() == 1)}
        for line, text, row in zip(split.dataset["_line"], texts, logits)
    ]
    return {"predictions": write_predictions(args, records)}


def _features(tokenizer, texts, max_length):
    encoded = tokenizer(texts, truncation=True, max_length=max_length)
    keys = list(encoded.keys())
    return [{key: encoded[key][i] for key in keys} for i in range(len(texts))]

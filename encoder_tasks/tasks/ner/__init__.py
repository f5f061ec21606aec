"""Token tagging (NER, slot filling, POS) on any encoder, with a softmax head or a CRF.

One file per concern:

- ``args.py``: the flags (:class:`NerArguments`, :class:`NerPredictArguments`) and the saved
  settings (:class:`NerSettings`);
- ``conll.py``, ``reading.py``: CoNLL column files, JSON/JSONL records, ``save_to_disk`` folders
  and Hub datasets (``ClassLabel`` tags) to validated sentences;
- ``schemes.py``: IOB1/IOB2/BIOES/BMES, read into IOB2 and written back;
- ``text.py``: raw text to words with offsets (English words, CJK characters);
- ``features.py``: sub-word alignment, windows over long sentences, stitching them back;
- ``data.py``: ``prepare`` (labels, vocabulary extension, features);
- ``model.py``, ``crf.py``: the head (first sub-token per word; softmax or linear-chain CRF);
- ``decoding.py``, ``metrics.py``: constrained Viterbi or CRF decoding; seqeval strict/lenient;
- ``trainer.py``: a learning rate of its own for the head and the CRF;
- ``predict.py``: raw text or pre-tokenised input to tags and entities with character offsets.

This module stays light (no torch at import) so the command line starts fast.

Example:
    >>> task = NerTask()
    >>> task.name, task.objectives[0]
    ('ner', 'eval_f1_strict')
"""

from __future__ import annotations

from ...task import Task
from .args import NerArguments, NerPredictArguments, NerSettings


class NerTask(Task):
    """Token tagging: per-word tags from each word's first sub-token, softmax or CRF."""

    name = "ner"
    summary = "Token tagging (NER, POS, slots): IOB1/IOB2/BIOES/BMES, softmax or CRF, English and Chinese."
    Arguments = NerArguments
    PredictArguments = NerPredictArguments
    Settings = NerSettings
    auto_batch_size = True  # the batch only sets the optimiser's noise
    # Chosen on validation (benchmarks/README.md, "How each default was chosen"): on MiniLM the
    # encoder at 1e-4 scored 6.5 strict-F1 points above 5e-5 (WikiANN dev, 3 seeds); BERT-base
    # width gets the usual 5e-5.
    narrow_learning_rate = 1e-4
    # Span schemes report entity F1; plain tags (POS, scheme none) macro F1 and accuracy.
    objectives = ("eval_f1_strict", "eval_macro_f1", "eval_accuracy")
    onnx_outputs = {"logits": ("batch", "sequence")}

    def read_split(self, path, delimiter="auto", column_names=None, encoding="utf-8", split=None):
        """JSON/JSONL and ``save_to_disk`` folders as records, anything else as CoNLL columns."""
        from .reading import read_split

        return read_split(path, delimiter, column_names, encoding, split)

    def prepare(self, splits, tokenizer, task_args, data_args, saved=None):
        from .data import prepare

        return prepare(splits, tokenizer, task_args, data_args, saved)

    def build_model(self, encoder, settings, training=None):
        from .model import build_model

        return build_model(encoder, settings, training)

    def trainer_class(self) -> type:
        from .trainer import NerTrainer

        return NerTrainer

    def predict(self, args):
        from .predict import predict_file

        return predict_file(args)

    def parse_input(self, record, where, settings):
        from .predict import parse_input

        return parse_input(record, where, settings)

    def evaluation_records(self, split, prepared, predictions, label_ids):
        from .metrics import evaluation_records

        return evaluation_records(split, prepared.compute_metrics, predictions)

    def predict_inputs(self, model, tokenizer, inputs, args):
        from .predict import predict_inputs

        return predict_inputs(model, tokenizer, inputs, args)

    def distiller(self):
        from .distill import NerDistiller

        return NerDistiller()

    def input_format(self, path, args):
        """Raw text (one per line) streams; CoNLL and JSON records are read whole on the driver."""
        from pathlib import Path

        from .reading import RECORD_SUFFIXES

        suffix = Path(path).suffix.lower()
        fmt = args.input_format
        if fmt == "auto":  # as predict's reader decides
            fmt = "text" if suffix == ".txt" else "json" if suffix in RECORD_SUFFIXES else "conll"
        return "lines" if fmt == "text" and suffix not in RECORD_SUFFIXES else None

    def input_records(self, split, args, settings, first_index=0):
        """``{"text"}`` or ``{"tokens"}`` per row: raw text lines, or what :meth:`read_input_split` read."""
        columns = split.dataset.column_names
        texts = split.dataset["text"] if "text" in columns else [None] * len(split.dataset)
        tokens = split.dataset["tokens"] if "tokens" in columns else [None] * len(split.dataset)
        return [{"text": t} if t is not None else {"tokens": w} for t, w in zip(texts, tokens)]

    def read_input_split(self, args, settings):
        """CoNLL sentences and JSON records read by ``predict``'s own reader (text or tokens, the
        token prefix stripped), one row per input; gold tags, where the input has them, ride in
        the row's ``AFTER_COLUMN``, written after the prediction."""
        import json

        from ...data import AFTER_COLUMN, LINE_COLUMN, Split
        from ...data.readers import rows_to_dataset
        from .predict import GOLD_FIELD, read_labelled_inputs

        lines, inputs, gold = read_labelled_inputs(args, settings)
        rows = [
            {"text" if isinstance(x, str) else "tokens": x, LINE_COLUMN: line}
            for line, x in zip(lines, inputs)
        ]
        if gold is not None:  # written after each prediction, as predict writes them
            for row, tags in zip(rows, gold):
                row[AFTER_COLUMN] = json.dumps({GOLD_FIELD: tags}, ensure_ascii=False)
        return Split("predict", args.input_file, rows_to_dataset(rows, args.input_file))

    def stock_model(self, model):
        from .stock import to_stock

        return to_stock(model)


__all__ = ["NerArguments", "NerPredictArguments", "NerSettings", "NerTask"]

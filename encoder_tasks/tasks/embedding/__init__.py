"""Bi-encoders: one vector per text, compared by cosine similarity.

The package, a file per concern (the same file set as every task, plus what only a
bi-encoder needs):

- ``args.py``: flags (train/evaluate, predict, encode, retrieve) and the saved settings;
- ``model.py``: :class:`~.model.BiEncoder` (pooling, normalisation, loss), loading, encoding;
- ``losses.py``, ``samplers.py``, ``distributed.py``: in-batch negatives done right
  (duplicate-free batches, negatives gathered from every process);
- ``data.py``: reading pairs, the collator, ``prepare``;
- ``trainer.py`` and ``evaluation.py``: evaluation by STS Spearman or retrieval;
- ``predict.py`` (similarity of pairs), ``search.py`` (``encode`` and ``retrieve``),
  ``retrieval.py`` (exact search and its metrics);
- ``st_layout.py``: trained models are saved in the sentence-transformers layout too, so
  ``SentenceTransformer(path)`` loads them as they are.

Only the light ``args`` module is imported here; the hooks import the rest when called.

Example:
    >>> task = EmbeddingTask()
    >>> task.name, sorted(task.extra_actions())
    ('embedding', ['encode', 'mine', 'retrieve'])
"""

from __future__ import annotations

from ...errors import UserError
from ...task import Task
from .args import (
    EmbeddingArguments,
    EmbeddingPredictArguments,
    EmbeddingSettings,
    EncodeArguments,
    MineArguments,
    RetrieveArguments,
)


def _encode(args: EncodeArguments) -> dict:
    from .search import encode_file

    return encode_file(args)


def _mine(args: MineArguments) -> dict:
    from .mining import mine_file

    return mine_file(args)


def _retrieve(args: RetrieveArguments) -> dict:
    from .search import retrieve_file

    return retrieve_file(args)


def _export_sentence_transformers(model_dir, dest) -> dict:
    from .stock import export_sentence_transformers

    return export_sentence_transformers(model_dir, dest)


class EmbeddingTask(Task):
    """``encoder-tasks embedding``: train, evaluate and use bi-encoders."""

    name = "embedding"
    summary = "Bi-encoder: text to vector (in-batch negatives, CoSENT); encode a corpus and retrieve from it."
    Arguments = EmbeddingArguments
    PredictArguments = EmbeddingPredictArguments
    Settings = EmbeddingSettings
    objectives = ("eval_cosine_spearman", "eval_ndcg@10", "eval_mrr@10", "eval_loss")
    onnx_outputs = {"embeddings": ("batch",)}

    def prepare(self, splits, tokenizer, task_args, data_args, saved=None):
        from .data import prepare

        return prepare(splits, tokenizer, task_args, data_args, saved)

    def build_model(self, encoder, settings, training=None):
        if settings.model_type == "sparse":
            from .sparse import SparseEncoder

            return SparseEncoder.from_settings(encoder, settings)
        from .model import BiEncoder

        return BiEncoder.from_settings(encoder, settings)

    def trainer_class(self) -> type:
        from .trainer import EmbeddingTrainer

        return EmbeddingTrainer

    def evaluation_records(self, split, prepared, predictions, label_ids):
        """Per pair (STS) and per query (retrieval): :func:`.evaluation.evaluation_records`."""
        from .evaluation import evaluation_records

        return evaluation_records(predictions or {})

    def predict(self, args) -> dict:
        from .predict import predict_file

        return predict_file(args)

    def extra_actions(self):
        return {
            "encode": (EncodeArguments, _encode),
            "mine": (MineArguments, _mine),
            "retrieve": (RetrieveArguments, _retrieve),
        }

    def load_for_inference(self, args, check=True):
        from .predict import load_model

        return load_model(args, check=check)

    def parse_input(self, record, where, settings):
        from .predict import parse_input

        return parse_input(record, where, settings)

    def predict_inputs(self, model, tokenizer, inputs, args):
        from .predict import predict_inputs

        return predict_inputs(model, tokenizer, inputs, args)

    def distiller(self):
        from .distill import EmbeddingDistiller

        return EmbeddingDistiller()

    def input_settings(self, args):
        """As the base hook; ``encode``'s ``--text_column`` names the corpus' column, never the
        training one (the same skip as ``encode`` itself)."""
        from ...artifact import read_task_metadata
        from ...backbone import resolve_model_path
        from ...settings import resolve
        from .search import _NOT_SAVED

        metadata = read_task_metadata(resolve_model_path(args.model_dir))
        settings = self.load_settings(metadata) if metadata is not None else None
        if settings is not None:
            resolve(args, settings, skip=_NOT_SAVED if isinstance(args, EncodeArguments) else ())
        return settings

    def input_records(self, split, args, settings, first_index=0):
        """``{"text", "text_pair"}`` for ``predict`` (cosine similarity), ``{"text"}`` for ``encode``."""
        from ...data import resolve_column
        from ...data.columns import column_texts

        first = column_texts(split, resolve_column(split, args.text_column, "text"))
        if isinstance(args, EncodeArguments):
            return [{"text": t} for t in first]
        second = column_texts(split, resolve_column(split, args.text_pair_column, "text_pair"))
        return [{"text": a, "text_pair": b} for a, b in zip(first, second)]

    def stock_model(self, model):
        raise UserError(
            "embedding: a bi-encoder has no stock transformers head; use --format sentence-transformers or onnx"
        )

    def extra_layouts(self):
        return {"sentence-transformers": _export_sentence_transformers}

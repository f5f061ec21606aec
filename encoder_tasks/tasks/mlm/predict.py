"""``encoder-tasks mlm predict``: fill in the mask tokens of every text, top candidates first.

``[MASK]`` and ``<mask>`` in a text both stand for the tokenizer's own mask token. The head
runs at the mask positions only (one vocabulary row per mask, not per token), under
``--precision``, in length-sorted batches of ``--batch_size`` (:mod:`encoder_tasks.predict`).
"""

from __future__ import annotations

import logging

import torch

from ...collators import PaddingCollator
from ...data import LINE_COLUMN, resolve_column
from ...predict import load_for_prediction, run_batches, stream_predictions
from .args import MLMPredictArguments
from .text import read_split

logger = logging.getLogger(__name__)


class _MaskScorer:
    """The model's top ``k`` candidates at each mask token of a batch (one list per text)."""

    def __init__(self, model, mask_token_id: int, top_k: int):
        self.model, self.mask_token_id, self.top_k = model, mask_token_id, top_k

    @property
    def device(self) -> torch.device:
        return self.model.device

    def __call__(self, input_ids, attention_mask, token_type_ids=None):
        hidden = self.model.encode(input_ids, attention_mask, token_type_ids)
        masks = input_ids == self.mask_token_id
        probs = self.model.head(hidden[masks]).float().softmax(-1)
        scores, ids = probs.topk(min(self.top_k, probs.size(-1)), dim=-1)
        per_text = masks.sum(dim=1).tolist()
        scores, ids = scores.cpu().split(per_text), ids.cpu().split(per_text)
        return [list(zip(s.tolist(), i.tolist())) for s, i in zip(scores, ids)]


def fill_mask(
    model,
    tokenizer,
    texts: list[str],
    top_k: int = 5,
    batch_size: int = 32,
    max_length: int | None = None,
    precision: str = "auto",
) -> list[list[list[dict]]]:
    """For each text, a list (one per mask token) of ``{"token", "score"}`` candidates.

    Example:
        >>> from encoder_tasks.backbone import load_encoder, load_tokenizer
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.tasks.mlm.model import MaskedLanguageModel
        >>> path = make_tiny_model("bert")
        >>> model = MaskedLanguageModel(load_encoder(path)).eval()
        >>> fills = fill_mask(model, load_tokenizer(path), ["the [MASK] sat", "no mask"], top_k=2)
        >>> [len(f) for f in fills], len(fills[0][0])
        ([1, 0], 2)
    """
    mask = tokenizer.mask_token
    texts = [t.replace("[MASK]", mask).replace("<mask>", mask) for t in texts]
    encoded = tokenizer(texts, truncation=True, max_length=max_length)
    features = [{k: encoded[k][i] for k in encoded} for i in range(len(texts))]
    scorer = _MaskScorer(model, tokenizer.mask_token_id, top_k)
    found = run_batches(
        scorer,
        features,
        PaddingCollator(tokenizer),
        batch_size,
        precision,
        read=lambda output, chunk: output,
        desc="filling masks",
    )
    return [
        [
            [{"token": tokenizer.convert_ids_to_tokens(i), "score": round(s, 6)} for s, i in zip(scores, ids)]
            for scores, ids in per_mask
        ]
        for per_mask in found
    ]


def predict_file(args: MLMPredictArguments) -> dict:
    """Fill the mask tokens of every row of ``input_file`` (``.txt``: one text per line); write JSONL.

    Example:
        >>> predict_file(MLMPredictArguments(model_dir="runs/mlm/wikitext2-minilm", input_file="masked.txt",
        ...              output_file="fills.jsonl"))  # doctest: +SKIP
        {'predictions': 2, 'without_mask': 0}
    """
    model, tokenizer = load_for_prediction(args, "mlm")
    counts = {"texts": 0, "without": 0}

    def predict_chunk(split) -> list[dict]:  # a chunk of rows (read as predict goes)
        dataset = split.dataset
        column = resolve_column(split, args.text_column, "text")
        texts = ["" if t is None else str(t) for t in dataset[column]]
        fills = fill_mask(
            model, tokenizer, texts, args.top_k, args.batch_size, args.max_length, args.precision
        )
        counts["texts"] += len(texts)
        counts["without"] += sum(1 for f in fills if not f)
        lines = dataset[LINE_COLUMN] if LINE_COLUMN in dataset.column_names else [None] * len(texts)
        return [{"line": line, "text": text, "masks": fill} for line, text, fill in zip(lines, texts, fills)]

    def summary() -> str:
        if counts["without"]:
            logger.warning(
                "%d of %d texts hold no mask token (%s)",
                counts["without"],
                counts["texts"],
                tokenizer.mask_token,
            )
        return "filled texts"

    # JSON lines and CSV/TSV are read as predict goes; .txt documents (one per line, or per
    # paragraph: the whole file decides) are read by the task's reader into a memory-mapped table.
    chunks = args.read_input_chunks(read_split, streamed=STREAMED_TABLES_AND_JSONL)
    count = stream_predictions(args, chunks, predict_chunk, summary)
    return {"predictions": count, "without_mask": counts["without"]}


#: The suffixes ``mlm predict`` streams as the shared reader reads them (``.txt`` is documents).
STREAMED_TABLES_AND_JSONL = frozenset({".jsonl", ".ndjson", ".csv", ".tsv"})


def parse_input(record, where: str, settings=None) -> dict:
    """One JSON input: ``{"text"}`` holding ``[MASK]`` (or the tokenizer's own mask token).

    Example:
        >>> parse_input({"text": "the [MASK] sat"}, "inputs[0]")
        {'text': 'the [MASK] sat'}
    """
    from ...inputs import check_record, require_text

    check_record(record, where, ("text",))
    return {"text": require_text(record, "text", where)}


def predict_inputs(model, tokenizer, inputs: list[dict], args: MLMPredictArguments) -> list[dict]:
    """``{"text", "masks"}`` per input, as ``predict`` writes them (without ``line``)."""
    texts = [r["text"] for r in inputs]
    fills = fill_mask(model, tokenizer, texts, args.top_k, args.batch_size, args.max_length, args.precision)
    return [{"text": text, "masks": fill} for text, fill in zip(texts, fills)]

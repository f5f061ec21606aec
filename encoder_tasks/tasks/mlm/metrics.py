"""MLM metrics: masked-token accuracy, the mean loss over masked tokens, and perplexity.

Evaluation keeps two numbers per token (the predicted id and the negative log-likelihood of
the true one, :func:`masked_predictions`) instead of a vocabulary row, so memory does not
grow with the vocabulary; :func:`compute_metrics` reduces them.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .masking import IGNORE_INDEX


def masked_predictions(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per token: (predicted id, negative log-likelihood of the true token), ``[batch, seq, 2]``.

    Accepts the masked-only head's ``[n_masked, vocab]`` logits or full ``[batch, seq, vocab]``
    ones. Keeps evaluation memory at 2 numbers per token instead of a vocabulary row, and one
    row per example (the Trainer's gathering across processes assumes that). Positions that
    are not masked hold zeros; ``labels`` tell which ones count.

    Example:
        >>> logits = torch.tensor([[0.0, 9.0, 0.0]])  # one masked token, id 1 predicted
        >>> masked_predictions(logits, torch.tensor([[-100, 1]]))[0, 1, 0].item()
        1.0
    """
    selected = labels != IGNORE_INDEX
    targets = labels[selected]
    if logits.dim() == 3:
        logits = logits[selected]
    nll = nn.functional.cross_entropy(logits.float(), targets, reduction="none")
    out = torch.zeros((*labels.shape, 2), dtype=torch.float32, device=labels.device)
    out[selected] = torch.stack([logits.argmax(-1).float(), nll], dim=-1)
    return out


def compute_metrics(eval_pred) -> dict:
    """Masked-token accuracy, loss (mean NLL over masked tokens) and perplexity = exp(loss).

    Example:
        >>> from transformers import EvalPrediction
        >>> preds = np.array([[[0, 0.0], [4, 0.5], [2, 1.5]]])  # (predicted id, NLL) per token
        >>> out = compute_metrics(EvalPrediction(predictions=preds, label_ids=np.array([[-100, 4, 3]])))
        >>> out["masked_accuracy"], out["masked_loss"], out["masked_tokens"]
        (0.5, 1.0, 2)
    """
    labels = np.asarray(eval_pred.label_ids)
    selected = labels != IGNORE_INDEX
    preds = np.asarray(eval_pred.predictions, dtype=np.float64)[selected]
    targets = labels[selected]
    if len(targets) == 0:
        return {"masked_tokens": 0}
    loss = float(preds[:, 1].mean())
    return {
        "masked_accuracy": float((preds[:, 0].astype(np.int64) == targets).mean()),
        "masked_loss": loss,
        "perplexity": float(math.exp(min(loss, 700.0))),
        "masked_tokens": int(len(targets)),
        # A model that predicts one token for every mask is told apart (encoder_tasks.diagnosis).
        "distinct_predictions": int(len(np.unique(preds[:, 0].astype(np.int64)))),
    }


def evaluation_records(blocks, tokenizer, predictions, label_ids, context: int = 8) -> list[dict]:
    """``evaluate --write_predictions``: one record per masked position of the evaluation
    ``blocks`` (the prepared evaluation rows, in dataset order): the block and the position in it,
    the gold token, the top prediction, whether they are equal (what ``masked_accuracy`` counts),
    the negative log-likelihood of the gold token (what ``masked_loss`` averages), and ``context``
    tokens either side of the position (``[MASK]`` in its place; the model saw the evaluation's
    fixed masks, of which this is one).

    Example:
        >>> from encoder_tasks.testing import make_tiny_tokenizer
        >>> tok = make_tiny_tokenizer()
        >>> ids = tok("john lives in paris", add_special_tokens=False)["input_ids"]
        >>> preds = np.zeros((1, len(ids), 2)); preds[0, 1] = [ids[1], 0.25]
        >>> labels = np.full((1, len(ids)), IGNORE_INDEX); labels[0, 1] = ids[1]
        >>> record = evaluation_records([{"input_ids": ids}], tok, preds, labels)[0]
        >>> record["gold"] == record["prediction"], record["correct"], record["nll"]
        (True, True, 0.25)
    """
    predictions = np.asarray(predictions[0] if isinstance(predictions, tuple) else predictions)
    labels = np.asarray(label_ids)
    if len(labels) != len(blocks):
        raise ValueError(f"{len(labels)} evaluated rows for {len(blocks)} evaluation blocks")
    mask = tokenizer.mask_token or "[MASK]"
    records = []
    for row, block in enumerate(blocks):
        ids = list(block["input_ids"])
        for position in np.flatnonzero(labels[row] != IGNORE_INDEX):
            gold = int(labels[row, position])
            predicted = int(predictions[row, position, 0])
            left = tokenizer.decode(ids[max(0, position - context) : position], skip_special_tokens=True)
            right = tokenizer.decode(ids[position + 1 : position + 1 + context], skip_special_tokens=True)
            records.append(
                {
                    "block": row,
                    "position": int(position),
                    "context": " ".join(part for part in (left, mask, right) if part),
                    "gold": tokenizer.convert_ids_to_tokens(gold),
                    "prediction": tokenizer.convert_ids_to_tokens(predicted),
                    "correct": gold == predicted,
                    "nll": round(float(predictions[row, position, 1]), 6),
                }
            )
    return records

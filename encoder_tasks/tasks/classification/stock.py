"""The classification (and pair) head in a layout stock transformers loads.

Two layouts, picked from the head:

- ``--pooling cls`` on a family with a stock head (BERT, RoBERTa, XLM-R, CamemBERT, ELECTRA,
  DistilBERT, DeBERTa-v2): the plain stock ``*ForSequenceClassification``, no custom code;
- mean or max pooling (the default is mean), or a family whose stock heads cannot pass the
  toolkit head's input through (ModernBERT's end in a LayerNorm): the pooled model of
  :mod:`encoder_tasks.export.remote_code`, whose modeling file ships with the export, so
  ``AutoModelForSequenceClassification.from_pretrained(dir, trust_remote_code=True)`` and
  ``pipeline("text-classification", model=dir, trust_remote_code=True)`` load it.

Why the stock classes hold CLS heads only: our head is pooling -> dropout -> linear. The stock
sequence-classification heads read the first token only and put a fixed non-linearity before
the classifier: BERT/RoBERTa ``tanh(dense(h))``, ELECTRA ``gelu(dense(h))``, DistilBERT
``relu(dense(h))``, DeBERTa-v2 ``act(dense(h))`` with a configurable ``act``. A mean- or
max-pooled head cannot be written in any of them. For a CLS head the stock layer is set so
that it passes ``h`` through unchanged:

- DeBERTa-v2: ``pooler_hidden_act="linear"`` and ``dense = I``: exact;
- DistilBERT (ReLU) and ELECTRA (GELU): ``dense = I`` with a bias ``c`` large enough that
  every input lands where the activation is the identity (the last LayerNorm bounds each
  hidden unit: ``|h_i| <= |gamma_i| sqrt(d-1) + |beta_i|``), and the classifier bias takes
  ``W c`` back off: exact up to float rounding;
- BERT/RoBERTa (tanh): ``dense = eps I`` and classifier ``W / eps`` with ``eps`` chosen from the
  same bound so that ``tanh(eps h) / eps = h (1 + O(eps^2 h^2))`` lies below float32 rounding.

Example:
    >>> from encoder_tasks.backbone import load_encoder
    >>> from encoder_tasks.testing import make_tiny_model
    >>> from encoder_tasks.tasks.classification.model import SequenceClassifier
    >>> model = SequenceClassifier(load_encoder(make_tiny_model("bert")), num_labels=2, pooling="cls")
    >>> type(to_stock(model)).__name__
    'BertForSequenceClassification'
    >>> needs_remote_code(model) is None
    True
    >>> needs_remote_code(SequenceClassifier(load_encoder(make_tiny_model("bert")), num_labels=2, pooling="mean"))
    'the head mean-pools the tokens and the stock heads read the first token only'
"""

from __future__ import annotations

import logging
import math

import torch

from ...export.remote_code import MODELING_FILE, pooled_classifier
from ...export.stock import finish, hidden_bound, load_encoder_into, set_linear, stock_config

logger = logging.getLogger(__name__)

#: Stock sequence-classification head per model type:
#: (dense layer path, classifier path, activation between them).
SEQUENCE_HEADS = {
    "bert": ("bert.pooler.dense", "classifier", "tanh"),
    "roberta": ("classifier.dense", "classifier.out_proj", "tanh"),
    "xlm-roberta": ("classifier.dense", "classifier.out_proj", "tanh"),
    "camembert": ("classifier.dense", "classifier.out_proj", "tanh"),
    "electra": ("classifier.dense", "classifier.out_proj", "gelu"),
    "distilbert": ("pre_classifier", "classifier", "relu"),
    "deberta-v2": ("pooler.dense", "classifier", "identity"),
}
#: The toolkit's problem types under transformers' names.
PROBLEM_TYPES = {
    "single_label": "single_label_classification",
    "multi_label": "multi_label_classification",
    "regression": "regression",
}
# Shift past which GELU(x) == x in float32 (Phi(x) rounds to 1 beyond ~5.9).
GELU_SAFE = 8.0


def needs_remote_code(model) -> str | None:
    """Why ``model`` cannot be written as a stock ``*ForSequenceClassification``; None if it can."""
    pooling = model.pooler.mode
    model_type = getattr(model.encoder.config, "model_type", "")
    if pooling != "cls":
        return f"the head {pooling}-pools the tokens and the stock heads read the first token only"
    if model_type not in SEQUENCE_HEADS:
        reason = "end in a LayerNorm" if model_type == "modernbert" else "are not known to express it"
        return f"the stock {model_type!r} sequence heads {reason}"
    return None


def to_stock(model):
    """A model stock transformers loads, computing the same logits as ``model``.

    A CLS head of a family in :data:`SEQUENCE_HEADS` becomes that family's stock
    ``*ForSequenceClassification``; any other head the remote-code pooled model.
    """
    from transformers import AutoModelForSequenceClassification

    saved = model.settings.get("label_names") if model.settings is not None else None
    names = saved or [f"LABEL_{i}" for i in range(model.classifier.out_features)]
    changes = {
        "num_labels": len(names),
        "id2label": dict(enumerate(names)),
        "label2id": {n: i for i, n in enumerate(names)},
        "problem_type": PROBLEM_TYPES.get(model.problem_type),
    }
    reason = needs_remote_code(model)
    if reason is not None:
        logger.info("%s: exporting with %s (load with trust_remote_code=True)", reason, MODELING_FILE)
        return finish(pooled_classifier(model, **changes))
    model_type = model.encoder.config.model_type
    dense_path, out_path, activation = SEQUENCE_HEADS[model_type]
    if model_type == "deberta-v2":
        changes.update(pooler_hidden_act="linear", pooler_hidden_size=model.encoder.config.hidden_size)
    stock = AutoModelForSequenceClassification.from_config(stock_config(model, **changes))
    load_encoder_into(stock, model.encoder)
    dense = stock.get_submodule(dense_path)
    out = stock.get_submodule(out_path)
    weight = model.classifier.weight.detach().float()
    bias = model.classifier.bias.detach().float()
    d = weight.shape[1]
    eye = torch.eye(d)
    if activation == "identity":
        set_linear(dense, eye, torch.zeros(d))
        set_linear(out, weight, bias)
    elif activation in ("relu", "gelu"):
        shift = hidden_bound(model.encoder) + (GELU_SAFE if activation == "gelu" else 1.0)
        set_linear(dense, eye, shift)
        set_linear(out, weight, bias - weight @ shift)
    elif activation == "tanh":
        bound = float(hidden_bound(model.encoder).max())
        # tanh(eps h)/eps = h (1 - (eps h)^2 / 3 + ...): relative error (eps*bound)^2/3 <= 1e-8.
        eps = min(1e-3, math.sqrt(3e-8) / max(bound, 1e-6))
        set_linear(dense, eye * eps, torch.zeros(d))
        set_linear(out, weight / eps, bias)
    return finish(stock)

"""The tagger in the stock ``AutoModelForTokenClassification`` layout (served by the
``token-classification`` pipeline).

The toolkit's softmax tagger is one linear layer on the token states, the stock head's shape;
a CRF tagger decodes whole paths, which the stock model cannot, so it is refused here and
exports to ONNX (the CRF's Viterbi then runs beside the graph in numpy).

Example:
    >>> from encoder_tasks.backbone import load_encoder
    >>> from encoder_tasks.testing import make_tiny_model
    >>> from encoder_tasks.tasks.ner.model import TokenTagger
    >>> model = TokenTagger(load_encoder(make_tiny_model("bert")), label_names=["O", "B-X", "I-X"])
    >>> to_stock(model).config.id2label
    {0: 'O', 1: 'B-X', 2: 'I-X'}
"""

from __future__ import annotations

from ...export import ExportError
from ...export.stock import (
    LINEAR_TOKEN_HEADS,
    finish,
    load_encoder_into,
    require_family,
    set_linear,
    stock_config,
)


def to_stock(model):
    """A stock ``*ForTokenClassification`` with the tagger's per-token logits (no CRF)."""
    from transformers import AutoModelForTokenClassification

    if model.crf is not None:
        raise ExportError(
            "this tagger decodes with a CRF, which the stock AutoModelForTokenClassification (and its pipeline) "
            "cannot do; export it with --format onnx (the CRF's Viterbi runs beside the graph in numpy)"
        )
    require_family(model, LINEAR_TOKEN_HEADS, "token classification")
    names = list(model.label_names)
    config = stock_config(
        model,
        num_labels=len(names),
        id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
    )
    stock = AutoModelForTokenClassification.from_config(config)
    load_encoder_into(stock, model.encoder)
    set_linear(stock.classifier, model.classifier.weight.detach(), model.classifier.bias.detach())
    return finish(stock)

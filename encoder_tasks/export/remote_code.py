"""The stock-loadable layout for heads no stock class can express: weights plus a modeling file.

A mean- or max-pooled sequence classifier (the toolkit's default head is mean-pooled) has no
``*ForSequenceClassification`` to be written in: those read the first token only. It is
exported as :class:`~encoder_tasks.export.modeling_encoder_tasks.PooledEncoderForSequenceClassification`
instead, whose source file is copied beside the weights and named in ``config.json``'s
``auto_map``, so stock transformers loads it with ``trust_remote_code=True``:

    AutoModelForSequenceClassification.from_pretrained("exported/x", trust_remote_code=True)
    pipeline("text-classification", model="exported/x", trust_remote_code=True)

The checked export (:func:`encoder_tasks.export.stock.export_transformers`) compares its logits
with the toolkit model's before anything is written, as for every stock layout.

Example:
    >>> from encoder_tasks.backbone import load_encoder
    >>> from encoder_tasks.testing import make_tiny_model
    >>> from encoder_tasks.tasks.classification.model import SequenceClassifier
    >>> model = SequenceClassifier(load_encoder(make_tiny_model("bert")), num_labels=2, pooling="mean")
    >>> remote = pooled_classifier(model, num_labels=2)
    >>> type(remote).__name__, remote.config.pooling, remote.config.auto_map["AutoConfig"]
    ('PooledEncoderForSequenceClassification', 'mean', 'modeling_encoder_tasks.PooledEncoderConfig')
"""

from __future__ import annotations

from . import ExportError

#: The file shipped with the export, as ``auto_map`` names it.
MODELING_FILE = "modeling_encoder_tasks.py"


def pooled_classifier(model, **label_config):
    """``model`` (a toolkit sequence head) as the remote-code class, with its weights.

    ``label_config``: ``num_labels``, ``id2label``, ``label2id``, ``problem_type`` as the
    stock config fields (the task's converter fills them).
    """
    from .modeling_encoder_tasks import PooledEncoderConfig, PooledEncoderForSequenceClassification

    encoder = model.encoder.config.to_dict()
    for key in ("auto_map", "id2label", "label2id"):  # the labels are the head's, in the outer config
        encoder.pop(key, None)
    config = PooledEncoderConfig(
        encoder=encoder,
        pooling=model.pooler.mode,
        classifier_dropout=float(model.dropout.p),
        architectures=[PooledEncoderForSequenceClassification.__name__],
        **label_config,
    )
    remote = PooledEncoderForSequenceClassification(config)
    # class_weights is a non-persistent buffer of the toolkit head: training only.
    state = {k: v for k, v in model.state_dict().items() if k.startswith(("encoder.", "classifier."))}
    missing, unexpected = remote.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ExportError(
            f"the {model.encoder.config.model_type!r} encoder's weights do not fit the exported model "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]}); export it with --format onnx"
        )
    # auto_map as save_pretrained will write it, so the returned model says where its code is.
    config.auto_map = {
        "AutoConfig": f"{MODELING_FILE[:-3]}.{PooledEncoderConfig.__name__}",
        "AutoModelForSequenceClassification": f"{MODELING_FILE[:-3]}.{type(remote).__name__}",
    }
    return remote.to(next(model.parameters()).device).eval()

"""The MLM head: any encoder with BERT's masked-LM head, and where a new head starts from.

The head is BERT's (dense, activation, LayerNorm, decoder tied to the input embeddings, bias),
which is also the shape of the RoBERTa, DistilBERT, ELECTRA and ModernBERT heads: when the
checkpoint carries a pretrained MLM head it is copied in (and checked against
``AutoModelForMaskedLM``'s own output); otherwise the head starts fresh and, for the first
``head_warmup_steps``, only the head trains while the encoder stays frozen
(:class:`~encoder_tasks.tasks.mlm.trainer.HeadWarmup`), so random head gradients do not
disturb the pretrained encoder.

During training the head runs only at the masked positions: their hidden states are gathered
before the vocabulary projection, which is where most of an MLM step's compute goes.

The saved run is a starting point for every other task: ``--model_name_or_path runs/mlm/...``
loads its encoder (see :func:`encoder_tasks.backbone.load_encoder`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch
from torch import nn
from transformers.modeling_outputs import MaskedLMOutput

from ...artifact import WEIGHTS_FILE, read_task_metadata
from ...heads import EncoderWithHead
from .args import MLMSettings
from .masking import IGNORE_INDEX

logger = logging.getLogger(__name__)


# ---- the model ------------------------------------------------------------------------------
def _activation_name(config) -> str:
    for name in ("classifier_activation", "hidden_act", "activation", "hidden_activation"):
        value = getattr(config, name, None)
        if isinstance(value, str):
            return value
    return "gelu"


def _layer_norm_eps(config) -> float:
    for name in ("layer_norm_eps", "norm_eps", "layer_norm_epsilon"):
        value = getattr(config, name, None)
        if isinstance(value, float):
            return value
    return 1e-12


class MaskedLMHead(nn.Module):
    """Dense, activation, LayerNorm, then the vocabulary projection (tied to the input embeddings)."""

    def __init__(self, hidden_size: int, embeddings: nn.Embedding, activation: str, eps: float, std: float):
        from transformers.activations import ACT2FN

        super().__init__()
        vocab_size, embedding_size = embeddings.weight.shape
        self.dense = nn.Linear(hidden_size, embedding_size)
        self.activation = ACT2FN[activation]
        self.norm = nn.LayerNorm(embedding_size, eps=eps)
        self.decoder = nn.Linear(embedding_size, vocab_size, bias=False)
        self.decoder.weight = embeddings.weight  # tied: saved once, and the head starts meaningful
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.dense.weight, std=std)
        nn.init.zeros_(self.dense.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.activation(self.dense(hidden)))) + self.bias


class MaskedLanguageModel(EncoderWithHead):
    """Any encoder with a masked-LM head; the loss is the mean cross-entropy over masked tokens.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = MaskedLanguageModel(load_encoder(make_tiny_model("bert")))
        >>> labels = torch.tensor([[-100, 7, -100, -100]])
        >>> out = model(input_ids=torch.tensor([[2, 4, 6, 3]]), labels=labels)
        >>> out.logits.shape[0], out.logits.shape[1] == model.head.bias.shape[0]  # a vocabulary row per masked token
        (1, True)
    """

    task = "mlm"
    Settings = MLMSettings

    @classmethod
    def from_settings(cls, encoder, settings: MLMSettings, training=None) -> MaskedLanguageModel:
        """See :func:`build_model`."""
        return build_model(encoder, settings, training)

    #: ``num_items_in_batch`` (masked tokens in the whole accumulated batch) is used for the loss.
    accepts_loss_kwargs = True

    def __init__(self, encoder, masked_only_head: bool = True, activation: str | None = None):
        activation = activation or _activation_name(encoder.config)
        super().__init__(encoder, masked_only_head=masked_only_head, activation=activation)
        self.masked_only_head = masked_only_head
        config = encoder.config
        self.head = MaskedLMHead(
            config.hidden_size,
            encoder.get_input_embeddings(),
            activation,
            _layer_norm_eps(config),
            getattr(config, "initializer_range", 0.02),
        )
        #: Where the head came from: "new", "pretrained" (checkpoint's MLM head) or "run" (an MLM run).
        self.head_source = "new"

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        labels=None,
        num_items_in_batch=None,
        **kwargs,
    ):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encode(input_ids, attention_mask, token_type_ids, **kwargs)
        targets = labels
        if labels is not None and self.masked_only_head:
            # Gather masked positions first: the vocabulary projection then costs
            # masked tokens x vocab instead of all tokens x vocab.
            selected = labels != IGNORE_INDEX
            hidden, targets = hidden[selected], labels[selected]
        logits = self.head(hidden)
        loss = None
        if labels is not None:
            total = nn.functional.cross_entropy(
                logits.float().reshape(-1, logits.size(-1)),
                targets.reshape(-1),
                ignore_index=IGNORE_INDEX,
                reduction="sum",
            )
            count = num_items_in_batch if num_items_in_batch is not None else (targets != IGNORE_INDEX).sum()
            if isinstance(count, torch.Tensor):
                count = count.to(total.device)
            # A batch without masked tokens (possible for tiny inputs) contributes zero, not NaN.
            loss = total / (count.clamp(min=1) if isinstance(count, torch.Tensor) else max(count, 1))
        return MaskedLMOutput(loss=loss, logits=logits)


# ---- initialising the head ------------------------------------------------------------------
class StockHead(NamedTuple):
    """The modules of a stock ``*ForMaskedLM`` head that play the parts of :class:`MaskedLMHead`."""

    dense: nn.Linear
    norm: nn.LayerNorm
    #: The decoder (vocabulary projection).
    output: nn.Linear
    #: The output bias: the decoder's own, or a lone vocabulary-sized bias beside it; None if neither.
    bias: torch.Tensor | None


def find_stock_head(stock, head: MaskedLMHead) -> StockHead | None:
    """Find, by shape, the parts of ``stock``'s masked-LM head that match ``head``; None when
    the stock head is not dense -> activation -> LayerNorm -> decoder.

    Used both ways: to copy a checkpoint's pretrained head in (:func:`init_head`) and to
    export ours into the stock layout (``stock.py``).

    Example:
        >>> from transformers import AutoConfig, AutoModelForMaskedLM
        >>> from encoder_tasks.backbone import load_encoder
        >>> from encoder_tasks.testing import make_tiny_model
        >>> path = make_tiny_model("bert")
        >>> stock = AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(path))
        >>> parts = find_stock_head(stock, MaskedLanguageModel(load_encoder(path)).head)
        >>> type(parts.norm).__name__, parts.bias is not None
        ('LayerNorm', True)
    """
    output = stock.get_output_embeddings()
    if output is None:
        return None
    base_modules = {id(m) for m in stock.base_model.modules()}
    modules = [m for m in stock.modules() if id(m) not in base_modules]
    hidden, size = head.dense.in_features, head.dense.out_features
    dense = [
        m
        for m in modules
        if isinstance(m, nn.Linear) and m is not output and m.in_features == hidden and m.out_features == size
    ]
    norms = [m for m in modules if isinstance(m, nn.LayerNorm) and m.normalized_shape[0] == size]
    if len(dense) != 1 or len(norms) != 1:
        return None
    bias = output.bias
    if bias is None:
        candidates = [
            p
            for m in modules
            for n, p in m.named_parameters(recurse=False)
            if n == "bias" and p.shape == head.bias.shape
        ]
        bias = candidates[0] if len(candidates) == 1 else None
    return StockHead(dense[0], norms[0], output, bias)


def _copy_checkpoint_head(model: MaskedLanguageModel, source: str) -> bool:
    """Copy a checkpoint's pretrained MLM head into ``model.head``; True if it matches exactly.

    The copy is checked by comparing logits with ``AutoModelForMaskedLM`` on a probe input.
    """
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        reference, info = AutoModelForMaskedLM.from_pretrained(source, output_loading_info=True)
    except Exception as exc:  # families without a masked-LM class, unreadable checkpoints
        logger.info(
            "%s: no masked-LM head loadable (%s)", source, str(exc).splitlines()[0] if str(exc) else exc
        )
        return False
    finally:
        hf_logging.set_verbosity(verbosity)
    base_prefix = getattr(reference, "base_model_prefix", "")
    missing = [k for k in info.get("missing_keys", []) if not k.startswith(base_prefix + ".")]
    output = reference.get_output_embeddings()
    tied = output is not None and output.weight is reference.get_input_embeddings().weight
    # A tied decoder is the input embedding matrix: never a missing head weight.
    output_names = ("decoder.weight", "projector.weight", "lm_head.weight")
    missing = [k for k in missing if not (tied and k.endswith(output_names))]
    parts = None if missing else find_stock_head(reference, model.head)
    if parts is None:
        return False
    saved = {k: v.clone() for k, v in model.head.state_dict().items()}
    with torch.no_grad():
        model.head.dense.weight.copy_(parts.dense.weight)
        if parts.dense.bias is not None:
            model.head.dense.bias.copy_(parts.dense.bias)
        else:
            model.head.dense.bias.zero_()
        model.head.norm.weight.copy_(parts.norm.weight)
        if parts.norm.bias is not None:
            model.head.norm.bias.copy_(parts.norm.bias)
        else:
            model.head.norm.bias.zero_()
        model.head.norm.eps = parts.norm.eps
        if parts.bias is not None:
            model.head.bias.copy_(parts.bias)
        if not tied:
            model.head.decoder.weight.copy_(
                parts.output.weight
            )  # pragma: no cover - untied heads fail the check
    if _same_logits(model, reference):
        return True
    model.head.load_state_dict(saved)
    logger.warning(
        "%s: its MLM head has a shape this toolkit does not reproduce; starting a new head", source
    )
    return False


@torch.no_grad()
def _same_logits(model: MaskedLanguageModel, reference) -> bool:
    was_training = model.training
    model.eval()
    reference.eval()
    vocab = model.head.bias.shape[0]
    ids = torch.randint(5, vocab, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    ours = model.head(model.encode(ids, mask))
    theirs = reference(input_ids=ids, attention_mask=mask).logits
    model.train(was_training)
    return ours.shape == theirs.shape and torch.allclose(ours, theirs, atol=1e-4, rtol=1e-3)


def init_head(model: MaskedLanguageModel, source: str | None) -> str:
    """Give ``model`` the best head available from ``source``; returns where it came from."""
    if not source or not os.path.isdir(source):
        return "new"
    meta = read_task_metadata(source)
    if meta is not None:
        if meta.get("task") != MaskedLanguageModel.task:
            return "new"
        from safetensors.torch import load_file

        state = {
            k[len("head.") :]: v
            for k, v in load_file(os.path.join(source, WEIGHTS_FILE)).items()
            if k.startswith("head.")
        }
        missing, unexpected = model.head.load_state_dict(state, strict=False)
        if [m for m in missing if m != "decoder.weight"] or unexpected:
            return "new"
        return "run"
    if _copy_checkpoint_head(model, source):
        return "pretrained"
    return "new"


def build_model(
    encoder, settings: MLMSettings, training: Mapping[str, Any] | None = None
) -> MaskedLanguageModel:
    """The MLM head on ``encoder``, from the saved ``settings``; sets ``model.settings``.

    For training (``training`` given, even empty) the head starts from the best one the
    encoder's checkpoint offers (:func:`init_head`); a saved model's head (``training`` None)
    comes from its own weights, loaded next.

    Example:
        >>> from encoder_tasks.backbone import load_encoder
        >>> from encoder_tasks.testing import make_tiny_model
        >>> model = build_model(load_encoder(make_tiny_model("bert")), MLMSettings(), training={})
        >>> model.head_source, model.settings.mask_rate
        ('new', 0.15)
    """
    model = MaskedLanguageModel(
        encoder, masked_only_head=settings.masked_only_head, activation=settings.activation
    )
    model.settings = settings
    if training is None:
        model.head_source = "run"
        return model
    source = getattr(encoder, "name_or_path", None) or getattr(encoder.config, "_name_or_path", None)
    model.head_source = init_head(model, source)
    logger.info(
        "MLM head: %s",
        {
            "new": "new (the checkpoint has none): decoder tied to the input embeddings, dense layer random",
            "pretrained": f"the pretrained head of {source}",
            "run": f"the head of the MLM run {source}",
        }[model.head_source],
    )
    return model

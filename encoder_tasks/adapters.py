"""Parameter-efficient fine-tuning: LoRA adapters (``peft``, the ``peft`` extra) for any task.

``--lora_r 8`` (a field of :class:`~encoder_tasks.config.ModelArguments`, so every task has
it) injects LoRA matrices into the encoder's attention projections *in place*
(``peft.inject_adapter_in_model``): the encoder keeps its class and its ``forward``, so every
head works unchanged. The encoder's own weights are frozen; the adapters and the task head
train.

Saving:
- checkpoints keep the adapters apart (``...base_layer.weight``, ``...lora_A...``) and record
  the LoRA settings in ``encoder_tasks.json``, so ``--resume`` continues exactly and
  :meth:`EncoderWithHead.from_pretrained` re-injects them before loading;
- the final model has the adapters **merged** into the encoder weights
  (``W + B A * alpha / r``): a plain model that reloads, predicts, exports, and needs no peft.

Example:
    >>> from encoder_tasks.backbone import load_encoder
    >>> from encoder_tasks.testing import make_tiny_model
    >>> encoder = load_encoder(make_tiny_model("bert"))
    >>> settings = add_lora(encoder, {"r": 4, "alpha": 8})
    >>> settings["target_modules"]
    ['query', 'value']
    >>> merge_lora(encoder)  # 2 layers x (query, value)
    4
"""

from __future__ import annotations

import logging

from torch import nn

from .errors import UserError

logger = logging.getLogger(__name__)

#: Attention projections per model type, where peft's own table has none.
TARGET_MODULES = {
    "distilbert": ["q_lin", "v_lin"],
    "modernbert": ["Wqkv"],
}


def lora_settings(model_args) -> dict | None:
    """The LoRA settings given on the command line, or None when LoRA is off."""
    r = getattr(model_args, "lora_r", None)
    if not r:
        return None
    if r < 0:
        raise UserError(f"--lora_r must be a positive rank, found {r}")
    targets = getattr(model_args, "lora_target_modules", None)
    if isinstance(targets, str):
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    return {
        "r": int(r),
        "alpha": float(getattr(model_args, "lora_alpha", None) or 2 * r),
        "dropout": float(getattr(model_args, "lora_dropout", 0.0) or 0.0),
        "target_modules": list(targets) if targets else None,
    }


def default_targets(encoder: nn.Module) -> list[str]:
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TABLE

    model_type = getattr(encoder.config, "model_type", "")
    targets = PEFT_TABLE.get(model_type) or TARGET_MODULES.get(model_type)
    if not targets:
        linear = sorted(
            {name.rsplit(".", 1)[-1] for name, m in encoder.named_modules() if isinstance(m, nn.Linear)}
        )
        raise UserError(
            f"--lora_target_modules: no default for model type {model_type!r}; name the linear layers to adapt "
            f"(this encoder has: {', '.join(linear[:20])})"
        )
    return list(targets)


def add_lora(encoder: nn.Module, settings: dict) -> dict:
    """Inject LoRA adapters into ``encoder`` in place; freeze its other weights.

    Returns the settings with the target modules filled in (stored with the model).
    """
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError:
        raise UserError("--lora_r needs peft: pip install 'encoder-tasks[peft]'") from None
    settings = dict(settings)
    settings["target_modules"] = settings.get("target_modules") or default_targets(encoder)
    config = LoraConfig(
        r=settings["r"],
        lora_alpha=settings["alpha"],
        lora_dropout=settings.get("dropout", 0.0),
        target_modules=settings["target_modules"],
    )
    try:
        inject_adapter_in_model(config, encoder)
    except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
        raise UserError(f"--lora_target_modules: {exc}") from None
    for name, param in encoder.named_parameters():
        param.requires_grad = "lora_" in name
    return settings


def apply_lora(model, model_args) -> dict | None:
    """Give ``model.encoder`` LoRA adapters when ``--lora_r`` is set; record them in the metadata."""
    settings = lora_settings(model_args)
    if settings is None:
        return None
    settings = add_lora(model.encoder, settings)
    model.settings = model.settings.replace(lora=settings)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    logger.info(
        "LoRA r=%s on %s: %s of %s parameters train (%.2f%%)",
        settings["r"],
        settings["target_modules"],
        f"{trainable:,}",
        f"{total:,}",
        100 * trainable / total,
    )
    return settings


def merge_lora(module: nn.Module) -> int:
    """Fold every LoRA adapter into its base weight and remove it; returns how many were merged."""
    from peft.tuners.lora import LoraLayer

    merged = 0
    for name, child in list(module.named_modules()):
        if not isinstance(child, LoraLayer):
            continue
        child.merge()
        parent_name, _, attr = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        base = child.get_base_layer()
        for param in base.parameters():
            param.requires_grad = True
        setattr(parent, attr, base)
        merged += 1
    return merged


def merge_model_lora(model) -> None:
    """Merge the adapters of a LoRA-trained model before its final save (no-op without LoRA)."""
    settings = model.settings.lora if model.settings is not None else None
    if settings is None:
        return
    count = merge_lora(model.encoder)
    model.settings = model.settings.replace(
        lora=None, lora_merged=f"r={settings['r']}, alpha={settings['alpha']:g}, {count} layers"
    )

"""Thin task heads composed on top of any ``AutoModel`` encoder.

:class:`EncoderWithHead` owns an encoder and a small head; subclasses implement
``forward`` and return a transformers ``ModelOutput``, so the stock ``Trainer``
machinery (loss from ``outputs.loss``, logits for metrics) works unchanged.

A saved model directory holds
- ``config.json``: the encoder's config (any family ``AutoConfig`` knows),
- ``model.safetensors``: encoder and head weights,
- ``encoder_tasks.json``: the task, the head class and the task's typed settings
  (:class:`~encoder_tasks.task.TaskSettings`, format 2; format 1 still loads),
- the tokenizer files.

An int8 model (``encoder-tasks quantize``, :mod:`encoder_tasks.quantization`) is the same
directory: its settings list the int8 layers (key ``quantization``), and
:meth:`EncoderWithHead.from_pretrained` swaps them in before the weights load.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from .adapters import add_lora
from .artifact import (
    SETTINGS_FORMAT,
    TASK_FILE,
    WEIGHTS_FILE,
    TaskSettings,
    load_settings,
    read_task_metadata,
)
from .backbone import check_attention, load_encoder, resolve_model_path
from .errors import UserError
from .padding_free import encode_unpadded
from .quantization.int8 import int8_skeleton


class Pooler(nn.Module):
    """Pool token states ``[batch, seq, hidden]`` into one vector per sequence.

    ``cls`` takes the first real token (found from the mask, so left padding works),
    ``mean`` averages real tokens, ``max`` takes the element-wise max over real tokens.

    Example:
        >>> pool = Pooler("mean")
        >>> states = torch.tensor([[[1.0], [3.0], [100.0]]])
        >>> pool(states, torch.tensor([[1, 1, 0]])).tolist()
        [[2.0]]
    """

    MODES = ("cls", "mean", "max")

    def __init__(self, mode: str = "mean"):
        super().__init__()
        if mode not in self.MODES:
            raise UserError(f"pooling must be one of {', '.join(self.MODES)}, found {mode!r}")
        self.mode = mode

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.to(hidden_states.dtype).unsqueeze(-1)
        if self.mode == "cls":
            first = attention_mask.long().argmax(dim=1)
            return hidden_states[torch.arange(hidden_states.size(0), device=hidden_states.device), first]
        if self.mode == "mean":
            return (hidden_states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        filled = hidden_states.masked_fill(mask == 0, torch.finfo(hidden_states.dtype).min)
        return filled.max(dim=1).values


def full_precision(layer: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """Apply a task's small output layer in fp32, also under bf16/fp16 autocast.

    bf16 keeps 8 bits of mantissa, so bf16 logits come in steps (a regression score near 2.5
    moves in steps of 0.016): predictions tie, which costs rank metrics such as Spearman and
    reorders near-equal QA spans. The output layers are a sliver of the compute, so they run
    in full precision while the encoder keeps autocast.

    Example:
        >>> layer = nn.Linear(4, 1)
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     full_precision(layer, torch.ones(2, 4)).dtype
        torch.float32
    """
    with torch.autocast(inputs.device.type, enabled=False):
        return layer(inputs.float())


def head_dropout(encoder_config, dropout: float | None) -> float:
    """The head's dropout: the user's value, else the encoder's own hidden dropout, else 0.1."""
    if dropout is not None:
        return float(dropout)
    for name in ("classifier_dropout", "hidden_dropout_prob", "dropout", "hidden_dropout"):
        value = getattr(encoder_config, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return 0.1


class EncoderWithHead(nn.Module):
    """Base class: an encoder plus a task head, saved and reloaded as one directory.

    Subclasses set ``task``, take their head settings as keyword arguments (JSON-able, so
    they can be stored) and implement ``forward``.
    """

    task: str = ""
    #: The :class:`~encoder_tasks.artifact.TaskSettings` subclass saved with this head: a saved
    #: model is rebuilt from the head class its ``encoder_tasks.json`` names, with these settings.
    Settings: type[TaskSettings] = TaskSettings
    # Heads average their loss over their own batch. Without this, the Trainer sees
    # ``**kwargs`` in ``forward``, assumes the model normalises by the global item count, and
    # multiplies the loss by the number of processes.
    accepts_loss_kwargs = False
    #: Heads that run their encoder through :meth:`encode` can have it run padding-free.
    supports_padding_free = True
    #: Set by :func:`encoder_tasks.padding_free.configure_padding_free` (``--padding_free``):
    #: the encoder then runs on the real tokens only, as one flattened row.
    padding_free = False

    def __init__(self, encoder: nn.Module, **head_config: Any):
        super().__init__()
        self.encoder = encoder
        self.head_config = dict(head_config)
        #: The task's saved settings (label names, columns, ...): a frozen
        #: :class:`~encoder_tasks.task.TaskSettings`, set by the task's ``build_model``.
        self.settings = None
        # The encoder's own pooler (BERT, RoBERTa) is never used by our heads. Dropping it
        # saves compute and keeps DDP from waiting on gradients that never come.
        if getattr(encoder, "pooler", None) is not None:
            encoder.pooler = None
        accepted = inspect.signature(encoder.forward).parameters
        self._encoder_accepts = set(accepted)

    @property
    def metadata(self) -> dict[str, Any]:
        """The saved settings as a plain dict (a copy: change settings with ``replace``)."""
        return self.settings.to_dict() if self.settings is not None else {}

    # transformers' Trainer and accelerate look for these.
    @property
    def config(self):
        return self.encoder.config

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def encode(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs) -> torch.Tensor:
        """Run the encoder and return the last hidden states ``[batch, seq, hidden]``.

        ``token_type_ids`` are passed only to encoders that take them (DistilBERT and
        ModernBERT do not), so no head assumes a model family. With :attr:`padding_free`
        set, padding is removed before the encoder and put back (as zeros) after it.
        """
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None and "token_type_ids" in self._encoder_accepts:
            inputs["token_type_ids"] = token_type_ids
        for key, value in kwargs.items():
            if key in self._encoder_accepts and value is not None:
                inputs[key] = value
        if self.padding_free and attention_mask is not None:
            return encode_unpadded(self.encoder, inputs)
        return self.encoder(**inputs, return_dict=True).last_hidden_state

    # ---- saving and loading -------------------------------------------------------------
    def save_pretrained(self, output_dir: str | os.PathLike, state_dict: dict | None = None) -> None:
        """Write config, weights and metadata so :meth:`from_pretrained` restores this model.

        Files are written under temporary names and renamed, so a kill mid-save never
        leaves a half-written file under the real name.
        """
        output_dir = Path(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        if state_dict is None:
            state_dict = self.state_dict()
        # safetensors refuses tensors that share memory (tied embeddings): keep one copy.
        seen: dict[tuple, str] = {}
        tensors = {}
        for name, tensor in state_dict.items():
            key = (tensor.data_ptr(), tensor.shape, tensor.dtype) if tensor.numel() else None
            if key is not None and key in seen:
                continue
            if key is not None:
                seen[key] = name
            tensors[name] = tensor.detach().contiguous().cpu()
        _atomic_write(output_dir / WEIGHTS_FILE, lambda p: save_file(tensors, str(p), {"format": "pt"}))
        _atomic_write(output_dir / "config.json", lambda p: self.encoder.config.to_json_file(str(p)))
        metadata = {
            "format_version": SETTINGS_FORMAT,
            "task": self.task,
            "head_class": f"{type(self).__module__}:{type(self).__qualname__}",
            "head_config": self.head_config,
            "settings": self.settings.to_dict() if self.settings is not None else None,
        }
        text = json.dumps(metadata, indent=2, ensure_ascii=False)
        _atomic_write(output_dir / TASK_FILE, lambda p: p.write_text(text, encoding="utf-8"))

    @classmethod
    def from_settings(cls, encoder: nn.Module, settings: TaskSettings, training=None) -> EncoderWithHead:
        """The head on ``encoder``, built from its saved ``settings`` (``training``: inputs that
        matter only in training, such as class weights); a head with constructor arguments of
        its own overrides this."""
        model = cls(encoder)
        model.settings = settings
        return model

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, encoder: nn.Module | None = None) -> EncoderWithHead:
        """Rebuild a saved model (any task) from its directory; no network access needed.

        The head class is the one ``encoder_tasks.json`` names (``head_class``), built from the
        settings it saved (format 2) or from its constructor arguments (format 1), as
        sentence-transformers rebuilds a model from the classes in its ``modules.json``: no
        task registry is needed to open a saved model.

        ``encoder``: a stand-in that already holds the saved encoder (a runtime running its
        exported graph: :func:`encoder_tasks.runtimes.remembered_runtime`); then only the head's
        weights are read, and the torch encoder is never built (transformers' model code is
        most of a one-sentence predict's start-up). A plain model, not LoRA or int8.

        Example:
            >>> model = EncoderWithHead.from_pretrained("runs/classification-sst2")  # doctest: +SKIP
        """
        path = str(path)
        metadata = read_task_metadata(path)
        if metadata is None:
            raise UserError(f"{path}: not a model saved by encoder-tasks (no {TASK_FILE} found)")
        head_cls = import_head_class(metadata.get("head_class", ""), path)
        if cls is not EncoderWithHead and not issubclass(head_cls, cls):
            raise UserError(f"{path} holds a {metadata.get('task')!r} model, not a {cls.task!r} model")
        settings = load_settings(head_cls.Settings, metadata)
        stand_in = encoder is not None
        if stand_in and (settings.lora or settings.get("quantization")):
            raise UserError(f"{path}: a LoRA or int8 model loads with its torch encoder")
        if not stand_in:
            encoder = _encoder_from_config(path)
            if settings.lora:  # a LoRA checkpoint: adapters stored apart, re-inject before loading
                add_lora(encoder, settings.lora)
        if metadata.get("settings"):
            model = head_cls.from_settings(encoder, settings)
        else:  # format 1, or a head built by hand without settings: its constructor arguments
            model = head_cls(encoder, **(metadata.get("head_config") or {}))
        model.settings = settings
        quantization = settings.get("quantization")
        if quantization:  # written by `encoder-tasks quantize`: int8 layers load into their places
            int8_skeleton(model, quantization, f"{path}/{TASK_FILE}")
        if stand_in:
            model.load_head_weights(path)
        else:
            model.load_weights(path)
        model.eval()
        return model

    def load_weights(self, path: str | os.PathLike) -> None:
        weights = _weights_file(path)
        state = load_file(str(weights))
        missing, unexpected = self.load_state_dict(state, strict=False)
        # Tied weights are stored once; anything else missing means the file does not fit.
        tied = {name for name in missing if _is_tied_copy(self, name, state)}
        missing = [name for name in missing if name not in tied]
        if missing or unexpected:
            raise UserError(
                f"{weights}: weights do not match the model "
                f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
            )

    def load_head_weights(self, path: str | os.PathLike) -> None:
        """The head's tensors only, for a model whose encoder is a stand-in holding its own (a
        runtime); a head tied to the encoder's weights (MLM's output layer, stored under the
        encoder's name) is refused: it needs the encoder."""
        weights = _weights_file(path)
        with safe_open(str(weights), framework="pt") as handle:
            state = {k: handle.get_tensor(k) for k in handle.keys() if not k.startswith("encoder.")}
        missing, unexpected = self.load_state_dict(state, strict=False)
        missing = [name for name in missing if not name.startswith("encoder.")]  # the stand-in's own
        if missing or unexpected:
            raise UserError(
                f"{weights}: the head's weights do not load apart from the encoder "
                f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
            )

    @staticmethod
    def load_encoder_from_run(path: str | os.PathLike) -> nn.Module:
        """Return the fine-tuned encoder of a saved run, to start another task from it."""
        model = EncoderWithHead.from_pretrained(path)
        if model.settings.get("quantization"):
            raise UserError(
                f"{path} is an int8 model (encoder-tasks quantize), which cannot be trained further; "
                f"start from the fp32 run it was quantized from ({model.settings.get('quantization').get('source')})"
            )
        return model.encoder.train()


def _weights_file(path: str | os.PathLike) -> Path:
    weights = Path(path) / WEIGHTS_FILE
    if not weights.is_file():
        raise UserError(f"{path}: no {WEIGHTS_FILE}; the run did not finish saving")
    return weights


def _is_tied_copy(model: nn.Module, name: str, state: dict) -> bool:
    params = dict(model.named_parameters(remove_duplicate=False))
    tensor = params.get(name)
    if tensor is None:
        return False
    return any(
        other != name and other in state and value.data_ptr() == tensor.data_ptr()
        for other, value in params.items()
    )


def import_head_class(spec: str, path: str) -> type[EncoderWithHead]:
    """The head class ``module:QualName`` that a saved model's ``encoder_tasks.json`` names.

    Only an :class:`EncoderWithHead` subclass is accepted; nothing else named in a file is
    used. Format 1 named a task's package (``encoder_tasks.tasks.ner:TokenTagger``); the heads
    now live in each task package's ``model`` module, so that is looked in as well.

    Example:
        >>> import_head_class("encoder_tasks.heads:EncoderWithHead", "run").__name__
        'EncoderWithHead'
    """
    module_name, _, qualname = str(spec).partition(":")
    if not module_name or not qualname:
        raise UserError(f"{path}/{TASK_FILE}: head_class {spec!r} is not of the form 'module:Class'")
    for candidate in (module_name, f"{module_name}.model"):
        try:
            found = getattr(importlib.import_module(candidate), qualname)
        except (ImportError, AttributeError):
            continue
        if isinstance(found, type) and issubclass(found, EncoderWithHead):
            return found
        raise UserError(f"{path}/{TASK_FILE}: head_class {spec!r} is not a head (an EncoderWithHead)")
    raise UserError(f"{path}/{TASK_FILE}: head class {spec!r} not found in this version")


def load_starting_encoder(name_or_path: str, **kwargs) -> nn.Module:
    """The encoder a run starts from: the fine-tuned encoder inside a run this toolkit saved
    (so a model adapted with MLM, or trained on any task, starts another task), else the
    checkpoint's pretrained encoder (:func:`encoder_tasks.backbone.load_encoder`).

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> load_starting_encoder(make_tiny_model("bert")).config.hidden_size
        32
    """
    path = resolve_model_path(name_or_path)
    if read_task_metadata(path) is None:
        return load_encoder(path, **kwargs)
    encoder = EncoderWithHead.load_encoder_from_run(path)
    attention = kwargs.get("attn_implementation")
    if attention:
        check_attention(encoder, attention)
    return encoder


def _encoder_from_config(path: str) -> nn.Module:
    """The encoder a saved model's ``config.json`` describes, its parameters left uninitialised:
    :meth:`EncoderWithHead.load_weights` replaces every one of them (and refuses a file that lacks
    one), so drawing random weights first only cost time (about 0.5 s of a one-sentence predict
    with MiniLM-L6). Buffers (position ids, rotary tables) are initialised as usual, and tied
    weights tied, as transformers' own ``from_pretrained`` does for the weights it loads."""
    from transformers import AutoConfig, AutoModel

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}/config.json: not a readable encoder config ({exc})") from exc
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # another transformers: initialise as it does
        return AutoModel.from_config(config)
    with no_init_weights():
        encoder = AutoModel.from_config(config)
    for parameter in encoder.parameters():
        parameter._is_hf_initialized = True  # transformers' init functions skip these
    encoder.initialize_weights()  # what is left: the buffers
    encoder.tie_weights()
    return encoder


def _atomic_write(target: Path, write) -> None:
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()

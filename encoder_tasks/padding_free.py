"""Padding-free (unpadded) attention: the encoder runs on real tokens only.

A padded batch ``[batch, seq]`` spends every layer's compute on padding. With a
variable-length attention kernel (FlashAttention's ``varlen`` functions, reached through
transformers' ``flash_attention_2``/``_3`` or a kernels-hub FlashAttention), the real tokens of
all sequences can be run as one row ``[1, total]`` instead: position ids restart at every
sequence and ``cu_seq_lens_q/k`` (cumulative lengths, as transformers'
``DataCollatorWithFlattening`` makes them) tell the kernel where each sequence starts, so no
token attends across a boundary.

Here the flattening happens inside :meth:`encoder_tasks.heads.EncoderWithHead.encode`:
batches stay padded at every interface (collators, labels, heads, metrics), the encoder sees
one flattened row, and its states are scattered back to ``[batch, seq, hidden]`` (zeros at
padding) before the head. Every task head (pooling, CRF, QA spans, MLM) therefore works
unchanged, in training and in the evaluations run during training.

It is only safe where the attention keeps sequences apart. With ``sdpa`` or ``eager``
attention a flattened row has no mask, so every token would attend to every sequence of
the batch. :func:`configure_padding_free` therefore turns it on only for a varlen-capable
attention implementation, an encoder whose ``forward`` passes position ids and extra
attention arguments on, and after a probe batch has shown that flattened outputs equal
the outputs of each sequence run alone.

Example:
    >>> import torch
    >>> mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    >>> flat, indices = flatten_batch({"input_ids": torch.tensor([[5, 6, 7], [8, 9, 0]]),
    ...                                 "attention_mask": mask}, [3, 2])
    >>> flat["input_ids"].tolist(), flat["position_ids"].tolist(), flat["cu_seq_lens_q"].tolist()
    ([[5, 6, 7, 8, 9]], [[0, 1, 2, 0, 1]], [0, 3, 5])
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import logging

import torch

from .errors import UserError

logger = logging.getLogger(__name__)

CHOICES = ("auto", "true", "false")

#: Attention implementations, besides every FlashAttention flavour (any name holding
#: "flash"), known to honour ``cu_seq_lens_q/k``. A kernel registered with
#: ``transformers.AttentionInterface`` that does so can be declared with
#: :func:`register_varlen_attention`.
VARLEN_ATTENTION: set[str] = set()

FIX = "--attn_implementation flash_attention_2 (pip install flash-attn; needs a CUDA GPU and bf16/fp16)"


def register_varlen_attention(name: str) -> None:
    """Declare that the attention implementation ``name`` keeps flattened sequences apart
    (it reads ``cu_seq_lens_q``/``cu_seq_lens_k`` from its keyword arguments)."""
    VARLEN_ATTENTION.add(name)


def is_varlen_attention(name: str | None) -> bool:
    """True for attention implementations that take sequence boundaries (``cu_seq_lens``).

    Example:
        >>> is_varlen_attention("flash_attention_2"), is_varlen_attention("sdpa")
        (True, False)
    """
    return bool(name) and ("flash" in name or name in VARLEN_ATTENTION)


def position_offset(encoder) -> int:
    """Where the encoder's positions start: RoBERTa-style embeddings count from
    ``padding_idx + 1``, the others from 0."""
    embeddings = getattr(encoder, "embeddings", None)
    if hasattr(embeddings, "create_position_ids_from_input_ids"):
        return int(embeddings.padding_idx) + 1
    return 0


def flatten_batch(inputs: dict, counts: list[int], offset: int = 0) -> tuple[dict, torch.Tensor]:
    """Turn padded inputs into one row of real tokens; return it and the real positions.

    ``inputs`` holds ``attention_mask`` ``[batch, seq]`` and tensors laid out like it
    (``input_ids``, ``token_type_ids``, ...); ``counts`` are the real tokens per row. The
    row gets ``position_ids`` restarting at ``offset`` for each sequence and the
    FlashAttention varlen arguments ``cu_seq_lens_q/k`` (int32) and ``max_length_q/k`` (int),
    the same contract as transformers' ``DataCollatorWithFlattening``.
    """
    mask = inputs["attention_mask"].bool()
    # The count is known, so the positions come without another host sync.
    indices = torch.nonzero_static(mask.flatten(), size=sum(counts)).squeeze(1)
    flat = {}
    for key, value in inputs.items():
        if key == "attention_mask":
            continue
        if isinstance(value, torch.Tensor) and tuple(value.shape[:2]) == tuple(mask.shape):
            flat[key] = value.flatten(0, 1)[indices].unsqueeze(0)
        else:
            flat[key] = value
    if "position_ids" not in flat:
        positions = mask.long().cumsum(dim=1) - 1 + offset  # counted over real tokens
        flat["position_ids"] = positions.flatten()[indices].unsqueeze(0)
    bounds = [0, *itertools.accumulate(c for c in counts if c > 0)]
    cu_seq_lens = torch.tensor(bounds, dtype=torch.int32, device=mask.device)
    longest = max(counts)
    flat.update(
        cu_seq_lens_q=cu_seq_lens, cu_seq_lens_k=cu_seq_lens, max_length_q=longest, max_length_k=longest
    )
    return flat, indices


def encode_unpadded(encoder, inputs: dict) -> torch.Tensor:
    """Run ``encoder`` on the real tokens of a padded batch; return ``[batch, seq, hidden]``
    states with zeros at padding. A batch without padding runs as it is."""
    mask = inputs["attention_mask"]
    batch, seq = mask.shape
    # One host sync per batch: FlashAttention takes the longest length as a Python int.
    counts = [int(c) for c in mask.sum(dim=1).tolist()]
    if min(counts) == seq:
        return encoder(**inputs, return_dict=True).last_hidden_state
    flat, indices = flatten_batch(inputs, counts, position_offset(encoder))
    hidden = encoder(**flat, return_dict=True).last_hidden_state[0]
    out = hidden.new_zeros(batch * seq, hidden.size(-1)).index_copy(0, indices, hidden)
    return out.view(batch, seq, -1)


# ---- deciding -----------------------------------------------------------------------------------
def static_problem(model) -> str | None:
    """Why padding-free cannot run on ``model`` (an EncoderWithHead), or None if it may."""
    if not getattr(model, "supports_padding_free", False):
        return f"the {getattr(model, 'task', '') or type(model).__name__} head does not support it"
    encoder = model.encoder
    attention = getattr(encoder.config, "_attn_implementation", None)
    if not is_varlen_attention(attention):
        return (
            f"the encoder's attention implementation is {attention!r}, which takes no sequence boundaries "
            f"(in a flattened batch every sequence would attend to the others); load it with {FIX}"
        )
    params = inspect.signature(encoder.forward).parameters.values()
    names = {p.name for p in params}
    if "position_ids" not in names or not any(p.kind is p.VAR_KEYWORD for p in params):
        return (
            f"{type(encoder).__name__}.forward takes no position_ids or extra attention arguments, so "
            "sequence boundaries cannot reach its attention"
        )
    return None


def _probe_inputs(config, offset: int, device) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    longest = max(2, min(32, int(getattr(config, "max_position_embeddings", 64) or 64) - offset - 2))
    counts = sorted({longest, longest // 2 + 1, longest // 3 + 1}, reverse=True)
    generator = torch.Generator().manual_seed(0)  # the global RNG (dropout, masks) is left alone
    vocab = int(config.vocab_size)
    ids = torch.randint(0, vocab, (len(counts), longest), generator=generator)
    pad = config.pad_token_id if config.pad_token_id is not None else 0
    ids = torch.where(ids == pad, (ids + 1) % vocab, ids)
    mask = torch.zeros_like(ids)
    for row, count in enumerate(counts):
        mask[row, :count] = 1
    ids = ids.masked_fill(mask == 0, pad)
    return ids.to(device), mask.to(device), counts


def probe(model, autocast_dtype: torch.dtype | None = None) -> tuple[float, float]:
    """Relative errors (flattened, padded) of a probe batch against each sequence run alone.

    Three sequences of different lengths go through the encoder three ways: each alone (no
    padding: the reference), padded together, and flattened. A model that lets sequences
    attend to each other, or ignores the restarted position ids, shows a flattened error far
    above the padded one, which measures the numeric noise of this precision.
    """
    was_training, was_on = model.training, model.padding_free
    device = model.device
    ids, mask, counts = _probe_inputs(model.encoder.config, position_offset(model.encoder), device)
    real = mask.bool()
    autocast = (
        torch.autocast(device.type, dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    model.eval()
    try:
        with torch.no_grad(), autocast:
            model.padding_free = False
            alone = torch.cat(
                [model.encode(ids[i : i + 1, :c], mask[i : i + 1, :c])[0] for i, c in enumerate(counts)]
            ).float()
            padded = model.encode(ids, mask)[real].float()
            model.padding_free = True
            flat = model.encode(ids, mask)[real].float()
    finally:
        model.padding_free = was_on
        model.train(was_training)
    scale = alone.norm().clamp(min=1e-12)
    return float((flat - alone).norm() / scale), float((padded - alone).norm() / scale)


def uses_gpu(args) -> bool:
    """Whether training runs on a CUDA device."""
    return args.device.type == "cuda"


def _autocast_dtype(args) -> torch.dtype | None:
    return torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None


def configure_padding_free(model, args) -> bool:
    """Decide ``--padding_free`` for ``model`` and set ``model.padding_free``; returns it.

    ``auto`` turns it on only on a GPU, with a varlen attention, an encoder that passes the
    boundaries on, and a passing probe; otherwise it stays off with one log line saying why.
    ``true`` raises :class:`UserError` where any of these (but the GPU) is missing.

    Example:
        >>> from types import SimpleNamespace
        >>> from encoder_tasks.backbone import load_encoder
        >>> from encoder_tasks.heads import EncoderWithHead
        >>> from encoder_tasks.testing import make_tiny_model
        >>> model = EncoderWithHead(load_encoder(make_tiny_model("bert")))
        >>> configure_padding_free(model, SimpleNamespace(padding_free="auto", device=torch.device("cpu")))
        False
    """
    choice = str(getattr(args, "padding_free", "auto")).lower()
    model.padding_free = False
    if choice == "false":
        return False
    forced = choice == "true"
    problem = None if forced or uses_gpu(args) else "training does not run on a GPU"
    problem = problem or static_problem(model)
    if problem is None:
        if uses_gpu(args) and model.device != args.device:
            model.to(args.device)  # the probe runs where training will (the Trainer would move it anyway)
        dtype = _autocast_dtype(args)
        try:
            flat_error, noise = probe(model, dtype)
        except Exception as exc:  # a kernel that refuses this dtype/device: say so instead of a traceback
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            problem = f"the encoder failed on a flattened probe batch ({first})"
        else:
            tolerance = 4 * noise + (1e-4 if dtype is not None else 1e-5)
            if not flat_error <= tolerance:
                problem = (
                    f"on a probe batch the flattened outputs differ from each sequence run alone by "
                    f"{flat_error:.2g} (relative; padded: {noise:.2g}), so this encoder does not keep "
                    f"flattened sequences apart or ignores their position ids; use {FIX}"
                )
    if problem is not None:
        if forced:
            raise UserError(f"--padding_free true: {problem}; or pass --padding_free auto/false")
        logger.info("padding-free attention off: %s", problem)
        return False
    model.padding_free = True
    attention = model.encoder.config._attn_implementation
    logger.info("padding-free attention on (%s): the encoder runs on real tokens only", attention)
    return True

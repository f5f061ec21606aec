"""The sample inputs every export is checked on, and how two models' outputs are compared.

Both checks (stock layout and ONNX) score the same batches, chosen without knowing the task:
single texts, and pairs of texts, so token type ids (the second segment of pair classifiers
and QA) are exercised too. The outputs compared are the task's ``onnx_outputs``; an output
with a ``sequence`` axis is compared at real (unpadded) positions only.

Example:
    >>> from encoder_tasks.backbone import load_tokenizer
    >>> from encoder_tasks.testing import make_tiny_model
    >>> batches = sample_batches(load_tokenizer(make_tiny_model("bert")))
    >>> [int(b["input_ids"].shape[0]) for b in batches]
    [4, 4]
    >>> bool(batches[1]["token_type_ids"].any())  # the second text of each pair
    True
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

SAMPLE_TEXTS = (
    "The film was a delight from start to finish.",
    "A dull, overlong and entirely forgettable movie.",
    "John Smith works for Acme Inc. in New York City.",
    "what did the cat do? the cat sat on the mat",
)


def sample_batches(tokenizer) -> list[dict[str, torch.Tensor]]:
    """Two padded batches: the sample texts alone, and each paired with another one."""
    texts = list(SAMPLE_TEXTS)
    single = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    pairs = tokenizer(texts, texts[::-1], padding=True, truncation=True, return_tensors="pt")
    return [dict(single), dict(pairs)]


def real_outputs(output, outputs: Mapping[str, tuple[str, ...]], mask: torch.Tensor) -> dict:
    """The named outputs of a model's forward as fp32 tensors, per-token ones at real positions."""
    found = {}
    for name, axes in outputs.items():
        value = getattr(output, name, None)
        if value is None:
            continue
        value = value.detach().float()
        found[name] = value[mask] if "sequence" in axes else value
    return found


@torch.inference_mode()
def compare_outputs(ours, stock, batch: dict, outputs: Mapping[str, tuple[str, ...]]) -> tuple[float, float]:
    """``(largest |ours - stock|, largest |ours|)`` over the named outputs of one batch.

    The second number scales the tolerance: a head with large logits is allowed a
    proportionally larger rounding difference.
    """
    mask = batch["attention_mask"].bool()
    want = real_outputs(ours(**batch), outputs, mask)
    got = real_outputs(stock(**batch), outputs, mask)
    missing = set(want) - set(got)
    if not want or missing:
        raise ValueError(f"outputs {sorted(missing or outputs)} missing from the models' forward")
    diff = max(float((want[k] - got[k]).abs().max()) for k in want)
    scale = max(float(want[k].clamp(-1e4, 1e4).abs().max()) for k in want)
    return diff, scale

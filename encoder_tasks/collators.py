"""Batch collation shared by the tasks."""

from __future__ import annotations

from dataclasses import dataclass

import torch

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class PaddingCollator:
    """Pad model inputs dynamically and stack the labels; drop bookkeeping columns.

    Bookkeeping columns (``length``, ``_line``, example ids) stay in the dataset for samplers
    and post-processing but never reach the model.

    Example:
        >>> from encoder_tasks.testing import make_tiny_tokenizer
        >>> collate = PaddingCollator(make_tiny_tokenizer(), pad_to_multiple_of=8)
        >>> batch = collate([{"input_ids": [2, 5, 3], "length": 3, "labels": 1}, {"input_ids": [2, 3], "length": 2, "labels": 0}])
        >>> batch["input_ids"].shape, batch["labels"].tolist()
        (torch.Size([2, 8]), [1, 0])
    """

    tokenizer: object
    pad_to_multiple_of: int | None = None
    label_dtype: torch.dtype | None = None
    label_key: str = "labels"
    extra_keys: tuple[str, ...] = ()

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        inputs = [{k: f[k] for k in MODEL_INPUTS if k in f and f[k] is not None} for f in features]
        batch = dict(
            self.tokenizer.pad(
                inputs, padding=True, pad_to_multiple_of=self.pad_to_multiple_of or None, return_tensors="pt"
            )
        )
        if self.label_key in features[0] and features[0][self.label_key] is not None:
            labels = [f[self.label_key] for f in features]
            batch[self.label_key] = torch.tensor(labels, dtype=self.label_dtype)
        for key in self.extra_keys:
            if key in features[0]:
                batch[key] = torch.tensor([f[key] for f in features])
        return batch

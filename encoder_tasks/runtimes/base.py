"""What every inference backend shares: an encoder that runs outside torch but stands in for it.

A backend replaces only the model's encoder (``model.encoder``): the heads, tokenisation and
post-processing stay torch, so a backend's records equal torch's wherever its hidden states
do. :class:`EncoderRuntime` is that stand-in; a backend implements :meth:`EncoderRuntime.run`
on numpy arrays and inherits the torch-facing ``forward``.

Example:
    >>> import numpy as np, torch
    >>> class Ones(EncoderRuntime):
    ...     def run(self, feeds):
    ...         return np.ones((*feeds["input_ids"].shape, 4), dtype=np.float32)
    >>> encoder = Ones(config=None, input_names=("input_ids", "attention_mask"))
    >>> encoder(torch.tensor([[5, 6, 7]]), torch.tensor([[1, 1, 0]])).last_hidden_state.shape
    torch.Size([1, 3, 4])
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import nn


class EncoderRuntime(nn.Module):
    """An encoder run by another runtime, called like a transformers ``AutoModel`` encoder.

    ``forward(input_ids, attention_mask, token_type_ids=None, return_dict=True, **ignored)``
    returns ``BaseModelOutput(last_hidden_state=<fp32 CPU tensor [batch, sequence, hidden]>)``;
    ``config`` is the encoder's transformers config, kept for the heads and the Trainer. The
    graph's inputs are ``input_names`` (an exporter drops ``token_type_ids`` where the encoder
    never reads them): a missing ``attention_mask`` is all ones and missing ``token_type_ids``
    are zeros (what the torch encoders assume), inputs the graph does not take are dropped.
    Subclasses set :attr:`backend` and implement :meth:`run`; ``path`` is the graph's file and
    ``precision`` ``fp32`` or ``int8`` (a graph written by ``encoder-tasks quantize``).

    Example:
        >>> from transformers import BertConfig
        >>> class Zeros(EncoderRuntime):
        ...     backend = "zeros"
        ...     def run(self, feeds):
        ...         return np.zeros((*feeds["input_ids"].shape, 4), dtype=np.float32)
        >>> out = Zeros(BertConfig(hidden_size=4), ("input_ids", "attention_mask"))(torch.ones(2, 3, dtype=torch.long))
        >>> tuple(out.last_hidden_state.shape), out.last_hidden_state.dtype
        ((2, 3, 4), torch.float32)
    """

    #: The backend's name as ``--backend`` spells it.
    backend = "runtime"

    def __init__(self, config, input_names, path: str | os.PathLike | None = None, precision: str = "fp32"):
        super().__init__()
        self.config = config
        self.input_names = tuple(input_names)
        self.path = Path(path) if path is not None else None
        #: ``fp32`` or ``int8`` (a graph written by ``encoder-tasks quantize``).
        self.precision = precision
        # A zero-size parameter keeps ``model.device`` (the first parameter's device) answering
        # ``cpu`` for heads without weights (embedding).
        self._device_anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The last hidden states (float32 ``[batch, sequence, hidden]``) for int64 ``feeds``."""
        raise NotImplementedError

    def for_callers(self, callers: int, threads: int | None = None) -> EncoderRuntime:
        """This encoder set up for ``callers`` threads calling at once (a server running several
        batches in flight), each call on ``threads`` intra-op threads (None: the cores' share,
        not every core). The default keeps it as it is."""
        return self

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, return_dict=True, **ignored):
        from transformers.modeling_outputs import BaseModelOutput

        if input_ids is None:
            # inputs_embeds and friends would need the embeddings in torch: not a stand-in's job.
            raise ValueError(f"the {self.backend} encoder needs input_ids (found {sorted(ignored)})")
        ids = _int64(input_ids)
        given = {"input_ids": ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        feeds = {}
        for name in self.input_names:
            value = given.get(name)
            if value is None:
                fill = np.ones_like if name == "attention_mask" else np.zeros_like
                feeds[name] = fill(ids)
            else:
                feeds[name] = _int64(value)
        hidden = torch.from_numpy(np.ascontiguousarray(self.run(feeds), dtype=np.float32))
        if not return_dict:
            return (hidden,)
        return BaseModelOutput(last_hidden_state=hidden)

    def extra_repr(self) -> str:
        return f"backend={self.backend}, precision={self.precision}, path={self.path}"


def _int64(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value, dtype=np.int64)


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the platform has one (a
    container pinned to 2 of a host's 64 cores has 2), else every core.

    Example:
        >>> 1 <= usable_cores() <= (os.cpu_count() or 1)
        True
    """
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1

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

import numpy as np
import torch
from torch import nn


class EncoderRuntime(nn.Module):
    """An encoder run by another runtime, called like a transformers ``AutoModel`` encoder.

    ``forward(input_ids, attention_mask, token_type_ids=None, return_dict=True, **ignored)``
    returns ``BaseModelOutput(last_hidden_state=<fp32 CPU tensor [batch, sequence, hidden]>)``;
    ``config`` is the encoder's transformers config, kept for the heads and the Trainer. The
    graph's inputs are ``input_names``: a missing ``attention_mask`` is all ones and missing
    ``token_type_ids`` are zeros (what the torch encoders assume), inputs the graph does not
    take are dropped. Subclasses implement :meth:`run`.
    """

    #: The backend's name as ``--backend`` spells it.
    backend = "runtime"

    def __init__(self, config, input_names):
        super().__init__()
        self.config = config
        self.input_names = tuple(input_names)
        # A zero-size parameter keeps ``model.device`` (the first parameter's device) answering
        # ``cpu`` for heads without weights (embedding), as runtimes/__init__.py's stand-in does.
        self._device_anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The last hidden states (float32 ``[batch, sequence, hidden]``) for int64 ``feeds``."""
        raise NotImplementedError

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


def _int64(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value, dtype=np.int64)

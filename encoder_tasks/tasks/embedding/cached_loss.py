"""GradCache: in-batch-negative losses over large batches in the memory of a small one.

The loss of in-batch negatives couples every row of the batch, so a plain step keeps the
activations of the whole batch until backward. GradCache (Gao et al., 2021) splits the step:

1. embed the batch in chunks **without** autograd (only the embeddings are kept);
2. compute the loss on those embeddings (leaf tensors) and its gradient with respect to them;
3. in backward, embed each chunk again **with** autograd and back-propagate the cached
   gradient of its rows, one chunk at a time.

The result is the plain loss and the plain gradients (up to float rounding) with the peak
memory of one chunk. The second forward must repeat the first exactly, dropout included: the
random state is saved before each chunk and restored for its re-run (:class:`RandomState`).

Step 3 runs from a hook on the returned loss, so the stock ``Trainer`` (which scales the loss
for gradient accumulation and calls ``backward``) drives it unchanged; the hook receives that
scale as the incoming gradient.

Example:
    >>> import torch
    >>> lin = torch.nn.Linear(4, 2)
    >>> embed = lambda chunk: lin(chunk["x"])
    >>> batch = [{"x": torch.randn(6, 4)}, {"x": torch.randn(6, 4)}]
    >>> loss = cached_loss(embed, batch, lambda g: (g[0] * g[1]).sum(), chunk_size=4)
    >>> loss.backward()
    >>> lin.weight.grad.shape
    torch.Size([2, 4])
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

import torch

Group = Mapping[str, torch.Tensor]


class RandomState:
    """The CPU (and CUDA) random state at creation; ``with state:`` replays from it and puts the
    outer state back afterwards."""

    def __init__(self):
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self._fork = None

    def __enter__(self):
        devices = list(range(len(self.cuda))) if self.cuda is not None else []
        self._fork = torch.random.fork_rng(devices=devices)
        self._fork.__enter__()
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)

    def __exit__(self, *exc):
        return self._fork.__exit__(*exc)


def split_chunks(group: Group, size: int) -> list[dict[str, torch.Tensor]]:
    """Row chunks of one padded group, each cut to its own longest text (less padding)."""
    rows = next(iter(group.values())).shape[0]
    out = []
    for start in range(0, rows, size):
        chunk = {k: v[start : start + size] for k, v in group.items()}
        mask = chunk.get("attention_mask")
        if mask is not None and mask.dim() == 2 and mask.shape[1] > 0:
            width = int(mask.sum(1).max().item()) or 1
            chunk = {k: (v[:, :width] if v.dim() == 2 else v) for k, v in chunk.items()}
        out.append(chunk)
    return out


def cached_loss(
    embed: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    groups: list[Group],
    loss_of: Callable[[list[torch.Tensor]], torch.Tensor],
    chunk_size: int,
    no_sync: Callable[[], contextlib.AbstractContextManager] | None = None,
) -> torch.Tensor:
    """The loss ``loss_of([embeddings of each group])``; its ``backward()`` fills the parameter
    gradients chunk by chunk.

    ``embed(chunk)`` maps model inputs (a slice of a group: ``input_ids``, ``attention_mask``)
    to embeddings. ``no_sync`` (DDP's ``model.no_sync``) defers the gradient all-reduce to the
    last chunk.
    """
    chunks = [split_chunks(group, chunk_size) for group in groups]
    states: list[list[RandomState]] = []
    embeddings = []
    with torch.no_grad():
        for group_chunks in chunks:
            states.append([])
            parts = []
            for chunk in group_chunks:
                states[-1].append(RandomState())
                parts.append(embed(chunk))
            embeddings.append(torch.cat(parts))
    leaves = [e.detach().requires_grad_() for e in embeddings]
    with torch.enable_grad():
        loss = loss_of(leaves)
        grads = torch.autograd.grad(loss, leaves)

    def backward(scale: torch.Tensor) -> None:
        work = [(g, c) for g in range(len(chunks)) for c in range(len(chunks[g]))]
        with torch.enable_grad():
            for n, (g, c) in enumerate(work):
                last = n == len(work) - 1
                sync = no_sync() if no_sync is not None and not last else contextlib.nullcontext()
                start = c * chunk_size
                grad = grads[g][start : start + chunk_size] * scale
                with sync, states[g][c]:
                    again = embed(chunks[g][c])
                    torch.autograd.backward(again, grad.to(again.dtype))

    out = loss.detach().requires_grad_()
    out.register_hook(lambda scale: backward(scale))
    return out

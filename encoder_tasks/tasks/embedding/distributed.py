"""Gather tensors from every process, with the gradient flowing back to every process.

In-batch-negative losses get better with more negatives. Under data parallelism each process
sees only its own batch; gathering the embeddings of all processes makes the negatives of a
step the *global* batch, so more devices mean more negatives, not fewer.

The gather is differentiable end to end: process ``r``'s loss depends on the embeddings of
every process, so its gradient with respect to process ``s``'s rows must reach process ``s``.
Backward therefore sums, over all processes, the gradient each one computed for the gathered
tensor, and hands every process the rows it contributed (what
``torch.distributed.nn.functional.all_gather`` does; that function is deprecated in recent
torch, and this one also takes processes holding different row counts). With each process's
loss scaled as in :mod:`.losses`, DDP's averaging of the parameter gradients then gives
exactly the gradient of one process training on the whole global batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group, ``(0, 1)`` when not distributed.

    Example:
        >>> world()
        (0, 1)
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _AllGather(torch.autograd.Function):
    """All-gather of equally sized tensors; backward sums the gradients of every process."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        rank, size = world()
        ctx.rank, ctx.rows = rank, tensor.shape[0]
        parts = [torch.empty_like(tensor) for _ in range(size)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        # Every process holds d(its loss)/d(all rows); the sum over processes is d(sum of
        # losses)/d(all rows), of which this process's own rows are its share.
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = ctx.rank * ctx.rows
        return grad[start : start + ctx.rows]


def gather_with_grad(tensor: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """Concatenate ``tensor`` (``[n, ...]``) from every process along dim 0, differentiably.

    Returns the gathered tensor, the offset of this process's rows in it and the total row
    count. Processes may hold different numbers of rows (the last batch of an epoch): sizes
    are exchanged first and rows are padded for the collective, then trimmed.

    Example (one process: the tensor itself, offset 0, its row count):
        >>> x = torch.ones(2, 3, requires_grad=True)
        >>> out, offset, total = gather_with_grad(x)
        >>> out is x, offset, total
        (True, 0, 2)
    """
    rank, size = world()
    if size == 1:
        return tensor, 0, tensor.shape[0]
    count = torch.tensor([tensor.shape[0]], device=tensor.device, dtype=torch.long)
    counts = [torch.zeros_like(count) for _ in range(size)]
    dist.all_gather(counts, count)
    counts = [int(c.item()) for c in counts]
    longest = max(counts)
    padded = tensor
    if tensor.shape[0] < longest:
        filler = tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))
        padded = torch.cat([tensor, filler])
    gathered = _AllGather.apply(padded)
    parts = [gathered[r * longest : r * longest + n] for r, n in enumerate(counts)]
    return torch.cat(parts), sum(counts[:rank]), sum(counts)

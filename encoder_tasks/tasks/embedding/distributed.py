"""Gather tensors from every process, keeping the gradient of this process's part.

In-batch-negative losses get better with more negatives. Under data parallelism each process
sees only its own batch; gathering the embeddings of all processes makes the negatives of a
step the *global* batch, so more devices mean more negatives, not fewer.

``torch.distributed.all_gather`` returns tensors without gradient; putting this process's own
tensor back into its slot restores the gradient for the local part (the other parts are
constants here; their processes compute their own gradients).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group, ``(0, 1)`` when not distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_with_local_grad(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Concatenate ``tensor`` (``[n, ...]``) from every process along dim 0.

    Returns the gathered tensor and the offset of this process's rows in it. Processes may
    hold different numbers of rows (the last batch of an epoch): sizes are exchanged first
    and rows are padded for the collective, then trimmed.

    Example (one process: the tensor itself, offset 0):
        >>> x = torch.ones(2, 3, requires_grad=True)
        >>> out, offset = gather_with_local_grad(x)
        >>> out is x, offset
        (True, 0)
    """
    rank, size = world()
    if size == 1:
        return tensor, 0
    count = torch.tensor([tensor.shape[0]], device=tensor.device, dtype=torch.long)
    counts = [torch.zeros_like(count) for _ in range(size)]
    dist.all_gather(counts, count)
    counts = [int(c.item()) for c in counts]
    longest = max(counts)
    padded = tensor
    if tensor.shape[0] < longest:
        filler = tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))
        padded = torch.cat([tensor, filler])
    parts = [torch.empty_like(padded) for _ in range(size)]
    dist.all_gather(parts, padded.detach().contiguous())
    parts = [part[:n] for part, n in zip(parts, counts)]
    parts[rank] = tensor  # the local rows keep their autograd history
    return torch.cat(parts), sum(counts[:rank])

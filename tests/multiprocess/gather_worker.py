"""Worker for the two-process gather test (a small module: spawned children import it fast)."""

import torch
import torch.nn.functional as F

from encoder_tasks.tasks.embedding.distributed import gather_with_grad
from encoder_tasks.tasks.embedding.losses import MultipleNegativesRankingLoss


def check_gather(rank, world, init_file):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        sizes = [3, 2]
        anchors_all = torch.randn(5, 4)
        positives_all = torch.randn(5, 4)
        start = sum(sizes[:rank])
        local = slice(start, start + sizes[rank])
        a = anchors_all[local].clone().requires_grad_(True)
        p = positives_all[local].clone().requires_grad_(True)
        # the gather itself: every row, in rank order; each process's rows receive the
        # gradient of every process (rank r weighs the rows by r + 1: 1 + 2 = 3 in all)
        gathered, offset, total = gather_with_grad(p)
        assert offset == start and total == 5 and torch.equal(gathered.detach(), positives_all)
        weights = torch.arange(20.0).view(5, 4)
        (gathered * weights * (rank + 1)).sum().backward()
        assert torch.equal(p.grad, 3 * weights[local])
        p.grad = None
        # the loss: local anchors against the positives of both processes, scaled so that the
        # mean over processes is the mean over the 5 rows (sizes differ: 3 and 2)
        loss = MultipleNegativesRankingLoss(0.1)(a, p)
        loss.backward()
        ref_a = anchors_all.clone().requires_grad_(True)
        ref_p = positives_all.clone().requires_grad_(True)
        scores = F.normalize(ref_a, dim=-1) @ F.normalize(ref_p, dim=-1).T / 0.1
        ref_loss = F.cross_entropy(scores, torch.arange(5))  # one process, the global batch
        ref_loss.backward()
        mine = F.cross_entropy(scores[local], torch.arange(sizes[rank]) + start, reduction="sum")
        assert torch.allclose(loss, mine.detach() * world / 5, atol=1e-6)
        losses = [torch.zeros(()) for _ in range(world)]
        dist.all_gather(losses, loss.detach())
        assert torch.allclose(sum(losses) / world, ref_loss.detach(), atol=1e-6)
        # the sum of the processes' losses is world x the global loss; DDP divides it back
        assert torch.allclose(a.grad, world * ref_a.grad[local], atol=1e-6)
        assert torch.allclose(p.grad, world * ref_p.grad[local], atol=1e-6)
        ref = MultipleNegativesRankingLoss(0.1, gather_across_devices=False)
        assert ref.gather_across_devices is False
    finally:
        dist.destroy_process_group()

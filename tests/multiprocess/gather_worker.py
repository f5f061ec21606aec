"""Worker for the two-process gather test (a small module: spawned children import it fast)."""

import torch
import torch.nn.functional as F

from encoder_tasks.tasks.embedding.distributed import gather_with_local_grad
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
        # the gather itself: every row, in rank order, gradient only for the local part
        gathered, offset = gather_with_local_grad(p)
        assert offset == start and torch.equal(gathered.detach(), positives_all)
        weights = torch.arange(20.0).view(5, 4)
        (gathered * weights).sum().backward()
        assert torch.equal(p.grad, weights[local])
        p.grad = None
        # the loss: local anchors against the positives of both processes
        loss = MultipleNegativesRankingLoss(0.1)(a, p)
        loss.backward()
        ref_a = anchors_all[local].clone().requires_grad_(True)
        ref_p = positives_all.clone().requires_grad_(True)
        ref = MultipleNegativesRankingLoss(0.1, gather_across_devices=False)
        ref_loss = F.cross_entropy(
            F.normalize(ref_a, dim=-1) @ F.normalize(ref_p, dim=-1).T / 0.1,
            torch.arange(sizes[rank]) + start,
        )
        ref_loss.backward()
        assert torch.allclose(loss, ref_loss, atol=1e-6)
        assert torch.allclose(a.grad, ref_a.grad, atol=1e-6)
        assert torch.allclose(p.grad, ref_p.grad[local], atol=1e-6)
        assert ref.gather_across_devices is False
    finally:
        dist.destroy_process_group()

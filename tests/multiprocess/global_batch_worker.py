"""Worker of test_embedding_global_batch.py: two gloo processes, each with its slice of a global
batch, against one process on the whole batch (a small module: spawned children import it fast).

Every process runs every case (the collectives must match); rank 0 writes the largest
differences to ``results.json`` for the test to check.
"""

import json

import torch

WORDS = "the a film movie cat dog john paris london good bad big red blue new york city one two".split()


def _rows(count: int) -> list[tuple[str, str, str, float]]:
    """``(anchor, positive, hard negative, score)`` rows, every text distinct."""
    n = len(WORDS)
    return [
        (
            f"{WORDS[i]} {WORDS[(i + 3) % n]}",
            f"{WORDS[(i + 1) % n]} {WORDS[(i + 5) % n]} {WORDS[(i + 9) % n]}",
            f"{WORDS[(i + 2) % n]} {i}",
            (i % 4) / 3,
        )
        for i in range(count)
    ]


def _step(model, tokenizer, rows):
    """The training forward of the bi-encoder on ``rows``: the loss, gradients accumulated."""

    def tok(texts):
        return dict(tokenizer(list(texts), padding=True, return_tensors="pt"))

    anchors, positives, negatives, scores = zip(*rows)
    loss = model(
        anchor=tok(anchors),
        positive=tok(positives),
        negatives=[tok(negatives)] if model.hard_negatives else [],
        labels=torch.tensor(scores),
    ).loss
    loss.backward()
    return loss.detach()


def _grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def _models(path: str, loss: str, symmetric: bool, negatives: bool):
    from encoder_tasks.backbone import load_encoder
    from encoder_tasks.tasks.embedding.model import BiEncoder

    made = []
    for gather in (False, True):  # the one-process reference, then the distributed model
        model = BiEncoder(load_encoder(path), loss=loss, temperature=0.05, symmetric=symmetric)
        model.loss_fn.gather_across_devices = gather  # CoSENT/cosine: no such option, unused
        model.hard_negatives = negatives
        model.eval()  # no dropout: both sides must compute the same function
        made.append(model)
    return made


def _compare(rank, world, path, tokenizer, loss, symmetric=False, negatives=False, rows=6, steps=1):
    """Largest |difference| of loss and gradients, 2 processes against 1, over ``steps`` SGD steps.

    Each process takes the strided slice of the global batch (as ``DuplicateFreeBatchSampler``
    does); its gradients and loss are averaged over processes, as DDP and the Trainer do.
    For ``cosent`` the reference is the mean over the per-process slices (scored per device).
    """
    import torch.distributed as dist

    data = _rows(rows)
    reference, model = _models(path, loss, symmetric, negatives)
    sgd = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (reference, model)]
    worst = {"loss": 0.0, "grad": 0.0, "grad_scale": 0.0, "losses": []}
    for _ in range(steps):
        for opt in sgd:
            opt.zero_grad()
        if loss == "cosent":  # per device: the mean of the slices' losses and gradients
            ref_loss = sum(_step(reference, tokenizer, data[r::world]) for r in range(world)) / world
            for p in reference.parameters():
                if p.grad is not None:
                    p.grad /= world
        else:
            ref_loss = _step(reference, tokenizer, data)
        local = _step(model, tokenizer, data[rank::world])
        dist.all_reduce(local)
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= world
        ref_grads, grads = _grads(reference), _grads(model)
        worst["loss"] = max(worst["loss"], abs(local.item() / world - ref_loss.item()))
        worst["grad"] = max(worst["grad"], max((a - b).abs().max().item() for a, b in zip(grads, ref_grads)))
        worst["grad_scale"] = max(worst["grad_scale"], max(g.abs().max().item() for g in ref_grads))
        worst["losses"].append([ref_loss.item(), local.item() / world])
        for opt in sgd:
            opt.step()
    return worst


CASES = {
    "mnrl": {"loss": "mnrl"},
    "mnrl_hard_negatives": {"loss": "mnrl", "negatives": True},
    "mnrl_symmetric": {"loss": "mnrl", "symmetric": True},
    # the last batch of an epoch: 3 rows on one process, 2 on the other
    "mnrl_uneven": {"loss": "mnrl", "rows": 5},
    "mnrl_symmetric_uneven_hard_negatives": {"loss": "mnrl", "symmetric": True, "negatives": True, "rows": 5},
    "cosine": {"loss": "cosine"},
    "cosent_per_device": {"loss": "cosent"},
    "mnrl_training_3_steps": {"loss": "mnrl", "negatives": True, "steps": 3},
}


def run(rank, world, init_file, path, out):
    import torch.distributed as dist
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        results = {name: _compare(rank, world, path, tokenizer, **case) for name, case in CASES.items()}
        if rank == 0:
            with open(out, "w") as handle:
                json.dump(results, handle, indent=1)
    finally:
        dist.destroy_process_group()

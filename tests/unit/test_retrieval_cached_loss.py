"""GradCache (``--cache_chunk_size``): the same loss and the same gradients as the plain loss."""

import pytest
import torch

from encoder_tasks.backbone import load_encoder
from encoder_tasks.tasks.embedding.cached_loss import cached_loss, split_chunks
from encoder_tasks.tasks.embedding.model import BiEncoder
from encoder_tasks.tasks.embedding.trainer import embedding_loss
from encoder_tasks.testing import make_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_model("bert", str(tmp_path_factory.mktemp("cached") / "bert"))


def _model(path, **kwargs):
    torch.manual_seed(0)
    return BiEncoder(load_encoder(path), **kwargs)


def _batch(rows, seed, vocab=90):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 9, (rows,), generator=g)
    ids = torch.randint(5, vocab, (rows, 9), generator=g)
    mask = (torch.arange(9)[None, :] < lengths[:, None]).long()
    return {"input_ids": ids * mask, "attention_mask": mask}


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _plain(model, groups, loss_of):
    model.zero_grad()
    loss = loss_of([model(**g).embeddings for g in groups])
    loss.backward()
    return loss.item(), _grads(model)


def _cached(model, groups, loss_of, chunk, scale=1.0):
    model.zero_grad()
    loss = cached_loss(lambda f: model(**f).embeddings, groups, loss_of, chunk)
    (loss * scale).backward()
    return loss.item(), _grads(model)


def _assert_same(a, b, rtol=1e-4, atol=1e-6):
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=rtol, atol=atol, msg=name)


@pytest.mark.parametrize(("chunk", "symmetric"), [(1, False), (3, True), (16, False)])
def test_mnrl_with_negatives_same_loss_and_gradients(tiny_dir, chunk, symmetric):
    model = _model(tiny_dir, symmetric=symmetric).eval()  # no dropout: one forward = the other
    groups = [_batch(10, 1), _batch(10, 2), _batch(10, 3)]
    loss_of = embedding_loss(model)
    plain_loss, plain = _plain(model, groups, loss_of)
    loss, grads = _cached(model, groups, loss_of, chunk)
    assert loss == pytest.approx(plain_loss, rel=1e-5)
    _assert_same(grads, plain)


def test_cosent_and_matryoshka_same_gradients(tiny_dir):
    labels = torch.linspace(0, 1, 8)
    for kwargs, dims in (({"loss": "cosent"}, None), ({}, [8, 16])):
        model = _model(tiny_dir, **kwargs).eval()
        groups = [_batch(8, 4), _batch(8, 5)]
        loss_of = embedding_loss(model, labels, dims)
        plain_loss, plain = _plain(model, groups, loss_of)
        loss, grads = _cached(model, groups, loss_of, 3)
        assert loss == pytest.approx(plain_loss, rel=1e-5)
        _assert_same(grads, plain)


def test_loss_scale_reaches_the_chunks(tiny_dir):
    """The Trainer divides the loss for gradient accumulation: the cached gradients scale too."""
    model = _model(tiny_dir).eval()
    groups = [_batch(6, 6), _batch(6, 7)]
    loss_of = embedding_loss(model)
    _, full = _cached(model, groups, loss_of, 2)
    _, half = _cached(model, groups, loss_of, 2, scale=0.5)
    _assert_same(half, {n: g * 0.5 for n, g in full.items()})


def test_dropout_replayed_in_the_second_forward(tiny_dir):
    """With dropout on, the re-forward of each chunk must draw the same masks as the first
    (saved random state): the gradients equal those of one graph over the same chunks drawn
    from the same seed."""
    model = _model(tiny_dir).train()
    assert any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())
    groups = [_batch(8, 8), _batch(8, 9)]
    loss_of = embedding_loss(model)

    torch.manual_seed(123)
    model.zero_grad()
    reps = [torch.cat([model(**chunk).embeddings for chunk in split_chunks(g, 3)]) for g in groups]
    reference_loss = loss_of(reps)
    reference_loss.backward()
    reference = _grads(model)

    torch.manual_seed(123)
    loss, grads = _cached(model, groups, loss_of, 3)
    assert loss == pytest.approx(reference_loss.item(), rel=1e-5)
    _assert_same(grads, reference)
    # without the replay the masks differ: the gradients would not match
    torch.manual_seed(124)
    _, other = _cached(model, groups, loss_of, 3)
    assert any(not torch.allclose(other[n], reference[n], atol=1e-6) for n in reference)

"""Sparse (SPLADE-style) embeddings: the head, save/load, the inverted index, hybrid fusion."""

import numpy as np
import pytest
import torch

from encoder_tasks.backbone import load_encoder, load_tokenizer
from encoder_tasks.config import DataArguments
from encoder_tasks.data import Split, read_file
from encoder_tasks.errors import UserError
from encoder_tasks.tasks.embedding import EmbeddingTask
from encoder_tasks.tasks.embedding.args import EmbeddingArguments
from encoder_tasks.tasks.embedding.model import encode_texts, load_bi_encoder
from encoder_tasks.tasks.embedding.sparse import (
    InvertedIndex,
    SparseEncoder,
    flops_regularizer,
    reciprocal_rank_fusion,
    score_fusion,
    sparsity,
    splade_pool,
    to_sparse,
)
from tests.helpers import write

TASK = EmbeddingTask()
TRIPLES = (
    "anchor,positive,negative\n"
    "the film was good,the movie was good,the film was bad\n"
    "the cat sat,a cat sat on the mat,the dog ran\n"
    "john lives in paris,john smith lives in paris,john lives in london\n"
)


def _prepared(tmp_path, tiny_bert, **kwargs):
    path = write(tmp_path / "t.csv", TRIPLES)
    s = Split("train", str(path), read_file(path))
    args = EmbeddingArguments(negative_columns="negative", model_type="sparse", **kwargs)
    return TASK.prepare({"train": s, "validation": s}, load_tokenizer(tiny_bert), args, DataArguments())


def test_splade_pool_is_log_saturated_max_over_real_tokens():
    logits = torch.tensor([[[2.0, -1.0, 0.5], [1.0, 4.0, 0.0], [9.0, 9.0, 9.0]]])
    pooled = splade_pool(logits, torch.tensor([[1, 1, 0]]))
    expected = torch.log1p(torch.tensor([[2.0, 4.0, 0.5]]))
    assert torch.allclose(pooled, expected)


def test_flops_is_squared_mean_weight_per_token():
    v = torch.tensor([[1.0, 0.0, 3.0], [3.0, 0.0, 1.0]])
    assert flops_regularizer(v).item() == pytest.approx(2.0**2 + 0 + 2.0**2)


@pytest.mark.parametrize("inference_free", [False, True])
def test_sparse_head_trains_and_round_trips(tmp_path, tiny_bert, inference_free):
    prepared = _prepared(tmp_path, tiny_bert, inference_free_queries=inference_free, sparse_weight=0.1)
    model = TASK.build_model(load_encoder(tiny_bert), prepared.settings)
    assert isinstance(model, SparseEncoder) and model.settings.model_type == "sparse"
    # the start: every token's bias 4 (estimated) standard deviations of its logit below zero
    norms = model.encoder.get_input_embeddings().weight.norm(dim=1)
    assert torch.allclose(model.head.bias, -4.0 * norms)
    with torch.no_grad():  # the tiny random encoder has no token clearing that start: open them all
        model.head.bias.zero_()
    batch = prepared.collator(8)([prepared.train[i] for i in range(3)])
    out = model(**batch)
    assert torch.isfinite(out.loss) and out.embeddings.shape == (3, model.config.vocab_size)
    out.loss.backward()
    assert model.head.bias.grad.abs().sum() > 0
    assert model.encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    if inference_free:
        assert model.query_weights.grad.abs().sum() > 0
        # the query side is the learned weights of the query's tokens, nothing else
        ids = batch["anchor"]["input_ids"][:1]
        q = model.raw_queries(ids, batch["anchor"]["attention_mask"][:1])
        real = set(ids[0][batch["anchor"]["attention_mask"][0].bool()].tolist())
        assert set(torch.nonzero(q[0]).flatten().tolist()) == real
    with torch.no_grad():
        model.head.bias.add_(0.25)  # a trained-looking head: the reload must keep it
    model.save_pretrained(tmp_path / "run")
    load_tokenizer(tiny_bert).save_pretrained(tmp_path / "run")
    again = load_bi_encoder(str(tmp_path / "run"))
    assert isinstance(again, SparseEncoder) and again.settings == model.settings
    model.eval()
    texts = ["the cat sat", "a dog ran far away"]
    tok = load_tokenizer(tiny_bert)
    a = encode_texts(model, tok, texts, max_length=16)
    b = encode_texts(again, tok, texts, max_length=16)
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert (a >= 0).all() and np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)


def test_sparse_flags_refused_with_dense_only_options():
    with pytest.raises(UserError, match="--model_type must be one of dense, sparse, found 'splade'"):
        EmbeddingArguments(model_type="splade")
    with pytest.raises(UserError, match="--model_type sparse does not take --matryoshka_dims"):
        EmbeddingArguments(model_type="sparse", matryoshka_dims="8,16")
    with pytest.raises(UserError, match="--sparse_regularizer must be one of flops, l1, found 'l2'"):
        EmbeddingArguments(sparse_regularizer="l2")
    with pytest.raises(UserError, match="--sparse_weight must be zero or positive, found -1"):
        EmbeddingArguments(sparse_weight=-1)


def test_inverted_index_equals_brute_force():
    rng = np.random.default_rng(0)
    vocab, docs = 50, 40
    dense_docs = rng.random((docs, vocab)) * (rng.random((docs, vocab)) < 0.1)
    dense_queries = rng.random((7, vocab)) * (rng.random((7, vocab)) < 0.2)
    dense_docs[5] = dense_docs[6]  # a tie: the lower index first
    index = InvertedIndex.build(to_sparse(dense_docs), vocab)
    ids, scores = index.search(to_sparse(dense_queries), top_k=10)
    brute = dense_queries.astype(np.float32) @ dense_docs.astype(np.float32).T
    for q in range(len(dense_queries)):
        order = np.argsort(-brute[q], kind="stable")
        order = order[brute[q][order] > 0][:10]
        assert ids[q][: len(order)].tolist() == order.tolist()
        np.testing.assert_allclose(scores[q][: len(order)], brute[q][order], rtol=1e-5)
        assert (ids[q][len(order) :] == -1).all()
    assert index.stats()["postings"] == int((dense_docs > 1e-6).sum())


def test_inverted_index_refuses_ids_outside_vocabulary():
    with pytest.raises(UserError, match=r"document 1: token id outside the vocabulary \(0-9\)"):
        InvertedIndex.build([([1], [1.0]), ([10], [1.0])], vocab_size=10)


def test_rrf_matches_hand_computed_case():
    dense = np.array([[3, 1, 2], [0, 1, -1]])
    sparse = np.array([[1, 4, 3], [2, 0, 1]])
    ids, scores = reciprocal_rank_fusion([dense, sparse], top_k=4, k=60)
    # query 0: 1 -> 1/62 + 1/61, 3 -> 1/61 + 1/63, 2 -> 1/63, 4 -> 1/62
    assert ids[0].tolist() == [1, 3, 4, 2]
    assert scores[0][:2] == pytest.approx([1 / 62 + 1 / 61, 1 / 61 + 1 / 63])
    # query 1: 0 -> 1/61 + 1/62, 1 -> 1/62 + 1/63, 2 -> 1/61; the dense list's -1 is padding
    assert ids[1].tolist() == [0, 1, 2, -1]
    assert scores[1][2] == pytest.approx(1 / 61)


def test_score_fusion_weights_normalised_scores():
    a = (np.array([[0, 1, 2]]), np.array([[3.0, 2.0, 1.0]]))
    b = (np.array([[2, 1, 0]]), np.array([[10.0, 0.0, -5.0]]))
    ids, scores = score_fusion([a, b], top_k=3, weights=[1.0, 0.5])
    # a: 0 -> 1, 1 -> 0.5, 2 -> 0; b: 2 -> 1, 1 -> 1/3, 0 -> 0 (times 0.5)
    assert ids[0].tolist() == [0, 1, 2]
    assert scores[0].tolist() == pytest.approx([1.0, 0.5 + 0.5 / 3, 0.5])


def test_sparsity_counts_nonzeros():
    assert sparsity(to_sparse(np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0]]))) == {
        "nonzeros_mean": 1.5, "nonzeros_min": 1, "nonzeros_max": 2,
    }  # fmt: skip

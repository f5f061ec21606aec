"""The real CLI with a sparse model: train --model_type sparse, encode (sparse JSONL), retrieve
from the inverted index, hybrid retrieval with a dense model, and their errors."""

import json

import numpy as np
import pytest
import torch

from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.cli import main
from encoder_tasks.tasks.embedding.model import load_bi_encoder
from encoder_tasks.tasks.embedding.sparse import (
    SparseEncoder,
    encode_sparse,
    reciprocal_rank_fusion,
    to_sparse,
)
from tests.helpers import FAST_TRAINING, error_line, predict_argv, read_jsonl, run_train, write
from tests.samples import SCORED_PAIRS

TEXTS = sorted({t for a, b, _ in SCORED_PAIRS for t in (a, b)})


@pytest.fixture(scope="module")
def runs(tiny_bert, tmp_path_factory):
    root = tmp_path_factory.mktemp("sparse")
    pairs = write(root / "pairs.csv", "anchor,positive\n" + "".join(f"{a},{b}\n" for a, b, _ in SCORED_PAIRS))
    sparse, dense = root / "sparse", root / "dense"
    flags = ["--score_column", "none", *FAST_TRAINING]
    metrics = run_train(
        "embedding", tiny_bert, pairs, sparse, "--model_type", "sparse", *flags, validation=pairs
    )
    run_train("embedding", tiny_bert, pairs, dense, *flags)
    # The tiny random encoder has no token that clears the head's sparse start (bias -4 standard
    # deviations): open every token, so the files and searches below have weights to compare.
    model = load_bi_encoder(str(sparse))
    with torch.no_grad():
        model.head.bias.zero_()
    model.save_pretrained(sparse)
    return sparse, dense, metrics


def test_sparse_run_saves_its_type_and_evaluates(runs):
    sparse, _, metrics = runs
    assert json.loads((sparse / "encoder_tasks.json").read_text())["settings"]["model_type"] == "sparse"
    assert isinstance(load_bi_encoder(str(sparse)), SparseEncoder)
    assert 0.0 <= metrics["eval_ndcg@10"] <= 1.0


def test_encode_sparse_file_format_and_retrieve_equals_brute_force(runs, tmp_path, capsys):
    sparse, _, _ = runs
    corpus = write(tmp_path / "corpus.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    vectors = tmp_path / "sparse.jsonl"
    assert (
        main(predict_argv("embedding", sparse, corpus, vectors, "--precision", "fp32", action="encode")) == 0
    )
    rows = read_jsonl(vectors)
    tok = load_tokenizer(sparse)
    assert [r["text"] for r in rows] == TEXTS
    for row in rows:
        assert set(row) == {"id", "text", "indices", "values", "tokens"}
        assert row["indices"] == sorted(row["indices"]) and len(row["values"]) == len(row["indices"])
        assert row["tokens"] == tok.convert_ids_to_tokens(row["indices"]) and min(row["values"]) > 0
    # retrieve: the inverted index returns what a dense brute-force dot product ranks first
    queries = write(tmp_path / "q.csv", "text\n" + "\n".join(TEXTS[:4]) + "\n")
    hits = tmp_path / "hits.jsonl"
    argv = predict_argv("embedding", sparse, queries, hits, "--corpus_file", str(vectors), "--top_k", "3",
                        "--precision", "fp32", action="retrieve")  # fmt: skip
    assert main(argv) == 0
    model = load_bi_encoder(str(sparse))
    dense_docs = np.zeros((len(TEXTS), model.config.vocab_size), dtype=np.float32)
    for n, row in enumerate(rows):
        dense_docs[n, row["indices"]] = row["values"]
    q = encode_sparse(model, tok, TEXTS[:4], queries=True)
    dense_q = np.zeros((4, model.config.vocab_size), dtype=np.float32)
    for n, (ids, ws) in enumerate(q):
        dense_q[n, ids] = ws
    brute = dense_q @ dense_docs.T
    for record, scores in zip(read_jsonl(hits), brute):
        assert [h["text"] for h in record["results"]] == [
            TEXTS[i] for i in np.argsort(-scores, kind="stable")[:3]
        ]
    # a dense model cannot read a sparse corpus, nor write --sparse
    capsys.readouterr()
    bad = predict_argv("embedding", runs[1], queries, tmp_path / "x.jsonl", "--corpus_file", str(vectors),
                       action="retrieve")  # fmt: skip
    assert main(bad) == 2
    assert "holds sparse vectors (indices/values); retrieve them with the sparse model" in error_line(
        capsys.readouterr().err
    )
    bad = predict_argv(
        "embedding", runs[1], corpus, tmp_path / "y.jsonl", "--sparse", "true", action="encode"
    )
    assert main(bad) == 2
    assert "is a dense model (train one with --model_type sparse)" in error_line(capsys.readouterr().err)
    bad = predict_argv("embedding", sparse, corpus, tmp_path / "z.npy", action="encode")
    assert main(bad) == 2
    assert "a sparse model writes .jsonl" in error_line(capsys.readouterr().err)


def test_hybrid_retrieve_is_rrf_of_both_rankings(runs, tmp_path, capsys):
    sparse, dense, _ = runs
    corpus = write(tmp_path / "corpus.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    sv, dv = tmp_path / "s.jsonl", tmp_path / "d.jsonl"
    assert main(predict_argv("embedding", sparse, corpus, sv, "--precision", "fp32", action="encode")) == 0
    assert main(predict_argv("embedding", dense, corpus, dv, "--precision", "fp32", action="encode")) == 0
    queries = write(tmp_path / "q.csv", "text\n" + "\n".join(TEXTS[:3]) + "\n")
    runs_out = {}
    for name, model, vectors in (("dense", dense, dv), ("sparse", sparse, sv)):
        out = tmp_path / f"{name}.jsonl"
        argv = predict_argv("embedding", model, queries, out, "--corpus_file", str(vectors), "--top_k",
                            str(len(TEXTS)), "--precision", "fp32", action="retrieve")  # fmt: skip
        assert main(argv) == 0
        runs_out[name] = np.array([[TEXTS.index(h["text"]) for h in r["results"]] for r in read_jsonl(out)])
    hybrid = tmp_path / "hybrid.jsonl"
    argv = predict_argv("embedding", dense, queries, hybrid, "--corpus_file", str(dv), "--hybrid_model", str(sparse),
                        "--hybrid_corpus_file", str(sv), "--fusion_depth", str(len(TEXTS)), "--top_k", "5",
                        "--precision", "fp32", action="retrieve")  # fmt: skip
    assert main(argv) == 0
    expected, scores = reciprocal_rank_fusion([runs_out["dense"], runs_out["sparse"]], top_k=5)
    got = read_jsonl(hybrid)
    assert [[TEXTS.index(h["text"]) for h in r["results"]] for r in got] == expected.tolist()
    assert [h["score"] for h in got[0]["results"]] == pytest.approx(scores[0].tolist(), abs=1e-6)
    capsys.readouterr()
    bad = predict_argv("embedding", dense, queries, tmp_path / "x.jsonl", "--corpus_file", str(dv),
                       "--hybrid_model", str(sparse), action="retrieve")  # fmt: skip
    assert main(bad) == 2
    assert "--hybrid_model and --hybrid_corpus_file go together" in error_line(capsys.readouterr().err)


def test_to_sparse_drops_zeros():
    assert [(i.tolist(), w.tolist()) for i, w in to_sparse(np.array([[0.0, 0.0], [1.0, 0.0]]))] == [
        ([], []),
        ([0], [1.0]),
    ]


def test_tei_embed_sparse_equals_encode(runs, tmp_path):
    import httpx

    from tests.serving import live_server

    sparse, dense, _ = runs
    texts = TEXTS[:3]
    corpus = write(tmp_path / "in.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = tmp_path / "v.jsonl"
    assert main(predict_argv("embedding", sparse, corpus, out, "--precision", "fp32", action="encode")) == 0
    expected = [
        [{"index": i, "value": v} for i, v in zip(r["indices"], r["values"])] for r in read_jsonl(out)
    ]
    with live_server({"sparse": sparse, "dense": dense}, precision="fp32") as url:
        answer = httpx.post(f"{url}/embed_sparse", json={"inputs": texts, "model": "sparse"}, timeout=60)
        assert answer.status_code == 200, answer.text
        got = answer.json()
        assert [[h["index"] for h in row] for row in got] == [[h["index"] for h in row] for row in expected]
        for row, want in zip(got, expected):
            assert [h["value"] for h in row] == pytest.approx([h["value"] for h in want], abs=1e-5)
        single = httpx.post(f"{url}/embed_sparse", json={"inputs": texts[0], "model": "sparse"}, timeout=60)
        assert single.status_code == 200 and len(single.json()) == 1
        refused = httpx.post(f"{url}/embed_sparse", json={"inputs": texts, "model": "dense"}, timeout=60)
        assert refused.status_code == 400, refused.text
        assert "this model is dense; sparse vectors need a --model_type sparse model" in refused.text
        # the dense route still answers a sparse model (its vocabulary-size vector)
        dense_answer = httpx.post(f"{url}/embed", json={"inputs": texts[:1], "model": "sparse"}, timeout=60)
        vocab = load_bi_encoder(str(sparse)).config.vocab_size
        assert dense_answer.status_code == 200 and len(dense_answer.json()[0]) == vocab

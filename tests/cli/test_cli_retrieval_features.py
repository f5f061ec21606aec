"""The real CLI: Matryoshka + cached-loss training, encode --dimensions, compressed indexes, rerank."""

import json

import numpy as np
import pytest

from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.cli import main
from encoder_tasks.tasks.embedding.matryoshka import truncate
from encoder_tasks.tasks.embedding.model import encode_texts, load_bi_encoder
from encoder_tasks.tasks.embedding.rerank import CrossEncoderScorer
from tests.helpers import FAST_TRAINING, error_line, predict_argv, read_json, read_jsonl, run_train, write
from tests.samples import SCORED_PAIRS

TEXTS = sorted({t for a, b, _ in SCORED_PAIRS for t in (a, b)})


@pytest.fixture(scope="module")
def matryoshka_run(tiny_bert, tmp_path_factory):
    root = tmp_path_factory.mktemp("mrl")
    pairs = write(root / "pairs.csv", "anchor,positive\n" + "".join(f"{a},{b}\n" for a, b, _ in SCORED_PAIRS))
    out = root / "run"
    flags = ["--matryoshka_dims", "8,16", "--cache_chunk_size", "3", "--score_column", "none", *FAST_TRAINING]
    metrics = run_train("embedding", tiny_bert, pairs, out, *flags, validation=pairs)
    return out, metrics


def test_matryoshka_saved_and_evaluated_at_each_size(matryoshka_run):
    out, metrics = matryoshka_run
    assert read_json(out / "encoder_tasks.json")["settings"]["matryoshka_dims"] == [8, 16]
    for size in ("", "_dim8", "_dim16"):
        assert 0.0 <= metrics[f"eval_ndcg@10{size}"] <= 1.0
    assert "eval_ndcg@10_dim32" not in metrics  # the full size is the unsuffixed one


def test_encode_dimensions_cuts_and_renormalises(matryoshka_run, tmp_path):
    out, _ = matryoshka_run
    corpus = write(tmp_path / "corpus.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    target = tmp_path / "v8.npy"
    argv = predict_argv(
        "embedding", out, corpus, target, "--dimensions", "8", "--precision", "fp32", action="encode"
    )
    assert main(argv) == 0
    vectors = np.load(target)
    full = encode_texts(load_bi_encoder(str(out)), load_tokenizer(out), TEXTS)
    assert vectors.shape == (len(TEXTS), 8) and np.allclose(vectors, truncate(full, 8), atol=1e-5)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    queries = write(tmp_path / "q.csv", "text\n" + "\n".join(TEXTS[:3]) + "\n")
    hits = tmp_path / "hits.jsonl"
    assert (
        main(predict_argv("embedding", out, queries, hits, "--corpus_file", str(target), action="retrieve"))
        == 2
    )
    argv = predict_argv("embedding", out, queries, hits, "--corpus_file", str(target), "--dimensions", "8",
                        "--top_k", "2", action="retrieve")  # fmt: skip
    assert main(argv) == 0
    assert [r["results"][0]["score"] for r in read_jsonl(hits)] == pytest.approx([1.0] * 3, abs=1e-4)


def test_retrieve_compressed_index_and_errors(matryoshka_run, tmp_path, capsys):
    out, _ = matryoshka_run
    corpus = write(tmp_path / "corpus.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    vectors = tmp_path / "v.jsonl"
    assert main(predict_argv("embedding", out, corpus, vectors, "--precision", "fp32", action="encode")) == 0
    queries = write(tmp_path / "q.csv", "text\n" + "\n".join(TEXTS[:4]) + "\n")
    for index in ("int8", "binary"):
        hits = tmp_path / f"{index}.jsonl"
        argv = predict_argv("embedding", out, queries, hits, "--corpus_file", str(vectors), "--index", index,
                            "--top_k", "3", action="retrieve")  # fmt: skip
        assert main(argv) == 0
        assert [r["results"][0]["text"] for r in read_jsonl(hits)] == TEXTS[:4]  # each query finds itself
    capsys.readouterr()
    bad = predict_argv("embedding", out, queries, tmp_path / "x.jsonl", "--corpus_file", str(vectors),
                       "--index", "pq", action="retrieve")  # fmt: skip
    assert main(bad) == 2
    assert "--index must be one of float, int8, binary, found 'pq'" in error_line(capsys.readouterr().err)


def test_rerank_orders_by_the_pair_model(task_runs, matryoshka_run, tmp_path, capsys):
    out, _ = matryoshka_run
    corpus = write(tmp_path / "corpus.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    vectors = tmp_path / "v.jsonl"
    assert main(predict_argv("embedding", out, corpus, vectors, action="encode")) == 0
    queries = write(tmp_path / "q.csv", "text\n" + "\n".join(TEXTS[:2]) + "\n")
    reranker = task_runs["pair"].model_dir
    hits = tmp_path / "hits.jsonl"
    argv = predict_argv("embedding", out, queries, hits, "--corpus_file", str(vectors), "--rerank", str(reranker),
                        "--rerank_top_k", "6", "--top_k", "4", action="retrieve")  # fmt: skip
    assert main(argv) == 0
    scorer = CrossEncoderScorer.load(str(reranker))
    for row in read_jsonl(hits):
        results = row["results"]
        assert len(results) == 4 and all("retrieval_score" in h for h in results)
        expected = scorer.scores([(row["query"], h["text"]) for h in results])
        assert [h["score"] for h in results] == pytest.approx(expected.tolist(), abs=1e-6)
        assert [h["score"] for h in results] == sorted((h["score"] for h in results), reverse=True)
    # the .npy corpus has no texts: refused before any model loads
    npy = tmp_path / "v.npy"
    assert main(predict_argv("embedding", out, corpus, npy, action="encode")) == 0
    capsys.readouterr()
    argv = predict_argv("embedding", out, queries, tmp_path / "h2.jsonl", "--corpus_file", str(npy), "--rerank",
                        str(reranker), action="retrieve")  # fmt: skip
    assert main(argv) == 2 and "--rerank needs the corpus texts" in error_line(capsys.readouterr().err)

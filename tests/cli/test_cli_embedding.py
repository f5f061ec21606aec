"""The real CLI for the embedding (bi-encoder) task: train, evaluate, predict, encode, retrieve."""

import json

import numpy as np
import pytest
import torch

from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.cli import main
from encoder_tasks.tasks.embedding.model import BiEncoder, encode_texts, load_bi_encoder
from tests.helpers import (
    FAST_TRAINING,
    evaluate_argv,
    predict_argv,
    read_json,
    read_jsonl,
    run_predict,
    run_train,
    write,
)
from tests.samples import SCORED_PAIRS, scored_pairs_tsv

FAST = list(FAST_TRAINING)


@pytest.fixture
def scored(tmp_path):
    return write(tmp_path / "pairs.tsv", scored_pairs_tsv())


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "electra", "deberta-v2", "modernbert"])
def test_cosent_train_evaluate_predict(tiny_models, scored, tmp_path, family):
    out = tmp_path / "run"
    metrics = run_train("embedding", tiny_models[family], scored, out, *FAST, validation=scored)
    assert metrics["train_real_tokens_per_second"] > 0
    # the saved model's cosine similarities against the gold scores give the Spearman again
    from scipy.stats import spearmanr

    model, tokenizer = load_bi_encoder(str(out)), load_tokenizer(out)
    first, second = (np.asarray(encode_texts(model, tokenizer, [p[i] for p in SCORED_PAIRS])) for i in (0, 1))
    cosines = (first * second).sum(-1) / np.linalg.norm(first, axis=-1) / np.linalg.norm(second, axis=-1)
    spearman = spearmanr(cosines, [score for _, _, score in SCORED_PAIRS])[0]
    assert metrics["eval_cosine_spearman"] == pytest.approx(spearman, abs=1e-6)
    assert (out / "modules.json").is_file() and (out / "1_Pooling" / "config.json").is_file()

    assert main(evaluate_argv("embedding", out, scored)) == 0
    again = read_json(out / "eval" / "pairs.json")
    assert again["eval_cosine_spearman"] == pytest.approx(metrics["eval_cosine_spearman"], abs=1e-6)

    rows = run_predict("embedding", out, scored, tmp_path / "sim.jsonl")
    assert [r["line"] for r in rows] == list(range(2, 10))
    assert [r["score"] for r in rows] == pytest.approx(cosines.tolist(), abs=1e-3)


@pytest.mark.parametrize("sampler", ["no_duplicates", "shared_negatives"])
def test_mnrl_with_hard_negatives_and_retrieval_evaluation(tiny_bert, tmp_path, sampler):
    lines = ["anchor,positive,negative"] + [
        f"{a},{b},{SCORED_PAIRS[(i + 3) % 8][1]}" for i, (a, b, _) in enumerate(SCORED_PAIRS)
    ]
    data = write(tmp_path / "triples.csv", "\n".join(lines) + "\n")
    out = tmp_path / "run"
    flags = [
        "--negative_columns",
        "negative",
        "--symmetric",
        "true",
        "--retrieval_k",
        "1,3",
        "--batch_sampler",
        sampler,
    ]
    flags += FAST
    metrics = run_train("embedding", tiny_bert, data, out, *flags, validation=data)
    assert metrics["eval_queries"] == 8 and metrics["eval_corpus_size"] == 15  # "the cat sat" twice
    # recomputed from the saved model: each anchor ranks the other distinct texts by cosine, and
    # its positive is the one relevant text
    model, tokenizer = load_bi_encoder(str(out)), load_tokenizer(out)
    anchors, positives = [a for a, _, _ in SCORED_PAIRS], [b for _, b, _ in SCORED_PAIRS]
    corpus = list(dict.fromkeys(anchors + positives))
    vectors = np.asarray(encode_texts(model, tokenizer, corpus))
    vectors /= np.linalg.norm(vectors, axis=-1, keepdims=True)
    ranks = []
    for anchor, positive in zip(anchors, positives):
        similarity = vectors @ vectors[corpus.index(anchor)]
        similarity[corpus.index(anchor)] = -np.inf  # a query never retrieves itself
        ranks.append(int((similarity > similarity[corpus.index(positive)]).sum()) + 1)
    ranks = np.array(ranks)
    assert metrics["eval_recall@1"] == pytest.approx(np.mean(ranks <= 1))
    assert metrics["eval_recall@3"] == pytest.approx(np.mean(ranks <= 3))
    assert metrics["eval_mrr@10"] == pytest.approx(np.mean(np.where(ranks <= 10, 1 / ranks, 0)))
    assert metrics["eval_ndcg@10"] == pytest.approx(np.mean(np.where(ranks <= 10, 1 / np.log2(ranks + 1), 0)))
    assert read_json(out / "encoder_tasks.json")["head_config"]["loss"] == "mnrl"
    assert read_json(out / "encoder_tasks.json")["settings"]["batch_sampler"] == sampler


@pytest.fixture
def trained(tiny_bert, scored, tmp_path):
    out = tmp_path / "model"
    run_train("embedding", tiny_bert, scored, out, *FAST)
    return out


def test_encode_and_retrieve_round_trip(trained, tmp_path):
    texts = sorted({t for a, b, _ in SCORED_PAIRS for t in (a, b)}, key=len)
    corpus = write(
        tmp_path / "corpus.jsonl",
        "".join(json.dumps({"doc": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)),
    )
    npy, jsonl = tmp_path / "vec" / "corpus.npy", tmp_path / "corpus-vectors.jsonl"
    for target in (npy, jsonl):
        flags = ["--batch_size", "3", "--precision", "fp32"]  # compared with encode_texts in fp32 below
        assert (
            main(
                predict_argv(
                    "embedding", trained, corpus, target, *flags, "--id_column", "doc", action="encode"
                )
            )
            == 0
        )
    vectors = np.load(npy)
    ids = read_json(tmp_path / "vec" / "corpus.ids.json")["ids"]
    assert vectors.shape == (len(texts), 32) and ids == [f"d{i}" for i in range(len(texts))]
    # input order kept although batches were length-sorted
    model = load_bi_encoder(str(trained))
    assert np.allclose(vectors, encode_texts(model, load_tokenizer(trained), texts), atol=1e-5)
    records = read_jsonl(jsonl)
    assert np.allclose(np.array([r["embedding"] for r in records]), vectors, atol=1e-6)

    queries = write(tmp_path / "q.csv", "text\n" + "\n".join(texts[:3]) + "\n")
    for source in (npy, jsonl):
        hits = tmp_path / f"hits-{source.suffix[1:]}.jsonl"
        flags = ["--corpus_file", str(source), "--top_k", "4"]
        assert main(predict_argv("embedding", trained, queries, hits, *flags, action="retrieve")) == 0
        rows = read_jsonl(hits)
        assert [r["query"] for r in rows] == texts[:3]
        for i, row in enumerate(rows):
            assert row["results"][0]["id"] == f"d{i}" and row["results"][0]["score"] == pytest.approx(
                1.0, abs=1e-4
            )
            assert [h["rank"] for h in row["results"]] == [1, 2, 3, 4]
            scores = [h["score"] for h in row["results"]]
            assert scores == sorted(scores, reverse=True)
            # exact: the scores are the dot products of the query and corpus vectors
            q = encode_texts(model, load_tokenizer(trained), [row["query"]])[0]
            for hit in row["results"]:
                assert hit["score"] == pytest.approx(float(vectors[ids.index(hit["id"])] @ q), abs=1e-4)
        if source == jsonl:
            assert rows[0]["results"][0]["text"] == texts[0]


def test_encode_and_retrieve_errors(trained, tiny_models, tmp_path, capsys):
    queries = write(tmp_path / "q.csv", "text\nthe cat\n")
    assert main(predict_argv("embedding", trained, queries, tmp_path / "v.txt", action="encode")) == 2
    assert "expected a .npy or .jsonl file" in capsys.readouterr().err
    wrong_dim = tmp_path / "c.npy"
    np.save(wrong_dim, np.zeros((2, 5), dtype=np.float32))
    write(tmp_path / "c.ids.json", json.dumps({"ids": ["a", "b"]}))
    retrieve = predict_argv("embedding", trained, queries, tmp_path / "h.jsonl", action="retrieve")
    assert main([*retrieve, "--corpus_file", str(wrong_dim)]) == 2
    assert "vectors have 5 dimensions, the model" in capsys.readouterr().err
    assert main([*retrieve, "--corpus_file", str(tmp_path / "none.npy")]) == 2
    assert "none.npy: no such file" in capsys.readouterr().err
    assert main(["embedding", "fly"]) == 2
    assert (
        "expected an action (train, evaluate, predict, search, distill, encode, mine, retrieve)"
        in capsys.readouterr().err
    )


def test_predict_and_encode_with_a_plain_encoder(tiny_bert, scored, tmp_path):
    # no training: any encoder (or sentence-transformers folder) embeds with mean pooling
    rows = run_predict("embedding", tiny_bert, scored, tmp_path / "sim.jsonl")
    assert rows[0]["text"] == SCORED_PAIRS[0][0] and rows[0]["text_pair"] == SCORED_PAIRS[0][1]
    vectors = tmp_path / "v.npy"
    encode = predict_argv(
        "embedding", tiny_bert, scored, vectors, "--text_column", "sentence1", action="encode"
    )
    assert main(encode) == 0
    v = np.load(vectors)
    cos = float(v[0] @ v[0])
    assert v.shape == (8, 32) and cos == pytest.approx(1.0, abs=1e-5)
    ids = read_json(tmp_path / "v.ids.json")["ids"]
    assert ids == [str(n) for n in range(2, 10)]  # line numbers of the rows


@pytest.fixture
def embed_calls(monkeypatch):
    """Every batch the bi-encoder embeds: (rows, whether bf16 autocast is on)."""
    calls = []
    original = BiEncoder.embed

    def spy(self, input_ids=None, attention_mask=None, token_type_ids=None):
        bf16 = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        calls.append((input_ids.shape[0], bf16))
        return original(self, input_ids, attention_mask, token_type_ids)

    monkeypatch.setattr(BiEncoder, "embed", spy)
    monkeypatch.setenv("ENCODER_TASKS_DEVICE", "cpu")
    return calls


@pytest.mark.parametrize("source", ["trained", "plain"])
def test_predict_and_encode_honour_precision_and_batch_size(
    request, tiny_bert, scored, tmp_path, embed_calls, source
):
    model_dir = request.getfixturevalue("trained") if source == "trained" else tiny_bert
    common = ["--model_dir", str(model_dir), "--input_file", str(scored), "--batch_size", "4"]
    vectors = {}
    for precision in ("fp32", "bf16"):
        out = ["--precision", precision, "--output_file"]
        embed_calls.clear()
        assert main(["embedding", "predict", *common, *out, str(tmp_path / f"{precision}.jsonl")]) == 0
        # 15 distinct texts (one is repeated) in length-sorted batches of at most 4
        assert sorted(n for n, _ in embed_calls) == [3, 4, 4, 4]
        assert {bf16 for _, bf16 in embed_calls} == {precision == "bf16"}
        embed_calls.clear()
        npy = tmp_path / f"{precision}.npy"
        args = ["embedding", "encode", *common, "--text_column", "sentence1", *out, str(npy)]
        assert main(args) == 0
        assert [n for n, _ in embed_calls] == [4, 4]
        assert {bf16 for _, bf16 in embed_calls} == {precision == "bf16"}
        vectors[precision] = np.load(npy)
    # bf16 changed the numbers, a little
    assert not np.array_equal(vectors["fp32"], vectors["bf16"])
    assert np.allclose(vectors["fp32"], vectors["bf16"], atol=5e-2)


def test_encode_never_replaces_an_id_file(tiny_bert, scored, tmp_path, embed_calls, capsys):
    ids = write(tmp_path / "v.ids.json", '{"ids": ["kept"]}')
    args = ["embedding", "encode", "--model_dir", tiny_bert, "--input_file", str(scored)]
    args += ["--text_column", "sentence1", "--output_file", str(tmp_path / "v.npy")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "v.ids.json already exists" in err and "--overwrite_output" in err
    # refused before any work: nothing embedded, nothing written
    assert embed_calls == [] and not (tmp_path / "v.npy").exists()
    assert ids.read_text() == '{"ids": ["kept"]}'
    assert main([*args, "--overwrite_output"]) == 0
    assert len(json.loads(ids.read_text())["ids"]) == 8 and np.load(tmp_path / "v.npy").shape == (8, 32)

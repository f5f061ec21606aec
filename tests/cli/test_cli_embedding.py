"""The real CLI for the embedding (bi-encoder) task: train, evaluate, predict, encode, retrieve."""

import json

import numpy as np
import pytest
import torch

from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.cli import main
from encoder_tasks.tasks.embedding.model import BiEncoder, encode_texts, load_bi_encoder
from tests.conftest import FAST_TRAINING, write

PAIRS = [
    ("the film was good", "the movie was good", 4.8),
    ("the cat sat on the mat", "a cat sat on a mat", 4.6),
    ("john lives in paris", "john smith lives in paris", 4.0),
    ("the dog ran", "the cat sat", 1.0),
    ("big red dog", "small blue cat", 0.4),
    ("I love this movie", "I hate this film", 1.6),
    ("what did the cat do", "the cat sat", 2.5),
    ("acme inc works in new york", "acme works in new york city", 4.2),
]
FAST = list(FAST_TRAINING)


@pytest.fixture
def scored(tmp_path):
    lines = ["sentence1\tsentence2\tscore"] + [f"{a}\t{b}\t{s}" for a, b, s in PAIRS]
    return write(tmp_path / "pairs.tsv", "\n".join(lines) + "\n")


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "electra", "deberta-v2", "modernbert"])
def test_cosent_train_evaluate_predict(tiny_models, scored, tmp_path, family):
    out = tmp_path / "run"
    common = ["--train_file", str(scored), "--validation_file", str(scored), "--output_dir", str(out), *FAST]
    assert main(["embedding", "train", "--model_name_or_path", tiny_models[family], *common]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert -1 <= metrics["eval_cosine_spearman"] <= 1 and metrics["train_real_tokens_per_second"] > 0
    assert (out / "modules.json").is_file() and (out / "1_Pooling" / "config.json").is_file()

    assert (
        main(["embedding", "evaluate", "--model_name_or_path", str(out), "--validation_file", str(scored)])
        == 0
    )
    again = json.loads((out / "eval" / "pairs.json").read_text())
    assert again["eval_cosine_spearman"] == pytest.approx(metrics["eval_cosine_spearman"], abs=1e-6)

    preds = tmp_path / "sim.jsonl"
    assert (
        main(
            [
                "embedding",
                "predict",
                "--model_dir",
                str(out),
                "--input_file",
                str(scored),
                "--output_file",
                str(preds),
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    assert [r["line"] for r in rows] == list(range(2, 10)) and all(-1 <= r["score"] <= 1 for r in rows)


def test_mnrl_with_hard_negatives_and_retrieval_evaluation(tiny_bert, tmp_path):
    lines = ["anchor,positive,negative"] + [
        f"{a},{b},{PAIRS[(i + 3) % 8][1]}" for i, (a, b, _) in enumerate(PAIRS)
    ]
    data = write(tmp_path / "triples.csv", "\n".join(lines) + "\n")
    out = tmp_path / "run"
    args = ["--train_file", str(data), "--validation_file", str(data), "--output_dir", str(out)]
    args += ["--negative_columns", "negative", "--symmetric", "true", "--retrieval_k", "1,3", *FAST]
    assert main(["embedding", "train", "--model_name_or_path", tiny_bert, *args]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["eval_queries"] == 8 and metrics["eval_corpus_size"] == 15  # "the cat sat" twice
    assert 0 <= metrics["eval_recall@1"] <= metrics["eval_recall@3"] <= 1
    assert 0 <= metrics["eval_mrr@10"] <= 1 and 0 <= metrics["eval_ndcg@10"] <= 1
    assert json.loads((out / "encoder_tasks.json").read_text())["head_config"]["loss"] == "mnrl"


@pytest.fixture
def trained(tiny_bert, scored, tmp_path):
    out = tmp_path / "model"
    assert (
        main(
            [
                "embedding",
                "train",
                "--model_name_or_path",
                tiny_bert,
                "--train_file",
                str(scored),
                "--output_dir",
                str(out),
                *FAST,
            ]
        )
        == 0
    )
    return out


def test_encode_and_retrieve_round_trip(trained, tmp_path):
    texts = sorted({t for a, b, _ in PAIRS for t in (a, b)}, key=len)
    corpus = write(
        tmp_path / "corpus.jsonl",
        "".join(json.dumps({"doc": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)),
    )
    npy, jsonl = tmp_path / "vec" / "corpus.npy", tmp_path / "corpus-vectors.jsonl"
    for target in (npy, jsonl):
        args = [
            "--model_dir",
            str(trained),
            "--input_file",
            str(corpus),
            "--output_file",
            str(target),
            "--batch_size",
            "3",
            "--precision",
            "fp32",  # compared with encode_texts in fp32 below
        ]
        assert main(["embedding", "encode", *args, "--id_column", "doc"]) == 0
    vectors = np.load(npy)
    ids = json.loads((tmp_path / "vec" / "corpus.ids.json").read_text())["ids"]
    assert vectors.shape == (len(texts), 32) and ids == [f"d{i}" for i in range(len(texts))]
    # input order kept although batches were length-sorted
    model = load_bi_encoder(str(trained))
    assert np.allclose(vectors, encode_texts(model, load_tokenizer(trained), texts), atol=1e-5)
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert np.allclose(np.array([r["embedding"] for r in records]), vectors, atol=1e-6)

    queries = write(tmp_path / "q.csv", "text\n" + "\n".join(texts[:3]) + "\n")
    for source in (npy, jsonl):
        hits = tmp_path / f"hits-{source.suffix[1:]}.jsonl"
        args = [
            "--model_dir",
            str(trained),
            "--corpus_file",
            str(source),
            "--input_file",
            str(queries),
            "--output_file",
            str(hits),
            "--top_k",
            "4",
        ]
        assert main(["embedding", "retrieve", *args]) == 0
        rows = [json.loads(line) for line in hits.read_text().splitlines()]
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
    bad_out = [
        "embedding",
        "encode",
        "--model_dir",
        str(trained),
        "--input_file",
        str(queries),
        "--output_file",
        str(tmp_path / "v.txt"),
    ]
    assert main(bad_out) == 2
    assert "expected a .npy or .jsonl file" in capsys.readouterr().err
    wrong_dim = tmp_path / "c.npy"
    np.save(wrong_dim, np.zeros((2, 5), dtype=np.float32))
    write(tmp_path / "c.ids.json", json.dumps({"ids": ["a", "b"]}))
    args = [
        "--model_dir",
        str(trained),
        "--input_file",
        str(queries),
        "--output_file",
        str(tmp_path / "h.jsonl"),
    ]
    assert main(["embedding", "retrieve", *args, "--corpus_file", str(wrong_dim)]) == 2
    assert "vectors have 5 dimensions, the model" in capsys.readouterr().err
    assert main(["embedding", "retrieve", *args, "--corpus_file", str(tmp_path / "none.npy")]) == 2
    assert "none.npy: no such file" in capsys.readouterr().err
    assert main(["embedding", "fly"]) == 2
    assert (
        "expected an action (train, evaluate, predict, search, encode, retrieve)" in capsys.readouterr().err
    )


def test_predict_and_encode_with_a_plain_encoder(tiny_bert, scored, tmp_path):
    # no training: any encoder (or sentence-transformers folder) embeds with mean pooling
    preds = tmp_path / "sim.jsonl"
    args = ["--model_dir", tiny_bert, "--input_file", str(scored), "--output_file", str(preds)]
    assert main(["embedding", "predict", *args]) == 0
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    assert rows[0]["text"] == PAIRS[0][0] and rows[0]["text_pair"] == PAIRS[0][1]
    vectors = tmp_path / "v.npy"
    args = ["--model_dir", tiny_bert, "--input_file", str(scored), "--text_column", "sentence1"]
    assert main(["embedding", "encode", *args, "--output_file", str(vectors)]) == 0
    v = np.load(vectors)
    cos = float(v[0] @ v[0])
    assert v.shape == (8, 32) and cos == pytest.approx(1.0, abs=1e-5)
    ids = json.loads((tmp_path / "v.ids.json").read_text())["ids"]
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

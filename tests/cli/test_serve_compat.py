"""The ecosystem routes against a live server: the official ``openai`` client on ``/v1/embeddings``,
text-embeddings-inference's ``/embed``, ``/rerank`` and ``/predict`` with httpx; each answer
checked against the CLI's own output for the same inputs, each bad input refused by field."""

import base64
import json
import shutil

import httpx
import numpy as np
import openai  # a dev dependency (pyproject.toml): missing means a broken install
import pytest

from encoder_tasks.cli import main
from tests.helpers import assert_close_records, predict_argv, read_jsonl, run_predict, write
from tests.serving import live_server

TEXTS = ["the film was good and fun", "I hate this awful film", "a cat sat on the mat and it was great fun"]
MAX_INPUTS = 8
LONG = "word " * 600  # far over any tiny run's max_length, under the character limit


def copy_run(run_dir, dest, **settings):
    """A copy of a run with ``settings`` changed in its encoder_tasks.json."""
    shutil.copytree(run_dir, dest)
    saved = json.loads((dest / "encoder_tasks.json").read_text())
    saved["settings"].update(settings)
    (dest / "encoder_tasks.json").write_text(json.dumps(saved))
    return dest


@pytest.fixture(scope="module")
def runs(task_runs, tmp_path_factory):
    """The runs served, read at 32 tokens (the tiny encoder has 128 positions, fewer than the 256
    its runs save: a truncated text must fit); ``mat`` saved as if trained with matryoshka_dims."""
    root = tmp_path_factory.mktemp("served")
    runs = {
        name: copy_run(task_runs[task].model_dir, root / name, max_length=32)
        for name, task in [("emb", "embedding"), ("cls", "classification"), ("pair", "pair")]
    }
    runs["mat"] = copy_run(runs["emb"], root / "mat", matryoshka_dims=[8, 16])
    return runs


@pytest.fixture(scope="module")
def url(runs):
    with live_server(runs, precision="fp32", max_inputs_per_request=MAX_INPUTS) as base:
        yield base


@pytest.fixture(scope="module")
def encoded(runs, tmp_path_factory) -> np.ndarray:
    """``embedding encode`` of TEXTS: the vectors every embedding route must give."""
    folder = tmp_path_factory.mktemp("encode")
    inputs = write(folder / "in.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    out = folder / "vectors.jsonl"
    model = runs["emb"]
    assert main(predict_argv("embedding", model, inputs, out, "--precision", "fp32", action="encode")) == 0
    return np.array([r["embedding"] for r in read_jsonl(out)])


def unit(vectors) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def vectors_of(answer) -> np.ndarray:
    """The vectors of an embeddings answer; base64 asked for explicitly comes back as text, which
    a client decodes as little-endian float32 (what ``openai`` does when it picks base64 itself)."""
    data = [d.embedding for d in answer.data]
    if isinstance(data[0], str):
        return np.array([np.frombuffer(base64.b64decode(e), dtype="<f4") for e in data])
    return np.array(data)


def client(url):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


# ---- OpenAI ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_openai_client_embeddings_equal_encode(url, encoded, encoding_format):
    answer = client(url).embeddings.create(model="emb", input=TEXTS, encoding_format=encoding_format)
    assert answer.model == "emb" and [d.index for d in answer.data] == [0, 1, 2]
    np.testing.assert_allclose(vectors_of(answer), encoded, atol=1e-6)


def test_openai_usage_counts_the_tokens_the_model_read(url, runs):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(runs["emb"])
    # A long input is cut at the model's max_length (32 here), as `embedding encode` cuts it.
    texts = [*TEXTS, LONG]
    expected = sum(min(len(ids), 32) for ids in tokenizer(texts)["input_ids"])
    answer = client(url).embeddings.create(model="emb", input=texts, user="someone")
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (expected, expected)
    assert len(answer.data) == 4


def test_openai_client_default_format_and_a_single_string(url, encoded):
    # The client asks for base64 unless told otherwise, and decodes it itself.
    answer = client(url).embeddings.create(model="emb", input=TEXTS[1])
    np.testing.assert_allclose(answer.data[0].embedding, encoded[1], atol=1e-6)


def test_openai_dimensions_refused_without_matryoshka_dims(url, encoded):
    with pytest.raises(openai.BadRequestError) as caught:
        client(url).embeddings.create(model="emb", input=TEXTS, dimensions=16)
    assert caught.value.status_code == 400
    assert caught.value.body["param"] == "dimensions"
    assert f"dimensions: expected {encoded.shape[1]} (this model's full size" in caught.value.message
    # The full size is always allowed: the vectors, at unit length.
    answer = client(url).embeddings.create(model="emb", input=TEXTS, dimensions=encoded.shape[1])
    np.testing.assert_allclose([d.embedding for d in answer.data], unit(encoded), atol=1e-6)


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_openai_matryoshka_dimensions_cut_and_renormalise(url, encoded, encoding_format):
    answer = client(url).embeddings.create(
        model="mat", input=TEXTS, dimensions=16, encoding_format=encoding_format
    )
    vectors = vectors_of(answer)
    assert vectors.shape == (3, 16)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(vectors, unit(encoded[:, :16]), atol=1e-6)
    with pytest.raises(openai.BadRequestError, match=rf"one of 8, 16, {encoded.shape[1]}"):
        client(url).embeddings.create(model="mat", input=TEXTS, dimensions=12)


def test_openai_models_list_the_served_models(url):
    listed = {m.id: m for m in client(url).models.list()}
    assert set(listed) == {"emb", "mat", "cls", "pair"}


def test_openai_bad_requests_name_the_field(url):
    with pytest.raises(openai.NotFoundError, match="no model named 'nope'"):
        client(url).embeddings.create(model="nope", input="a")
    with pytest.raises(openai.BadRequestError, match="model 'cls' is a classification model"):
        client(url).embeddings.create(model="cls", input="a")
    for value, field in [([101, 2023, 102], "input"), ([[101, 2023]], "input[0]")]:
        with pytest.raises(openai.BadRequestError, match="token ids are not accepted") as caught:
            client(url).embeddings.create(model="emb", input=value)
        assert caught.value.body["param"] == field and "send text" in caught.value.message
    answer = httpx.post(
        f"{url}/v1/embeddings", json={"model": "emb", "input": "a", "encoding_format": "int8"}
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "encoding_format: expected float or base64, found 'int8'"


# ---- text-embeddings-inference --------------------------------------------------------------------
def test_tei_embed_equals_encode(url, encoded):
    answer = httpx.post(f"{url}/embed", json={"inputs": TEXTS, "model": "emb"}, timeout=60)
    assert answer.status_code == 200, answer.text
    np.testing.assert_allclose(answer.json(), unit(encoded), atol=1e-6)
    single = httpx.post(f"{url}/embed", json={"inputs": TEXTS[0], "model": "emb", "normalize": False}).json()
    np.testing.assert_allclose(single, encoded[:1], atol=1e-6)
    cut = httpx.post(f"{url}/embed", json={"inputs": TEXTS, "model": "mat", "dimensions": 8}).json()
    np.testing.assert_allclose(cut, unit(encoded[:, :8]), atol=1e-6)


def test_tei_embed_long_input_refused_unless_truncated(url, encoded):
    body = {"inputs": [TEXTS[0], LONG], "model": "emb"}
    answer = httpx.post(f"{url}/embed", json=body)
    assert answer.status_code == 413
    assert answer.json()["error_type"] == "Validation"
    assert answer.json()["error"].startswith("inputs[1]: expected at most ")
    answer = httpx.post(f"{url}/embed", json={**body, "truncate": True}, timeout=60)
    assert answer.status_code == 200 and len(answer.json()) == 2


def test_tei_rerank_orders_as_the_pair_models_scores(url, runs, tmp_path):
    query, texts = "the film was good", ["big red dog", "the movie was good", "john lives in paris"]
    pairs = [{"sentence1": query, "sentence2": t} for t in texts]
    inputs = write(tmp_path / "pairs.jsonl", "".join(json.dumps(p) + "\n" for p in pairs))
    expected = run_predict("pair", runs["pair"], inputs, tmp_path / "out.jsonl", "--precision", "fp32")
    scores = [r["score"] for r in expected]
    answer = httpx.post(
        f"{url}/rerank", json={"query": query, "texts": texts, "model": "pair", "return_text": True}
    )
    assert answer.status_code == 200, answer.text
    ranks = answer.json()
    assert [r["index"] for r in ranks] == sorted(range(3), key=lambda i: -scores[i])
    assert_close_records(
        ranks, [{"index": i, "score": scores[i], "text": texts[i]} for i in (r["index"] for r in ranks)]
    )


def test_tei_rerank_with_an_embedding_model_is_cosine(url, encoded):
    answer = httpx.post(f"{url}/rerank", json={"query": TEXTS[0], "texts": TEXTS[1:], "model": "emb"})
    assert answer.status_code == 200, answer.text
    vectors = unit(encoded)
    cosines = {i: float(vectors[0] @ vectors[i + 1]) for i in range(2)}
    assert [r["index"] for r in answer.json()] == sorted(cosines, key=lambda i: -cosines[i])
    for rank in answer.json():
        assert rank.keys() == {"index", "score"}
        assert rank["score"] == pytest.approx(cosines[rank["index"]], abs=1e-5)


def test_tei_predict_equals_predict_probabilities(url, runs, task_runs, tmp_path):
    inputs = task_runs["classification"].predict_file  # TEXTS, one JSON line each
    expected = run_predict("classification", runs["cls"], inputs, tmp_path / "o.jsonl", "--precision", "fp32")
    probabilities = [sorted(r["probabilities"].items(), key=lambda kv: -kv[1]) for r in expected]
    as_tei = [[{"label": label, "score": p} for label, p in labels] for labels in probabilities]
    batch = httpx.post(f"{url}/predict", json={"inputs": [[t] for t in TEXTS], "model": "cls"})
    assert batch.status_code == 200, batch.text
    assert_close_records(batch.json(), as_tei)
    single = httpx.post(f"{url}/predict", json={"inputs": TEXTS[0], "model": "cls"}).json()
    assert_close_records(single, as_tei[0])
    raw = httpx.post(f"{url}/predict", json={"inputs": TEXTS[0], "model": "cls", "raw_scores": True}).json()
    assert [r["label"] for r in raw] == [r["label"] for r in single]
    np.testing.assert_allclose(np.exp([r["score"] for r in raw]), [r["score"] for r in single], atol=1e-5)


def test_tei_predict_a_regression_pair_model(url, task_runs):
    pair = task_runs["pair"].records[0]
    answer = httpx.post(f"{url}/predict", json={"inputs": [pair["text"], pair["text_pair"]], "model": "pair"})
    assert answer.status_code == 200, answer.text
    [prediction] = answer.json()
    assert prediction["label"] == "score" and isinstance(prediction["score"], float)


BAD_TEI = [
    (
        "/embed",
        {"inputs": 3, "model": "emb"},
        400,
        "inputs: expected a string or a list of strings, found 3 (int)",
    ),
    (
        "/embed",
        {"inputs": [], "model": "emb"},
        400,
        "inputs: expected at least one text, found an empty list",
    ),
    ("/embed", {"inputs": ["a", 5], "model": "emb"}, 400, "inputs[1]: expected a string, found 5 (int)"),
    ("/embed", {"inputs": "a", "model": "nope"}, 404, "model: no model named 'nope' is served"),
    (
        "/embed",
        {"inputs": "a", "model": "cls"},
        400,
        "model 'cls' is a classification model; /embed serves embedding",
    ),
    ("/embed", {"inputs": "a"}, 400, "model: expected the name of one of the embedding models emb, mat"),
    (
        "/embed",
        {"inputs": ["a"] * (MAX_INPUTS + 1), "model": "emb"},
        413,
        "inputs: expected at most 8 inputs",
    ),
    (
        "/embed",
        {"inputs": "a", "model": "emb", "normalize": "yes"},
        400,
        "normalize: expected a valid boolean",
    ),
    ("/embed", {"inputs": "a", "model": "emb", "dimensions": 5}, 400, "dimensions: expected "),
    (
        "/embed",
        {"inputs": "a", "model": "emb", "dimensions": 0},
        400,
        "dimensions: expected a positive integer",
    ),
    ("/embed", {"inputs": "a", "model": "emb", "truncation_direction": "left"}, 400, "truncation_direction:"),
    ("/rerank", {"query": "q", "texts": [], "model": "pair"}, 400, "texts: expected at least one text"),
    ("/rerank", {"texts": ["a"], "model": "pair"}, 400, "query: expected a value, found nothing"),
    (
        "/rerank",
        {"query": "q", "texts": ["a"], "model": "cls"},
        400,
        "/rerank serves pair or embedding models",
    ),
    ("/rerank", {"query": "q", "texts": ["a", LONG], "model": "pair"}, 413, "texts[1]: expected at most "),
    (
        "/rerank",
        {"query": "x" * 30000, "texts": ["a"], "model": "pair"},
        413,
        "query: expected at most 20000 char",
    ),
    ("/predict", {"inputs": [], "model": "cls"}, 400, "inputs: expected a string, a [text, text_pair] pair"),
    ("/predict", {"inputs": ["a", "b", "c"], "model": "cls"}, 400, "inputs: a list of strings is one input"),
    ("/predict", {"inputs": [["a"], ["b", "c"]], "model": "cls"}, 400, "inputs: mixes single texts and"),
    (
        "/predict",
        {"inputs": ["a", "b"], "model": "cls"},
        400,
        "inputs: model 'cls' reads single texts; found a pair",
    ),
    ("/predict", {"inputs": "a", "model": "pair"}, 400, "inputs: model 'pair' reads [text, text_pair] pairs"),
    (
        "/predict",
        {"inputs": [[1]], "model": "cls"},
        400,
        "inputs[0]: expected a string, [text] or [text, text_pair]",
    ),
    ("/predict", {"inputs": "a", "model": "emb"}, 400, "/predict serves classification or pair models"),
    ("/predict", {"inputs": LONG, "model": "cls"}, 413, "inputs: expected at most "),
]


@pytest.mark.parametrize(("route", "body", "status", "message"), BAD_TEI)
def test_tei_bad_requests_get_tei_errors_naming_the_field(url, route, body, status, message):
    answer = httpx.post(f"{url}{route}", json=body, timeout=60)
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert set(error) == {"error", "error_type"} and error["error_type"] == "Validation"
    assert message in error["error"]


def test_tei_malformed_json_is_a_tei_error(url):
    answer = httpx.post(f"{url}/embed", content=b'{"inputs": ', headers={"content-type": "application/json"})
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("request body: expected JSON, found invalid JSON")


def test_tei_long_inputs_are_cut_when_truncate_is_true(url):
    answer = httpx.post(
        f"{url}/predict", json={"inputs": [[LONG], ["short"]], "model": "cls", "truncate": True}
    )
    assert answer.status_code == 200, answer.text
    assert len(answer.json()) == 2
    ranks = httpx.post(
        f"{url}/rerank", json={"query": "q", "texts": [LONG], "model": "pair", "truncate": True}
    )
    assert ranks.status_code == 200, ranks.text


def test_the_request_models_are_in_the_openapi_docs(url):
    schemas = httpx.get(f"{url}/openapi.json").json()["components"]["schemas"]
    assert {"EmbeddingsRequest", "EmbedRequest", "RerankRequest"} <= set(schemas)
    assert {"input", "model", "encoding_format", "dimensions", "user"} <= set(
        schemas["EmbeddingsRequest"]["properties"]
    )

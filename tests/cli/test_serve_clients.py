"""Third-party clients nobody here wrote, unchanged, against a live server on 127.0.0.1:
``huggingface_hub.InferenceClient(base_url=server)`` for every task it has a method for (it posts
to ``POST /``, which answers by the served model's kind, and reads ``GET /info``), and LangChain's
``OpenAIEmbeddings`` at its defaults on more documents than one of its requests holds. Every answer
is checked against :class:`encoder_tasks.inference.Predictor` on the same inputs (what ``predict``
writes)."""

import contextlib
import logging

import httpx
import numpy as np
import pytest
from huggingface_hub import InferenceClient  # a dev dependency (pyproject.toml)
from langchain_openai import OpenAIEmbeddings  # a dev dependency (pyproject.toml)

from encoder_tasks.inference import Predictor
from tests.serving import live_server

TASKS = ("embedding", "classification", "pair", "ner", "qa", "mlm")


@pytest.fixture(autouse=True)
def client_online(monkeypatch):
    """huggingface_hub refuses every request in offline mode (HF_HUB_OFFLINE=1, as tests run),
    even to 127.0.0.1: the client is let out, and the Hub's address points nowhere, so a client
    that tried to reach the Hub would fail here instead of going online."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "is_offline_mode", lambda: False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(
        huggingface_hub.constants, "INFERENCE_PROXY_TEMPLATE", "http://127.0.0.1:9/{provider}"
    )


@pytest.fixture(scope="module")
def servers(task_runs):
    """One live server per task, each serving that task's tiny run alone (``POST /`` answers by the
    kind of the one model served)."""
    with contextlib.ExitStack() as stack:
        yield {
            task: stack.enter_context(live_server({task: task_runs[task].model_dir}, precision="fp32"))
            for task in TASKS
        }


@pytest.fixture(scope="module")
def predictors(task_runs):
    return {task: Predictor.load(task_runs[task].model_dir, precision="fp32") for task in TASKS}


def hub(url: str) -> InferenceClient:
    return InferenceClient(base_url=url, timeout=60)


def test_feature_extraction_equals_encode(servers, predictors, task_runs):
    texts = [r["text"] for r in task_runs["embedding"].records]
    expected = np.array(
        [r["embedding"] for r in predictors["embedding"].predict([{"text": t} for t in texts])]
    )
    got = hub(servers["embedding"]).feature_extraction(texts)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    one = hub(servers["embedding"]).feature_extraction(texts[0])
    np.testing.assert_allclose(np.asarray(one).reshape(-1), expected[0], atol=1e-5)


def test_sentence_similarity_is_the_cosine_of_encode(servers, predictors):
    texts = ["the film was good", "the movie was good", "big red dog"]
    vectors = np.array(
        [r["embedding"] for r in predictors["embedding"].predict([{"text": t} for t in texts])]
    )
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    got = hub(servers["embedding"]).sentence_similarity(texts[0], other_sentences=texts[1:])
    np.testing.assert_allclose(got, unit[1:] @ unit[0], atol=1e-5)


def test_text_classification_despite_parameters(servers, predictors, task_runs):
    # The client always sends "parameters": {} (TEI ignores unknown fields; so do we, and say so).
    text = task_runs["classification"].records[1]["text"]
    expected = predictors["classification"].predict([{"text": text}])[0]
    # Against TEI the client keeps the first (highest) of the labels /predict answers.
    got = hub(servers["classification"]).text_classification(text)
    assert got.label == expected["label"]
    assert got.score == pytest.approx(expected["probabilities"][expected["label"]], abs=1e-6)
    # The same through the client pointed at /predict, as the issue tried it.
    got = InferenceClient(model=f"{servers['classification']}/predict").text_classification(text, top_k=2)
    assert got.label == expected["label"]


def test_unknown_fields_are_ignored_and_named(servers, caplog):
    body = {"inputs": "a fine film", "parameters": {"top_k": 2}, "prompt_name": None}
    with caplog.at_level(logging.INFO, logger="encoder_tasks.serving.compat_tei"):
        for _ in range(2):
            answer = httpx.post(f"{servers['classification']}/predict", json=body, timeout=60)
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-ignored-fields"] == "parameters, prompt_name"
    said = [r.getMessage() for r in caplog.records if "ignored the field(s)" in r.getMessage()]
    assert said == [
        "POST /predict: ignored the field(s) parameters, prompt_name, unknown to this route (as "
        "text-embeddings-inference ignores them); each such answer names them in its "
        "X-Ignored-Fields header"
    ]
    # Known fields are still checked.
    answer = httpx.post(f"{servers['classification']}/predict", json={"inputs": "a", "raw_scores": 3})
    assert answer.status_code == 400 and answer.json()["error"].startswith("raw_scores: expected")


def test_pair_model_predicts_and_reranks_on_root(servers, predictors, task_runs):
    record = task_runs["pair"].records[0]
    expected = predictors["pair"].predict([record])[0]
    answer = httpx.post(servers["pair"], json={"inputs": [record["text"], record["text_pair"]]}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()[0]["score"] == pytest.approx(expected["score"], abs=1e-6)
    answer = httpx.post(
        f"{servers['pair']}/invocations", json={"query": record["text"], "texts": [record["text_pair"]]}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()[0]["score"] == pytest.approx(expected["score"], abs=1e-6)


def test_token_classification_equals_predict_entities(servers, predictors, task_runs):
    for record in task_runs["ner"].records:
        expected = predictors["ner"].predict([record])[0]["entities"]
        got = hub(servers["ner"]).token_classification(record["text"])
        assert [(g.entity_group, g.word, g.start, g.end) for g in got] == [
            (e["type"], e["text"], e["start"], e["end"]) for e in expected
        ]
        assert [g.score for g in got] == pytest.approx([e["score"] for e in expected], abs=1e-6)
        assert all(record["text"][g.start : g.end] == g.word for g in got)


def test_question_answering_equals_predict(servers, predictors, task_runs):
    for record in task_runs["qa"].records[:4]:
        question, context = record["question"], record["context"]
        expected = predictors["qa"].predict([{"question": question, "context": context}])[0]
        got = hub(servers["qa"]).question_answering(question=question, context=context)
        if expected["no_answer"]:
            assert (got.answer, got.start, got.end) == ("", 0, 0)
        else:
            assert (got.answer, got.start, got.end) == (
                expected["answer"],
                expected["start"],
                expected["end"],
            )
            assert context[got.start : got.end] == got.answer
            assert got.score == pytest.approx(expected["score"], abs=1e-6)


def test_fill_mask_equals_predict(servers, predictors):
    text = "the cat [MASK] on the mat"
    expected = predictors["mlm"].predict([{"text": text}])[0]["masks"][0]
    got = hub(servers["mlm"]).fill_mask(text)
    tokenizer = predictors["mlm"].tokenizer
    assert [g.token for g in got] == [tokenizer.convert_tokens_to_ids(c["token"]) for c in expected]
    assert [g.score for g in got] == pytest.approx([c["score"] for c in expected], abs=1e-6)
    assert all(g.sequence == text.replace("[MASK]", g.token_str) for g in got)


@pytest.mark.parametrize("task", TASKS)
def test_info_and_health(servers, task_runs, task):
    # The client reads /info only when told the provider (its default, None, refuses).
    client = InferenceClient(base_url=servers[task], provider="hf-inference")
    info = client.get_endpoint_info()
    assert info["model_id"] == task and info["task"] == task
    kind = {"embedding": "embedding", "classification": "classifier", "pair": "reranker"}.get(task, task)
    assert list(info["model_type"]) == [kind]
    assert info["max_client_batch_size"] == 2048
    assert client.health_check()


def test_root_with_several_models_asks_for_one(task_runs):
    models = {"emb": task_runs["embedding"].model_dir, "ner": task_runs["ner"].model_dir}
    with live_server(models, precision="fp32") as url:
        answer = httpx.post(url, json={"inputs": "john lives in paris"}, timeout=60)
        assert answer.status_code == 400
        assert answer.json()["error"].startswith(
            "model: / answers by the kind of one model and 2 are served (emb (embedding), ner (ner))"
        )
        assert answer.json()["error_type"]  # TEI's error shape
        named = httpx.post(url, json={"inputs": "john lives in paris", "model": "ner"}, timeout=60)
        assert named.status_code == 200 and isinstance(named.json(), list)
        assert httpx.get(f"{url}/info", params={"model": "emb"}).json()["model_type"] == {
            "embedding": {"pooling": "mean"}
        }


def test_langchain_openai_embeddings_at_its_defaults(servers, predictors):
    # OpenAIEmbeddings sends 1,000 documents a request by default (chunk_size): over the old 256.
    documents = [f"document number {i} about {'cats' if i % 2 else 'dogs'}" for i in range(1203)]
    embeddings = OpenAIEmbeddings(
        model="embedding",
        base_url=f"{servers['embedding']}/v1",
        api_key="unused",
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    got = np.array(embeddings.embed_documents(documents))
    picks = [0, 1, 999, 1000, 1202]
    expected = np.array(
        [r["embedding"] for r in predictors["embedding"].predict([{"text": documents[i]} for i in picks])]
    )
    assert got.shape[0] == len(documents)
    np.testing.assert_allclose(got[picks], expected, atol=1e-5)
    np.testing.assert_allclose(embeddings.embed_query(documents[5]), got[5], atol=1e-5)

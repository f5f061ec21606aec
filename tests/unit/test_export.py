"""Export parity: the stock transformers layout (served by ``transformers.pipeline``) and the
task's own layouts give the toolkit model's outputs; ``test_export_onnx.py`` covers ONNX.

Heads are built through the task contract (``TASKS[task].build_model`` from the task's
``Settings``), as loading a saved model builds them, with large random weights: a lazy export
(a head that happens to be near zero) cannot pass.
"""

import json

import numpy as np
import pytest
import torch

from encoder_tasks.backbone import load_encoder, load_tokenizer
from encoder_tasks.commands.export import export_model
from encoder_tasks.errors import UserError
from encoder_tasks.export import EXPORT_INFO, hidden_bound
from encoder_tasks.registry import TASKS
from encoder_tasks.tasks.classification.predict import predict_texts
from tests.helpers import REPO

TEXTS = ["the film was good and fun", "I hate this awful film .", "john smith lives in paris", "a"]
STOCK_FAMILIES = ["bert", "roberta", "distilbert", "electra", "deberta-v2"]
FORMAT1 = REPO / "tests" / "assets" / "format1"


def save(model, tokenizer, directory):
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build(task, path, seed, **settings):
    """``task``'s head on the tiny encoder at ``path``, built from its saved-settings type."""
    torch.manual_seed(seed)
    spec = TASKS[task]
    return spec.build_model(load_encoder(path), spec.Settings(**settings)).eval()


def classifier(
    path, pooling="cls", labels=("neg", "neutral", "pos"), problem_type="single_label", task="classification"
):
    model = build(
        task, path, 1, label_names=list(labels), problem_type=problem_type, pooling=pooling, max_length=64
    )
    torch.nn.init.normal_(model.classifier.weight, std=2.0)
    torch.nn.init.normal_(model.classifier.bias, std=1.0)
    return model


def tagger(path, crf):
    model = build("ner", path, 2, label_names=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], crf=crf)
    torch.nn.init.normal_(model.classifier.weight, std=2.0)
    if crf:
        torch.nn.init.normal_(model.crf.transitions, std=2.0)
    return model


@pytest.mark.parametrize("family", STOCK_FAMILIES)
def test_sequence_classifier_pipeline_matches_toolkit_predict(tiny_models, tmp_path, family):
    from transformers import pipeline

    path = tiny_models[family]
    tokenizer = load_tokenizer(path)
    model = classifier(path)
    run = save(model, tokenizer, tmp_path / "run")
    info = export_model(run, tmp_path / "stock")
    assert info["format"] == "transformers" and info["architecture"].endswith("ForSequenceClassification")
    assert json.loads((tmp_path / "stock" / EXPORT_INFO).read_text())["task"] == "classification"

    served = pipeline("text-classification", model=str(tmp_path / "stock"), top_k=None, device=-1)(TEXTS)
    # fp32: `predict` defaults to bf16 autocast where the CPU has it; the pipeline runs fp32.
    ours, _ = predict_texts(model, tokenizer, TEXTS, max_length=64, stride=16, precision="fp32")
    for got, want in zip(served, ours):
        got = {row["label"]: row["score"] for row in got}
        assert set(got) == {"neg", "neutral", "pos"}
        for label, prob in want["probabilities"].items():
            assert got[label] == pytest.approx(prob, abs=1e-4)
        assert max(got, key=got.get) == want["label"]


def test_pair_and_regression_heads_export(tiny_models, tmp_path):
    from transformers import AutoModelForSequenceClassification

    path = tiny_models["bert"]
    tokenizer = load_tokenizer(path)
    model = classifier(path, labels=("score",), problem_type="regression")
    save(model, tokenizer, tmp_path / "run")
    export_model(tmp_path / "run", tmp_path / "stock")
    stock = AutoModelForSequenceClassification.from_pretrained(tmp_path / "stock").eval()
    assert stock.config.problem_type == "regression"
    batch = tokenizer(TEXTS[:2], TEXTS[2:], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch).logits, model(**batch).logits, atol=1e-4, rtol=1e-4)


def test_pair_cross_encoder_pipeline_on_text_pairs(tiny_models, tmp_path):
    from transformers import pipeline

    path = tiny_models["electra"]
    tokenizer = load_tokenizer(path)
    model = classifier(path, labels=("different", "paraphrase"), task="pair")
    save(model, tokenizer, tmp_path / "run")
    assert export_model(tmp_path / "run", tmp_path / "stock")["task"] == "pair"
    pipe = pipeline("text-classification", model=str(tmp_path / "stock"), top_k=None, device=-1)
    served = pipe([{"text": a, "text_pair": b} for a, b in zip(TEXTS, TEXTS[::-1])])
    ours, _ = predict_texts(model, tokenizer, TEXTS, TEXTS[::-1], long_text="truncate", precision="fp32")
    for got, want in zip(served, ours):
        got = {row["label"]: row["score"] for row in got}
        assert got == pytest.approx(want["probabilities"], abs=1e-4)


def test_tanh_family_bound_holds(tiny_models):
    """The export's identity trick relies on the last LayerNorm bounding every hidden unit."""
    encoder = load_encoder(tiny_models["bert"]).eval()
    bound = hidden_bound(encoder)
    ids = torch.randint(5, 60, (8, 12))
    with torch.no_grad():
        states = encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    assert bool((states.abs() <= bound + 1e-4).all())


def test_mean_pooling_and_modernbert_export_with_the_modeling_file(tiny_models, tmp_path):
    """No stock class expresses them: the export ships modeling_encoder_tasks.py (test_export_pooled.py)."""
    tokenizer = load_tokenizer(tiny_models["bert"])
    save(classifier(tiny_models["bert"], pooling="mean"), tokenizer, tmp_path / "mean")
    assert export_model(tmp_path / "mean", tmp_path / "out1")["trust_remote_code"] is True
    modern = tiny_models["modernbert"]
    save(classifier(modern), load_tokenizer(modern), tmp_path / "modern")
    info = export_model(tmp_path / "modern", tmp_path / "out2")
    assert info["architecture"] == "PooledEncoderForSequenceClassification" and info["trust_remote_code"]
    assert (tmp_path / "out1" / "modeling_encoder_tasks.py").exists()
    assert (tmp_path / "out2" / "modeling_encoder_tasks.py").exists()


def test_export_never_overwrites_and_names_the_formats_a_task_has(tiny_models, tmp_path):
    tokenizer = load_tokenizer(tiny_models["bert"])
    save(classifier(tiny_models["bert"]), tokenizer, tmp_path / "run")
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "keep.txt").write_text("x")
    with pytest.raises(UserError, match="already holds files"):
        export_model(tmp_path / "run", tmp_path / "dest")
    with pytest.raises(
        UserError, match="'sentence-transformers': a classification model exports as one of auto"
    ):
        export_model(tmp_path / "run", tmp_path / "st", fmt="sentence-transformers")
    with pytest.raises(UserError, match="not a model saved by encoder-tasks"):
        export_model(tmp_path / "dest", tmp_path / "x")


def test_a_stock_model_that_differs_is_not_written(tiny_models, tmp_path, monkeypatch):
    """The parity check is not vacuous: a stock head off by 0.1 in one bias is refused."""
    task = type(TASKS["classification"])
    convert = task.stock_model

    def slightly_off(self, model):
        stock = convert(self, model)
        with torch.no_grad():
            stock.classifier.bias[0] += 0.1
        return stock

    monkeypatch.setattr(task, "stock_model", slightly_off)
    save(classifier(tiny_models["bert"]), load_tokenizer(tiny_models["bert"]), tmp_path / "run")
    with pytest.raises(UserError, match="differ from the toolkit model's by .*not written"):
        export_model(tmp_path / "run", tmp_path / "stock")
    assert not (tmp_path / "stock").exists()


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_token_classifier_pipeline_matches_toolkit_logits(tiny_models, tmp_path, family):
    from transformers import pipeline

    path = tiny_models[family]
    tokenizer = load_tokenizer(path)
    model = tagger(path, crf=False)
    save(model, tokenizer, tmp_path / "run")
    export_model(tmp_path / "run", tmp_path / "stock")
    served = pipeline("token-classification", model=str(tmp_path / "stock"), ignore_labels=[], device=-1)(
        TEXTS[2]
    )
    batch = tokenizer([TEXTS[2]], return_tensors="pt")
    with torch.no_grad():
        probs = model(**batch).logits[0].softmax(-1)  # every token is a "word" without word_index
    assert len(served) == int(batch["attention_mask"].sum()) - 2  # special tokens are not served
    for row in served:
        want = probs[row["index"]]
        assert row["entity"] == model.label_names[int(want.argmax())]
        assert row["score"] == pytest.approx(float(want.max()), abs=1e-4)


def test_qa_head_exports_to_stock_question_answering(tiny_models, tmp_path):
    """transformers 5 removed the question-answering pipeline: the stock model's logits are checked."""
    from transformers import AutoModelForQuestionAnswering

    path = tiny_models["bert"]
    tokenizer = load_tokenizer(path)
    model = build("qa", path, 3)
    torch.nn.init.normal_(model.qa_outputs.weight, std=2.0)
    save(model, tokenizer, tmp_path / "run")
    export_model(tmp_path / "run", tmp_path / "stock")
    batch = tokenizer(
        ["who lives in paris ?", "what did the cat do ?"], TEXTS[:2], padding=True, return_tensors="pt"
    )
    stock = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "stock").eval()
    with torch.no_grad():
        ours, theirs = model(**batch), stock(**batch)
    real = batch["attention_mask"].bool()
    for key in ("start_logits", "end_logits"):
        torch.testing.assert_close(getattr(ours, key)[real], getattr(theirs, key)[real], atol=1e-4, rtol=1e-4)


def test_embedding_exports_to_sentence_transformers(tiny_models, tmp_path):
    path = tiny_models["bert"]
    tokenizer = load_tokenizer(path)
    model = build("embedding", path, 5, pooling="mean", normalize=True)
    save(model, tokenizer, tmp_path / "run")
    (tmp_path / "run" / "checkpoint-2").mkdir()  # run files stay behind
    info = export_model(tmp_path / "run", tmp_path / "st")  # auto: the task's own layout
    assert info["format"] == "sentence-transformers" and (info["pooling"], info["normalize"]) == (
        "mean",
        True,
    )
    exported = {p.name for p in (tmp_path / "st").iterdir()}
    assert {"modules.json", "1_Pooling", "2_Normalize", "model.safetensors", EXPORT_INFO} <= exported
    assert "checkpoint-2" not in exported
    with pytest.raises(UserError, match="no stock transformers head"):
        export_model(tmp_path / "run", tmp_path / "stock", fmt="transformers")
    st = pytest.importorskip("sentence_transformers")
    from encoder_tasks.tasks.embedding.model import encode_texts

    served = st.SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(TEXTS, convert_to_numpy=True)
    np.testing.assert_allclose(served, np.asarray(encode_texts(model, tokenizer, TEXTS)), atol=1e-4)


@pytest.mark.parametrize("family", STOCK_FAMILIES)
def test_masked_lm_fill_mask_pipeline_matches_toolkit(tiny_models, tmp_path, family):
    from transformers import pipeline

    path = tiny_models[family]
    tokenizer = load_tokenizer(path)
    model = build("mlm", path, 4)
    torch.nn.init.normal_(model.head.dense.weight, std=0.5)
    torch.nn.init.normal_(model.head.bias, std=1.0)
    save(model, tokenizer, tmp_path / "run")
    info = export_model(tmp_path / "run", tmp_path / "stock")
    assert info["architecture"].endswith("ForMaskedLM")
    text = f"the film was {tokenizer.mask_token} and fun"
    served = pipeline("fill-mask", model=str(tmp_path / "stock"), top_k=5, device=-1)(text)
    batch = tokenizer([text], return_tensors="pt")
    position = int((batch["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0])
    with torch.no_grad():
        probs = model(**batch).logits[0, position].softmax(-1)
    top = probs.topk(5)
    assert [row["token"] for row in served] == top.indices.tolist()
    assert [row["score"] for row in served] == pytest.approx(top.values.tolist(), abs=1e-4)


@pytest.mark.parametrize(
    ("task", "expected"),
    [("qa", "BertForQuestionAnswering"), ("mlm", "BertForMaskedLM"), ("embedding", "sentence-transformers")],
)
def test_format1_models_export_to_their_default_layout(tmp_path, task, expected):
    """Models saved before format 2 (``tests/assets/format1``) export as they did."""
    info = export_model(FORMAT1 / task, tmp_path / "out")
    assert expected in (info.get("architecture"), info["format"]) and info["task"] == task

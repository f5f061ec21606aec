"""Export parity: the stock transformers layout (served by ``transformers.pipeline``) and ONNX
give the toolkit model's outputs."""

import numpy as np
import pytest
import torch

from encoder_tasks.backbone import load_encoder, load_tokenizer
from encoder_tasks.errors import UserError
from encoder_tasks.export import OnnxModel, export_model, hidden_bound, viterbi_numpy
from encoder_tasks.tasks.classification import SequenceClassifier, predict_texts

TEXTS = ["the film was good and fun", "I hate this awful film .", "john smith lives in paris", "a"]
STOCK_FAMILIES = ["bert", "roberta", "distilbert", "electra", "deberta-v2"]


def _save(model, tokenizer, directory):
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _classifier(path, pooling="cls", labels=("neg", "neutral", "pos"), problem_type="single_label"):
    torch.manual_seed(1)
    model = SequenceClassifier(
        load_encoder(path), num_labels=len(labels), problem_type=problem_type, pooling=pooling
    )
    # Large random weights: a lazy export (a head that happens to be near zero) cannot pass.
    torch.nn.init.normal_(model.classifier.weight, std=2.0)
    torch.nn.init.normal_(model.classifier.bias, std=1.0)
    model.metadata.update(
        {"label_names": list(labels), "problem_type": problem_type, "text_column": "text", "max_length": 64}
    )
    return model.eval()


@pytest.mark.parametrize("family", STOCK_FAMILIES)
def test_sequence_classifier_pipeline_matches_toolkit_predict(tiny_models, tmp_path, family):
    from transformers import pipeline

    path = tiny_models[family]
    tokenizer = load_tokenizer(path)
    model = _classifier(path)
    run = _save(model, tokenizer, tmp_path / "run")
    info = export_model(run, tmp_path / "stock")
    assert info["format"] == "transformers" and info["architecture"].endswith("ForSequenceClassification")

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
    model = _classifier(path, labels=("score",), problem_type="regression")
    _save(model, tokenizer, tmp_path / "run")
    export_model(tmp_path / "run", tmp_path / "stock")
    stock = AutoModelForSequenceClassification.from_pretrained(tmp_path / "stock").eval()
    assert stock.config.problem_type == "regression"
    batch = tokenizer(TEXTS[:2], TEXTS[2:], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch).logits, model(**batch).logits, atol=1e-4, rtol=1e-4)


def test_tanh_family_bound_holds(tiny_models):
    """The export's identity trick relies on the last LayerNorm bounding every hidden unit."""
    path = tiny_models["bert"]
    encoder = load_encoder(path).eval()
    bound = hidden_bound(encoder)
    ids = torch.randint(5, 60, (8, 12))
    with torch.no_grad():
        states = encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    assert bool((states.abs() <= bound + 1e-4).all())


def test_mean_pooling_and_modernbert_are_refused_with_a_reason(tiny_models, tmp_path):
    tokenizer = load_tokenizer(tiny_models["bert"])
    _save(_classifier(tiny_models["bert"], pooling="mean"), tokenizer, tmp_path / "mean")
    with pytest.raises(UserError, match="mean-pools.*--pooling cls.*--format onnx"):
        export_model(tmp_path / "mean", tmp_path / "out1")
    modern = tiny_models["modernbert"]
    _save(_classifier(modern), load_tokenizer(modern), tmp_path / "modern")
    with pytest.raises(UserError, match="modernbert.*LayerNorm.*--format onnx"):
        export_model(tmp_path / "modern", tmp_path / "out2")


def test_export_never_overwrites(tiny_models, tmp_path):
    tokenizer = load_tokenizer(tiny_models["bert"])
    _save(_classifier(tiny_models["bert"]), tokenizer, tmp_path / "run")
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "keep.txt").write_text("x")
    with pytest.raises(UserError, match="already holds files"):
        export_model(tmp_path / "run", tmp_path / "dest")


def _tagger(path, crf):
    from encoder_tasks.tasks.ner import TokenTagger

    torch.manual_seed(2)
    model = TokenTagger(load_encoder(path), label_names=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], crf=crf)
    torch.nn.init.normal_(model.classifier.weight, std=2.0)
    if crf:
        torch.nn.init.normal_(model.crf.transitions, std=2.0)
    return model.eval()


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_token_classifier_pipeline_matches_toolkit_logits(tiny_models, tmp_path, family):
    pytest.importorskip("encoder_tasks.tasks.ner")
    from transformers import pipeline

    path = tiny_models[family]
    tokenizer = load_tokenizer(path)
    model = _tagger(path, crf=False)
    _save(model, tokenizer, tmp_path / "run")
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


def test_crf_tagger_is_refused_for_stock_but_exports_to_onnx(tiny_models, tmp_path):
    pytest.importorskip("encoder_tasks.tasks.ner")
    pytest.importorskip("onnxruntime")
    path = tiny_models["bert"]
    tokenizer = load_tokenizer(path)
    model = _tagger(path, crf=True)
    _save(model, tokenizer, tmp_path / "run")
    with pytest.raises(UserError, match="CRF.*--format onnx"):
        export_model(tmp_path / "run", tmp_path / "stock")
    info = export_model(tmp_path / "run", tmp_path / "onnx", fmt="onnx")
    assert info["max_abs_diff"] < 1e-3
    served = OnnxModel(tmp_path / "onnx")
    out = served.outputs(TEXTS)
    tags = served.decode_tags(out["logits"], out["attention_mask"])
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
        paths, _ = model.crf.decode(logits, batch["attention_mask"].bool())
    for row, path_row, mask in zip(tags, paths, batch["attention_mask"]):
        assert row == [model.label_names[i] for i in path_row[: int(mask.sum())].tolist()]


def test_viterbi_numpy_matches_brute_force():
    import itertools

    rng = np.random.default_rng(0)
    emissions, transitions = rng.normal(size=(1, 4, 3)), rng.normal(size=(3, 3))
    start, end = rng.normal(size=3), rng.normal(size=3)

    def score(path):
        total = start[path[0]] + end[path[-1]] + sum(emissions[0, t, k] for t, k in enumerate(path))
        return total + sum(transitions[a, b] for a, b in zip(path, path[1:]))

    best = max(itertools.product(range(3), repeat=4), key=score)
    assert viterbi_numpy(emissions, np.ones((1, 4)), transitions, start, end) == [list(best)]


@pytest.mark.parametrize("family", ["bert", "deberta-v2", "modernbert"])
def test_onnx_classifier_matches_pytorch(tiny_models, tmp_path, family):
    pytest.importorskip("onnxruntime")
    path = tiny_models[family]
    tokenizer = load_tokenizer(path)
    model = _classifier(path, pooling="mean")  # any head exports to ONNX
    _save(model, tokenizer, tmp_path / "run")
    export_model(tmp_path / "run", tmp_path / "onnx", fmt="onnx")
    served = OnnxModel(tmp_path / "onnx").outputs(TEXTS + ["a longer input than any of the others , by far"])
    batch = tokenizer(
        TEXTS + ["a longer input than any of the others , by far"], padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        want = model(**batch).logits.numpy()
    np.testing.assert_allclose(served["logits"], want, atol=1e-4, rtol=1e-4)


def test_qa_head_exports_to_stock_question_answering(tiny_models, tmp_path):
    """transformers 5 removed the question-answering pipeline: the stock model's logits are checked."""
    pytest.importorskip("encoder_tasks.tasks.qa")
    from transformers import AutoModelForQuestionAnswering

    from encoder_tasks.tasks.qa import ExtractiveQuestionAnswering

    path = tiny_models["bert"]
    tokenizer = load_tokenizer(path)
    torch.manual_seed(3)
    model = ExtractiveQuestionAnswering(load_encoder(path))
    torch.nn.init.normal_(model.qa_outputs.weight, std=2.0)
    model.eval()
    _save(model, tokenizer, tmp_path / "run")
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
    embedding = pytest.importorskip("encoder_tasks.tasks.embedding")
    st = pytest.importorskip("sentence_transformers")
    path = tiny_models["bert"]
    tokenizer = load_tokenizer(path)
    model = embedding.build_model(load_encoder(path), {"pooling": "mean", "normalize": True})
    model.eval()
    _save(model, tokenizer, tmp_path / "run")
    info = export_model(tmp_path / "run", tmp_path / "st")
    assert info["format"] == "sentence-transformers"
    served = st.SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(TEXTS, convert_to_numpy=True)
    ours = embedding.encode_texts(model, tokenizer, TEXTS)
    np.testing.assert_allclose(served, np.asarray(ours), atol=1e-4)


@pytest.mark.parametrize("family", STOCK_FAMILIES)
def test_masked_lm_fill_mask_pipeline_matches_toolkit(tiny_models, tmp_path, family):
    mlm = pytest.importorskip("encoder_tasks.tasks.mlm")
    from transformers import pipeline

    path = tiny_models[family]
    tokenizer = load_tokenizer(path)
    torch.manual_seed(4)
    model = mlm.MaskedLanguageModel(load_encoder(path))
    torch.nn.init.normal_(model.head.dense.weight, std=0.5)
    torch.nn.init.normal_(model.head.bias, std=1.0)
    model.eval()
    _save(model, tokenizer, tmp_path / "run")
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


def _head(task, path):
    module = pytest.importorskip(f"encoder_tasks.tasks.{task}")
    encoder = load_encoder(path)
    if task == "qa":
        return module.ExtractiveQuestionAnswering(encoder)
    if task == "mlm":
        return module.MaskedLanguageModel(encoder)
    if task == "ner":
        return module.TokenTagger(encoder, label_names=["O", "B-X", "I-X"])
    return module.build_model(encoder, {"pooling": "mean", "normalize": True})


@pytest.mark.parametrize("task", ["qa", "mlm", "embedding", "ner"])
def test_onnx_every_head_matches_pytorch(tiny_models, tmp_path, task):
    pytest.importorskip("onnxruntime")
    path = tiny_models["roberta"]  # BPE, no token types
    tokenizer = load_tokenizer(path)
    torch.manual_seed(5)
    model = _head(task, path).eval()
    _save(model, tokenizer, tmp_path / "run")
    export_model(tmp_path / "run", tmp_path / "onnx", fmt="onnx")
    served = OnnxModel(tmp_path / "onnx")
    pairs = TEXTS[::-1] if task == "qa" else None
    got = served.outputs(TEXTS, pairs)
    batch = tokenizer(TEXTS, pairs, padding=True, return_tensors="pt")
    real = batch["attention_mask"].bool().numpy()
    with torch.no_grad():
        if task == "embedding":
            want = {"embeddings": model.embed(**batch)}
        else:
            out = model(**batch)
            want = {k: getattr(out, k) for k in served.output_names}
    for name, value in want.items():
        value = value.float().numpy()
        mine = got[name]
        if value.ndim >= 2 and value.shape[:2] == real.shape:  # per token: compare real positions
            value, mine = value[real], mine[real]
        np.testing.assert_allclose(mine, value, atol=1e-4, rtol=1e-4)


def test_pair_cross_encoder_pipeline_on_text_pairs(tiny_models, tmp_path):
    pair = pytest.importorskip("encoder_tasks.tasks.pair")
    from transformers import pipeline

    path = tiny_models["electra"]
    tokenizer = load_tokenizer(path)
    torch.manual_seed(6)
    model = pair.PairClassifier(load_encoder(path), num_labels=2, pooling="cls")
    torch.nn.init.normal_(model.classifier.weight, std=2.0)
    model.metadata.update({"label_names": ["different", "paraphrase"], "problem_type": "single_label"})
    _save(model.eval(), tokenizer, tmp_path / "run")
    assert export_model(tmp_path / "run", tmp_path / "stock")["task"] == "pair"
    pipe = pipeline("text-classification", model=str(tmp_path / "stock"), top_k=None, device=-1)
    served = pipe([{"text": a, "text_pair": b} for a, b in zip(TEXTS, TEXTS[::-1])])
    ours, _ = predict_texts(model, tokenizer, TEXTS, TEXTS[::-1], long_text="truncate", precision="fp32")
    for got, want in zip(served, ours):
        got = {row["label"]: row["score"] for row in got}
        assert got == pytest.approx(want["probabilities"], abs=1e-4)

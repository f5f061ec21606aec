"""Bi-encoder task: data preparation, the model, saving in the sentence-transformers layout."""

import json
import logging
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from encoder_tasks.backbone import load_encoder, load_tokenizer, resolve_model_path
from encoder_tasks.config import DataArguments
from encoder_tasks.data import Split, read_file
from encoder_tasks.errors import UserError
from encoder_tasks.tasks.embedding import EmbeddingTask
from encoder_tasks.tasks.embedding.args import EmbeddingArguments
from encoder_tasks.tasks.embedding.data import duplicate_keys
from encoder_tasks.tasks.embedding.evaluation import retrieval_corpus
from encoder_tasks.tasks.embedding.model import BiEncoder, encode_texts, load_bi_encoder, merged_passes
from encoder_tasks.tasks.embedding.samplers import DuplicateFreeBatchSampler
from encoder_tasks.tasks.embedding.st_layout import read_max_seq_length, read_sentence_transformers_pooling
from encoder_tasks.tasks.embedding.trainer import EmbeddingTrainer
from tests.helpers import write

TASK = EmbeddingTask()
SCORED = (
    "sentence1\tsentence2\tscore\n"
    "the film was good\tthe movie was good\t4.5\n"
    "the cat sat\ta cat sat on the mat\t3.0\n"
    "john lives in paris\tjohn lives in london\t1.0\n"
    "big red dog\tsmall blue cat\t0.0\n"
)
TRIPLES = (
    "anchor,positive,negative\n"
    "the film was good,the movie was good,the film was bad\n"
    "the cat sat,a cat sat on the mat,the dog ran\n"
    "john lives in paris,john smith lives in paris,john lives in london\n"
)


def split(tmp_path, name, text):
    path = write(tmp_path / name, text)
    return Split("train", str(path), read_file(path))


def test_scored_pairs_default_to_cosent_with_scaled_labels(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    s = split(tmp_path, "t.tsv", SCORED)
    prepared = TASK.prepare({"train": s, "validation": s}, tok, EmbeddingArguments(), DataArguments())
    assert prepared.settings.loss == "cosent" and prepared.settings.score_range == [0.0, 4.5]
    assert prepared.train["labels"] == pytest.approx([1.0, 3 / 4.5, 1 / 4.5, 0.0])
    assert prepared.settings.evaluation_mode == "sts"
    assert prepared.eval["score"] == [4.5, 3.0, 1.0, 0.0]
    assert TASK.build_model(load_encoder(tiny_bert), prepared.settings).loss_name == "cosent"


def test_triples_train_mnrl_with_hard_negatives(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    s = split(tmp_path, "t.csv", TRIPLES)
    args = EmbeddingArguments(negative_columns="negative")
    prepared = TASK.prepare({"train": s, "validation": s}, tok, args, DataArguments())
    assert prepared.settings.loss == "mnrl" and prepared.settings.evaluation_mode == "retrieval"
    assert "negative_0_input_ids" in prepared.train.column_names
    batch = prepared.collator(8)([prepared.train[i] for i in range(3)])
    assert batch["anchor"]["input_ids"].shape[1] % 8 == 0 and len(batch["negatives"]) == 1
    model = TASK.build_model(load_encoder(tiny_bert), prepared.settings)
    assert model.settings is prepared.settings
    out = model(**batch)
    assert torch.isfinite(out.loss) and out.embeddings.shape == (3, 32)
    out.loss.backward()
    assert model.encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_min_score_keeps_positive_pairs_for_mnrl(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    args = EmbeddingArguments(loss="infonce", positive_min_score=3.0)
    prepared = TASK.prepare({"train": split(tmp_path, "t.tsv", SCORED)}, tok, args, DataArguments())
    assert prepared.settings.loss == "mnrl" and len(prepared.train) == 2
    assert "labels" not in prepared.train.column_names


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        (
            TRIPLES,
            {"loss": "cosent"},
            r"no score column 'score\|label'; found columns \['anchor', 'positive', 'negative'\]",
        ),
        (
            SCORED.replace("\t4.5", "\thigh"),
            {},
            r"t.tsv line 2: column 'score' expected a number, found 'high'",
        ),
        (
            SCORED,
            {"negative_columns": "negative", "loss": "cosent"},
            r"--negative_columns is for --loss mnrl",
        ),
        (
            SCORED,
            {"negative_columns": "hard"},
            r"no negative column 'hard'; found columns .*Pass --negative_columns",
        ),
        (
            "a,b\nx,y\n",
            {},
            r"no text column 'anchor\|sentence1\|query\|text1\|text'; found columns \['a', 'b'\]",
        ),
        (SCORED.replace("the cat sat\t", "\t"), {}, r"t.tsv line 3: column 'sentence1' is empty"),
    ],
)
def test_bad_inputs_name_file_line_and_column(tmp_path, tiny_bert, text, kwargs, message):
    tok = load_tokenizer(tiny_bert)
    name = "t.tsv" if "\t" in text else "t.csv"
    with pytest.raises(UserError, match=message):
        TASK.prepare(
            {"train": split(tmp_path, name, text)}, tok, EmbeddingArguments(**kwargs), DataArguments()
        )


def test_retrieval_on_scored_pairs_needs_a_threshold(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    s = split(tmp_path, "t.tsv", SCORED)
    with pytest.raises(UserError, match="needs --positive_min_score"):
        TASK.prepare(
            {"train": s, "validation": s}, tok, EmbeddingArguments(evaluation="both"), DataArguments()
        )


@pytest.mark.parametrize(
    "bad", [{"loss": "triplet"}, {"evaluation": "map"}, {"pooling": "sum"}, {"retrieval_k": "1,x"}]
)
def test_bad_settings(bad):
    with pytest.raises(UserError):
        EmbeddingArguments(**bad)


def test_retrieval_corpus_from_pairs():
    anchors = ["q1", "q2", "q1", "q3"]
    positives = ["d1", "d2", "d3", "q3"]
    queries, corpus, relevant, exclude = retrieval_corpus(anchors, positives, [5, 1, 4, 5], min_score=4)
    assert corpus == ["q1", "q2", "q3", "d1", "d2", "d3"]
    assert queries == ["q1"]  # q2 scores too low; q3's positive is itself
    assert relevant == [{3, 5}] and exclude == [{0}]


def test_duplicate_texts_share_keys(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    text = "anchor,positive\nthe cat,a dog\nthe cat,big red\nsmall,a dog\n"
    prepared = TASK.prepare(
        {"train": split(tmp_path, "t.csv", text)}, tok, EmbeddingArguments(), DataArguments()
    )
    keys = duplicate_keys(prepared.train)
    assert keys[0][0] == keys[1][0] and keys[0][1] == keys[2][1] and keys[1][1] != keys[2][1]


def test_duplicate_keys_split_mined_negatives_from_the_rest(tmp_path, tiny_bert):
    tok = load_tokenizer(tiny_bert)
    args = EmbeddingArguments(negative_columns="negative")
    prepared = TASK.prepare({"train": split(tmp_path, "t.csv", TRIPLES)}, tok, args, DataArguments())
    every, owned, negatives = (duplicate_keys(prepared.train, negatives=n) for n in (None, False, True))
    assert [len(k) for k in every] == [3, 3, 3]
    assert all(e == o + n for e, o, n in zip(every, owned, negatives))
    assert negatives[1] == (tuple(tok("the dog ran")["input_ids"]),)


def test_training_says_when_a_shared_negative_costs_batches(tmp_path, tiny_bert, caplog):
    tok = load_tokenizer(tiny_bert)
    rows = "".join(f"query {i},passage {i},the one popular passage\n" for i in range(8))
    args = EmbeddingArguments(negative_columns="negative")
    prepared = TASK.prepare(
        {"train": split(tmp_path, "t.csv", "anchor,positive,negative\n" + rows)}, tok, args, DataArguments()
    )
    trainer = types.SimpleNamespace(task_settings=prepared.settings)
    with caplog.at_level(logging.INFO, logger="encoder_tasks.tasks.embedding.trainer"):
        owned, negatives = (duplicate_keys(prepared.train, negatives=n) for n in (False, True))
        sampler = DuplicateFreeBatchSampler(duplicate_keys(prepared.train), 4)
        EmbeddingTrainer._report_batches(trainer, sampler, owned, negatives)
    # each batch may hold the popular negative once: 8 batches of 1 row where 8 rows fill 2
    assert "8 training batches an epoch, up to 4 rows each (0 full), from 8 rows" in caplog.text
    assert "8 batches where 8 rows would fill 2; --batch_sampler shared_negatives" in caplog.text
    assert "makes 2" in caplog.text


@pytest.mark.parametrize("family", ["bert", "roberta", "modernbert"])
@pytest.mark.parametrize("pooling", ["mean", "cls", "max"])
def test_embeddings_do_not_depend_on_padding(tiny_models, family, pooling):
    tok = load_tokenizer(tiny_models[family])
    model = BiEncoder(load_encoder(tiny_models[family]), pooling=pooling).eval()
    texts = ["the cat sat on the mat and the dog ran", "good"]
    together = encode_texts(model, tok, texts, batch_size=2)
    alone = np.concatenate([encode_texts(model, tok, [t]) for t in texts])
    assert np.allclose(together, alone, atol=1e-5)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


def _saved(tmp_path, tiny_models, family="bert", **head):
    model = BiEncoder(load_encoder(tiny_models[family]), **head)
    model.settings = model.settings.replace(max_length=64)
    out = tmp_path / f"model-{family}"
    model.save_pretrained(out)
    load_tokenizer(tiny_models[family]).save_pretrained(out)
    return model.eval(), out


def test_saved_layout_matches_a_sentence_transformers_model(tmp_path, tiny_models):
    from transformers import AutoModel

    model, out = _saved(tmp_path, tiny_models)
    reference = Path(resolve_model_path("sentence-transformers/all-MiniLM-L6-v2"))
    ours = json.loads((out / "modules.json").read_text())
    theirs = json.loads((reference / "modules.json").read_text())
    assert [(m["path"], m["type"]) for m in ours] == [(m["path"], m["type"]) for m in theirs]
    our_pool = json.loads((out / "1_Pooling" / "config.json").read_text())
    their_pool = json.loads((reference / "1_Pooling" / "config.json").read_text())
    assert set(their_pool) <= set(our_pool) and our_pool["word_embedding_dimension"] == 32
    assert set(json.loads((reference / "sentence_bert_config.json").read_text())) <= set(
        json.loads((out / "sentence_bert_config.json").read_text())
    )
    assert read_sentence_transformers_pooling(reference) == ("mean", True)
    assert read_max_seq_length(reference) == 256 and read_max_seq_length(out) == 64
    # AutoModel loads the folder as a plain encoder with the same weights
    plain = AutoModel.from_pretrained(out)
    for name, tensor in model.encoder.state_dict().items():
        assert torch.equal(plain.state_dict()[name], tensor), name
    # and the toolkit reloads the bi-encoder
    again = load_bi_encoder(str(out))
    tok = load_tokenizer(out)
    texts = ["the film was good", "john lives in paris"]
    assert np.allclose(encode_texts(model, tok, texts), encode_texts(again, tok, texts), atol=1e-6)


@pytest.mark.parametrize(
    ("family", "pooling", "normalize"),
    [("bert", "mean", True), ("bert", "cls", False), ("roberta", "max", True), ("distilbert", "mean", True)],
)
def test_sentence_transformers_loads_the_saved_model(tmp_path, tiny_models, family, pooling, normalize):
    st = pytest.importorskip("sentence_transformers")
    model, out = _saved(tmp_path, tiny_models, family, pooling=pooling, normalize=normalize)
    assert read_sentence_transformers_pooling(out) == (pooling, normalize)
    loaded = st.SentenceTransformer(str(out), device="cpu")
    texts = ["the film was good and fun", "john lives in paris", "a"]
    theirs = loaded.encode(texts, convert_to_numpy=True)
    ours = encode_texts(model, load_tokenizer(out), texts)
    assert theirs.shape == ours.shape and np.allclose(theirs, ours, atol=1e-5)
    assert loaded.max_seq_length == 64


def test_load_bi_encoder_refuses_other_tasks(tmp_path):
    (tmp_path / "encoder_tasks.json").write_text(json.dumps({"format_version": 2, "task": "classification"}))
    with pytest.raises(UserError, match="holds a 'classification' model, not an embedding model"):
        load_bi_encoder(str(tmp_path))


def test_plain_encoder_loads_with_mean_pooling(tiny_bert):
    model = load_bi_encoder(tiny_bert)
    assert model.pooler.mode == "mean" and model.normalize and not model.training


def test_merged_pass_equals_one_pass_per_group(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    model = BiEncoder(load_encoder(tiny_bert)).eval()
    groups = [
        dict(tok(t, padding=True, return_tensors="pt"))
        for t in (["a cat", "the dog sat down"], ["x"], ["a b c d e f"])
    ]
    merged = model.embed_groups(groups)
    for group, vectors in zip(groups, merged):
        assert torch.allclose(vectors, model.embed(**group), atol=1e-5)


def test_short_queries_get_their_own_pass_and_like_width_groups_share_one(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    model = BiEncoder(load_encoder(tiny_bert)).eval()
    long = " ".join(["word"] * 40)
    texts = (
        ["a cat", "dog"],
        [long, long + " more"],
        [long + " again", long],
    )  # queries, passages, negatives
    groups = [dict(tok(t, padding=True, return_tensors="pt")) for t in texts]
    widths = [g["input_ids"].shape[1] for g in groups]
    assert sorted(map(sorted, merged_passes([2, 2, 2], widths))) == [[0], [1, 2]]
    seen = []
    original = model.embed
    model.embed = lambda **g: seen.append(tuple(g["input_ids"].shape)) or original(**g)
    vectors = model.embed_groups(groups)
    assert sorted(seen) == sorted([(2, widths[0]), (4, max(widths[1:]))])  # two passes, queries unpadded
    for group, got in zip(groups, vectors):
        assert torch.allclose(got, original(**group), atol=1e-5)


@pytest.mark.parametrize(
    "sizes, widths, allowance",
    [([32, 32, 32], [18, 128, 120], 1.25), ([16, 16], [30, 28], 1.25), ([8, 8, 8, 8], [10, 50, 12, 48], 1.1),
     ([4, 30], [100, 20], 2.0), ([5], [7], 1.25)],
)  # fmt: skip
def test_every_merged_pass_keeps_its_padding_within_the_allowance(sizes, widths, allowance):
    passes = merged_passes(sizes, widths, allowance)
    assert sorted(i for p in passes for i in p) == list(range(len(sizes)))  # each group once
    for members in passes:
        padded = sum(sizes[i] for i in members) * max(widths[i] for i in members)
        assert padded <= allowance * sum(sizes[i] * widths[i] for i in members)


def test_sentence_transformers_6_layout_is_read(tmp_path):
    # sentence-transformers 6 moved its modules and writes one pooling_mode field
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"},
    ]  # fmt: skip
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": 8, "pooling_mode": "cls"})
    )
    assert read_sentence_transformers_pooling(tmp_path) == ("cls", True)
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "lasttoken"}))
    with pytest.raises(UserError, match="is not one of cls, mean, max"):
        read_sentence_transformers_pooling(tmp_path)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
def test_sentence_transformers_loads_the_export_silently_and_equal(tmp_path, tiny_models, family):
    """The encoder is saved without the pooler no head uses; the layout asks sentence-transformers
    to build none (``model_args``), so loading reports no "MISSING ... newly initialized" weights
    (transformers prints that report at its default verbosity: a fresh process loads it here)."""
    import subprocess
    import sys

    st = pytest.importorskip("sentence_transformers")
    from encoder_tasks.commands.export import export_model
    from tests.helpers import REPO, subprocess_env

    model, out = _saved(tmp_path, tiny_models, family, pooling="mean", normalize=True)
    export_model(out, tmp_path / "st")
    code = (
        f"import sentence_transformers as st; st.SentenceTransformer({str(tmp_path / 'st')!r}, device='cpu')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=subprocess_env(TRANSFORMERS_VERBOSITY="warning"),  # what a user sees (the suite runs at error)
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "MISSING" not in said and "LOAD REPORT" not in said and "newly initialized" not in said, said
    texts = ["the film was good and fun", "john lives in paris", "a"]
    theirs = st.SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts, convert_to_numpy=True)
    ours = np.asarray(encode_texts(model, load_tokenizer(out), texts))
    np.testing.assert_allclose(theirs, ours, atol=1e-6, rtol=0)


def test_rounded_rows_equal_python_round_on_every_value():
    """The vectorised rounding behind encode and serve writes what ``round(float(x), 7)`` does."""
    from encoder_tasks.tasks.embedding.predict import rounded_rows

    rng = np.random.default_rng(0)
    vectors = np.concatenate(
        [rng.standard_normal((200, 384)) * 0.05, rng.standard_normal((50, 384)) * 30]
    ).astype(np.float32)
    assert rounded_rows(vectors) == [[round(float(x), 7) for x in row] for row in vectors]
    assert rounded_rows(vectors, 3) == [[round(float(x), 3) for x in row] for row in vectors]

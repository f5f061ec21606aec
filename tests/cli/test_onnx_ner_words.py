"""The documented ONNX decoding of an NER model gives ``predict``'s tags: ``OnnxModel.tag`` reads
each word's first sub-token and decodes with the NER task's own decoder (the CRF of ``crf.npz``
included), one tag per word, equal to ``ner predict`` on held-out-style sentences it never saw."""

import random

import pytest

from encoder_tasks.commands.export import export_model
from encoder_tasks.errors import UserError
from encoder_tasks.export import OnnxModel
from encoder_tasks.tasks.ner.decoding import decode_exported
from tests.helpers import run_predict, write

pytest.importorskip("onnxruntime")

WORDS = ["john", "smith", "lives", "in", "paris", "acme", "inc", "works", "new", "york", "city", "the",
         "cat", "sat", "on", "mat", "mary", "berlin", "google", "visited", ".", ","]  # fmt: skip


def sentences(n: int, seed: int = 7) -> list[list[str]]:
    """Sentences of the training words in new orders (and lengths): not the training sentences."""
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(rng.randint(1, 14))] for _ in range(n)]


@pytest.fixture(scope="module")
def exported(task_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx-ner") / "onnx"
    export_model(task_runs["ner"].model_dir, out, fmt="onnx")
    assert (out / "crf.npz").is_file()  # the run is a CRF tagger
    return OnnxModel(out)


def test_onnx_tags_equal_predict_word_for_word(task_runs, exported, tmp_path):
    held_out = sentences(40)
    conll = "\n\n".join("\n".join(f"{w}\tO" for w in words) for words in held_out) + "\n"
    predicted = run_predict(
        "ner", task_runs["ner"].model_dir, write(tmp_path / "h.conll", conll), tmp_path / "p.jsonl"
    )
    tags = exported.tag(held_out, decode_exported)
    assert [len(t) for t in tags] == [len(words) for words in held_out]
    assert tags == [p["tags"] for p in predicted]
    # The model predicts something: the comparison is not between two all-O outputs.
    assert any(tag != "O" for row in tags for tag in row)


def test_a_sentence_over_max_length_is_refused(exported):
    long = ["paris"] * (int(exported.settings["max_length"]) + 5)
    with pytest.raises(UserError, match=r"sentence 1: \d+ tokens, over the model's max_length .*windows"):
        exported.tag([["john"], long], decode_exported)

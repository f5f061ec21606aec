"""MLM text: reading .txt/.jsonl corpora, packing into blocks without padding or lost tokens."""

import json

import datasets
import pytest

from encoder_tasks.errors import UserError
from encoder_tasks.tasks.mlm.text import make_blocks, read_split, read_text_file, special_frame
from encoder_tasks.testing import make_tiny_tokenizer
from tests.helpers import write

DOCS = [
    "the film was good and fun",
    "john smith lives in paris and works at acme inc in new york city",
    "the cat sat on the mat",
    "what did the dog do ? the dog ran",
] * 5


@pytest.fixture(scope="module", params=["wordpiece", "bpe"])
def tok(request):
    return make_tiny_tokenizer(request.param)


def test_packing_has_no_padding_and_keeps_every_token(tok):
    blocks = make_blocks(datasets.Dataset.from_dict({"text": DOCS}), tok, max_length=16)
    prefix, suffix = special_frame(tok)
    lengths = blocks["length"]
    assert all(n == 16 for n in lengths[:-1]) and 0 < lengths[-1] <= 16
    assert [len(ids) for ids in blocks["input_ids"]] == lengths
    stream = []
    for ids in blocks["input_ids"]:
        assert ids[: len(prefix)] == prefix and ids[len(ids) - len(suffix) :] == suffix
        stream += ids[len(prefix) : len(ids) - len(suffix)]
    expected = []
    for ids in tok(DOCS, add_special_tokens=False)["input_ids"]:
        if expected:
            expected.append(tok.sep_token_id)
        expected += ids
    assert stream == expected
    assert all(len(s) == len(i) for s, i in zip(blocks["word_starts"], blocks["input_ids"]))


def test_line_by_line_keeps_documents_apart(tok):
    blocks = make_blocks(
        datasets.Dataset.from_dict({"text": DOCS[:4]}), tok, max_length=12, line_by_line=True
    )
    per_doc = [len(ids) for ids in tok(DOCS[:4], add_special_tokens=False)["input_ids"]]
    content = 12 - sum(len(p) for p in special_frame(tok))
    assert len(blocks) == sum(-(-n // content) for n in per_doc)  # long documents cut, never truncated
    assert tok.sep_token_id not in blocks["input_ids"][0][1:-1]


def test_text_file_one_document_per_line(tmp_path):
    path = write(tmp_path / "c.txt", "first doc\nsecond doc\n\n")
    ds = read_text_file(path)
    assert ds["text"] == ["first doc", "second doc"] and ds["_line"] == [1, 2]
    assert ds.cache_files  # memory-mapped Arrow on disk, not rows held in memory


def test_text_file_blank_line_separated_paragraphs(tmp_path):
    path = write(tmp_path / "c.txt", "\npara one line one\nline two\n\n\npara two\n")
    ds = read_split(path)
    assert ds["text"] == ["para one line one\nline two", "para two"] and ds["_line"] == [2, 6]


def test_text_file_changes_are_seen(tmp_path):
    path = write(tmp_path / "c.txt", "one\n")
    assert read_text_file(path)["text"] == ["one"]
    write(path, "one\ntwo and more\n")
    assert read_text_file(path)["text"] == ["one", "two and more"]  # never a stale cache


def test_jsonl_text_column(tmp_path, tok):
    path = write(
        tmp_path / "c.jsonl", "\n".join(json.dumps({"body": d, "id": i}) for i, d in enumerate(DOCS)) + "\n"
    )
    ds = read_split(path)
    with pytest.raises(UserError, match=r"no text column 'text'; found columns \['body', 'id'\]"):
        make_blocks(ds, tok, "text", source=str(path))
    assert len(make_blocks(ds, tok, "body", max_length=32)) > 1


def test_non_text_values_are_reported_with_their_line(tmp_path, tok):
    path = write(tmp_path / "c.jsonl", '{"text": 12}\n{"text": 13}\n')
    with pytest.raises(UserError, match=r"c.jsonl line 1: column 'text' expected text, found 12"):
        make_blocks(read_split(path), tok, source=str(path))


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"\n \n", "the file is empty"), (b"good line\nbad \xff byte\n", r"line 2, column 5: byte 0xff")],
)
def test_bad_text_files(tmp_path, content, message):
    path = write(tmp_path / "c.txt", content)
    with pytest.raises(UserError, match=message):
        read_text_file(path)


def test_max_length_too_small(tok):
    with pytest.raises(UserError, match="no room"):
        make_blocks(datasets.Dataset.from_dict({"text": DOCS}), tok, max_length=2)


def test_squad_json_gives_its_contexts(tmp_path):
    squad = {
        "data": [
            {
                "title": "t",
                "paragraphs": [{"context": "第一段。", "qas": []}, {"context": "second one", "qas": []}],
            },
            {"title": "u", "paragraphs": [{"context": "第一段。", "qas": []}]},
        ]
    }
    path = write(tmp_path / "qa.json", json.dumps(squad, ensure_ascii=False))
    assert read_split(path)["text"] == ["第一段。", "second one"]  # distinct, in order


def test_prepare_saves_the_settings_it_used(tok):
    from encoder_tasks.config import DataArguments
    from encoder_tasks.data import Split
    from encoder_tasks.tasks.mlm.args import MLMArguments, MLMSettings
    from encoder_tasks.tasks.mlm.data import prepare

    docs = datasets.Dataset.from_dict({"body": DOCS})
    splits = {"train": Split("train", "docs.jsonl", docs)}
    args = MLMArguments(
        text_column="text|body", mask_rate=0.3, chinese_segmenter="none", whole_word_masking=True
    )
    prepared = prepare(splits, tok, args, DataArguments(max_length=16))
    assert prepared.settings == MLMSettings(
        max_length=16,
        text_column="text|body",
        mask_rate=0.3,
        whole_word_masking=True,
        chinese_segmenter="none",
    )
    assert len(prepared.train) > len(prepared.eval) > 0  # 5% of the documents held out
    assert prepared.collator(8).mask_rate == 0.3 and prepared.collator(8).pad_to_multiple_of == 8
    # evaluating a saved model: its settings are kept as they are (the flags were resolved from them)
    saved = MLMSettings(max_length=16, base_model="some/model")
    evaluated = prepare({"validation": splits["train"]}, tok, args, DataArguments(max_length=16), saved=saved)
    assert evaluated.settings is saved and evaluated.train is None and len(evaluated.eval) > 0

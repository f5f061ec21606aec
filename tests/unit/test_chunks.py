"""``predict`` reads its input a chunk of rows at a time (:mod:`encoder_tasks.data.chunks`): the
chunks, put together, are the rows the whole-file reader reads, with the same line numbers and the
same messages for bad rows, wherever the chunk boundaries fall."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from encoder_tasks.data import Split, read_file
from encoder_tasks.data.chunks import chunk_rows, read_chunks
from encoder_tasks.data.columns import column_texts
from encoder_tasks.errors import UserError

FILES = {
    "rows.jsonl": "".join(json.dumps({"text": f"text {i}", "n": i}) + "\n" for i in range(7)),
    "blank-lines.jsonl": '{"text": "a"}\n\n{"text": "b", "extra": 1}\n\n\n{"text": "c"}\n{"text": "d"}\n',
    "table.csv": "text,label\n" + "".join(f'"text, {i}",{i % 2}\n' for i in range(7)),
    "quoted-newline.csv": 'text,label\n"two\nlines",a\nplain,b\n"more\nlines\nhere",c\nlast,d\n',
    "table.tsv": "text\tlabel\n" + "".join(f'he said "hi {i}\t{i}\n' for i in range(5)),
    "array.json": json.dumps([{"text": f"t{i}"} for i in range(5)]),
}


def _rows(splits) -> list[dict]:
    return [row for split in splits for row in split.dataset.to_list()]


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("rows", [1, 2, 3, 100])
def test_chunks_together_are_the_whole_file(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text(FILES[name], encoding="utf-8")
    chunks = list(read_chunks(path, rows=rows))
    whole = read_file(path).to_list()
    assert all(len(c.dataset) <= rows for c in chunks)
    assert [c.first_index for c in chunks] == list(range(0, len(whole), rows))
    assert [_given(row) for row in _rows(chunks)] == [_given(row) for row in whole]
    assert chunks[-1].dataset.column_names == read_file(path).column_names  # every column, in order


def _given(row: dict) -> dict:
    """A row without the empty values of columns first seen in other rows."""
    return {key: value for key, value in row.items() if value is not None or key == "_line"}


def test_a_column_of_two_kinds_is_refused_naming_both_lines_across_chunks(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"text": "a"}\n{"text": "b"}\n{"text": "c"}\n{"text": 4}\n')
    with pytest.raises(UserError) as whole:
        read_file(path)
    with pytest.raises(UserError) as chunked:
        list(read_chunks(path, rows=2))
    assert str(chunked.value) == str(whole.value)
    assert "holds text at line 1 but a number at line 4" in str(chunked.value)


def test_a_row_without_the_column_is_named_by_its_line_in_any_chunk(tmp_path):
    path = tmp_path / "gap.jsonl"
    path.write_text('{"text": "a"}\n{"text": "b"}\n{"other": "c"}\n{"other": "d"}\n')
    chunks = list(read_chunks(path, rows=2))
    assert chunks[1].dataset.column_names[:1] == ["text"]  # the column seen before is still there
    with pytest.raises(UserError, match=r"gap.jsonl line 3: column 'text' is empty"):
        for chunk in chunks:
            column_texts(chunk, "text")


def test_rows_without_lines_are_named_by_their_place_in_the_file(tmp_path):
    path = tmp_path / "array.json"
    path.write_text(json.dumps([{"text": "a"}, {"text": "b"}, {"text": "c"}, {"text": " "}]))
    last = list(read_chunks(path, rows=3))[-1]
    assert last.first_index == 3
    with pytest.raises(UserError, match=r"array.json row 4: column 'text' is empty"):
        column_texts(last, "text")


def test_bad_lines_give_the_whole_file_readers_message(tmp_path):
    for text, message in [
        ('{"text": "a"}\n{"text": "b"}\n{"text": "c"}\n{"text": \n', "line 4: not valid JSON"),
        ('{"text": "a"}\n{"text": "b"}\n[1]\n', "line 3: expected a JSON object, found list"),
        ("", "the file is empty"),
    ]:
        path = tmp_path / "bad.jsonl"
        path.write_text(text)
        with pytest.raises(UserError) as whole:
            read_file(path)
        with pytest.raises(UserError) as chunked:
            list(read_chunks(path, rows=2))
        assert str(chunked.value) == str(whole.value) and message in str(chunked.value)
    path = tmp_path / "bad.csv"
    path.write_bytes(b"text,label\na,b\nc,d\ne,f,g\n")
    with pytest.raises(UserError, match="line 4: expected 2 fields"):
        list(read_chunks(path, rows=1))
    path.write_bytes(b"text,label\na,b\nc\xff,d\n")
    with pytest.raises(UserError, match=r"line 3, column 2: byte 0xff is not valid utf-8"):
        list(read_chunks(path, rows=1))


def test_encodings_without_a_newline_byte_are_read_whole_then_chunked(tmp_path):
    path = tmp_path / "wide.jsonl"
    path.write_bytes("".join(json.dumps({"text": f"é{i}"}) + "\n" for i in range(5)).encode("utf-16"))
    chunks = list(read_chunks(path, encoding="utf-16", rows=2))
    assert [r["text"] for r in _rows(chunks)] == [f"é{i}" for i in range(5)]
    with pytest.raises(UserError, match="unknown text encoding"):
        list(read_chunks(path, encoding="no-such-codec", rows=2))


def test_the_chunk_size_can_be_set_and_is_checked(monkeypatch):
    monkeypatch.setenv("ENCODER_TASKS_CHUNK_ROWS", "7")
    assert chunk_rows() == 7
    monkeypatch.setenv("ENCODER_TASKS_CHUNK_ROWS", "0")
    with pytest.raises(UserError, match="ENCODER_TASKS_CHUNK_ROWS must be a whole number of at least 1"):
        chunk_rows()


def test_split_location_counts_from_the_chunk_start():
    import datasets

    split = Split("predict", "f.json", datasets.Dataset.from_dict({"_line": [None]}), first_index=9)
    assert split.location(0) == "f.json row 10"


def test_the_npy_header_is_rewritten_in_place_for_any_row_count():
    from encoder_tasks.tasks.embedding.search import _npy_header

    for rows, dimension in [(0, 0), (1, 384), (10**12, 4096)]:
        assert len(_npy_header(rows, dimension)) == len(_npy_header(0, 0)) == 128
    data = np.arange(12, dtype="<f4").reshape(4, 3)
    assert np.array_equal(np.load(io.BytesIO(_npy_header(4, 3) + data.tobytes())), data)


@pytest.mark.parametrize(
    "text",
    [
        "-DOCSTART- O\n\nJohn\tB-PER\nlives\tO\n\nParis\tB-LOC\n",
        "a O\r\nb O\r\n\r\nc O",  # CRLF, no newline at the end
        "a O\x0cb O\n\nc O\u2028d O\n",  # str.splitlines also ends lines at a form feed and U+2028
    ],
)
def test_conll_read_line_by_line_gives_read_conlls_sentences(tmp_path, text):
    from encoder_tasks.tasks.ner.conll import read_conll, stream_conll

    path = tmp_path / "in.conll"
    path.write_bytes(text.encode("utf-8"))
    assert list(stream_conll(path)) == read_conll(path).to_list()


def test_conll_errors_name_the_same_line_read_line_by_line(tmp_path):
    from encoder_tasks.tasks.ner.conll import read_conll, stream_conll

    path = tmp_path / "bad.conll"
    path.write_text("a\tO\nb\tO\n\nc\tO\td\n")
    with pytest.raises(UserError) as whole:
        read_conll(path)
    with pytest.raises(UserError) as streamed:
        list(stream_conll(path))
    assert str(streamed.value) == str(whole.value) and "line 4: expected 2 columns" in str(whole.value)

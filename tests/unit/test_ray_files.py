"""The readers ``--engine ray`` streams plain files with (:mod:`encoder_tasks.engines.ray_files`) give
the rows, line numbers and errors of ``predict``'s own readers (:mod:`encoder_tasks.data.readers`),
for the awkward files too: quoted newlines, bare quotes in TSV, a BOM, CRLF, blank lines, bad bytes."""

from __future__ import annotations

import io

import pytest

from encoder_tasks.data.readers import LINE_COLUMN, read_jsonl, read_table
from encoder_tasks.engines.ray_files import check_encoding, plan_inputs, read_rows, text_lines
from encoder_tasks.errors import UserError
from encoder_tasks.registry import TASKS

TABLES = {
    "plain.csv": b"text,label\ngood film,pos\nbad film,neg\n",
    "quoted.csv": b'text,label\n"a film, with a comma",pos\n"two\nlines",neg\n',
    "bare-quotes.tsv": b'text\tlabel\nhe said "fine\tpos\nno "quote" here\tneg\n',
    "bom-crlf.csv": b"\xef\xbb\xbftext,label\r\ngood,pos\r\n\r\nbad,neg\r\n",
    "no-final-newline.csv": b"text,label\ngood,pos",
}
JSONL = {
    "blank-lines.jsonl": b'{"text": "a"}\n\n  \n{"text": "b", "n": 2}\n',
    "crlf.jsonl": b'{"text": "a"}\r\n{"text": "\\u00e9t\\u00e9"}\r\n',
    "separators.jsonl": '{"text": "a\u2028b\x85c"}\n{"text": "d"}\n'.encode(),
}


def _streamed(name: str, data: bytes, fmt: str, **options):
    return [(line, row) for line, _, row in read_rows(io.BytesIO(data), name, fmt, **options)]


def _local(reader, tmp_path, name: str, data: bytes, **options):
    path = tmp_path / name
    path.write_bytes(data)
    rows = reader(path, **options)
    return [(row.pop(LINE_COLUMN), row) for row in rows]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_tables_stream_as_the_local_reader_reads_them(tmp_path, name):
    expected = _local(read_table, tmp_path, name, TABLES[name])
    assert _streamed(str(tmp_path / name), TABLES[name], "table") == expected


def test_headerless_tables_take_the_named_columns(tmp_path):
    data = b"good film,pos,extra\nbad film,neg,extra\n"
    expected = _local(read_table, tmp_path, "h.csv", data, column_names=["text", "label"])
    assert _streamed(str(tmp_path / "h.csv"), data, "table", column_names=["text", "label"]) == expected


@pytest.mark.parametrize("name", sorted(JSONL))
def test_json_lines_stream_as_the_local_reader_reads_them(tmp_path, name):
    expected = _local(read_jsonl, tmp_path, name, JSONL[name])
    assert _streamed(str(tmp_path / name), JSONL[name], "jsonl") == expected


def test_lines_keep_their_numbers_and_skip_blank_ones():
    rows = _streamed("in.txt", b"john lives in paris\n\n  \nacme inc\r\n", "lines")
    assert rows == [(1, {"text": "john lives in paris"}), (4, {"text": "acme inc"})]


@pytest.mark.parametrize(
    ("name", "data", "fmt", "reader"),
    [
        ("ragged.csv", b"text,label\ngood,pos\nbad\n", "table", read_table),
        ("header-only.csv", b"text,label\n", "table", read_table),
        ("twice.csv", b"text,text\na,b\n", "table", read_table),
        ("empty.csv", b"  \n\n", "table", read_table),
        ("bad-byte.csv", b"text\ngood\nbad \xff byte\n", "table", read_table),
        ("bad.jsonl", b'{"text": "a"}\n{"text": \n', "jsonl", read_jsonl),
        ("list.jsonl", b'{"text": "a"}\n[1, 2]\n', "jsonl", read_jsonl),
        ("nothing.jsonl", b"\n \n", "jsonl", read_jsonl),
    ],
)
def test_bad_files_fail_with_the_local_message(tmp_path, name, data, fmt, reader):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UserError) as local:
        reader(path)
    with pytest.raises(UserError) as streamed:
        _streamed(str(path), data, fmt)
    assert str(streamed.value) == str(local.value)


def test_long_files_are_read_in_chunks(monkeypatch):
    import encoder_tasks.data.readers as readers

    monkeypatch.setattr(readers, "_CHUNK_BYTES", 7)  # lines cut across chunks
    data = "".join(f"line {i} été\n" for i in range(50)).encode()
    assert [text for _, text in text_lines(io.BytesIO(data), "f.txt")] == data.decode().splitlines(
        keepends=True
    )


def test_encodings_that_cannot_be_cut_at_newlines_are_refused():
    check_encoding("latin-1")
    with pytest.raises(UserError, match="--encoding utf-16: --engine ray reads files line by line"):
        check_encoding("utf-16")
    with pytest.raises(UserError, match="unknown text encoding"):
        check_encoding("no-such-codec")


def test_folders_and_globs_name_their_files_in_order(tmp_path):
    from encoder_tasks.tasks.classification.args import ClassificationPredictArguments

    for name in ("b.csv", "a.jsonl", ".hidden.csv", "_SUCCESS"):
        (tmp_path / name).write_text("text\nx\n")
    args = ClassificationPredictArguments(input_file=str(tmp_path), output_file=str(tmp_path / "out.jsonl"))
    inputs = plan_inputs(TASKS["classification"], args)
    assert [(shown, fmt) for _, shown, fmt in inputs.files] == [
        (str(tmp_path / "a.jsonl"), "jsonl"),
        (str(tmp_path / "b.csv"), "table"),
    ]
    assert inputs.several
    args.input_file = str(tmp_path / "*.csv")
    assert [shown for _, shown, _ in plan_inputs(TASKS["classification"], args).files] == [
        str(tmp_path / "b.csv")
    ]
    args.input_file = str(tmp_path / "*.parquet")
    with pytest.raises(UserError, match="no file matches"):
        plan_inputs(TASKS["classification"], args)

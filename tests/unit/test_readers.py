import json

import datasets
import pytest

from encoder_tasks.data import read_file
from encoder_tasks.errors import UserError
from tests.helpers import write


def test_csv_with_header_and_quotes(tmp_path):
    ds = read_file(write(tmp_path / "a.csv", 'text,label\n"hello, world",1\nplain,0\n'))
    assert ds["text"] == ["hello, world", "plain"]
    assert ds["label"] == ["1", "0"]
    assert ds["_line"] == [2, 3]


def test_tsv_keeps_bare_quotes_as_text(tmp_path):
    ds = read_file(write(tmp_path / "a.tsv", 'label\tsentence\n1\tit \'s a " fun " film\n'))
    assert ds["sentence"] == ['it \'s a " fun " film']


def test_headerless_table_ignores_extra_columns_and_sniffs_tabs(tmp_path):
    # STS-B style: a .csv that is tab-separated, some rows with trailing extra columns.
    path = write(tmp_path / "sts.csv", "g\tf\t2012\t1\t5.0\ta\tb\nx\ty\t2012\t2\t1.5\tc\td\textra\tmore\n")
    names = ["genre", "source", "year", "id", "score", "s1", "s2"]
    ds = read_file(path, column_names=names)
    assert ds["score"] == ["5.0", "1.5"] and ds["s2"] == ["b", "d"]


def test_jsonl_and_json_array(tmp_path):
    rows = [{"text": "a", "label": 1}, {"text": "b", "label": 0}]
    jl = read_file(write(tmp_path / "a.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n"))
    js = read_file(write(tmp_path / "a.json", json.dumps({"data": rows})))
    assert jl["text"] == js["text"] == ["a", "b"]
    assert jl["_line"] == [1, 2]


def test_saved_dataset_folder(tmp_path):
    datasets.Dataset.from_dict({"text": ["x", "y"], "label": [0, 1]}).save_to_disk(str(tmp_path / "ds"))
    assert read_file(tmp_path / "ds")["text"] == ["x", "y"]
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["t"]})}).save_to_disk(
        str(tmp_path / "dd")
    )
    assert read_file(tmp_path / "dd", split="train")["text"] == ["t"]
    with pytest.raises(UserError, match="no split 'validation'"):
        read_file(tmp_path / "dd", split="validation")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.jsonl", '{"text": "a"}\n{"text": \n', r"bad.jsonl line 2: not valid JSON"),
        (
            "latin.csv",
            b"text,label\ncaf\xe9,1\n",
            r"latin.csv line 2, column 4: byte 0xe9 is not valid utf-8",
        ),
        ("empty.csv", "", r"empty.csv: the file is empty"),
        ("blank.tsv", "\n \n", r"blank.tsv: the file is empty"),
        ("header.csv", "text,label\n", r"header.csv: no data rows"),
        (
            "ragged.csv",
            "text,label\na,1\nb\n",
            r"ragged.csv line 3: expected 2 fields separated by ',', found 1",
        ),
        ("wide.csv", "text,label\na,1,2\n", r"wide.csv line 2: expected 2 fields"),
        ("notobj.jsonl", "[1, 2]\n", r"notobj.jsonl line 1: expected a JSON object, found list"),
        ("scalar.json", "3", r"scalar.json: expected a JSON array"),
        ("dup.csv", "a,a\n1,2\n", r"dup.csv line 1: the header repeats a column name"),
        ("x.parquet", "zzz", r"unknown format '.parquet'"),
    ],
)
def test_bad_files_name_the_place(tmp_path, name, content, message):
    path = write(tmp_path / name, content)
    before = path.read_bytes()
    with pytest.raises(UserError, match=message):
        read_file(path)
    assert path.read_bytes() == before  # users' files are never modified


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        read_file(tmp_path / "nope.csv")


def test_encoding_option(tmp_path):
    path = write(tmp_path / "latin.csv", b"text,label\ncaf\xe9,1\n")
    assert read_file(path, encoding="latin-1")["text"] == ["café"]


def test_jsonl_lines_end_at_newlines_only(tmp_path):
    # json.dumps(ensure_ascii=False) leaves U+2028, U+2029 and U+0085 raw inside strings.
    texts = ["a\u2028b", "c\x85d\u2029e", "plain"]
    data = "\r\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in texts) + "\n"
    ds = read_file(write(tmp_path / "a.jsonl", data))
    assert ds["text"] == texts and ds["_line"] == [1, 2, 3]


def test_jsonl_fields_missing_from_the_first_record_are_kept(tmp_path):
    path = write(tmp_path / "a.jsonl", '{"text": "a"}\n{"text": "b", "label": "pos"}\n')
    ds = read_file(path)
    assert ds["label"] == [None, "pos"]

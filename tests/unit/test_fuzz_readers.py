"""Fuzz every file reader: no input may end in anything but a dataset or a ``UserError``.

Inputs are random bytes, random text, and near-valid files (tables, JSON, JSON lines,
CoNLL, SQuAD) built from random parts and then cut short or given odd bytes. Every read
must finish within a time limit (no hangs) and leave the file unchanged.

The default budget is small (``FUZZ_EXAMPLES`` per reader, for the fast suite); a longer
run with fresh random examples:
``ENCODER_TASKS_FUZZ_EXAMPLES=3000 ENCODER_TASKS_FUZZ_RANDOM=1 .venv/bin/python -m pytest -q tests/unit/test_fuzz_readers.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from encoder_tasks.data import LINE_COLUMN, read_file  # noqa: E402
from encoder_tasks.errors import UserError  # noqa: E402
from encoder_tasks.tasks.ner.conll import read_conll  # noqa: E402

FUZZ_EXAMPLES = int(os.environ.get("ENCODER_TASKS_FUZZ_EXAMPLES", "120"))
TIME_LIMIT_S = 20  # per read; a hang fails the test instead of blocking the suite
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,  # the shared CPU is noisy; hangs are caught by TIME_LIMIT_S instead
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # Fixed examples in the fast suite; ENCODER_TASKS_FUZZ_RANDOM=1 explores new ones each run.
    derandomize=os.environ.get("ENCODER_TASKS_FUZZ_RANDOM") != "1",
    database=None,
)


@contextlib.contextmanager
def time_limit(seconds: int):
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def on_alarm(signum, frame):
        raise TimeoutError(f"reader still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check_reader(reader, suffix: str, content: bytes, **options):
    """Write ``content``, read it: a dataset with the line column, or a UserError; file unchanged."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"data{suffix}"
        path.write_bytes(content)
        try:
            with time_limit(TIME_LIMIT_S):
                dataset = reader(path, **options)
        except UserError as exc:
            assert str(exc).strip(), "a UserError needs a message"
            assert "\n" not in str(exc).strip() or len(str(exc)) < 20000
        else:
            assert len(dataset) > 0
            assert LINE_COLUMN in dataset.column_names
        assert path.read_bytes() == content, "the reader modified its input"


# ---- strategies -------------------------------------------------------------------------------
field_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
awkward = st.sampled_from(["", " ", '"', "'", ",", "\t", "\n", "\r\n", "\\", "\ufeff", "\x00", "é", "中"])
cell = st.one_of(field_text, awkward, st.builds(lambda a, b: a + b, field_text, awkward))
encodings = st.sampled_from(["utf-8", "utf-8", "latin-1", "utf-16", "ascii"])
delimiters = st.sampled_from(["auto", "auto", ",", "tab", ";", "|", " "])
column_names = st.one_of(
    st.none(), st.lists(st.sampled_from(["text", "label", "a", "b"]), min_size=1, max_size=3)
)


def _table(rows: list[list[str]], sep: str) -> str:
    return "\n".join(sep.join(row) for row in rows)


tables = st.builds(
    _table,
    st.lists(st.lists(cell, min_size=0, max_size=5), min_size=0, max_size=8),
    st.sampled_from([",", "\t"]),
)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), field_text)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["text", "label", "tokens", "tags", "data", "x"]) | field_text,
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)
records = st.lists(
    st.dictionaries(st.sampled_from(["text", "label", "a", "b"]), json_values, max_size=4), max_size=6
)


def _cut(text: str, where: float) -> str:
    return text[: int(len(text) * where)]


def _mangle(text: str, where: float, junk: bytes, encoding: str = "utf-8") -> bytes:
    raw = text.encode(encoding, errors="replace")
    cut = int(len(raw) * where)
    return raw[:cut] + junk + raw[cut:]


fractions = st.floats(min_value=0.0, max_value=1.0)
junk = st.one_of(st.just(b""), st.binary(max_size=4))


def _encode(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogatepass")


# ---- tables, JSON, JSON lines (the shared reader) ---------------------------------------------
@FUZZ
@given(
    content=st.binary(max_size=300), suffix=st.sampled_from([".csv", ".tsv", ".json", ".jsonl", ".txt", ""])
)
def test_read_file_random_bytes(content, suffix):
    check_reader(read_file, suffix, content)


@FUZZ
@given(
    table=tables,
    suffix=st.sampled_from([".csv", ".tsv", ".txt"]),
    delimiter=delimiters,
    names=column_names,
    encoding=encodings,
    where=fractions,
    extra=junk,
)
def test_read_file_tables(table, suffix, delimiter, names, encoding, where, extra):
    content = _mangle(table, where, extra)
    check_reader(read_file, suffix, content, delimiter=delimiter, column_names=names, encoding=encoding)


@FUZZ
@given(
    value=st.one_of(records, json_values), wrap=st.booleans(), where=fractions, cut=st.booleans(), extra=junk
)
def test_read_file_json(value, wrap, where, cut, extra):
    text = json.dumps({"data": value} if wrap else value)
    content = _mangle(_cut(text, where) if cut else text, where, extra)
    check_reader(read_file, ".json", content)


@FUZZ
@given(
    rows=st.lists(json_values, max_size=6),
    where=fractions,
    cut=st.booleans(),
    extra=junk,
    blank=st.booleans(),
)
def test_read_file_jsonl(rows, where, cut, extra, blank):
    text = ("\n\n" if blank else "\n").join(json.dumps(r) for r in rows)
    content = _mangle(_cut(text, where) if cut else text, where, extra)
    check_reader(read_file, ".jsonl", content)


# ---- CoNLL (NER) --------------------------------------------------------------------------------
token = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n\r"), min_size=0, max_size=6),
    st.sampled_from(["-DOCSTART-", "B-PER", "I-LOC", "O", "en:Paris", " ", "\t"]),
)
conll_line = st.builds(
    lambda parts, sep: sep.join(parts),
    st.lists(token, min_size=0, max_size=4),
    st.sampled_from(["\t", " ", "  ", "\t "]),
)
conll_text = st.builds("\n".join, st.lists(conll_line, max_size=12))


@FUZZ
@given(
    text=conll_text,
    delimiter=st.sampled_from(["auto", "tab", "space", " "]),
    names=column_names,
    where=fractions,
    extra=junk,
    encoding=encodings,
)
def test_read_conll(text, delimiter, names, where, extra, encoding):
    check_reader(
        read_conll,
        ".conll",
        _mangle(text, where, extra),
        delimiter=delimiter,
        column_names=names,
        encoding=encoding,
    )


@FUZZ
@given(content=st.binary(max_size=300))
def test_read_conll_random_bytes(content):
    check_reader(read_conll, ".conll", content)


# ---- SQuAD JSON (QA) ----------------------------------------------------------------------------
def _squad_reader():
    return importlib.import_module("encoder_tasks.tasks.qa.reading").read_squad


answer = st.fixed_dictionaries(
    {}, optional={"text": json_values | field_text, "answer_start": json_values | st.integers(-5, 50)}
)
qa = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "question": json_values | field_text,
        "answers": st.lists(answer, max_size=3) | json_values,
        "is_impossible": json_values,
        "plausible_answers": st.lists(answer, max_size=2),
    },
)
paragraph = st.fixed_dictionaries(
    {}, optional={"context": field_text | json_values, "qas": st.lists(qa, max_size=3) | json_values}
)
article = st.fixed_dictionaries(
    {}, optional={"title": json_values, "paragraphs": st.lists(paragraph, max_size=3) | json_values}
)
squad = st.fixed_dictionaries(
    {"data": st.lists(article, max_size=3) | json_values}, optional={"version": json_values}
)


@FUZZ
@given(data=squad, where=fractions, cut=st.booleans(), extra=junk)
def test_read_squad(data, where, cut, extra):
    text = json.dumps(data)
    content = _mangle(_cut(text, where), where, extra) if cut else _encode(text)
    check_reader(_squad_reader(), ".json", content)


@FUZZ
@given(content=st.binary(max_size=300), suffix=st.sampled_from([".json", ".jsonl", ".csv"]))
def test_read_squad_random_bytes(content, suffix):
    check_reader(_squad_reader(), suffix, content)


# ---- raw text (MLM) -------------------------------------------------------------------------------
def _text_reader():
    return importlib.import_module("encoder_tasks.tasks.mlm.text").read_split


@FUZZ
@given(
    content=st.one_of(st.binary(max_size=300), st.builds(_encode, st.text(max_size=200))), encoding=encodings
)
def test_read_text_corpus(content, encoding):
    check_reader(_text_reader(), ".txt", content, encoding=encoding)


@FUZZ
@given(data=st.one_of(squad, json_values), where=fractions, cut=st.booleans())
def test_read_text_corpus_json(data, where, cut):
    """MLM reads JSON too (records with a text column, or SQuAD contexts as documents)."""
    text = json.dumps(data)
    check_reader(_text_reader(), ".json", _encode(_cut(text, where) if cut else text))

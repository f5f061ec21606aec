"""The bad-input catalogue: every case drives the real CLI and must end in ONE line that names
the place and the fix, with exit status 2, no traceback, and the user's files unchanged.

``docs/reliability.md`` lists the same cases as a table. A case is
``(id, task, action, files, flags, expected)``: ``files`` are written under ``{data}``,
``flags`` and ``expected`` may name ``{data}``, ``{model}`` (a tiny encoder), ``{cls_run}`` /
``{ner_run}`` (tiny trained runs) and ``{out}`` (a fresh output directory).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from encoder_tasks.cli import main
from encoder_tasks.errors import UserError
from encoder_tasks.registry import TASKS
from tests.helpers import error_line, train_argv, write

TRAIN_CSV = "text,label\ngood film,pos\nbad film,neg\nfine plot,pos\ndull plot,neg\n"
CONLL = "john\tB-PER\nlives\tO\nin\tO\nparis\tB-LOC\n\nmary\tB-PER\nleft\tO\n"
CONTEXT = "john smith lives in paris ."


def squad(answer_text="john smith", answer_start=0, context=CONTEXT, question="who lives in paris ?"):
    qa = {"id": "q1", "question": question, "answers": [{"text": answer_text, "answer_start": answer_start}]}
    return json.dumps(
        {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]}]}
    )


def jsonl(*rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


FAST = {
    "train": [
        "--num_train_epochs",
        "1",
        "--per_device_train_batch_size",
        "4",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--mixed_precision",
        "no",
    ],
    "evaluate": ["--report_to", "none", "--mixed_precision", "no"],
    "predict": [],
}


@dataclass
class Case:
    id: str
    task: str
    action: str
    files: dict = field(default_factory=dict)
    flags: list = field(default_factory=list)
    expected: str = ""
    #: train/evaluate get --model_name_or_path/--output_dir/fast flags unless False
    defaults: bool = True


def cls(id, files, flags, expected, action="train", **kw):
    if action == "train" and "train.csv" not in files and not any(f == "--train_file" for f in flags):
        files = {"train.csv": TRAIN_CSV, **files}
        flags = ["--train_file", "{data}/train.csv", *flags]
    return Case(id, "classification", action, files, flags, expected, **kw)


def train_case(task, id, file, content, expected, *flags):
    """A ``TASK train`` case on one data file, written as ``file`` and given as --train_file."""
    return Case(id, task, "train", {file: content}, ["--train_file", f"{{data}}/{file}", *flags], expected)


def predict_case(id, model, files, expected, *flags, output="{out}/p.jsonl"):
    """A ``classification predict`` case of the run ``model`` (``{cls_run}``...) on ``{data}/in.jsonl``."""
    argv = ["--model_dir", model, "--input_file", "{data}/in.jsonl", "--output_file", output, *flags]
    return Case(id, "classification", "predict", files, argv, expected)


PAIR_COLUMNS = ["--text_column", "sentence1", "--text_pair_column", "sentence2", "--label_column", "score"]

CASES = [
    # ---- readers (tables, JSON, JSON lines), through classification ----
    train_case(
        "classification",
        "csv-missing-text-column",
        "t.csv",
        "sentence,label\nhi,a\nho,b\n",
        "{data}/t.csv: no text column 'text'; found columns ['sentence', 'label']. Pass --text_column",
    ),
    train_case(
        "classification",
        "csv-missing-label-column",
        "t.csv",
        "text,target\nhi,a\nho,b\n",
        "{data}/t.csv: no label column 'label'; found columns ['text', 'target']. Pass --label_column",
    ),
    train_case(
        "classification",
        "csv-ragged-row",
        "t.csv",
        "text,label\na,1\nb\n",
        "{data}/t.csv line 3: expected 2 fields separated by ',', found 1",
    ),
    train_case(
        "classification",
        "csv-duplicate-header",
        "t.csv",
        "text,text\na,b\n",
        "{data}/t.csv line 1: the header repeats a column name",
    ),
    train_case("classification", "csv-empty-file", "t.csv", "", "{data}/t.csv: the file is empty"),
    train_case(
        "classification",
        "csv-header-only",
        "t.csv",
        "text,label\n",
        "{data}/t.csv: no data rows (only a header?)",
    ),
    train_case(
        "classification",
        "csv-not-utf8",
        "t.csv",
        b"text,label\ncaf\xe9,1\nok,0\n",
        "{data}/t.csv line 2, column 4: byte 0xe9 is not valid utf-8; re-save the file as UTF-8 or pass --encoding",
    ),
    train_case(
        "classification",
        "jsonl-malformed-line",
        "t.jsonl",
        '{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n{"text": \n',
        "{data}/t.jsonl line 3: not valid JSON",
    ),
    train_case(
        "classification",
        "jsonl-not-an-object",
        "t.jsonl",
        '{"text": "a", "label": 1}\n[1, 2]\n',
        "{data}/t.jsonl line 2: expected a JSON object, found list",
    ),
    train_case(
        "classification",
        "jsonl-not-utf8",
        "t.jsonl",
        b'{"text": "ok", "label": 1}\n{"text": "\xff", "label": 0}\n',
        "{data}/t.jsonl line 2, column 11: byte 0xff is not valid utf-8",
    ),
    train_case(
        "classification",
        "jsonl-mixed-types",
        "t.jsonl",
        jsonl({"text": "a", "label": 1}, {"text": ["b"], "label": 0}),
        "{data}/t.jsonl: column 'text' holds text at line 1 but a list at line 2",
    ),
    train_case(
        "classification",
        "json-malformed",
        "t.json",
        '[{"text": "a",\n "label": }]',
        "{data}/t.json line 2: not valid JSON",
    ),
    train_case(
        "classification",
        "json-not-records",
        "t.json",
        '{"rows": 3}',
        "{data}/t.json: expected a JSON array of records",
    ),
    train_case(
        "classification",
        "unknown-format",
        "t.parquet",
        "zzz",
        "{data}/t.parquet: unknown format '.parquet'; expected .csv, .tsv, .json, .jsonl or a folder",
    ),
    cls(
        "missing-file", {}, ["--train_file", "{data}/nope.csv"], "--train_file {data}/nope.csv: no such file"
    ),
    cls("unknown-encoding", {}, ["--encoding", "klingon"], "--encoding 'klingon': unknown text encoding"),
    cls("bad-delimiter", {}, ["--delimiter", ";;"], "--delimiter must be one character, 'tab' or 'auto'"),
    # ---- classification: rows and labels ----
    train_case(
        "classification",
        "empty-text",
        "t.csv",
        "text,label\ngood,pos\n ,neg\n",
        "{data}/t.csv line 3: column 'text' is empty; every row needs text",
    ),
    train_case(
        "classification",
        "empty-label",
        "t.csv",
        "text,label\ngood,pos\nbad,\n",
        "{data}/t.csv line 3: column 'label' is empty; every row needs a label",
    ),
    train_case(
        "classification",
        "single-class",
        "t.csv",
        "text,label\ngood,pos\nfine,pos\n",
        "holds a single label ['pos']; classification needs at least two",
    ),
    train_case(
        "classification",
        "regression-not-a-number",
        "t.csv",
        "text,label\ngood,0.5\nbad,lots\n",
        "{data}/t.csv line 3: column 'label' expected a number, found 'lots'",
        "--problem_type",
        "regression",
    ),
    cls(
        "eval-label-unseen-in-training",
        {"dev.csv": "text,label\ngood,pos\nmeh,neutral\n"},
        ["--validation_file", "{data}/dev.csv"],
        "{data}/dev.csv line 3: label 'neutral' never appears in the training data (known labels: neg, pos)",
    ),
    cls(
        "evaluate-label-unseen-in-training",
        {"dev.csv": "text,label\ngood,pos\nmeh,neutral\n"},
        ["--model_name_or_path", "{cls_run}", "--validation_file", "{data}/dev.csv"],
        "{data}/dev.csv line 3: label 'neutral' never appears in the training data",
        action="evaluate",
        defaults=False,
    ),
    cls(
        "class-weights-count",
        {},
        ["--class_weights", "1,2,3"],
        "--class_weights: 3 weights given for 2 labels",
    ),
    cls("problem-type-unknown", {}, ["--problem_type", "ranking"], "--problem_type must be one of"),
    predict_case(
        "predict-missing-text-column",
        "{cls_run}",
        {"in.jsonl": jsonl({"sentence": "hi"})},
        "{data}/in.jsonl: no text column 'text'; found columns ['sentence']",
    ),
    predict_case(
        "predict-empty-text",
        "{cls_run}",
        {"in.jsonl": jsonl({"text": "hi"}, {"text": ""})},
        "{data}/in.jsonl line 2: column 'text' is empty",
    ),
    predict_case(
        "predict-output-exists",
        "{cls_run}",
        {"in.jsonl": jsonl({"text": "hi"}), "p.jsonl": "keep me\n"},
        "--output_file {data}/p.jsonl already exists; choose another or pass --overwrite_output",
        output="{data}/p.jsonl",
    ),
    predict_case(
        "predict-output-is-input",
        "{cls_run}",
        {"in.jsonl": jsonl({"text": "hi"})},
        "--output_file must differ from --input_file (input files are never modified)",
        "--overwrite_output",
        output="{data}/in.jsonl",
    ),
    # ---- models ----
    cls(
        "model-dir-not-a-model",
        {"notamodel/notes.txt": "hello"},
        ["--model_name_or_path", "{data}/notamodel"],
        "model directory '{data}/notamodel' is not a model: expected config.json and weights, found notes.txt",
    ),
    cls(
        "model-path-missing",
        {},
        ["--model_name_or_path", "./no/such/model"],
        "model './no/such/model': no such directory",
    ),
    cls(
        "evaluate-a-plain-encoder",
        {"dev.csv": TRAIN_CSV},
        ["--model_name_or_path", "{model}", "--validation_file", "{data}/dev.csv"],
        "{model}: not a model saved by encoder-tasks (no encoder_tasks.json found)",
        action="evaluate",
        defaults=False,
    ),
    predict_case(
        "run-with-damaged-metadata",
        "{broken_run}",
        {"in.jsonl": jsonl({"text": "hi"})},
        "{broken_run}/encoder_tasks.json: not readable as JSON",
    ),
    predict_case(
        "run-without-weights",
        "{unfinished_run}",
        {"in.jsonl": jsonl({"text": "hi"})},
        "{unfinished_run}: no model.safetensors; the run did not finish saving",
    ),
    Case(
        "evaluate-with-the-wrong-task",
        "ner",
        "evaluate",
        {"dev.conll": CONLL},
        ["--model_name_or_path", "{cls_run}", "--validation_file", "{data}/dev.conll"],
        "holds a 'classification' model; use `encoder-tasks classification evaluate`",
        defaults=False,
    ),
    # ---- recipes and flags ----
    cls(
        "recipe-unknown-key",
        {"r.yaml": "learnin_rate: 0.1\n"},
        ["--config", "{data}/r.yaml"],
        "{data}/r.yaml: unknown key 'learnin_rate' (did you mean 'learning_rate'?)",
    ),
    cls(
        "recipe-wrong-type",
        {"r.yaml": "num_train_epochs: many\n"},
        ["--config", "{data}/r.yaml"],
        "{data}/r.yaml: key 'num_train_epochs' expects float, found 'many'",
    ),
    cls(
        "recipe-list-for-a-value",
        {"r.yaml": "max_length: [1, 2]\n"},
        ["--config", "{data}/r.yaml"],
        "{data}/r.yaml: key 'max_length' expects a single int",
    ),
    cls(
        "recipe-not-yaml",
        {"r.yaml": "a: [\n"},
        ["--config", "{data}/r.yaml"],
        "recipe {data}/r.yaml line 2, column 1: not valid YAML",
    ),
    cls(
        "recipe-not-a-mapping",
        {"r.yaml": "- a\n- b\n"},
        ["--config", "{data}/r.yaml"],
        "recipe {data}/r.yaml: expected a mapping of field: value, found list",
    ),
    cls("recipe-missing", {}, ["--config", "{data}/none.yaml"], "recipe {data}/none.yaml: no such file"),
    cls(
        "unknown-flag",
        {},
        ["--learnin_rate", "0.1"],
        "unknown flag --learnin_rate (did you mean --learning_rate?)",
    ),
    cls(
        "flag-wrong-type",
        {},
        ["--num_train_epochs", "many"],
        "argument --num_train_epochs/--num-train-epochs: invalid float value: 'many'",
    ),
    # ---- output directory ----
    cls(
        "output-dir-holds-a-run",
        {"out/metrics.json": "{}"},
        ["--output_dir", "{data}/out"],
        "--output_dir {data}/out already holds a run (metrics.json); choose another --output_dir, pass --resume",
    ),
    cls(
        "output-dir-is-a-file",
        {"out": "x"},
        ["--output_dir", "{data}/out"],
        "--output_dir {data}/out: exists and is a file, not a directory",
    ),
    cls(
        "resume-without-checkpoint",
        {"out/metrics.json": "{}"},
        ["--output_dir", "{data}/out", "--resume"],
        "--resume: no complete checkpoint-* folder in {data}/out",
    ),
    # ---- ner: CoNLL and token lists ----
    train_case(
        "ner",
        "conll-tag-missing-on-line",
        "t.conll",
        "john\tB-PER\nlives\nin\tO\n",
        "{data}/t.conll line 2: expected 2 columns like the first token line, found 1",
    ),
    train_case("ner", "conll-empty-file", "t.conll", "\n\n", "{data}/t.conll: the file is empty"),
    train_case("ner", "conll-no-sentences", "t.conll", "-DOCSTART- O\n\n", "{data}/t.conll: no sentences"),
    train_case(
        "ner",
        "conll-not-utf8",
        "t.conll",
        b"caf\xe9\tO\n",
        "{data}/t.conll line 1, column 4: byte 0xe9 is not valid utf-8",
    ),
    train_case(
        "ner", "unknown-tag-scheme", "t.conll", CONLL, "unknown tag scheme 'xyz'", "--tag_scheme", "xyz"
    ),
    train_case(
        "ner",
        "tags-break-the-scheme",
        "t.conll",
        "john\tB-PER\nlives\tI-LOC\n\nmary\tB-PER\n",
        "--invalid_tags repair",
        "--tag_scheme",
        "iob2",
    ),
    train_case(
        "ner",
        "token-tag-count-mismatch",
        "t.jsonl",
        jsonl(
            {"tokens": ["a", "b"], "tags": ["B-PER", "O"]},
            {"tokens": ["a", "b", "c"], "tags": ["O", "O"]},
        ),
        "{data}/t.jsonl line 2: 3 tokens but 2 tags; every token needs one tag",
    ),
    train_case(
        "ner",
        "ner-empty-sentence",
        "t.jsonl",
        jsonl({"tokens": ["a"], "tags": ["B-PER"]}, {"tokens": [], "tags": []}),
        "{data}/t.jsonl line 2: column 'tokens' holds an empty sentence",
    ),
    train_case(
        "ner",
        "ner-tokens-not-a-list",
        "t.jsonl",
        jsonl({"tokens": "john lives", "tags": ["B-PER", "O"]}),
        "{data}/t.jsonl line 1: column 'tokens' must hold a list of tokens, found str",
    ),
    train_case(
        "ner",
        "ner-missing-tags-column",
        "t.jsonl",
        jsonl({"tokens": ["a"], "annotation": ["O"]}),
        "{data}/t.jsonl: no tags column 'tags|ner_tags|labels'; found columns ['tokens', 'annotation']. Pass --tags_column",
    ),
    # ---- qa: SQuAD JSON ----
    train_case(
        "qa",
        "squad-answer-not-at-offset",
        "t.json",
        squad(answer_text="paris", answer_start=3),
        "answers do not match the context at answer_start",
        "--answer_check",
        "error",
    ),
    train_case(
        "qa",
        "squad-answer-not-in-context",
        "t.json",
        squad(answer_text="boston", answer_start=0),
        "q1",
        "--answer_check",
        "error",
    ),
    train_case(
        "qa",
        "squad-not-squad",
        "t.json",
        '{"data": [{"title": "x"}]}',
        "{data}/t.json: no question column 'question'; found columns ['title']. Pass --question_column",
    ),
    train_case(
        "qa",
        "squad-answer-start-not-int",
        "t.json",
        squad(answer_start="zero"),
        "answer_start must be an integer, found 'zero'",
    ),
    train_case(
        "qa",
        "squad-empty-question",
        "t.json",
        squad(question="  "),
        "(id q1): column 'question' must be non-empty text",
    ),
    train_case(
        "qa", "squad-malformed-json", "t.json", '{"data": [\n', "{data}/t.json line 2: not valid JSON"
    ),
    # ---- mlm: raw text corpora ----
    train_case("mlm", "mlm-empty-corpus", "c.txt", "\n \n", "{data}/c.txt: the file is empty"),
    train_case(
        "mlm",
        "mlm-corpus-not-utf8",
        "c.txt",
        b"the cat\nsat on the m\xe4t\n",
        "{data}/c.txt line 2, column 13: byte 0xe4 is not valid utf-8",
    ),
    train_case(
        "mlm",
        "mlm-corpus-wrong-encoding",
        "c.txt",
        b"the cat sat\n",
        "{data}/c.txt: not valid utf-16",
        "--encoding",
        "utf-16",
    ),
    train_case(
        "mlm",
        "mlm-jsonl-missing-text-column",
        "c.jsonl",
        jsonl({"body": "the cat sat"}),
        "no text column 'text'",
    ),
    train_case(
        "mlm",
        "mlm-text-not-a-string",
        "c.jsonl",
        jsonl({"text": "the cat"}, {"text": 5}),
        "{data}/c.jsonl: column 'text' holds text at line 1 but a number at line 2",
    ),
    train_case(
        "mlm",
        "mlm-mask-rate-out-of-range",
        "c.txt",
        "the cat sat\n",
        "--mask_rate must be in (0, 1), found 1.5",
        "--mask_rate",
        "1.5",
    ),
    # ---- pair (cross-encoder) ----
    train_case(
        "pair",
        "pair-missing-second-text",
        "p.tsv",
        "sentence1\tscore\na b\t1.0\nc d\t2.0\n",
        "{data}/p.tsv: no text_pair column 'sentence2'; found columns ['sentence1', 'score']",
        *PAIR_COLUMNS,
    ),
    train_case(
        "pair",
        "pair-empty-second-text",
        "p.tsv",
        "sentence1\tsentence2\tscore\na b\tc d\t1.5\ne f\t \t2.5\n",
        "{data}/p.tsv line 3: column 'sentence2' is empty; every row needs text",
        *PAIR_COLUMNS,
    ),
    train_case(
        "pair",
        "pair-score-not-a-number",
        "p.tsv",
        "sentence1\tsentence2\tscore\na b\tc d\t1.5\ne f\tg h\thigh\n",
        "{data}/p.tsv line 3: column 'score' expected a number, found 'high'",
        *PAIR_COLUMNS,
        "--problem_type",
        "regression",
    ),
    # ---- embedding (bi-encoder) ----
    train_case(
        "embedding",
        "embedding-missing-positive-column",
        "e.tsv",
        "anchor\tother\na b\tc d\n",
        "{data}/e.tsv: no text_pair column",
    ),
    train_case(
        "embedding",
        "embedding-score-not-a-number",
        "e.tsv",
        "sentence1\tsentence2\tscore\na b\tc d\t4.5\ne f\tg h\tn/a\n",
        "{data}/e.tsv line 3: column 'score' expected a number, found 'n/a'",
    ),
    train_case(
        "embedding",
        "embedding-unknown-loss",
        "e.tsv",
        "sentence1\tsentence2\na b\tc d\n",
        "--loss must be one of",
        "--loss",
        "triplet-ish",
    ),
    train_case(
        "embedding",
        "embedding-missing-negative-column",
        "e.tsv",
        "sentence1\tsentence2\na b\tc d\n",
        "{data}/e.tsv: no negative column 'hard'; found columns ['sentence1', 'sentence2']. Pass --negative_columns",
        "--negative_columns",
        "hard",
    ),
]


@pytest.fixture(scope="module")
def runs(tiny_bert, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    data = write(root / "train.csv", TRAIN_CSV)
    cls_run = root / "cls"
    assert main(train_argv("classification", tiny_bert, data, cls_run, *FAST["train"])) == 0
    broken = root / "broken"
    shutil.copytree(cls_run, broken)
    (broken / "encoder_tasks.json").write_text("{not json")
    unfinished = root / "unfinished"
    shutil.copytree(cls_run, unfinished)
    (unfinished / "model.safetensors").unlink()
    return {
        "model": tiny_bert,
        "cls_run": str(cls_run),
        "broken_run": str(broken),
        "unfinished_run": str(unfinished),
    }


def _digest(root: Path) -> dict:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _prepare(case: Case, tmp_path: Path, runs: dict) -> tuple[list[str], str, Path]:
    data = tmp_path / "data"
    data.mkdir()
    for name, content in case.files.items():
        write(data / name, content)
    names = {"data": str(data), "out": str(tmp_path / "out"), **runs}
    flags = [flag.format(**names) for flag in case.flags]
    argv = [case.task, case.action, *flags]
    if case.defaults and case.action in ("train", "evaluate"):
        if "--model_name_or_path" not in flags:
            argv += ["--model_name_or_path", runs["model"]]
        if "--output_dir" not in flags:
            argv += ["--output_dir", str(tmp_path / "out")]
    argv += FAST[case.action]
    return argv, case.expected.format(**names), data


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_one_line(case, runs, tmp_path, capsys, monkeypatch):
    if case.task not in TASKS:
        pytest.skip(f"task {case.task} is not registered")
    monkeypatch.chdir(tmp_path)
    argv, expected, data = _prepare(case, tmp_path, runs)
    before = _digest(data)
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    line = error_line(err)
    assert line.startswith("encoder-tasks: error:") and expected in line, f"expected {expected!r} in {line!r}"
    assert _digest(data) == before, "a data file was modified"


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.id in ("jsonl-malformed-line", "conll-tag-missing-on-line")],
    ids=lambda c: c.id,
)
def test_debug_shows_the_traceback(case, runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv, expected, _ = _prepare(case, tmp_path, runs)
    with pytest.raises(UserError) as info:
        main([*argv, "--debug"])
    assert expected in str(info.value)


def test_ner_tags_unseen_in_training_warn_and_count_as_misses(runs, tmp_path, capsys, caplog):
    """For tagging, an evaluation tag the model never learnt is scored (as a miss), not refused."""
    train = write(tmp_path / "t.conll", CONLL)
    dev = write(tmp_path / "d.conll", "john\tB-PER\nin\tO\nrome\tB-GPE\n")
    assert main(train_argv("ner", runs["model"], train, tmp_path / "o", *FAST["train"], validation=dev)) == 0
    assert "never occur in training" in caplog.text and "GPE" in caplog.text

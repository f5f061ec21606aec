"""The CPU-predict benchmark's own parts (``benchmarks/bench_cpu_predict.py``): the split files it
writes from the published formats, the validation reader, the one metric function every contender
is scored by, contender selection, and the tables and verdicts built from a result dict. No model,
no timing asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from scipy.stats import spearmanr

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import bench_cpu_predict as bench  # noqa: E402


@pytest.fixture
def data(tmp_path):
    """The three published layouts, a few rows each."""
    root = tmp_path / "data"
    (root / "cls" / "sst2").mkdir(parents=True)
    (root / "cls" / "sst2" / "train.tsv").write_text("label\tsentence\n0\tbad film\n1\tgood film\n1\tfine\n")
    (root / "cls" / "sst2" / "dev.tsv").write_text("label\tcontent\n1\ta fine film .\n0\tdull .\n")
    (root / "ner" / "wikiann-en").mkdir(parents=True)
    conll = "en:John B-PER\nen:lives O\nen:in O\nen:Paris B-LOC\n\nen:New B-ORG\nen:Corp I-ORG\n\n"
    for name in ("train", "dev"):
        (root / "ner" / "wikiann-en" / name).write_text(conll)
    (root / "pair" / "stsb").mkdir(parents=True)
    rows = "g\ts\t2012\t0001\t5.000\tA man runs.\tA man is running.\ng\ts\t2012\t0002\t0.5\tA cat.\tRain.\textra\tcols\n"
    for name in ("sts-train.csv", "sts-dev.csv"):
        (root / "pair" / "stsb" / name).write_text(rows)
    return root


def test_splits_are_written_from_the_published_files_and_read_back(data, tmp_path, monkeypatch):
    monkeypatch.setitem(bench.TRAIN, "classification", {"examples": 2, "epochs": 1})
    cls = bench.write_splits("classification", data, tmp_path / "cls")
    assert cls["flags"] == ["--text_column", "sentence", "--label_column", "label"]
    assert len(Path(cls["train"]).read_text().splitlines()) == 2  # the seed-0 subset
    inputs, gold = bench.read_validation("classification", cls["validation"], None)
    assert (inputs, gold) == (["a fine film .", "dull ."], ["1", "0"])

    ner = bench.write_splits("ner", data, tmp_path / "ner")
    words, tags = bench.read_validation("ner", ner["validation"], None)
    pairs = sorted(zip(map(tuple, words), map(tuple, tags)))  # a shuffled sample: order aside
    assert pairs == [
        (("John", "lives", "in", "Paris"), ("B-PER", "O", "O", "B-LOC")),
        (("New", "Corp"), ("B-ORG", "I-ORG")),
    ]

    pair = bench.write_splits("pair", data, tmp_path / "pair")
    inputs, gold = bench.read_validation("pair", pair["validation"], 1)
    assert (inputs, gold) == ([("A man runs.", "A man is running.")], [5.0])
    assert "--problem_type" in pair["flags"]


def test_one_metric_function_scores_every_contender():
    assert bench.score("classification", ["1", "0", "1"], ["1", "1", "1"]) == {
        "accuracy": pytest.approx(2 / 3)
    }
    got = bench.score("pair", [0.1, 0.5, 0.3, 0.9], [1.0, 2.0, 4.0, 3.0])["spearman"]
    assert got == pytest.approx(spearmanr([0.1, 0.5, 0.3, 0.9], [1.0, 2.0, 4.0, 3.0]).statistic)
    gold = [["B-PER", "I-PER", "O"], ["B-LOC"]]
    assert bench.score("ner", gold, gold) == {"f1_strict": 1.0}
    # a prediction cut short counts its missing words as O; an I- without B- is no entity (strict)
    found = bench.score("ner", [["B-PER"], ["I-LOC"]], gold)["f1_strict"]
    assert found == 0.0


def test_contenders_are_chosen_by_name_or_group():
    assert [c.name for c in bench.chosen("peers")] == [c.name for c in bench.CONTENDERS if c.peer]
    assert [c.name for c in bench.chosen("toolkit-int8,pipeline")] == ["pipeline", "toolkit-int8"]
    with pytest.raises(SystemExit, match="unknown contender 'nope'"):
        bench.chosen("nope")
    assert all(c.tasks == ("pair",) for c in bench.CONTENDERS if c.kind == "crossencoder")


def _row(speed, value, metric="f1_strict"):
    return {"inputs_per_s": speed, "metrics": {metric: value}}


def test_targets_compare_with_the_fastest_peer_and_the_fp32_loss():
    rows = {
        "pipeline": _row(20.0, 0.60),
        "ort-fp32": _row(40.0, 0.62),
        "ort-int8": _row(80.0, 0.59),
        "toolkit": _row(50.0, 0.70),
        "toolkit-int8": _row(100.0, 0.69),  # 1.25x the fastest peer, -1.43% against its fp32
        "crossencoder": {"error": "RuntimeError: no"},
    }
    tables = bench.build_tables({"tasks": {"ner": {"contenders": rows}}})
    int8, fp32 = tables["cpu-predict-targets"]["rows"]
    assert int8[2:] == ["ort-int8 80.0; toolkit-int8 100.0", "1.25x", "-1.43%", "not met"]
    assert fp32[2:] == ["ort-fp32 40.0; toolkit 50.0", "1.25x", "", "met"]
    table = tables["cpu-predict"]["rows"]
    names = ["pipeline", "ort-fp32", "ort-int8", "crossencoder", "toolkit", "toolkit-int8"]
    assert [r[1] for r in table] == names  # run order, a failed row with its reason
    assert table[3][-1] == "failed: RuntimeError: no"
    assert table[4][5:8] == ["2.50x", "0.7000", "+16.67%"]


def test_a_failed_row_keeps_its_reason_in_the_table():
    rows = {"pipeline": _row(20.0, 0.8, "accuracy"), "ort-fp32": {"skipped": "onnxruntime is not installed"}}
    table = bench.build_tables({"tasks": {"classification": {"contenders": rows}}})["cpu-predict"]["rows"]
    assert table[1][-1] == "skipped: onnxruntime is not installed"

"""The pure parts of benchmarks/bench_serve_attacks.py: latency summaries, the issue-26 target
checks and the rows and table built from them (no server, no timing)."""

import pytest

from benchmarks.bench_serve_attacks import (
    PROBE_SLACK_MS,
    attacks_table,
    build_row,
    english,
    latency_summary,
    row_targets,
)

BASELINE = {"n": 30, "p50_ms": 10.0, "p99_ms": 20.0, "max_ms": 21.0}
ATTACK = {"reproduction": "1", "request": "sst2: long inputs", "target_seconds": 1.0}


def row(**changes):
    answer = {"status": changes.pop("status", 413), "seconds": changes.pop("seconds", 0.3)}
    answer["statuses"] = changes.pop("statuses", None)
    probes = changes.pop("probes", [(0.0, 0.012, 200), (0.1, 0.015, 200)])
    rss = {"before": 500.0, "after": 510.0, "peak": 700.0} | changes.pop("rss", {})
    return build_row(ATTACK | changes, answer, probes, rss, BASELINE)


def test_latency_summary_matches_brute_force_percentiles():
    seconds = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    summary = latency_summary(seconds)
    assert summary["n"] == 100 and summary["max_ms"] == 100.0
    assert summary["p50_ms"] == pytest.approx(50.5)  # linear between ranks 49 and 50
    assert summary["p99_ms"] == pytest.approx(99.01)
    assert latency_summary([]) == {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}


def test_a_quick_4xx_with_normal_probes_and_memory_back_holds():
    built = row()
    assert built["holds"] == {
        "status_4xx": True,
        "answered_in_time": True,
        "probes_normal": True,
        "rss_returned": True,
        "all": True,
    }
    assert built["rss_ratio"] == 1.02 and built["probe"]["n"] == 2 and built["probe_failures"] == 0


@pytest.mark.parametrize(
    ("changes", "failed"),
    [
        ({"status": 500}, "status_4xx"),
        ({"status": 503}, "status_4xx"),
        ({"status": 200}, "status_4xx"),
        ({"status": None}, "status_4xx"),  # no answer at all
        ({"seconds": 1.2}, "answered_in_time"),
        ({"probes": [(0.0, 0.5, 200)]}, "probes_normal"),  # 500 ms against an unloaded p99 of 20
        ({"probes": [(0.0, 0.01, 0)]}, "probes_normal"),  # a probe without an answer
        ({"probes": [(0.0, 0.01, 503)]}, "probes_normal"),
        ({"rss": {"after": 551.0}}, "rss_returned"),  # 10.2% above
        ({"rss": {"after": None}}, "rss_returned"),
    ],
)
def test_each_target_fails_on_its_own(changes, failed):
    holds = row(**changes)["holds"]
    assert not holds[failed] and not holds["all"]
    assert all(value for name, value in holds.items() if name not in (failed, "all")), holds


def test_the_probe_limit_is_twice_the_unloaded_p99_or_the_slack_above_it():
    just_under = (20.0 + PROBE_SLACK_MS - 0.5) / 1000  # 2 x 20 = 40 ms < 20 + 50 ms: the slack rules
    assert row(probes=[(0.0, just_under, 200)])["holds"]["probes_normal"]
    assert not row(probes=[(0.0, just_under + 0.001, 200)])["holds"]["probes_normal"]
    assert row(probes=[])["holds"]["probes_normal"]  # no probe during it: nothing to fail


def test_slow_clients_hold_only_when_every_connection_got_the_expected_status():
    slow = {"target_seconds": 11.0, "expected_status": 408}
    assert row(statuses={"408": 200}, seconds=10.2, **slow)["holds"]["all"]
    assert not row(statuses={"408": 199, "still open": 1}, seconds=None, **slow)["holds"]["status_4xx"]
    assert not row(statuses={"400": 200}, seconds=10.2, **slow)["holds"]["status_4xx"]
    assert not row(statuses={"408": 200}, seconds=11.5, **slow)["holds"]["answered_in_time"]


def test_the_table_shows_each_row_and_names_what_failed():
    rows = [row(), row(status=500, rss={"after": 900.0})]
    table = attacks_table(rows, {"before": [1.0, 1.0, 1.0], "after": [2.5, 1.0, 1.0]})
    assert len(table["rows"]) == 2 and len(table["columns"]) == len(table["rows"][0])
    assert table["rows"][0][-1] == "yes"
    assert table["rows"][1][-1] == "NO: status_4xx, rss_returned"
    assert table["rows"][0][6] == "500 -> 510 (700)"
    assert "Load average (1 min) 1.00 before, 2.50 after" in table["notes"]


def test_english_is_the_length_asked_for():
    sentences = ["one short line .", "another , longer line of words ."]
    text = english(1000, sentences, 1)
    assert len(text) == 1000 and text.startswith("another")


def test_any_4xx_holds_when_no_status_is_expected_429_included():
    measured = row(status=429)
    assert row_targets(measured, BASELINE)["status_4xx"] and measured["holds"]["all"]
    assert not row_targets(measured | {"expected_status": 408}, BASELINE)["status_4xx"]

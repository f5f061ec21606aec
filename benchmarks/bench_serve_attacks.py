"""Issue 26's reproductions against ``encoder-tasks serve``, measured: each gets its 4xx within a
second while the server keeps answering others at normal latency, and its memory comes back.

    ENCODER_TASKS_DATA_DIR=/work/shared/data .venv/bin/python -m benchmarks.bench_serve_attacks

(about 2-3 minutes once the models exist; the first run trains the classification model, ~1
minute more). One server process on 127.0.0.1 (a free port) at its defaults, serving five models:

- ``sst2``: MiniLM-L6 fine-tuned on 64 SST-2 sentences, ``--max_length 512``
  (:func:`benchmarks.bench_serve.trained_model`, the load test's model, shared under ``--work``):
  reproduction 1 is about the real 6-layer model's cost of a long text;
- ``ner``, ``qa``, ``mlm``, ``emb``: the test suite's tiny trained runs
  (:func:`tests.runs.build_task_runs` on :func:`encoder_tasks.testing.make_tiny_model`; this
  benchmark imports ``tests.runs`` for them), built once under ``--work``. Their reproductions
  are refused before any model work, so the model's size does not change what is measured.

Reproductions (the issue's numbering; each row is one request, or one batch of connections):

1. 256 inputs x 20,000 characters (English: SST-2 sentences run together) to ``sst2``;
2. NER ``window_stride`` 512 (>= ``max_length``) on an 800-word text; MLM ``top_k`` 30522 on
   2 inputs x 100 ``[MASK]``;
3. a lone surrogate (``\\ud800``, valid JSON) in a text, a field name, a parameter name and a QA
   ``id`` on the predict route, and in the texts of ``/v1/embeddings``, TEI's ``/embed``,
   ``/rerank`` and ``/predict``;
4. the bad parameter values the issue lists (strides, ``max_length`` 8, ``top_k`` 0/-1,
   ``max_answer_length`` 0/-3, ``null_threshold`` NaN/Infinity, MLM ``top_k`` 0);
5. a chunked body of up to 300 MB (16 KiB chunks; sending stops when the server answers);
7. ``--slow_connections`` (200) connections that never finish their headers, and as many whose
   body is shorter than its ``Content-Length``: their answer is due at ``--header_timeout`` and
   ``--body_timeout`` (the server's defaults, 10 s and 30 s), so their answer target is that
   timeout + 1 s, not 1 s.

For each, in turn: the server's RSS (``/proc/PID/status`` ``VmRSS``) before; the attack sent and
timed to its answer (status, seconds); RSS sampled every 10 ms until ``--settle`` seconds after
the answer (the peak), then read again (after). Throughout, a probe thread sends a normal
one-sentence classification request every ``--probe_interval`` (0.1 s) on a connection of its
own; the probes sent from the attack's start until its settle ends are its "during" latencies,
set against ``--baseline_seconds`` of probes before any attack (unloaded).

Targets per row (:func:`row_targets`): the status is a 4xx (429 included; 408 for the slow
clients); the answer came within its target seconds; the probes during it all got 200 with a
p99 within ``PROBE_FACTOR`` (2x) the unloaded p99 (or ``PROBE_SLACK_MS`` above it: a 2-core
machine's scheduling noise on a ~20 ms probe); RSS after within 10% of before. The result file
``benchmarks/results/serve-attacks-<time>.json`` holds the command, the environment (CPU flags),
the load average before and after, the server's flags, every row and the table ``attacks``.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import random
import select
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from benchmarks.bench_serve import SST2_DEV, percentile, trained_model
from benchmarks.common import DATA, print_table, require_data, save_results, worker_env
from benchmarks.harness import invocation
from benchmarks.serve_baselines import ServerProcess, free_port, toolkit_command

#: Probes during an attack: p99 within this factor of the unloaded p99, or this many ms above it.
PROBE_FACTOR, PROBE_SLACK_MS = 2.0, 50.0
#: RSS after the attack within this ratio of before.
RSS_RATIO = 1.10
#: An answer within this many seconds (the slow clients: their timeout + this).
ANSWER_SECONDS = 1.0
PREDICT = "/v1/models/{}/predict"
JSON_HEADERS = {"content-type": "application/json"}
PROBE_BODY = json.dumps({"inputs": [{"text": "a gripping , funny and moving film ."}]}).encode()
TINY_TASKS = {"ner": "ner", "qa": "qa", "mlm": "mlm", "emb": "embedding"}


# ---- pure parts: summaries, targets, rows (tests/unit/test_bench_serve_attacks.py) -----------------
def latency_summary(seconds: list[float]) -> dict:
    """``{"n", "p50_ms", "p99_ms", "max_ms"}`` of latencies in seconds (None when there are none).

    Example:
        >>> latency_summary([0.01, 0.02, 0.03])
        {'n': 3, 'p50_ms': 20.0, 'p99_ms': 29.8, 'max_ms': 30.0}
    """

    def ms(value):
        return None if value is None else round(value * 1000, 3)

    return {
        "n": len(seconds),
        "p50_ms": ms(percentile(seconds, 50)),
        "p99_ms": ms(percentile(seconds, 99)),
        "max_ms": ms(max(seconds, default=None)),
    }


def row_targets(row: dict, baseline: dict) -> dict:
    """Whether each of the issue's targets holds for one measured ``row`` (``baseline``: the
    unloaded probes' :func:`latency_summary`): ``status_4xx``, ``answered_in_time``,
    ``probes_normal``, ``rss_returned``, and ``all`` of them.

    A probe check with no probe during the row (an attack shorter than the probe interval and
    its settle) cannot fail; a row without an RSS reading fails ``rss_returned``.

    Example:
        >>> row = {"status": 413, "statuses": None, "seconds": 0.4, "target_seconds": 1.0,
        ...        "probe": {"n": 12, "p50_ms": 20.0, "p99_ms": 40.0, "max_ms": 41.0}, "probe_failures": 0,
        ...        "rss_before_mib": 500.0, "rss_after_mib": 520.0}
        >>> row_targets(row, {"n": 30, "p50_ms": 18.0, "p99_ms": 30.0, "max_ms": 31.0})
        {'status_4xx': True, 'answered_in_time': True, 'probes_normal': True, 'rss_returned': True, 'all': True}
    """
    statuses = row.get("statuses") or {str(row["status"]): 1}
    expected = row.get("expected_status")
    status_ok = all(
        status.isdigit() and 400 <= int(status) < 500 and (expected is None or int(status) == expected)
        for status in statuses
    )
    in_time = row["seconds"] is not None and row["seconds"] <= row["target_seconds"]
    probe, reference = row["probe"], baseline.get("p99_ms")
    if not probe["n"] or reference is None:
        probes_ok = row.get("probe_failures", 0) == 0
    else:
        limit = max(PROBE_FACTOR * reference, reference + PROBE_SLACK_MS)
        probes_ok = row.get("probe_failures", 0) == 0 and probe["p99_ms"] <= limit
    before, after = row.get("rss_before_mib"), row.get("rss_after_mib")
    rss_ok = before is not None and after is not None and after <= RSS_RATIO * before
    checks = {
        "status_4xx": status_ok,
        "answered_in_time": in_time,
        "probes_normal": probes_ok,
        "rss_returned": rss_ok,
    }
    return {**checks, "all": all(checks.values())}


def build_row(
    attack: dict, answer: dict, probes: list[tuple[float, float, int]], rss: dict, baseline: dict
) -> dict:
    """One result row: the attack's name and target, its ``answer`` (status or statuses, seconds,
    detail), the probes sent meanwhile (``(start, seconds, status)``), the RSS readings (MiB:
    before, after, peak) and :func:`row_targets`.

    Example:
        >>> row = build_row({"reproduction": "4", "request": "qa top_k 0", "target_seconds": 1.0},
        ...                 {"status": 400, "seconds": 0.01}, [(0.0, 0.02, 200)],
        ...                 {"before": 500.0, "after": 501.0, "peak": 502.0},
        ...                 {"n": 30, "p50_ms": 18.0, "p99_ms": 30.0, "max_ms": 31.0})
        >>> row["probe"]["p50_ms"], row["rss_ratio"], row["holds"]["all"]
        (20.0, 1.002, True)
    """
    good = [seconds for _, seconds, status in probes if status == 200]
    before, after = rss.get("before"), rss.get("after")
    row = {
        "reproduction": attack["reproduction"],
        "request": attack["request"],
        "expected_status": attack.get("expected_status"),
        "status": answer.get("status"),
        "statuses": answer.get("statuses"),
        "seconds": None if answer.get("seconds") is None else round(answer["seconds"], 4),
        "target_seconds": attack["target_seconds"],
        "detail": answer.get("detail"),
        "probe": latency_summary(good),
        "probe_failures": len(probes) - len(good),
        "probe_baseline": baseline,
        "rss_before_mib": before,
        "rss_after_mib": after,
        "rss_peak_mib": rss.get("peak"),
        "rss_ratio": round(after / before, 3) if before and after else None,
    }
    row["holds"] = row_targets(row, baseline)
    return row


def attacks_table(rows: list[dict], load: dict) -> dict:
    """The ``attacks`` table of the result file (docs/serving.md cites it)."""

    def num(value, digits=1):
        return "-" if value is None else f"{value:.{digits}f}"

    def status(row):
        if row["statuses"]:
            return ", ".join(f"{count} x {code}" for code, count in sorted(row["statuses"].items()))
        return str(row["status"])

    table_rows = []
    for row in rows:
        probe, base = row["probe"], row["probe_baseline"]
        table_rows.append(
            [
                row["reproduction"],
                row["request"],
                status(row),
                f"{num(row['seconds'], 3)} (<= {row['target_seconds']:g})",
                f"{num(probe['p50_ms'])} / {num(probe['p99_ms'])} ({probe['n']})",
                f"{num(base['p50_ms'])} / {num(base['p99_ms'])}",
                f"{num(row['rss_before_mib'], 0)} -> {num(row['rss_after_mib'], 0)} ({num(row['rss_peak_mib'], 0)})",
                "yes"
                if row["holds"]["all"]
                else "NO: " + ", ".join(k for k, v in row["holds"].items() if not v and k != "all"),
            ]
        )
    return {
        "columns": [
            "#",
            "request",
            "status",
            "answer s (target)",
            "probe p50 / p99 ms during (n)",
            "probe unloaded p50 / p99",
            "RSS MiB before -> after (peak)",
            "targets hold",
        ],
        "rows": table_rows,
        "notes": (
            f"One `encoder-tasks serve` at its defaults on 127.0.0.1; a probe (one sentence to the MiniLM "
            f"classifier) every 0.1 s throughout. Targets: a 4xx within its target seconds, probes during the "
            f"attack all 200 with p99 within {PROBE_FACTOR:g}x the unloaded p99 (or +{PROBE_SLACK_MS:g} ms), "
            f"RSS after within {RSS_RATIO - 1:.0%} of before. Load average (1 min) {load['before'][0]:.2f} "
            f"before, {load['after'][0]:.2f} after, on {os.cpu_count()} cores."
        ),
    }


# ---- measuring: RSS, probes, one request ----------------------------------------------------------
def rss_mib(pid: int) -> float | None:
    """The process's resident memory now (Linux ``VmRSS``), or None where it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class RssPeak(threading.Thread):
    """The highest ``VmRSS`` of ``pid`` while running (sampled every ``interval`` s)."""

    def __init__(self, pid: int, interval: float = 0.01):
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak, self._stop_event = pid, interval, None, threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            value = rss_mib(self.pid)
            if value is not None and (self.peak is None or value > self.peak):
                self.peak = value
            self._stop_event.wait(self.interval)

    def stop(self) -> float | None:
        self._stop_event.set()
        self.join()
        return self.peak


class Probe(threading.Thread):
    """A normal request every ``interval`` s on its own keep-alive connection: ``(start, seconds,
    status)`` each (status 0: no answer), started at ``time.monotonic()``."""

    def __init__(self, port: int, interval: float = 0.1, timeout: float = 60.0):
        super().__init__(daemon=True)
        self.port, self.interval, self.timeout = port, interval, timeout
        self.samples: list[tuple[float, float, int]] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        connection = None
        while not self._stop_event.is_set():
            begin = time.monotonic()
            try:
                connection = connection or http.client.HTTPConnection(
                    "127.0.0.1", self.port, timeout=self.timeout
                )
                connection.request("POST", PREDICT.format("sst2"), PROBE_BODY, JSON_HEADERS)
                response = connection.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                status = 0
                connection = None
            self.samples.append((begin, time.monotonic() - begin, status))
            self._stop_event.wait(max(0.0, self.interval - (time.monotonic() - begin)))

    def between(self, start: float, end: float) -> list[tuple[float, float, int]]:
        return [s for s in list(self.samples) if start <= s[0] <= end]

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def post(port: int, path: str, body: bytes, timeout: float = 120.0) -> dict:
    """One request on a fresh connection: ``{"status", "seconds", "detail"}`` (the error message)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    begin = time.monotonic()
    try:
        connection.request("POST", path, body, JSON_HEADERS)
        response = connection.getresponse()
        data = response.read()
        seconds = time.monotonic() - begin
    finally:
        connection.close()
    return {"status": response.status, "seconds": seconds, "detail": _message(data), "bytes": len(body)}


def request_line(model: str) -> bytes:
    """The start of a predict request: its request line and ``Host`` header."""
    return f"POST {PREDICT.format(model)} HTTP/1.1\r\nHost: x\r\n".encode()


def _message(data: bytes) -> str:
    try:
        error = json.loads(data).get("error")
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")
    message = error.get("message") if isinstance(error, dict) else error
    return str(message)[:200]


def chunked_body(port: int, total: int = 300 * 2**20, chunk_size: int = 16384) -> dict:
    """Reproduction 5: a chunked body of up to ``total`` bytes, sending stopped once answered."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    begin = time.monotonic()
    sent, data = 0, b""
    try:
        sock.sendall(
            request_line("sst2") + b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        chunk = b"%x\r\n%s\r\n" % (chunk_size, b"a" * chunk_size)
        while sent < total:
            ready, _, _ = select.select([sock], [], [], 0)
            if ready:
                break
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += chunk_size
        data = _read_until_closed(sock, begin + 60)
        seconds = _answered_at.get(id(sock), time.monotonic()) - begin
    finally:
        _answered_at.pop(id(sock), None)
        sock.close()
    status = _status(data)
    return {
        "status": status,
        "seconds": seconds,
        "detail": _message(data.split(b"\r\n\r\n", 1)[-1]),
        "bytes": sent,
    }


_answered_at: dict[int, float] = {}


def _read_until_closed(sock: socket.socket, deadline: float) -> bytes:
    """What the server sends until it closes (or ``deadline``); the first byte's time is kept in
    ``_answered_at``."""
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sock], [], [], 0.05)
        if not ready:
            continue
        try:
            part = sock.recv(65536)
        except (ConnectionResetError, OSError):
            break
        if not part:
            break
        if not data:
            _answered_at[id(sock)] = time.monotonic()
        data += part
    return data


def _status(data: bytes) -> int | None:
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def slow_clients(port: int, start: bytes, count: int, within: float) -> dict:
    """Reproduction 7: ``count`` connections that send ``start`` and nothing more; each one's
    status and the seconds until the server answered and closed it (``within`` s at most)."""
    begin = time.monotonic()
    socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]
    for sock in socks:
        sock.sendall(start)
    opened = time.monotonic() - begin
    pending = {sock: b"" for sock in socks}
    closed_after: dict[socket.socket, tuple[float, int | None]] = {}
    deadline = begin + within
    try:
        while pending and time.monotonic() < deadline:
            ready, _, _ = select.select(list(pending), [], [], 0.1)
            for sock in ready:
                try:
                    part = sock.recv(65536)
                except (ConnectionResetError, OSError):
                    part = b""
                if part:
                    pending[sock] += part
                else:
                    closed_after[sock] = (time.monotonic() - begin, _status(pending.pop(sock)))
    finally:
        for sock in socks:
            sock.close()
    statuses = collections.Counter(
        str(status) if status is not None else "none" for _, status in closed_after.values()
    )
    if pending:
        statuses["still open"] += len(pending)
    seconds = max((at for at, _ in closed_after.values()), default=None) if not pending else None
    return {
        "status": statuses.most_common(1)[0][0],
        "statuses": dict(statuses),
        "seconds": seconds,
        "detail": f"{count} connections opened in {opened:.2f}s; the last closed after "
        f"{'-' if seconds is None else f'{seconds:.2f}'}s",
    }


# ---- the reproductions ---------------------------------------------------------------------------
def english(length: int, sentences: list[str], offset: int) -> str:
    """``length`` characters of SST-2 sentences run together, starting at sentence ``offset``."""
    parts, size, index = [], 0, offset
    while size <= length:  # size: the joined length + 1
        sentence = sentences[index % len(sentences)]
        parts.append(sentence)
        size += len(sentence) + 1
        index += 1
    text = " ".join(parts)[:length]
    return text[:-1] + "." if text.endswith(" ") else text  # exactly ``length``, no trailing space


def reproductions(sentences: list[str], options: dict, slow_count: int) -> list[dict]:
    """Every attack: ``{"reproduction", "request", "target_seconds", "send": port -> answer}``."""
    rng = random.Random(0)

    def predict(model: str, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return lambda port: post(port, PREDICT.format(model), data)

    def raw(path: str, text: str):
        return lambda port: post(port, path, text.encode())

    def attack(reproduction, request, send, target=ANSWER_SECONDS, expected=None):
        return {
            "reproduction": reproduction,
            "request": request,
            "send": send,
            "target_seconds": target,
            "expected_status": expected,
        }

    long_inputs = [{"text": english(20_000, sentences, 37 * i)} for i in range(256)]
    words = " ".join(
        rng.choice(["john", "lives", "in", "paris", "and", "works", "at", "acme"]) for _ in range(800)
    )
    masks = " ".join(["the [MASK] sat"] * 100)
    qa = {"question": "who lives in paris ?", "context": "john smith lives in paris ."}
    qa_text = '"question": "who?", "context": "ann lives here"'
    found = [
        attack("1", "sst2: 256 inputs x 20,000 characters (5 MB)", predict("sst2", {"inputs": long_inputs})),
        attack(
            "2",
            "ner: window_stride 512 (>= max_length), 800 words",
            predict("ner", {"inputs": [{"text": words}], "parameters": {"window_stride": 512}}),
        ),
        attack(
            "2",
            "mlm: top_k 30522 on 2 x 100 [MASK]",
            predict("mlm", {"inputs": [{"text": masks}] * 2, "parameters": {"top_k": 30522}}),
        ),
    ]
    for request, path, text in [
        ("predict sst2: in a text", PREDICT.format("sst2"), r'{"inputs": [{"text": "a \ud800"}]}'),
        ("predict sst2: in a field name", PREDICT.format("sst2"), r'{"inputs": [{"te\udc00xt": "a"}]}'),
        (
            "predict sst2: in a parameter name",
            PREDICT.format("sst2"),
            r'{"inputs": [{"text": "a"}], "parameters": {"\ud800": 1}}',
        ),
        ("predict qa: in an id", PREDICT.format("qa"), '{"inputs": [{"id": "q\\ud800", ' + qa_text + "}]}"),
        ("predict ner: in a text", PREDICT.format("ner"), r'{"inputs": [{"text": "a \ud800"}]}'),
        ("predict mlm: in a text", PREDICT.format("mlm"), r'{"inputs": [{"text": "a \ud800 [MASK]"}]}'),
        ("/v1/embeddings", "/v1/embeddings", r'{"model": "emb", "input": ["ok", "a \ud800"]}'),
        ("TEI /embed", "/embed", r'{"model": "emb", "inputs": "a \ud800"}'),
        ("TEI /rerank", "/rerank", r'{"model": "emb", "query": "q", "texts": ["ok", "a \ud800"]}'),
        ("TEI /predict", "/predict", r'{"model": "sst2", "inputs": "a \ud800"}'),
    ]:
        found.append(attack("3", f"lone surrogate, {request}", raw(path, text)))
    for model, record, parameters in [
        ("ner", {"text": "john lives"}, {"window_stride": -5}),
        ("qa", qa, {"doc_stride": -1}),
        ("qa", qa, {"doc_stride": 400}),
        ("qa", qa, {"max_length": 8}),
        ("qa", qa, {"top_k": 0}),
        ("qa", qa, {"top_k": -1}),
        ("qa", qa, {"max_answer_length": 0}),
        ("qa", qa, {"max_answer_length": -3}),
        ("qa", qa, {"null_threshold": float("nan")}),
        ("qa", qa, {"null_threshold": float("inf")}),
        ("mlm", {"text": "the [MASK] sat"}, {"top_k": 0}),
    ]:
        ((name, value),) = parameters.items()
        # json writes NaN and Infinity as those tokens, which the server's parser reads
        body = json.dumps({"inputs": [record], "parameters": parameters}).encode()
        found.append(attack("4", f"{model}: {name} {json.dumps(value)}", predict(model, body)))
    found.append(attack("5", "chunked body, up to 300 MB", chunked_body))
    header, body = options["header_timeout"], options["body_timeout"]
    start = request_line("sst2")
    found.append(
        attack(
            "7",
            f"{slow_count} connections, headers never finished",
            lambda port: slow_clients(port, start, slow_count, header + 15),
            target=header + ANSWER_SECONDS,
            expected=408,
        )
    )
    short = start + b'content-type: application/json\r\ncontent-length: 100\r\n\r\n{"inputs": '
    found.append(
        attack(
            "7",
            f"{slow_count} connections, body shorter than its Content-Length",
            lambda port: slow_clients(port, short, slow_count, body + 15),
            target=body + ANSWER_SECONDS,
            expected=408,
        )
    )
    return found


def measure(attack: dict, server: ServerProcess, probe: Probe, baseline: dict, settle: float) -> dict:
    """One reproduction: RSS before, the attack timed, probes meanwhile, RSS after ``settle`` s."""
    pid = server.process.pid
    before = rss_mib(pid)
    peak = RssPeak(pid)
    peak.start()
    begin = time.monotonic()
    try:
        answer = attack["send"](server.port)
    except (OSError, http.client.HTTPException) as error:
        answer = {"status": None, "seconds": None, "detail": f"{type(error).__name__}: {error}"}
    time.sleep(settle)
    after = rss_mib(pid)
    highest = peak.stop()
    row = build_row(
        attack,
        answer,
        probe.between(begin, time.monotonic()),
        {"before": before, "after": after, "peak": highest},
        baseline,
    )
    row["bytes_sent"] = answer.get("bytes")
    return row


# ---- the models ----------------------------------------------------------------------------------
def tiny_runs(work: Path) -> dict[str, Path]:
    """The test suite's tiny trained runs (ner, qa, mlm, embedding), built once under ``work``."""
    root = work / "tiny-runs"
    marker = root / "built.json"
    if not marker.is_file():
        from encoder_tasks.testing import make_tiny_model
        from tests.runs import build_task_runs

        print("[attacks] building the tiny task runs ...", flush=True)
        scratch = Path(tempfile.mkdtemp(prefix="tiny-", dir=work))
        runs = build_task_runs(scratch / "runs", make_tiny_model("bert", str(scratch / "bert")))
        if root.exists():
            import shutil

            shutil.rmtree(root)
        scratch.rename(root)
        paths = {task: str(root / run.model_dir.relative_to(scratch)) for task, run in runs.items()}
        marker.write_text(json.dumps(paths, indent=2))
    return {task: Path(path) for task, path in json.loads(marker.read_text()).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "bench-serve"))
    parser.add_argument(
        "--settle", type=float, default=1.5, help="seconds after an answer before RSS is read"
    )
    parser.add_argument("--probe_interval", type=float, default=0.1)
    parser.add_argument("--baseline_seconds", type=float, default=5.0)
    parser.add_argument("--slow_connections", type=int, default=200)
    parser.add_argument("--only", default="", help="comma-separated reproductions to run (default all)")
    parser.add_argument("--precision", default="auto")
    args = parser.parse_args(argv)
    work = Path(args.work)
    require_data(SST2_DEV)
    os.environ.update(worker_env())

    import csv

    with (DATA / SST2_DEV).open(newline="") as handle:
        sentences = [row["content"] for row in csv.DictReader(handle, delimiter="\t")]
    classifier, _, _ = trained_model(work, 64)
    runs = tiny_runs(work)

    from encoder_tasks.serving.app import ServeOptions

    defaults = ServeOptions()
    options = {"header_timeout": defaults.header_timeout, "body_timeout": defaults.body_timeout}
    port = free_port()
    command = toolkit_command("sst2", classifier, port, args.precision, "--log_level", "warning")
    at = command.index(f"sst2={classifier}") + 1
    command[at:at] = [f"{name}={runs[task]}" for name, task in TINY_TASKS.items()]
    attacks = reproductions(sentences, options, args.slow_connections)
    if args.only:
        wanted = set(args.only.split(","))
        attacks = [a for a in attacks if a["reproduction"] in wanted]

    load_before = os.getloadavg()
    rows = []
    started = time.monotonic()
    with ServerProcess(command, port, work / "logs" / "attacks.log", env=worker_env()) as server:
        for _ in range(5):  # warm: the first requests of a fresh process are slower
            post(port, PREDICT.format("sst2"), PROBE_BODY)
        probe = Probe(port, args.probe_interval)
        probe.start()
        time.sleep(args.baseline_seconds)
        baseline_samples = probe.between(0.0, time.monotonic())
        baseline = latency_summary([s for _, s, status in baseline_samples if status == 200])
        print(f"[attacks] unloaded probe: {baseline}", flush=True)
        for attack in attacks:
            row = measure(attack, server, probe, baseline, args.settle)
            rows.append(row)
            print(
                f"[attacks] {row['reproduction']} {row['request']}: {row['statuses'] or row['status']} "
                f"in {row['seconds']}s; probe p99 {row['probe']['p99_ms']} ms; RSS {row['rss_before_mib']:.0f} -> "
                f"{row['rss_after_mib']:.0f} MiB (peak {row['rss_peak_mib']:.0f}); holds {row['holds']['all']}",
                flush=True,
            )
        probe.stop()
        health = urllib.request.urlopen(f"{server.url}/health", timeout=30).status  # still up after them all
    load_after = os.getloadavg()
    load = {"before": list(load_before), "after": list(load_after)}
    held = sum(row["holds"]["all"] for row in rows)
    results = {
        "command": invocation("bench_serve_attacks", argv if argv is not None else sys.argv[1:]),
        "seconds": time.monotonic() - started,
        "load_average": load,
        "server": {
            "command": command[command.index("serve") :],
            "models": {"sst2": "MiniLM-L6 fine-tuned on 64 SST-2 sentences, --max_length 512"}
            | {name: f"tests.runs tiny {task} run" for name, task in TINY_TASKS.items()},
            "defaults": {k: v for k, v in vars(defaults).items() if k != "api_key"},
            "health_after": health,
        },
        "targets": {
            "answer_seconds": ANSWER_SECONDS,
            "probe_factor": PROBE_FACTOR,
            "probe_slack_ms": PROBE_SLACK_MS,
            "rss_ratio": RSS_RATIO,
        },
        "probe_baseline": baseline,
        "rows": [{k: v for k, v in row.items() if k != "probe_baseline"} for row in rows],
        "held": f"{held}/{len(rows)}",
        "tables": {"attacks": attacks_table(rows, load)},
    }
    path = save_results("serve-attacks", results)
    columns = ["reproduction", "request", "status", "seconds", "rss_ratio"]
    print_table([{**r, "status": r["statuses"] or r["status"]} for r in rows], columns)
    print(f"[attacks] targets held on {held}/{len(rows)} rows; load average {load}; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The CPU-inference benchmark's own parts (``benchmarks/bench_cpu_inference.py``): arguments and
contender selection, the peer environments' commands, the STS-B reader, the metric, the worker
loop (with a fake loader), the closed-loop load (against an httpx mock transport) and the tables
built from a result dict. No model, no timing asserted."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import bench_cpu_inference as bench  # noqa: E402
from benchmarks import tables  # noqa: E402


# ---- arguments and selection ----------------------------------------------------------------------
def test_sizes_fill_what_is_not_given():
    quick, full = bench.parse_args(["--size", "quick"]), bench.parse_args([])
    assert (quick.repeats, quick.requests) == (1, 200)
    assert (full.size, full.repeats, full.requests, full.levels) == ("full", 3, 1200, [1, 32])
    given = bench.parse_args(["--size", "quick", "--requests", "7", "--concurrency", "2,4"])
    assert (given.requests, given.levels) == (7, [2, 4])


@pytest.mark.parametrize("value", ["a,b", "0", ""])
def test_bad_concurrency_is_refused_by_name(value, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--concurrency", value])
    assert "--concurrency" in capsys.readouterr().err


def test_select_by_group_and_name_keeps_run_order():
    assert [c.name for c in bench.select("serving")] == [
        "serve-toolkit",
        "serve-toolkit-h11",
        "serve-toolkit-workers2",
        "serve-toolkit-int8",
        "serve-toolkit-int8-workers2",
        "serve-toolkit-threads1",
        "serve-toolkit-int8-threads1",
        "serve-infinity-torch",
        "serve-infinity-torch-bf16",
        "serve-infinity-optimum",
        "serve-infinity-optimum-int8",
    ]
    chosen = [
        c.name for c in bench.select("fastembed,st-fp32,toolkit", "toolkit-int8-onnx,toolkit-int8-openvino")
    ]
    assert chosen == ["st-fp32", "fastembed", "toolkit", "toolkit-onnx", "toolkit-openvino", "toolkit-int8"]
    assert len(bench.select(None)) == len(bench.CONTENDERS)
    assert all(c.group == "peers" for c in bench.select("peers"))


def test_select_refuses_an_unknown_name():
    with pytest.raises(SystemExit, match="--only: unknown contender 'onnx'; known: peers, toolkit"):
        bench.select("onnx")


def test_every_peer_environment_a_contender_names_is_defined():
    assert {c.env for c in bench.CONTENDERS} - {"main"} == set(bench.PEER_ENVS)


# ---- peer environments and commands ---------------------------------------------------------------
def test_venv_commands_create_install_and_remove(tmp_path):
    commands = bench.venv_commands("/usr/bin/python3", tmp_path, "st-openvino", ["a==1", "b[x]==2"])
    python = str(tmp_path / "st-openvino" / "bin" / "python")
    assert commands == [
        ["/usr/bin/python3", "-m", "venv", str(tmp_path / "st-openvino")],
        [python, "-m", "pip", "install", "a==1", "b[x]==2"],
        [python, "-m", "pip", "uninstall", "-y", "torchvision"],
    ]
    assert len(bench.venv_commands("/p", tmp_path, "fastembed", ["fastembed==0.9.1"])) == 2


def test_every_peer_pins_its_versions():
    for name, requirements in bench.PEER_ENVS.items():
        assert requirements and all("==" in r for r in requirements), name


def test_worker_command_runs_this_file_by_path(tmp_path):
    command = bench.worker_command("/v/bin/python", tmp_path / "spec.json")
    assert command == [
        "/v/bin/python",
        str(Path(bench.__file__).resolve()),
        "--worker",
        str(tmp_path / "spec.json"),
    ]


def test_serve_commands():
    toolkit, infinity = bench.BY_NAME["serve-toolkit"], bench.BY_NAME["serve-infinity-optimum"]
    command, ready, route = bench.serve_command(toolkit, "/py", "/m", 8123, 64)
    assert command[:2] == ["/py", "-c"] and command[3:5] == ["serve", "minilm=/m"]
    assert ["--host", "127.0.0.1"] == command[5:7] and "8123" in command
    assert (ready, route) == ("/ready", "/v1/embeddings")
    command, ready, route = bench.serve_command(infinity, "/v/bin/python", ".", 8124, 64)
    assert command[:2] == ["/v/bin/infinity_emb", "v2"]
    pairs = dict(zip(command[2::2], command[3::2]))
    assert pairs["--engine"] == "optimum" and pairs["--host"] == "127.0.0.1" and pairs["--batch-size"] == "64"
    assert "--no-vector-disk-cache" in command
    assert command[-2:] == ["--pooling-method", "mean"]  # the optimum engine pools [CLS] at "auto"
    torch_engine, _, _ = bench.serve_command(
        bench.BY_NAME["serve-infinity-torch"], "/v/bin/python", "/m", 1, 64
    )
    assert "--pooling-method" not in torch_engine
    assert (ready, route) == ("/health", "/embeddings")


def test_native_bf16_from_flags():
    assert bench.native_bf16(["avx2", "avx512_bf16"]) and bench.native_bf16(["amx_bf16"])
    assert not bench.native_bf16(["avx2", "avx512f", "avx512_vnni"])


def test_bf16_row_is_skipped_without_native_bf16():
    with pytest.raises(bench.Skip, match="no native bf16"):
        bench.run_encoder(bench.BY_NAME["st-bf16"], {"cpu": {"native_bf16": False}})


def test_a_missing_runtime_is_a_stated_skip(monkeypatch):
    monkeypatch.setitem(bench.MAIN_MODULES, "openvino", ("no_such_module_here", "no-such-package"))
    with pytest.raises(
        bench.Skip, match=r"no-such-package is not installed .*\(pip install no-such-package\)"
    ):
        bench.run_encoder(bench.BY_NAME["openvino-fp32"], {"cpu": {"native_bf16": True}})


# ---- data and the metric --------------------------------------------------------------------------
def test_read_stsb_distinct_sentences_and_pair_indices(tmp_path):
    path = tmp_path / "sts-test.csv"
    rows = [
        "g\ts\t2012\t1\t2.5\tA girl.\tA boy.",
        "g\ts\t2012\t2\t4.0\tA boy.\tA dog.\textra\tcolumns",  # two trailing columns, as some rows have
        "g\ts\t2012\t3\t1.0\tA girl.\tA cat.",
    ]
    path.write_text("\r\n".join(rows) + "\r\n", encoding="utf-8")
    sentences, index, gold = bench.read_stsb(path)
    assert sentences == ["A girl.", "A boy.", "A dog.", "A cat."]
    assert index == [(0, 1), (1, 2), (0, 3)] and gold == [2.5, 4.0, 1.0]
    sentences, index, gold = bench.read_stsb(path, pairs=1)
    assert (sentences, index, gold) == (["A girl.", "A boy."], [(0, 1)], [2.5])


def test_read_stsb_errors_name_the_line_and_column(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("g\ts\t2012\t1\tfive\tA.\tB.\n")
    with pytest.raises(SystemExit, match=r"bad.csv:1: column 5 \(score\) is not a number: 'five'"):
        bench.read_stsb(path)
    path.write_text("g\ts\t2012\t1\t5.0\tA.\n")
    with pytest.raises(SystemExit, match="bad.csv:1: expected at least 7 tab-separated columns, found 6"):
        bench.read_stsb(path)
    with pytest.raises(SystemExit, match="STS-B test file not found"):
        bench.read_stsb(tmp_path / "missing.csv")


def test_spearman_of_cosines_matches_brute_force():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(12, 5)).astype(np.float32) * rng.uniform(0.5, 3, size=(12, 1))
    index = [(i, (i * 5 + 3) % 12) for i in range(12)]
    gold = rng.uniform(0, 5, size=12).tolist()
    cosines = [
        float(vectors[a] @ vectors[b] / (np.linalg.norm(vectors[a]) * np.linalg.norm(vectors[b])))
        for a, b in index
    ]
    assert bench.spearman_of(vectors, index, gold) == pytest.approx(spearmanr(cosines, gold).statistic)


@pytest.mark.parametrize("size", [1, 2, 5, 33])
def test_percentile_matches_numpy(size):
    values = np.random.default_rng(size).uniform(0, 100, size).tolist()
    for q in (0, 50, 99, 100):
        assert bench.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert bench.percentile([], 50) is None


# ---- the worker, with a fake loader ---------------------------------------------------------------
def test_worker_encodes_every_sentence_in_order_and_prints_its_row(tmp_path, monkeypatch, capsys):
    sentences = ["b", "aaa", "cc", "dddd"]
    (tmp_path / "s.json").write_text(json.dumps(sentences))
    seen = []

    def fake_loader(spec):
        def encode(texts):
            seen.append(list(texts))
            return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

        return encode, {"fake": True}

    monkeypatch.setitem(bench.LOADERS, "fake", fake_loader)
    spec = {
        "kind": "fake",
        "params": {},
        "sentences_file": str(tmp_path / "s.json"),
        "vectors_file": str(tmp_path / "v.npy"),
        "repeats": 2,
        "warmup": 1,
        "dim": 2,
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    bench.run_worker(str(tmp_path / "spec.json"))
    assert seen == [["b"], sentences, sentences]  # the warm-up, then the timed passes
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1].removeprefix(bench.RESULT_MARK))
    assert len(row["pass_seconds"]) == 2 and row["info"] == {"fake": True}
    assert np.load(tmp_path / "v.npy")[:, 0].tolist() == [1, 3, 2, 4]


def test_batches_are_length_sorted_and_cover_every_index():
    texts = ["aa", "a", "aaaa", "aaa", "aaaaa"]
    batches = list(bench._batches(texts, 2))
    assert [chunk for chunk, _ in batches] == [[4, 2], [3, 0], [1]]
    assert [batch for _, batch in batches][0] == ["aaaaa", "aaaa"]


def test_mean_pool_ignores_padding_and_normalises():
    hidden = np.array([[[1.0, 0.0], [3.0, 0.0], [100.0, 100.0]]], dtype=np.float32)
    pooled = bench._mean_pool(hidden, np.array([[1, 1, 0]]))
    assert pooled.tolist() == [[1.0, 0.0]]


# ---- the closed loop, against a local server ----------------------------------------------------
def test_closed_loop_counts_answers_errors_and_texts():
    bodies = []

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
                body = json.loads(await reader.readexactly(length))
                bodies.append(body)
                if body["input"] == ["t1"]:
                    status, answer = b"500 Internal Server Error", {"error": "boom"}
                elif body["input"] == ["t0"] and len(bodies) == 2:
                    status, answer = b"200 OK", {"not": "an embedding answer"}
                else:
                    status, answer = b"200 OK", {"data": [{"embedding": [float(len(bodies))]}]}
                data = json.dumps(answer).encode()
                if len(bodies) % 2:  # both ways a server may frame an answer
                    writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
                else:
                    writer.write(
                        b"HTTP/1.1 "
                        + status
                        + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
                        + b"%x\r\n" % len(data)
                        + data
                        + b"\r\n0\r\n\r\n"
                    )
                await writer.drain()
        except asyncio.IncompleteReadError:
            writer.close()

    async def run():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await bench.closed_loop(
                f"http://127.0.0.1:{port}/embeddings", ["t0", "t1", "t2"], concurrency=1, requests=5,
                max_seconds=30, offset=2,
            )  # fmt: skip
        finally:
            server.close()

    row = asyncio.run(run())
    # from offset 2, cycling: t2 t0(not an answer) t1(500) t2 t0
    assert [b["input"][0] for b in bodies] == ["t2", "t0", "t1", "t2", "t0"]
    assert all(b["model"] == bench.SERVED_NAME for b in bodies)
    assert row["sent"] == 5 and row["completed"] == 3
    assert row["errors"] == {"500": 1, "KeyError": 1}
    assert row["_vectors"] == {2: [4.0], 0: [5.0]}
    assert row["p50_ms"] is not None and row["concurrency"] == 1 and row["client_cpu_seconds"] >= 0


def test_closed_loop_counts_a_refused_connection():
    row = asyncio.run(bench.closed_loop(f"http://127.0.0.1:{bench.free_port()}/e", ["t"], 2, 3, 30))
    assert row["completed"] == 0 and row["errors"] == {"ConnectionRefusedError": 3}


# ---- tables ---------------------------------------------------------------------------------------
def result_dict() -> dict:
    return {
        "contenders": {
            "st-fp32": {"sentences_per_s": 200.0, "spearman": 0.8203, "info": {"backend": "torch"}},
            "ort-int8": {"sentences_per_s": 418.0, "spearman": 0.8176, "versions": {"onnxruntime": "1.32.0"}},
            "st-bf16": {"skipped": "this CPU has no native bf16"},
            "toolkit": {"sentences_per_s": 242.0, "spearman": 0.8203, "info": {"resolved_precision": "bf16"}},
            "fastembed": {"error": "RuntimeError: worker exited with 1"},
        },
        "serving": {
            "serve-toolkit": {
                "levels": [
                    {
                        "concurrency": 1,
                        "completed": 10,
                        "errors": {},
                        "requests_per_s": 30.0,
                        "p50_ms": 33.0,
                        "p99_ms": 50.0,
                    },
                    {
                        "concurrency": 32,
                        "completed": 10,
                        "errors": {"503": 1},
                        "requests_per_s": 90.0,
                        "p50_ms": 300.0,
                        "p99_ms": 600.0,
                    },
                ]
            },
            "serve-infinity-torch": {
                "agreement": {"compared": 20, "min_cosine_vs_st_fp32": 0.9999996},
                "levels": [
                    {
                        "concurrency": 1,
                        "completed": 10,
                        "errors": {},
                        "requests_per_s": 20.0,
                        "p50_ms": 40.0,
                        "p99_ms": 60.0,
                    },
                    {
                        "concurrency": 32,
                        "completed": 10,
                        "errors": {},
                        "requests_per_s": 60.0,
                        "p50_ms": 400.0,
                        "p99_ms": 700.0,
                    },
                ],
            },
            "serve-infinity-optimum": {"skipped": "not installed"},
            "serve-infinity-optimum-int8": {
                "levels": [
                    {"concurrency": 1, "completed": 10, "errors": {}, "requests_per_s": 25.0},
                    {"concurrency": 32, "completed": 10, "errors": {}, "requests_per_s": 120.0},
                ],
            },
        },
    }


def test_encode_table_ratios_and_metric_change():
    table = bench.build_tables(result_dict())["cpu-inference"]
    rows = {row[0]: row for row in table["rows"]}
    assert list(rows) == ["st-fp32", "st-bf16", "ort-int8", "fastembed", "toolkit"]  # contender order
    assert rows["st-fp32"][3:7] == ["200.0", "1.00x", "0.8203", "+0.00%"]
    assert rows["ort-int8"][3:7] == ["418.0", "2.09x", "0.8176", f"{(0.8176 - 0.8203) / 0.8203 * 100:+.2f}%"]
    assert rows["ort-int8"][7] == "onnxruntime 1.32.0"
    assert rows["toolkit"][7].startswith("resolved_precision bf16")
    assert rows["st-bf16"][3] == "" and rows["st-bf16"][7] == "skipped: this CPU has no native bf16"
    assert rows["fastembed"][7] == "failed: RuntimeError: worker exited with 1"
    assert rows["fastembed"][2] == "benchmarks/.venvs/fastembed"
    assert all(len(row) == len(table["columns"]) for row in table["rows"])


def test_serving_table_against_infinity_torch_and_the_fastest_infinity():
    table = bench.build_tables(result_dict())["cpu-serving"]
    rows = [row for row in table["rows"]]
    assert [r[0] for r in rows] == [
        "serve-toolkit",
        "serve-toolkit",
        "serve-infinity-torch",
        "serve-infinity-torch",
        "serve-infinity-optimum",
        "serve-infinity-optimum-int8",
        "serve-infinity-optimum-int8",
    ]
    # x infinity-torch, then x the fastest Infinity row at that concurrency (int8 included)
    assert rows[0][2:10] == [1, 10, 0, "30.0", "1.50x", "1.20x", "33.0", "50.0"]
    assert rows[1][4] == 1 and rows[1][6:8] == ["1.50x", "0.75x"]
    assert rows[2][6:8] == ["1.00x", "0.80x"] and rows[6][7] == "1.00x"
    assert (
        rows[2][10] == "min cosine vs st-fp32 1.0000 (20 answers)" and rows[3][10] == "" and rows[0][10] == ""
    )
    assert rows[4][10] == "skipped: not installed"
    assert all(len(row) == len(table["columns"]) for row in rows)


def test_tables_render_through_the_docs_renderer():
    for table in bench.build_tables(result_dict()).values():
        text = tables.render_markdown(table)
        assert text.count("\n") == len(table["rows"]) + 1


def test_tables_without_the_reference_row_leave_ratios_blank():
    result = result_dict()
    del result["contenders"]["st-fp32"]
    rows = {row[0]: row for row in bench.build_tables(result)["cpu-inference"]["rows"]}
    assert rows["ort-int8"][4] == "" and rows["ort-int8"][6] == ""


def test_features_record_reduces_quantize_help_to_flags(tmp_path):
    features = {
        "backend_flag": False,
        "quantize_help": "usage: quantize [--batch_size B] [--heads]\n --batch_size ...",
    }
    assert bench._features_record(features, tmp_path / "none.json") == {
        "backend_flag": False,
        "quantize_flags": ["--batch_size", "--heads"],
    }
    (tmp_path / "f.json").write_text(json.dumps({"backend_flag": True}))
    assert bench._features_record(None, tmp_path / "f.json") == {"backend_flag": True}
    assert bench._features_record(None, tmp_path / "none.json") is None


def test_serving_rounds_keep_each_levels_median_round_and_every_rate():
    def row(rates, p99s):
        return {
            "levels": [
                {"concurrency": c, "requests_per_s": r, "p99_ms": p} for c, r, p in zip((1, 32), rates, p99s)
            ]
        }

    rounds = [
        row((10.0, 300.0), (5.0, 90.0)),
        row((12.0, 200.0), (4.0, 80.0)),
        row((11.0, 250.0), (6.0, 70.0)),
    ]
    merged = bench.median_round(rounds)
    assert merged["rounds"] == 3
    one, many = merged["levels"]
    assert (one["requests_per_s"], one["p99_ms"]) == (11.0, 6.0)  # the median round's own figures
    assert (many["requests_per_s"], many["p99_ms"]) == (250.0, 70.0)
    assert many["rounds_requests_per_s"] == [300.0, 200.0, 250.0]
    assert bench.median_round([{"skipped": "x"}]) == {"skipped": "x"}
    assert bench.median_round([row((1.0, 2.0), (1.0, 1.0))])["levels"][0]["requests_per_s"] == 1.0


FAKE_SERVER = """
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

delay = float(sys.argv[2])

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer({})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(delay)
        self.answer({"data": [{"embedding": [1.0, 0.0]}]})

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def test_interleaved_servers_are_measured_in_alternating_bursts(tmp_path, monkeypatch):
    """Two real server processes up at once, a fast and a slow one: every burst of each is kept,
    the pooled level counts every request, the order rotates, the faster server is faster, and a
    peer that cannot run is skipped with its reason while the others are measured."""
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    delays = {"fast": 0.002, "slow": 0.02}
    contenders = [bench.Contender(name, "serving", "main", "serve", name) for name in delays]

    def plan(contender, ctx):
        if contender.name == "missing":
            raise bench.Skip("benchmarks/.venvs/missing could not be installed")
        port = bench.free_port()
        command = [sys.executable, str(script), str(port), str(delays[contender.name])]
        return {"command": command, "ready": "/ready", "route": "/v1/embeddings", "port": port, "cwd": None}

    order = []
    real_loop = bench.closed_loop

    async def recording_loop(url, texts, concurrency, requests, max_seconds, offset=0):
        order.append((url, concurrency))
        return await real_loop(url, texts, concurrency, requests, max_seconds, offset)

    monkeypatch.setattr(bench, "server_plan", plan)
    monkeypatch.setattr(bench, "closed_loop", recording_loop)
    args = types.SimpleNamespace(requests=12, levels=[1, 4], max_seconds=30)
    ctx = {"args": args, "sentences": ["a", "b", "c"], "rows_dir": tmp_path}
    missing = bench.Contender("missing", "serving", "missing", "serve", "a peer that cannot run")
    rows = bench.run_servers_interleaved([*contenders, missing], ctx, bursts=3)
    assert rows["missing"] == {"skipped": "benchmarks/.venvs/missing could not be installed"}

    for name in delays:
        levels = rows[name]["levels"]
        assert [lv["concurrency"] for lv in levels] == [1, 4]
        assert all(lv["completed"] == 12 and len(lv["bursts_requests_per_s"]) == 3 for lv in levels)
        assert "_vectors" not in levels[0] and "_latencies" not in levels[0]
        assert rows[name]["interleaved"] == {"bursts": 3, "requests_per_burst": 4, "with": ["fast", "slow"]}
        assert rows[name]["idle_cpu_seconds"] >= 0
    assert rows["fast"]["levels"][0]["requests_per_s"] > rows["slow"]["levels"][0]["requests_per_s"]
    # after the warm-ups, each burst is one server's two levels; the first server of a burst rotates
    timed = [url for url, concurrency in order if concurrency != 8]
    firsts = [timed[i] for i in range(0, len(timed), 4)]
    assert firsts[0] != firsts[1] and firsts[0] == firsts[2]

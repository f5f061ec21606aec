"""Load test of ``encoder-tasks serve``: throughput and latency under concurrent requests, against a
server that runs one forward per request and against ``transformers.pipeline`` on the same stack.

    .venv/bin/python -m benchmarks.bench_serve            # the real run (about 30 minutes on 2 cores)
    .venv/bin/python -m benchmarks.bench_serve --quick    # a smoke run: tiny sizes, not a measurement
    .venv/bin/python -m benchmarks.bench_serve --overload # the overload row only (toolkit, ~3 minutes)

The model: MiniLM-L6 (``sentence-transformers/all-MiniLM-L6-v2``) fine-tuned on
``--train_examples`` SST-2 sentences for 1 epoch at the toolkit's defaults, ``--max_length 512``
so that every long input fits one window; trained once and kept under ``--work`` (reruns reuse
it), with its stock export (``encoder-tasks export RUN DEST --format transformers``). Speed does
not depend on how well it was trained.

Contenders, each its own server process on 127.0.0.1, started one after the other, on the same
weights and at the same precision (``--precision``; ``auto`` resolves as the toolkit does:
bf16 where the CPU runs it natively):

- ``toolkit``: ``encoder-tasks serve`` at its serving defaults (dynamic micro-batching), logging
  at ``--log_level warning`` as the baselines do (no access-log line per request);
- ``naive``: the toolkit's Predictor behind FastAPI + uvicorn, one forward per request, one at
  a time (``benchmarks/serve_baselines.py``);
- ``pipeline``: ``transformers.pipeline("text-classification")`` on the stock export, the same way;
- ``naive-threadpool``: ``naive`` with forwards overlapping in FastAPI's thread pool.

Every server process gets the same environment (``worker_env``: ``OMP_WAIT_POLICY=PASSIVE``
unless exported, the toolkit's runtime defaults) and torch's default threads.

Load: an async client (httpx, loopback, keep-alive) sends one input per request, short (SST-2
dev sentences) or long (SQuADShifts Amazon reviews of 250-500 tokens), at each concurrency of
``--concurrency`` (1, 8, 32): that many requests always in flight, each level stopping at
``--requests`` requests or ``--max_seconds`` seconds, whichever comes first (requests in
flight then finish), after ``--warmup`` requests at the highest concurrency that are not timed.
The client runs on the same machine as the server (on a small CPU it takes a share of it).

Recorded per contender, input kind and concurrency: requests completed, errors, requests/s and
inputs/s, latency percentiles (p50/p90/p99, ms), and for the toolkit the mean batch it formed
(from its ``/metrics``). Every answer's label is kept: the contenders' labels for the same
inputs are compared (the majority label of each input, against the toolkit's). The targets
compare the toolkit with the naive server at whichever of its two configurations did better at
that level (throughput at concurrency 32, p50 latency at 1). The result file
(``benchmarks/results/serve-<time>.json``; under ``--work`` with ``--quick``) holds the command,
environment, settings, every row and the tables ``short``, ``long``, ``targets`` and ``agreement``.

Overload (``--overload``, the toolkit alone; ``benchmarks/results/serve-overload-<time>.json``):
requests of ``--overload_inputs`` (16) short inputs each, first unloaded (concurrency 1, for
``--overload_baseline`` requests: its p99 is the reference), then ``--overload_concurrency``
(128) requests always in flight for ``--overload_seconds`` (60), the server started with
``--overload_flags`` (a bounded queue). A client whose request is shed (429) waits as its
``Retry-After`` asks (at least 1 s), then sends again: 128 clients that keep coming. Recorded:
answers by status; latency of admitted (200) and shed (429) requests; admitted p99 against the
unloaded p99 (the target: within 2x); the slowest answer of all, against ``--request_timeout``
(no request waits past its timeout without an answer); the server's shed and abandoned counts.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks.common import DATA, MINILM, RESULTS, print_table, require_data, worker_env
from benchmarks.harness import describe, invocation
from benchmarks.serve_baselines import (
    CLI,
    ServerProcess,
    baseline_command,
    free_port,
    toolkit_command,
)

SST2_TRAIN = "cls/sst2/train.tsv"
SST2_DEV = "cls/sst2/dev.tsv"
REVIEWS = "qa/squadshifts/squadshifts_amazon_reviews_v1.0.json"
NAME = "sst2"
MAX_LENGTH = 512
LONG_TOKENS = (250, 500)
KINDS = ("short", "long")
CONTENDERS = ("toolkit", "naive", "pipeline", "naive-threadpool")
SIZES = {
    "quick": {"train_examples": 64, "requests": 12, "max_seconds": 10.0, "warmup": 4, "concurrency": "1,4"},
    "standard": {
        "train_examples": 2000,
        "requests": 500,
        "max_seconds": 60.0,
        "warmup": 64,
        "concurrency": "1,8,32",
    },
}
#: The issue's targets: toolkit / naive throughput at this concurrency, and p50 latency at 1.
TARGET_SPEEDUP, TARGET_CONCURRENCY, TARGET_LATENCY = 5.0, 32, 1.2


# ---- measuring: percentiles, the bounded load, what the toolkit batched, agreement -----------------
def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100), linear between the closest ranks (numpy's default).

    Example:
        >>> percentile([10.0, 20.0, 30.0, 40.0], 50), percentile([], 99)
        (25.0, None)
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def request_bodies(texts: list[str]) -> list[bytes]:
    """One request per text, serialised once (the client's per-request work stays small)."""
    return [json.dumps({"inputs": [{"text": text}]}).encode() for text in texts]


async def run_load(
    client, url: str, bodies: list[bytes], concurrency: int, max_requests: int, max_seconds: float
) -> tuple[dict, dict[int, list]]:
    """``concurrency`` requests in flight until ``max_requests`` are sent or ``max_seconds`` pass
    (those in flight finish); request ``i`` sends ``bodies[i % len(bodies)]``.

    Returns the row (sent, completed, errors by kind, seconds, rates, latency percentiles in ms
    over the completed requests) and ``{body index: [labels of each answer]}``.
    """
    import httpx

    sent, latencies, labels = 0, [], collections.defaultdict(list)
    errors, error_sample = collections.Counter(), None
    headers = {"content-type": "application/json"}
    started = time.perf_counter()
    deadline = started + max_seconds

    async def worker():
        nonlocal sent, error_sample
        while sent < max_requests and time.perf_counter() < deadline:
            index = sent % len(bodies)
            sent += 1
            begin = time.perf_counter()
            try:
                response = await client.post(url, content=bodies[index], headers=headers)
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] += 1
                error_sample = error_sample or f"{type(exc).__name__}: {exc}"
                continue
            elapsed = time.perf_counter() - begin
            try:
                found = (
                    [p.get("label") for p in response.json()["predictions"]] if response.is_success else None
                )
            except (ValueError, KeyError, TypeError, AttributeError):
                found = None
            if found is None:
                kind = f"HTTP {response.status_code}" if not response.is_success else "unreadable body"
                errors[kind] += 1
                error_sample = error_sample or f"{kind}: {response.text[:300]}"
                continue
            latencies.append(elapsed)
            labels[index].append(found[0] if len(found) == 1 else tuple(found))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    completed = len(latencies)
    row = {
        "concurrency": concurrency,
        "sent": sent,
        "completed": completed,
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "error_sample": error_sample,
        "stopped_by": "requests" if sent >= max_requests else "time",
        "seconds": seconds,
        "requests_per_s": completed / seconds if seconds else None,
        "inputs_per_s": completed / seconds if seconds else None,  # one input per request
        "latency_ms": {
            **{f"p{q}": _ms(percentile(latencies, q)) for q in (50, 90, 99)},
            "mean": _ms(sum(latencies) / completed if completed else None),
            "max": _ms(max(latencies, default=None)),
        },
    }
    return row, dict(labels)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def batch_stats(before: str, after: str, model: str = NAME) -> dict:
    """Model batches the toolkit server ran between two ``/metrics`` scrapes: how many, and their
    mean inputs, requests and tokens (its histograms' sum / count)."""
    from encoder_tasks.serving.metrics import parse_metrics

    def totals(text: str) -> collections.Counter:
        found = collections.Counter()
        for (name, labels), value in parse_metrics(text).items():
            if dict(labels).get("model", model) == model and name.endswith(("_sum", "_count")):
                found[name] += value
        return found

    delta = totals(after)
    delta.subtract(totals(before))
    batches = delta["encoder_tasks_batch_size_count"]
    stats = {"batches": int(batches)}
    for key, metric in (("inputs", "batch_size"), ("requests", "batch_requests"), ("tokens", "batch_tokens")):
        stats[f"mean_batch_{key}"] = delta[f"encoder_tasks_{metric}_sum"] / batches if batches else None
    return stats


def agreement(answers: dict[str, dict[int, list]], reference: str = "toolkit") -> dict[str, dict]:
    """Each contender's labels against ``reference``'s on the inputs both answered (the majority
    label of each input), and the inputs a contender itself answered in more than one way
    (``reference`` is the first contender when it did not run).

    Example:
        >>> agreement({"toolkit": {0: ["a"], 1: ["b"]}, "naive": {0: ["a"], 1: ["a", "a", "b"]}})["naive"]
        {'reference': 'toolkit', 'inputs_compared': 2, 'disagreements': 1, 'disagreeing_inputs': [1], 'inconsistent_inputs': 1}
    """

    def majority(found: list):
        return collections.Counter(found).most_common(1)[0][0]

    reference = reference if reference in answers else next(iter(answers), reference)
    ours = answers.get(reference, {})
    report = {}
    for name, theirs in answers.items():
        shared = sorted(set(ours) & set(theirs))
        differing = [i for i in shared if majority(ours[i]) != majority(theirs[i])]
        report[name] = {
            "reference": reference,
            "inputs_compared": len(shared),
            "disagreements": len(differing),
            "disagreeing_inputs": differing[:20],
            "inconsistent_inputs": sum(len(set(found)) > 1 for found in theirs.values()),
        }
    return report


# ---- the model and the inputs --------------------------------------------------------------------
def run_cli(args: list[str], log: Path) -> None:
    script = Path(sys.executable).parent / "encoder-tasks"
    start = [str(script)] if script.exists() else [sys.executable, "-c", CLI]
    with log.open("w") as out:
        done = subprocess.run([*start, *args], stdout=out, stderr=subprocess.STDOUT, env=worker_env())
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): encoder-tasks {shlex.join(args)}; see {log}")


def trained_model(work: Path, examples: int) -> tuple[Path, Path, dict]:
    """The classification run and its transformers export, trained and exported once under ``work``."""
    run_dir = work / f"sst2-minilm-{examples}ex-len{MAX_LENGTH}"
    export_dir = run_dir.with_name(run_dir.name + "-transformers")
    flags = [
        "--model_name_or_path",
        MINILM,
        "--data_dir",
        str(DATA),
        "--train_file",
        SST2_TRAIN,
        "--text_column",
        "sentence",
        "--label_column",
        "label",
        "--max_length",
        str(MAX_LENGTH),
        "--max_train_samples",
        str(examples),
        "--num_train_epochs",
        "1",
        "--seed",
        "0",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
    ]
    marker = run_dir / "bench_serve_training.json"
    if not marker.is_file():  # trained into a scratch folder, moved in when complete
        work.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="training-", dir=work))
        print(f"[serve] training the model: {examples} SST-2 sentences, 1 epoch ...", flush=True)
        begin = time.perf_counter()
        run_cli(["classification", "train", *flags, "--output_dir", str(scratch / "run")], work / "train.log")
        (scratch / "run" / marker.name).write_text(
            json.dumps({"flags": flags, "seconds": time.perf_counter() - begin}, indent=2)
        )
        (scratch / "run").rename(run_dir)
        shutil.rmtree(scratch)
    if not (export_dir / "config.json").is_file():
        run_cli(["export", str(run_dir), str(export_dir), "--format", "transformers"], work / "export.log")
    return run_dir, export_dir, json.loads(marker.read_text())


def load_inputs(run_dir: Path, short_count: int, long_count: int) -> tuple[dict[str, list[str]], dict]:
    """Short: SST-2 dev sentences. Long: distinct SQuADShifts Amazon reviews of 250-500 tokens
    (special tokens included), in file order. Also their token counts (min, mean, max)."""
    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.data import read_file

    tokenizer = load_tokenizer(str(run_dir))
    short = list(read_file(DATA / SST2_DEV)["content"])[:short_count]
    reviews = json.loads((DATA / REVIEWS).read_text())["data"]
    contexts = dict.fromkeys(p["context"].strip() for article in reviews for p in article["paragraphs"])
    long = []
    for text in contexts:
        if LONG_TOKENS[0] <= len(tokenizer(text, verbose=False)["input_ids"]) <= LONG_TOKENS[1]:
            long.append(text)
        if len(long) == long_count:
            break
    texts = {"short": short, "long": long}
    lengths = {
        kind: [len(ids) for ids in tokenizer(found, verbose=False)["input_ids"]]
        for kind, found in texts.items()
    }
    stats = {
        kind: {
            "inputs": len(found),
            "tokens_min": min(found),
            "tokens_mean": sum(found) / len(found),
            "tokens_max": max(found),
        }
        for kind, found in lengths.items()
    }
    stats["short"]["source"], stats["long"]["source"] = SST2_DEV, REVIEWS
    return texts, stats


# ---- one contender -------------------------------------------------------------------------------
def contender_command(
    name: str, run_dir: Path, export_dir: Path, port: int, precision: str, toolkit_flags: list[str]
) -> list[str]:
    if name == "toolkit":
        # Its serving defaults; logs as quiet as the baselines' (no access-log line per request).
        return toolkit_command(NAME, run_dir, port, precision, "--log_level", "warning", *toolkit_flags)
    if name == "pipeline":
        return baseline_command("pipeline", NAME, export_dir, port, precision, max_length=MAX_LENGTH)
    forwards = "threadpool" if name == "naive-threadpool" else "serial"
    return baseline_command("naive", NAME, run_dir, port, precision, forwards=forwards)


async def bench_server(name: str, url: str, bodies: dict[str, list[bytes]], args) -> tuple[list, dict]:
    """Every input kind and concurrency against one running server: rows, and answers by kind."""
    import httpx

    levels = [int(c) for c in args.concurrency.split(",")]
    limits = httpx.Limits(max_connections=max(levels), max_keepalive_connections=max(levels))
    route = f"{url}/v1/models/{NAME}/predict"
    rows, answers = [], {}
    async with httpx.AsyncClient(limits=limits, timeout=args.request_timeout, trust_env=False) as client:
        for kind in KINDS:
            _, answers[kind] = await run_load(
                client, route, bodies[kind], max(levels), args.warmup, args.max_seconds
            )
            for level in levels:
                print(f"[serve] {name}: {kind} inputs, concurrency {level} ...", flush=True)
                before = (await client.get(f"{url}/metrics")).text if name == "toolkit" else None
                row, labels = await run_load(
                    client, route, bodies[kind], level, args.requests, args.max_seconds
                )
                if before is not None:
                    row["toolkit_batches"] = batch_stats(before, (await client.get(f"{url}/metrics")).text)
                for index, found in labels.items():
                    answers[kind].setdefault(index, []).extend(found)
                rows.append({"contender": name, "input": kind, **row})
    return rows, answers


# ---- overload: a bounded queue sheds, admitted requests keep their latency -------------------------
OVERLOAD_TARGET = 2.0  # admitted p99 within this many times the unloaded p99
SHED_TARGET_MS = 100.0  # shed requests (429) answered within this, at p99
SHED_PAUSE = 0.1  # seconds a shed client waits before it sends again, without a Retry-After


async def run_statuses(
    url: str, bodies: list[bytes], concurrency: int, max_requests: int, max_seconds: float
) -> dict:
    """Like :func:`run_load`, but every answer counts: latencies by status (200, 429, 503...). The
    client is :mod:`benchmarks.loadgen` (keep-alive sockets, pre-rendered bodies): at concurrency
    128 on 2 cores, httpx's own CPU delayed reading answers by hundreds of milliseconds, which
    showed as the server's latency. A shed client waits as ``Retry-After`` asks."""
    from urllib.parse import urlsplit

    from benchmarks.loadgen import closed_loop

    def pause(answer) -> float:
        return float(answer.headers.get("retry-after", SHED_PAUSE)) if answer.status == 429 else 0.0

    parts = urlsplit(url)
    run = await closed_loop(
        parts.hostname,
        parts.port,
        parts.path,
        lambda number: bodies[number % len(bodies)],
        concurrency,
        max_requests,
        max_seconds,
        pause=pause,
    )

    def latency(values: list[float]) -> dict:
        return {
            **{f"p{q}": _ms(percentile(values, q)) for q in (50, 90, 99)},
            "max": _ms(max(values, default=None)),
        }

    everything = [v for values in run.by_status.values() for v in values]
    seconds = run.seconds
    return {
        "concurrency": concurrency,
        "sent": run.sent,
        "seconds": seconds,
        "answers": {code: len(values) for code, values in sorted(run.by_status.items())},
        "transport_failures": dict(run.failures),
        "admitted_per_s": len(run.by_status.get("200", [])) / seconds if seconds else None,
        "latency_ms": {code: latency(values) for code, values in sorted(run.by_status.items())},
        "slowest_answer_ms": _ms(max(everything, default=None)),
        "client_cpu_seconds": round(run.client_cpu_seconds, 2),
    }


def _server_counts(text: str) -> dict:
    from encoder_tasks.serving.metrics import parse_metrics

    found = collections.Counter()
    for (name, _), value in parse_metrics(text).items():
        if name in ("encoder_tasks_requests_shed_total", "encoder_tasks_batches_abandoned_total"):
            found[name.removeprefix("encoder_tasks_")] += int(value)
    return dict(found)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return answer.read().decode()


async def bench_overload(url: str, texts: list[str], args) -> dict:
    size = args.overload_inputs
    bodies = [
        json.dumps({"inputs": [{"text": t} for t in texts[i : i + size]]}).encode()
        for i in range(0, len(texts) - size + 1, size)
    ]
    route = f"{url}/v1/models/{NAME}/predict"
    await run_statuses(route, bodies, 4, 8, 60)  # warm up
    print("[serve] overload: unloaded (concurrency 1) ...", flush=True)
    unloaded = await run_statuses(route, bodies, 1, args.overload_baseline, args.max_seconds)
    before = await asyncio.to_thread(_get, f"{url}/metrics")
    print(
        f"[serve] overload: concurrency {args.overload_concurrency}, {args.overload_seconds:g} s ...",
        flush=True,
    )
    loaded = await run_statuses(route, bodies, args.overload_concurrency, 10**9, args.overload_seconds)
    after = await asyncio.to_thread(_get, f"{url}/metrics")
    counts_before, counts_after = _server_counts(before), _server_counts(after)
    server = {k: counts_after.get(k, 0) - counts_before.get(k, 0) for k in counts_after}
    base_p99 = (unloaded["latency_ms"].get("200") or {}).get("p99")
    admitted_p99 = (loaded["latency_ms"].get("200") or {}).get("p99")
    ratio = admitted_p99 / base_p99 if base_p99 and admitted_p99 else None
    shed_p99 = (loaded["latency_ms"].get("429") or {}).get("p99")
    return {
        "inputs_per_request": size,
        "unloaded": unloaded,
        "overload": loaded,
        "server_counts": server,
        "admitted_p99_over_unloaded_p99": ratio,
        "target": {
            "admitted_p99_within": OVERLOAD_TARGET,
            "met": ratio is not None and ratio <= OVERLOAD_TARGET,
            "shed_p99_within_ms": SHED_TARGET_MS,
            "shed_met": shed_p99 is not None and shed_p99 <= SHED_TARGET_MS,
            "slowest_answer_within_request_timeout": (loaded["slowest_answer_ms"] or 0)
            <= args.overload_request_timeout * 1000 + 1000,
        },
    }


def overload_main(args, argv) -> int:
    require_data(SST2_TRAIN, SST2_DEV)
    work = Path(args.work)
    run_dir, _, training = trained_model(work, args.train_examples)
    from encoder_tasks.predict import inference_device, uses_bf16

    precision = args.precision
    if precision == "auto":
        precision = "bf16" if uses_bf16(inference_device(), "auto") else "fp32"
    texts, input_stats = load_inputs(run_dir, args.short_inputs, 1)
    port = free_port()
    flags = ["--log_level", "warning", "--request_timeout", str(args.overload_request_timeout)]
    command = toolkit_command(NAME, run_dir, port, precision, *flags, *shlex.split(args.overload_flags))
    print(f"[serve] overload: {shlex.join(command)}", flush=True)
    with ServerProcess(command, port, work / "logs" / "overload.log", env=worker_env()) as server:
        found = asyncio.run(bench_overload(server.url, texts["short"], args))
        peak = server.peak_rss_mib
    print(
        json.dumps(
            {k: found[k] for k in ("server_counts", "admitted_p99_over_unloaded_p99", "target")}, indent=2
        )
    )
    for name in ("unloaded", "overload"):
        row = found[name]
        print(f"[serve] {name}: answers {row['answers']}, latency ms {json.dumps(row['latency_ms'])}")
    results_dir = Path(args.results_dir or (work / "results" if args.quick else RESULTS))
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"serve-overload-{time.strftime('%Y%m%d-%H%M%S')}.json"
    result = {
        "command": invocation("bench_serve", argv),
        "environment": describe(),
        "note": args.note,
        "settings": {
            **vars(args),
            "precision_resolved": precision,
            "model": MINILM,
            "shed_pause_s": SHED_PAUSE,
        },
        "server": {"command": command, "peak_rss_mib": peak},
        "model": {"run_dir": str(run_dir), "training": training},
        "inputs": input_stats["short"],
        **found,
    }
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"results: {path}")
    return 0


# ---- tables --------------------------------------------------------------------------------------
def _row(rows: list[dict], contender: str, kind: str, concurrency: int) -> dict | None:
    return next(
        (r for r in rows if (r["contender"], r["input"], r["concurrency"]) == (contender, kind, concurrency)),
        None,
    )


def _best_naive(rows: list[dict], kind: str, concurrency: int, latency: bool = False) -> dict | None:
    """The naive server's row at its better configuration for this level (``naive`` or
    ``naive-threadpool``): the higher requests/s, or with ``latency`` the lower p50."""
    found = [_row(rows, name, kind, concurrency) for name in ("naive", "naive-threadpool")]
    if latency:
        found = [r for r in found if r and r["latency_ms"]["p50"]]
        return min(found, key=lambda r: r["latency_ms"]["p50"], default=None)
    found = [r for r in found if r and r["requests_per_s"]]
    return max(found, key=lambda r: r["requests_per_s"], default=None)


def _num(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def serve_tables(rows: list[dict], agreement_report: dict) -> dict:
    """``short`` and ``long`` (throughput and latency per contender and concurrency), ``targets``
    (toolkit against the naive server at whichever of its two configurations did better, pass or fail) and ``agreement`` (labels against the toolkit's: the majority
    label of each input both answered; and inputs a contender answered with two labels)."""
    tables = {}
    columns = [
        "contender",
        "concurrency",
        "completed",
        "errors",
        "requests/s",
        "x naive",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "mean batch (inputs)",
    ]
    for kind in KINDS:
        found = []
        for row in (r for r in rows if r["input"] == kind):
            naive = _row(rows, "naive", kind, row["concurrency"])
            ratio = (
                row["requests_per_s"] / naive["requests_per_s"] if naive and naive["requests_per_s"] else None
            )
            batch = (row.get("toolkit_batches") or {}).get("mean_batch_inputs")
            latency = row["latency_ms"]
            found.append(
                [
                    row["contender"],
                    str(row["concurrency"]),
                    str(row["completed"]),
                    str(row["errors"]),
                    _num(row["requests_per_s"]),
                    "-" if ratio is None else f"{ratio:.2f}x",
                    _num(latency["p50"]),
                    _num(latency["p90"]),
                    _num(latency["p99"]),
                    "" if batch is None else f"{batch:.2f}",
                ]
            )
        tables[kind] = {"columns": columns, "rows": found}
    targets = []
    for kind in KINDS:
        fast, slow = (
            _row(rows, "toolkit", kind, TARGET_CONCURRENCY),
            _best_naive(rows, kind, TARGET_CONCURRENCY),
        )
        if fast and slow and fast["requests_per_s"] is not None:
            ratio = fast["requests_per_s"] / slow["requests_per_s"]
            measured = (
                f"{ratio:.2f}x ({fast['requests_per_s']:.1f} vs {slow['requests_per_s']:.1f} requests/s, "
                f"{slow['contender']})"
            )
            met = "met" if ratio >= TARGET_SPEEDUP and not fast["errors"] else "not met"
        else:
            measured, met = "not measured", "not measured"
        target = f"toolkit / naive throughput at concurrency {TARGET_CONCURRENCY} >= {TARGET_SPEEDUP:g}x"
        targets.append([kind, target, measured, met])
        fast, slow = _row(rows, "toolkit", kind, 1), _best_naive(rows, kind, 1, latency=True)
        if fast and slow and fast["latency_ms"]["p50"] is not None:
            ratio = fast["latency_ms"]["p50"] / slow["latency_ms"]["p50"]
            measured = (
                f"{ratio:.2f}x ({fast['latency_ms']['p50']:.1f} vs {slow['latency_ms']['p50']:.1f} ms, "
                f"{slow['contender']})"
            )
            met = "met" if ratio <= TARGET_LATENCY and not fast["errors"] else "not met"
        else:
            measured, met = "not measured", "not measured"
        targets.append(
            ["", f"toolkit / naive p50 latency at concurrency 1 <= {TARGET_LATENCY:g}x", measured, met]
        )
    tables["targets"] = {"columns": ["input", "target", "measured", "met"], "rows": targets}
    agree = []
    for kind, report in agreement_report.items():
        for name, found in report.items():
            same = name == found["reference"]
            counts = ["-", "-"] if same else [str(found["inputs_compared"]), str(found["disagreements"])]
            agree.append(
                [name, kind, "-" if same else found["reference"], *counts, str(found["inconsistent_inputs"])]
            )
    columns = [
        "contender",
        "input",
        "compared with",
        "inputs compared",
        "labels differing",
        "inputs answered two ways",
    ]
    tables["agreement"] = {"columns": columns, "rows": agree}
    return tables


# ---- the run -------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not a measurement")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help=f"any of {', '.join(CONTENDERS)}")
    parser.add_argument("--concurrency", help="levels, comma-separated (default 1,8,32; quick 1,4)")
    parser.add_argument("--requests", type=int, help="requests per level at most (default 500; quick 12)")
    parser.add_argument("--max_seconds", type=float, help="seconds per level at most (default 60; quick 10)")
    parser.add_argument(
        "--warmup", type=int, help="untimed requests per input kind first (default 64; quick 4)"
    )
    parser.add_argument(
        "--train_examples", type=int, help="SST-2 sentences to train on (default 2000; quick 64)"
    )
    parser.add_argument("--short_inputs", type=int, default=872, help="distinct short texts (SST-2 dev)")
    parser.add_argument("--long_inputs", type=int, default=200, help="distinct long texts (Amazon reviews)")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    parser.add_argument(
        "--toolkit_flags", default="", help="extra `encoder-tasks serve` flags (default: none)"
    )
    parser.add_argument("--request_timeout", type=float, default=120.0, help="seconds before a request fails")
    parser.add_argument(
        "--work",
        default=str(Path(tempfile.gettempdir()) / "bench-serve"),
        help="where the model is trained once and server logs go",
    )
    parser.add_argument("--results_dir", help="default benchmarks/results (quick: WORK/results)")
    parser.add_argument("--overload", action="store_true", help="the overload row only (see above)")
    parser.add_argument("--overload_concurrency", type=int, default=128)
    parser.add_argument("--overload_seconds", type=float, default=60.0)
    parser.add_argument("--overload_inputs", type=int, default=16, help="inputs per request")
    parser.add_argument(
        "--overload_baseline", type=int, default=100, help="unloaded requests (concurrency 1)"
    )
    parser.add_argument("--overload_request_timeout", type=float, default=30.0)
    parser.add_argument(
        "--overload_flags",
        default="--max_queue_wait_ms 20",
        help="`encoder-tasks serve` flags of the overload run",
    )
    parser.add_argument("--note", default="", help="a note kept in the result file (e.g. a shared machine)")
    args = parser.parse_args(argv)
    sizes = SIZES["quick" if args.quick else "standard"]
    for key, value in sizes.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    unknown = set(args.contenders.split(",")) - set(CONTENDERS)
    if unknown:
        parser.error(
            f"--contenders: unknown {', '.join(sorted(unknown))}; choose from {', '.join(CONTENDERS)}"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.overload:
        return overload_main(args, argv)
    require_data(SST2_TRAIN, SST2_DEV, REVIEWS)
    work = Path(args.work)
    run_dir, export_dir, training = trained_model(work, args.train_examples)
    from encoder_tasks.predict import inference_device, uses_bf16

    precision = args.precision
    if precision == "auto":  # resolved here, so every contender gets the same concrete precision
        precision = "bf16" if uses_bf16(inference_device(), "auto") else "fp32"
    texts, input_stats = load_inputs(run_dir, args.short_inputs, args.long_inputs)
    bodies = {kind: request_bodies(found) for kind, found in texts.items()}
    rows, answers, servers, failed = [], collections.defaultdict(dict), {}, []
    for name in args.contenders.split(","):
        port = free_port()
        command = contender_command(
            name, run_dir, export_dir, port, precision, shlex.split(args.toolkit_flags)
        )
        print(f"[serve] {name}: {shlex.join(command)}", flush=True)
        begin = time.perf_counter()
        server = ServerProcess(command, port, work / "logs" / f"{name}.log", env=worker_env())
        try:
            with server:
                ready = time.perf_counter() - begin
                found, by_kind = asyncio.run(bench_server(name, server.url, bodies, args))
        except RuntimeError as error:
            print(f"[serve] {name} failed: {error}", flush=True)
            failed.append(name)
            servers[name] = {"command": command, "error": str(error)}
            continue
        rows += found
        for kind, labels in by_kind.items():
            answers[kind][name] = labels
        servers[name] = {"command": command, "ready_seconds": ready, "peak_rss_mib": server.peak_rss_mib}
    report = {kind: agreement(by_name) for kind, by_name in answers.items()}
    tables = serve_tables(rows, report)
    flat = [{**r, **{f"{k}_ms": v for k, v in r["latency_ms"].items()}} for r in rows]
    print_table(
        flat,
        ["contender", "input", "concurrency", "completed", "errors", "requests_per_s", "p50_ms", "p99_ms"],
    )
    for name in ("targets", "agreement"):
        print_table(
            [dict(zip(tables[name]["columns"], row)) for row in tables[name]["rows"]], tables[name]["columns"]
        )
    results_dir = Path(args.results_dir or (work / "results" if args.quick else RESULTS))
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"serve-{time.strftime('%Y%m%d-%H%M%S')}.json"
    result = {
        "command": invocation("bench_serve", argv),
        "environment": describe(),
        "settings": {
            **vars(args),
            "precision_resolved": precision,
            "model": MINILM,
            "max_length": MAX_LENGTH,
            "inputs_per_request": 1,
            "targets": {
                "speedup": TARGET_SPEEDUP,
                "at_concurrency": TARGET_CONCURRENCY,
                "latency_ratio": TARGET_LATENCY,
            },
        },
        "model": {"run_dir": str(run_dir), "export_dir": str(export_dir), "training": training},
        "inputs": input_stats,
        "servers": servers,
        "rows": rows,
        "agreement": report,
        "tables": tables,
    }
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"results: {path}")
    for row in rows:
        if row["errors"]:
            print(
                f"[serve] {row['contender']} {row['input']} x{row['concurrency']}: {row['errors']} requests "
                f"failed, e.g. {row['error_sample']}"
            )
    if failed or any(row["errors"] for row in rows):
        print("[serve] some servers or requests failed: see above and the logs under " + str(work / "logs"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

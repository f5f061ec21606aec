"""Where a served request's CPU goes: ``encoder-tasks serve`` under a closed-loop load, every
thread sampled by py-spy (issue 28: ``serve`` at concurrency 32 against Infinity).

The server is the one ``bench_cpu_inference`` measures (the same command, the same sentences,
the same lean client): by default the int8 copy ``quantize`` made in its full-size work folder.
After a warm-up it is measured once without the profiler, then sampled by ``py-spy record``
(``--nonblocking``: the process is not stopped to read it, so the load runs at nearly its usual
rate; native frames are off, which would stop it) while the same load runs. Each thread's
samples become:

- its busy share: samples / (seconds x rate), of one core (py-spy leaves idle threads out);
- the stages of a request, by the first marker frame found in a sample's stack
  (:data:`STAGES`): on the event loop, counting tokens, the route's own code, FastAPI's and
  Starlette's request handling, the middlewares, writing the answer; on the model's thread, the
  forward pass, tokenising, pooling and the rest;
- its top frames by own time.

Run: ``python -m benchmarks.bench_serve_profile`` (about 3 minutes; ``--model DIR`` serves another
model, ``--flags`` passes serve flags). py-spy is a benchmark-only tool: ``pip install py-spy``.
Result: ``benchmarks/results/serve-profile-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import bench_cpu_inference as cpu
from benchmarks.common import save_results
from benchmarks.harness import invocation

DEFAULT_WORK = Path("/tmp/bench-cpu-inference/full")

#: Stages of a sample, by thread kind: the first whose marker frame (a function name as py-spy
#: prints it) is in the sample's stack takes it. Ordered from the innermost work outwards.
STAGES = {
    "event loop": [
        ("counting tokens (ServedModel.token_lengths)", "ServedModel.token_lengths"),
        ("the embeddings route's own code (create_embeddings)", "create_embeddings"),
        ("writing the answer (send)", "RequestResponseCycle.send"),
        (
            "FastAPI: body, validation, serialisation (get_request_handler)",
            "get_request_handler.<locals>.app",
        ),
        ("routing, Starlette's inner exception layer (Router.__call__)", "Router.__call__"),
        ("reading the body, checking its JSON (ReadBody.__call__)", "ReadBody.__call__"),
        ("the ASGI layers above: uvicorn's cycle, Starlette's and our outer middlewares", "run_asgi"),
        ("uvicorn's HTTP parsing (data_received)", "data_received"),
        ("the event loop itself (uvloop, in C: sockets, scheduling)", "Runner.run"),
    ],
    "model": [
        ("forward pass (EncoderRuntime.forward)", "EncoderRuntime.forward"),
        ("tokenising (PreTrainedTokenizerBase.__call__)", "PreTrainedTokenizerBase.__call__"),
        ("the rest of predict (pooling, rounding, records)", "Predictor.predict"),
        ("batcher (queue, answers)", "Batcher._work"),
    ],
}
_ADDRESS = re.compile(r"\s*\((?:0x[0-9a-f]+|\d+)\)")


def parse_raw(text: str) -> dict[str, collections.Counter]:
    """py-spy's ``--format raw --threads`` output as ``{thread: Counter(stack tuple -> samples)}``;
    a stack is outermost first, each frame ``function (file:line)`` as py-spy wrote it.

    Example:
        >>> stacks = parse_raw("thread (5062): MainThread;run (a.py:1);work (b.py:2) 3\\n")
        >>> stacks["thread MainThread"][("run (a.py:1)", "work (b.py:2)")]
        3
    """
    threads: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        thread, *frames = stack.split(";")
        threads[_ADDRESS.sub("", thread).replace(": ", " ")][tuple(frames)] += int(count)
    return dict(threads)


def thread_kind(name: str) -> str | None:
    """``event loop`` (the main thread runs it), ``model`` (a batcher's worker), else None."""
    if "MainThread" in name:
        return "event loop"
    if "encoder-tasks-model" in name:
        return "model"
    return None


def stage_shares(stacks: collections.Counter, kind: str) -> dict[str, float]:
    """Each of ``STAGES[kind]``'s share of the thread's samples, summing to 1 with ``other``: a
    stack with no marker, mostly one read while it changed (non-blocking sampling tears some)."""
    counts: collections.Counter = collections.Counter()
    for stack, samples in stacks.items():
        joined = ";".join(stack)
        stage = next((name for name, marker in STAGES[kind] if marker in joined), "other")
        counts[stage] += samples
    total = sum(counts.values()) or 1
    return {name: counts[name] / total for name, _ in [*STAGES[kind], ("other", "")]}


def top_frames(stacks: collections.Counter, n: int = 12) -> list[tuple[str, float]]:
    """The ``n`` frames with the most own (innermost) samples, with their share."""
    own: collections.Counter = collections.Counter()
    for stack, samples in stacks.items():
        if stack:
            own[re.sub(r":\d+\)$", ")", stack[-1])] += samples
    total = sum(own.values()) or 1
    return [(frame, count / total) for frame, count in own.most_common(n)]


def summarise(threads: dict[str, collections.Counter], seconds: float, rate: int) -> dict:
    """Per thread: busy share of one core, stage shares (event loop and model threads), top frames."""
    possible = seconds * rate
    out = {}
    for name, stacks in sorted(threads.items(), key=lambda item: -sum(item[1].values())):
        samples = sum(stacks.values())
        kind = thread_kind(name)
        out[name] = {
            "samples": samples,
            "busy_share_of_a_core": round(samples / possible, 3),
            "stages": {k: round(v, 3) for k, v in stage_shares(stacks, kind).items()} if kind else None,
            "top_own_frames": [[frame, round(share, 3)] for frame, share in top_frames(stacks)],
        }
    return out


def tables(summary: dict, rates: dict) -> dict:
    threads = [[name, t["samples"], f"{100 * t['busy_share_of_a_core']:.0f}"] for name, t in summary.items()]
    stages = [
        [thread_kind(name), stage, f"{100 * share:.1f}", f"{100 * share * t['busy_share_of_a_core']:.1f}"]
        for name, t in summary.items()
        if t["stages"]
        for stage, share in t["stages"].items()
    ]
    return {
        "serve-profile-threads": {
            "columns": ["thread", "samples", "busy, % of one core"],
            "rows": threads,
            "notes": f"requests/s without the profiler {rates['without']}, under it {rates['under']}",
        },
        "serve-profile-stages": {
            "columns": ["thread", "stage", "% of the thread's samples", "% of one core"],
            "rows": stages,
            "notes": "a sample counts for the first stage whose marker frame is in its stack (STAGES)",
        },
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_WORK / "toolkit-int8"),
                        help="the model folder to serve (default: bench_cpu_inference's int8 copy)")  # fmt: skip
    parser.add_argument("--sentences", default=str(DEFAULT_WORK / "sentences.json"),
                        help="a JSON list of sentences, one a request (default: bench_cpu_inference's)")  # fmt: skip
    parser.add_argument("--flags", default="", help="serve flags, space-separated")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds sampled")
    parser.add_argument("--rate", type=int, default=100, help="samples a second")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        sys.exit("bench_serve_profile: py-spy is not installed (pip install py-spy); it samples the server")
    for path in (args.model, args.sentences):
        if not Path(path).exists():
            sys.exit(f"bench_serve_profile: {path} not found; run python -m benchmarks.bench_cpu_inference --size full first, or pass --model/--sentences")  # fmt: skip
    texts = json.loads(Path(args.sentences).read_text(encoding="utf-8"))
    port, out = cpu.free_port(), Path("/tmp/bench-serve-profile")
    command = [sys.executable, "-c", cpu.TOOLKIT_CLI, "serve", f"{cpu.SERVED_NAME}={args.model}", "--host",
               "127.0.0.1", "--port", str(port), "--log_level", "warning", *args.flags.split()]  # fmt: skip
    with cpu.Server(command, port, "/ready", out / "server.log", cpu.child_env()) as server:
        url = server.url + "/v1/embeddings"
        asyncio.run(cpu.closed_loop(url, texts, args.concurrency, 600, 30))  # warm-up
        without = asyncio.run(cpu.closed_loop(url, texts, args.concurrency, 2400, 60))
        raw = out / "py-spy.txt"
        sampler = subprocess.Popen(
            [spy, "record", "--pid", str(server.process.pid), "--rate", str(args.rate), "--format", "raw",
             "--threads", "--nonblocking", "--duration", str(int(args.seconds)), "-o", str(raw)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1)  # py-spy attaches
        under = asyncio.run(cpu.closed_loop(url, texts, args.concurrency, 10**6, args.seconds - 2))
        sampler.wait()
    summary = summarise(parse_raw(raw.read_text()), args.seconds, args.rate)
    rates = {"without": without["requests_per_s"], "under": under["requests_per_s"]}
    payload = {
        "command": invocation("bench_serve_profile", argv),
        "cpu": cpu.cpu_info(),
        "server": command,
        "concurrency": args.concurrency,
        "requests_per_s": rates,
        "p99_ms_without": without["p99_ms"],
        "threads": summary,
        "tables": tables(summary, rates),
    }
    for name, t in payload["tables"].items():
        print(name)
        for row in t["rows"]:
            print("  ", " | ".join(map(str, row)))
    print(f"results: {save_results('serve-profile', payload)}")


if __name__ == "__main__":
    main()

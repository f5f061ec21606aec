"""``serve --http h11`` against ``--http httptools``: the same model, alternated, several rounds.

    python -m benchmarks.bench_http_parser --model DIR [--rounds 3] [--requests 1200]

One-sentence OpenAI embeddings requests (STS-B test sentences, as ``bench_cpu_inference``'s
serving rows) through :func:`benchmarks.bench_cpu_inference.closed_loop` at concurrency 1 and 32;
each round starts a fresh server per parser, in alternating order, so drift on the machine hits
both. Result: ``benchmarks/results/http-parser-STAMP.json`` with its table (median and every
round's requests per second).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

from benchmarks import bench_cpu_inference as cpu
from benchmarks.common import save_results
from benchmarks.harness import invocation

PARSERS = ("h11", "httptools")


def table(rounds: dict[str, dict[int, list[float]]]) -> dict:
    """Median and every round's rate per parser and concurrency.

    Example:
        >>> table({"h11": {32: [1.0, 3.0]}, "httptools": {32: [2.0, 2.0]}})["rows"]
        [['h11', 32, '2.0', '1.0, 3.0'], ['httptools', 32, '2.0', '2.0, 2.0']]
    """
    rows = [
        [parser, level, f"{statistics.median(rates):.1f}", ", ".join(f"{r:.1f}" for r in rates)]
        for parser, levels in rounds.items()
        for level, rates in sorted(levels.items())
    ]
    return {"columns": ["--http", "concurrency", "requests/s (median)", "each round"], "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model folder serve takes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1200)
    parser.add_argument("--data_dir", default=None)
    args = parser.parse_args(argv)
    sentences, _, _ = cpu.read_stsb(cpu.data_dir(args.data_dir) / cpu.STSB_TEST)
    levels = (1, 32)
    rounds: dict[str, dict[int, list[float]]] = {p: {lv: [] for lv in levels} for p in PARSERS}
    log_dir = Path("/tmp/bench-http-parser")
    for number in range(args.rounds):
        order = PARSERS if number % 2 == 0 else PARSERS[::-1]
        for http in order:
            port = cpu.free_port()
            contender = cpu.Contender("serve", "serving", "main", "serve", "", {"flags": ["--http", http]})
            command, ready, route = cpu.serve_command(contender, sys.executable, args.model, port, 64)
            with cpu.Server(
                command, port, ready, log_dir / f"{http}-{number}.log", cpu.child_env()
            ) as server:
                url = server.url + route
                asyncio.run(cpu.closed_loop(url, sentences, 8, cpu.WARMUP_REQUESTS, 60, len(sentences) - 64))
                for level in levels:
                    row = asyncio.run(cpu.closed_loop(url, sentences, level, args.requests, 120))
                    rounds[http][level].append(row["requests_per_s"])
                    print(
                        f"[http] round {number} {http} c={level}: {row['requests_per_s']} req/s", flush=True
                    )
    path = save_results(
        "http-parser",
        {
            "benchmark": "http-parser",
            "command": invocation("bench_http_parser", argv),
            "model": args.model,
            "rounds": rounds,
            "tables": {"http-parser": table(rounds)},
        },
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

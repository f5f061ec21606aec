"""Which CPU runtime defaults should the toolkit set? Times MiniLM training steps under each.

    python -m benchmarks.bench_cpu_runtime [--steps 12]

Each setting runs in fresh subprocesses (OpenMP reads its environment once, at start-up):
OMP_WAIT_POLICY unset (a user's shell) or PASSIVE, and 1 or all cores' worth of threads,
in fp32 and in bf16 autocast. Steps are batch 32 x 32 tokens, after 2 warm-up steps; the
median step time is reported with its speed-up over the unset/default-threads fp32 row.
``--concurrent 2`` runs two such trainings at once (as two data-parallel CPU processes, or a
second job on the machine, would), where threads compete for the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks.common import MINILM, print_table, save_results
from benchmarks.harness import REPO, module_command


def worker(steps: int, bf16: bool) -> list[float]:
    import torch
    from transformers import AutoModel

    from encoder_tasks.backbone import resolve_model_path

    model = AutoModel.from_pretrained(resolve_model_path(MINILM))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(1000, 20000, (32, 32))
    mask = torch.ones_like(ids)
    times = []
    for step in range(steps + 2):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        hidden.float().pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        if step >= 2:
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--concurrent", type=int, default=1, help="trainings running at once")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.steps, args.worker == "bf16")))
        return
    cores = os.cpu_count() or 1
    rows = []
    for precision in ("fp32", "bf16"):
        for policy in ("(unset)", "PASSIVE"):
            for threads in sorted({1, cores}):
                env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
                if policy != "(unset)":
                    env["OMP_WAIT_POLICY"] = policy
                env["OMP_NUM_THREADS"] = str(threads)
                cmd = module_command("bench_cpu_runtime", "--worker", precision, "--steps", str(args.steps))
                procs = [
                    subprocess.Popen(
                        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
                    )
                    for _ in range(args.concurrent)
                ]
                steps = []
                for proc in procs:
                    out, _ = proc.communicate()
                    if proc.returncode:
                        sys.exit(f"worker failed: {cmd}")
                    steps += json.loads(out.strip().splitlines()[-1])
                median = statistics.median(steps)
                rows.append(
                    {
                        "precision": precision,
                        "OMP_WAIT_POLICY": policy,
                        "threads": threads,
                        "median_step_s": median,
                    }
                )
                print(rows[-1], flush=True)
    base = next(
        r["median_step_s"]
        for r in rows
        if r["precision"] == "fp32" and r["OMP_WAIT_POLICY"] == "(unset)" and r["threads"] == cores
    )
    for row in rows:
        row["speedup"] = base / row["median_step_s"]
    print(f"\nMiniLM-L6 training step, batch 32 x 32 tokens, {cores} cores, {args.concurrent} at once")
    print_table(rows, ["precision", "OMP_WAIT_POLICY", "threads", "median_step_s", "speedup"])
    print("results:", save_results("cpu-runtime", {"concurrent": args.concurrent, "rows": rows}))


if __name__ == "__main__":
    main()

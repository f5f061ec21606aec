"""Which training options pay on this machine? torch.compile, fused AdamW, data-loader workers.

    OMP_WAIT_POLICY=PASSIVE python -m benchmarks.bench_training_options
    python -m benchmarks.bench_training_options --variants baseline,compile --train_samples 800

Each variant is ``encoder-tasks classification train`` with the SST-2 recipe's defaults plus
one change, in its own process, on the same seeded subset (MiniLM, seed 42):

- ``baseline``: the defaults (bf16 autocast where native, length-grouped batches);
- ``compile``: ``--torch_compile true`` (TorchInductor through the Trainer/Accelerate);
- ``fused-adamw``: ``--optim adamw_torch_fused``;
- ``workers-1``: ``--dataloader_num_workers 1`` (batches built in a second process);
- ``fp32``: ``--mixed_precision no``, for scale.

Reported: dev accuracy, real tokens/s over the whole run (what a user waits for, compilation
included) and in the steady state (from the toolkit's ``log.jsonl``: tokens and time between
the first logged step after ``--warmup_steps_skip`` and the last), each as a ratio to baseline.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from benchmarks.common import DATA, print_table, require_data, save_results, worker_env
from benchmarks.harness import REPO, module_command

VARIANTS = {
    "baseline": [],
    "compile": ["--torch_compile", "true"],
    "fused-adamw": ["--optim", "adamw_torch_fused"],
    "workers-1": ["--dataloader_num_workers", "1"],
    "fp32": ["--mixed_precision", "no"],
}


def worker(name: str, args) -> dict:
    from encoder_tasks.cli import main as cli

    out = Path(tempfile.mkdtemp()) / "run"
    argv = [
        "classification",
        "train",
        "--config",
        str(REPO / "recipes/classification/default.yaml"),
        "--data_dir",
        str(DATA),
        "--output_dir",
        str(out),
        "--max_train_samples",
        str(args.train_samples),
        "--num_train_epochs",
        str(args.epochs),
        "--seed",
        "42",
        "--save_strategy",
        "no",
        "--logging_steps",
        "5",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        *VARIANTS[name],
    ]
    if cli(argv) != 0:
        raise SystemExit(f"variant {name} failed")
    metrics = json.loads((out / "metrics.json").read_text())
    logs = [
        json.loads(line)
        for line in (out / "log.jsonl").read_text().splitlines()
        if '"num_input_tokens_seen"' in line and '"loss"' in line
    ]
    steady = [r for r in logs if r["step"] > args.warmup_steps_skip]
    steady_rate = None
    if len(steady) >= 2:
        first, last = steady[0], steady[-1]
        steady_rate = (last["num_input_tokens_seen"] - first["num_input_tokens_seen"]) / (
            last["time"] - first["time"]
        )
    runtime = metrics.get("train_train_runtime", metrics.get("train_runtime"))
    return {
        "accuracy": metrics["eval_accuracy"],
        "train_seconds": runtime,
        "real_tokens_per_s": metrics["train_real_tokens_per_second"],
        "steady_real_tokens_per_s": steady_rate,
        "steps": logs[-1]["step"] if logs else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--train_samples", type=int, default=1600)
    parser.add_argument("--epochs", type=float, default=1)
    parser.add_argument(
        "--warmup_steps_skip", type=int, default=10, help="steps left out of the steady state"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        Path(args.result).write_text(json.dumps(worker(args.worker, args)))
        return
    require_data("cls/sst2/train.tsv", "cls/sst2/dev.tsv")
    results = {}
    for name in args.variants.split(","):
        target = Path(tempfile.mkstemp(suffix=".json")[1])
        cmd = module_command("bench_training_options", "--worker", name, "--result", str(target))
        cmd += ["--train_samples", str(args.train_samples), "--epochs", str(args.epochs)]
        cmd += ["--warmup_steps_skip", str(args.warmup_steps_skip)]
        print(f"[bench] {name} ...", flush=True)
        done = subprocess.run(
            cmd, env=worker_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        if done.returncode != 0:
            results[name] = {
                "error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
            }
            continue
        results[name] = json.loads(target.read_text())
    base = results.get("baseline", {})
    rows = []
    for name, r in results.items():
        if "error" in r:
            rows.append({"variant": name, "accuracy": r["error"]})
            continue
        rows.append(
            {
                "variant": name,
                "accuracy": r["accuracy"],
                "train_s": r["train_seconds"],
                "tok/s": r["real_tokens_per_s"],
                "x_base": r["real_tokens_per_s"] / base["real_tokens_per_s"]
                if "real_tokens_per_s" in base
                else None,
                "steady_tok/s": r["steady_real_tokens_per_s"],
                "steady_x_base": (
                    r["steady_real_tokens_per_s"] / base["steady_real_tokens_per_s"]
                    if base.get("steady_real_tokens_per_s") and r["steady_real_tokens_per_s"]
                    else None
                ),
            }
        )
    print(
        f"\nSST-2, {args.train_samples} sentences x {args.epochs} epoch(s), toolkit defaults plus one change"
    )
    print_table(rows, ["variant", "accuracy", "train_s", "tok/s", "x_base", "steady_tok/s", "steady_x_base"])
    print("results:", save_results("training-options", {"args": vars(args), "results": results}))


if __name__ == "__main__":
    main()

"""Every task in one invocation: encoder-tasks vs the stock transformers Trainer, one table.

    python benchmarks/bench_all.py                      # standard sizes, every task (~35 min here)
    python benchmarks/bench_all.py --size quick         # a smoke run of the same pipeline (~6 min)
    python benchmarks/bench_all.py --tasks ner,qa --user_env none

For each task it runs, each in its own process (so thread and OpenMP settings are its own),
on the MiniLM package model and the real data in ``../shared/data``, with the same data
subset, epochs and seed:

- ``toolkit``: the toolkit's defaults (bf16 autocast where the CPU runs it natively, length-
  grouped batches, its predict path), in the environment as the user has it. The toolkit sets
  ``OMP_WAIT_POLICY=PASSIVE`` itself where the user has not chosen (encoder_tasks.runtime).
- ``stock``: ``AutoModelFor*`` + ``transformers.Trainer`` as the official example script
  configures it (run_glue, run_ner, run_qa, run_mlm; see each task's benchmark script), with
  the same tuned environment (``OMP_WAIT_POLICY=PASSIVE``): the toolkit is credited only for
  what it does itself.
- ``stock (user env)``: the same stock run with the wait policy unset, as a fresh shell has it.

Columns: the task's metric for each contender; real (non-padding) tokens per second for
training and for prediction (each contender's own predict path: the toolkit's ``predict`` or
evaluation, the stock Trainer's ``predict``/``evaluate``) and their ratio to the tuned stock
run; model FLOP utilisation (encoder FLOPs per real token, the same formula for everyone)
against a matrix-multiply peak measured in the same process in the precision the contender
computes in; peak resident memory. Classification also compares the toolkit's ``predict``
with ``transformers.pipeline`` on the same dev sentences.

Each task's own script (bench_<task>.py) holds its contenders; this one calls their worker
functions with a shared size table, so the two always measure the same thing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from argparse import Namespace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import environment, print_table, require_data, save_results, worker_env  # noqa: E402

#: task -> size -> settings handed to that task's workers
SIZES = {
    "classification": {
        "quick": {"train_samples": 200, "epochs": 1},
        "standard": {"train_samples": 2000, "epochs": 2},
    },
    "ner": {"quick": {"limit": 150, "epochs": 1}, "standard": {"limit": None, "epochs": 2}},
    "qa": {
        "quick": {"train_samples": 60, "eval_samples": 40, "epochs": 1},
        "standard": {"train_samples": 500, "eval_samples": 300, "epochs": 1},
    },
    "pair": {
        "quick": {"train_samples": 200, "test_samples": 200, "epochs": 1},
        "standard": {"train_samples": 2000, "test_samples": None, "epochs": 2},
    },
    "mlm": {
        "quick": {"train_docs": 30, "eval_docs": 10, "epochs": 1},
        "standard": {"train_docs": 200, "eval_docs": 60, "epochs": 1},
    },
}
DATASETS = {
    "classification": ("SST-2 -> dev 872", ["cls/sst2/train.tsv", "cls/sst2/dev.tsv"]),
    "ner": ("WNUT-17 -> dev", ["ner/wnut17/wnut17train.conll", "ner/wnut17/emerging.dev.conll"]),
    "qa": ("SQuADShifts -> XQuAD-en", ["qa/squadshifts", "qa/xquad-en-dev/xquad.en.articles00-23.json"]),
    "pair": ("STS-B -> test", ["pair/stsb/sts-train.csv", "pair/stsb/sts-test.csv"]),
    "mlm": ("WikiText-2 held-out docs", ["mlm/wikitext-2/valid.txt"]),
}
CONTENDERS = ("toolkit", "stock", "stock-user-env")
SEED = 42


# ---- workers: one contender of one task, in its own process --------------------------------------
def run_contender(task: str, contender: str, size: str) -> dict:
    """Call the task script's worker for ``contender`` with this size's settings."""
    settings = SIZES[task][size]
    stock = contender.startswith("stock")
    if task == "classification":
        from benchmarks import bench_classification as bench

        args = Namespace(seed=SEED, worker="stock-padded" if stock else "toolkit", **settings)
        return bench.worker_stock(args) if stock else bench.worker_toolkit(args)
    if task == "ner":
        from benchmarks import bench_ner as bench

        args = Namespace(seed=SEED, dataset="wnut17", worker="stock" if stock else "toolkit", **settings)
        return bench.worker_stock(args) if stock else bench.worker_toolkit(args)
    if task == "qa":
        from benchmarks import bench_qa as bench

        args = Namespace(
            seed=SEED,
            worker="stock" if stock else "toolkit-bf16",  # toolkit-bf16: the toolkit's default precision
            model=bench.MINILM,
            batch_size=16,
            learning_rate=1e-4,
            max_seq_length=384,
            doc_stride=128,
            **settings,
        )
        bench.ARGS.max_seq_length, bench.ARGS.doc_stride = args.max_seq_length, args.doc_stride
        suite = bench.SUITES["v1"]
        return bench.worker_stock(suite, args) if stock else bench.worker_toolkit(suite, args)
    if task == "pair":
        from benchmarks import bench_pair as bench

        args = Namespace(seed=SEED, bi_epochs=1, worker="stock" if stock else "toolkit", **settings)
        return bench.worker_stock(args) if stock else bench.worker_toolkit(args)
    if task == "mlm":
        from benchmarks import bench_mlm as bench
        from encoder_tasks.backbone import load_tokenizer

        work = Path(tempfile.mkdtemp(prefix="bench-all-mlm-"))
        train_path, eval_path = bench.wikitext_split(work, settings["train_docs"], settings["eval_docs"])
        eval_batches = bench.fixed_mask_batches(load_tokenizer(bench.MINILM), eval_path)
        args = Namespace(seed=SEED, batch_size=16, learning_rate=1e-4, epochs=settings["epochs"])
        if stock:
            return bench.run_stock(train_path, eval_path, work / "stock", args, eval_batches)
        return bench.run_toolkit(train_path, eval_path, work / "toolkit", args, eval_batches)
    raise ValueError(f"unknown task {task!r}")


def launch(task: str, contender: str, size: str, verbose: bool) -> dict:
    """One contender in a fresh process with its environment; returns its result or an error."""
    env = worker_env(user_env=contender in ("toolkit", "stock-user-env"))
    result_file = Path(tempfile.mkstemp(suffix=".json")[1])
    log = result_file.with_suffix(".log")
    cmd = [sys.executable, __file__, "--worker", f"{task}:{contender}", "--size", size]
    cmd += ["--result", str(result_file)]
    print(f"[bench_all] {task}: {contender} (log: {log}) ...", flush=True)
    start = time.perf_counter()
    with log.open("w") as output:
        sink = None if verbose else output
        done = subprocess.run(cmd, env=env, stdout=sink, stderr=sink)
    if done.returncode != 0:
        print(log.read_text()[-3000:] if not verbose else "", file=sys.stderr)
        return {"error": f"exit status {done.returncode}, see {log}"}
    result = json.loads(result_file.read_text())
    result["wall_seconds"] = time.perf_counter() - start
    result["OMP_WAIT_POLICY"] = env.get("OMP_WAIT_POLICY", "(unset)")
    return result


# ---- the table ---------------------------------------------------------------------------------
def table_rows(results: dict) -> list[dict]:
    rows = []
    for task, by_contender in results.items():
        base = by_contender.get("stock", {})
        for contender, r in by_contender.items():
            if "error" in r:
                rows.append({"task": task, "contender": contender, "metric": r["error"]})
                continue

            def ratio(key, r=r, base=base):
                return r[key] / base[key] if base.get(key) else None

            rows.append(
                {
                    "task": task,
                    "contender": contender,
                    "env": "PASSIVE" if r["OMP_WAIT_POLICY"] == "PASSIVE" else "user",
                    "precision": r.get("precision"),
                    "metric": f"{r['metric_name']} {r['metric']:.4f}",
                    "train_tok/s": r["train_real_tokens_per_s"],
                    "train_x": ratio("train_real_tokens_per_s"),
                    "predict_tok/s": r["predict_real_tokens_per_s"],
                    "predict_x": ratio("predict_real_tokens_per_s"),
                    "train_MFU": r["train_mfu"],
                    "peak_GFLOP/s": r["matmul_peak_gflops"],
                    "peak_RSS_MiB": r["peak_rss_mib"],
                }
            )
    return rows


def pipeline_rows(results: dict) -> list[dict]:
    """Classification: the toolkit's predict vs transformers.pipeline on the same dev sentences.

    The pipeline runs on the toolkit's own trained model (same weights), so the labels can be
    compared one to one; the stock model through the pipeline is shown for reference.
    """
    by = results.get("classification", {})
    toolkit, stock = by.get("toolkit", {}), by.get("stock", {})
    if "pipeline_same_model_real_tokens_per_s" not in toolkit:
        return []
    base = toolkit["pipeline_same_model_real_tokens_per_s"]
    rows = [
        {
            "predictor": "toolkit predict (bf16 autocast, batches of 64)",
            "real_tok/s": toolkit["predict_real_tokens_per_s"],
            "x_pipeline": toolkit["predict_real_tokens_per_s"] / base,
            "same_labels": toolkit["label_agreement_with_pipeline"],
        },
        {
            "predictor": "toolkit predict --precision fp32 (labels only)",
            "same_labels": toolkit["label_agreement_with_pipeline_fp32"],
        },
        {"predictor": "transformers.pipeline, toolkit model", "real_tok/s": base, "x_pipeline": 1.0},
    ]
    if "pipeline_real_tokens_per_s" in stock:
        rows.append(
            {
                "predictor": "transformers.pipeline, stock model",
                "real_tok/s": stock["pipeline_real_tokens_per_s"],
                "x_pipeline": stock["pipeline_real_tokens_per_s"] / base,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tasks", default=",".join(SIZES), help="comma-separated subset of: " + ", ".join(SIZES)
    )
    parser.add_argument("--size", choices=("quick", "standard"), default="standard")
    parser.add_argument(
        "--user_env",
        default="all",
        help="tasks that also run the stock Trainer with the wait policy unset: all, none, or a list",
    )
    parser.add_argument("--verbose", action="store_true", help="show the contenders' own output")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        task, contender = args.worker.split(":")
        if contender == "toolkit":
            # What the encoder-tasks CLI does before torch loads: its runtime defaults where the
            # user has not chosen (OMP_WAIT_POLICY=PASSIVE).
            from encoder_tasks.runtime import configure_cpu_runtime

            configure_cpu_runtime()
        # torch next: OpenMP reads its wait policy when torch loads, so nothing imported later
        # (bench_mlm applies the toolkit's defaults on import) changes a stock run's environment.
        import torch  # noqa: F401

        result = run_contender(task, contender, args.size)
        Path(args.result).write_text(json.dumps(result, default=str))
        return
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = sorted(set(tasks) - set(SIZES))
    if unknown:
        sys.exit(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(SIZES)}")
    user_env = (
        set(tasks)
        if args.user_env == "all"
        else set()
        if args.user_env == "none"
        else set(args.user_env.split(","))
    )
    for task in tasks:
        require_data(*DATASETS[task][1])
    begin = time.perf_counter()
    results: dict = {}
    partial = Path(tempfile.gettempdir()) / "bench_all_partial.json"
    for task in tasks:
        results[task] = {}
        for contender in CONTENDERS:
            if contender == "stock-user-env" and task not in user_env:
                continue
            results[task][contender] = launch(task, contender, args.size, args.verbose)
            partial.write_text(json.dumps(results, indent=2, default=str))  # survive a later failure
    rows = table_rows(results)
    print(f"\nencoder-tasks vs stock Trainer, MiniLM-L6, size {args.size}, seed {SEED}")
    for task in tasks:
        print(f"  {task}: {DATASETS[task][0]}, {SIZES[task][args.size]}")
    print()
    print_table(rows, list(rows[0]) if rows else [])
    pipe = pipeline_rows(results)
    if pipe:
        print("\nprediction, SST-2 dev (872 sentences): toolkit predict vs transformers.pipeline")
        print_table(pipe, ["predictor", "real_tok/s", "x_pipeline", "same_labels"])
    slim = {
        t: {c: {k: v for k, v in r.items() if k != "predicted_labels"} for c, r in by.items()}
        for t, by in results.items()
    }
    path = save_results(
        "all",
        {
            "command": " ".join(sys.argv),
            "size": args.size,
            "sizes": {t: SIZES[t][args.size] for t in tasks},
            "rows": rows,
            "pipeline": pipe,
            "results": slim,
            "total_seconds": time.perf_counter() - begin,
        },
    )
    print(f"\nresults: {path}\nenvironment: {environment()}")


if __name__ == "__main__":
    main()

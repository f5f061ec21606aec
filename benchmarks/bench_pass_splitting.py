"""What cutting a batch of mixed lengths into passes of like lengths gains on a CPU, per backend.

A served batch is the requests that arrived together: a handful of texts of unrelated lengths,
one forward pass padded to the longest (16 random STS-B dev sentences carry 1.96x their real tokens).
``encoder_tasks.predict.length_sorted_batches(..., pass_cost=N)`` cuts each batch into the
passes that cost least when a pass costs N padded tokens; ``run_batches`` does so on a CPU with
``CPU_PASS_COST_TOKENS``. This benchmark chose that number: all-MiniLM-L6-v2 embedding groups
of 16 and 32 random STS-B **dev** sentences (the toolkit's ``encode_texts``, batch size 64, so
without splitting each group is one pass), under torch fp32, ONNX Runtime fp32, OpenVINO fp32 and ``quantize``'s
OpenVINO static int8 copy; every pass cost is timed on the same group one after the other,
group by group (the order reversed every other group), so the machine's drift hits all alike.

    python -m benchmarks.bench_pass_splitting            # the committed run: about 6 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bench_cpu_inference import TOOLKIT_CLI, calibration_file, data_dir, read_stsb
from benchmarks.common import minilm_path, print_table, save_results
from benchmarks.harness import describe, invocation

STSB_DEV = Path("pair") / "stsb" / "sts-dev.csv"
PASS_COSTS = (None, 8, 16, 32, 64)  # None: one pass per group (no splitting)
GROUPS = (16, 32)


def int8_copy(model: str, work: Path, data: Path) -> str:
    """``encoder-tasks quantize`` of ``model`` at its defaults, calibrated on the STS-B train
    sentences ``bench_cpu_inference`` calibrates its int8 rows on."""
    dest = work / "int8"
    if not (dest / "config.json").is_file():
        work.mkdir(parents=True, exist_ok=True)
        calibration = calibration_file({"work": work, "data": data})
        command = [
            sys.executable,
            "-c",
            TOOLKIT_CLI,
            "quantize",
            model,
            str(dest),
            "--calibration_file",
            calibration,
        ]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return str(dest)


def token_lengths(tokenizer, groups: list[list[str]]) -> list[list[int]]:
    """Each group's token counts, as ``encode_texts`` reads them."""
    return [[len(ids) for ids in tokenizer(group)["input_ids"]] for group in groups]


def group_times(predictor, groups: list[list[str]], costs=PASS_COSTS) -> dict:
    """Seconds per pass cost over ``groups``, every cost run on each group in turn."""
    from encoder_tasks import predict
    from encoder_tasks.tasks.embedding.model import encode_texts

    plain = predict.length_sorted_batches
    seconds = dict.fromkeys(costs, 0.0)
    try:
        for number, group in enumerate([groups[0], *groups]):  # the first group: a warm-up
            for cost in costs if number % 2 else costs[::-1]:

                def batches(lengths, batch_size, _pass_cost=None, cost=cost):
                    return plain(lengths, batch_size, cost)

                predict.length_sorted_batches = batches
                start = time.perf_counter()
                encode_texts(predictor.model, predictor.tokenizer, group, batch_size=64, disable_tqdm=True)
                if number:
                    seconds[cost] += time.perf_counter() - start
    finally:
        predict.length_sorted_batches = plain
    return {"seconds": seconds}


def passes_and_padding(lengths: list[list[int]], cost) -> tuple[int, int, int]:
    """(passes, real tokens, padded tokens) of groups with these token ``lengths`` cut with pass
    cost ``cost``, as ``run_batches`` cuts them at batch size 64.

    Example:
        >>> passes_and_padding([[40, 8, 9, 41]], None), passes_and_padding([[40, 8, 9, 41]], 16)
        ((1, 98, 164), (2, 98, 100))
    """
    from encoder_tasks.predict import length_sorted_batches

    passes = real = padded = 0
    for group in lengths:
        cut = length_sorted_batches(group, 64, cost)
        passes += len(cut)
        real += sum(group)
        padded += sum(len(p) * max(group[i] for i in p) for p in cut)
    return passes, real, padded


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=1280, help="Dev sentences per group size.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-pass-splitting"))
    parser.add_argument("--data", default=None)
    parser.add_argument("--backends", default=None, help="Comma-separated names (default: all).")
    parser.add_argument("--costs", default=None, help="Comma-separated pass costs, 'none' for one pass.")
    args = parser.parse_args(argv)
    costs = PASS_COSTS
    if args.costs:
        costs = tuple(None if c.strip() == "none" else int(c) for c in args.costs.split(","))
        costs = (None, *[c for c in costs if c is not None])  # one pass: every row's baseline
    from encoder_tasks.inference import Predictor

    data = data_dir(args.data)
    sentences, _, _ = read_stsb(data / STSB_DEV)
    random.Random(0).shuffle(sentences)
    sentences = sentences[: args.sentences]
    model = str(minilm_path())
    backends = {
        "torch fp32": (model, {"backend": "torch", "precision": "fp32"}),
        "onnx fp32": (model, {"backend": "onnx"}),
        "openvino fp32": (model, {"backend": "openvino"}),
        "openvino int8 (quantize)": (int8_copy(model, args.work, data), {}),
    }
    results, rows = {}, []
    chosen = args.backends.split(",") if args.backends else list(backends)
    for name in chosen:
        folder, flags = backends[name]
        predictor = Predictor.load(folder, **flags)
        for size in GROUPS:
            groups = [sentences[i : i + size] for i in range(0, len(sentences) - size + 1, size)]
            timed = group_times(predictor, groups, costs)
            lengths = token_lengths(predictor.tokenizer, groups)
            timed["passes"] = {cost: passes_and_padding(lengths, cost)[0] for cost in costs}
            results[f"{name}, groups of {size}"] = timed
            count = len(groups) * size
            for cost in costs:
                _, real, padded = passes_and_padding(lengths, cost)
                rate = count / timed["seconds"][cost]
                rows.append({
                    "backend": name, "group": size, "pass_cost": "none" if cost is None else cost,
                    "passes_per_group": timed["passes"][cost] / len(groups), "padded_x_real": padded / real,
                    "sentences_per_s": rate, "speedup": timed["seconds"][None] / timed["seconds"][cost],
                })  # fmt: skip
            print_table(rows[-len(costs) :], list(rows[0]))
    table = {
        "columns": ["backend", "texts per batch", "pass cost (tokens)", "passes per batch",
                    "padded / real tokens", "sentences/s", "x one pass"],
        "rows": [[r["backend"], str(r["group"]), str(r["pass_cost"]), f"{r['passes_per_group']:.2f}",
                  f"{r['padded_x_real']:.2f}", f"{r['sentences_per_s']:.1f}", f"{r['speedup']:.2f}x"]
                 for r in rows],
    }  # fmt: skip
    path = save_results(
        "pass-splitting",
        {"command": invocation("bench_pass_splitting", argv), "machine": describe(),
         "sentences": len(sentences), "data": str(STSB_DEV), "results": {k: {"seconds": {str(c): s for c, s in v["seconds"].items()}, "passes": {str(c): p for c, p in v["passes"].items()}} for k, v in results.items()},
         "tables": {"pass-splitting": table}},
    )  # fmt: skip
    print(f"saved {path}")


if __name__ == "__main__":
    main()

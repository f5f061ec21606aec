"""What padding every batch to a multiple of 8 costs a training step, task by task, on this device.

``--pad_to_multiple_of auto`` pads to 8 on an accelerator and in bf16 (matrix units work on
multiples of 8) and to the longest text only for fp32 on a CPU. This benchmark is the CPU half
of that choice: for classification (SST-2), NER (WikiANN-en) and pair (STS-B), the task's own
data, collator and head on MiniLM, training batches of 16 drawn as the Trainer's default
length-grouped sampler draws them, each batch collated both ways; forward + backward of the two
variants interleaved batch by batch (one untimed warm-up round), so they share the machine's
state. The embedding task's row is ``bench_embedding_contenders --phase padding``.

    python -m benchmarks.bench_padding --batches 40   # the committed run: about 4 minutes on 2 cores
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.common import interleaved_seconds, minilm_path, print_table, save_results
from benchmarks.harness import invocation

BATCH = 16
VARIANTS = {"multiple of 8": 8, "longest text": None}


def task_data(task: str, work: Path):
    """``(encoder_tasks.api.prepare(...) result, the model's path, suite description)`` for one
    suite task, read with the suite's own split files and reading flags."""
    from benchmarks.suite import classification, ner, pair
    from encoder_tasks.api.blocks import prepare

    module, reading = {
        "classification": (classification, classification.SST2.toolkit_flags),
        "ner": (ner, ()),
        "pair": (pair, pair.STSB.toolkit_flags),
    }[task]
    flags = {name.lstrip("-"): value for name, value in zip(reading[::2], reading[1::2])}
    path = minilm_path()
    files = module.splits("standard", work)
    data = prepare(task, path, train_file=str(files["train"]), max_length=module.MAX_LENGTH, **flags)
    return data, path, module.DATASET


def grouped_batches(dataset, batches: int, seed: int = 42) -> list[list[int]]:
    """The first ``batches`` batches of 16 that transformers' length-grouped sampler (the
    toolkit's default ``group_by_length``) draws from ``dataset`` with ``seed``."""
    import torch
    from transformers.trainer_pt_utils import LengthGroupedSampler

    lengths = [len(ids) for ids in dataset["input_ids"]]
    order = list(LengthGroupedSampler(BATCH, lengths=lengths, generator=torch.Generator().manual_seed(seed)))
    return [order[i : i + BATCH] for i in range(0, BATCH * batches, BATCH)]


def task_times(task: str, work: Path, batches: int) -> dict:
    """Forward + backward of ``task``'s head on the same batches collated to a multiple of 8 and
    to the longest text, interleaved; median and total seconds and tokens per variant."""
    from encoder_tasks.backbone import load_encoder

    data, path, dataset = task_data(task, work)
    model = data.build_model(load_encoder(path)).train()
    rows = [[data.train[i] for i in batch] for batch in grouped_batches(data.train, batches)]
    collated = {
        name: [data.collator(multiple)(features) for features in rows] for name, multiple in VARIANTS.items()
    }

    def step(name):
        def run(i):
            model(**collated[name][i]).loss.backward()
            model.zero_grad(set_to_none=True)

        return run

    timed = interleaved_seconds({name: step(name) for name in VARIANTS}, range(len(rows)))
    for name, value in timed.items():
        value["tokens"] = sum(int(b["input_ids"].numel()) for b in collated[name])
    return {"dataset": dataset, **timed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="classification,ner,pair")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-padding"))
    args = parser.parse_args()
    results, rows = {}, []
    for task in args.tasks.split(","):
        results[task] = task_times(task, args.work, args.batches)
        eight, longest = results[task]["multiple of 8"], results[task]["longest text"]
        rows.append({
            "task": task,
            "tokens_8": eight["tokens"],
            "tokens_longest": longest["tokens"],
            "extra_tokens_pct": 100 * (eight["tokens"] / longest["tokens"] - 1),
            "seconds_8": eight["total_seconds"],
            "seconds_longest": longest["total_seconds"],
            "extra_time_pct": 100 * (eight["total_seconds"] / longest["total_seconds"] - 1),
        })  # fmt: skip
    columns = list(rows[0])
    print_table(rows, columns)
    table = {
        "columns": ["task (batches of 16, length-grouped)", "tokens, multiple of 8", "tokens, longest text",
                    "extra tokens", "seconds, multiple of 8", "seconds, longest text", "extra time"],
        "rows": [[r["task"], str(r["tokens_8"]), str(r["tokens_longest"]), f"{r['extra_tokens_pct']:+.1f}%",
                  f"{r['seconds_8']:.2f}", f"{r['seconds_longest']:.2f}", f"{r['extra_time_pct']:+.1f}%"]
                 for r in rows],
    }  # fmt: skip
    path = save_results("padding", {"command": invocation("bench_padding"), "batch": BATCH,
                                    "tasks": results, "tables": {"padding": table}})  # fmt: skip
    print(f"saved {path}")


if __name__ == "__main__":
    main()

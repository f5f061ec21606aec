"""How many duplicate-free batches each trainer makes of the retrieval benchmark's mined rows, and
how many rows the batches it trains hold (issue 29: why the GradCache rows' step counts differ).

    python -m benchmarks.bench_sampler_batches                 # en and zh, seeds 42-44, batch 128

Reads ``bench_retrieval``'s ``mined-n-tuple.jsonl`` (question, passage, one mined negative) under
``--work`` (run ``bench_retrieval_st --size standard`` first). Counts, no training:

- the toolkit's :class:`~encoder_tasks.tasks.embedding.samplers.DuplicateFreeBatchSampler`
  (every batch is trained), on each row's three texts;
- sentence-transformers' ``NoDuplicatesBatchSampler`` as its trainer builds it (its seed and a
  generator), the batches it yields and how many of them its trainer trains (``len()``, the steps
  its schedule plans), with the rows those hold;
- the most rows one text is in (a duplicate-free epoch has at least that many batches);
- what if a row's *negative* may repeat as another row's negative (its positive still in no other
  row of the batch): the batches the same greedy fill would make. Nothing trains that way.

Result: ``benchmarks/results/sampler-batches-<time>.json``.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

from benchmarks import bench_retrieval_st
from benchmarks.common import save_results


def toolkit_batches(rows: list[dict], batch: int, seed: int) -> list[int]:
    from encoder_tasks.tasks.embedding.samplers import DuplicateFreeBatchSampler

    keys = [tuple(row.values()) for row in rows]
    return [len(b) for b in DuplicateFreeBatchSampler(keys, batch, seed=seed).global_batches(0)]


def st_batches(dataset, batch: int, seed: int) -> tuple[list[int], int]:
    """The sizes of the batches sentence-transformers' sampler yields of ``dataset``, and its ``len()``."""
    import torch
    from sentence_transformers.base.sampler import NoDuplicatesBatchSampler

    sampler = NoDuplicatesBatchSampler(
        dataset, batch_size=batch, drop_last=False, generator=torch.Generator(), seed=seed
    )
    return [len(b) for b in sampler], len(sampler)


def shared_negative_batches(rows: list[dict], batch: int, seed: int) -> list[int]:
    """The greedy fill when negatives may repeat between rows (a positive may not)."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    sizes, remaining = [], order
    while remaining:
        taken, positives, texts, skipped = 0, set(), set(), []
        for index in remaining:
            query, positive, negative = (
                rows[index]["query"],
                rows[index]["positive"],
                rows[index]["negative_1"],
            )
            if taken < batch and positive not in texts and negative not in positives and query not in texts:
                taken += 1
                positives.add(positive)
                texts.update((query, positive, negative))
            else:
                skipped.append(index)
        sizes.append(taken)
        remaining = skipped
    return sizes


def count(work: Path, lang: str, batch: int, seeds: list[int]) -> dict:
    dataset = bench_retrieval_st.read_rows(work / lang / "mined-n-tuple.jsonl")  # what its trainer reads
    rows = dataset.to_list()
    shared = Counter(text for row in rows for text in set(row.values()))
    out = {"rows": len(rows), "most_rows_sharing_one_text": max(shared.values()), "seeds": {}}
    for seed in seeds:
        yielded, planned = st_batches(dataset, batch, seed)
        out["seeds"][seed] = {
            "toolkit_batches": toolkit_batches(rows, batch, seed),
            "st_batches_yielded": yielded,
            "st_steps_trained": planned,
            "st_rows_trained": sum(yielded[:planned]),
            "shared_negatives_batches": shared_negative_batches(rows, batch, seed),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/bench-retrieval-standard")
    parser.add_argument("--langs", default="en,zh")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--seeds", default="42,43,44")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {lang: count(Path(args.work), lang, args.batch, seeds) for lang in args.langs.split(",")}
    for lang, r in results.items():
        for seed, s in r["seeds"].items():
            print(f"{lang} seed {seed}: toolkit {len(s['toolkit_batches'])} batches, sentence-transformers "
                  f"{s['st_steps_trained']} steps of {len(s['st_batches_yielded'])} ({s['st_rows_trained']} rows), "
                  f"shared negatives {len(s['shared_negatives_batches'])}")  # fmt: skip
    path = save_results("sampler-batches", {"batch": args.batch, "results": results})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

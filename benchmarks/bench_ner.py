"""NER: encoder-tasks vs the stock transformers token-classification Trainer, side by side.

    flock /tmp/encoder-tasks-heavy.lock env OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/bench_ner.py
    .venv/bin/python benchmarks/bench_ner.py --runs wnut17:toolkit,wnut17:stock --epochs 1

Runs (each in its own subprocess; per dataset all use MiniLM, the same seeded training
subset, the same evaluation sentences, epochs, batch size, learning rate and seed):

- ``stock``: AutoModelForTokenClassification + DataCollatorForTokenClassification + Trainer
  as ``run_ner.py`` configures them (first sub-token labelled, the rest -100; labels as the
  data spells them, BMES included; inputs truncated at max_length; no warm-up; argmax).
- ``toolkit``: ``encoder-tasks ner train`` with the dataset's recipe and its defaults
  (softmax head, constrained Viterbi, head learning rate, windows, vocabulary extension).
- ``toolkit-crf``: the same with ``--crf``.

Scoring is the same for every run: seqeval on every word of every evaluation sentence
(words a truncating run never saw count as ``O``), strict (IOB2, or IOBES for BMES data
with M read as I) and lenient (seqeval's default). Real tokens/s = non-padding training
tokens (all epochs) / training time.
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
    require_data,
    save_results,
    speed_fields,
    toolkit_precision,
    worker_env,
)

REPO = Path(__file__).resolve().parent.parent
MAX_LEN = 128
BATCH = 16
LR = 5e-5

#: dataset -> (recipe, train file, eval file, token prefix, train sentences, eval sentences)
DATASETS = {
    "wnut17": (
        "recipes/ner/default.yaml",
        "ner/wnut17/wnut17train.conll",
        "ner/wnut17/emerging.dev.conll",
        None,
        1000,
        1009,
    ),
    "wikiann-en": (
        "recipes/ner/wikiann-en.yaml",
        "ner/wikiann-en/train",
        "ner/wikiann-en/dev",
        "en:",
        1500,
        1000,
    ),
    "resume-zh": (
        "recipes/ner/resume-zh.yaml",
        "ner/resume-zh/train.char.bmes",
        "ner/resume-zh/dev.char.bmes",
        None,
        700,
        463,
    ),
}
DEFAULT_RUNS = ",".join(
    f"{dataset}:{contender}"
    for dataset in ("wnut17", "wikiann-en", "resume-zh")
    for contender in ("stock", "toolkit", "toolkit-crf")
)


def sizes(dataset: str, limit: int | None) -> tuple[int, int]:
    """Training and evaluation sentences (``--limit`` caps both, for a smoke run)."""
    n_train, n_eval = DATASETS[dataset][4:]
    return (min(n_train, limit), min(n_eval, limit)) if limit else (n_train, n_eval)


def load(dataset: str, seed: int, limit: int | None = None):
    """The seeded training subset and the evaluation sentences (tokens, tags), as run.py picks them."""
    from encoder_tasks.tasks.ner.conll import read_conll

    _, train_file, eval_file, prefix, _, _ = DATASETS[dataset]
    n_train, n_eval = sizes(dataset, limit)
    train = read_conll(DATA / train_file).shuffle(seed=seed).select(range(n_train))
    dev = read_conll(DATA / eval_file).select(range(n_eval))

    def strip(rows):
        tokens = [
            [t[len(prefix) :] if prefix and t.startswith(prefix) else t for t in s] for s in rows["tokens"]
        ]
        return tokens, rows["tags"]

    return strip(train), strip(dev)


def score(references: list[list[str]], predictions: list[list[str]]) -> dict:
    """Strict and lenient seqeval F1 in the data's own scheme (BMES read as IOBES)."""
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2, IOBES

    def as_iobes(seqs):
        return [[("I" + t[1:]) if t.startswith("M-") else t for t in s] for s in seqs]

    bmes = any(t.startswith(("M-", "E-", "S-")) for s in references for t in s)
    ref, pred = (as_iobes(references), as_iobes(predictions)) if bmes else (references, predictions)
    return {
        "f1_strict": float(
            f1_score(ref, pred, mode="strict", scheme=IOBES if bmes else IOB2, zero_division=0)
        ),
        "f1_lenient": float(f1_score(ref, pred, zero_division=0)),
    }


def worker_stock(args) -> dict:
    import datasets
    import numpy as np
    from transformers import (
        AutoModelForTokenClassification,
        AutoTokenizer,
        DataCollatorForTokenClassification,
        Trainer,
        TrainingArguments,
    )

    from encoder_tasks.backbone import resolve_model_path

    (train_tokens, train_tags), (dev_tokens, dev_tags) = load(args.dataset, args.seed, args.limit)
    path = resolve_model_path(MINILM)
    tokenizer = AutoTokenizer.from_pretrained(path)
    label_list = sorted({t for tags in train_tags for t in tags})  # run_ner.get_label_list
    label_to_id = {name: i for i, name in enumerate(label_list)}

    def tokenize_and_align(tokens, tags):
        enc = tokenizer(tokens, padding=False, truncation=True, max_length=MAX_LEN, is_split_into_words=True)
        labels = []
        for i, word_tags in enumerate(tags):
            previous, row = None, []
            for word in enc.word_ids(i):
                if word is None or word == previous:
                    row.append(-100)
                else:
                    row.append(label_to_id.get(word_tags[word], -100))
                previous = word
            labels.append(row)
        word_ids = [enc.word_ids(i) for i in range(len(tokens))]
        enc["labels"] = labels
        return datasets.Dataset.from_dict(dict(enc)), word_ids

    train_enc, _ = tokenize_and_align(train_tokens, train_tags)
    dev_enc, dev_word_ids = tokenize_and_align(dev_tokens, dev_tags)
    # As the example scripts do: seed before the model, whose new head is drawn at random.
    from transformers import set_seed

    set_seed(args.seed)
    model = AutoModelForTokenClassification.from_pretrained(
        path, num_labels=len(label_list), id2label=dict(enumerate(label_list)), label2id=label_to_id
    )
    targs = TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=64,
        learning_rate=LR,
        seed=args.seed,
        save_strategy="no",
        report_to="none",
        logging_steps=500,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=targs,
        train_dataset=train_enc,
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenClassification(tokenizer),
    )
    peak = matmul_peak_flops("fp32")
    result = trainer.train()
    start = time.perf_counter()
    output = trainer.predict(dev_enc)  # run_ner.py's --do_predict
    predict_s = time.perf_counter() - start
    best = np.argmax(output.predictions, axis=-1)
    predictions = []
    for i, gold in enumerate(dev_tags):
        # First sub-token of each word the truncated input kept; words cut off are predicted O.
        words = ["O"] * len(gold)
        previous = None
        for position, word in enumerate(dev_word_ids[i]):
            if word is not None and word != previous:
                words[word] = label_list[int(best[i, position])]
            previous = word
        predictions.append(words)
    train_real = sum(sum(m) for m in train_enc["attention_mask"])
    dev_real = sum(sum(m) for m in dev_enc["attention_mask"])
    runtime = result.metrics["train_runtime"]
    scores = score(dev_tags, predictions)
    return {
        **scores,
        "metric_name": "strict F1",
        "metric": scores["f1_strict"],
        "precision": "fp32",
        "train_seconds": runtime,
        **speed_fields(
            "train", train_real * args.epochs, runtime, model.config, train_real / len(train_enc), peak
        ),
        **speed_fields("predict", dev_real, predict_s, model.config, dev_real / len(dev_enc), peak),
        "labels": len(label_list),
        "peak_rss_mib": peak_rss_mib(),
        "matmul_peak_gflops": peak / 1e9,
    }


def worker_toolkit(args) -> dict:
    from encoder_tasks import run
    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.config import DataArguments, ModelArguments, parse_args
    from encoder_tasks.tasks.ner import NerArguments
    from encoder_tasks.tasks.ner.model import TokenTagger
    from encoder_tasks.tasks.ner.predict import predict_sentences
    from encoder_tasks.tasks.ner.schemes import from_iob2
    from encoder_tasks.training_args import EncoderTrainingArguments

    recipe = DATASETS[args.dataset][0]
    n_train, n_eval = sizes(args.dataset, args.limit)
    out = Path(tempfile.mkdtemp()) / "run"
    flags = [
        "--config", str(REPO / recipe),
        "--data_dir", str(DATA),
        "--output_dir", str(out),
        "--max_length", str(MAX_LEN),
        "--max_train_samples", str(n_train),
        "--max_eval_samples", str(n_eval),
        "--num_train_epochs", str(args.epochs),
        "--per_device_train_batch_size", str(BATCH),
        "--learning_rate", str(LR),
        "--seed", str(args.seed),
        "--save_strategy", "no",
        "--eval_strategy", "no",
        "--disable_tqdm", "true",
        "--crf", "true" if args.worker == "toolkit-crf" else "false",
    ]  # fmt: skip
    model_args, data_args, task_args, train_args = parse_args(
        [ModelArguments, DataArguments, NerArguments, EncoderTrainingArguments], flags
    )
    peak = matmul_peak_flops(toolkit_precision(train_args))
    metrics = run.train("ner", model_args, data_args, task_args, train_args)
    # Score the saved model's predictions the same way as the stock run's.
    model = TokenTagger.from_pretrained(out)
    tokenizer = load_tokenizer(str(out))
    _, (dev_tokens, dev_tags) = load(args.dataset, args.seed, args.limit)
    predict_sentences(model, tokenizer, dev_tokens[:8], max_length=MAX_LEN)  # warm-up
    start = time.perf_counter()
    iob2, _ = predict_sentences(model, tokenizer, dev_tokens, max_length=MAX_LEN)
    predict_s = time.perf_counter() - start
    scheme = model.settings.tag_scheme
    predictions = [from_iob2(tags, scheme) for tags in iob2]
    result = score(dev_tags, predictions)
    runtime = metrics["train_runtime"]
    n_tokens = metrics["train_num_input_tokens_seen"]
    dev_real = sum(
        len(ids)
        for ids in tokenizer(dev_tokens, is_split_into_words=True, truncation=True, max_length=MAX_LEN)[
            "input_ids"
        ]
    )
    config = model.encoder.config
    return {
        **result,
        "metric_name": "strict F1",
        "metric": result["f1_strict"],
        "precision": toolkit_precision(train_args),
        "toolkit_eval_f1_strict": metrics.get("eval_f1_strict"),
        "toolkit_eval_f1_lenient": metrics.get("eval_f1_lenient"),
        "train_seconds": runtime,
        **speed_fields("train", n_tokens, runtime, config, n_tokens / args.epochs / n_train, peak),
        **speed_fields("predict", dev_real, predict_s, config, dev_real / len(dev_tokens), peak),
        "matmul_peak_gflops": peak / 1e9,
        "labels": len(model.settings.label_names),
        "added_characters": model.settings.added_characters,
        "mixed_precision": train_args.mixed_precision,
        "peak_rss_mib": peak_rss_mib(),
    }


def run_worker(run: str, args) -> dict:
    dataset, contender = run.split(":")
    env = worker_env()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        target = handle.name
    cmd = [sys.executable, __file__, "--worker", contender, "--dataset", dataset, "--result", target]
    cmd += ["--epochs", str(args.epochs), "--seed", str(args.seed)]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    print(f"[bench] running {run} ...", flush=True)
    done = subprocess.run(cmd, env=env, check=False, stdout=None if args.verbose else subprocess.DEVNULL)
    if done.returncode != 0:
        return {"error": f"exit status {done.returncode}"}
    return json.loads(Path(target).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", default=DEFAULT_RUNS, help="dataset:contender pairs, comma-separated")
    parser.add_argument("--epochs", type=float, default=2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--limit", type=int, default=None, help="cap train/eval sentences (smoke runs)")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = worker_stock(args) if args.worker == "stock" else worker_toolkit(args)
        Path(args.result).write_text(json.dumps(result))
        return
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    for run in runs:
        dataset = run.split(":")[0]
        require_data(DATASETS[dataset][1], DATASETS[dataset][2])
    rows = []
    partial = Path(tempfile.gettempdir()) / "bench_ner_partial.json"
    for run in runs:
        dataset, contender = run.split(":")
        n_train, n_eval = sizes(dataset, args.limit)
        result = run_worker(run, args)
        rows.append({"dataset": dataset, "run": contender, "train": n_train, "eval": n_eval, **result})
        partial.write_text(json.dumps(rows, indent=2))  # a failed later run keeps the earlier ones
    print()
    print_table(
        rows,
        [
            "dataset",
            "run",
            "train",
            "eval",
            "f1_strict",
            "f1_lenient",
            "train_real_tokens_per_s",
            "train_seconds",
        ],
    )
    path = save_results(
        "ner", {"epochs": args.epochs, "seed": args.seed, "max_length": MAX_LEN, "batch": BATCH, "rows": rows}
    )
    print(f"\nsaved {path}")


if __name__ == "__main__":
    main()

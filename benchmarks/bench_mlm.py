"""Masked-language modelling: speed, domain adaptation, and pretraining Chinese from scratch.

Parts (``--parts a,b,c``):

a. The masked-only prediction head versus the full-vocabulary head over every token (time
   per training step, same batch, same weights, same loss), then MLM on WikiText-2 from the
   MiniLM package model side by side: the toolkit (``encoder-tasks mlm train``) against the
   stock transformers Trainer with ``AutoModelForMaskedLM`` and
   ``DataCollatorForLanguageModeling`` configured as ``run_mlm.py`` does (lines tokenised,
   concatenated, cut into 128-token blocks). Both are scored on the same held-out blocks
   with the same fixed masks: masked-token accuracy and perplexity, before and after;
   speed in real (non-padding) tokens per second.
b. Downstream: SST-2 classification (a training subset, the full dev set) fine-tuned from
   the MLM-adapted checkpoint of part a versus from the original MiniLM.
c. From scratch for Chinese: a bert-mini encoder and WordPiece tokenizer pretrained on the
   CMRC 2018 contexts plus the Resume-zh training sentences, then fine-tuned on Resume-zh
   NER, against the same model from its random initialisation.

Run (about 15-20 minutes on 2 cores):
    flock /tmp/encoder-tasks-heavy.lock env OMP_WAIT_POLICY=PASSIVE \\
        .venv/bin/python benchmarks/bench_mlm.py --parts a,b,c
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from encoder_tasks.runtime import configure_cpu_runtime  # noqa: E402

configure_cpu_runtime()

from benchmarks.common import (  # noqa: E402
    DATA,
    MINILM,
    environment,
    matmul_peak_flops,
    peak_rss_mib,
    print_table,
    require_data,
    save_results,
    speed_fields,
)

BLOCK = 128


# ---- shared helpers --------------------------------------------------------------------------
def wikitext_split(work: Path, train_docs: int, eval_docs: int) -> tuple[Path, Path]:
    """Every 10th document is held out for evaluation; files are written one document per line."""
    (source,) = require_data("mlm/wikitext-2/valid.txt")
    docs = [line.strip() for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    held = [d for i, d in enumerate(docs) if i % 10 == 0][:eval_docs]
    train = [d for i, d in enumerate(docs) if i % 10 != 0][:train_docs]
    train_path, eval_path = work / "wiki-train.txt", work / "wiki-eval.txt"
    train_path.write_text("\n".join(train) + "\n", encoding="utf-8")
    eval_path.write_text("\n".join(held) + "\n", encoding="utf-8")
    return train_path, eval_path


def fixed_mask_batches(tokenizer, eval_path: Path, batch_size: int = 32, mask_rate: float = 0.15):
    """The held-out text cut into blocks and masked with a fixed seed (the toolkit's evaluation masks)."""
    from encoder_tasks.tasks.mlm.masking import MaskingCollator
    from encoder_tasks.tasks.mlm.text import make_blocks, read_text_file

    blocks = make_blocks(read_text_file(eval_path), tokenizer, max_length=BLOCK)
    collate = MaskingCollator(tokenizer, mask_rate=mask_rate).for_evaluation()
    rows = [blocks[i] for i in range(len(blocks))]
    return [collate(rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]


def masked_scores(logits_of, batches) -> dict:
    """Masked-token accuracy and perplexity of ``logits_of(batch) -> [b, l, vocab] or [masked, vocab]``."""
    import torch

    from encoder_tasks.tasks.mlm.metrics import masked_predictions

    correct = total = 0
    nll = 0.0
    with torch.inference_mode():
        for batch in batches:
            preds = masked_predictions(logits_of(batch), batch["labels"])
            selected = batch["labels"] != -100
            correct += int((preds[selected][:, 0].long() == batch["labels"][selected]).sum())
            nll += float(preds[selected][:, 1].sum())
            total += int(selected.sum())
    return {"masked_accuracy": correct / total, "perplexity": math.exp(nll / total), "masked_tokens": total}


def cli(argv: list[str]) -> None:
    from encoder_tasks.cli import main

    status = main(argv)
    if status != 0:
        raise RuntimeError(f"encoder-tasks {' '.join(argv[:2])} failed with status {status}")


# ---- part a: head speed, toolkit vs stock -----------------------------------------------------
def head_speed(tokenizer, train_path: Path, steps: int, batch_size: int) -> dict:
    """Time one optimizer step with the masked-only head and with the full head, interleaved."""
    import copy

    import torch

    from encoder_tasks.backbone import load_encoder
    from encoder_tasks.tasks.mlm import MLMSettings
    from encoder_tasks.tasks.mlm.masking import MaskingCollator
    from encoder_tasks.tasks.mlm.model import build_model
    from encoder_tasks.tasks.mlm.text import make_blocks, read_text_file

    blocks = make_blocks(read_text_file(train_path), tokenizer, max_length=BLOCK)
    batch = MaskingCollator(tokenizer, seed=0)([blocks[i] for i in range(batch_size)])
    torch.manual_seed(0)
    masked = build_model(load_encoder(MINILM), MLMSettings(masked_only_head=True), training={})
    full = copy.deepcopy(masked)
    full.masked_only_head = False
    models = {"masked-only head": masked, "full head": full}
    optims = {k: torch.optim.AdamW(m.parameters(), lr=1e-5) for k, m in models.items()}
    with torch.no_grad():
        masked.eval(), full.eval()
        losses = {k: float(m(**batch).loss) for k, m in models.items()}
    times: dict[str, list[float]] = {k: [] for k in models}
    for step in range(steps + 1):
        for name, model in models.items():
            model.train()
            start = time.perf_counter()
            loss = model(**batch).loss
            loss.backward()
            optims[name].step()
            optims[name].zero_grad(set_to_none=True)
            if step:  # the first step warms up allocators and threads
                times[name].append(time.perf_counter() - start)
    tokens = int(batch["attention_mask"].sum())
    out = {
        name: {
            "seconds_per_step": sorted(t)[len(t) // 2],
            "tokens_per_second": tokens / sorted(t)[len(t) // 2],
            "loss_before_step_1": losses[name],
        }
        for name, t in times.items()
    }
    out["speedup"] = out["full head"]["seconds_per_step"] / out["masked-only head"]["seconds_per_step"]
    out["batch"] = f"{batch_size} x {BLOCK} tokens, {int((batch['labels'] != -100).sum())} masked"
    return out


def run_stock(train_path: Path, eval_path: Path, out_dir: Path, args, eval_batches) -> dict:
    """transformers' Trainer + DataCollatorForLanguageModeling, configured as run_mlm.py does."""
    import datasets
    from transformers import (
        AutoModelForMaskedLM,
        AutoTokenizer,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    from encoder_tasks.backbone import resolve_model_path

    path = resolve_model_path(MINILM)
    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    raw = datasets.load_dataset("text", data_files={"train": str(train_path), "validation": str(eval_path)})
    raw = raw.filter(lambda ex: len(ex["text"]) > 0 and not ex["text"].isspace())
    tokenized = raw.map(
        lambda ex: tokenizer(ex["text"], return_special_tokens_mask=True),
        batched=True,
        remove_columns=["text"],
    )

    def group_texts(examples):  # run_mlm.py's group_texts: concatenate, cut, drop the remainder
        concatenated = {k: sum(examples[k], []) for k in examples}
        total = (len(concatenated["input_ids"]) // BLOCK) * BLOCK
        return {k: [t[i : i + BLOCK] for i in range(0, total, BLOCK)] for k, t in concatenated.items()}

    lm = tokenized.map(group_texts, batched=True)
    model = AutoModelForMaskedLM.from_pretrained(path)
    before = masked_scores(
        lambda b: model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, eval_batches
    )
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    training_args = TrainingArguments(
        output_dir=str(out_dir),
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=32,
        learning_rate=args.learning_rate,
        warmup_steps=0.1,
        weight_decay=0.01,
        num_train_epochs=args.epochs,
        seed=args.seed,
        save_strategy="no",
        report_to="none",
        logging_steps=20,
        dataloader_pin_memory=False,
    )

    def preprocess_logits_for_metrics(logits, labels):
        return logits.argmax(dim=-1)

    def compute_metrics(eval_preds):  # run_mlm.py's accuracy on its own (random) eval masks

        preds, labels = eval_preds
        mask = labels != -100
        return {"accuracy": float((preds[mask] == labels[mask]).mean())}

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=lm["train"],
        eval_dataset=lm["validation"],
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=preprocess_logits_for_metrics,
    )
    peak = matmul_peak_flops("fp32")
    start = time.perf_counter()
    result = trainer.train()
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    own = trainer.evaluate()
    eval_seconds = time.perf_counter() - start
    model.eval()
    after = masked_scores(
        lambda b: model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, eval_batches
    )
    tokens = len(lm["train"]) * BLOCK * args.epochs
    return {
        "metric_name": "masked accuracy",
        "metric": after["masked_accuracy"],
        "precision": "fp32",
        **speed_fields("train", tokens, result.metrics["train_runtime"], model.config, BLOCK, peak),
        **speed_fields("predict", len(lm["validation"]) * BLOCK, eval_seconds, model.config, BLOCK, peak),
        "peak_rss_mib": peak_rss_mib(),
        "matmul_peak_gflops": peak / 1e9,
        "before": before,
        "after": after,
        "train_seconds": train_seconds,
        "train_runtime": result.metrics["train_runtime"],
        "real_tokens_per_second": tokens / result.metrics["train_runtime"],
        "train_blocks": len(lm["train"]),
        "own_eval_perplexity": math.exp(own["eval_loss"]),
        "own_eval_accuracy": own.get("eval_accuracy"),
    }


def run_toolkit(
    train_path: Path, eval_path: Path, out_dir: Path, args, eval_batches, precision: str = "auto"
) -> dict:
    """``encoder-tasks mlm train``; ``precision`` is its --mixed_precision (auto: bf16 where native)."""
    from encoder_tasks.tasks.mlm.model import MaskedLanguageModel
    from encoder_tasks.training_args import native_bf16_available

    used = "bf16" if precision == "bf16" or (precision == "auto" and native_bf16_available()) else "fp32"
    peak = matmul_peak_flops(used)
    start = time.perf_counter()
    cli(
        [
            "mlm",
            "train",
            "--model_name_or_path",
            MINILM,
            "--train_file",
            str(train_path),
            "--validation_file",
            str(eval_path),
            "--max_length",
            str(BLOCK),
            "--per_device_train_batch_size",
            str(args.batch_size),
            "--per_device_eval_batch_size",
            "32",
            "--learning_rate",
            str(args.learning_rate),
            "--num_train_epochs",
            str(args.epochs),
            "--seed",
            str(args.seed),
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--logging_steps",
            "20",
            "--evaluate_before_training",
            "--mixed_precision",
            precision,
            "--output_dir",
            str(out_dir),
        ]
    )
    seconds = time.perf_counter() - start
    metrics = json.loads((out_dir / "metrics.json").read_text())
    model = MaskedLanguageModel.from_pretrained(out_dir)
    after = masked_scores(lambda b: model(**b).logits, eval_batches)
    train_runtime = metrics.get("train_train_runtime", metrics.get("train_runtime"))
    eval_real = sum(int(b["attention_mask"].sum()) for b in eval_batches)  # the toolkit's eval blocks
    eval_mean = eval_real / sum(len(b["attention_mask"]) for b in eval_batches)
    config = model.encoder.config
    return {
        "metric_name": "masked accuracy",
        "metric": after["masked_accuracy"],
        "precision": used,
        **speed_fields(
            "train",
            metrics["train_real_tokens_per_second"] * train_runtime,
            train_runtime,
            config,
            BLOCK,
            peak,
        ),
        **speed_fields("predict", eval_real, metrics["eval_runtime"], config, eval_mean, peak),
        "peak_rss_mib": peak_rss_mib(),
        "matmul_peak_gflops": peak / 1e9,
        "before": {
            "masked_accuracy": metrics["train_initial_masked_accuracy"],
            "perplexity": metrics["train_initial_perplexity"],
        },
        "after": after,
        "own_eval": {
            "masked_accuracy": metrics["eval_masked_accuracy"],
            "perplexity": metrics["eval_perplexity"],
        },
        "train_seconds": seconds,
        "train_runtime": train_runtime,
        "real_tokens_per_second": metrics["train_real_tokens_per_second"],
    }


def part_a(work: Path, args) -> dict:
    from encoder_tasks.backbone import load_tokenizer

    train_path, eval_path = wikitext_split(work, args.train_docs, args.eval_docs)
    tokenizer = load_tokenizer(MINILM)
    eval_batches = fixed_mask_batches(tokenizer, eval_path)
    contenders = args.contenders.split(",")
    result = {"train_docs": args.train_docs, "eval_docs": args.eval_docs}
    if args.speed_steps:
        print(f"\n== part a: head speed ({args.speed_steps} steps each)")
        result["speed"] = head_speed(tokenizer, train_path, args.speed_steps, args.batch_size)
        print(json.dumps(result["speed"], indent=2))
    if "stock" in contenders:
        print("\n== part a: stock Trainer + DataCollatorForLanguageModeling")
        result["stock"] = run_stock(train_path, eval_path, work / "stock-mlm", args, eval_batches)
        result["stock"]["precision"] = "fp32"  # TrainingArguments' default
        print(json.dumps(result["stock"], indent=2))
    for name, precision in (("toolkit", "auto"), ("toolkit-fp32", "no")):
        if name in contenders:
            print(f"\n== part a: encoder-tasks mlm train (--mixed_precision {precision})")
            result[name] = run_toolkit(
                train_path, eval_path, work / f"{name}-mlm", args, eval_batches, precision
            )
            print(json.dumps(result[name], indent=2))
    return result


# ---- part b: downstream classification ------------------------------------------------------
def part_b(work: Path, args) -> dict:
    adapted = work / "toolkit-mlm"
    if not (adapted / "encoder_tasks.json").is_file():
        adapted = work / "toolkit-fp32-mlm"
    if not (adapted / "encoder_tasks.json").is_file():
        raise SystemExit("part b needs part a's adapted model (run --parts a,b)")
    require_data("cls/sst2/train.tsv", "cls/sst2/dev.tsv")
    results = {}
    for name, start_from in (("original MiniLM", MINILM), ("MLM-adapted MiniLM", str(adapted))):
        out = work / f"sst2-{'adapted' if start_from != MINILM else 'original'}"
        print(f"\n== part b: SST-2 from {name}")
        begin = time.perf_counter()
        cli(
            [
                "classification",
                "train",
                "--model_name_or_path",
                start_from,
                "--data_dir",
                str(DATA),
                "--train_file",
                "cls/sst2/train.tsv",
                "--validation_file",
                "cls/sst2/dev.tsv",
                "--text_column",
                "sentence|content",
                "--max_length",
                "128",
                "--max_train_samples",
                str(args.sst2_samples),
                "--num_train_epochs",
                "1",
                "--seed",
                str(args.seed),
                "--save_strategy",
                "no",
                "--report_to",
                "none",
                "--output_dir",
                str(out),
            ]
        )
        metrics = json.loads((out / "metrics.json").read_text())
        results[name] = {
            "accuracy": metrics["eval_accuracy"],
            "macro_f1": metrics.get("eval_macro_f1") or metrics.get("eval_f1_macro"),
            "seconds": time.perf_counter() - begin,
        }
    return results


# ---- part c: Chinese from scratch -----------------------------------------------------------
def chinese_corpus(work: Path) -> Path:
    """CMRC 2018 contexts (dev + trial) and the Resume-zh training sentences, one per line."""
    cmrc_dev, cmrc_trial, resume = require_data(
        "qa/cmrc2018/cmrc2018_dev.json", "qa/cmrc2018/cmrc2018_trial.json", "ner/resume-zh/train.char.bmes"
    )
    contexts: dict[str, None] = {}
    for path in (cmrc_dev, cmrc_trial):
        for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
            for paragraph in article["paragraphs"]:
                contexts[" ".join(paragraph["context"].split())] = None
    sentences, current = [], []
    for line in resume.read_text(encoding="utf-8").splitlines():
        if line.strip():
            current.append(line.split()[0])
        elif current:
            sentences.append("".join(current))
            current = []
    if current:
        sentences.append("".join(current))
    corpus = work / "zh-corpus.txt"
    corpus.write_text("\n".join(list(contexts) + sentences) + "\n", encoding="utf-8")
    return corpus


def finetune_ner(start_from: str, out: Path, args) -> dict:
    begin = time.perf_counter()
    cli(
        [
            "ner",
            "train",
            "--model_name_or_path",
            start_from,
            "--data_dir",
            str(DATA),
            "--train_file",
            "ner/resume-zh/train.char.bmes",
            "--validation_file",
            "ner/resume-zh/test.char.bmes",
            "--tag_scheme",
            "bmes",
            "--invalid_tags",
            "repair",  # the published train file has one sentence ending inside an entity
            "--tokenization",
            "char",
            "--extend_vocabulary",
            "none",
            "--max_length",
            "128",
            "--learning_rate",
            str(args.ner_learning_rate),
            "--num_train_epochs",
            str(args.ner_epochs),
            "--per_device_train_batch_size",
            "32",
            "--seed",
            str(args.seed),
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--output_dir",
            str(out),
        ]
    )
    metrics = json.loads((out / "metrics.json").read_text())

    def pick(name):  # the ner task reports strict (seqeval) and lenient scores
        return metrics.get(f"eval_{name}_strict", metrics.get(f"eval_{name}"))

    return {
        "f1": pick("f1"),
        "precision": pick("precision"),
        "recall": pick("recall"),
        "seconds": time.perf_counter() - begin,
    }


def part_c(work: Path, args) -> dict:
    corpus = chinese_corpus(work)
    out = work / "zh-scratch"
    print(f"\n== part c: pretraining {args.zh_preset} from scratch on {corpus}")
    begin = time.perf_counter()
    cli(
        [
            "mlm",
            "train",
            "--from_scratch",
            args.zh_preset,
            "--tokenizer_vocab_size",
            str(args.zh_vocab),
            "--train_file",
            str(corpus),
            "--whole_word_masking",
            "--max_length",
            str(BLOCK),
            "--per_device_train_batch_size",
            "32",
            "--learning_rate",
            str(args.zh_learning_rate),
            "--warmup_steps",
            "0.06",
            "--num_train_epochs",
            str(args.zh_epochs),
            "--seed",
            str(args.seed),
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--logging_steps",
            "20",
            "--evaluate_before_training",
            "--output_dir",
            str(out),
        ]
    )
    pretrain_seconds = time.perf_counter() - begin
    metrics = json.loads((out / "metrics.json").read_text())
    result = {
        "pretrain_seconds": pretrain_seconds,
        "pretrain_real_tokens_per_second": metrics["train_real_tokens_per_second"],
        "masked_accuracy_before": metrics["train_initial_masked_accuracy"],
        "masked_accuracy_after": metrics["eval_masked_accuracy"],
        "perplexity_before": metrics["train_initial_perplexity"],
        "perplexity_after": metrics["eval_perplexity"],
        "ner": {},
    }
    from encoder_tasks.registry import TASKS

    if "ner" not in TASKS:
        result["ner"] = "the ner task is not registered in this tree; fine-tuning skipped"
        return result
    for name, start_from in (("random init", out / "scratch-init"), ("MLM-pretrained", out)):
        print(f"\n== part c: Resume-zh NER from {name}")
        try:
            result["ner"][name] = finetune_ner(str(start_from), work / f"ner-{name.split()[0].lower()}", args)
        except Exception as exc:  # the ner task is being built in parallel: report, do not hide
            result["ner"][name] = f"failed: {type(exc).__name__}: {exc}"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default="a,b,c")
    parser.add_argument("--train_docs", type=int, default=600, help="WikiText-2 documents for MLM training")
    parser.add_argument("--eval_docs", type=int, default=120, help="held-out WikiText-2 documents")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--speed_steps", type=int, default=5, help="0 skips the head speed test")
    parser.add_argument("--contenders", default="stock,toolkit,toolkit-fp32", help="part a's MLM runs")
    parser.add_argument("--sst2_samples", type=int, default=2000)
    parser.add_argument("--zh_preset", default="bert-mini")
    parser.add_argument("--zh_vocab", type=int, default=8000)
    parser.add_argument("--zh_epochs", type=float, default=3.0)
    parser.add_argument("--zh_learning_rate", type=float, default=1e-3)
    parser.add_argument("--ner_epochs", type=float, default=3.0)
    parser.add_argument("--ner_learning_rate", type=float, default=2e-4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--work_dir", default=None, help="keep intermediate runs here (default: a temp dir)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench-mlm-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {"args": vars(args), "command": " ".join(sys.argv)}
    begin = time.perf_counter()
    if "a" in parts:
        results["a"] = part_a(work, args)
    if "b" in parts:
        results["b"] = part_b(work, args)
    if "c" in parts:
        results["c"] = part_c(work, args)
    results["total_seconds"] = time.perf_counter() - begin
    path = save_results("mlm", results)
    report(results)
    print(f"\nresults: {path}\nenvironment: {environment()}")


def report(results: dict) -> None:
    if "a" in results:
        a = results["a"]
        s = a.get("speed")
        if s:
            print(f"\nHead speed ({s['batch']}): speedup {s['speedup']:.2f}x")
            print_table(
                [{"head": k, **v} for k, v in s.items() if isinstance(v, dict)],
                ["head", "seconds_per_step", "tokens_per_second", "loss_before_step_1"],
            )
        print("\nWikiText-2 MLM from MiniLM (same held-out blocks, same fixed masks)")
        rows = []
        for name in ("stock", "toolkit", "toolkit-fp32"):
            r = a.get(name)
            if r is None:
                continue
            rows.append(
                {
                    "contender": f"{name} ({r.get('precision', '?')})",
                    "acc_before": r["before"]["masked_accuracy"],
                    "acc_after": r["after"]["masked_accuracy"],
                    "ppl_before": r["before"]["perplexity"],
                    "ppl_after": r["after"]["perplexity"],
                    "real_tok_per_s": r["real_tokens_per_second"],
                    "train_s": r["train_runtime"],
                }
            )
        print_table(
            rows,
            ["contender", "acc_before", "acc_after", "ppl_before", "ppl_after", "real_tok_per_s", "train_s"],
        )
    if "b" in results:
        print("\nSST-2 downstream")
        print_table(
            [{"start": k, **v} for k, v in results["b"].items()], ["start", "accuracy", "macro_f1", "seconds"]
        )
    if "c" in results:
        c = results["c"]
        print("\nChinese from scratch")
        print(json.dumps(c, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

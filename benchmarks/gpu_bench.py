"""One short GPU run: a BERT-base-size encoder, bf16, toolkit vs stock Trainer, with MFU.

    python -m benchmarks.gpu_bench                 # on a machine with a CUDA GPU (~2-3 minutes)
    python -m benchmarks.gpu_bench --tiny --cpu    # smoke test of the script itself on a CPU

No Hub access is assumed: the encoder is BERT-base's architecture (12 layers, hidden 768)
with random weights and the MiniLM package's tokenizer, so throughput and MFU are real
while accuracy is not the point. SST-2 sentences from ../shared/data provide realistic
lengths (synthetic text is used when the data is absent).

MFU = achieved model FLOP/s (encoder FLOPs per real token, as every benchmark here counts them:
benchmarks.common.encoder_flops_per_token) / bf16 matmul FLOP/s measured on the same device
in the same run.

Contenders: the stock Trainer (``BertForSequenceClassification``, dynamic padding), the toolkit
(length-grouped batches, padding to a multiple of 8, sdpa attention) and, where flash-attn is
installed, ``toolkit-padding-free`` (``--attn_implementation flash_attention_2 --padding_free
true``: the encoder runs on real tokens only; see docs/padding-free.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from benchmarks.common import (
    DATA,
    MINILM,
    encoder_flops_per_token,
    matmul_peak_flops,
    print_table,
    save_results,
)


def texts(n: int) -> list[str]:
    path = DATA / "cls/sst2/train.tsv"
    if path.exists():
        from encoder_tasks.data import read_file

        return list(read_file(path).shuffle(seed=0).select(range(n))["sentence"])
    words = "the film was good bad great awful fun boring and very not".split()
    return [" ".join(words[(i * 7 + j) % len(words)] for j in range(5 + i % 40)) for i in range(n)]


def main() -> None:
    import numpy as np
    import torch
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForSequenceClassification,
        BertModel,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    from encoder_tasks.backbone import resolve_model_path
    from encoder_tasks.collators import PaddingCollator
    from encoder_tasks.tasks.classification.model import SequenceClassifier
    from encoder_tasks.trainer import EncoderTaskTrainer
    from encoder_tasks.training_args import EncoderTrainingArguments

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=8192)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model, to test the script")
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    if device.type != "cuda" and not args.cpu:
        sys.exit("no CUDA device: run on a GPU machine, or pass --cpu --tiny to test the script")
    size = (
        dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128)
        if args.tiny
        else {}
    )
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    config = BertConfig(vocab_size=len(tokenizer), num_labels=2, **size)
    sentences = texts(args.examples if not args.tiny else 256)
    labels = [i % 2 for i in range(len(sentences))]
    enc = tokenizer(sentences, truncation=True, max_length=128)
    real = sum(len(ids) for ids in enc["input_ids"])
    rows = [
        dict(input_ids=i, attention_mask=m, labels=y)
        for i, m, y in zip(enc["input_ids"], enc["attention_mask"], labels)
    ]
    lengths = [len(r["input_ids"]) for r in rows]
    import datasets

    ds = datasets.Dataset.from_list([{**r, "length": n} for r, n in zip(rows, lengths)])
    dtype = torch.bfloat16 if device.type == "cuda" or not args.tiny else torch.float32
    peak = matmul_peak_flops(
        "bf16" if dtype == torch.bfloat16 else "fp32",
        size=1024 if args.tiny else 4096,
        repeats=20,
        device=device,
    )
    results = {}
    contenders = ["stock", "toolkit"]
    if device.type == "cuda":
        from transformers.utils import is_flash_attn_2_available

        if is_flash_attn_2_available():
            contenders.append("toolkit-padding-free")
        else:
            print("flash-attn is not installed: no toolkit-padding-free row (pip install flash-attn)")
    for name in contenders:
        torch.manual_seed(0)
        out = tempfile.mkdtemp()
        common = dict(
            output_dir=out,
            num_train_epochs=1,
            per_device_train_batch_size=args.batch_size,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            logging_steps=10_000,
            use_cpu=device.type == "cpu",
            bf16=device.type == "cuda",
        )
        if name == "stock":
            model = BertForSequenceClassification(config)
            trainer = Trainer(
                model=model,
                args=TrainingArguments(**common),
                train_dataset=ds.remove_columns("length"),
                data_collator=DataCollatorWithPadding(tokenizer),
                processing_class=tokenizer,
            )
        else:
            from encoder_tasks.padding_free import configure_padding_free

            flat = name == "toolkit-padding-free"
            encoder = BertModel._from_config(
                config, attn_implementation="flash_attention_2" if flat else "sdpa"
            )
            model = SequenceClassifier(encoder, num_labels=2)
            targs = EncoderTrainingArguments(
                **common,
                mixed_precision="bf16" if device.type == "cuda" else "no",
                padding_free="true" if flat else "false",
            )
            configure_padding_free(model, targs)  # as run.train does; raises if it cannot hold
            trainer = EncoderTaskTrainer(
                model=model,
                args=targs,
                train_dataset=ds,
                data_collator=PaddingCollator(tokenizer, pad_to_multiple_of=8),
                processing_class=tokenizer,
            )
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        flops = real * encoder_flops_per_token(config, float(np.mean(lengths)))
        results[name] = {
            "contender": name,
            "train_real_tok/s": real / seconds,
            "MFU": flops / seconds / peak,
            "peak_mem_GiB": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
            "seconds": seconds,
        }
    for name in contenders[1:]:
        results[name]["x_stock"] = results[name]["train_real_tok/s"] / results["stock"]["train_real_tok/s"]
    print(
        f"\n{device} {torch.cuda.get_device_name(0) if device.type == 'cuda' else ''}: BERT-"
        f"{'tiny' if args.tiny else 'base'}, {len(sentences)} SST-2 sentences, batch {args.batch_size}, "
        f"matmul peak {peak / 1e12:.1f} TFLOP/s ({dtype})"
    )
    print_table(
        list(results.values()), ["contender", "train_real_tok/s", "x_stock", "MFU", "peak_mem_GiB", "seconds"]
    )
    print("results:", save_results("gpu", {"device": str(device), "results": results}))


if __name__ == "__main__":
    main()

"""The embedding task against sentence-transformers' trainer on the STS-B quick start (issue 29).

    python -m benchmarks.bench_embedding_contenders --seeds 3 --work /tmp/bench-st
    python -m benchmarks.bench_embedding_contenders --profile 20 --work /tmp/bench-st   # where the time goes
    python -m benchmarks.bench_embedding_contenders --phase padding   # what padding to a multiple of 8 costs

Same data and budget for both: the recipe ``recipes/embedding/default.yaml`` (2,000 STS-B
training pairs, shuffled by the seed exactly as the toolkit's ``--max_train_samples`` does;
CoSENT; 1 epoch; batch 16; lr 2e-5; 10% linear warm-up; max 128 tokens; fp32), and on the other
side ``SentenceTransformerTrainer`` + ``CoSENTLoss`` with the same settings. Both saved models
are encoded and scored by the same code (:func:`encoder_tasks.tasks.embedding.model.encode_texts`
at 128 tokens, cosine, Spearman against the gold score) on the STS-B test split, never used in
training or in any choice. The contenders run one after the other in one process, per seed, so
their times are compared on the same (shared, noisy) machine state.

``--profile N``: both trainers on N steps under cProfile; the slowest functions (cumulative)
of each go into the result file, with the time spent outside the training steps.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import time
from pathlib import Path

from benchmarks.common import (
    DATA,
    interleaved_seconds,
    mean_spread,
    minilm_path,
    print_table,
    save_results,
    training_bf16,
)
from benchmarks.harness import REPO, cached, invocation

RECIPE = REPO / "recipes" / "embedding" / "default.yaml"
STSB = DATA / "pair" / "stsb"
COLUMNS = ["genre", "source", "year", "id", "score", "sentence1", "sentence2"]
SETTINGS = dict(pairs=2000, epochs=1, batch=16, lr=2e-5, warmup=0.1, max_length=128)


def read_stsb(name: str):
    """One STS-B file as a ``datasets.Dataset``, read by the toolkit's own table reader (the same
    rows in the same order as ``--train_file``; columns past the named ones are dropped)."""
    import datasets

    from encoder_tasks.data.readers import read_table

    rows = read_table(STSB / name, column_names=COLUMNS)
    return datasets.Dataset.from_dict({
        "sentence1": [r["sentence1"] for r in rows], "sentence2": [r["sentence2"] for r in rows],
        "score": [float(r["score"]) for r in rows],
    })  # fmt: skip


def train_toolkit(out: Path, seed: int, *extra: str) -> dict:
    from encoder_tasks.cli import main

    argv = ["embedding", "train", "--config", str(RECIPE), "--data_dir", str(DATA), "--output_dir", str(out),
            "--seed", str(seed), "--report_to", "none", "--disable_tqdm", "true", *extra]  # fmt: skip
    start = time.perf_counter()
    if main(argv) != 0:
        raise SystemExit(f"failed: encoder-tasks {' '.join(argv)}")
    wall = time.perf_counter() - start
    import json

    metrics = json.loads((out / "metrics.json").read_text())
    return {"wall_seconds": wall, "train_runtime": metrics["train_train_runtime"]
            if "train_train_runtime" in metrics else metrics.get("train_runtime")}  # fmt: skip


def train_st(out: Path, seed: int, max_steps: int = -1) -> dict:
    """sentence-transformers' own trainer on the same 2,000 pairs and settings."""
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.losses import CoSENTLoss

    start = time.perf_counter()
    train = read_stsb("sts-train.csv").shuffle(seed=seed).select(range(SETTINGS["pairs"]))
    model = SentenceTransformer(minilm_path(), device="cpu")
    model.max_seq_length = SETTINGS["max_length"]
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "checkpoints"),
        num_train_epochs=SETTINGS["epochs"],
        max_steps=max_steps,
        per_device_train_batch_size=SETTINGS["batch"],
        learning_rate=SETTINGS["lr"],
        warmup_steps=SETTINGS["warmup"],  # a float: the ratio (warmup_ratio is deprecated)
        seed=seed,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        bf16=training_bf16(),  # the toolkit's default precision on this machine
        logging_steps=50,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train, loss=CoSENTLoss(model))
    result = trainer.train()
    model.save_pretrained(str(out))
    return {"wall_seconds": time.perf_counter() - start, "train_runtime": result.metrics["train_runtime"]}


def spearman(model_dir: str, split) -> float:
    """Spearman of cosine vs gold on ``split``, encoded by the toolkit's one encoding path."""
    import numpy as np
    from scipy.stats import spearmanr

    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.tasks.embedding.model import encode_texts, load_bi_encoder

    model = load_bi_encoder(model_dir)
    tokenizer = load_tokenizer(model_dir)
    a = encode_texts(model, tokenizer, split["sentence1"], 64, SETTINGS["max_length"], disable_tqdm=True)
    b = encode_texts(model, tokenizer, split["sentence2"], 64, SETTINGS["max_length"], disable_tqdm=True)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    return float(spearmanr((a * b).sum(1), split["score"]).statistic)


def run_seed(work: Path, seed: int, test, toolkit_flags: tuple[str, ...]) -> dict:
    """Both contenders on one seed, each kept as soon as it is scored (a rerun resumes)."""
    row = {"seed": seed}
    for name, train in (("toolkit", lambda out: train_toolkit(out, seed, *toolkit_flags)),
                        ("sentence-transformers", lambda out: train_st(out, seed))):  # fmt: skip
        out = work / f"{name}-seed{seed}"

        def compute(out=out, train=train):
            shutil.rmtree(out, ignore_errors=True)
            timing = train(out)
            scored = {**timing, "stsb_test_spearman": spearman(str(out), test)}
            shutil.rmtree(out, ignore_errors=True)
            return scored

        row[name] = cached(work / f"{name}-seed{seed}.json", compute)
    return row


def profile(work: Path, steps: int, toolkit_flags: tuple[str, ...]) -> dict:
    """Both trainers for ``steps`` steps under cProfile: the top functions by cumulative time."""
    out = {}
    for name, train in (
        ("toolkit", lambda d: train_toolkit(d, 42, "--max_steps", str(steps), *toolkit_flags)),
        ("sentence-transformers", lambda d: train_st(d, 42, max_steps=steps)),
    ):
        folder = work / f"profile-{name}"
        shutil.rmtree(folder, ignore_errors=True)
        profiler = cProfile.Profile()
        profiler.enable()
        timing = train(folder)
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
        out[name] = {**timing, "top_cumulative": text.getvalue().splitlines()[:80]}
        print(f"---- {name}: {timing}\n" + text.getvalue()[:9000])
        shutil.rmtree(folder, ignore_errors=True)
    return out


def stsb_batches(batches: int) -> list[dict]:
    """The first ``16 * batches`` STS-B training pairs (shuffled by seed 42) as batches of 16:
    ``{"sentence1": [...], "sentence2": [...], "score": [...]}`` each."""
    data = read_stsb("sts-train.csv").shuffle(seed=42).select(range(16 * batches))
    return [{k: list(data.select(range(i, i + 16))[k]) for k in ("sentence1", "sentence2", "score")}
            for i in range(0, len(data), 16)]  # fmt: skip


def step_times(batches: int = 8, repeats: int = 1) -> dict:
    """Forward + backward of one training batch (16 pairs, CoSENT), no optimiser: the toolkit's
    model embedding the two columns in two encoder passes (as before the fix), in one merged
    pass (``BiEncoder.embed_groups``, now the default), and sentence-transformers' model and loss,
    interleaved batch by batch on the same batches; the first round is a warm-up."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.losses import CoSENTLoss as StCoSENT

    from encoder_tasks.backbone import load_encoder, load_tokenizer
    from encoder_tasks.tasks.embedding.model import BiEncoder

    path = minilm_path()
    tokenizer = load_tokenizer(path)
    ours = BiEncoder(load_encoder(path), loss="cosent").train()
    st = SentenceTransformer(path, device="cpu")
    st.max_seq_length = SETTINGS["max_length"]
    st.train()
    st_loss = StCoSENT(st)
    chunks = stsb_batches(batches)

    def tok(texts):
        return dict(tokenizer(texts, padding=True, truncation=True, max_length=SETTINGS["max_length"],
                              pad_to_multiple_of=8, return_tensors="pt"))  # fmt: skip

    def two_passes(b):
        a, p = ours.embed(**tok(b["sentence1"])), ours.embed(**tok(b["sentence2"]))
        ours.loss_fn(a, p, torch.tensor(b["score"]) / 5).backward()

    def merged(b):
        ours(
            anchor=tok(b["sentence1"]), positive=tok(b["sentence2"]), labels=torch.tensor(b["score"]) / 5
        ).loss.backward()

    def sentence_transformers(b):
        features = [st.tokenize(b["sentence1"]), st.tokenize(b["sentence2"])]
        st_loss(features, torch.tensor(b["score"]) / 5).backward()

    runs = {"toolkit, two encoder passes (before)": two_passes, "toolkit, one merged pass (now)": merged,
            "sentence-transformers": sentence_transformers}  # fmt: skip
    return interleaved_seconds(runs, chunks, repeats)


def padding_times(batches: int = 12) -> dict:
    """Forward + backward of the toolkit's model (CoSENT, 16 STS-B pairs a batch) with the batch
    padded to a multiple of 8 (``--pad_to_multiple_of``'s default) and to its longest text (what
    sentence-transformers does), interleaved batch by batch on the same batches after a warm-up
    round (tokenised before, outside the timing): what the multiple costs on this device."""
    import torch

    from encoder_tasks.backbone import load_encoder, load_tokenizer
    from encoder_tasks.tasks.embedding.model import BiEncoder

    path = minilm_path()
    tokenizer = load_tokenizer(path)
    model = BiEncoder(load_encoder(path), loss="cosent").train()
    chunks = stsb_batches(batches)
    variants = {"padded to a multiple of 8 (default)": 8, "padded to the longest text": None}
    features = {name: [[dict(tokenizer(b[c], padding=True, truncation=True, max_length=SETTINGS["max_length"],
                                       pad_to_multiple_of=multiple, return_tensors="pt"))
                        for c in ("sentence1", "sentence2")] for b in chunks]
                for name, multiple in variants.items()}  # fmt: skip

    def step(name):
        def run(i):
            a, p = features[name][i]
            model(anchor=a, positive=p, labels=torch.tensor(chunks[i]["score"]) / 5).loss.backward()

        return run

    timed = interleaved_seconds({name: step(name) for name in variants}, range(len(chunks)))
    for name, value in timed.items():
        value["tokens"] = sum(g["input_ids"].numel() for pair in features[name] for g in pair)
    return timed


def _cell(value, digits: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        spread = f" ± {value['std']:.{digits}f}" if value["n"] > 1 else ""
        return f"{value['mean']:.{digits}f}{spread}"
    return f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-embedding-contenders"))
    parser.add_argument("--profile", type=int, default=0, help="profile N steps of each trainer instead")
    parser.add_argument(
        "--toolkit_flags", default="", help="extra flags for the toolkit's train (A/B checks)"
    )
    parser.add_argument("--phase", choices=("train", "steps", "padding"), default="train",
                        help="train: both trainers end to end per seed; steps: forward+backward per batch; "
                             "padding: the toolkit's step padded to a multiple of 8 vs to the longest text")  # fmt: skip
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    flags = tuple(args.toolkit_flags.split())
    if args.phase == "steps":
        result = step_times()
        rows = [{"contender": name, **value} for name, value in result.items()]
        columns = ["contender", "median_seconds", "total_seconds", "steps"]
        print_table(rows, columns)
        table = {"columns": ["model and loss: forward + backward of one batch of 16 pairs", "median (s)",
                             f"total over {rows[0]['steps']} batches (s)"],
                 "rows": [[r["contender"], f"{r['median_seconds']:.3f}", f"{r['total_seconds']:.1f}"] for r in rows]}  # fmt: skip
        path = save_results("embedding-contenders-steps", {"command": invocation("bench_embedding_contenders"),
                                                            "steps": result, "tables": {"steps": table}})  # fmt: skip
        print(f"saved {path}")
        return
    if args.phase == "padding":
        result = padding_times()
        table = {"columns": ["toolkit model, forward + backward of one batch of 16 pairs", "median (s)",
                             "total (s)", "tokens in the batches"],
                 "rows": [[name, f"{v['median_seconds']:.3f}", f"{v['total_seconds']:.2f}", v["tokens"]]
                          for name, v in result.items()]}  # fmt: skip
        print_table([dict(zip(table["columns"], r)) for r in table["rows"]], table["columns"])
        path = save_results("embedding-contenders-padding", {"command": invocation("bench_embedding_contenders"),
                                                              "padding": result, "tables": {"padding": table}})  # fmt: skip
        print(f"saved {path}")
        return
    if args.profile:
        result = profile(args.work, args.profile, flags)
        path = save_results("embedding-contenders-profile", {"command": invocation("bench_embedding_contenders"),
                                                              "steps": args.profile, "profiles": result})  # fmt: skip
        print(f"saved {path}")
        return
    test = read_stsb("sts-test.csv")
    base = cached(args.work / "base.json", lambda: {"stsb_test_spearman": spearman(minilm_path(), test)})
    seeds = [run_seed(args.work, seed, test, flags) for seed in range(42, 42 + args.seeds)]
    rows = [
        {"model": "base all-MiniLM-L6-v2 (not fine-tuned)", "stsb_test_spearman": base["stsb_test_spearman"]}
    ]
    for name, label in (("toolkit", "encoder-tasks embedding train (recipe)"),
                        ("sentence-transformers", "SentenceTransformerTrainer + CoSENTLoss")):  # fmt: skip
        row = {"model": label}
        for key in ("stsb_test_spearman", "train_runtime", "wall_seconds"):
            row[key] = mean_spread([s[name][key] for s in seeds])
        rows.append(row)
    columns = ["model", "stsb_test_spearman", "train_runtime", "wall_seconds"]
    print_table([{k: v["mean"] if isinstance(v, dict) else v for k, v in r.items()} for r in rows], columns)
    n = len(seeds)
    table = {
        "columns": ["model", f"STS-B test Spearman ({n} seed{'s' * (n > 1)}, mean ± sd)",
                    "trainer's train_runtime (s)", "wall of the whole train call (s)"],
        "rows": [[r["model"], _cell(r["stsb_test_spearman"], 4), _cell(r.get("train_runtime"), 1),
                  _cell(r.get("wall_seconds"), 1)] for r in rows],
    }  # fmt: skip
    path = save_results("embedding-contenders", {
        "command": invocation("bench_embedding_contenders"), "settings": SETTINGS, "toolkit_flags": flags,
        "seeds": seeds, "summary": rows, "tables": {"stsb": table},
    })  # fmt: skip
    print(f"saved {path}")


if __name__ == "__main__":
    main()

"""The retrieval rows against sentence-transformers' trainer (issue 29): same data, steps, batch,
learning rate, machine, scored by the same code.

    python -m benchmarks.bench_retrieval_st --size quick                       # smoke: minutes
    python -m benchmarks.bench_retrieval_st --size standard --langs en,zh      # the measurement
    python -m benchmarks.bench_retrieval_st --size standard --phase cached-steps  # GradCache steps, interleaved
    python -m benchmarks.bench_retrieval_st --size standard --phase samplers --langs zh --seeds 1  # on validation
    python -m benchmarks.bench_retrieval_st --size standard --phase rerank        # rerankers vs CrossEncoder

The sets and mined negatives are :mod:`benchmarks.bench_retrieval`'s (the same ``--work`` folder
reuses them); its rows' toolkit models are trained again here, so that both sides' times are taken
one after the other in one process. Each toolkit row has a sentence-transformers twin trained by
``SentenceTransformerTrainer`` on the same rows in the same order of files with the settings the
toolkit row ran at: 1 epoch, batch 32 (``size["batch"]``), learning rate 2e-5, 10% linear warm-up,
weight decay 0.01, 128 tokens, scale 20 (the toolkit's temperature 0.05), the duplicate-free batch
sampler (``BatchSamplers.NO_DUPLICATES``, as the toolkit's ``--batch_sampler no_duplicates``), and
the precision the toolkit's default picks on the machine (bf16 on a CPU with native bf16, else
fp32; :func:`benchmarks.common.training_bf16`):

- in-batch negatives: ``MultipleNegativesRankingLoss`` / ``embedding train`` (mnrl);
- one mined hard negative per question (the base model's, ranks 3-50): the same loss on
  (question, passage, negative) rows / ``--negative_columns negative_1``;
- Matryoshka over that: ``MatryoshkaLoss`` at 384/256/128/64 / ``--matryoshka_dims 64,128,256``;
- a large batch through GradCache: ``CachedMultipleNegativesRankingLoss`` (mini-batch 32) /
  ``--cache_chunk_size 32``, both at batch ``CACHED_BATCH`` with the mined negatives.

The rerankers (``--phase rerank``): the toolkit's listwise reranker (``pair train
--listwise_negatives``, :data:`RERANK_VARIANT`, the best of ``bench_retrieval``'s variants on
validation) against sentence-transformers' ``CrossEncoderTrainer`` on the same rows (each question,
its passage and 3 negatives mined by the fine-tuned hard-negative bi-encoder), the same epochs,
queries per step, learning rate, warm-up, weight decay and length: listwise with its
``MultipleNegativesRankingLoss`` at its defaults (the given negatives plus 4 passages of other rows
sampled per query, so it scores twice the toolkit's pairs a step; ``num_negatives=0`` is refused by
its sampler) and the duplicate-free sampler it recommends, and pointwise with
``BinaryCrossEntropyLoss`` on the rows' labelled pairs (32 a step, the toolkit's pairs per step;
``pos_weight`` 3, the negatives per positive, as its own reranker examples set it). Each re-orders the same bi-encoder's top 10 or 30 on test, the depth chosen on
validation, and is scored by the same code.

Both sides' models are encoded by :func:`encoder_tasks.tasks.embedding.model.encode_texts` and
scored by :func:`benchmarks.bench_retrieval.scores` on the test questions and paragraphs (unseen in
training and in any choice). Training wall time is measured around each trainer call, one after
the other in one process; which side goes first alternates with the seed. Results:
``benchmarks/results/retrieval-st-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

from benchmarks import bench_retrieval as br
from benchmarks.common import (
    MINILM,
    interleaved_seconds,
    mean_spread,
    minilm_path,
    print_table,
    save_results,
    training_bf16,
)
from benchmarks.harness import cached

#: The large batch of the GradCache rows (both sides cut it into chunks of 32).
CACHED_BATCH = 128
WARMUP, WEIGHT_DECAY, LEARNING_RATE = 0.1, 0.01, 2e-5
MATRYOSHKA = (384, 256, 128, 64)

#: Row -> (toolkit flags after bench_retrieval's defaults, ST loss, training file, batch).
ROWS = {
    "in-batch negatives (mnrl)": ([], "mnrl", "train.jsonl", None),
    "+ mined hard negative": (["--negative_columns", "negative_1"], "mnrl", "mined-n-tuple.jsonl", None),
    "+ Matryoshka 384/256/128/64": (
        ["--negative_columns", "negative_1", "--matryoshka_dims", "64,128,256"],
        "matryoshka",
        "mined-n-tuple.jsonl",
        None,
    ),
    f"+ GradCache, batch {CACHED_BATCH}": (
        ["--negative_columns", "negative_1", "--cache_chunk_size", "32"],
        "cached",
        "mined-n-tuple.jsonl",
        CACHED_BATCH,
    ),
}
logger = logging.getLogger("bench_retrieval_st")


def read_rows(path: Path):
    """A JSON-lines training file as a ``datasets.Dataset`` with the columns in file order
    (sentence-transformers takes the first column as the anchor, the second as the positive)."""
    import datasets

    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    columns = [c for c in ("query", "positive", "negative_1") if c in rows[0]]
    return datasets.Dataset.from_dict({c: [r[c] for r in rows] for c in columns})


def st_loss_of(model, kind: str):
    from sentence_transformers import losses

    if kind == "mnrl":
        return losses.MultipleNegativesRankingLoss(model, scale=20.0)
    if kind == "matryoshka":
        return losses.MatryoshkaLoss(
            model, losses.MultipleNegativesRankingLoss(model, scale=20.0), list(MATRYOSHKA)
        )
    if kind == "cached":
        return losses.CachedMultipleNegativesRankingLoss(model, scale=20.0, mini_batch_size=32)
    raise ValueError(kind)


def st_run_args(out: Path, seed: int) -> dict:
    """The training arguments every sentence-transformers trainer here shares: the seed, nothing
    saved or reported but the model, the CPU, and the toolkit's precision on this machine."""
    return dict(output_dir=str(out / "checkpoints"), seed=seed, save_strategy="no", report_to="none",
                disable_tqdm=True, use_cpu=True, bf16=training_bf16(), logging_steps=20)  # fmt: skip


def train_st(out: Path, train: Path, size: dict, seed: int, kind: str, batch: int) -> dict:
    """sentence-transformers' trainer at the toolkit row's settings; the model saved to ``out``."""
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.training_args import BatchSamplers

    start = time.perf_counter()  # like the toolkit's row: loading, data, training and saving
    model = SentenceTransformer(minilm_path(), device="cpu")  # the package's copy (offline)
    model.max_seq_length = size["max_length"]
    args = SentenceTransformerTrainingArguments(
        num_train_epochs=size["epochs"],
        per_device_train_batch_size=batch,
        learning_rate=LEARNING_RATE,
        warmup_steps=WARMUP,  # a float: the ratio (transformers 5; warmup_ratio is deprecated)
        weight_decay=WEIGHT_DECAY,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        **st_run_args(out, seed),
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=read_rows(train), loss=st_loss_of(model, kind)
    )
    result = trainer.train()
    model.save_pretrained(str(out))
    wall = time.perf_counter() - start
    return {"train_wall_s": round(wall, 1), "train_steps": result.global_step, "bf16": args.bf16}


def train_toolkit(out: Path, train: Path, size: dict, seed: int, flags: list[str], batch: int | None) -> dict:
    start = time.perf_counter()
    sized = dict(size, batch=batch or size["batch"])
    br.train_embedding(out, train, sized, seed, *flags)
    wall = time.perf_counter() - start
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    steps = round(metrics["train_steps_per_second"] * metrics["train_runtime"])
    return {"train_wall_s": round(wall, 1), "train_steps": steps}


def scored(model_dir: Path, split: dict, size: dict, matryoshka: bool) -> dict:
    ranked, relevant = br.ranked(str(model_dir), split, size)
    dims = MATRYOSHKA if matryoshka else (384,)
    return {f"dim{d}": br.scores(ranked[f"dim{d}"], relevant) for d in dims}


def run_lang(lang: str, size: dict, seeds: list[int], work: Path) -> dict:
    """``{row: {"toolkit": [per seed], "sentence-transformers": [per seed]}}`` for one language."""
    splits = br.build_splits(lang, size, work)
    folder = work / lang
    br.mine(MINILM, folder, size, "n-tuple", 1)
    results: dict = {}
    for seed in seeds:
        run = folder / f"seed{seed}"
        for row, (flags, kind, file, batch) in ROWS.items():
            # The toolkit side trains here too (not bench_retrieval's cached models): both sides'
            # times are taken one after the other in this process.
            tag = f"{kind}-{file.split('.')[0]}-b{batch or size['batch']}"
            sides = {
                "toolkit": run / f"vs-st-toolkit-{tag}",
                "sentence-transformers": run / f"vs-st-st-{tag}{'-bf16' if training_bf16() else ''}",
            }
            # The side that goes first alternates with the seed: this machine's speed drifts within
            # minutes, and a fixed order would hand the drift to one side.
            for side, out in sorted(sides.items(), reverse=seed % 2 == 1):

                def measure(side=side, out=out, flags=flags, kind=kind, file=file, batch=batch, seed=seed):
                    if side == "toolkit":
                        timing = train_toolkit(out, folder / file, size, seed, flags, batch)
                    else:
                        timing = train_st(out, folder / file, size, seed, kind, batch or size["batch"])
                    return {**timing, **scored(out, splits["test"], size, kind == "matryoshka")}

                record = cached(out.with_name(out.name + "-st-bench.json"), measure)
                results.setdefault(row, {}).setdefault(side, []).append(record)
                logger.info(
                    "%s seed %d %s %s: nDCG@10 %.4f", lang, seed, row, side, record["dim384"]["ndcg@10"]
                )
    return results


#: The samplers ``--phase samplers`` compares, on the rows with mined negatives (validation only).
SAMPLERS = ("no_duplicates", "shared_negatives")


def sampler_variants(lang: str, size: dict, seeds: list[int], work: Path) -> dict:
    """``{row: {sampler: [per seed]}}``: the toolkit's rows with mined negatives trained under each
    of :data:`SAMPLERS` and scored on the *validation* questions (the test split stays untouched,
    so the result can choose a default). The steps count how many batches each sampler made."""
    splits = br.build_splits(lang, size, work)
    folder = work / lang
    br.mine(MINILM, folder, size, "n-tuple", 1)
    results: dict = {}
    for seed in seeds:
        for row, (flags, kind, file, batch) in ROWS.items():
            if "--negative_columns" not in flags:
                continue  # without mined negatives the two samplers build the same batches
            # The sampler that goes first alternates with the seed, as the sides of run_lang do.
            for sampler in sorted(SAMPLERS, reverse=seed % 2 == 1):
                out = folder / f"seed{seed}" / f"sampler-{sampler}-{kind}-b{batch or size['batch']}"

                def measure(out=out, flags=flags, file=file, batch=batch, seed=seed, sampler=sampler):
                    timing = train_toolkit(
                        out, folder / file, size, seed, [*flags, "--batch_sampler", sampler], batch
                    )
                    return {**timing, **scored(out, splits["validation"], size, False)}

                record = cached(out.with_name(out.name + "-bench.json"), measure)
                results.setdefault(row, {}).setdefault(sampler, []).append(record)
                logger.info("%s seed %d %s %s: %d steps, validation nDCG@10 %.4f", lang, seed, row, sampler,
                            record["train_steps"], record["dim384"]["ndcg@10"])  # fmt: skip
    return results


def sampler_tables(results: dict) -> dict:
    rows = []
    for lang, by_row in results.items():
        for row, samplers in by_row.items():
            for sampler, runs in samplers.items():
                rows.append([lang, row, sampler, "/".join(str(r["train_steps"]) for r in runs),
                             _cell(runs, "ndcg@10"), _cell(runs, "recall@10"), _cell(runs, "mrr@10"),
                             f"{_mean_wall(runs):.1f}", len(runs)])  # fmt: skip
    return {
        "samplers": {
            "columns": ["lang", "row", "--batch_sampler", "steps (per seed)", "validation nDCG@10",
                        "recall@10", "MRR@10", "train wall s", "seeds"],
            "rows": rows,
            "notes": "validation questions and paragraphs (the test split is not read); the toolkit only; "
                     "metrics in %, mean ± sample std over seeds",
        }
    }  # fmt: skip


def cached_step_times(work: Path, size: dict, batches: int, repeats: int) -> dict:
    """One GradCache training step (forward, loss, backward; no optimiser) of each side on the same
    batches of ``CACHED_BATCH`` mined (question, passage, negative) rows in chunks of 32, the two
    sides interleaved batch by batch after a warm-up round (:func:`interleaved_seconds`): whether the
    GradCache row's time gap is in the step, free of the machine's drift between two whole runs.
    Both sides in fp32 (no autocast)."""
    from sentence_transformers import SentenceTransformer

    from encoder_tasks.backbone import load_encoder, load_tokenizer
    from encoder_tasks.tasks.embedding.cached_loss import cached_loss
    from encoder_tasks.tasks.embedding.model import BiEncoder
    from encoder_tasks.tasks.embedding.trainer import embedding_loss

    br.build_splits("en", size, work)
    mined = br.mine(MINILM, work / "en", size, "n-tuple", 1)
    rows = read_rows(mined).shuffle(seed=42)
    columns = ("query", "positive", "negative_1")
    chunks = [rows.select(range(i, i + CACHED_BATCH)) for i in range(0, CACHED_BATCH * batches, CACHED_BATCH)]
    path = minilm_path()
    tokenizer = load_tokenizer(path)
    ours = BiEncoder(load_encoder(path)).train()  # mnrl at temperature 0.05: scale 20
    st = SentenceTransformer(path, device="cpu")
    st.max_seq_length = size["max_length"]
    st.train()
    st_loss = st_loss_of(st, "cached")
    # Both sides tokenised before the rounds (outside the timing), each as its trainer does: the
    # toolkit pads each column to its longest text, sentence-transformers likewise (tokenize).
    ours_features = [[dict(tokenizer(list(b[c]), padding=True, truncation=True, max_length=size["max_length"],
                                     return_tensors="pt")) for c in columns] for b in chunks]  # fmt: skip
    st_features = [[st.tokenize(list(b[c])) for c in columns] for b in chunks]

    def toolkit(i):
        groups = [{k: v for k, v in g.items() if k != "token_type_ids"} for g in ours_features[i]]
        cached_loss(lambda f: ours(**f).embeddings, groups, embedding_loss(ours), 32).backward()

    def sentence_transformers(i):
        st_loss(st_features[i], None).backward()

    timed = interleaved_seconds(
        {"toolkit (--cache_chunk_size 32)": toolkit, "sentence-transformers (CachedMNRL, mini-batch 32)":
         sentence_transformers}, range(len(chunks)), repeats)  # fmt: skip
    return timed


def cached_steps_tables(timed: dict) -> dict:
    """The cached-steps phase's table (:func:`steps_table`)."""
    return steps_table(timed, "cached-steps", f"batch {CACHED_BATCH} mined (question, passage, negative) rows, "
                       "chunks of 32; forward, loss and backward, no optimiser; the sides interleaved batch by "
                       "batch after a warm-up round")  # fmt: skip


def steps_table(timed: dict, name: str, notes: str) -> dict:
    """Each side's median and total step time, and its ratio to sentence-transformers'."""
    theirs = next(v for k, v in timed.items() if k.startswith("sentence"))
    rows = [[side, f"{v['median_seconds']:.2f}", f"{v['total_seconds']:.1f}", v["steps"],
             f"{v['total_seconds'] / theirs['total_seconds']:.2f}x"] for side, v in timed.items()]  # fmt: skip
    columns = ["side", "median s a step", "total s", "steps timed", "x sentence-transformers"]
    return {name: {"columns": columns, "rows": rows, "notes": notes}}


#: The toolkit reranker of the rerank phase (``bench_retrieval.RERANK_VARIANTS``): listwise on a
#: second mining round, 8 queries (32 pairs) a step, 3 epochs, each list widened by 4 passages of
#: other rows (``--listwise_in_batch_negatives 4``), as sentence-transformers' listwise loss does.
#: Chosen on validation (``bench_retrieval --phase rerank-variants``, seed 42: nDCG@10 71.1
#: against 65.7 without the in-batch passages).
RERANK_VARIANT = br.LISTWISE + " x 3 epochs, 4 in-batch negatives"
RERANK_EPOCHS, RERANK_QUERIES, RERANK_NEGATIVES = 3, 8, 3
#: Reranker row -> its sentence-transformers loss (None: the toolkit's reranker).
RERANK_ROWS = {
    "toolkit, listwise + in-batch (pair train --listwise_negatives --listwise_in_batch_negatives 4)": None,
    "sentence-transformers CrossEncoder, listwise (MultipleNegativesRankingLoss)": "mnrl",
    "sentence-transformers CrossEncoder, pointwise (BinaryCrossEntropyLoss)": "bce",
}


class StCrossEncoderScorer:
    """A sentence-transformers ``CrossEncoder`` as the scorer :func:`encoder_tasks.tasks.embedding.
    rerank.rerank` takes (``scores(pairs)``)."""

    def __init__(self, path: Path):
        from sentence_transformers.cross_encoder import CrossEncoder

        self.model = CrossEncoder(str(path), device="cpu")

    def scores(self, pairs) -> np.ndarray:
        return np.asarray(
            self.model.predict(list(pairs), batch_size=64, show_progress_bar=False), dtype=np.float64
        )


def st_reranker_rows(rows_file: Path, kind: str):
    """The mined (query, positive, negative_1..3) rows as each sentence-transformers loss reads
    them: n-tuples for the listwise loss, (query, passage, 0/1 label) pairs for the pointwise one."""
    import datasets

    rows = [json.loads(line) for line in rows_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    negatives = [f"negative_{i}" for i in range(1, RERANK_NEGATIVES + 1)]
    if kind == "mnrl":
        return datasets.Dataset.from_dict(
            {c: [r[c] for r in rows] for c in ("query", "positive", *negatives)}
        )
    pairs = [(r["query"], r[c], float(c == "positive")) for r in rows for c in ("positive", *negatives)]
    return datasets.Dataset.from_dict(
        {k: list(v) for k, v in zip(("query", "passage", "label"), zip(*pairs))}
    )


def train_st_reranker(out: Path, rows_file: Path, size: dict, seed: int, kind: str) -> dict:
    """sentence-transformers' ``CrossEncoderTrainer`` at the toolkit reranker's settings: its
    epochs, queries per step (8, or their 32 pairs), ``pair train``'s learning rate, warm-up and
    weight decay (``EncoderTrainingArguments``' defaults), ``max_length + 32`` tokens; saved to
    ``out``. The head has no rate of its own there (the toolkit's trains at 1e-3)."""
    import torch
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
        losses,
    )
    from sentence_transformers.training_args import BatchSamplers

    from encoder_tasks.training_args import EncoderTrainingArguments as Ours

    start = time.perf_counter()
    model = CrossEncoder(minilm_path(), num_labels=1, max_length=size["max_length"] + 32, device="cpu")
    if kind == "mnrl":  # its defaults: 4 passages of other rows sampled per query besides the 3 given
        loss, batch, sampler = (
            losses.MultipleNegativesRankingLoss(model),
            RERANK_QUERIES,
            BatchSamplers.NO_DUPLICATES,
        )
    else:
        # pos_weight = negatives per positive, as sentence-transformers' own reranker examples set it
        pos_weight = torch.tensor(float(RERANK_NEGATIVES))
        loss = losses.BinaryCrossEntropyLoss(model, pos_weight=pos_weight)
        batch = RERANK_QUERIES * (1 + RERANK_NEGATIVES)
        sampler = BatchSamplers.BATCH_SAMPLER
    args = CrossEncoderTrainingArguments(
        num_train_epochs=RERANK_EPOCHS,
        per_device_train_batch_size=batch,
        batch_sampler=sampler,
        learning_rate=Ours.learning_rate,
        warmup_steps=Ours.warmup_steps,  # a float: the ratio, as ours
        weight_decay=Ours.weight_decay,
        **st_run_args(out, seed),
    )
    trainer = CrossEncoderTrainer(
        model=model, args=args, train_dataset=st_reranker_rows(rows_file, kind), loss=loss
    )
    result = trainer.train()
    model.save_pretrained(str(out))
    return {"train_wall_s": round(time.perf_counter() - start, 1), "train_steps": result.global_step,
            "bf16": args.bf16}  # fmt: skip


def toolkit_reranker_timing(out: Path, rows_file: Path, size: dict, seed: int, flags: list[str]) -> dict:
    """Train the toolkit reranker into ``out`` and time it; a model the variants phase already
    trained there (same flags, data and seed) is reused, its time read from the run's own
    ``metrics.json`` (``wall_seconds``: the run without process start-up and saving, a few
    seconds less than the timed command)."""
    if (out / "encoder_tasks.json").is_file():
        wall = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["wall_seconds"]
        return {"train_wall_s": round(wall, 1), "train_time_from": "metrics.json of an earlier run"}
    start = time.perf_counter()
    br.train_reranker(out, rows_file, size, seed, *flags)
    return {"train_wall_s": round(time.perf_counter() - start, 1)}


#: In-batch passages each query gets in the rerank-steps phase (both sides: sentence-transformers'
#: default ``num_negatives``).
RERANK_IN_BATCH = 4


def rerank_step_times(work: Path, size: dict, batches: int, repeats: int, seed: int = 42) -> dict:
    """One listwise reranker step (forward, loss, backward; no optimiser) on the same batches of
    :data:`RERANK_QUERIES` mined rows of the second mining round (seed ``seed``), each query's list
    its positive, 3 mined negatives and :data:`RERANK_IN_BATCH` passages of the other rows: the
    toolkit's model and loss in one forward over the batch's pairs (as ``pair train`` runs) and in
    one forward per passage column (as sentence-transformers' loss runs), and sentence-transformers'
    ``CrossEncoder`` ``MultipleNegativesRankingLoss``. Interleaved batch by batch after a warm-up
    round (:func:`interleaved_seconds`), in the precision both trainers pick here (bf16 autocast
    where the CPU computes it natively). Where the toolkit's in-batch reranker's training time
    goes against sentence-transformers', free of the drift between two hour-long runs."""
    import contextlib

    import torch
    from sentence_transformers.cross_encoder import CrossEncoder, losses

    from encoder_tasks.backbone import load_encoder, load_tokenizer
    from encoder_tasks.tasks.pair.listwise import listwise_loss
    from encoder_tasks.tasks.pair.model import PairClassifier

    rows_file = work / "en" / f"seed{seed}" / "mined-round2-n-tuple-3.jsonl"
    if not rows_file.is_file():
        raise SystemExit(
            f"{rows_file}: not found; run --phase rerank for seed {seed} first (it mines the rows)"
        )
    rows = st_reranker_rows(rows_file, "mnrl").shuffle(seed=seed)
    mined = ["positive", *(f"negative_{i}" for i in range(1, RERANK_NEGATIVES + 1))]
    q = RERANK_QUERIES
    chunks = [rows.select(range(i, i + q)) for i in range(0, q * batches, q)]
    # Passage columns per batch: the mined ones, then the k-th in-batch one of query j is row
    # (j + k)'s positive or negative, never its own (sentence-transformers draws them at random).
    columns = [
        [list(b[c]) for c in mined]
        + [[b[mined[k % len(mined)]][(j + 1 + k) % q] for j in range(q)] for k in range(RERANK_IN_BATCH)]
        for b in chunks
    ]
    path, length, bf16 = minilm_path(), size["max_length"] + 32, training_bf16()
    tokenizer = load_tokenizer(path)
    ours = PairClassifier(load_encoder(path), num_labels=2).train()
    theirs = CrossEncoder(path, num_labels=1, max_length=length, device="cpu")
    theirs.model.train()
    st_loss = losses.MultipleNegativesRankingLoss(theirs, num_negatives=RERANK_IN_BATCH)

    def precision():
        return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def tokens(queries, passages):
        return dict(tokenizer(queries, passages, truncation=True, max_length=length, padding=True,
                              pad_to_multiple_of=8 if bf16 else None, return_tensors="pt"))  # fmt: skip

    def one_forward(i):
        queries, cols = list(chunks[i]["query"]), columns[i]
        # Group order, as the pair task's collator builds a batch: each query's passages together.
        features = tokens([x for x in queries for _ in cols], [c[j] for j in range(q) for c in cols])
        with precision():
            logits = ours(**features).logits
        listwise_loss(logits, len(cols)).backward()

    def forward_per_column(i):
        queries = list(chunks[i]["query"])
        with precision():
            logits = torch.stack([ours(**tokens(queries, c)).logits for c in columns[i]], dim=1)
        listwise_loss(logits.reshape(-1, 2), len(columns[i])).backward()

    def sentence_transformers(i):
        b = chunks[i]
        with precision():
            loss = st_loss([list(b["query"]), *(list(b[c]) for c in mined)], None)
        loss.backward()

    return interleaved_seconds(
        {
            "toolkit, one forward over the batch's pairs (pair train)": one_forward,
            "toolkit, one forward per passage column": forward_per_column,
            "sentence-transformers CrossEncoder, MultipleNegativesRankingLoss": sentence_transformers,
        },
        range(len(chunks)),
        repeats,
    )


def rerank_lang(lang: str, size: dict, seeds: list[int], work: Path) -> dict:
    """``{row: [per seed]}``: the hard-negative bi-encoder alone and re-ordered by each reranker."""
    splits = br.build_splits(lang, size, work)
    folder = work / lang
    mined, labelled = (
        br.mine(MINILM, folder, size, "n-tuple", 1),
        br.mine(MINILM, folder, size, "labeled-pair", 3),
    )
    flags = br.RERANK_VARIANTS[RERANK_VARIANT]
    results: dict = {}
    for seed in seeds:
        run = folder / f"seed{seed}"
        hard = br.train_embedding(run / "hardneg", mined, size, seed, "--negative_columns", "negative_1")
        rows_file = br.reranker_data(flags, labelled, hard, folder, run, size)  # the second mining round
        results.setdefault("hardneg, no reranker", []).append(
            br.hardneg_alone(run, hard, splits, size)["hardneg"]
        )
        # The order (RERANK_ROWS') is reversed on odd seeds: the machine's drift is shared out.
        order = list(RERANK_ROWS.items())
        for row, kind in reversed(order) if seed % 2 else order:
            out = run / (br.reranker_folder(RERANK_VARIANT) if kind is None
                         else f"vs-st-ce-{kind}{'-bf16' if training_bf16() else ''}")  # fmt: skip

            def measure(out=out, kind=kind, seed=seed, hard=hard, rows_file=rows_file):
                if kind is None:
                    timing = toolkit_reranker_timing(out, rows_file, size, seed, flags)
                    scorer = out
                else:
                    timing = train_st_reranker(out, rows_file, size, seed, kind)
                    scorer = StCrossEncoderScorer(out)
                return {**timing, **br.rerank_rows(hard, scorer, splits, size)["hardneg + reranker"]}

            record = cached(out.with_name(out.name + "-st-rerank.json"), measure)
            results.setdefault(row, []).append(record)
            logger.info("%s seed %d %s: nDCG@10 %.4f", lang, seed, row, record["ndcg@10"])
    return results


def rerank_tables(results: dict) -> dict:
    """Each reranker's scores, and the targets: toolkit at or above each sentence-transformers
    reranker in no more time, and each reranker's gain over the bi-encoder alone."""
    metrics = ("recall@10", "mrr@10", "ndcg@10")
    rows, targets = [], []
    for lang, by_row in results.items():
        for name, runs in by_row.items():
            cells = [_spread(runs, m) for m in metrics]
            wall = f"{_mean_wall(runs):.1f}" if "train_wall_s" in runs[0] else "-"
            top = ", ".join(str(r["rerank_top_k"]) for r in runs) if "rerank_top_k" in runs[0] else "-"
            rows.append([lang, name, *cells, wall, top, len(runs)])
        alone = by_row["hardneg, no reranker"]
        # None where --rows left the toolkit's row out: each reranker is then judged alone
        ours_name = next((n for n, k in RERANK_ROWS.items() if k is None), None)
        for name in RERANK_ROWS:
            if name not in by_row:
                continue
            judged = len(by_row[name]) > 1  # one seed has no spread to judge by
            diff, spread = _gap(by_row[name], alone)
            targets.append([lang, f"{name} - no reranker, nDCG@10 (points)", f"{diff:+.1f}",
                            f"{spread:.1f}" if judged else "- (1 seed)",
                            ("yes" if diff >= 3 else "no") if judged else "not judged", ">= +3", "-"])  # fmt: skip
            if name != ours_name and ours_name in by_row:
                diff, spread = _gap(by_row[ours_name], by_row[name])
                t = [_mean_wall(by_row[ours_name]), _mean_wall(by_row[name])]
                targets.append([lang, f"toolkit - {name}, nDCG@10 (points)", f"{diff:+.1f}",
                                f"{spread:.1f}" if judged else "- (1 seed)",
                                ("yes" if diff >= -spread else "no") if judged else "not judged",
                                "at or above (within spread)", f"{t[0] / t[1]:.2f}x"])  # fmt: skip
    return {
        "rerank-st": {
            "columns": ["lang", "reranker", *metrics, "train wall s", "top k re-ordered (chosen on validation)",
                        "seeds"],
            "rows": rows,
            "notes": "test questions and paragraphs unseen in training; metrics in %, mean ± sample std over seeds",
        },
        "rerank-st-targets": {
            "columns": ["lang", "target", "measured", "spread", "met", "asked", "toolkit / ST train time"],
            "rows": targets,
            "notes": "spread: the larger sample std over seeds of the two rows compared",
        },
    }  # fmt: skip


def _spread(runs: list[dict], key: str) -> str:
    s = mean_spread([r[key] for r in runs])
    return f"{100 * s['mean']:.1f} ± {100 * s['std']:.1f}" if len(runs) > 1 else f"{100 * s['mean']:.1f}"


def _gap(a: list[dict], b: list[dict]) -> tuple[float, float]:
    """Mean nDCG@10 of ``a`` minus ``b`` and the larger spread, in points."""
    sa, sb = (mean_spread([r["ndcg@10"] for r in x]) for x in (a, b))
    return 100 * (sa["mean"] - sb["mean"]), 100 * max(sa["std"], sb["std"])


def _mean_wall(runs: list[dict]) -> float:
    """The mean training wall time of ``runs``, in seconds."""
    return mean_spread([r["train_wall_s"] for r in runs])["mean"]


def _cell(runs: list[dict], key: str, dims: int = 384) -> str:
    return _spread([r[f"dim{dims}"] for r in runs], key)


def tables(results: dict) -> dict:
    """The side-by-side table and the targets (toolkit >= sentence-transformers, in no more time)."""
    rows, targets = [], []
    for lang, by_row in results.items():
        for row, sides in by_row.items():
            dims = MATRYOSHKA if "Matryoshka" in row else (384,)
            for d in dims:
                name = row if d == 384 else f"{row}, cut to {d}"
                for side, runs in sides.items():
                    rows.append([lang, name, side, _cell(runs, "ndcg@10", d), _cell(runs, "recall@10", d),
                                 _cell(runs, "mrr@10", d), f"{_mean_wall(runs):.1f}", len(runs)])  # fmt: skip
            ours, theirs = sides.get("toolkit", []), sides.get("sentence-transformers", [])
            if ours and theirs:
                diff, spread = _gap([r["dim384"] for r in ours], [r["dim384"] for r in theirs])
                t = [_mean_wall(ours), _mean_wall(theirs)]
                targets.append([lang, row, f"{diff:+.1f}", f"{spread:.1f}",
                                "yes" if diff >= -spread else "no", f"{t[0] / t[1]:.2f}x",
                                "yes" if t[0] <= t[1] * 1.05 else "no"])  # fmt: skip
    return {
        "retrieval-st": {
            "columns": ["lang", "row", "trainer", "nDCG@10", "recall@10", "MRR@10", "train wall s", "seeds"],
            "rows": rows,
            "notes": "test questions and paragraphs unseen in training; metrics in %, mean ± sample std over seeds",
        },
        "retrieval-st-targets": {
            "columns": ["lang", "row", "toolkit - ST nDCG@10 (points)", "spread", "at or above (within spread)",
                        "toolkit / ST train time", "no more time (5% allowance)"],
            "rows": targets,
            "notes": "spread: the larger sample std over seeds of the two sides",
        },
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(br.SIZES), default="quick")
    parser.add_argument("--langs", default="en")
    parser.add_argument("--seeds", type=int, default=None, help="default: the size's (1 quick, 3 standard)")
    parser.add_argument(
        "--work", default=None, help="bench_retrieval's cache folder (default: /tmp/bench-retrieval-<size>)"
    )
    parser.add_argument("--rows", default="all",
                        help="row names separated by ';' (default all): ROWS, or RERANK_ROWS with --phase rerank")  # fmt: skip
    parser.add_argument("--phase", choices=("train", "samplers", "cached-steps", "rerank", "rerank-steps"),
                        default="train",
                        help="train: the rows, both trainers; samplers: the toolkit's rows with mined negatives "
                             "under each batch sampler, on validation; cached-steps: one GradCache step of each side, "
                             "interleaved on the same batches (English); rerank: the toolkit's reranker against "
                             "sentence-transformers' CrossEncoder trainer; rerank-steps: one listwise reranker "
                             "step of each side, interleaved on the same batches (English, seed 42's rows)")  # fmt: skip
    parser.add_argument("--batches", type=int, default=6, help="cached-steps: batches of CACHED_BATCH rows")
    parser.add_argument("--repeats", type=int, default=2, help="cached-steps: timed rounds after the warm-up")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    size = br.SIZES[args.size]
    work = Path(args.work or f"/tmp/bench-retrieval-{args.size}")
    if args.phase == "cached-steps":
        timed = cached_step_times(work, size, args.batches, args.repeats)
        print(json.dumps(timed, indent=1))
        payload = {"size": args.size, "batches": args.batches, "repeats": args.repeats, "batch": CACHED_BATCH,
                   "chunk": 32, "steps": timed, "tables": cached_steps_tables(timed)}  # fmt: skip
        print(f"results: {save_results('retrieval-st-cached-steps', payload)}")
        return
    if args.phase == "rerank-steps":
        timed = rerank_step_times(work, size, args.batches, args.repeats)
        print(json.dumps(timed, indent=1))
        payload = {"size": args.size, "batches": args.batches, "repeats": args.repeats,
                   "queries": RERANK_QUERIES, "mined_negatives": RERANK_NEGATIVES, "in_batch": RERANK_IN_BATCH,
                   "bf16": training_bf16(), "steps": timed, "tables": steps_table(timed, "rerank-steps",
                   f"batches of {RERANK_QUERIES} mined rows (seed 42's second mining round), each query with its "
                   f"positive, {RERANK_NEGATIVES} mined and {RERANK_IN_BATCH} in-batch passages; forward, loss and "
                   "backward, no optimiser; the sides interleaved batch by batch after a warm-up round")}  # fmt: skip
        print(f"results: {save_results('retrieval-st-rerank-steps', payload)}")
        return
    if args.rows != "all":  # keep the named rows of the phase's table (in place: the phases read them)
        table = RERANK_ROWS if args.phase == "rerank" else ROWS
        wanted = [r.strip() for r in args.rows.split(";") if r.strip()]
        unknown = sorted(set(wanted) - set(table))
        if unknown:
            parser.error(f"--rows: unknown {unknown}; expected names from {list(table)}")
        for name in set(table) - set(wanted):
            table.pop(name)
    seeds = list(range(42, 42 + (args.seeds or size["seeds"])))
    if args.phase == "samplers":
        results = {lang: sampler_variants(lang, size, seeds, work) for lang in args.langs.split(",")}
        payload = {"size": args.size, "seeds": seeds, "samplers": list(SAMPLERS), "rows": {k: list(v) for k, v in ROWS.items()},
                   "bf16": training_bf16(), "results": results, "tables": sampler_tables(results)}  # fmt: skip
        t = payload["tables"]["samplers"]
        print_table([dict(zip(t["columns"], r)) for r in t["rows"]], t["columns"])
        print(f"results: {save_results('retrieval-st-samplers', payload)}")
        return
    if args.phase == "rerank":
        results = {lang: rerank_lang(lang, size, seeds, work) for lang in args.langs.split(",")}
        payload = {"size": args.size, "seeds": seeds, "toolkit_variant": {RERANK_VARIANT: br.RERANK_VARIANTS[RERANK_VARIANT]},
                   "st_losses": RERANK_ROWS, "sentence_transformers_bf16": training_bf16(), "results": results, "tables": rerank_tables(results)}  # fmt: skip
        t = payload["tables"]["rerank-st"]
        print_table([dict(zip(t["columns"], r)) for r in t["rows"]], t["columns"])
        print(f"results: {save_results('retrieval-st-rerank', payload)}")
        return
    results = {lang: run_lang(lang, size, seeds, work) for lang in args.langs.split(",")}
    payload = {"size": args.size, "seeds": seeds, "rows": {k: list(v) for k, v in ROWS.items()},
               "settings": {"learning_rate": LEARNING_RATE, "warmup_ratio": WARMUP, "weight_decay": WEIGHT_DECAY,
                            "sentence_transformers_bf16": training_bf16(),
                            "cached_batch": CACHED_BATCH, "sizes": size},
               "results": results, "tables": tables(results)}  # fmt: skip
    t = payload["tables"]["retrieval-st"]
    print_table([dict(zip(t["columns"], r)) for r in t["rows"]], t["columns"])
    print(f"results: {save_results('retrieval-st', payload)}")


if __name__ == "__main__":
    main()

"""Defaults re-derived on validation data only: the batch-8 rule, the NER head rate, the QA quick start.

The committed results: ``qa-quickstart`` (benchmarks/results/defaults-qa-quickstart-*.json). The
batch-8 rule and the NER head rate were checked as toolkit variants inside the training benchmark
instead (bench_all.py ``--variant``, the ``variants`` table), on the same validation splits; the
``batch-rule`` and ``ner-head-lr`` studies here are the larger standalone versions (STS-B 2,000 x 2,
SST-2 4,000 x 2), not run for the committed tables.

    python -m benchmarks.bench_defaults qa-quickstart      # the longest: run it first
    python -m benchmarks.bench_defaults ner-head-lr
    python -m benchmarks.bench_defaults batch-rule [--skip_large]
    python -m benchmarks.bench_defaults batch-rule --work /tmp/defaults   # keep (and reuse) the runs

Every run is ``encoder-tasks <task> train`` in its own process (MiniLM, ``--save_strategy no
--report_to none --disable_tqdm true``), seeds 1, 2 and 3, and each choice is read from the
final evaluation on a **validation** set (``metrics.json``'s ``eval_*``). No test file is read,
except once in ``qa-quickstart``: after the choice is made, its three models are scored on
XQuAD-en (what the recipe evaluates on), as the check on data no choice has seen.

Where a dataset has no validation split it is carved here with seed 0 and written to the
work directory, disjoint from the training data (SST-2: 1,000 sentences of ``train.tsv``, the
rest is the training pool; ``dev.tsv`` is the SST-2 test split). Training subsets are the
toolkit's own ``--max_train_samples`` (drawn with the run's seed, as a recipe draws them), so
both arms of a comparison train on the same examples for a seed.

Runs whose ``metrics.json`` is already in ``--work`` are read, not run again, so a study can
be resumed. Each study writes ``benchmarks/results/defaults-<study>-<time>.json`` with the
command, the data, every run's flags and metrics, and a ``tables`` field (mean ± std over the
seeds) that ``benchmarks/tables.py`` renders into the docs.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import DATA, MINILM, SEEDS, mean_spread, require_data, save_results, worker_env
from benchmarks.harness import REPO, invocation
from benchmarks.suite.toolkit_run import QUIET_FLAGS

#: Carved validation subsets are drawn with this seed (never a training seed).
CARVE_SEED = 0
#: The QA quick start's time budget: ~5 min of training at ~2,000 real tokens/s (bf16, 2 cores).
QA_TOKENS_PER_S = 2000
QA_BUDGET_TOKENS = 300 * QA_TOKENS_PER_S


# ---- running the toolkit -----------------------------------------------------------------------
def train(task: str, flags: list[str], out: Path) -> dict:
    """``encoder-tasks <task> train <flags>`` into ``out``; its ``metrics.json`` (read, not rerun,
    when ``out`` already holds one)."""
    metrics_file = out / "metrics.json"
    if not metrics_file.exists():
        command = [sys.executable, "-m", "encoder_tasks.cli", task, "train", *flags]
        command += ["--output_dir", str(out), "--overwrite_output_dir", *QUIET_FLAGS]
        _run(command, out.parent / f"{out.name}.log")
    return json.loads(metrics_file.read_text())


def evaluate(task: str, model_dir: Path, validation_file: Path) -> dict:
    """``encoder-tasks <task> evaluate`` of a saved model on another file (read if done before)."""
    done = sorted((model_dir / "eval").glob(f"{validation_file.stem}*.json"))
    if not done:
        command = [sys.executable, "-m", "encoder_tasks.cli", task, "evaluate"]
        command += ["--model_name_or_path", str(model_dir), "--validation_file", str(validation_file)]
        _run(
            command + ["--report_to", "none", "--disable_tqdm", "true"],
            model_dir.parent / f"{model_dir.name}.eval.log",
        )
        done = sorted((model_dir / "eval").glob(f"{validation_file.stem}*.json"))
    return json.loads(done[-1].read_text())


def _run(command: list[str], log: Path) -> None:
    print("  $", " ".join(command[1:]), flush=True)
    with log.open("w") as handle:
        status = subprocess.run(command, env=worker_env(), cwd=REPO, stdout=handle, stderr=subprocess.STDOUT)
    if status.returncode != 0:
        tail = log.read_text().splitlines()[-15:]
        sys.exit(f"run failed ({status.returncode}), log {log}:\n" + "\n".join(tail))


def train_tokens(metrics: dict) -> float:
    """Real (non-padding) training tokens of a run, all epochs (the toolkit counts them)."""
    return metrics["train_real_tokens_per_second"] * metrics["train_runtime"]


def steps(metrics: dict) -> int:
    return round(metrics["train_runtime"] * metrics["train_steps_per_second"])


def spread(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    """``mean ± std`` of ``values`` (times ``scale``) as the tables print it."""
    s = mean_spread([v * scale for v in values])
    return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}"


def seeds_list(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    return " / ".join(f"{v * scale:.{digits}f}" for v in values)


def run_arm(study: str, name: str, task: str, flags: list[str], seeds, work: Path) -> list[dict]:
    """One setting trained once per seed: ``[{"arm", "seed", "flags", "metrics"}, ...]``."""
    runs = []
    for seed in seeds:
        out = work / study / f"{name}-seed{seed}"
        out.parent.mkdir(parents=True, exist_ok=True)
        print(f"{study}: {name}, seed {seed}", flush=True)
        metrics = train(task, [*flags, "--seed", str(seed)], out)
        runs.append({"arm": name, "seed": seed, "flags": flags, "output_dir": str(out), "metrics": metrics})
    return runs


def common_flags() -> list[str]:
    return ["--model_name_or_path", MINILM, "--data_dir", str(DATA)]


def finish(study: str, args, data: dict, runs: list[dict], tables: dict) -> None:
    path = save_results(
        f"defaults-{study}",
        {
            "study": study,
            "command": invocation("bench_defaults"),
            "seeds": list(args.seeds),
            "data": data,
            "runs": runs,
            "tables": tables,
        },
    )
    for name, table in tables.items():
        print(f"\n{name}\n" + " | ".join(table["columns"]))
        for row in table["rows"]:
            print(" | ".join(row))
    print(f"\nsaved {path}")


# ---- carved validation sets --------------------------------------------------------------------
def carve_sst2(work: Path, size: int = 1000) -> tuple[Path, Path]:
    """SST-2 ``train.tsv`` split in two with seed 0: ``size`` validation sentences, the rest (less
    verbatim copies of them) a training pool that ``--max_train_samples`` draws from."""
    (source,) = require_data("cls/sst2/train.tsv")
    header, *lines = source.read_text(encoding="utf-8").splitlines()
    order = list(range(len(lines)))
    random.Random(CARVE_SEED).shuffle(order)
    held = set(order[:size])
    validation = work / "sst2-validation.tsv"
    pool = work / "sst2-train-pool.tsv"
    validation.write_text("\n".join([header] + [lines[i] for i in sorted(held)]) + "\n", encoding="utf-8")
    # SST-2 repeats some lines verbatim: a copy of a validation sentence leaves the pool too.
    seen = {lines[i] for i in held}
    rest = [line for i, line in enumerate(lines) if i not in held and line not in seen]
    pool.write_text("\n".join([header, *rest]) + "\n", encoding="utf-8")
    return pool, validation


def sample_conll(source: Path, target: Path, size: int) -> Path:
    """``size`` sentences of a CoNLL file (blank-line separated), drawn with seed 0, file order kept."""
    blocks = [b for b in source.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    chosen = sorted(random.Random(CARVE_SEED).sample(range(len(blocks)), size))
    target.write_text("\n\n".join(blocks[i].strip("\n") for i in chosen) + "\n\n", encoding="utf-8")
    return target


def sample_squad(source: Path, target: Path, size: int) -> Path:
    """``size`` questions of a SQuAD v1.1 JSON file, drawn with seed 0, written as SQuAD JSON."""
    data = json.loads(source.read_text(encoding="utf-8"))
    where = [
        (a, p, q)
        for a, article in enumerate(data["data"])
        for p, paragraph in enumerate(article["paragraphs"])
        for q in range(len(paragraph["qas"]))
    ]
    chosen = set(random.Random(CARVE_SEED).sample(where, size))
    articles = []
    for a, article in enumerate(data["data"]):
        paragraphs = []
        for p, paragraph in enumerate(article["paragraphs"]):
            qas = [qa for q, qa in enumerate(paragraph["qas"]) if (a, p, q) in chosen]
            if qas:
                paragraphs.append({"context": paragraph["context"], "qas": qas})
        if paragraphs:
            articles.append({"title": article.get("title", str(a)), "paragraphs": paragraphs})
    target.write_text(json.dumps({"version": data.get("version", "1.1"), "data": articles}), encoding="utf-8")
    return target


# ---- study 1: the batch-8 rule -----------------------------------------------------------------
STSB_FLAGS = [
    "--train_file", "pair/stsb/sts-train.csv",
    "--validation_file", "pair/stsb/sts-dev.csv",
    "--column_names", "genre,source,year,id,score,sentence1,sentence2",
    "--text_column", "sentence1",
    "--text_pair_column", "sentence2",
    "--label_column", "score",
    "--problem_type", "regression",
    "--max_length", "128",
]  # fmt: skip


def batch_rule(args) -> None:
    """Batch 8 against 16 where 16 gives fewer than 500 optimiser steps (and one setting where it
    gives more, unless ``--skip_large``)."""
    work = args.work
    pool, validation = carve_sst2(work)
    sst2 = ["--train_file", str(pool), "--validation_file", str(validation)]
    sst2 += ["--text_column", "sentence", "--label_column", "label", "--max_length", "128"]
    sst2_metric = ("eval_accuracy", "accuracy, SST-2 carved validation")
    settings = [
        # name, task, flags, examples, epochs, (metric key, metric name)
        ("stsb-2000x2", "pair", STSB_FLAGS, 2000, 2, ("eval_spearman", "Spearman, STS-B dev")),
        ("sst2-1000x1", "classification", sst2, 1000, 1, sst2_metric),
    ]
    if not args.skip_large:  # >= 500 steps at 16: does 16 lose anything there?
        settings.append(("sst2-4000x2", "classification", sst2, 4000, 2, sst2_metric))
    runs, rows = [], []
    for name, task, flags, examples, epochs, (key, metric) in settings:
        size = ["--max_train_samples", str(examples), "--num_train_epochs", str(epochs)]
        base = common_flags() + flags + size
        for batch in (8, 16):
            arm = run_arm(
                "batch-rule", f"{name}-batch{batch}", task,
                base + ["--per_device_train_batch_size", str(batch)], args.seeds, work,
            )  # fmt: skip
            runs += arm
            values = [r["metrics"][key] for r in arm]
            rows.append(
                [
                    f"{name.split('-')[0].upper()} {examples:,} x {epochs}",
                    f"{examples * epochs // 16:,}",
                    str(batch),
                    f"{steps(arm[0]['metrics']):,}",
                    metric,
                    spread(values),
                    seeds_list(values),
                ]
            )
    data = {
        "stsb": "train: --max_train_samples 2000 of pair/stsb/sts-train.csv (drawn with the run's seed); "
        "validation: pair/stsb/sts-dev.csv (1,500 pairs); sts-test.csv not read",
        "sst2": "train: --max_train_samples N of SST-2 train.tsv less the validation sentences (drawn with the "
        f"run's seed); validation: 1,000 sentences of train.tsv carved with seed {CARVE_SEED}; dev.tsv (the "
        "SST-2 test split) not read. SST-2 train holds phrases of the same reviews, so the carved validation "
        "is easier than dev",
        "skipped": [] if not args.skip_large else ["sst2-4000x2 (--skip_large)"],
    }
    tables = {
        "batch-rule": {
            "columns": [
                "setting (examples x epochs)",
                "steps at batch 16",
                "batch",
                "steps",
                "validation metric",
                "mean ± std (seeds 1-3)",
                "per seed",
            ],
            "rows": rows,
            "notes": "MiniLM, toolkit defaults otherwise (lr 5e-5, 10% warm-up, bf16 where native). "
            "Validation data only.",
        }
    }
    finish("batch-rule", args, data, runs, tables)


# ---- study 2: the NER head learning rate -------------------------------------------------------
def ner_head_lr(args) -> None:
    """``--head_learning_rate 1e-3`` (the default) against the encoder's own rate for the head."""
    work = args.work
    (dev,) = require_data("ner/wikiann-en/dev")
    (work / "ner").mkdir(parents=True, exist_ok=True)
    validation = sample_conll(dev, work / "ner" / "wikiann-en-dev-1000.conll", 1000)
    base = common_flags() + [
        "--train_file", "ner/wikiann-en/train",
        "--validation_file", str(validation),
        "--token_prefix", "en:",
        "--tag_scheme", "iob2",
        "--max_length", "128",
        "--max_train_samples", "1000",
        "--num_train_epochs", "1",
    ]  # fmt: skip
    arms = [("1e-3 (default)", "1e-3"), ("none (= encoder, 5e-5)", "none")]
    runs, rows = [], []
    for label, rate in arms:
        arm = run_arm(
            "ner-head-lr", f"head-lr-{rate}", "ner", base + ["--head_learning_rate", rate], args.seeds, work
        )
        runs += arm
        strict = [r["metrics"]["eval_f1_strict"] for r in arm]
        lenient = [r["metrics"]["eval_f1_lenient"] for r in arm]
        rows.append(
            [label, f"{steps(arm[0]['metrics']):,}", spread(strict), spread(lenient), seeds_list(strict)]
        )
    data = {
        "train": "--max_train_samples 1000 of ner/wikiann-en/train (drawn with the run's seed), 1 epoch",
        "validation": f"1,000 sentences of ner/wikiann-en/dev drawn with seed {CARVE_SEED}; test not read",
    }
    tables = {
        "ner-head-lr": {
            "columns": [
                "head learning rate",
                "steps",
                "strict F1, validation (seeds 1-3)",
                "lenient F1",
                "strict F1 per seed",
            ],
            "rows": rows,
            "notes": "WikiANN-en, 1,000 sentences x 1 epoch, MiniLM, softmax head, toolkit defaults otherwise "
            "(encoder lr 5e-5, automatic batch). Validation data only.",
        }
    }
    finish("ner-head-lr", args, data, runs, tables)


# ---- study 3: the QA quick start ---------------------------------------------------------------
QA_FLAGS = [
    "--train_file", "qa/squadshifts/squadshifts_reddit_v1.0.json",
    "--max_length", "384",
    "--doc_stride", "128",
    "--max_answer_length", "30",
]  # fmt: skip
#: The recipe's batch; a stage-2 candidate may take 8 (what --auto_batch_size would choose).
QA_BATCH = 16


def qa_candidate(samples: int, epochs: int, rate: str, batch: int) -> tuple[str, list[str]]:
    flags = ["--max_train_samples", str(samples), "--num_train_epochs", str(epochs), "--learning_rate", rate]
    flags += ["--per_device_train_batch_size", str(batch)]
    return f"{samples}x{epochs}-lr{rate}" + (f"-b{batch}" if batch != QA_BATCH else ""), flags


def qa_quickstart(args) -> None:
    """Learning rates at the recipe's size and batch; then, at the best rate, 2 epochs, twice the
    data, and twice the data at batch 8 (what ``--auto_batch_size`` picks when a recipe names no
    batch). The best validation F1 within the time budget gets seeds 2 and 3, then one look at
    XQuAD-en."""
    work = args.work
    (amazon, xquad) = require_data(
        "qa/squadshifts/squadshifts_amazon_reviews_v1.0.json", "qa/xquad-en-dev/xquad.en.articles00-23.json"
    )
    (work / "qa").mkdir(parents=True, exist_ok=True)
    validation = sample_squad(
        amazon, work / "qa" / f"amazon-validation-{args.qa_validation}.json", args.qa_validation
    )
    base = common_flags() + QA_FLAGS + ["--validation_file", str(validation)]
    first, *rest = args.seeds
    candidates: dict[str, dict] = {}

    def try_candidate(samples: int, epochs: int, rate: str, batch: int = QA_BATCH) -> None:
        name, flags = qa_candidate(samples, epochs, rate, batch)
        (run,) = run_arm("qa-quickstart", name, "qa", base + flags, [first], work)
        tokens = train_tokens(run["metrics"])
        candidates[name] = {
            "samples": samples, "epochs": epochs, "lr": rate, "batch": batch, "tokens": tokens, "runs": [run]
        }  # fmt: skip
        print(
            f"  {name}: validation F1 {run['metrics']['eval_f1']:.2f}, {tokens:,.0f} training tokens",
            flush=True,
        )

    def within_budget(name: str) -> bool:
        return candidates[name]["tokens"] <= QA_BUDGET_TOKENS * 1.05  # "~5 min"

    def best(names) -> str:
        return max(names, key=lambda n: candidates[n]["runs"][0]["metrics"]["eval_f1"])

    # Stage 1: the learning rate at the recipe's size. Stage 2: that rate, more epochs or more data.
    for rate in args.qa_rates:
        try_candidate(args.qa_samples, 1, rate)
    rate = candidates[best(list(candidates))]["lr"]
    for samples, epochs, batch in args.qa_grow:
        try_candidate(samples, epochs, rate, batch)
    eligible = [n for n in candidates if within_budget(n)]
    chosen = best(eligible)
    print(f"chosen: {chosen}", flush=True)
    choice = candidates[chosen]
    choice["runs"] += run_arm("qa-quickstart", chosen, "qa", choice["runs"][0]["flags"], rest, work)
    # The unseen check, once, after the choice: the three models on XQuAD-en.
    unseen = [evaluate("qa", Path(run["output_dir"]), xquad) for run in choice["runs"]]
    for run, metrics in zip(choice["runs"], unseen, strict=True):
        run["xquad_en"] = metrics

    rows = []
    for name, c in candidates.items():
        runs = c["runs"] if name != chosen else c["runs"][:1]
        f1 = [r["metrics"]["eval_f1"] for r in runs]
        em = [r["metrics"]["eval_exact"] for r in runs]
        rows.append(_qa_row(c, str(first), runs, f1, em, "-", "-"))
    f1 = [r["metrics"]["eval_f1"] for r in choice["runs"]]
    em = [r["metrics"]["eval_exact"] for r in choice["runs"]]
    x_f1 = [r["xquad_en"]["eval_f1"] for r in choice["runs"]]
    x_em = [r["xquad_en"]["eval_exact"] for r in choice["runs"]]
    seeds = ", ".join(str(s) for s in args.seeds)
    rows.append(
        _qa_row(
            choice,
            f"{seeds} (chosen)",
            choice["runs"],
            f1,
            em,
            spread(x_f1, digits=1) if len(x_f1) > 1 else f"{x_f1[0]:.1f}",
            spread(x_em, digits=1) if len(x_em) > 1 else f"{x_em[0]:.1f}",
        )
    )
    data = {
        "train": "--max_train_samples N of qa/squadshifts/squadshifts_reddit_v1.0.json (drawn with the run's seed)",
        "validation": f"{args.qa_validation} questions of squadshifts_amazon_reviews_v1.0.json drawn with seed "
        f"{CARVE_SEED} (written as SQuAD JSON); the choice is made on it",
        "unseen_check": "qa/xquad-en-dev/xquad.en.articles00-23.json (632 questions), the chosen config's models "
        "only, after the choice",
        "budget": f"training real tokens <= {QA_BUDGET_TOKENS:,} (+5%): ~5 min at {QA_TOKENS_PER_S:,} tokens/s",
        "candidates": list(candidates),
        "chosen": chosen,
    }
    runs = [r for c in candidates.values() for r in c["runs"]]
    tables = {
        "qa-quickstart": {
            "columns": [
                "training questions x epochs",
                "learning rate",
                "batch",
                "seeds",
                "training tokens",
                "F1, validation (Amazon)",
                "EM, validation",
                "F1, XQuAD-en (unseen)",
                "EM, XQuAD-en",
            ],
            "rows": rows,
            "notes": "Trained on SQuADShifts Reddit, max length 384, MiniLM, bf16. Candidates: 1 seed; the "
            f"chosen one (best validation F1 within the {QA_BUDGET_TOKENS:,}-token budget): seeds {seeds}; "
            "XQuAD-en was scored only for the chosen one, after the choice.",
        }
    }
    finish("qa-quickstart", args, data, runs, tables)


def _qa_row(c: dict, seeds: str, runs: list, f1: list, em: list, x_f1: str, x_em: str) -> list[str]:
    # Each seed draws its own subset, so the token count is the mean over the runs shown.
    tokens = mean_spread([train_tokens(r["metrics"]) for r in runs])["mean"]
    return [
        f"{c['samples']:,} x {c['epochs']}",
        c["lr"],
        str(c["batch"]),
        seeds,
        f"{tokens:,.0f}",
        spread(f1, digits=1) if len(f1) > 1 else f"{f1[0]:.1f}",
        spread(em, digits=1) if len(em) > 1 else f"{em[0]:.1f}",
        x_f1,
        x_em,
    ]


# ---- command line ------------------------------------------------------------------------------
def _grow(text: str) -> list[tuple[int, int, int]]:
    """``"1500x2,3000x1,3000x1b8"`` -> ``[(1500, 2, 16), (3000, 1, 16), (3000, 1, 8)]``: questions
    x epochs, and a batch other than the recipe's after ``b``."""
    grown = []
    for item in filter(None, text.split(",")):
        size, _, batch = item.partition("b")
        samples, epochs = size.split("x")
        grown.append((int(samples), int(epochs), int(batch or QA_BATCH)))
    return grown


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("study", choices=["batch-rule", "ner-head-lr", "qa-quickstart"])
    parser.add_argument("--seeds", type=lambda s: [int(v) for v in s.split(",")], default=list(SEEDS))
    parser.add_argument("--work", type=Path, default=None, help="where runs go (default: a new temp dir)")
    parser.add_argument("--skip_large", action="store_true", help="batch-rule: leave out SST-2 4,000 x 2")
    parser.add_argument("--qa_samples", type=int, default=1500, help="qa: training questions of stage 1")
    parser.add_argument("--qa_rates", type=lambda s: s.split(","), default=["1e-4", "2e-4", "3e-4", "5e-4"])
    parser.add_argument("--qa_grow", type=_grow, default=_grow("1500x2,3000x1,3000x1b8"), help="qa: stage 2")
    parser.add_argument("--qa_validation", type=int, default=300, help="qa: Amazon validation questions")
    args = parser.parse_args()
    args.work = args.work or Path(tempfile.mkdtemp(prefix="bench-defaults-"))
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"runs under {args.work}", flush=True)
    {"batch-rule": batch_rule, "ner-head-lr": ner_head_lr, "qa-quickstart": qa_quickstart}[args.study](args)


if __name__ == "__main__":
    main()

"""Prediction speed: the toolkit's ``predict`` against ``transformers.pipeline``, both batched,
at the same batch size and precision, on the same weights and the same inputs.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python -m benchmarks.bench_predict           # the real run
    .venv/bin/python -m benchmarks.bench_predict --quick                           # a smoke run

Tasks: classification (SST-2 dev, 872 sentences) and NER (the first 1,000 sentences of the
WikiANN-en test file, given as their words). The weights: one toolkit model per task trained
first on a tiny budget (``--train_examples`` sentences of the task's training file, 1 epoch,
toolkit defaults); its speed does not depend on how well it was trained, and both runners
use it:

- classification: the pipeline runs on the toolkit's model itself (``text-classification``
  accepts any module whose output has ``logits``; labels come back as ``LABEL_<index>``);
- NER: the pipeline runs on the toolkit model's stock export
  (``AutoModelForTokenClassification`` with the same encoder and classifier weights, built in
  memory by the task's ``stock_model`` hook, as ``encoder-tasks ner export`` writes it), because
  ``token-classification`` reads tag names from ``config.id2label``, which only the export
  sets. Its words go in pre-split (``is_split_into_words=True``, ``aggregation_strategy=
  "first"``: the first sub-token labels the word, as the toolkit does).

Rows per task, every one at batch ``--batch_size`` (64): the pipeline in fp32; the pipeline in
bf16 twice, once with the model cast to bf16 and once under bf16 autocast (the faster of the
two is the bf16 reference); the toolkit in fp32 (``--precision fp32``) and at its default
``--precision auto`` (bf16 autocast where the hardware runs bf16 natively, else fp32), plus the
toolkit's default batch size if it is not ``--batch_size``. Each timing is one warm-up pass
over all inputs and the median of ``--repeats`` (3) timed passes. Speed is real (non-padding)
tokens per second: the inputs' token count as the tokenizer gives it (special tokens
included), the same count for both runners. Agreement with the fp32 pipeline's output shows
the runners did the same work: the fraction of equal labels (classification), and the F1 of
entity spans ``(type, start, end)`` (NER); the toolkit decodes tags with constrained Viterbi,
the pipeline with per-word argmax, so NER agreement falls short of 1 where a model's argmax
breaks IOB2 (often, for a model trained this little); the toolkit fp32 row adds the agreement
with the toolkit decoding by argmax too, which shows the logits are the same.

Both runners share one process, and so the thread settings (the toolkit's runtime defaults,
``encoder_tasks.runtime``, applied before torch loads). On a GPU both run on it.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import logging
import tempfile
from pathlib import Path

from encoder_tasks.runtime import configure_cpu_runtime

configure_cpu_runtime()  # before torch loads, as the CLI does (OpenMP reads it once)

from benchmarks.common import DATA, MINILM, print_table, require_data, save_results  # noqa: E402
from benchmarks.harness import invocation, timed  # noqa: E402
from benchmarks.suite.toolkit_run import train_toolkit  # noqa: E402

SST2_TRAIN = "cls/sst2/train.tsv"
SST2_DEV = "cls/sst2/dev.tsv"
WIKIANN_TRAIN = "ner/wikiann-en/train"
WIKIANN_TEST = "ner/wikiann-en/test"
MAX_LENGTH = 128
TRAIN_SEED = 0
SIZES = {
    "quick": {"train_examples": 48, "classification_inputs": 96, "ner_inputs": 96},
    "standard": {"train_examples": 300, "classification_inputs": 872, "ner_inputs": 1000},
}


# ---- the models ------------------------------------------------------------------------------
def train_model(task: str, train_examples: int, work: Path) -> dict:
    """One toolkit model for ``task`` at a tiny budget (its defaults, 1 epoch); saved under ``work``."""
    if task == "classification":
        data_flags = ["--train_file", SST2_TRAIN, "--text_column", "sentence", "--label_column", "label"]
    else:
        data_flags = ["--train_file", WIKIANN_TRAIN, "--token_prefix", "en:", "--tag_scheme", "iob2"]
    flags = [
        "--model_name_or_path",
        MINILM,
        "--data_dir",
        str(DATA),
        *data_flags,
        "--max_length",
        str(MAX_LENGTH),
        "--max_train_samples",
        str(train_examples),
        "--num_train_epochs",
        "1",
    ]
    training = train_toolkit(task, flags, TRAIN_SEED, work / f"{task}-model")
    return {
        "model_dir": training["output_dir"],
        "train_examples": train_examples,
        "epochs": 1,
        "train_seconds": training["train_seconds"],
        "flags": training["flags"],
    }


def inputs_for(task: str, count: int) -> list:
    """SST-2 dev sentences (strings) or WikiANN-en test sentences (word lists, prefix stripped)."""
    if task == "classification":
        from encoder_tasks.data import read_file

        return list(read_file(DATA / SST2_DEV)["content"])[:count]
    from encoder_tasks.tasks.ner.conll import read_conll

    sentences = read_conll(DATA / WIKIANN_TEST).select(range(count))["tokens"]
    return [[w[len("en:") :] if w.startswith("en:") else w for w in words] for words in sentences]


def real_token_count(task: str, tokenizer, inputs: list) -> int:
    """Tokens the model reads for ``inputs`` (special tokens included, no padding)."""
    if task == "classification":
        encoded = tokenizer(inputs, truncation=True, max_length=MAX_LENGTH)
    else:
        encoded = tokenizer(inputs, is_split_into_words=True, truncation=True, max_length=MAX_LENGTH)
    return sum(len(ids) for ids in encoded["input_ids"])


# ---- the runners: each returns a function that predicts all inputs once --------------------------
def toolkit_runner(task: str, model, tokenizer, inputs: list, batch_size: int, precision: str):
    """The toolkit's own prediction call (what ``encoder-tasks <task> predict`` runs per file)."""
    if task == "classification":
        from encoder_tasks.tasks.classification.predict import predict_texts

        def run():
            results, _ = predict_texts(
                model, tokenizer, inputs, batch_size=batch_size, max_length=MAX_LENGTH, precision=precision
            )
            index = {name: i for i, name in enumerate(model.settings.label_names)}
            return [index[r["label"]] for r in results]

        return run
    from encoder_tasks.tasks.ner.predict import predict_tokens

    def run():
        results = predict_tokens(model, tokenizer, inputs, batch_size=batch_size, precision=precision)
        return [{(e["type"], e["start"], e["end"]) for e in r["entities"]} for r in results]

    return run


def pipeline_runner(task: str, model, tokenizer, inputs: list, batch_size: int, autocast: bool):
    """``transformers.pipeline`` over all inputs at ``batch_size`` (under bf16 autocast if asked)."""
    import contextlib

    import torch
    from transformers import pipeline

    # It logs an error that the toolkit's model is not one of its own classes (it runs it anyway).
    logging.getLogger("transformers.pipelines.base").setLevel(logging.CRITICAL)
    device = next(model.parameters()).device
    name = "text-classification" if task == "classification" else "token-classification"
    pipe = pipeline(name, model=model.eval(), tokenizer=tokenizer, device=device)
    context = (
        (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if autocast else contextlib.nullcontext
    )

    if task == "classification":

        def run():
            with context():
                predictions = pipe(inputs, batch_size=batch_size, truncation=True, max_length=MAX_LENGTH)
            return [int(p["label"].rsplit("_", 1)[-1]) for p in predictions]

        return run

    def run():
        with context():
            predictions = pipe(
                inputs, batch_size=batch_size, is_split_into_words=True, aggregation_strategy="first"
            )
        return [{(e["entity_group"], int(e["start"]), int(e["end"])) for e in found} for found in predictions]

    return run


def bf16_copy(model):
    """A copy of ``model`` with bf16 weights: all of a stock model; a toolkit model's encoder
    (its output layer computes in fp32 by design, :func:`encoder_tasks.heads.full_precision`)."""
    import torch

    copied = copy.deepcopy(model)
    (copied.encoder if hasattr(copied, "encoder") else copied).to(torch.bfloat16)
    return copied


def agreement(task: str, ours: list, reference: list) -> float:
    """Equal labels (classification), or the F1 of entity spans over all sentences (NER)."""
    if task == "classification":
        return sum(a == b for a, b in zip(ours, reference)) / len(reference)
    shared = sum(len(a & b) for a, b in zip(ours, reference))
    total = sum(len(a) + len(b) for a, b in zip(ours, reference))
    return 2 * shared / total if total else 1.0


# ---- one task ---------------------------------------------------------------------------------
def bench_task(task: str, sizes: dict, args, work: Path) -> dict:

    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.config import PredictArguments
    from encoder_tasks.heads import EncoderWithHead
    from encoder_tasks.predict import cast_encoder_for_inference, inference_device
    from encoder_tasks.registry import TASKS
    from encoder_tasks.training_args import native_bf16_available

    trained = train_model(task, sizes["train_examples"], work)
    device = inference_device()
    model = EncoderWithHead.from_pretrained(str(trained["model_dir"])).to(device).eval()
    tokenizer = load_tokenizer(str(trained["model_dir"]))
    inputs = inputs_for(task, sizes[f"{task}_inputs"])
    tokens = real_token_count(task, tokenizer, inputs)
    # The model the pipeline serves: the toolkit's own (classification) or its stock export (NER).
    served = model if task == "classification" else TASKS["ner"].stock_model(model).to(device).eval()
    pipeline_model = (
        "toolkit model" if task == "classification" else "stock export (AutoModelForTokenClassification)"
    )
    auto_precision = "bf16" if native_bf16_available(use_cpu=device.type == "cpu") else "fp32"
    cli_model = cast_encoder_for_inference(copy.deepcopy(model), "auto")
    default_batch = PredictArguments.__dataclass_fields__["batch_size"].default
    batch = args.batch_size

    plan = [
        (
            "pipeline",
            "fp32",
            "fp32",
            batch,
            lambda: pipeline_runner(task, served, tokenizer, inputs, batch, False),
        ),
        (
            "pipeline (model cast to bf16)",
            "bf16",
            "bf16",
            batch,
            lambda: pipeline_runner(task, bf16_copy(served), tokenizer, inputs, batch, False),
        ),
        (
            "pipeline (bf16 autocast)",
            "bf16",
            "bf16",
            batch,
            lambda: pipeline_runner(task, served, tokenizer, inputs, batch, True),
        ),
        (
            "toolkit",
            "fp32",
            "fp32",
            batch,
            lambda: toolkit_runner(task, model, tokenizer, inputs, batch, "fp32"),
        ),
        (
            "toolkit (autocast only)",
            "auto",
            auto_precision,
            batch,
            lambda: toolkit_runner(task, model, tokenizer, inputs, batch, "auto"),
        ),
        (
            # What `encoder-tasks <task> predict` runs: load_for_prediction also stores the
            # encoder's weights in bf16 where the precision is bf16.
            "toolkit",
            "auto",
            auto_precision,
            batch,
            lambda: toolkit_runner(task, cli_model, tokenizer, inputs, batch, "auto"),
        ),
    ]
    if default_batch != batch:
        plan.append(
            (
                "toolkit (default batch)",
                "auto",
                auto_precision,
                default_batch,
                lambda: toolkit_runner(task, cli_model, tokenizer, inputs, default_batch, "auto"),
            )
        )
    rows, outputs = [], []
    for runner, setting, precision, batch_size, build in plan:
        print(f"[predict] {task}: {runner} {setting} batch {batch_size} ...", flush=True)
        median, seconds, output = timed(build(), args.repeats)
        outputs.append(output)
        rows.append(
            {
                "task": task,
                "runner": runner,
                "precision_setting": setting,
                "precision": precision,
                "batch_size": batch_size,
                "seconds": median,
                "seconds_all": seconds,
                "real_tokens": tokens,
                "real_tokens_per_s": tokens / median,
            }
        )
    # The bf16 pipeline reference is the faster of its two ways to run bf16.
    bf16_rows = [
        i for i, r in enumerate(rows) if r["runner"].startswith("pipeline") and r["precision"] == "bf16"
    ]
    best_bf16 = min(bf16_rows, key=lambda i: rows[i]["seconds"])
    reference = {"fp32": 0, "bf16": best_bf16}
    for row, output in zip(rows, outputs):
        row["agreement_with_pipeline_fp32"] = agreement(task, output, outputs[0])
        if row["runner"].startswith("toolkit"):
            ref = reference[row["precision"]]
            row["pipeline_reference"] = rows[ref]["runner"] + f" {rows[ref]['precision']}"
            row["x_pipeline_same_precision"] = rows[ref]["seconds"] / row["seconds"]
            row["agreement_with_pipeline_same_precision"] = agreement(task, output, outputs[ref])
    if task == "ner":
        # The same check with the toolkit decoding by per-word argmax, as the pipeline does (its
        # default constrained Viterbi changes tags where the argmax breaks IOB2): equal logits
        # give equal spans up to the pipeline's words (it splits a word at punctuation).
        saved = model.settings
        model.settings = dataclasses.replace(saved, decoding="argmax")
        try:
            argmax = toolkit_runner(task, model, tokenizer, inputs, batch, "fp32")()
        finally:
            model.settings = saved
        row = next(r for r in rows if r["runner"] == "toolkit" and r["precision_setting"] == "fp32")
        row["agreement_with_pipeline_fp32_argmax_decoding"] = agreement(task, argmax, outputs[0])
    return {
        "task": task,
        "inputs": len(inputs),
        "inputs_source": SST2_DEV if task == "classification" else WIKIANN_TEST,
        "real_tokens": tokens,
        "pipeline_model": pipeline_model,
        "pipeline_bf16_fastest": rows[best_bf16]["runner"],
        "device": str(device),
        "training": {k: str(v) if isinstance(v, Path) else v for k, v in trained.items()},
        "rows": rows,
    }


def predict_tables(results: dict) -> dict:
    """The ``predict`` table of the result file (docs render it with benchmarks/tables.py)."""
    columns = ["task", "runner", "precision", "batch", "real tokens/s", "vs pipeline, same precision"]
    columns.append("agreement with the fp32 pipeline")
    rows = []
    for result in results.values():
        for row in result["rows"]:
            ratio = row.get("x_pipeline_same_precision")
            rows.append(
                [
                    result["task"],
                    row["runner"],
                    row["precision"] if row["precision_setting"] != "auto" else f"{row['precision']} (auto)",
                    str(row["batch_size"]),
                    f"{row['real_tokens_per_s']:,.0f}",
                    f"{ratio:.2f}x" if ratio is not None else "",
                    f"{row['agreement_with_pipeline_fp32']:.3f}",
                ]
            )
    notes = [
        f"{r['task']}: {r['inputs']} inputs ({r['inputs_source']}), pipeline on the {r['pipeline_model']}; "
        f"bf16 reference: {r['pipeline_bf16_fastest']}"
        for r in results.values()
    ]
    return {"predict": {"columns": columns, "rows": rows, "notes": notes}}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not a measurement")
    parser.add_argument("--tasks", default="classification,ner")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes after the warm-up (median kept)")
    parser.add_argument("--work_dir", default=None, help="where the trained models go (default: a temp dir)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    require_data(SST2_TRAIN, SST2_DEV, WIKIANN_TRAIN, WIKIANN_TEST)
    size = "quick" if args.quick else "standard"
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench-predict-"))
    results = {name: bench_task(name, SIZES[size], args, work) for name in args.tasks.split(",")}
    rows = [row for result in results.values() for row in result["rows"]]
    print(f"\nPrediction, MiniLM-L6, {size} sizes ({', '.join(f'{k} {v}' for k, v in SIZES[size].items())})")
    print_table(
        rows,
        [
            "task",
            "runner",
            "precision",
            "batch_size",
            "seconds",
            "real_tokens_per_s",
            "x_pipeline_same_precision",
            "agreement_with_pipeline_fp32",
        ],
    )
    for result in results.values():
        print(
            f"{result['task']}: pipeline on the {result['pipeline_model']}; bf16 reference: {result['pipeline_bf16_fastest']}"
        )
        for row in result["rows"]:
            if "agreement_with_pipeline_fp32_argmax_decoding" in row:
                print(
                    f"{result['task']}: toolkit fp32 decoding by argmax (as the pipeline) agrees "
                    f"{row['agreement_with_pipeline_fp32_argmax_decoding']:.4f} with the fp32 pipeline"
                )
    path = save_results(
        "predict",
        {
            "command": invocation("bench_predict"),
            "size": size,
            "sizes": SIZES[size],
            "args": vars(args),
            "results": results,
            "tables": predict_tables(results),
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()

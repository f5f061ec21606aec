"""Extractive QA: encoder-tasks vs the stock transformers question-answering Trainer, side by side.

    flock /tmp/encoder-tasks-heavy.lock env OMP_WAIT_POLICY=PASSIVE \\
        .venv/bin/python benchmarks/bench_qa.py --suites v1 --train_samples 800

Suites (same model, the same seeded training subset, epochs, seed and optimiser settings for
both contenders; each contender runs in its own subprocess):

- ``v1``: train on SQuADShifts (Reddit + Amazon reviews), evaluate on XQuAD-en (SQuAD v1.1 dev
  articles 0-23);
- ``v2``: SQuAD v2.0 dev split by article (20% of the articles held out for evaluation);
- ``cmrc``: CMRC 2018, dev to train, trial to evaluate. MiniLM's vocabulary holds only 244
  CJK characters, so Chinese maps mostly to [UNK]: expect low scores for both contenders.

Contenders:

- ``stock``: ``AutoModelForQuestionAnswering`` + ``Trainer`` as ``run_qa.py`` configures it:
  max_seq_length 384, doc_stride 128, its default padding (every window padded to 384),
  ``default_data_collator``, its ``prepare_train_features`` / ``prepare_validation_features``
  and ``postprocess_qa_predictions`` (n_best 20, max_answer_length 30, null threshold 0),
  ported here line by line (the example scripts are not part of the installed package);
- ``toolkit``: ``encoder-tasks qa train`` (max_length 384, doc_stride 128, dynamic padding,
  length-grouped batches, exact n-best search), in fp32 like the stock run;
- ``toolkit-bf16`` (optional): the same with the toolkit's default ``--mixed_precision auto``
  (bf16 autocast on CPUs that run it natively).

Both are scored with :mod:`encoder_tasks.tasks.qa.evaluation` (the official SQuAD v1.1/v2.0 and
CMRC 2018 formulas; ``evaluate.load`` would download its scripts from the Hub). Reported:
EM/F1 (v2: also best F1 and its threshold), training real (non-padding) tokens per second,
evaluation seconds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
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
    worker_env,
)

SUITES = {
    "v1": {
        "train": "qa/squadshifts",
        "eval": "qa/xquad-en-dev/xquad.en.articles00-23.json",
        "eval_samples": None,
        "v2": False,
        "metric": "squad",
    },
    "v2": {
        "train": "qa/squad-v2-dev/dev-v2.0.json",
        "eval": None,  # held-out articles of the training file
        "split_by_article": 0.2,
        "eval_samples": 600,
        "v2": True,
        "metric": "squad",
    },
    "cmrc": {
        "train": "qa/cmrc2018/cmrc2018_dev.json",
        "eval": "qa/cmrc2018/cmrc2018_trial.json",
        "eval_samples": 300,
        "v2": False,
        "metric": "cmrc2018",
    },
}
ARGS = argparse.Namespace(max_seq_length=384, doc_stride=128)  # set from the command line


def load_suite(suite: dict, args):
    """The exact training subset and evaluation set the toolkit's CLI uses (same seed, same order)."""
    from encoder_tasks.tasks.qa.reading import read_squad, split_by_article

    train = read_squad(DATA / suite["train"])
    if suite.get("split_by_article"):
        train, evaluation = split_by_article(train, suite["split_by_article"], seed=42)
    else:
        evaluation = read_squad(DATA / suite["eval"])
    # as encoder_tasks.run.load_task_splits: a seeded shuffle for training, the first N for evaluation
    if args.train_samples < len(train):
        train = train.shuffle(seed=args.seed).select(range(args.train_samples))
    n_eval = args.eval_samples if args.eval_samples is not None else suite["eval_samples"]
    if n_eval is not None and n_eval < len(evaluation):
        evaluation = evaluation.select(range(n_eval))
    return train, evaluation


def score(suite, evaluation, predictions, null_diffs=None):
    from encoder_tasks.tasks.qa.evaluation import cmrc2018_scores, squad_v1_scores, squad_v2_scores

    golds = {qid: list(a["text"]) for qid, a in zip(evaluation["id"], evaluation["answers"])}
    if suite["metric"] == "cmrc2018":
        return cmrc2018_scores(golds, predictions)
    if not suite["v2"]:
        return squad_v1_scores(golds, predictions)
    # run_qa.py hands the metric no_answer_probability 0.0 for every question
    out = squad_v2_scores(golds, predictions, {k: 0.0 for k in predictions})
    if null_diffs is not None:
        # the official script given run_qa's null_odds file: its best-threshold search
        best = squad_v2_scores(golds, predictions, null_diffs, na_prob_thresh=float("inf"))
        out.update({k: best[k] for k in ("best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh")})
    return out


# ---- stock: run_qa.py, ported ------------------------------------------------------------------
def stock_prepare_train(examples, tokenizer):
    pad_on_right = tokenizer.padding_side == "right"
    questions = [q.lstrip() for q in examples["question"]]
    tokenized = tokenizer(
        questions if pad_on_right else examples["context"],
        examples["context"] if pad_on_right else questions,
        truncation="only_second" if pad_on_right else "only_first",
        max_length=ARGS.max_seq_length,
        stride=ARGS.doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",  # run_qa.py: pad_to_max_length defaults to True
    )
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    offset_mapping = tokenized.pop("offset_mapping")
    tokenized["start_positions"] = []
    tokenized["end_positions"] = []
    for i, offsets in enumerate(offset_mapping):
        input_ids = tokenized["input_ids"][i]
        if tokenizer.cls_token_id in input_ids:
            cls_index = input_ids.index(tokenizer.cls_token_id)
        elif tokenizer.bos_token_id in input_ids:
            cls_index = input_ids.index(tokenizer.bos_token_id)
        else:
            cls_index = 0
        sequence_ids = tokenized.sequence_ids(i)
        answers = examples["answers"][sample_mapping[i]]
        if len(answers["answer_start"]) == 0:
            tokenized["start_positions"].append(cls_index)
            tokenized["end_positions"].append(cls_index)
            continue
        start_char = answers["answer_start"][0]
        end_char = start_char + len(answers["text"][0])
        token_start_index = 0
        while sequence_ids[token_start_index] != (1 if pad_on_right else 0):
            token_start_index += 1
        token_end_index = len(input_ids) - 1
        while sequence_ids[token_end_index] != (1 if pad_on_right else 0):
            token_end_index -= 1
        if not (offsets[token_start_index][0] <= start_char and offsets[token_end_index][1] >= end_char):
            tokenized["start_positions"].append(cls_index)
            tokenized["end_positions"].append(cls_index)
        else:
            while token_start_index < len(offsets) and offsets[token_start_index][0] <= start_char:
                token_start_index += 1
            tokenized["start_positions"].append(token_start_index - 1)
            while offsets[token_end_index][1] >= end_char:
                token_end_index -= 1
            tokenized["end_positions"].append(token_end_index + 1)
    return tokenized


def stock_prepare_validation(examples, tokenizer):
    pad_on_right = tokenizer.padding_side == "right"
    questions = [q.lstrip() for q in examples["question"]]
    tokenized = tokenizer(
        questions if pad_on_right else examples["context"],
        examples["context"] if pad_on_right else questions,
        truncation="only_second" if pad_on_right else "only_first",
        max_length=ARGS.max_seq_length,
        stride=ARGS.doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    tokenized["example_id"] = []
    context_index = 1 if pad_on_right else 0
    for i in range(len(tokenized["input_ids"])):
        sequence_ids = tokenized.sequence_ids(i)
        tokenized["example_id"].append(examples["id"][sample_mapping[i]])
        tokenized["offset_mapping"][i] = [
            (o if sequence_ids[k] == context_index else None)
            for k, o in enumerate(tokenized["offset_mapping"][i])
        ]
    return tokenized


def stock_postprocess(
    examples, features, predictions, version_2_with_negative, n_best_size=20, max_answer_length=30
):
    """``utils_qa.postprocess_qa_predictions`` (transformers examples), null threshold 0."""
    import numpy as np

    all_start_logits, all_end_logits = predictions
    example_id_to_index = {k: i for i, k in enumerate(examples["id"])}
    features_per_example = defaultdict(list)
    for i, example_id in enumerate(list(features["example_id"])):
        features_per_example[example_id_to_index[example_id]].append(i)
    all_offsets = list(features["offset_mapping"])
    all_predictions, scores_diff = {}, {}
    for example_index, (qid, context) in enumerate(zip(examples["id"], examples["context"])):
        min_null_prediction = None
        prelim = []
        for feature_index in features_per_example[example_index]:
            start_logits = all_start_logits[feature_index]
            end_logits = all_end_logits[feature_index]
            offset_mapping = all_offsets[feature_index]
            feature_null_score = start_logits[0] + end_logits[0]
            if min_null_prediction is None or min_null_prediction["score"] > feature_null_score:
                min_null_prediction = {
                    "offsets": (0, 0),
                    "score": feature_null_score,
                    "start_logit": start_logits[0],
                    "end_logit": end_logits[0],
                }
            start_indexes = np.argsort(start_logits)[-1 : -n_best_size - 1 : -1].tolist()
            end_indexes = np.argsort(end_logits)[-1 : -n_best_size - 1 : -1].tolist()
            for start_index in start_indexes:
                for end_index in end_indexes:
                    if (
                        start_index >= len(offset_mapping)
                        or end_index >= len(offset_mapping)
                        or offset_mapping[start_index] is None
                        or len(offset_mapping[start_index]) < 2
                        or offset_mapping[end_index] is None
                        or len(offset_mapping[end_index]) < 2
                    ):
                        continue
                    if end_index < start_index or end_index - start_index + 1 > max_answer_length:
                        continue
                    prelim.append(
                        {
                            "offsets": (offset_mapping[start_index][0], offset_mapping[end_index][1]),
                            "score": start_logits[start_index] + end_logits[end_index],
                            "start_logit": start_logits[start_index],
                            "end_logit": end_logits[end_index],
                        }
                    )
        null_score = None
        if version_2_with_negative and min_null_prediction is not None:
            prelim.append(min_null_prediction)
            null_score = min_null_prediction["score"]
        preds = sorted(prelim, key=lambda x: x["score"], reverse=True)[:n_best_size]
        if (
            version_2_with_negative
            and min_null_prediction is not None
            and not any(p["offsets"] == (0, 0) for p in preds)
        ):
            preds.append(min_null_prediction)
        for pred in preds:
            offsets = pred.pop("offsets")
            pred["text"] = context[offsets[0] : offsets[1]]
        if len(preds) == 0 or (len(preds) == 1 and preds[0]["text"] == ""):
            preds.insert(0, {"text": "empty", "start_logit": 0.0, "end_logit": 0.0, "score": 0.0})
        if not version_2_with_negative:
            all_predictions[qid] = preds[0]["text"]
        else:
            i = 0
            while i < len(preds) - 1 and preds[i]["text"] == "":
                i += 1
            best = preds[i]
            diff = float(null_score - best["start_logit"] - best["end_logit"])
            scores_diff[qid] = diff
            all_predictions[qid] = "" if diff > 0.0 else best["text"]
    return all_predictions, scores_diff


def worker_stock(suite, args) -> dict:
    import datasets
    import numpy as np
    from transformers import (
        AutoModelForQuestionAnswering,
        AutoTokenizer,
        Trainer,
        TrainingArguments,
        default_data_collator,
    )

    from encoder_tasks.backbone import resolve_model_path

    path = resolve_model_path(args.model)
    train, evaluation = load_suite(suite, args)
    tokenizer = AutoTokenizer.from_pretrained(path)
    train_cols = {k: list(train[k]) for k in ("question", "context", "answers")}
    train_features = datasets.Dataset.from_dict(dict(stock_prepare_train(train_cols, tokenizer)))
    eval_cols = {k: list(evaluation[k]) for k in ("id", "question", "context")}
    eval_features = datasets.Dataset.from_dict(dict(stock_prepare_validation(eval_cols, tokenizer)))
    # As the example scripts do: seed before the model, whose new head is drawn at random.
    from transformers import set_seed

    set_seed(args.seed)
    model = AutoModelForQuestionAnswering.from_pretrained(path)
    targs = TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size * 2,
        learning_rate=args.learning_rate,
        warmup_steps=0.1,
        weight_decay=0.01,
        seed=args.seed,
        save_strategy="no",
        report_to="none",
        logging_steps=50,
        disable_tqdm=True,
        dataloader_pin_memory=False,
    )
    trainer = Trainer(
        model=model,
        args=targs,
        train_dataset=train_features,
        processing_class=tokenizer,
        data_collator=default_data_collator,
    )
    peak = matmul_peak_flops("fp32")
    result = trainer.train()
    runtime = result.metrics["train_runtime"]
    model_inputs = [c for c in eval_features.column_names if c not in ("example_id", "offset_mapping")]
    start = time.perf_counter()
    output = trainer.predict(eval_features.select_columns(model_inputs))
    start_logits, end_logits = output.predictions[:2]
    predictions, diffs = stock_postprocess(
        eval_cols, eval_features, (np.asarray(start_logits), np.asarray(end_logits)), suite["v2"]
    )
    eval_seconds = time.perf_counter() - start  # prediction and answer extraction, as run_qa's
    metrics = score(suite, evaluation, predictions, diffs if suite["v2"] else None)
    train_real, eval_real = real_tokens(train_features), real_tokens(eval_features)
    return {
        "metric_name": "F1",
        "metric": metrics["f1"],
        "precision": "fp32",
        **speed_fields(
            "train", train_real * args.epochs, runtime, model.config, train_real / len(train_features), peak
        ),
        **speed_fields(
            "predict", eval_real, eval_seconds, model.config, eval_real / len(eval_features), peak
        ),
        "peak_rss_mib": peak_rss_mib(),
        "matmul_peak_gflops": peak / 1e9,
        **{k: metrics[k] for k in metrics if k in ("exact", "f1", "best_f1", "best_f1_thresh", "total")},
        "train_questions": len(train),
        "train_windows": len(train_features),
        "train_seconds": runtime,
        "train_real_tokens_per_s": real_tokens(train_features) * args.epochs / runtime,
        "train_padded_tokens_per_s": len(train_features) * args.max_seq_length * args.epochs / runtime,
        "eval_seconds": eval_seconds,
    }


def worker_toolkit(suite, args) -> dict:
    from encoder_tasks.cli import main

    out = Path(tempfile.mkdtemp()) / "run"
    argv = [
        "qa",
        "train",
        "--model_name_or_path",
        args.model,
        "--train_file",
        str(DATA / suite["train"]),
        "--max_length",
        str(args.max_seq_length),
        "--doc_stride",
        str(args.doc_stride),
        "--max_train_samples",
        str(args.train_samples),
        "--num_train_epochs",
        str(args.epochs),
        "--per_device_train_batch_size",
        str(args.batch_size),
        "--per_device_eval_batch_size",
        str(args.batch_size * 2),
        "--learning_rate",
        str(args.learning_rate),
        "--seed",
        str(args.seed),
        "--metric",
        suite["metric"],
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--output_dir",
        str(out),
    ]
    if suite.get("split_by_article"):
        argv += ["--eval_split_by_article", str(suite["split_by_article"])]
    else:
        argv += ["--validation_file", str(DATA / suite["eval"])]
    n_eval = args.eval_samples if args.eval_samples is not None else suite["eval_samples"]
    if n_eval is not None:
        argv += ["--max_eval_samples", str(n_eval)]
    if suite["v2"]:
        argv += ["--version_2_with_negative", "true"]
    # "toolkit" runs fp32 like the stock contender; "toolkit-bf16" keeps the toolkit's default
    # --mixed_precision auto (bf16 autocast where the CPU runs it natively).
    argv += ["--mixed_precision", "auto" if args.worker == "toolkit-bf16" else "no"]
    from encoder_tasks.training_args import native_bf16_available

    precision = "bf16" if args.worker == "toolkit-bf16" and native_bf16_available() else "fp32"
    peak = matmul_peak_flops(precision)
    if main(argv) != 0:
        raise SystemExit("toolkit run failed")
    m = json.loads((out / "metrics.json").read_text())
    # The same windows as the toolkit's (same tokenizer, max_length and doc_stride), for
    # token counts: real tokens per evaluated window and per training window.
    from transformers import AutoConfig, AutoTokenizer

    from encoder_tasks.backbone import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(args.model))
    config = AutoConfig.from_pretrained(resolve_model_path(args.model))
    train, evaluation = load_suite(suite, args)
    train_windows = stock_prepare_train(
        {k: list(train[k]) for k in ("question", "context", "answers")}, tokenizer
    )
    eval_windows = stock_prepare_validation(
        {k: list(evaluation[k]) for k in ("id", "question", "context")}, tokenizer
    )
    train_real = sum(sum(mask) for mask in train_windows["attention_mask"])
    eval_real = sum(sum(mask) for mask in eval_windows["attention_mask"])
    train_mean = train_real / len(train_windows["attention_mask"])
    train_runtime = m.get("train_train_runtime", m.get("train_runtime"))
    n_train_tokens = m["train_real_tokens_per_second"] * train_runtime
    row = {
        "metric_name": "F1",
        "metric": m["eval_f1"],
        "precision": precision,
        **speed_fields("train", n_train_tokens, train_runtime, config, train_mean, peak),
        **speed_fields(
            "predict",
            eval_real,
            m["eval_runtime"],
            config,
            eval_real / len(eval_windows["attention_mask"]),
            peak,
        ),
        "peak_rss_mib": peak_rss_mib(),
        "matmul_peak_gflops": peak / 1e9,
        "exact": m["eval_exact"],
        "f1": m["eval_f1"],
        "total": m["eval_total"],
        "train_seconds": m["train_train_runtime"] if "train_train_runtime" in m else m["train_runtime"],
        "train_real_tokens_per_s": m["train_real_tokens_per_second"],
        "eval_seconds": m["eval_runtime"],
    }
    if suite["v2"]:
        row.update(best_f1=m["eval_best_f1"], best_f1_thresh=m["eval_best_f1_thresh"])
    return row


def run_worker(name: str, suite_name: str, args) -> dict:
    """Run one contender in a fresh process (its own threads and environment)."""
    env = worker_env()
    cmd = [sys.executable, __file__, "--worker", name, "--suites", suite_name] + [
        f"--{k}={v}" for k, v in (("train_samples", args.train_samples), ("epochs", args.epochs),
                                  ("seed", args.seed), ("batch_size", args.batch_size),
                                  ("learning_rate", args.learning_rate), ("eval_samples", args.eval_samples),
                                  ("model", args.model), ("max_seq_length", args.max_seq_length),
                                  ("doc_stride", args.doc_stride))
        if v is not None
    ]  # fmt: skip
    result_file = Path(tempfile.mkstemp(suffix=".json")[1])
    subprocess.run([*cmd, f"--result_file={result_file}"], check=True, env=env)
    return json.loads(result_file.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default="v1", help="comma-separated: v1, v2, cmrc")
    parser.add_argument("--contenders", default="toolkit,stock")
    parser.add_argument("--train_samples", type=int, default=800)
    parser.add_argument("--eval_samples", type=int, default=None, help="override each suite's eval size")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--model", default=MINILM)
    parser.add_argument("--max_seq_length", type=int, default=384, help="run_qa.py's default")
    parser.add_argument("--doc_stride", type=int, default=128, help="run_qa.py's default")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result_file", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    ARGS.max_seq_length, ARGS.doc_stride = args.max_seq_length, args.doc_stride
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    if args.worker:
        (suite_name,) = suites
        worker = worker_stock if args.worker == "stock" else worker_toolkit
        Path(args.result_file).write_text(json.dumps(worker(SUITES[suite_name], args)))
        return
    for name in suites:
        suite = SUITES[name]
        require_data(*[p for p in (suite["train"], suite["eval"]) if p])
    rows = []
    for name in suites:
        for contender in [c.strip() for c in args.contenders.split(",")]:
            row = {"suite": name, "contender": contender, **run_worker(contender, name, args)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    columns = [
        "suite",
        "contender",
        "exact",
        "f1",
        "best_f1",
        "total",
        "train_seconds",
        "train_real_tokens_per_s",
        "eval_seconds",
    ]
    print()
    print_table(rows, columns)
    path = save_results("qa", {"args": vars(args), "rows": rows, "command": " ".join(sys.argv)})
    print(f"\nsaved {path}")


if __name__ == "__main__":
    main()

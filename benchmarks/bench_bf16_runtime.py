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

A run that ``encoder-tasks quantize --backend openvino`` wrote adds its int8 graph, computed as it
loads (``f32`` for what is not int8) and with the bf16 hint: whether bf16 speeds up the int8
copy's remaining fp32 ops (softmax, LayerNorm, GELU) on this CPU. An int8 row's difference from
torch fp32 is int8's own; its check is ``quantize``'s metric guardrail, so no pass is given.
A third timing, 8 x 16 tokens, is the size of a server's batches of short requests.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from benchmarks.common import MINILM, save_results
from benchmarks.harness import describe


def measure(model_dir: str, batch_size: int) -> dict:
    import torch

    from encoder_tasks import runtimes
    from encoder_tasks.artifact import read_task_metadata
    from encoder_tasks.heads import EncoderWithHead, load_starting_encoder
    from encoder_tasks.precision import autocast_for

    saved = None  # the graph record of a run that quantize wrote (its typed settings' ``runtime``)
    if read_task_metadata(model_dir) is not None:  # a run: its fine-tuned encoder
        model = EncoderWithHead.from_pretrained(model_dir)
        encoder, saved = model.encoder.eval(), model.settings.get("runtime")
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
    int8 = saved_int8_graph(model_dir, saved)
    if int8 is not None:
        contenders["openvino int8"] = (
            runtimes.load_runtime("openvino", int8, encoder.config, precision="int8"),
            contextlib.nullcontext,
        )
        if runtimes.computes_bf16("openvino"):
            bf16_int8 = runtimes.load_runtime("openvino", int8, encoder.config, compute="bf16")
            contenders["openvino int8, bf16 hint"] = (bf16_int8, contextlib.nullcontext)
    probes = runtimes.probe_batches(encoder.config, batch_size=batch_size)
    generator = torch.Generator().manual_seed(0)
    sentences = [random_tokens(encoder.config, 64, 40, generator)]
    short = [random_tokens(encoder.config, 8, 16, generator) for _ in range(8)]
    allowance = runtimes.bf16_allowance(encoder, probes, "cpu")

    class Autocast(torch.nn.Module):
        def forward(self, **inputs):
            with autocast_for("cpu", "bf16"):
                return encoder(**runtimes.forward_inputs(encoder, inputs))

    rows = []
    probe_times = runtimes.timed_rounds(contenders, probes)
    sentence_times = runtimes.timed_rounds(contenders, sentences)
    short_times = runtimes.timed_rounds(contenders, short)
    for name, (module, _) in contenders.items():
        checked = Autocast() if name == "torch bf16" else module
        allowed = allowance if name.endswith("bf16") else None
        check = runtimes.parity(encoder, checked, probes, allowed=allowed)
        is_int8 = name.startswith("openvino int8")
        rows.append(
            {
                "contender": name,
                "probe_ms": round(probe_times[name] * 1000, 2),
                "probe_speed_vs_torch_fp32": round(probe_times["torch fp32"] / probe_times[name], 2),
                "probe_speed_vs_torch_bf16": round(probe_times["torch bf16"] / probe_times[name], 2),
                "sentences_64x40_ms": round(sentence_times[name] * 1000, 2),
                "short_8x16_ms": round(short_times[name] * 1000, 2),
                "max_abs_diff_vs_torch_fp32": check["max_abs_diff"],
                "allowed": None if is_int8 else check["allowed"],
                "passes": None if is_int8 else check["passed"],
            }
        )
    return {"model": model_dir, "bf16_allowance": allowance, "rows": rows}


def random_tokens(config, batch: int, length: int, generator) -> dict:
    """A full batch (no padding) of random ordinary token ids."""
    import torch

    return {
        "input_ids": torch.randint(1000, min(20000, config.vocab_size), (batch, length), generator=generator),
        "attention_mask": torch.ones(batch, length, dtype=torch.long),
        "token_type_ids": torch.zeros(batch, length, dtype=torch.long),
    }


def saved_int8_graph(model_dir: str, runtime: dict | None):
    """The OpenVINO int8 graph ``quantize`` saved in the run ``model_dir`` (``runtime``: its
    settings' record of it), else None."""
    from pathlib import Path

    if not runtime or runtime.get("backend") != "openvino" or runtime.get("precision") != "int8":
        return None
    return Path(model_dir) / runtime["file"]


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
        "8 x 16 ms (8 batches)",
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
            f"{r['short_8x16_ms']:.1f}",
            f"{r['max_abs_diff_vs_torch_fp32']:.3g}",
            "-" if r["allowed"] is None else f"{r['allowed']:.3g}",
            "-" if r["passes"] is None else ("yes" if r["passes"] else "no"),
        ]
        for r in found["rows"]
    ]
    for row in [columns, *table]:
        print(" | ".join(row))
    found["tables"] = {"bf16-runtime": {"columns": columns, "rows": table}}
    path = save_results(
        "bf16-runtime",
        {
            "environment": describe(),
            "command": " ".join(["python -m benchmarks.bench_bf16_runtime", *(argv or sys.argv[1:])]),
            **found,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()

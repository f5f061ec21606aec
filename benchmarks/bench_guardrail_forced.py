"""The int8 guardrail run to its end on a real model: every layer kept in fp32, one per step.

    python -m benchmarks.bench_guardrail_forced                       # the NER run of bench_cpu_predict
    python -m benchmarks.bench_guardrail_forced --run DIR --validation_file FILE

``encoder-tasks quantize RUN DEST --validation_file VAL --metric loss --max_metric_loss 0`` at its
defaults otherwise (OpenVINO static int8 where installed): a zero tolerance on the validation loss
makes the layer-by-layer fallback keep layer after layer, most sensitive first, until none is
left. The result file holds the report's steps (layers kept, validation loss before and after) and
the quantizers left in the graph with every layer kept: a layer "kept in fp32" must have none
feeding any of its ops (its attention included), so with every layer kept the int8 graph is the
fp32 graph and its loss is fp32's.

The default run is the one ``python -m benchmarks.bench_cpu_predict`` trains (WikiANN-en NER,
MiniLM; ``/tmp/bench-cpu-predict/runs/ner``): run that first, or give ``--run`` and
``--validation_file``. Result: ``benchmarks/results/ner-guardrail-forced-STAMP.json`` with its table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import save_results
from benchmarks.harness import REPO, invocation

DEFAULT_RUN = Path("/tmp/bench-cpu-predict/runs/ner")


def quantizers_left(encoder_xml: Path) -> list[str]:
    """The FakeQuantize nodes of an OpenVINO graph that feed an op of an encoder layer."""
    import openvino

    from encoder_tasks.quantization.openvino import layer_of

    model = openvino.Core().read_model(str(encoder_xml))
    return [
        op.get_friendly_name()
        for op in model.get_ordered_ops()
        if op.get_type_name() == "FakeQuantize"
        and any(
            layer_of(target.get_node().get_friendly_name()) >= 0
            for out in op.outputs()
            for target in out.get_target_inputs()
        )
    ]


def table(steps: list[dict]) -> dict:
    """The fallback's steps as rows: layers kept, loss fp32 -> int8, relative loss, within target.

    Example:
        >>> table([{"excluded_layers": [0], "before": 0.5, "after": 0.51, "relative_loss": 0.02,
        ...         "within_target": False}])["rows"]
        [['[0]', '0.5000 -> 0.5100', '+2.00%', 'no']]
    """
    rows = [
        [
            str(step["excluded_layers"]),
            f"{step['before']:.4f} -> {step['after']:.4f}",
            f"{step['relative_loss'] * 100:+.2f}%",
            "yes" if step["within_target"] else "no",
        ]
        for step in steps
    ]
    columns = ["layers kept in fp32", "validation loss (fp32 -> int8)", "relative loss", "within 0%"]
    return {"columns": columns, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=DEFAULT_RUN / "run")
    parser.add_argument("--validation_file", type=Path, default=DEFAULT_RUN / "validation.conll")
    args = parser.parse_args(argv)
    for path in (args.run, args.validation_file):
        if not path.exists():
            print(f"{path}: not found (run python -m benchmarks.bench_cpu_predict first)", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="guardrail-forced-") as work:
        dest = Path(work) / "int8"
        command = [
            sys.executable, "-m", "encoder_tasks.cli", "quantize", str(args.run), str(dest),
            "--validation_file", str(args.validation_file), "--metric", "loss", "--max_metric_loss", "0.0",
        ]  # fmt: skip
        subprocess.run(command, check=True, cwd=REPO)
        report = json.loads((dest / "quantization_report.json").read_text())
        left = quantizers_left(dest / "encoder.xml") if (dest / "encoder.xml").is_file() else None
    steps = report["guardrail"]["steps"]
    path = save_results(
        "ner-guardrail-forced",
        {
            "benchmark": "ner-guardrail-forced",
            "command": invocation("bench_guardrail_forced", argv),
            "quantize_command": " ".join(command[2:]).replace(str(dest), "DEST"),
            "report": report,
            "fake_quantize_nodes_left_with_every_layer_excluded": left,
            "tables": {"ner-guardrail-forced": table(steps)},
        },
    )
    print(f"steps: {len(steps)}; quantizers left in layers with every layer kept: {left}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

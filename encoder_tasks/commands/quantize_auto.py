"""``encoder-tasks quantize --backend auto``: each int8 graph that can run here is made and timed on
the user's inputs, and the fastest that keeps the guardrail is the copy written.

Which int8 is fastest depends on the CPU, not on the model: on CPUs with int8 dot-product
instructions (AVX512-VNNI, AVX-VNNI, AMX) OpenVINO's static int8 encoded all-MiniLM-L6-v2 fastest,
while on a CPU with AVX2 only it ran slower than the fp32 model and ONNX Runtime's dynamic int8 was
nearly twice as fast (docs/speed.md). So the choice is measured where ``quantize`` runs, as
``--backend auto`` measures the fp32 runtimes where a model loads
(:mod:`encoder_tasks.runtimes`).

Each candidate is a whole ``quantize --backend B --method M`` run (its guardrail included) into a
folder of its own inside ``DEST``'s staging folder; each report times torch fp32 and the int8 graph
on the same inputs (the validation file's batches, else the calibration inputs), so candidates are
compared by their speed-up over the fp32 model measured in their own run, which a drifting machine
moves alike for both. The kept candidate's files become ``DEST``; the others are deleted. The
report's ``auto`` section lists every candidate's speed-up and metric and why the kept one won.

Example:
    >>> reports = {
    ...     "openvino": {"speed": {"speedup": 0.7}, "metric": {"within_target": True}},
    ...     "onnx": {"speed": {"speedup": 1.4}, "metric": {"within_target": True}},
    ... }
    >>> fastest(reports)
    'onnx'
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

logger = logging.getLogger(__name__)


def fastest(reports: dict[str, dict]) -> str:
    """The candidate to keep: one within the guardrail before any that is not (a report with no
    metric counts as within), then the largest speed-up over the fp32 model."""

    def rank(name: str) -> tuple[bool, float]:
        report = reports[name]
        return (
            bool(report.get("metric", {}).get("within_target", True)),
            float(report.get("speed", {}).get("speedup") or 0.0),
        )

    return max(reports, key=rank)


def summary(reports: dict[str, dict], methods: dict[str, str]) -> dict:
    """The report's ``auto`` section: every candidate's figures, the kept one and why."""
    candidates = {}
    for name, report in reports.items():
        speed, metric = report.get("speed", {}), report.get("metric", {})
        candidates[name] = {
            "method": methods[name],
            "speedup": speed.get("speedup"),
            "int8_inputs_per_second": speed.get("int8", {}).get("inputs_per_second"),
            "relative_loss": metric.get("relative_loss"),
            "within_target": metric.get("within_target"),
            "excluded_layers": report["runtime"]["excluded_layers"],
        }
    chosen = fastest(reports)
    speedups = ", ".join(
        f"{n} {c['speedup']:.2f}x" for n, c in candidates.items() if c["speedup"] is not None
    )
    return {
        "candidates": candidates,
        "chosen": chosen,
        "why": f"the fastest int8 graph within the guardrail on this CPU (speed-up over torch fp32: {speedups})",
    }


def quantize_fastest(
    model_dir, dest, candidates: list[tuple[str, str]], *, overwrite: bool, **options
) -> dict:
    """Quantize ``model_dir`` with each ``(backend, method)`` of ``candidates`` and keep the fastest
    within the guardrail in ``dest``; returns its report (with the ``auto`` section).

    ``options`` are :func:`encoder_tasks.commands.quantize_runtime.quantize_with_runtime`'s.
    """
    from ..data.writers import write_json
    from ..errors import UserError
    from ..export.staging import staged
    from .quantize_checks import REPORT_FILE, check_source
    from .quantize_report import write_readme
    from .quantize_runtime import quantize_with_runtime

    dest = Path(dest)
    check_source(str(model_dir), dest, overwrite, bare_embedding=True)  # refused before any work
    reports: dict[str, dict] = {}
    methods = dict(candidates)
    failures: list[UserError] = []
    with staged(dest) as staging:
        for backend, method in candidates:
            logger.info("quantize --backend auto: trying %s %s int8", backend, method)
            try:
                reports[backend] = quantize_with_runtime(
                    model_dir, staging / backend, backend=backend, method=method, **options
                )
            except UserError as error:  # the others may still run: say why this one did not
                logger.warning("quantize --backend auto: %s %s int8 failed: %s", backend, method, error)
                failures.append(error)
        if not reports:
            if len({str(e) for e in failures}) == 1:  # the same for all: about the inputs, not a backend
                raise failures[0]
            raise UserError(
                "quantize --backend auto: no int8 backend succeeded ("
                + "; ".join(f"{b}: {e}" for (b, _), e in zip(candidates, failures))
                + ")"
            )
        auto = summary(reports, methods)
        chosen = auto["chosen"]
        report = {**reports[chosen], "dest": str(dest), "auto": auto}
        for entry in list((staging / chosen).iterdir()):
            os.replace(entry, staging / entry.name)
        for backend, _ in candidates:  # the kept one's folder is empty now; a failed one may hold leftovers
            shutil.rmtree(staging / backend, ignore_errors=True)
        write_json(staging / REPORT_FILE, report)
        write_readme(staging / "README.md", report)
    logger.info("quantize --backend auto: kept %s %s int8, %s", chosen, methods[chosen], auto["why"])
    return report

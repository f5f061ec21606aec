"""What the tests of int8 graphs (``quantize --backend onnx|openvino``) check alike."""

from __future__ import annotations


def labels(records):
    """Everything but the numbers: labels, tags, spans (what int8 must not change on the tiny runs).

    Example:
        >>> labels([{"label": "pos", "score": 0.9, "spans": [[0, 3]]}])
        [{'label': 'pos', 'spans': [[0, 3]]}]
    """
    if isinstance(records, dict):
        return {k: labels(v) for k, v in records.items() if not isinstance(v, float)}
    if isinstance(records, list):
        return [labels(r) for r in records if not isinstance(r, float)]
    return records


def assert_guardrail_order(report: dict) -> list[int]:
    """The metric guardrail of a zero ``--max_metric_loss`` kept layers in fp32 one per step, the
    most sensitive first, and reports its last step's metric; returns the layers it kept."""
    steps = report["guardrail"]["steps"]
    excluded = report["runtime"]["excluded_layers"]
    assert excluded, "a zero tolerance kept no layer in fp32"
    order = [row["layer"] for row in report["guardrail"]["sensitivity"] if row["layer"] >= 0]
    assert excluded == sorted(order[: len(excluded)])  # the most sensitive first, one per step
    assert [s["excluded_layers"] for s in steps] == [sorted(order[:i]) for i in range(len(steps))]
    assert report["metric"] == {k: v for k, v in steps[-1].items() if k != "excluded_layers"}
    return excluded


def quantize_with_zero_tolerance(run, dest, backend: str, **options) -> dict:
    """The report of a static int8 ``backend`` copy of ``run`` (the pair task's) whose guardrail
    allows no metric loss at all: layers go to fp32 until none is left or none is lost."""
    from encoder_tasks.commands.quantize import quantize_run
    from tests.samples import STS_COLUMNS

    return quantize_run(
        run.model_dir,
        dest,
        backend=backend,
        method="static",
        validation_file=str(run.train_file),
        eval_flags=STS_COLUMNS,
        max_metric_loss=0.0,
        repeats=1,
        calibration_samples=8,
        **options,
    )

"""``encoder-tasks quantize --backend onnx|openvino``: an int8 graph of the encoder in a run directory,
with a guardrail on the task metric.

    encoder-tasks quantize runs/ner runs/ner-int8 --backend onnx --method static \\
        --validation_file dev.conll --max_metric_loss 0.01
    encoder-tasks quantize runs/ner runs/ner-ov --backend openvino --validation_file dev.conll

``--backend openvino`` is static int8 only (nncf post-training quantization,
:mod:`encoder_tasks.quantization.openvino`); its graph is ``encoder.xml`` (+ ``encoder.bin``) in
``DEST`` and its guardrail keeps a layer in fp32 by leaving that layer's linear layers to nncf's
ignored scope. The steps are the same for both backends:

1. The model (a run, or for the embedding task any encoder or sentence-transformers folder) is
   saved into ``DEST`` as it is (fp32 weights: ``--backend torch`` still runs them) and its encoder
   exported to ONNX (:mod:`encoder_tasks.runtimes.onnx`).
2. With ``--validation_file`` the fp32 model is scored there by the task's own evaluate path
   (:mod:`.quantize_report`), which also records the encoder inputs of every batch it ran.
3. Static calibration reads the encoder inputs of ``--calibration_file`` (inputs as ``serve`` takes
   them, run through the task's own tokenisation: windows, word pieces) or, by default, of the first
   ``--calibration_samples`` validation inputs.
4. The graph is quantized (:mod:`encoder_tasks.quantization.onnx`) and scored on the validation file. While its relative
   metric loss exceeds ``--max_metric_loss``, the most sensitive encoder layer still in int8
   (:func:`.onnx.layer_sensitivity`) is kept in fp32 and the graph quantized and scored again, layer
   by layer; the report lists the layers kept (``excluded_layers``) and every step. For the
   embedding task a step must also keep 99% of the validation inputs' vectors within
   ``--min_cosine`` of their fp32 vectors (:mod:`encoder_tasks.quantization.agreement`).
5. ``DEST``'s settings record ``runtime: {"backend": "onnx", "file": "encoder.int8.onnx", "precision":
   "int8", "method", "excluded_layers"}``: every loader of run directories (predict, evaluate,
   ``Predictor``, serve, Ray) runs that graph as the encoder, with no flag.

Example:
    >>> report = quantize_with_runtime("runs/ner", "runs/ner-int8", method="static",
    ...     validation_file="dev.conll")  # doctest: +SKIP
    >>> report["runtime"]["excluded_layers"]  # doctest: +SKIP
    [5]
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from ..errors import UserError
from ..quantization.agreement import MIN_COSINE, PERCENTILE, embeddings_of, floor_of, vector_agreement

logger = logging.getLogger(__name__)

INT8_FILE = "encoder.int8.onnx"
#: Default count of validation inputs static quantization calibrates on.
CALIBRATION_SAMPLES = 256


def _task_and_model(path: str, metadata: dict | None):
    """``(task name, model)``: a saved run, or (no ``encoder_tasks.json``) a bare encoder or
    sentence-transformers folder as an embedding model."""
    from ..heads import EncoderWithHead

    if metadata is not None:
        return metadata["task"], EncoderWithHead.from_pretrained(path).cpu().eval()
    from ..saved import open_saved

    # The embedding task loads any encoder (mean pooling) or sentence-transformers folder.
    task = open_saved(path).task
    args = task.PredictArguments(model_dir=path, backend="torch", precision="fp32", disable_tqdm=True)
    model, _ = task.load_for_inference(args, check=False)
    return "embedding", model.float().cpu().eval()


def _evaluate(task_name: str, folder, validation_file: str, flags, batch_size: int):
    """``(metrics, recorded model calls)`` of ``<task> evaluate`` on a linked view of ``folder``."""
    from .. import run
    from ..saved import task_named
    from .quantize_report import _arguments, linked_copy, recorded_calls

    task = task_named(task_name)
    with linked_copy(folder) as view, recorded_calls() as calls:
        found = run.evaluate(task_name, *_arguments(task, view, validation_file, list(flags), batch_size))
    return {k: v for k, v in found.items() if isinstance(v, (int, float))}, list(calls)


def _calibration_calls(task_name: str, folder, calibration_file: str, batch_size: int) -> list[dict]:
    """The encoder inputs the task's own predict path makes of ``calibration_file``'s inputs."""
    from ..data import read_file
    from ..inference import Predictor
    from .quantize_report import recorded_calls

    rows = read_file(calibration_file)
    records = [{k: v for k, v in row.items() if not k.startswith("_")} for row in rows]
    if not records:
        raise UserError(f"quantize: --calibration_file {calibration_file} holds no inputs")
    predictor = Predictor.load(
        folder, task=task_name, backend="torch", precision="fp32", batch_size=batch_size
    )
    inputs = predictor.parse(records, where=str(calibration_file))
    with recorded_calls() as calls:
        predictor.predict(inputs)
    return list(calls)


def _shortfall(compared: dict, max_metric_loss: float) -> str:
    """Why a quantized graph missed the guardrail, in words (the metric, the vectors or both)."""
    reasons = []
    if compared["relative_loss"] > max_metric_loss:
        reasons.append(
            f"{compared['name']} lost {100 * compared['relative_loss']:.2f}% "
            f"(more than --max_metric_loss {100 * max_metric_loss:.2f}%)"
        )
    agreement = compared.get("agreement")
    if agreement is not None and floor_of(agreement) < agreement["min_cosine_target"]:
        reasons.append(
            f"{100 - PERCENTILE}% of the validation vectors keep cosine {floor_of(agreement):.4f} to fp32 "
            f"(less than --min_cosine {agreement['min_cosine_target']})"
        )
    return " and ".join(reasons)


def _sample(calls: list[dict], samples: int) -> list[dict]:
    """The first calls holding ``samples`` inputs in all."""
    chosen, rows = [], 0
    for call in calls:
        if rows >= samples:
            break
        if call.get("input_ids") is not None:
            chosen.append(call)
            rows += len(call["input_ids"])
    return chosen


def _save(model, staging: Path, runtime: dict | None) -> None:
    extra = {k: v for k, v in model.settings.extra.items() if k != "runtime"}
    if runtime is not None:
        extra["runtime"] = runtime
    model.settings = model.settings.replace(extra=extra)
    model.save_pretrained(staging)


def _time(model, calls: list[dict], repeats: int) -> dict:
    from .quantize_report import time_model

    rows = sum(len(c["input_ids"]) for c in calls if c.get("input_ids") is not None)
    timed = time_model(model, calls, repeats)
    timed["inputs_per_second"] = rows / timed["seconds"] if timed["seconds"] else None
    return timed


def quantize_with_runtime(
    model_dir: str | Path,
    dest: str | Path,
    *,
    backend: str = "onnx",
    method: str = "dynamic",
    calibration_file: str | None = None,
    calibration_samples: int = CALIBRATION_SAMPLES,
    max_metric_loss: float = 0.01,
    min_cosine: float = MIN_COSINE,
    overwrite: bool = False,
    validation_file: str | None = None,
    eval_flags: list[str] | tuple[str, ...] = (),
    batch_size: int = 64,
    repeats: int = 3,
    metric: str | None = None,
) -> dict:
    """Write ``dest``: ``model_dir`` with an int8 graph of its encoder for ``backend`` (onnx, openvino); returns the report (also
    ``dest/quantization_report.json``). See the module docstring.

    ``min_cosine`` (embedding task, with a validation file): the int8 vectors of 99% of the
    validation inputs must keep at least this cosine to their fp32 vectors
    (:mod:`encoder_tasks.quantization.agreement`), else layers stay fp32 as for the metric."""
    from ..backbone import load_tokenizer
    from ..data.writers import write_json
    from ..export.staging import staged
    from ..quantization.onnx import graph_feeds
    from ..runtimes import runtime_module
    from ..saved import task_named
    from .quantize_checks import REPORT_FILE, check_source
    from .quantize_report import describe_sizes, headline_metric, write_readme

    if backend not in GRAPHS:
        raise UserError(
            f"quantize --backend {backend}: int8 graphs are written for {' and '.join(GRAPHS)} here; "
            "use one of them, or --backend torch (torch dynamic int8)"
        )
    graphs = GRAPHS[backend]()
    if backend == "openvino" and method == "dynamic":
        raise UserError(
            "quantize --backend openvino is static int8 only (nncf, calibrated on your inputs): add --method static "
            "with --validation_file or --calibration_file; for dynamic int8 use --backend onnx or --backend torch"
        )
    if method not in graphs.methods:
        raise UserError(f"quantize: --method must be one of {', '.join(graphs.methods)}, found {method!r}")
    if not 0 <= max_metric_loss < 1:
        raise UserError(f"quantize: --max_metric_loss is a fraction (0.01: 1%), found {max_metric_loss}")
    if not -1 <= min_cosine <= 1:
        raise UserError(f"quantize: --min_cosine is a cosine between -1 and 1, found {min_cosine}")
    if calibration_samples < 1:
        raise UserError(f"quantize: --calibration_samples must be at least 1, found {calibration_samples}")
    for flag, given in (("--validation_file", validation_file), ("--calibration_file", calibration_file)):
        if given is not None and not Path(given).is_file():
            raise UserError(f"quantize: {flag} {given}: no such file")
    if method == "static" and calibration_file is None and validation_file is None:
        raise UserError(
            "quantize --method static calibrates on inputs: give --calibration_file (inputs as serve takes them) "
            "or --validation_file (its first --calibration_samples inputs)"
        )
    runtime_module(backend)  # onnxruntime installed, else the extra to install, before any work
    dest = Path(dest)
    path, metadata = check_source(str(model_dir), dest, overwrite, bare_embedding=True)
    task_name, model = _task_and_model(path, metadata)
    task = task_named(task_name)
    report: dict = {"task": task_name, "source": str(model_dir), "dest": str(dest)}
    with staged(dest) as staging, tempfile.TemporaryDirectory(prefix="encoder-tasks-int8-") as scratch:
        _save(model, staging, None)  # the fp32 run: what is scored, calibrated on and timed as fp32
        load_tokenizer(path).save_pretrained(str(staging))
        fp32_graph = runtime_module(backend).export_encoder(model.encoder, Path(scratch) / "fp32")
        names = graphs.input_names(fp32_graph)
        metrics, calls = {}, []
        if validation_file is not None:
            logger.info("quantize: evaluating the fp32 model on %s", validation_file)
            metrics["fp32"], calls = _evaluate(task_name, staging, validation_file, eval_flags, batch_size)
        if calibration_file is not None:
            calibration_calls = _calibration_calls(task_name, staging, calibration_file, batch_size)
        else:
            calibration_calls = _sample(calls, calibration_samples)
        # The embedding task's product is the vectors themselves: hold them to fp32's too.
        reference = embeddings_of(model, calls) if task_name == "embedding" and calls else None
        calibration = graph_feeds(calibration_calls, names) if method == "static" else None
        nodes = graphs.nodes(fp32_graph)
        int8_graph = staging / graphs.int8_file
        excluded: list[int] = []
        steps: list[dict] = []
        sensitivity: list[dict] | None = None

        def quantize_and_score() -> dict | None:
            skip = [name for name, layer in nodes.items() if layer in excluded]
            graphs.quantize(fp32_graph, staging, method, calibration, skip)
            record = {
                "backend": backend,
                "file": graphs.int8_file,
                "precision": "int8",
                "method": method,
                "excluded_layers": sorted(excluded),
                "quantized_nodes": len(nodes) - len(skip),
            }
            _save(model, staging, record)
            if validation_file is None:
                return None
            logger.info(
                "quantize: evaluating the int8 graph (layers in fp32: %s)", sorted(excluded) or "none"
            )
            found, _ = _evaluate(task_name, staging, validation_file, eval_flags, batch_size)
            compared = headline_metric(task, metrics["fp32"], found, metric)
            compared["within_target"] = compared["relative_loss"] <= max_metric_loss
            if reference is not None:
                int8_model = _int8_model(staging, record).eval()
                compared["agreement"] = vector_agreement(reference, embeddings_of(int8_model, calls))
                compared["agreement"]["min_cosine_target"] = min_cosine
                compared["within_target"] &= floor_of(compared["agreement"]) >= min_cosine
            steps.append({"excluded_layers": sorted(excluded), **compared})
            metrics["int8"] = found
            return compared

        compared = quantize_and_score()
        layers = sorted({layer for layer in nodes.values() if layer >= 0})
        while compared is not None and not compared["within_target"] and len(excluded) < len(layers):
            if sensitivity is None:
                probe_calls = calibration_calls[:8] or calls[:8]
                probe = graph_feeds(probe_calls, names)
                sensitivity = graphs.sensitivity(fp32_graph, method, calibration, probe, nodes)
            layer = next(
                row["layer"] for row in sensitivity if row["layer"] >= 0 and row["layer"] not in excluded
            )
            logger.info(
                "quantize: %s: keeping layer %d in fp32", _shortfall(compared, max_metric_loss), layer
            )
            excluded.append(layer)
            compared = quantize_and_score()
        record = model.settings.get("runtime")
        report["quantization"] = {
            **record,
            "layers": [name for name, layer in nodes.items() if layer not in excluded],
            **graphs.describe(method),
            "calibration": (
                {"file": calibration_file, "inputs": sum(len(f["input_ids"]) for f in calibration)}
                if method == "static" and calibration_file
                else {"validation_inputs": sum(len(f["input_ids"]) for f in calibration)}
                if method == "static"
                else None
            ),
            "source": str(model_dir),
            **graphs.versions(),
        }
        report["runtime"] = record
        report["size"] = describe_sizes(graphs.weights(fp32_graph), graphs.weights(int8_graph))
        if validation_file is not None:
            report["validation_file"] = str(validation_file)
            report["metric"] = compared
            report["metrics"] = metrics
            report["guardrail"] = {
                "max_metric_loss": max_metric_loss,
                **(
                    {"min_cosine": min_cosine, "cosine_percentile": PERCENTILE}
                    if reference is not None
                    else {}
                ),
                "steps": steps,
                "sensitivity": sensitivity,
            }
            report["speed"] = _speeds(staging, record, calls, repeats, batch_size)
            if not compared["within_target"]:
                logger.warning(
                    "quantize: with every layer in fp32, %s", _shortfall(compared, max_metric_loss)
                )
        elif calibration_calls:  # no validation file: timed on the inputs given to calibrate on
            report["speed"] = _speeds(staging, record, calibration_calls, repeats, batch_size)
        write_json(staging / REPORT_FILE, report)
        write_readme(staging / "README.md", report)
    _log(report)
    return report


class _OnnxGraphs:
    """ONNX Runtime int8 (:mod:`encoder_tasks.quantization.onnx`): one ``.onnx`` file."""

    int8_file = INT8_FILE

    def __init__(self):
        from ..quantization import onnx as quantization

        self.q = quantization
        self.methods = quantization.METHODS

    def input_names(self, graph: Path) -> list[str]:
        import onnx

        return [i.name for i in onnx.load(str(graph), load_external_data=False).graph.input]

    def nodes(self, graph: Path) -> dict[str, int]:
        return self.q.quantizable_nodes(graph)

    def quantize(self, graph: Path, staging: Path, method: str, calibration, skip) -> None:
        self.q.quantize_graph(graph, staging / self.int8_file, method, calibration, exclude=skip)

    def sensitivity(self, graph: Path, method: str, calibration, probe, nodes) -> list[dict]:
        return self.q.layer_sensitivity(graph, method, calibration, probe, nodes)

    def describe(self, method: str) -> dict:
        return {
            "weights": "int8, symmetric, one scale per output channel",
            "activations": "uint8, ranges calibrated on the calibration inputs (QDQ)"
            if method == "static"
            else "uint8, one scale per batch, computed as the graph runs",
        }

    def versions(self) -> dict:
        import onnxruntime

        return {"onnxruntime": onnxruntime.__version__}

    def weights(self, graph: Path) -> Path:
        return graph


class _OpenVINOGraphs:
    """OpenVINO static int8 (:mod:`encoder_tasks.quantization.openvino`, nncf): ``encoder.xml`` with
    its ``encoder.bin`` and ``encoder_info.json`` at the top of the run directory (where every
    loader's linked view of the directory finds them)."""

    int8_file = "encoder.xml"

    def __init__(self):
        try:
            import nncf  # noqa: F401  (refused before any work, not after the fp32 evaluation)
        except ImportError:
            raise UserError(
                "quantize --backend openvino needs nncf, which is not installed: pip install 'encoder-tasks[openvino]'"
            ) from None
        from ..quantization import openvino as quantization

        self.q = quantization
        self.methods = quantization.METHODS

    def input_names(self, graph: Path) -> list[str]:
        return self.q.input_names(graph)

    def nodes(self, graph: Path) -> dict[str, int]:
        return self.q.linear_nodes(graph)

    def quantize(self, graph: Path, staging: Path, method: str, calibration, skip) -> None:
        self.q.quantize_graph(graph, staging, calibration, exclude=skip)

    def sensitivity(self, graph: Path, method: str, calibration, probe, nodes) -> list[dict]:
        return self.q.layer_sensitivity(graph, calibration, probe, nodes)

    def describe(self, method: str) -> dict:
        return {
            "weights": "int8, symmetric, one scale per output channel (nncf)",
            "activations": "int8/uint8, ranges calibrated on the calibration inputs "
            "(nncf ModelType.TRANSFORMER: no quantizers on the LayerNorms; SmoothQuant off)",
        }

    def versions(self) -> dict:
        import nncf
        import openvino

        return {"openvino": openvino.__version__, "nncf": nncf.__version__}

    def weights(self, graph: Path) -> Path:
        return Path(graph).with_suffix(".bin")


#: The backends ``quantize`` writes int8 graphs for.
GRAPHS = {"onnx": _OnnxGraphs, "openvino": _OpenVINOGraphs}


def _int8_model(staging: Path, record: dict):
    """The run in ``staging`` with its int8 graph as the encoder (as every loader opens it)."""
    from ..heads import EncoderWithHead
    from ..runtimes import apply_backend

    model = EncoderWithHead.from_pretrained(staging).cpu()
    apply_backend(model, "auto", runtime=record, where=str(staging))
    return model


def _speeds(staging, record, calls, repeats, batch_size) -> dict:
    """The model's forward passes on the evaluation's batches: torch fp32, and the int8 graph."""
    import torch

    from ..heads import EncoderWithHead

    speed: dict = {"batch_size": batch_size, "repeats": repeats, "threads": torch.get_num_threads()}
    speed["inputs"] = sum(len(c["input_ids"]) for c in calls if c.get("input_ids") is not None)
    fp32 = EncoderWithHead.from_pretrained(staging).cpu()
    speed["fp32"] = _time(fp32, calls, repeats)
    speed["int8"] = _time(_int8_model(staging, record), calls, repeats)
    speed["speedup"] = speed["fp32"]["seconds"] / speed["int8"]["seconds"]
    return speed


def _log(report: dict) -> None:
    from .quantize_report import table_lines

    runtime = report["runtime"]
    lines = [
        f"quantize: {report['source']} -> {report['dest']} ({report['task']}, {runtime['backend']} {runtime['method']} int8; "
        f"layers kept in fp32: {runtime['excluded_layers'] or 'none'})",
        *table_lines(report),
    ]
    logger.info("\n".join(lines))
    speedup = report.get("speed", {}).get("speedup")
    if speedup is not None and speedup < 1:
        from ..devices import INT8_INSTRUCTIONS, cpu_int8_instructions

        found = cpu_int8_instructions()
        logger.warning(
            "quantize: the int8 graph ran %.2fx the fp32 model's speed on this CPU (%s): serving the fp32 run "
            "may be faster here",
            speedup,
            f"int8 instructions: {', '.join(found)}"
            if found
            else f"none of the int8 instructions {', '.join(INT8_INSTRUCTIONS)}",
        )

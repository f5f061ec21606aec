"""``encoder-tasks quantize RUN_DIR DEST``: an int8 copy of a run, faster on the CPU, with a report.

    encoder-tasks quantize runs/sst2 runs/sst2-int8
    encoder-tasks quantize runs/sst2 runs/sst2-int8 --validation_file dev.tsv --text_column sentence

The encoder's linear layers become int8 (dynamic quantization, :mod:`encoder_tasks.quantization.int8`): weights in int8
with one scale per output channel, activations quantized per batch as the model runs, the
matrix products in torch's int8 CPU kernels, everything around them (embeddings, layer norms,
attention softmax, the task's head) in fp32. ``--heads`` quantizes the head's linear layers
too (MLM: the vocabulary projection); ``--skip REGEX`` keeps matching layers in fp32.

``DEST`` is an ordinary run directory: ``config.json``, the tokenizer, ``encoder_tasks.json``
(settings key ``quantization``: method, layers, engine, source), a ``README.md``, and
``model.safetensors`` holding the int8 weights, their scales and zero points as plain tensors
beside the fp32 parameters that were not quantized. ``<task> predict``, ``<task> evaluate``,
:meth:`encoder_tasks.inference.Predictor.load` and ``serve`` load it unchanged; it runs on the
CPU, in fp32 around its int8 layers (``--precision auto`` means fp32 for it).

``--backend onnx`` writes an int8 ONNX graph of the encoder instead (``--method dynamic|static``,
``--calibration_file``, the ``--max_metric_loss`` guardrail: :mod:`encoder_tasks.commands.quantize_runtime`);
``--backend openvino`` a static int8 OpenVINO graph (nncf; the same calibration and guardrail). A bare
encoder or sentence-transformers folder is accepted as an embedding model by every backend.

With ``--validation_file`` (plus the task's flags for reading it, as ``<task> evaluate``
takes them), both models are scored by the task's own evaluate path and timed on the file's
inputs (:mod:`.quantize_report`); ``DEST/quantization_report.json`` holds the metric before and after,
the speed of both and the sizes on disk. Without it, only the sizes. Everything is written to
a temporary folder inside ``DEST`` and moved in once it succeeded
(:func:`encoder_tasks.export.staging.staged`).

Example:
    >>> report = quantize_run("runs/sst2", "runs/sst2-int8")  # doctest: +SKIP
    >>> report["size"]["ratio"]  # doctest: +SKIP
    0.27
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from ..artifact import WEIGHTS_FILE
from ..backbone import load_tokenizer
from ..config import ArgumentParser
from ..data.writers import write_json
from ..errors import UserError, check_choice
from ..export.staging import leftovers, staged
from ..quantization.agreement import MIN_COSINE
from ..quantization.int8 import METHOD, linear_names, packing_engine, quantize_linears
from .quantize_checks import REPORT_FILE, check_source
from .quantize_report import describe_sizes, evaluate_and_time, log_report, write_readme

logger = logging.getLogger(__name__)


#: ``--backend auto``'s candidates, made and timed where ``quantize`` runs (:mod:`.quantize_auto`).
#: On CPUs with int8 dot-product instructions OpenVINO static int8 measured fastest at no metric loss
#: (MiniLM encode, 999 STS-B sentences, x torch fp32 in two runs: OpenVINO static 2.86x / 2.72x at
#: Spearman 0.9270 against 0.9272; ONNX dynamic 1.79x / 1.83x and torch dynamic 1.80x / 1.72x at
#: 0.9264; ONNX static 1.05x / 1.00x at 0.9237: benchmarks/results/backends-20261201-171306.json and
#: backends-20261201-171439.json); on an AVX2-only CPU it ran slower than fp32 and ONNX dynamic int8
#: was the fastest (docs/speed.md). Static int8 calibrates on the user's inputs, so OpenVINO is a
#: candidate only when there are some (--calibration_file or --validation_file); with none, or with
#: neither runtime installed, torch dynamic int8.
AUTO_CANDIDATES = (("openvino", "static"), ("onnx", "dynamic"))


def auto_candidates(
    validation_file: str | None, calibration_file: str | None, heads: bool, skip: str | None
) -> tuple[list[tuple[str, str]], str]:
    """``([(backend, method), ...], why)``: what ``--backend auto`` makes and times (see
    :data:`AUTO_CANDIDATES`); one candidate is simply used.

    Example:
        >>> auto_candidates(None, None, heads=False, skip=None)[0]
        [('torch', 'dynamic')]
    """
    import importlib.util

    from ..runtimes import installed

    if heads or skip:
        return [("torch", "dynamic")], "--heads/--skip choose torch's int8 layers"
    if calibration_file is None and validation_file is None:
        return [("torch", "dynamic")], (
            "no inputs to calibrate static int8 on or to time on (give --validation_file or --calibration_file)"
        )
    usable = {
        "openvino": installed("openvino") and importlib.util.find_spec("nncf") is not None,
        "onnx": installed("onnx"),
    }
    found = [(backend, method) for backend, method in AUTO_CANDIDATES if usable[backend]]
    if not found:
        return [("torch", "dynamic")], (
            "int8 graphs need pip install 'encoder-tasks[openvino]' or 'encoder-tasks[onnx]'"
        )
    return found, "each int8 graph timed on your inputs, the fastest within the guardrail kept"


def quantize_run(
    model_dir: str | Path,
    dest: str | Path,
    *,
    heads: bool = False,
    skip: str | None = None,
    overwrite: bool = False,
    validation_file: str | None = None,
    eval_flags: list[str] | tuple[str, ...] = (),
    batch_size: int = 64,
    repeats: int = 3,
    metric: str | None = None,
    backend: str = "torch",
    method: str | None = None,
    calibration_file: str | None = None,
    calibration_samples: int = 256,
    max_metric_loss: float = 0.01,
    min_cosine: float = MIN_COSINE,
) -> dict:
    """Write the int8 copy of ``model_dir`` to ``dest``; returns the report (also in ``dest``).

    ``eval_flags`` are ``<task> evaluate`` flags for reading ``validation_file`` (columns...).
    ``backend`` ``onnx`` writes an int8 ONNX graph of the encoder instead (``method`` dynamic or
    static, the metric guardrail: :mod:`encoder_tasks.commands.quantize_runtime`); ``torch`` is torch dynamic int8 (:mod:`.int8`).
    """
    check_choice("backend", backend, ("auto", "torch", "onnx", "openvino"))
    runtime_options = dict(
        calibration_file=calibration_file,
        calibration_samples=calibration_samples,
        max_metric_loss=max_metric_loss,
        min_cosine=min_cosine,
        validation_file=validation_file,
        eval_flags=eval_flags,
        batch_size=batch_size,
        repeats=repeats,
        metric=metric,
    )
    if backend == "auto" and method is None:
        candidates, why = auto_candidates(validation_file, calibration_file, heads, skip)
        if len(candidates) > 1:
            from .quantize_auto import quantize_fastest

            logger.info("quantize --backend auto: %s (%s)", ", ".join(f"{b} {m}" for b, m in candidates), why)
            return quantize_fastest(model_dir, dest, candidates, overwrite=overwrite, **runtime_options)
        ((backend, method),) = candidates
        logger.info("quantize --backend auto: %s %s int8 (%s)", backend, method, why)
    elif backend == "auto":  # the method was asked for: the backend that does it best
        if method == "static":
            usable = dict(auto_candidates(validation_file, calibration_file, heads, skip)[0])
            backend = "openvino" if "openvino" in usable else "onnx"
        else:
            backend = "torch"
        logger.info("quantize --backend auto --method %s: %s", method, backend)
    if method is None:
        method = "static" if backend == "openvino" else "dynamic"
    if backend != "torch":
        from .quantize_runtime import quantize_with_runtime

        return quantize_with_runtime(
            model_dir, dest, backend=backend, method=method, overwrite=overwrite, **runtime_options
        )
    if method != "dynamic" or calibration_file is not None:
        raise UserError(
            "quantize --backend torch is dynamic int8 only (no calibration); for static int8 use --backend onnx "
            "or --backend openvino"
        )
    import torch

    from ..heads import EncoderWithHead  # torch loads when a quantization runs

    dest = Path(dest)
    if batch_size < 1 or repeats < 1:
        raise UserError(
            f"quantize: --batch_size and --repeats must be at least 1, found {batch_size}, {repeats}"
        )
    if validation_file is not None and not Path(validation_file).is_file():
        raise UserError(f"quantize: --validation_file {validation_file}: no such file")
    for folder in leftovers(dest):  # an interrupted run's temporary folder
        shutil.rmtree(folder, ignore_errors=True)
    path, metadata = check_source(str(model_dir), dest, overwrite)
    if metadata is None:  # a bare encoder or sentence-transformers folder: an embedding model
        from .quantize_runtime import _task_and_model

        task_name, model = _task_and_model(path, None)
        metadata = {"task": task_name}
        if validation_file is not None:
            raise UserError(
                "quantize --backend torch: --validation_file scores saved runs only; for a bare encoder folder "
                "use --backend onnx, which scores it, or train/save it as an embedding run first"
            )
    else:
        model = EncoderWithHead.from_pretrained(path).cpu()
    names = linear_names(model, heads=heads, skip=skip)
    if not names:
        raise UserError(f"quantize: no linear layer of {model_dir} is left to quantize (--skip {skip!r})")
    quantize_linears(model, names)
    record = {
        "method": METHOD,
        "weights": "int8, symmetric, one scale per output channel",
        "activations": "uint8, one scale per batch, computed as the model runs",
        "layers": names,
        "engine": packing_engine(),
        "source": str(model_dir),
        "torch": torch.__version__,
    }
    model.settings = model.settings.replace(extra={**model.settings.extra, "quantization": record})
    logger.info(
        "quantize: %d linear layers of %s in int8 (%s kernels)", len(names), model_dir, record["engine"]
    )
    with staged(dest) as staging:
        model.save_pretrained(staging)
        load_tokenizer(path).save_pretrained(str(staging))
        report = {
            "task": metadata["task"],
            "source": str(model_dir),
            "dest": str(dest),
            "quantization": record,
        }
        report["size"] = describe_sizes(Path(path) / WEIGHTS_FILE, staging / WEIGHTS_FILE)
        if validation_file is not None:
            report.update(
                evaluate_and_time(
                    metadata["task"],
                    path,
                    staging,
                    validation_file,
                    list(eval_flags),
                    batch_size,
                    repeats,
                    metric,
                )
            )
        write_json(staging / REPORT_FILE, report)
        write_readme(staging / "README.md", report)
    log_report(report)
    return report


def main(argv: list[str]) -> int:
    """``encoder-tasks quantize RUN_DIR DEST [--validation_file FILE [task flags]] [...]``."""
    parser = ArgumentParser(
        prog="encoder-tasks quantize", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    parser.add_argument("model_dir", help="A run directory saved by encoder-tasks (fp32 or bf16 weights).")
    parser.add_argument("dest", help="Where to write the int8 run directory.")
    parser.add_argument(
        "--validation_file",
        default=None,
        help="Score both models on this file (the task's evaluate path) and time both on its inputs; "
        "the task's evaluate flags for reading it (columns...) may follow.",
    )
    parser.add_argument(
        "--batch_size", type=int, default=64, help="Batch size of the evaluation and the timing."
    )
    parser.add_argument("--repeats", type=int, default=3, help="Timed passes per model (the median is kept).")
    parser.add_argument(
        "--metric",
        default=None,
        help="The metric the report compares (default: the task's own, e.g. accuracy).",
    )
    parser.add_argument(
        "--heads",
        action="store_true",
        help="Quantize the head's linear layers too (MLM: the vocabulary projection).",
    )
    parser.add_argument(
        "--skip", default=None, help="Keep the linear layers whose name matches this regex in fp32."
    )
    parser.add_argument("--overwrite", action="store_true", help="Write into a non-empty destination.")
    parser.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "torch", "onnx", "openvino"),
        help="auto: with inputs to calibrate and time on (--validation_file or --calibration_file), openvino static "
        "and onnx dynamic int8 are both made and timed here, and the fastest within the guardrail kept (the "
        "fastest int8 depends on the CPU); without inputs, torch; torch: torch dynamic int8 layers; onnx: an "
        "int8 ONNX graph of the encoder, run by ONNX Runtime; openvino: a static int8 OpenVINO graph (nncf) "
        "(docs/quantization.md) (default auto).",
    )
    parser.add_argument(
        "--method",
        default=None,
        choices=("dynamic", "static"),
        help="dynamic: activations quantized per batch as the model runs (default; torch, onnx); static: "
        "activation ranges calibrated on --calibration_file (onnx, openvino: its only method and its default; "
        "measured in docs/quantization.md).",
    )
    parser.add_argument(
        "--calibration_file",
        default=None,
        help="Inputs to calibrate static int8 on, as serve takes them (JSON lines or a table with the task's "
        "input fields: text, text_pair, question, context...) (default: the first --calibration_samples "
        "inputs of --validation_file).",
    )
    parser.add_argument(
        "--calibration_samples", type=int, default=256, help="Validation inputs to calibrate on by default."
    )
    parser.add_argument(
        "--max_metric_loss",
        type=float,
        default=0.01,
        help="Largest relative loss of the task metric on --validation_file: past it, the most sensitive "
        "encoder layers stay fp32, one at a time (onnx, openvino) (default 0.01: 1%%).",
    )
    parser.add_argument(
        "--min_cosine",
        type=float,
        default=MIN_COSINE,
        help="The embedding task (onnx, openvino): 99%% of the --validation_file inputs' int8 vectors must "
        "keep at least this cosine to their fp32 vectors, else layers stay fp32 as for the metric "
        f"(default {MIN_COSINE}).",
    )
    args, rest = parser.parse_known_args(argv)
    if rest and args.validation_file is None:
        raise UserError(
            f"encoder-tasks quantize: unknown flag {rest[0]} (the task's flags for reading a file "
            "come with --validation_file)"
        )
    quantize_run(
        args.model_dir,
        args.dest,
        heads=args.heads,
        skip=args.skip,
        overwrite=args.overwrite,
        validation_file=args.validation_file,
        eval_flags=rest,
        batch_size=args.batch_size,
        repeats=args.repeats,
        metric=args.metric,
        backend=args.backend,
        method=args.method,
        calibration_file=args.calibration_file,
        calibration_samples=args.calibration_samples,
        max_metric_loss=args.max_metric_loss,
        min_cosine=args.min_cosine,
    )
    return 0

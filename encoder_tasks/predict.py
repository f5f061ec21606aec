"""One prediction path for every task: load, device, precision, read, batch, write.

A task's ``predict`` hook is its own only where it must be (windows, decoding, the record
it writes); the rest comes from here, so every task honours ``--precision``,
``--batch_size``, the saved settings (:mod:`encoder_tasks.settings`) and never overwrites an
output file unless ``--overwrite_output`` says so.

Example:
    >>> import torch
    >>> with autocast_for("cpu", "fp32"):
    ...     torch.ones(2, 2) @ torch.ones(2, 2)
    tensor([[2., 2.],
            [2., 2.]])
"""

from __future__ import annotations

import contextvars
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from .errors import UserError, check_choice
from .precision import PRECISIONS, autocast_for, uses_bf16

logger = logging.getLogger(__name__)


#: Called by :func:`run_batches` before every forward pass when set (the server sets it on each
#: model's worker thread): it raises to stop work whose requester has gone (timed out, client left),
#: so one long request cannot hold a model for minutes after nobody waits for it.
BEFORE_FORWARD: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "encoder_tasks_before_forward", default=None
)


def cast_encoder_for_inference(model, precision: str = "auto"):
    """Store the encoder's weights in bf16 when ``precision`` computes in bf16; returns ``model``.

    For a model loaded only to predict. Autocast alone casts every weight to bf16 again in
    every forward pass (its cast cache does not outlive the context, nor work in inference
    mode); weights stored in bf16 skip that, for the same bf16 matrix products. The task's
    output layers keep fp32 weights and compute in fp32 (:func:`encoder_tasks.heads.full_precision`),
    and autocast still runs the ops it keeps in fp32 (layer norms, softmax) in fp32.

    Example:
        >>> import torch.nn as nn
        >>> model = nn.Module()
        >>> model.encoder, model.head = nn.Linear(2, 2), nn.Linear(2, 1)
        >>> _ = cast_encoder_for_inference(model, "bf16")
        >>> model.encoder.weight.dtype, model.head.weight.dtype
        (torch.bfloat16, torch.float32)
    """
    encoder = getattr(model, "encoder", None)
    if isinstance(encoder, torch.nn.Module) and not _is_int8(model):  # int8: fp32 around int8 kernels
        device = next(encoder.parameters()).device
        if uses_bf16(device, precision):
            encoder.to(torch.bfloat16)
    return model


def inference_device() -> torch.device:
    """The accelerator when there is one (CUDA, Apple MPS, Intel XPU), else the CPU.

    ``ENCODER_TASKS_DEVICE`` (``cpu``, ``cuda:1``...) chooses one explicitly.
    """
    from .devices import available_accelerator  # the one detection training uses too

    chosen = os.environ.get("ENCODER_TASKS_DEVICE")
    if chosen:
        return torch.device(chosen)
    return torch.device(available_accelerator() or "cpu")


def load_for_prediction(
    args,
    task_name: str,
    settings_skip: tuple[str, ...] = (),
    load: Callable[[str], Any] | None = None,
    fp32_weights: bool = False,
    check: bool = True,
):
    """Check ``args``, load the saved model and its tokenizer, fill unset flags from the saved
    settings, move the model to :func:`inference_device` and, where ``--precision`` computes in
    bf16, store the encoder's weights in bf16 (:func:`cast_encoder_for_inference`). Returns
    ``(model, tokenizer)``.

    Fails before loading anything on missing or clashing paths (``args.check()``), and on a
    model saved by another task. ``load(path)`` replaces the loader where a task also accepts
    models it did not save (embedding: any encoder, sentence-transformers folders).
    ``fp32_weights`` keeps the encoder's weights in fp32 (autocast alone) where the output is the
    encoder's own last layer, so bf16 weights would round it (embedding vectors).
    ``check=False`` skips the file checks, for inputs held in memory (:mod:`encoder_tasks.inference`).
    An int8 model (``encoder-tasks quantize``) stays on the CPU in fp32 around its int8 layers:
    ``--precision auto`` becomes ``fp32`` for it and ``bf16`` is refused.
    """
    from .backbone import load_tokenizer, resolve_model_path
    from .heads import EncoderWithHead
    from .settings import resolve

    if check:
        args.check()
        if getattr(args, "output_file", None):  # before the model loads, not after every prediction
            check_output_location(args.output_file, getattr(args, "overwrite_output", False))
            if args.output_file == "-":
                _claim_stdout()
    if args.disable_tqdm:  # every progress bar reads this
        os.environ["ENCODER_TASKS_DISABLE_TQDM"] = "1"
    path = resolve_model_path(args.model_dir)
    remembered = _on_remembered_runtime(args, path, task_name, settings_skip) if load is None else None
    model = remembered or (load or EncoderWithHead.from_pretrained)(path)
    if model.task != task_name:
        raise UserError(
            f"{args.model_dir} holds a {model.task!r} model; use `encoder-tasks {model.task} predict`"
        )
    resolve(args, model.settings, skip=settings_skip)
    tokenizer = load_tokenizer(path)
    if _is_int8(model):
        _int8_precision(args)
        choose_backend(args, model, path)  # torch only: refuses another backend by name
        return model.cpu(), tokenizer  # its int8 kernels are CPU kernels
    if remembered is not None:
        return model, tokenizer  # on the runtime auto chose before, in fp32
    model.to(inference_device())
    if choose_backend(args, model, path, source=path if load is None else None) != "torch":
        return model, tokenizer  # the encoder runs in a runtime, in fp32
    if not fp32_weights:
        cast_encoder_for_inference(model, getattr(args, "precision", "auto"))
    return model, tokenizer


def choose_backend(args, model, path: str, source: str | None = None) -> str:
    """Run ``model``'s encoder on ``args.backend`` (:func:`encoder_tasks.runtimes.apply_backend`);
    returns the backend chosen and records it in ``args.backend``. ``source``: the directory
    ``model`` was loaded from as saved (``auto`` notes its files, for the next load).

    ``--backend`` left unset means ``$ENCODER_TASKS_BACKEND``, else ``auto``. A directory whose
    settings record a graph (``runtime``: ``encoder-tasks quantize --backend onnx``) loads that graph.
    The runtimes compute in fp32: ``--precision auto`` means fp32 there, ``bf16`` keeps ``auto`` on
    torch and is refused with an explicit runtime backend.
    """
    from .runtimes import apply_backend, check_backend

    backend = _backend_asked(args)
    check_backend(backend)
    precision = getattr(args, "precision", "auto")
    runtime = model.settings.get("runtime") if model.settings is not None else None
    if precision == "bf16" and backend != "torch":
        if backend != "auto" or runtime:
            raise UserError(
                f"--precision bf16: the {runtime['backend'] if runtime and backend == 'auto' else backend} backend "
                "computes in fp32; use --backend torch for bf16, or --precision auto"
            )
        backend = "torch"
    chosen = apply_backend(
        model,
        backend,
        precision=precision,
        batch_size=getattr(args, "batch_size", 16) or 16,
        runtime=runtime,
        where=path,
        source=source,
    )
    if chosen != "torch" and precision == "auto":
        object.__setattr__(args, "precision", "fp32")
    object.__setattr__(args, "backend", chosen)
    return chosen


def _backend_asked(args) -> str:
    """``--backend`` as given, else ``$ENCODER_TASKS_BACKEND``, else ``auto``."""
    from .runtimes import default_backend
    from .settings import given_fields

    backend = getattr(args, "backend", "auto") or "auto"
    if backend == "auto" and "backend" not in given_fields(args):
        backend = default_backend()
    return backend


def _on_remembered_runtime(args, path: str, task_name: str, settings_skip: tuple[str, ...]):
    """The saved model with its encoder on the runtime ``auto`` chose for these files before, on
    this machine (:func:`encoder_tasks.runtimes.remembered_runtime`), its torch encoder never
    built; None where there is no such choice or the model needs its torch encoder (load it as
    usual: ``auto`` then measures, and notes the files for the next time)."""
    import copy

    from .artifact import read_task_metadata
    from .heads import EncoderWithHead
    from .runtimes import remembered_runtime, swap_encoder
    from .settings import resolve

    precision = getattr(args, "precision", "auto")
    if _backend_asked(args) != "auto" or precision == "bf16" or inference_device().type != "cpu":
        return None
    metadata = read_task_metadata(path) or {}
    saved = metadata.get("settings") or {}
    if metadata.get("task") != task_name or any(saved.get(k) for k in ("runtime", "quantization", "lora")):
        return None
    probe = copy.copy(args)  # the batch size auto measured with: the flag, else the saved one
    resolve(probe, saved, skip=settings_skip)
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
        batch_size = getattr(probe, "batch_size", 16) or 16
        runtime = remembered_runtime(path, config, precision=precision, batch_size=batch_size)
        if runtime is None:
            return None
        model = EncoderWithHead.from_pretrained(path, encoder=runtime)
    # A head that needs the torch encoder itself (MLM's tied output layer) fails here: loaded as
    # usual, which also says what is wrong with the files, if anything is.
    except (UserError, OSError, ValueError, AttributeError, TypeError) as exc:
        logger.debug("%s: loading with its torch encoder (%s)", path, exc)
        return None
    swap_encoder(model, runtime)
    object.__setattr__(args, "backend", runtime.backend)
    if precision == "auto":
        object.__setattr__(args, "precision", "fp32")
    return model


def _is_int8(model) -> bool:
    from .quantization.int8 import is_int8

    return is_int8(model)


def _int8_precision(args) -> None:
    """An int8 model computes in fp32 around its int8 matrix products: ``--precision auto``
    means fp32 for it (no bf16 autocast), and ``bf16`` is refused."""
    precision = getattr(args, "precision", "auto")
    check_choice("precision", precision, PRECISIONS)
    if precision == "bf16":
        raise UserError(
            f"--precision bf16: {args.model_dir} is an int8 model (encoder-tasks quantize), which computes "
            "in fp32 around its int8 matrix products; use --precision auto or fp32, or predict with the "
            "fp32 run in bf16"
        )
    if precision == "auto":
        object.__setattr__(args, "precision", "fp32")
        logger.info(
            "%s is an int8 model: predicting in fp32 around its int8 layers, on the CPU", args.model_dir
        )


#: What one more forward pass costs on a CPU, in padded tokens: a batch is cut into passes of
#: like lengths where that saves more padding than the passes cost. Chosen with
#: ``benchmarks/bench_pass_splitting.py`` on STS-B dev sentences (docs/speed.md, "Passes of like
#: lengths"): the one cost that beat a single pass for torch, ONNX Runtime and OpenVINO fp32 and
#: OpenVINO int8 on batches of 16 and of 32 texts (1.05x-1.48x).
CPU_PASS_COST_TOKENS = 64


def pass_cost_tokens(model, device) -> int | None:
    """The pass cost :func:`run_batches` cuts batches with: :data:`CPU_PASS_COST_TOKENS` on a CPU;
    None (one pass per batch) on an accelerator, which computes a padded row nearly for free and
    pays more for each extra pass, and for a padding-free model, which computes no padding.

    Example:
        >>> pass_cost_tokens(torch.nn.Linear(2, 2), "cpu"), pass_cost_tokens(torch.nn.Linear(2, 2), "cuda")
        (64, None)
    """
    if torch.device(device).type != "cpu" or getattr(model, "padding_free", False):
        return None
    return CPU_PASS_COST_TOKENS


def length_sorted_batches(
    lengths: Sequence[int], batch_size: int, pass_cost: int | None = None
) -> list[list[int]]:
    """Indices grouped into batches of similar length (little compute goes to padding).

    ``pass_cost`` (tokens; None: no splitting): each batch of ``batch_size`` is cut further into
    the passes that cost least, a pass costing ``pass_cost`` plus its rows times its longest row.
    A few texts of mixed lengths (a served batch of 16 sentences padded to its longest carries
    about twice its real tokens) then run as two or three passes of like lengths; a long sorted input,
    whose batches hold like lengths already, keeps them whole.

    Example:
        >>> length_sorted_batches([5, 1, 4, 2], 2)
        [[1, 3], [2, 0]]
        >>> length_sorted_batches([40, 8, 9, 41], 4), length_sorted_batches([40, 8, 9, 41], 4, pass_cost=16)
        ([[1, 2, 0, 3]], [[1, 2], [0, 3]])
    """
    if batch_size < 1:
        raise UserError(f"--batch_size must be at least 1, found {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    if pass_cost is None:
        return batches
    return [
        part for batch in batches for part in _cheapest_passes(batch, [lengths[i] for i in batch], pass_cost)
    ]


def _cheapest_passes(batch: list[int], lengths: list[int], pass_cost: int) -> list[list[int]]:
    """``batch`` (sorted by ``lengths``, ascending) cut into the contiguous passes of least total
    cost: ``pass_cost`` each plus rows x longest row (dynamic programming over the cut points)."""
    rows = len(batch)
    if rows * lengths[-1] - sum(lengths) <= pass_cost:  # the padding is worth less than a pass
        return [batch]
    best = [0] + [None] * rows
    cut = [0] * (rows + 1)
    for end in range(1, rows + 1):
        for start in range(end):
            cost = best[start] + pass_cost + (end - start) * lengths[end - 1]
            if best[end] is None or cost < best[end]:
                best[end], cut[end] = cost, start
    passes, end = [], rows
    while end:
        passes.append(batch[cut[end] : end])
        end = cut[end]
    return passes[::-1]


@torch.inference_mode()
def run_batches(
    model,
    features: Sequence[dict],
    collate: Callable[[list[dict]], dict],
    batch_size: int,
    precision: str = "auto",
    read: Callable[[Any, list[int]], Sequence] | None = None,
    desc: str = "predicting",
    disable_tqdm: bool | None = None,
) -> list:
    """Run ``model`` over ``features`` in length-sorted batches under ``precision``; returns one
    output per feature, in input order.

    ``collate`` pads a list of features into tensors; ``read(output, batch_indices)`` turns the
    model output of a batch into one item per feature (default: the fp32 logits rows).
    """
    from .reporting.tracking import progress

    device = model.device
    lengths = [len(f["input_ids"]) for f in features]
    results: list = [None] * len(features)
    batches = length_sorted_batches(lengths, batch_size, pass_cost_tokens(model, device))
    before_forward = BEFORE_FORWARD.get()
    for chunk in progress(batches, desc=desc, unit="batch", disable=disable_tqdm):
        if before_forward is not None:
            before_forward()
        batch = collate([features[i] for i in chunk])
        with autocast_for(device, precision):
            output = model(**{k: v.to(device) for k, v in batch.items()})
        rows = read(output, chunk) if read is not None else output.logits.float().cpu().numpy()
        for i, row in zip(chunk, rows):
            results[i] = row
    return results


def check_output_location(path: str, overwrite: bool = False, flag: str = "--output_file") -> None:
    """Refuse, before any prediction, an output that cannot be written: a folder, a path under a
    file, a folder where no file can be made (``/sys``, read-only, no permission), an existing file
    without ``overwrite``. ``-`` (stdout), pipes and devices are fine (written directly).

    Example:
        >>> check_output_location("/")
        Traceback (most recent call last):
        ...
        encoder_tasks.errors.UserError: --output_file /: is a folder; expected a file name
    """
    import tempfile

    if path == "-":
        return
    target = Path(path)
    if target.is_dir():
        raise UserError(f"{flag} {target}: is a folder; expected a file name")
    if target.exists() and not target.is_file():  # a device, a named pipe: written, never replaced
        if not os.access(target, os.W_OK):
            raise UserError(f"{flag} {target}: not writable")
        return
    if target.exists() and not overwrite:
        raise UserError(f"{flag} {target} already exists; choose another or pass --overwrite_output")
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UserError(f"{flag} {target}: {ancestor} is a file, not a folder")
    try:  # the one sure test: make (and remove) a file where the output will go
        tempfile.TemporaryFile(dir=ancestor).close()
    except OSError as error:
        raise UserError(f"{flag} {target}: cannot write in {ancestor} ({error.strerror or error})") from None


#: Where ``--output_file -`` writes: the process's stdout, kept aside while logs go to stderr.
_STDOUT: Any = None


def _claim_stdout() -> None:
    """``--output_file -``: predictions alone on stdout; everything else (logs, progress) on stderr."""
    global _STDOUT
    import sys

    if _STDOUT is not None:
        return
    try:
        sys.stdout.flush()
        _STDOUT = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    except (OSError, ValueError, AttributeError):  # no file descriptor (captured): write to it as is
        _STDOUT = sys.stdout
        return
    sys.stdout = sys.stderr


def _release_stdout() -> None:
    global _STDOUT
    import sys

    if _STDOUT is not None and sys.stdout is sys.stderr:  # ours: a copy of the descriptor
        _STDOUT.close()
        sys.stdout = sys.__stdout__
    _STDOUT = None


def _write_lines(handle, records) -> int:
    import json

    count = 0
    for record in records:
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        count += 1
    handle.flush()
    return count


def write_predictions(args, records, what: str = "predictions") -> int:
    """Write ``records`` as JSON lines to ``args.output_file``; returns the count.

    :func:`stream_predictions` with one chunk: the same checks, the same temporary file (a regular
    file is never half written), ``-``, pipes and devices written directly."""
    return stream_predictions(args, [records], lambda chunk: chunk, what)


def stream_predictions(
    args,
    chunks: Iterable[Any],
    predict: Callable[[Any], Iterable[dict]],
    what: str | Callable[[], str] = "predictions",
) -> int:
    """``predict`` each of ``chunks`` (rows of the input, :func:`encoder_tasks.data.chunks.read_chunks`)
    and write its records as JSON lines to ``args.output_file`` before the next chunk is read;
    returns the count of records. Memory holds one chunk, whatever the input's size.

    The output is checked again before the first chunk (a file may have appeared while the model
    loaded). A regular file is written under a temporary name in its folder as the chunks come and
    renamed once the last is written: it is never half written, and on any error (a bad row in the
    middle of the input, a full disk, Ctrl-C) the temporary file is removed and an existing output
    is left as it was. ``-`` (stdout), a pipe or a device (``/dev/stdout``, a FIFO) gets the lines
    as they are produced, written directly, never replaced by a file. ``what`` names the records in
    the closing log line; a callable is called once every chunk is written (a task's summary:
    counts over the whole input, the warnings logged there).

    Example:
        >>> import tempfile, types
        >>> out = tempfile.mkdtemp() + "/squares.jsonl"
        >>> args = types.SimpleNamespace(output_file=out, overwrite_output=False)
        >>> squares = lambda chunk: [{"n": n, "square": n * n} for n in chunk]
        >>> stream_predictions(args, [[1, 2], [3]], squares)
        3
        >>> open(out).read().splitlines()[-1]
        '{"n": 3, "square": 9}'
    """
    path = args.output_file
    try:
        with _Output(path, args.overwrite_output) as output:
            for chunk in chunks:
                output.write(predict(chunk))
            output.what = what() if callable(what) else what
    except OSError as error:
        raise UserError(f"--output_file {path}: cannot write ({error.strerror or error})") from None
    return output.count


class _Output:
    """One prediction output opened for :func:`stream_predictions`: stdout, a pipe or device
    written directly, or a regular file written under a temporary name and renamed on success."""

    def __init__(self, path: str, overwrite: bool):
        self.path, self.overwrite, self.count = path, overwrite, 0
        self.handle: Any = None
        self.temporary: Path | None = None
        self.what = "predictions"  # the closing log line's name for the records

    def __enter__(self) -> _Output:
        check_output_location(self.path, self.overwrite)
        target = Path(self.path)
        if self.path == "-":
            if _STDOUT is None:
                _claim_stdout()
            self.handle = _STDOUT
        elif target.exists() and not target.is_file():  # a pipe, a device: never replaced
            self.handle = open(target, "w", encoding="utf-8")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            # A name of its own ("x": never another's file), so two runs writing to one folder do
            # not meet; opened like any file, so the output gets the usual permissions.
            self.temporary = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
            self.handle = open(self.temporary, "x", encoding="utf-8")
        return self

    def write(self, records: Iterable[dict]) -> None:
        self.count += _write_lines(self.handle, records)  # flushed: a reader sees each chunk

    def __exit__(self, kind, error, traceback) -> None:
        try:
            if self.path == "-":
                if kind is None:  # logged while stdout still points at stderr
                    logger.info("wrote %d %s to stdout", self.count, self.what)
                _release_stdout()
                return
            if self.handle is not None:
                self.handle.close()
            if kind is None and self.temporary is not None:
                if Path(self.path).exists() and not self.overwrite:  # appeared while the model ran
                    raise UserError(
                        f"--output_file {self.path} already exists; choose another or pass --overwrite_output"
                    )
                os.replace(self.temporary, self.path)
                self.temporary = None
            if kind is None:
                logger.info("wrote %d %s to %s", self.count, self.what, self.path)
        finally:
            if self.temporary is not None:  # an error: no half-written output, the old one untouched
                self.temporary.unlink(missing_ok=True)

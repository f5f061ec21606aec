"""``--engine ray``: ``<task> predict`` and ``embedding encode`` on Ray Data, for corpora of millions of texts.

The same command, the same output file, in input order; only where the work runs changes::

    files --read tasks--> rows --to_inputs--> JSON inputs --actor pool: --ray_workers replicas,
          (streamed)      (with their line)   (task's columns)   each one Predictor--> predictions
          --driver, in input order--> output file (JSON lines; or .npy + .ids.json for encode)

Plain files (``.jsonl``, ``.csv``/``.tsv``, a task's one-text-per-line ``.txt``; one file, a
folder or a glob of them) stream through Ray's read tasks, so no process holds the corpus; a
format of the task's own (CoNLL, SQuAD JSON, MLM text documents, ``.json`` arrays, a
``save_to_disk`` folder) is read on the driver by the task's reader and handed to Ray whole.
Ray's actor restarts and task retries give the fault tolerance: a replica that dies is started
again and its batch retried, and ``preserve_order`` keeps the output in input order, so no row is
lost or written twice. docs/batch-inference.md has the cluster setup and sizing.

Example:
    >>> from encoder_tasks.registry import TASKS
    >>> from encoder_tasks.tasks.classification import ClassificationPredictArguments
    >>> args = ClassificationPredictArguments(model_dir="runs/sst2", input_file="reviews/*.jsonl",
    ...     output_file="predictions.jsonl", engine="ray", ray_workers=8)  # doctest: +SKIP
    >>> predict(TASKS["classification"], args)  # doctest: +SKIP
    {'predictions': 1000000, 'files': 12}
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import socket
import sys
import warnings
from pathlib import Path

from ..data import name_list
from ..errors import UserError
from ..settings import given_fields
from .ray_files import Inputs, plan_inputs
from .ray_outputs import VectorFiles, write_lines
from .ray_stages import Replica, input_columns, to_inputs, to_table

logger = logging.getLogger(__name__)

#: A batch whose replica dies is retried this often on a restarted replica before the run fails
#: (a batch that kills every replica it meets, out of memory say, must not loop forever).
ACTOR_TASK_RETRIES = 3
#: CPUs each read task reserves (reading and turning rows into inputs).
READ_CPUS = 1
#: Seconds to wait for a cluster address to answer before saying nothing listens there.
CONNECT_TIMEOUT_S = 5
#: Flags that say which files to read and write, or where to run: not the replicas' business.
_NOT_FOR_REPLICAS = {"model_dir", "input_file", "output_file", "overwrite_output", "engine"}


def check_reachable(flag: str, address: str) -> None:
    """Fail at once, in one line, where nothing listens at a cluster address (``ray.init`` would
    retry for a minute)."""
    if address in ("auto", "local"):
        return
    target = address.split("://", 1)[1] if "://" in address else address
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(
            f"{flag} {address!r}: expected ray://HOST:PORT (Ray Client), HOST:PORT (a head node), auto or local"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise UserError(
            f"{flag} {address}: no Ray cluster answers there ({reason}); start one (`ray start --head`) "
            "or correct the address"
        ) from None


@contextlib.contextmanager
def ray_session(args):
    """Ray, joined for the run: the cluster this process already joined, else ``--ray_address``
    (or ``$RAY_ADDRESS``), else a Ray instance on this machine; left again afterwards."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise UserError("--engine ray needs Ray Data: pip install 'encoder-tasks[ray]'") from None
    env = os.environ.get("RAY_ADDRESS") or None
    flag, address = ("--ray_address", args.ray_address) if args.ray_address else ("RAY_ADDRESS", env)
    if address:
        check_reachable(flag, address)
    if ray.is_initialized():  # a Python caller (or a test) joined a cluster already: run there
        if args.ray_address:
            logger.warning("this process has joined a Ray cluster already; running there, not at %s", address)
        yield ray, False
        return
    try:
        if address and "://" in address:  # Ray Client passes options on to the cluster's own init
            ray.init(address=address)
        else:  # no dashboard for a run's own instance; Ray's INFO lines are not the command's
            ray.init(
                address=address,
                include_dashboard=False if address is None else None,
                logging_level=logging.WARNING,
            )
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        where = f"{flag} {address}: could not join the Ray cluster" if address else "could not start Ray"
        raise UserError(f"{where} ({first})") from None
    try:
        yield ray, address is None
    finally:
        ray.shutdown()


def _check_resources(ray, args, local: bool) -> None:
    """Choose the number of replicas where ``--ray_workers`` does not: as many as the cluster
    holds now. Refuse (on this machine) or warn (a cluster may grow) where they cannot all start."""
    have = ray.cluster_resources()
    if args.ray_workers is None:
        if args.ray_gpus_per_worker:
            fits = have.get("GPU", 0) // args.ray_gpus_per_worker
        else:
            fits = (have.get("CPU", 0) - READ_CPUS) // (args.ray_cpus_per_worker or 1)
        args.ray_workers = max(1, int(fits))
    need_cpus = args.ray_workers * args.ray_cpus_per_worker + READ_CPUS
    need_gpus = args.ray_workers * args.ray_gpus_per_worker
    problem = None
    if need_cpus > have.get("CPU", 0):
        problem = (
            f"--ray_workers {args.ray_workers} x --ray_cpus_per_worker {args.ray_cpus_per_worker:g} CPUs, plus "
            f"{READ_CPUS} to read the input, need {need_cpus:g} CPUs; the cluster has {have.get('CPU', 0):g}"
        )
    elif need_gpus > have.get("GPU", 0):
        problem = (
            f"--ray_workers {args.ray_workers} x --ray_gpus_per_worker {args.ray_gpus_per_worker:g} GPUs need "
            f"{need_gpus:g} GPUs; the cluster has {have.get('GPU', 0):g}"
        )
    if problem and local:
        raise UserError(f"{problem}; lower --ray_workers or the resources per worker")
    if problem:
        logger.warning("%s: the run waits until the cluster grows", problem)


def replica_flags(task, args) -> dict:
    """The predict flags the user gave that shape predictions (batch size, precision, top_k...):
    each replica resolves them against the saved settings as ``predict`` does."""
    known = {f.name for f in dataclasses.fields(task.PredictArguments)}
    return {
        name: getattr(args, name)
        for name in sorted(given_fields(args))
        if name in known and name not in _NOT_FOR_REPLICAS and not name.startswith("ray_")
    }


def _dataset(ray, task, args, settings, inputs: Inputs, ids: bool):
    """The replicas' input: streamed from plain files, or the task's whole-file reading."""
    if not inputs.files:
        split = task.read_input_split(args, settings)
        table = to_table(input_columns(task, args, settings, split, ids=ids))
        step = args.ray_batch_size  # one block per replica call, so calls spread over the pool
        return ray.data.from_arrow([table.slice(i, step) for i in range(0, table.num_rows, step)])
    from .ray_files import plain_files_datasource

    names = name_list(args.column_names) or None
    files = {absolute: (shown, fmt) for absolute, shown, fmt in inputs.files}
    source = plain_files_datasource(files, args.delimiter, names, args.encoding, args.ray_batch_size)
    rows = ray.data.read_datasource(source, num_cpus=READ_CPUS)
    kwargs = {"task": task, "args": args, "settings": settings, "several": inputs.several, "ids": ids}
    return rows.map_batches(to_inputs, fn_kwargs=kwargs, batch_format="pyarrow", batch_size=None)


def _predictions(ray, task, args, dataset, vectors: bool):
    """Predictions of ``dataset`` by the actor pool, batch by batch, in input order."""
    constructor = {"model_dir": args.model_dir, "task_name": task.name, "vectors": vectors}
    constructor["gpus"] = args.ray_gpus_per_worker
    constructor["flags"] = replica_flags(task, args)
    with warnings.catch_warnings():
        # Ray 2.60 deprecates passing actor options this way but offers no other for these two.
        warnings.simplefilter("ignore", DeprecationWarning)
        predicted = dataset.map_batches(
            Replica,
            fn_constructor_kwargs=constructor,
            batch_size=args.ray_batch_size,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=args.ray_workers),
            num_cpus=args.ray_cpus_per_worker,
            num_gpus=args.ray_gpus_per_worker,
            max_restarts=-1,  # a replica that dies (a lost node, a killed process) comes back...
            max_task_retries=ACTOR_TASK_RETRIES,  # ... and its batch runs again: nothing lost or doubled
        )
    return predicted.iter_batches(batch_size=None, batch_format="pyarrow")


def _as_user_error(exc: BaseException) -> BaseException:
    """The error to report for a failed run: the task's own (a bad row, named by file and line)
    unwrapped from Ray's, a replica that kept dying explained, anything else unchanged."""
    from ray.exceptions import RayActorError, RayError

    chain, seen = [], exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = getattr(seen, "cause", None) or seen.__cause__ or seen.__context__
    for error in chain:
        if isinstance(error, UserError) and not isinstance(error, RayError):
            return UserError(str(error).strip().splitlines()[0])  # Ray adds lines of its own
    # Ray Data without raise_original_map_exception keeps the task's error as text only.
    found = re.findall(r"^encoder_tasks\.[\w.]*Error: (.+)$", str(exc), flags=re.M)
    if found:
        return UserError(found[-1])
    if any(isinstance(e, RayActorError) or type(e).__name__ == "OutOfMemoryError" for e in chain):
        return UserError(
            f"a model replica died on the same batch {ACTOR_TASK_RETRIES + 1} times (out of memory?); lower "
            "--ray_batch_size or --batch_size, or give each replica more memory"
        )
    return exc


@contextlib.contextmanager
def _ordered_quiet_run(ray, args):
    """Ray Data set for a run (output in input order, progress bars unless ``--disable_tqdm``,
    no INFO lines, no error traces on the terminal), as it was again afterwards."""
    context = ray.data.DataContext.get_current()
    ray_data_log = logging.getLogger("ray.data")
    # A bad row's UserError reaches the driver as itself, not as text in Ray's wrapper.
    settings = {"raise_original_map_exception": True}
    if args.disable_tqdm:  # off a terminal Ray logs its progress at INFO, not shown
        settings["enable_progress_bars"] = False
    settings = {name: value for name, value in settings.items() if hasattr(context, name)}
    kept = {name: getattr(context, name) for name in settings}
    kept_order, kept_level = context.execution_options.preserve_order, ray_data_log.level
    for name, value in settings.items():
        setattr(context, name, value)
    context.execution_options.preserve_order = True
    ray_data_log.setLevel(logging.WARNING)  # its progress bars say what its INFO lines say
    # A failed run's error is reported once, in one line, by the command; Ray's log file keeps its trace.
    terminals = [h for h in ray_data_log.handlers if type(h) is not logging.FileHandler and _is_terminal(h)]
    for handler in terminals:
        handler.addFilter(_below_error)
    try:
        with warnings.catch_warnings():
            # A small input gives the pool fewer blocks than replicas: nothing to warn about.
            warnings.filterwarnings("ignore", message=".*minimum number of concurrent actors")
            yield
    finally:
        for name, value in kept.items():
            setattr(context, name, value)
        context.execution_options.preserve_order = kept_order
        ray_data_log.setLevel(kept_level)
        for handler in terminals:
            handler.removeFilter(_below_error)


def _is_terminal(handler: logging.Handler) -> bool:
    return getattr(handler, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)


def _below_error(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR


def _write(batches, args, files: VectorFiles | None) -> int:
    """Write the predictions as they arrive; returns how many."""
    if files is None:
        lines = (line for batch in batches for line in batch.column("json").to_pylist())
        return write_lines(args.output_file, lines, args.overwrite_output)
    with files:
        for batch in batches:
            column = batch.column("embedding").combine_chunks()
            matrix = column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), -1)
            files.add(batch.column("id").to_pylist(), matrix, batch.column("normalized")[0].as_py())
    return files.rows


def _run(task, args, vectors: bool, ids: bool, what: str) -> dict:
    if getattr(args, "question", None) is not None:  # qa's one question
        raise UserError("--question answers one question in this process; --engine ray predicts a file")
    args.check()
    files = VectorFiles(args.output_file, args.model_dir, args.overwrite_output) if vectors else None
    settings = task.input_settings(args)
    inputs = plan_inputs(task, args)
    with ray_session(args) as (ray, local), _ordered_quiet_run(ray, args):
        _check_resources(ray, args, local)
        logger.info(
            "Ray: %d replicas (%g CPU, %g GPU each), %d rows per call, over %s",
            args.ray_workers,
            args.ray_cpus_per_worker,
            args.ray_gpus_per_worker,
            args.ray_batch_size,
            f"{len(inputs.files)} streamed files" if inputs.files else f"{args.input_file} (read whole)",
        )
        try:
            dataset = _dataset(ray, task, args, settings, inputs, ids)
            count = _write(_predictions(ray, task, args, dataset, vectors), args, files)
        except Exception as exc:  # a task's UserError comes back wrapped in Ray's error
            raise _as_user_error(exc) from None
    logger.info("wrote %d %s to %s", count, what, args.output_file)
    return {"predictions": count, "files": max(len(inputs.files), 1)}


def predict(task, args) -> dict:
    """``<task> predict --engine ray``: the records ``predict`` writes, by a pool of replicas."""
    return _run(task, args, vectors=False, ids=False, what="predictions")


#: ``encode``'s own flags the engine reads (the rest of its flags are ``predict``'s).
ENCODE_FLAGS = ("text_column", "id_column")


def encode(task, args) -> dict:
    """``embedding encode --engine ray``: ``.jsonl`` records or ``.npy`` + ``.ids.json``, as ``encode`` writes them."""
    known = {f.name for f in dataclasses.fields(task.PredictArguments)} | set(ENCODE_FLAGS)
    other = sorted(name for name in given_fields(args) if name not in known)
    if other:  # a flag of encode's own the replicas would not apply: refused, never ignored
        raise UserError(
            f"--{other[0]} is not supported with --engine ray; drop it, or run without --engine ray"
        )
    vectors = Path(args.output_file).suffix.lower() == ".npy"
    return _run(task, args, vectors=vectors, ids=True, what="embeddings")

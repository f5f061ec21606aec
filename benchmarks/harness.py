"""What every benchmark script shares: the machine, one timing rule, finished results kept.

Every script is a module of the ``benchmarks`` package, run from the repository root::

    python -m benchmarks.bench_all --size quick --tasks classification --seeds 1

- :func:`describe`: the machine and software a result file was measured on (CPU model and
  its vector and matrix flags, cores, threads, versions, GPU); :func:`benchmarks.common.save_results`
  writes it into every result file as ``environment``.
- :func:`timed`: one warm-up call, then the median of ``repeats`` timed calls.
- :func:`cached`: a finished result as a JSON file named by its row (or step); a re-run reads
  it instead of measuring again, so an interrupted benchmark resumes where it stopped.
- :func:`module_command`: the command line that runs a script of this package in a fresh
  process (scripts start their own workers and servers); run it with ``cwd=REPO``.
  :func:`invocation`: how this run was started, as a result file records it.

The toolkit side of a suite contender (train, then score the test split) is
:func:`benchmarks.suite.toolkit_run.toolkit_contender`.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: CPU flags worth recording beside a speed: the vector and matrix units torch's kernels use
#: (x86: AVX2, AVX-512 incl. BF16/VNNI, AMX; Arm: SVE, ASIMD, BF16, I8MM).
CPU_FLAG_PREFIXES = ("avx", "amx", "fma", "f16c", "sve", "asimd", "bf16", "i8mm")


def cpu_info(cpuinfo: str | None = None) -> dict:
    """``{"model", "flags"}`` of this CPU from ``/proc/cpuinfo`` (its text may be given).

    ``flags`` keeps only :data:`CPU_FLAG_PREFIXES`, sorted. Where there is no ``/proc/cpuinfo``
    (not Linux), the model is ``platform.processor()`` and the flags are empty.

    Example:
        >>> cpu_info("model name : Xeon\\nflags : fpu sse avx2 avx512_bf16 amx_tile\\n")
        {'model': 'Xeon', 'flags': ['amx_tile', 'avx2', 'avx512_bf16']}
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())  # the first core stands for all
    flags = (fields.get("flags") or fields.get("features") or "").split()
    model = fields.get("model name") or fields.get("cpu model") or platform.processor() or platform.machine()
    return {"model": model, "flags": sorted({f for f in flags if f.startswith(CPU_FLAG_PREFIXES)})}


def describe() -> dict:
    """The machine and software a measurement depends on (a result file's ``environment``).

    Python, torch and transformers versions; torch's threads and ``OMP_WAIT_POLICY``; the CPU
    (``cpu``: the platform's short name, as older result files hold it; ``cpu_model`` and
    ``cpu_flags`` from :func:`cpu_info`), its cores and the cores this process may use; the GPU
    (``cuda``: its name, or None).
    """
    import torch
    import transformers

    from encoder_tasks.runtimes.base import usable_cores

    cpu = cpu_info()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu["model"],
        "cpu_flags": cpu["flags"],
        "cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def timed(function: Callable[[], object], repeats: int) -> tuple[float, list[float], object]:
    """One warm-up call (its output kept), then ``repeats`` timed ones: ``(median, all, output)``.

    Example:
        >>> median, seconds, output = timed(lambda: 42, 3)
        >>> len(seconds), output, median >= 0
        (3, 42, True)
    """
    output = function()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), seconds, output


def cached(
    path: Path,
    compute: Callable[[], object] | None = None,
    *,
    redo: bool = False,
    keep: Callable[[object], bool] | None = None,
):
    """A finished result kept as the JSON file ``path`` (one file per row or step).

    Returns what ``path`` holds, unless it is missing, ``redo`` is set, or ``keep`` (when
    given) refuses it (e.g. a failed run); then ``compute()``'s value, written to ``path``
    first. Without ``compute``, what ``path`` holds or None. The file is written to a scratch
    name and renamed, so a run stopped mid-write never leaves a half file that reads as done,
    and processes sharing a folder each write whole files.

    Example:
        >>> folder = Path(tempfile.mkdtemp())
        >>> cached(folder / "row.json", lambda: {"score": 1}), cached(folder / "row.json", lambda: 2)
        ({'score': 1}, {'score': 1})
        >>> cached(folder / "row.json", lambda: {"score": 3}, keep=lambda row: row["score"] > 1)
        {'score': 3}
    """
    path = Path(path)
    if path.is_file() and not redo:
        found = json.loads(path.read_text(encoding="utf-8"))
        if keep is None or keep(found):
            return found
    if compute is None:
        return None
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(json.dumps(value, indent=2, default=str, ensure_ascii=False))
    os.replace(scratch, path)
    return json.loads(path.read_text(encoding="utf-8"))


def module_command(module: str, *args: str) -> list[str]:
    """``python -m benchmarks.<module> ARGS`` with this interpreter (run it with ``cwd=REPO``).

    Example:
        >>> module_command("bench_all", "--size", "quick")[1:]
        ['-m', 'benchmarks.bench_all', '--size', 'quick']
    """
    return [sys.executable, "-m", f"benchmarks.{module}", *args]


def invocation(module: str, argv: list[str] | None = None) -> str:
    """``python -m benchmarks.<module> ARGS``: this run's command as a result file records it
    (``argv``: the arguments, default ``sys.argv[1:]``), one that reruns it from the repository root.

    Example:
        >>> invocation("bench_quantize", ["--size", "quick", "--work", "/tmp/q x"])
        "python -m benchmarks.bench_quantize --size quick --work '/tmp/q x'"
    """
    return shlex.join(["python", "-m", f"benchmarks.{module}", *(sys.argv[1:] if argv is None else argv)])

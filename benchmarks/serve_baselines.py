"""The servers ``benchmarks/bench_serve.py`` loads: the two baselines, and starting any contender.

Both baselines answer the toolkit server's task-native route with the same JSON
(``POST /v1/models/{name}/predict``, ``{"inputs": [{"text": ...}]}`` -> ``{"predictions": [...]}``)
on the same HTTP stack (FastAPI + uvicorn, one process, access log off), and run **one forward
per request**, with no batching across requests:

- ``naive``: the toolkit's own :class:`encoder_tasks.inference.Predictor` (same loading, same
  precision, same tokenisation and windows as ``predict``), called for the request's inputs only;
- ``pipeline``: ``transformers.pipeline("text-classification")`` on the run's stock export
  (``encoder-tasks export RUN DEST --format transformers``), called once per request with
  ``batch_size`` = the request's input count, the model loaded in the benchmark's precision.

Forwards run one at a time (``--forwards serial``, the default): on a CPU, torch already spreads
one forward over every core, so concurrent forwards only oversubscribe them; this is a plain
server's best configuration. ``--forwards threadpool`` runs the handler as FastAPI runs any
plain ``def`` route, in its thread pool, so forwards overlap (the extra ``naive-threadpool`` row).

    python -m benchmarks.serve_baselines naive sst2=RUN_DIR --port 8101 --precision bf16
    python -m benchmarks.serve_baselines pipeline sst2=EXPORT_DIR --port 8102 --precision bf16 --max_length 512

``GET /ready`` answers 200 once the model is loaded and has run one forward (before then
nothing listens); ``GET /health`` likewise. :class:`ServerProcess` starts any contender's
command, the toolkit's ``encoder-tasks serve`` included, and waits for ``/ready``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# At module level: the route's annotations are strings (postponed), which FastAPI resolves here.
from fastapi import Request

from benchmarks.harness import REPO, module_command

if __name__ == "__main__":  # as a server: the toolkit's runtime defaults before torch loads, as its CLI
    from encoder_tasks.runtime import configure_cpu_runtime

    configure_cpu_runtime()

KINDS = ("naive", "pipeline")
#: ``encoder-tasks`` where its console script is not beside the interpreter.
CLI = "import sys; from encoder_tasks.cli import main; sys.exit(main())"
FORWARDS = ("serial", "threadpool")


# ---- the apps ----------------------------------------------------------------------------------
class BadInput(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def pipeline_parse(records) -> list[dict]:
    """The same checks the toolkit makes for a classification input: a list of ``{"text": str}``."""
    if not isinstance(records, list) or not records:
        raise BadInput("inputs", f"expected a non-empty list of input objects, found {records!r:.80}")
    for i, record in enumerate(records):
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise BadInput(f"inputs[{i}].text", f"expected a string, found {record!r:.80}")
    return records


def load_naive(model_dir: str, precision: str):
    """``(parse, forward)`` over the toolkit's Predictor: exactly what ``predict`` runs."""
    from encoder_tasks.inference import Predictor
    from encoder_tasks.inputs import InputError

    predictor = Predictor.load(model_dir, precision=precision)

    def parse(records):
        try:
            return predictor.parse(records)
        except InputError as error:
            raise BadInput(error.field, str(error)) from None

    return parse, predictor.predict


def load_pipeline(model_dir: str, precision: str, max_length: int):
    """``(parse, forward)`` over ``transformers.pipeline`` on a stock export, in ``precision``
    (bf16: the model loaded in bf16, the faster of the pipeline's two bf16 ways in
    ``benchmarks/bench_predict.py``)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    from encoder_tasks.predict import inference_device

    remote = "auto_map" in json.loads((Path(model_dir) / "config.json").read_text())
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, dtype=dtype, trust_remote_code=remote
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    pipe = pipeline("text-classification", model=model, tokenizer=tokenizer, device=inference_device())

    def forward(records):
        texts = [r["text"] for r in records]
        found = pipe(texts, batch_size=len(texts), truncation=True, max_length=max_length)
        return [{"text": t, "label": p["label"], "score": p["score"]} for t, p in zip(texts, found)]

    return pipeline_parse, forward


def build_app(name: str, parse, forward, forwards: str = "serial"):
    """A FastAPI app with the task-native route over ``parse`` and ``forward`` (one call per request)."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    app = FastAPI(title=f"bench_serve baseline ({forwards} forwards)")
    single = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forward")

    def error(status: int, message: str, field: str | None = None):
        body = {
            "error": {"message": message, "type": "invalid_request_error", "param": field, "code": status}
        }
        return JSONResponse(body, status_code=status)

    @app.get("/health")
    @app.get("/ready")
    async def ready():
        return {"status": "ok"}

    @app.post("/v1/models/{model}/predict")
    async def predict(model: str, request: Request):
        if model != name:
            return error(404, f"model: no model named {model!r}; served: {name}", "model")
        try:
            body = await request.json()
        except ValueError as exc:
            return error(400, f"body: expected JSON, found invalid JSON ({exc})")
        try:
            inputs = parse(body.get("inputs") if isinstance(body, dict) else body)
        except BadInput as exc:
            return error(422, str(exc), exc.field)
        if forwards == "serial":  # one forward at a time, in arrival order
            predictions = await asyncio.get_running_loop().run_in_executor(single, forward, inputs)
        else:  # what FastAPI does with a plain `def` route: its thread pool, forwards overlapping
            predictions = await run_in_threadpool(forward, inputs)
        return {"predictions": predictions}

    return app


def serve(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("model", help="NAME=MODEL_DIR (a run directory; a transformers export for pipeline)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--precision", choices=("fp32", "bf16"), required=True)
    parser.add_argument("--forwards", choices=FORWARDS, default="serial")
    parser.add_argument(
        "--max_length", type=int, default=512, help="pipeline: tokens per text before truncation"
    )
    args = parser.parse_args(argv)
    name, _, model_dir = args.model.partition("=")
    if args.kind == "naive":
        parse, forward = load_naive(model_dir, args.precision)
    else:
        parse, forward = load_pipeline(model_dir, args.precision, args.max_length)
    forward(parse([{"text": "A warm-up sentence, so the first request does not pay for it."}]))
    import uvicorn

    app = build_app(name, parse, forward, args.forwards)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


# ---- starting a contender ------------------------------------------------------------------------
def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def baseline_command(
    kind: str, name: str, model_dir: Path, port: int, precision: str, **options
) -> list[str]:
    """The command line of a baseline server (this module run from the repository root:
    :class:`ServerProcess` starts it there)."""
    command = module_command("serve_baselines", kind, f"{name}={model_dir}", "--port", str(port))
    command += ["--precision", precision]
    for key, value in options.items():
        command += [f"--{key}", str(value)]
    return command


def toolkit_command(name: str, run_dir: Path, port: int, precision: str, *flags: str) -> list[str]:
    """``encoder-tasks serve NAME=RUN_DIR --host 127.0.0.1 --port PORT --precision P [flags]``."""
    script = Path(sys.executable).parent / "encoder-tasks"
    start = [str(script)] if script.exists() else [sys.executable, "-c", CLI]
    return [
        *start,
        "serve",
        f"{name}={run_dir}",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--precision",
        precision,
        *flags,
    ]


class ServerProcess:
    """A contender's server in its own process, ready when ``with`` enters; stopped (SIGTERM, then
    SIGKILL after ``stop_timeout`` s) when it leaves. Output goes to ``log``."""

    def __init__(
        self,
        command: list[str],
        port: int,
        log: Path,
        env: dict | None = None,
        start_timeout: float = 600.0,
        stop_timeout: float = 30.0,
    ):
        self.command, self.port, self.log, self.env = command, port, log, env
        self.start_timeout, self.stop_timeout = start_timeout, stop_timeout
        self.process: subprocess.Popen | None = None
        self.peak_rss_mib: float | None = None
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> ServerProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log.open("w")
        # From the repository root, where ``python -m benchmarks.<module>`` finds the package.
        self.process = subprocess.Popen(
            self.command, stdout=self._log, stderr=subprocess.STDOUT, env=self.env, cwd=REPO
        )
        try:
            self._wait_ready()
        except BaseException:  # not ready, or interrupted while waiting: no server left behind
            self._stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log.read_text()[-2000:]
                raise RuntimeError(
                    f"server exited with {self.process.returncode}: {' '.join(self.command)}\n{tail}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"server not ready after {self.start_timeout:.0f}s: {' '.join(self.command)}")

    def __exit__(self, *exc) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.process is None:
            return
        self.peak_rss_mib = self.peak_rss_mib or _peak_rss_mib(self.process.pid)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        self.process = None


def _peak_rss_mib(pid: int) -> float | None:
    """The process's peak resident memory (Linux ``VmHWM``), or None where it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    serve()

"""Helpers for server tests: the real app under uvicorn on 127.0.0.1, in a thread or a process.

Example (in a test that has the ``task_runs`` fixture):
    >>> with live_server({"ner": task_runs["ner"].model_dir}) as url:  # doctest: +SKIP
    ...     httpx.post(f"{url}/v1/models/ner/predict", json={"inputs": [{"text": "john lives"}]})
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.helpers import REPO, free_port, subprocess_env

#: Seconds a test waits for every model to load and warm up (tiny models: a few seconds).
READY_TIMEOUT = 120.0


def wait_ready(
    url: str, timeout: float = READY_TIMEOUT, process: subprocess.Popen | None = None, key: str | None = None
) -> None:
    """Poll ``GET /ready`` (with the API ``key``, if any) until 200; fail with the last answer (or
    the process's exit) otherwise."""
    headers = {"Authorization": f"Bearer {key}"} if key else None
    deadline, last = time.monotonic() + timeout, "no answer"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode} before it was ready")
        try:
            answer = httpx.get(f"{url}/ready", timeout=5, headers=headers)
            if answer.status_code == 200:
                return
            last = answer.text
            if answer.json().get("status") == "failed":
                raise AssertionError(f"a model failed to load: {last}")
        except httpx.TransportError as error:
            last = repr(error)
        time.sleep(0.05)
    raise AssertionError(f"the server was not ready within {timeout} s: {last}")


class ServerURL(str):
    """The base URL of a live server (a ``str``), with its FastAPI ``app`` for tests that look inside."""

    app: Any


@contextlib.contextmanager
def live_server(models: dict[str, str | Path], ready: bool = True, **options) -> Iterator[ServerURL]:
    """Serve ``models`` (name -> run dir) with :class:`ServeOptions` ``options`` on 127.0.0.1 at a
    free port, in a background thread; yields the base URL (``http://127.0.0.1:PORT``, with
    ``.app``) once ``/ready`` answers 200 (with ``ready=False``: once it listens), and shuts down
    cleanly."""
    import uvicorn

    from encoder_tasks.serving.app import ServeOptions, create_app
    from encoder_tasks.serving.protocol import uvicorn_config

    options.setdefault("port", 0)
    serve_options = ServeOptions(host="127.0.0.1", **options)
    app = create_app(models, serve_options)
    config = uvicorn_config(app, serve_options, "warning", host="127.0.0.1", port=serve_options.port)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="live-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise AssertionError("the server did not start listening")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]  # the free port uvicorn bound for port 0
    url = ServerURL(f"http://127.0.0.1:{port}")
    url.app = app
    try:
        if ready:
            wait_ready(url, key=serve_options.api_key)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        assert not thread.is_alive(), "the server did not shut down within 60 s"


def serve_process(args: list[str], **env: str) -> tuple[subprocess.Popen, str]:
    """``python -m encoder_tasks.cli serve ARGS --port FREE`` in a subprocess (stdout and stderr
    piped); returns the process and its base URL (not waited for: see :func:`wait_ready`)."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "encoder_tasks.cli",
            "serve",
            *args,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=REPO,
        env=subprocess_env(ENCODER_TASKS_DISABLE_TQDM="1", **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, f"http://127.0.0.1:{port}"


def stop_process(process: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
    """Stop a server process we started (SIGTERM, then SIGKILL); returns its stdout and stderr."""
    if process.poll() is None:
        process.terminate()
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()


__all__ = ["READY_TIMEOUT", "ServerURL", "live_server", "serve_process", "stop_process", "wait_ready"]

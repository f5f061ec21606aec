"""``encoder-tasks serve RUN_DIR [NAME=RUN_DIR ...]``: serve saved models over HTTP (docs/serving.md).

    encoder-tasks serve runs/sst2                                   # http://127.0.0.1:8080
    encoder-tasks serve sst2=runs/sst2 ner=runs/conll --port 9000   # two models, named
    encoder-tasks serve runs/sst2 --host 0.0.0.0                    # reachable from outside (container)

Each model is served under its name (the directory's name unless ``NAME=`` gives one). Every
folder is checked before the server starts; a bad one is a one-line error. Models load in the
background: ``GET /health`` answers at once, ``GET /ready`` once every model is warmed up. SIGTERM
(or Ctrl-C) stops listening, answers the requests in flight (up to ``--drain_timeout``) and exits 0.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import socket
import sys
from pathlib import Path

from ..errors import UserError
from ..runtimes import CHOICES

logger = logging.getLogger(__name__)

#: A model name is a URL path segment (``/v1/models/{name}/predict``).
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
LOG_LEVELS = ("debug", "info", "warning", "error")


def model_names(specs: list[str]) -> dict[str, str]:
    """``["runs/sst2", "ner=runs/conll"]`` -> ``{"sst2": "runs/sst2", "ner": "runs/conll"}``;
    bad or repeated names refused.

    Example:
        >>> model_names(["runs/sst2", "ner=runs/conll"])
        {'sst2': 'runs/sst2', 'ner': 'runs/conll'}
        >>> model_names(["a/run", "b/run"])
        Traceback (most recent call last):
        ...
        encoder_tasks.errors.UserError: serve: two models named 'run' (a/run and b/run); name them: NAME=RUN_DIR
    """
    models: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or "/" in name or os.sep in name:  # a path (``./a=b`` for one with "=")
            name, path = _default_name(spec), spec
        if not path:
            raise UserError(f"serve: expected NAME=RUN_DIR, found {spec!r} (no RUN_DIR)")
        if not NAME.match(name):
            raise UserError(
                f"serve: model name {name!r} (from {spec!r}): expected letters, digits, '.', '_' or '-'; "
                "name it: NAME=RUN_DIR"
            )
        if name in models:
            raise UserError(
                f"serve: two models named {name!r} ({models[name]} and {path}); name them: NAME=RUN_DIR"
            )
        models[name] = path
    return models


def _default_name(path: str) -> str:
    name = Path(path).name
    return Path(path).resolve().name if name in ("", ".", "..") else name


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a port in use is a one-line error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not left 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    # connections of a socket whose protocol says TCP. With it on, a small answer waited for the
    # client's delayed ACK: +40 ms on every request (measured: p50 60 ms against 17 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise UserError(f"serve: cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.set_inheritable(True)
    return sock


#: Flags without a default whose value is a number.
NUMBER_FLAGS = {"max_queue_wait_ms": float, "model_threads": int}


def main(argv: list[str]) -> int:
    """``encoder-tasks serve RUN_DIR [NAME=RUN_DIR ...] [--host H] [--port P] [...]``."""
    from ..config import ArgumentParser
    from .app import ServeOptions
    from .protocol import HTTP_PROTOCOLS

    defaults = ServeOptions()
    parser = ArgumentParser(
        prog="encoder-tasks serve", description="Serve saved models over HTTP (docs/serving.md)."
    )
    parser.add_argument(
        "models", nargs="+", metavar="RUN_DIR", help="RUN_DIR or NAME=RUN_DIR, one per model."
    )
    helps = {
        "host": "Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface).",
        "port": "Port to listen on.",
        "max_batch_tokens": "Token budget of one model batch: concurrent requests merge up to it.",
        "max_wait_ms": "Longest a request waits for others to batch with, while the model is under load.",
        "batch_size": "Inputs per forward pass inside a batch (predict's --batch_size).",
        "model_workers": "Batches in flight per model at once, the cores shared between them (1: one "
        "batch at a time on every core).",
        "model_threads": "Intra-op threads each model worker computes a batch on. Unset: the cores "
        "shared between --model_workers (every core for one).",
        "max_inputs_per_request": "Most inputs one request may hold (more: 413; OpenAI's limit).",
        "max_chars_per_input": "Most characters one text of an input may hold (more: 413).",
        "max_body_bytes": "Most bytes a request body may hold, chunked bodies too (more: 413 as it arrives).",
        "max_request_tokens": "Most tokens one request may compute, every window of a long text counted "
        "(more: 413).",
        "max_top_k": "Highest top_k (candidates per answer) a request may ask for (more: 400).",
        "max_queue": "Most requests waiting per model; one more is refused at once with 429 and Retry-After.",
        "max_queue_wait_ms": "Longest the work ahead of a new request may take (the running batch's rest "
        "and the queued tokens, at the measured speed); more is refused at once with 429. Unset: "
        "--request_timeout. Lower keeps admitted requests near their unloaded latency under overload.",
        "request_timeout": "Seconds a request may wait for its answer (then 503).",
        "precision": "auto, fp32 or bf16, as predict's --precision.",
        "drain_timeout": "Seconds SIGTERM waits for requests in flight before exiting.",
        "header_timeout": "Seconds a client may take to send a request's headers (then the connection closes).",
        "body_timeout": "Seconds a client may take to send a request's body (then 408).",
        "keep_alive_timeout": "Seconds an idle keep-alive connection stays open.",
        "max_connections": "Most connections (and requests) at once; more get 503 at once.",
        "api_key": "Key every request but GET /health must send (Authorization: Bearer KEY or X-API-Key); "
        "else ENCODER_TASKS_API_KEY, else none (prefer the variable: a flag shows in `ps`).",
        "cors_origins": "Comma-separated origins a browser may call from (CORS); none by default.",
        "docs": "on: /docs (one page, no CDN) and /openapi.json; off: neither.",
        "backend": "Where the encoder runs: torch, onnx, openvino or auto, as predict's --backend.",
        "http": "HTTP parser: auto (httptools where installed, else h11), httptools or h11.",
    }
    choices = {
        "precision": ("auto", "fp32", "bf16"),
        "docs": ("on", "off"),
        "backend": CHOICES,
        "http": HTTP_PROTOCOLS,
    }
    for option in dataclasses.fields(ServeOptions):
        default = getattr(defaults, option.name)
        kwargs = {"choices": choices[option.name]} if option.name in choices else {}
        parser.add_argument(
            f"--{option.name}",
            type=NUMBER_FLAGS.get(option.name, str) if default is None else type(default),
            default=default,
            help=f"{helps[option.name]} (default {default})",
            **kwargs,
        )
    parser.add_argument(
        "--log_level", default="info", choices=LOG_LEVELS, help="Server log level (default info)."
    )
    args = parser.parse_args(argv)
    options = ServeOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServeOptions)})
    return serve(model_names(args.models), options, args.log_level)


def serve(models: dict[str, str], options, log_level: str = "info") -> int:
    """Check ``models``, listen, serve until SIGTERM or Ctrl-C, drain, return 0."""
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as error:
        raise UserError(
            f"serve needs the serve extra ({error.name} is missing): pip install 'encoder-tasks[serve]'"
        ) from None
    from ..log import configure_logging
    from .app import create_app
    from .protocol import uvicorn_config

    os.environ["ENCODER_TASKS_DISABLE_TQDM"] = "1"  # a server's log is no terminal
    configure_logging(getattr(logging, log_level.upper()))
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass
    app = create_app(models, options)  # a folder that is no model fails here, before listening
    sock = _listen(options.host, options.port)
    config = uvicorn_config(app, options, log_level)
    server = _draining_server(uvicorn, config, app)
    failed: list[bool] = []

    def stop_on_failure() -> None:  # a model that cannot load: stop, exit 1 (an orchestrator restarts)
        failed.append(True)
        server.should_exit = True

    app.state.on_load_failure = stop_on_failure
    host, port = sock.getsockname()[:2]
    logger.info("serve: listening on http://%s:%s (%s; API docs at /docs)", host, port, ", ".join(models))
    # uvicorn re-raises the signal that stopped it once it has drained; a handler of ours makes that
    # a no-op, so a drained server exits 0 instead of dying of the signal.
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    code = 1 if failed else 0
    if failed:
        logger.error("serve: a model failed to load (see above); exiting 1")
    _exit_if_threads_busy(app, code)
    return code


def _exit_if_threads_busy(app, code: int) -> None:
    """A model thread still inside torch when the interpreter exits aborts the process
    ("terminate called without an active exception", status 134): exit at once instead."""
    threads = [m.batcher.alive for m in app.state.served.values() if m.batcher is not None]
    loader = getattr(app.state, "loader", None)
    if any(threads) or (loader is not None and loader.is_alive()):
        logger.warning("serve: a model thread is still busy; exiting without waiting for it")
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _ignore(signum, frame) -> None:
    pass


def _draining_server(uvicorn, config, app):
    """uvicorn's server, saying what a stop signal leaves to answer."""

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig, frame):
            if not self.should_exit:
                logger.info(
                    "serve: %s received; draining %d request(s) in flight (up to --drain_timeout %g s)",
                    signal.Signals(sig).name,
                    int(app.state.metrics.in_flight.value()),
                    app.state.options.drain_timeout,
                )
                app.state.begin_drain()  # at --drain_timeout, what still waits is answered 503
            super().handle_exit(sig, frame)

    return DrainingServer(config)

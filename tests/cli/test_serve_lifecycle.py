"""Start and stop (issue 26, reproductions 8 and 9): a damaged run directory is refused before the
server listens, with a one-line reason; a model that fails to load makes the process exit 1; a
stop signal past ``--drain_timeout`` answers what still waits with JSON 503 and exits 0."""

import json
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from encoder_tasks.errors import UserError
from encoder_tasks.serving.app import ServeOptions, create_app
from encoder_tasks.serving.metrics import parse_metrics
from tests.serving import serve_process, stop_process, wait_ready


def _in_flight(url) -> float:
    values = parse_metrics(httpx.get(f"{url}/metrics", timeout=30).text)
    return values[("encoder_tasks_requests_in_flight", ())] - 1  # less this very request


def _copy(task_runs, task, tmp_path):
    run = tmp_path / task
    shutil.copytree(task_runs[task].model_dir, run)
    return run


def _truncate(run):
    weights = run / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _other_config(run):
    config = json.loads((run / "config.json").read_text())
    config["hidden_size"] *= 2
    (run / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_truncate, "model.safetensors: expected"),
        (lambda run: (run / "model.safetensors").write_bytes(b""), "the weights file is empty or truncated"),
        (lambda run: (run / "model.safetensors").unlink(), "no model.safetensors (the weights)"),
        (_other_config, "config.json belongs to another model"),
        (lambda run: (run / "config.json").write_text("{"), "config.json: expected JSON"),
        (lambda run: (run / "tokenizer.json").unlink(), "no tokenizer files"),
        (lambda run: (run / "encoder_tasks.json").unlink(), "looks like a task run"),
    ],
)
def test_a_damaged_run_directory_is_refused_before_listening(task_runs, tmp_path, damage, message):
    run = _copy(task_runs, "classification", tmp_path)
    damage(run)
    with pytest.raises(UserError) as caught:
        create_app({"sst2": run}, ServeOptions())
    assert message in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_embedding_folder_without_encoder_tasks_json_is_still_served(task_runs, tmp_path):
    run = _copy(task_runs, "embedding", tmp_path)
    (run / "encoder_tasks.json").unlink()  # a sentence-transformers folder: its layout says embedding
    app = create_app({"emb": run}, ServeOptions())
    assert app.state.served["emb"].task == "embedding"


def test_the_command_refuses_a_damaged_run_with_one_line_and_exits_non_zero(task_runs, tmp_path):
    run = _copy(task_runs, "classification", tmp_path)
    _truncate(run)
    process, _ = serve_process([str(run)])
    out, err = process.communicate(timeout=120)
    assert process.returncode != 0
    assert "model.safetensors: expected" in err + out and "Traceback" not in err


def test_a_model_that_fails_to_load_makes_the_process_exit_1(task_runs, tmp_path):
    run = _copy(task_runs, "classification", tmp_path)
    config = json.loads((run / "config.json").read_text())
    config["intermediate_size"] *= 2  # headers look right; the weights do not fit the layers
    (run / "config.json").write_text(json.dumps(config))
    process, _ = serve_process([str(run)])
    try:
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            stop_process(process)
    assert process.returncode == 1, (out, err)
    assert "failed to load" in out + err and "exiting 1" in out + err


def test_sigterm_past_the_drain_timeout_answers_json_503_and_exits_0(task_runs):
    process, url = serve_process(
        # All 16 requests must be queued when SIGTERM comes: --max_queue_wait_ms at 10 minutes, since
        # at its default (--request_timeout, 30 s) a busy CI machine's estimate shed the last ones.
        [
            f"sst2={task_runs['classification'].model_dir}",
            "--drain_timeout",
            "1",
            "--batch_size",
            "1",
            "--max_queue_wait_ms",
            "600000",
        ]
    )
    heavy = {"inputs": [{"text": f"a fine film and a long review number {i}"} for i in range(256)]}
    try:
        wait_ready(url, process=process)
        go = threading.Barrier(17)

        def send():
            go.wait(timeout=30)
            return httpx.post(f"{url}/v1/models/sst2/predict", json=heavy, timeout=120)

        with ThreadPoolExecutor(16) as pool:
            answers = [pool.submit(send) for _ in range(16)]
            go.wait(timeout=30)
            deadline = time.monotonic() + 60  # every request received: most wait behind the first
            while _in_flight(url) < 16 and time.monotonic() < deadline:
                time.sleep(0.01)
            process.send_signal(signal.SIGTERM)
            results = []
            for answer in answers:
                try:
                    results.append(answer.result(timeout=120))
                except httpx.TransportError as error:
                    results.append(error)  # sent after the server stopped listening
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            stop_process(process)
    assert process.returncode == 0, err
    answered = [r for r in results if isinstance(r, httpx.Response)]
    assert {r.status_code for r in answered} <= {200, 503}, [r.text[:200] for r in answered]
    cut = [r for r in answered if r.status_code == 503]
    assert cut, ("no request was still waiting at --drain_timeout", results, out, err[-2000:])
    for r in cut:
        assert "--drain_timeout" in r.json()["error"]["message"]  # JSON, not uvicorn's plain text
    assert "were answered 503" in out + err, out + err
    assert "terminate called" not in err and "Traceback" not in err, err

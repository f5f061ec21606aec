"""bench_serve_profile's reading of py-spy samples: threads, stages, busy shares."""

from __future__ import annotations

import pytest

from benchmarks.bench_serve_profile import parse_raw, stage_shares, summarise, tables

RAW = """\
thread (11): MainThread;Runner.run (asyncio/runners.py:118);RequestResponseCycle.run_asgi (uvicorn/protocols/http/httptools_impl.py:409);ReadBody.__call__ (encoder_tasks/serving/body.py:230);Router.__call__ (starlette/routing.py:715);get_request_handler.<locals>.app (fastapi/routing.py:700);create_embeddings (encoder_tasks/serving/compat_openai.py:250);ServedModel.token_lengths (encoder_tasks/serving/models.py:291) 6
thread (11): MainThread;Runner.run (asyncio/runners.py:118);RequestResponseCycle.run_asgi (uvicorn/protocols/http/httptools_impl.py:409);ReadBody.__call__ (encoder_tasks/serving/body.py:230);Router.__call__ (starlette/routing.py:715);get_request_handler.<locals>.app (fastapi/routing.py:700);create_embeddings (encoder_tasks/serving/compat_openai.py:251) 2
thread (11): MainThread;Runner.run (asyncio/runners.py:118) 1
thread (11): MainThread;wait (asyncio/tasks.py:400) 1
thread (12): encoder-tasks-model-minilm;Batcher._work (encoder_tasks/serving/batcher.py:318);Predictor.predict (encoder_tasks/inference.py:90);EncoderRuntime.forward (encoder_tasks/runtimes/base.py:50);OpenVINOEncoder.run (encoder_tasks/runtimes/openvino.py:80) 15
thread (12): encoder-tasks-model-minilm;Batcher._work (encoder_tasks/serving/batcher.py:318);Predictor.predict (encoder_tasks/inference.py:90);PreTrainedTokenizerBase.__call__ (transformers/tokenization_utils_base.py:2500) 5
thread (13): tqdm_monitor;TMonitor.run (tqdm/_monitor.py:69) 1
"""


def test_samples_are_grouped_by_thread_without_their_ids():
    threads = parse_raw(RAW)
    assert {name: sum(c.values()) for name, c in threads.items()} == {
        "thread MainThread": 10,
        "thread encoder-tasks-model-minilm": 20,
        "thread tqdm_monitor": 1,
    }


def test_a_sample_counts_for_the_innermost_stage_its_stack_holds():
    threads = parse_raw(RAW)
    loop = stage_shares(threads["thread MainThread"], "event loop")
    assert loop["counting tokens (ServedModel.token_lengths)"] == pytest.approx(0.6)
    assert loop["the embeddings route's own code (create_embeddings)"] == pytest.approx(0.2)
    assert loop["the event loop itself (uvloop, in C: sockets, scheduling)"] == pytest.approx(0.1)
    assert loop["other"] == pytest.approx(0.1)  # a torn stack: no marker
    assert sum(loop.values()) == pytest.approx(1.0)
    model = stage_shares(threads["thread encoder-tasks-model-minilm"], "model")
    assert model["forward pass (EncoderRuntime.forward)"] == pytest.approx(0.75)
    assert model["tokenising (PreTrainedTokenizerBase.__call__)"] == pytest.approx(0.25)


def test_busy_share_is_samples_over_what_the_rate_could_take():
    summary = summarise(parse_raw(RAW), seconds=1.0, rate=40)
    assert summary["thread encoder-tasks-model-minilm"]["busy_share_of_a_core"] == 0.5
    assert summary["thread MainThread"]["busy_share_of_a_core"] == 0.25
    assert summary["thread tqdm_monitor"]["stages"] is None  # neither the loop nor a model thread
    assert summary["thread encoder-tasks-model-minilm"]["top_own_frames"][0] == [
        "OpenVINOEncoder.run (encoder_tasks/runtimes/openvino.py)",
        0.75,
    ]
    rows = tables(summary, {"without": 1.0, "under": 0.9})["serve-profile-stages"]["rows"]
    tokens = next(r for r in rows if r[1].startswith("counting tokens"))
    assert tokens == ["event loop", "counting tokens (ServedModel.token_lengths)", "60.0", "15.0"]

"""How many threads a served model computes on (``serve --model_threads``,
:func:`encoder_tasks.runtimes.share_between`): each runtime is set up with the threads asked for,
answers as before, and one caller with no thread count keeps the encoder as it is."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from encoder_tasks.errors import UserError
from encoder_tasks.runtimes import share_between
from encoder_tasks.testing import CORPUS

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")


@pytest.fixture(scope="module")
def bert(tiny_bert):
    from transformers import AutoModel, AutoTokenizer

    return AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(tiny_bert)


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


class Holder(torch.nn.Module):
    """A model with an ``encoder`` attribute, as every task's head has."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder


def runtime(kind: str, bert, folder):
    from encoder_tasks.runtimes import onnx, openvino

    encoder = bert[0]
    module = onnx if kind == "onnx" else openvino
    return module.load(module.export_encoder(encoder, folder), encoder.config)


def hidden(encoder, tokenizer) -> np.ndarray:
    batch = tokenizer(CORPUS[:3], padding=True, return_tensors="pt")
    return encoder(**batch).last_hidden_state.numpy()


def threads_of(encoder) -> int:
    if encoder.backend == "onnx":
        return encoder.session.get_session_options().intra_op_num_threads
    return int(encoder._compiled.get_property("INFERENCE_NUM_THREADS"))


@pytest.mark.parametrize("kind", ["onnx", "openvino"])
def test_one_caller_on_one_thread_answers_as_every_core_did(kind, bert, tmp_path):
    model = Holder(runtime(kind, bert, tmp_path))
    before = model.encoder
    wanted = hidden(before, bert[1])

    assert share_between(model, 1) == f"{kind}: 1 batch at a time"
    assert model.encoder is before  # nothing asked: nothing compiled again

    said = share_between(model, 1, threads=1)
    assert model.encoder is not before and threads_of(model.encoder) == 1
    assert said.startswith(f"{kind}: 1 batch at a time (")
    np.testing.assert_allclose(hidden(model.encoder, bert[1]), wanted, atol=1e-5, rtol=0)


def test_openvino_streams_get_the_threads_each(bert, tmp_path):
    model = Holder(runtime("openvino", bert, tmp_path))
    share_between(model, 2, threads=1)
    settings = model.encoder.settings
    assert (settings["streams"], settings["threads"], settings["hint"]) == (2, 2, "THROUGHPUT")
    assert threads_of(model.encoder) == 2  # both streams' threads together

    share_between(latency := Holder(runtime("openvino", bert, tmp_path / "b")), 1, threads=1)
    assert latency.encoder.settings["hint"] == "LATENCY" and "streams" not in latency.encoder.settings


def test_onnx_callers_get_the_cores_share_unless_told(bert, tmp_path):
    model = Holder(runtime("onnx", bert, tmp_path))
    share_between(model, 2, threads=3)
    assert threads_of(model.encoder) == 3


def test_the_cores_share_counts_the_cores_the_process_may_use(bert, tmp_path, torch_threads, monkeypatch):
    """A container pinned to 4 of a host's 16 cores: 2 callers get 2 threads each, on torch and
    ONNX Runtime alike, not 8."""
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    said = share_between(torch.nn.Linear(2, 2), 2)
    assert said == "torch: 2 batches at once, 2 intra-op threads each" and torch.get_num_threads() == 2
    model = Holder(runtime("onnx", bert, tmp_path))
    share_between(model, 2)
    assert threads_of(model.encoder) == 2


def test_torch_takes_the_thread_count_for_the_process(torch_threads):
    assert share_between(torch.nn.Linear(2, 2), 1, threads=1) == "torch: 1 batch at a time, 1 intra-op thread"
    assert torch.get_num_threads() == 1


def test_serve_refuses_a_thread_count_below_one():
    from encoder_tasks.serving.app import ServeOptions

    with pytest.raises(UserError, match="--model_threads must be at least 1, found 0"):
        ServeOptions(model_threads=0)

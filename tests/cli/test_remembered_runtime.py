"""A model ``--backend auto`` measured before opens on the runtime it chose, its torch encoder never
built (issue 27: a one-sentence predict spent most of its start-up importing transformers' model
code and building the encoder); new files, or a head that needs the encoder, load as usual."""

import json
import os

import pytest
import torch

from encoder_tasks import heads, runtimes
from encoder_tasks.inference import Predictor
from encoder_tasks.runtimes import EncoderRuntime
from tests.helpers import assert_close_records

pytest.importorskip("onnxruntime")

TOLERANCE = 1e-4  # the runtime's records against torch's (tests/cli/test_backends.py)


@pytest.fixture
def runtime_wins(tmp_path, monkeypatch, auto_backend):
    """A cache of this test's own, and probe timings in which ONNX Runtime is the fastest."""
    monkeypatch.setenv(runtimes.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(runtimes, "installed", lambda backend: backend in ("torch", "onnx"))
    monkeypatch.setattr(
        runtimes,
        "timed_rounds",
        lambda contenders, batches: {n: 0.5 if n == "onnx" else 1.0 for n in contenders},
    )
    monkeypatch.setattr(runtimes, "_busy", lambda: None)


def _without_torch_encoder(monkeypatch):
    def refuse(path):
        raise AssertionError("the torch encoder was built")

    monkeypatch.setattr(heads, "_encoder_from_config", refuse)


@pytest.mark.parametrize("task", ["classification", "pair", "ner", "qa"])
def test_a_second_load_runs_the_remembered_runtime_without_building_the_torch_encoder(
    task_runs, task, runtime_wins, monkeypatch
):
    run = task_runs[task]
    expected = Predictor.load(run.model_dir, backend="torch", precision="fp32")(run.records)
    first = Predictor.load(run.model_dir)  # auto measures, chooses onnx, notes the files
    assert first.args.backend == "onnx"
    _without_torch_encoder(monkeypatch)
    second = Predictor.load(run.model_dir)
    assert isinstance(second.model.encoder, EncoderRuntime) and second.args.backend == "onnx"
    assert second.args.precision == "fp32" and second.model.padding_free is False
    assert_close_records(second(run.records), expected, TOLERANCE)


def test_files_written_again_are_measured_again(task_runs, runtime_wins, monkeypatch):
    run = task_runs["classification"]
    Predictor.load(run.model_dir)
    weights = os.path.join(run.model_dir, "model.safetensors")
    stat = os.stat(weights)
    _without_torch_encoder(monkeypatch)
    try:
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # as a new save would
        with pytest.raises(AssertionError, match="the torch encoder was built"):
            Predictor.load(run.model_dir)
    finally:
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert Predictor.load(run.model_dir).args.backend == "onnx"  # the files as noted: remembered


def test_an_explicit_backend_or_a_choice_of_torch_builds_the_torch_encoder(
    task_runs, runtime_wins, monkeypatch
):
    run = task_runs["ner"]
    Predictor.load(run.model_dir)
    calls = []
    original = heads._encoder_from_config
    monkeypatch.setattr(heads, "_encoder_from_config", lambda path: calls.append(path) or original(path))
    Predictor.load(run.model_dir, backend="onnx")  # parity is checked on every explicit load
    Predictor.load(run.model_dir, precision="bf16")  # bf16 runs in torch
    assert len(calls) == 2


def test_a_head_tied_to_the_encoder_loads_as_usual_and_answers_the_same(task_runs, runtime_wins):
    run = task_runs["mlm"]  # its output layer shares the encoder's embeddings
    expected = Predictor.load(run.model_dir, backend="torch", precision="fp32", top_k=3)(run.records)
    Predictor.load(run.model_dir, top_k=3)
    again = Predictor.load(run.model_dir, top_k=3)
    assert again.args.backend == "onnx"
    assert_close_records(again(run.records), expected, TOLERANCE)


def test_where_torch_computes_in_bf16_openvino_is_checked_chosen_and_remembered_in_bf16(
    task_runs, tmp_path, monkeypatch, auto_backend
):
    pytest.importorskip("openvino")
    monkeypatch.setenv(runtimes.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(runtimes, "installed", lambda backend: backend in ("torch", "openvino"))
    monkeypatch.setattr(runtimes, "uses_bf16", lambda device, precision: precision == "auto")  # AMX
    monkeypatch.setattr(
        runtimes,
        "timed_rounds",
        lambda contenders, batches: {n: 0.5 if n.startswith("openvino") else 1.0 for n in contenders},
    )
    monkeypatch.setattr(runtimes, "_busy", lambda: None)
    # bf16 where the CPU computes it natively (AMX, AVX512-BF16); elsewhere f32, as before
    expected = "bf16" if runtimes.runtime_module("openvino").computes_bf16() else "fp32"
    run = task_runs["classification"]
    reference = Predictor.load(run.model_dir, backend="torch", precision="bf16")(run.records)
    first = Predictor.load(run.model_dir)
    assert first.args.backend == "openvino" and first.model.encoder.precision == expected
    (record,) = (tmp_path / "cache" / "auto").glob("*.json")
    assert json.loads(record.read_text())["compute"] == expected
    _without_torch_encoder(monkeypatch)
    second = Predictor.load(run.model_dir)
    assert isinstance(second.model.encoder, EncoderRuntime) and second.model.encoder.precision == expected
    assert_close_records(second(run.records), reference, 0.05)  # torch's own bf16 labels


def test_a_bf16_runtime_may_differ_from_fp32_by_twice_what_torch_bf16_does():
    from transformers import BertConfig

    from encoder_tasks.backbone import load_encoder
    from encoder_tasks.testing import make_tiny_model

    reference = load_encoder(make_tiny_model("bert")).eval()
    batches = runtimes.probe_batches(BertConfig(vocab_size=reference.config.vocab_size), batch_size=4)
    allowed = runtimes.bf16_allowance(reference, batches, "cpu")
    assert allowed > 0  # bf16 rounds

    class Shifted(torch.nn.Module):  # the encoder's hidden states, each moved by ``offset``
        def __init__(self, offset):
            super().__init__()
            self.offset = offset

        def forward(self, input_ids, attention_mask, token_type_ids=None, return_dict=True):
            out = reference(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            out.last_hidden_state = out.last_hidden_state + self.offset
            return out

    bound = runtimes.parity(reference, reference, batches, allowed=allowed)["allowed"]
    assert bound == max(allowed, runtimes.parity(reference, reference, batches)["allowed"])
    assert runtimes.parity(reference, Shifted(0.9 * bound), batches, allowed=allowed)["passed"]
    assert not runtimes.parity(reference, Shifted(1.1 * bound), batches, allowed=allowed)["passed"]

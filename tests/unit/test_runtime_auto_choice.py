"""``--backend auto``'s choice: the fastest backend that passed its check wins (no margin for torch),
and a choice timed on a busy machine is used once, not remembered."""

import json

import pytest
import torch
from torch import nn

from encoder_tasks import runtimes


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(2, 2)


def _choose(monkeypatch, tmp_path, seconds, busy=None):
    monkeypatch.setattr(runtimes, "timed_rounds", lambda contenders, batches: dict(seconds))
    monkeypatch.setattr(runtimes, "_busy", lambda: busy)
    swapped = []
    monkeypatch.setattr(runtimes, "swap_encoder", lambda model, runtime: swapped.append(runtime))
    model, candidate = Holder(), nn.Identity()
    checked = {"openvino": (candidate, {"passed": True, "max_abs_diff": 0.0, "allowed": 1e-3})}
    decision = tmp_path / "auto" / "choice.json"
    chosen = runtimes._choose(model, model.encoder, checked, [], "fp32", decision)
    return chosen, swapped == [candidate], decision


def test_a_runtime_a_little_faster_than_torch_is_chosen(monkeypatch, tmp_path):
    chosen, swapped, decision = _choose(monkeypatch, tmp_path, {"torch": 0.430, "openvino": 0.416})
    assert chosen == "openvino" and swapped
    record = json.loads(decision.read_text())
    assert record["backend"] == "openvino" and "the fastest" in record["reason"]


def test_torch_stays_when_it_is_the_fastest(monkeypatch, tmp_path):
    chosen, swapped, _ = _choose(monkeypatch, tmp_path, {"torch": 0.40, "openvino": 0.41})
    assert chosen == "torch" and not swapped


def test_a_choice_timed_on_a_busy_machine_is_not_remembered(monkeypatch, tmp_path, caplog):
    caplog.set_level("INFO", logger="encoder_tasks.runtimes")
    busy = "load average 9.0 on 2 cores"
    chosen, swapped, decision = _choose(monkeypatch, tmp_path, {"torch": 0.4, "openvino": 0.2}, busy)
    assert chosen == "openvino" and swapped  # used for this load
    assert not decision.exists()  # and not for the next ones
    assert "not remembered, the machine was busy while timing (load average 9.0 on 2 cores)" in caplog.text


@pytest.mark.real_load
def test_busy_compares_the_load_with_the_cores(monkeypatch):
    monkeypatch.setattr(runtimes.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(runtimes.os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    assert runtimes._busy() is None
    monkeypatch.setattr(runtimes.os, "getloadavg", lambda: (7.25, 1.0, 1.0))
    assert runtimes._busy() == "load average 7.2 on 2 cores"


def test_the_probes_hold_a_batch_of_sentence_length_inputs():
    from transformers import BertConfig

    shapes = [tuple(b["input_ids"].shape) for b in runtimes.probe_batches(BertConfig(), batch_size=64)]
    assert shapes == [(2, 7), (64, 16), (64, 48)]
    assert all(
        b["attention_mask"][0].all() for b in runtimes.probe_batches(BertConfig())
    )  # row 0: no padding
    assert torch.is_tensor(runtimes.probe_batches(BertConfig())[0]["token_type_ids"])


@pytest.mark.parametrize(
    "amx, precision, expected",
    [
        (True, "auto", [("onnx", "fp32"), ("openvino", "bf16")]),  # torch computes in bf16 too
        (False, "auto", [("onnx", "fp32"), ("openvino", "fp32"), ("openvino", "bf16")]),  # both timed
        (False, "fp32", [("onnx", "fp32"), ("openvino", "fp32")]),  # fp32 asked for: no bf16
    ],
)
def test_auto_tries_bf16_runtimes_both_ways_where_bf16_is_native_without_amx(
    monkeypatch, amx, precision, expected
):
    monkeypatch.setattr(runtimes, "computes_bf16", lambda backend: backend == "openvino")
    monkeypatch.setattr(runtimes, "uses_bf16", lambda device, p: amx and p == "auto")
    assert runtimes._auto_candidates(["onnx", "openvino"], "cpu", precision) == expected


@pytest.mark.parametrize("bf16_seconds, compute", [(0.5, "bf16"), (0.9, "fp32")])
def test_the_faster_of_a_runtimes_fp32_and_bf16_is_chosen_and_remembered(
    monkeypatch, tmp_path, bf16_seconds, compute
):
    seconds = {"torch": 1.0, "openvino": 0.8, "openvino bf16": bf16_seconds}
    monkeypatch.setattr(runtimes, "timed_rounds", lambda contenders, batches: dict(seconds))
    monkeypatch.setattr(runtimes, "_busy", lambda: None)
    swapped = []
    monkeypatch.setattr(runtimes, "swap_encoder", lambda model, runtime: swapped.append(runtime))
    passed = {"passed": True, "max_abs_diff": 0.0, "allowed": 1e-3}
    fp32, bf16 = nn.Identity(), nn.Identity()
    fp32.precision, bf16.precision = "fp32", "bf16"
    checked = {"openvino": (fp32, passed), "openvino bf16": (bf16, passed)}
    backend_of = {"openvino": "openvino", "openvino bf16": "openvino"}
    model, decision = Holder(), tmp_path / "auto" / "choice.json"
    chosen = runtimes._choose(model, model.encoder, checked, [], "auto", decision, backend_of)
    record = json.loads(decision.read_text())
    assert chosen == record["backend"] == "openvino" and record["compute"] == compute
    assert swapped == [bf16 if compute == "bf16" else fp32]


def _choose_among(monkeypatch, tmp_path, probe_seconds, lone_seconds):
    """``_choose`` over onnx and openvino with these probe and lone-input timings; returns the
    choice, the runtime swapped in, the record and the contenders each timing call saw."""
    calls = []

    def timed(contenders, batches):
        calls.append(sorted(contenders))
        return dict(probe_seconds if len(batches) == 3 else {n: lone_seconds[n] for n in contenders})

    monkeypatch.setattr(runtimes, "timed_rounds", timed)
    monkeypatch.setattr(runtimes, "_busy", lambda: None)
    swapped = []
    monkeypatch.setattr(runtimes, "swap_encoder", lambda model, runtime: swapped.append(runtime))
    passed = {"passed": True, "max_abs_diff": 0.0, "allowed": 1e-3}
    onnx, openvino = nn.Identity(), nn.Identity()
    checked = {"onnx": (onnx, passed), "openvino": (openvino, passed)}
    model, decision = Holder(), tmp_path / "auto" / "choice.json"
    probes = ["lone", "sentences", "longer"]
    chosen = runtimes._choose(model, model.encoder, checked, probes, "fp32", decision)
    runtime = {id(onnx): "onnx", id(openvino): "openvino"}[id(swapped[0])] if swapped else None
    return chosen, runtime, json.loads(decision.read_text()), calls


def test_runtimes_tied_on_the_probes_are_decided_by_a_lone_short_input(monkeypatch, tmp_path):
    # OpenVINO 3% faster on the probes, ONNX Runtime twice as fast on a lone input: ONNX Runtime.
    probes = {"torch": 1.0, "onnx": 0.79, "openvino": 0.77}
    chosen, runtime, record, calls = _choose_among(
        monkeypatch, tmp_path, probes, {"onnx": 0.03, "openvino": 0.06}
    )
    assert chosen == runtime == record["backend"] == "onnx"
    assert calls == [["onnx", "openvino", "torch"], ["onnx", "openvino"]]  # the lone input: the tied only
    assert record["lone_input_seconds"] == {"onnx": 0.03, "openvino": 0.06}
    assert (
        "onnx and openvino within 1.05x of each other there, so the faster on a lone short input"
        in record["reason"]
    )
    assert "onnx 3.00 ms, openvino 6.00 ms" in record["reason"]


def test_a_runtime_clearly_faster_on_the_probes_wins_without_the_lone_input(monkeypatch, tmp_path):
    probes = {"torch": 1.0, "onnx": 0.9, "openvino": 0.7}
    chosen, runtime, record, calls = _choose_among(
        monkeypatch, tmp_path, probes, {"onnx": 0.03, "openvino": 0.06}
    )
    assert chosen == runtime == "openvino" and len(calls) == 1 and "lone_input_seconds" not in record


def test_a_tie_never_picks_a_runtime_slower_than_torch(monkeypatch, tmp_path):
    # ONNX Runtime is within 1.05x of OpenVINO but slower than torch: OpenVINO stands alone.
    probes = {"torch": 1.0, "onnx": 1.02, "openvino": 0.98}
    chosen, runtime, record, calls = _choose_among(
        monkeypatch, tmp_path, probes, {"onnx": 0.01, "openvino": 0.06}
    )
    assert chosen == runtime == "openvino" and len(calls) == 1

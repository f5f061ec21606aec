"""``--backend``: the encoder in ONNX Runtime gives torch's records on every task; ``auto`` never
picks a backend that failed its parity check; unknown or missing backends are refused by name.

"torch's records": labels, tags, spans and candidates identical, numbers (probabilities, scores,
embedding components) within 1e-4. The fp32 graph differs from torch by ~1e-6 on the tiny models
(fused attention and LayerNorm sum in another order), so 1e-4 leaves room without hiding a wrong graph
(a wrong graph moves them by far more: the broken-runtime tests below).
"""

import numpy as np
import pytest

from encoder_tasks import runtimes
from encoder_tasks.cli import main
from encoder_tasks.errors import UserError
from encoder_tasks.inference import Predictor
from encoder_tasks.runtimes import EncoderRuntime
from tests.helpers import assert_close_records, cli_records, error_line

pytest.importorskip("onnxruntime")

TASKS = ["classification", "pair", "ner", "qa", "embedding", "mlm"]
TOLERANCE = 1e-4


pytestmark = pytest.mark.usefixtures("graph_cache")  # tests/cli/conftest.py: graphs in a session folder


@pytest.mark.parametrize("task", TASKS)
def test_onnx_backend_gives_torch_records(task_runs, task):
    run = task_runs[task]
    flags = {"top_k": 3} if task == "mlm" else {}
    torch_records = Predictor.load(run.model_dir, backend="torch", precision="fp32", **flags)(run.records)
    predictor = Predictor.load(run.model_dir, backend="onnx", **flags)
    assert runtimes.describe(predictor.model)["backend"] == "onnx"
    assert predictor.args.backend == "onnx" and predictor.model.padding_free is False
    assert_close_records(predictor(run.records), torch_records, TOLERANCE)


@pytest.mark.parametrize("task", ["ner", "embedding"])
def test_predict_cli_with_backend_onnx_writes_torch_records(task_runs, task, tmp_path):
    run = task_runs[task]
    expected = cli_records(run, tmp_path / "torch", "--backend", "torch")
    found = cli_records(run, tmp_path / "onnx", "--backend", "onnx")
    assert_close_records(found, expected, TOLERANCE)


def test_second_load_reuses_the_cached_graph(task_runs, graph_cache, caplog):
    run = task_runs["classification"]
    Predictor.load(run.model_dir, backend="onnx")
    graphs = sorted(graph_cache.glob("onnx/*/encoder.onnx"))
    assert graphs, "the graph was not cached"
    before = {g: g.stat().st_mtime_ns for g in graphs}
    with caplog.at_level("INFO", logger="encoder_tasks.runtimes"):
        Predictor.load(run.model_dir, backend="onnx")
    assert "exported the encoder" not in caplog.text
    assert {g: g.stat().st_mtime_ns for g in sorted(graph_cache.glob("onnx/*/encoder.onnx"))} == before


class Broken(EncoderRuntime):
    """A runtime whose numbers are wrong (what a mis-exported graph would give), and very fast."""

    backend = "broken"

    def run(self, feeds):
        return np.ones((*feeds["input_ids"].shape, self.config.hidden_size), dtype=np.float32)


class BrokenModule:
    @staticmethod
    def export_encoder(encoder, dest_dir):
        path = dest_dir / "graph.bin"
        path.write_bytes(b"")
        return path

    @staticmethod
    def load(path, config, threads=None, **options):  # options: what openvino.load takes too
        return Broken(config, ("input_ids", "attention_mask"), path)


@pytest.fixture
def broken_backend(monkeypatch):
    """``openvino`` replaced by :class:`Broken`: installed, fast, and failing its parity check."""
    monkeypatch.setitem(runtimes.RUNTIMES, "openvino", "tests.cli.test_backends.BrokenModule")
    real = runtimes.runtime_module
    monkeypatch.setattr(
        runtimes, "runtime_module", lambda name: BrokenModule if name == "openvino" else real(name)
    )
    monkeypatch.setattr(runtimes, "installed", lambda name: name in ("torch", "onnx", "openvino"))


def test_auto_never_picks_a_backend_that_failed_its_check(task_runs, broken_backend, caplog):
    run = task_runs["classification"]
    with caplog.at_level("INFO", logger="encoder_tasks.runtimes"):
        predictor = Predictor.load(run.model_dir, backend="auto")
    assert predictor.args.backend in ("torch", "onnx")
    assert "openvino failed its parity check" in caplog.text
    chosen = [line for line in caplog.messages if line.startswith("backend auto: ")]
    assert len(chosen) == 1 and chosen[0].startswith(f"backend auto: {predictor.args.backend} (")
    expected = Predictor.load(run.model_dir, backend="torch", precision="fp32")(run.records)
    assert_close_records(predictor(run.records), expected, TOLERANCE)


def test_explicit_backend_that_fails_its_check_is_refused(task_runs, broken_backend):
    with pytest.raises(UserError, match=r"--backend openvino: the encoder's outputs differ from torch's"):
        Predictor.load(task_runs["classification"].model_dir, backend="openvino")


def test_auto_with_no_runtime_installed_keeps_torch(task_runs, monkeypatch, caplog):
    monkeypatch.setattr(runtimes, "installed", lambda name: name == "torch")
    with caplog.at_level("INFO", logger="encoder_tasks.runtimes"):
        predictor = Predictor.load(task_runs["pair"].model_dir, backend="auto")
    assert predictor.args.backend == "torch" and runtimes.describe(predictor.model) == {"backend": "torch"}
    assert "backend auto: torch (no runtime installed" in caplog.text


def test_unknown_backend_is_refused_in_one_line(task_runs, tmp_path, capsys):
    run = task_runs["classification"]
    argv = [
        "classification",
        "predict",
        "--model_dir",
        str(run.model_dir),
        "--input_file",
        str(run.predict_file),
    ]
    code = main([*argv, "--output_file", str(tmp_path / "o.jsonl"), "--backend", "tensorrt"])
    assert code != 0
    assert error_line(capsys.readouterr().err) == (
        "encoder-tasks: error: --backend must be one of auto, torch, onnx, openvino, found 'tensorrt'"
    )


def test_missing_runtime_names_the_extra_to_install(task_runs, monkeypatch):
    real = runtimes.importlib.util.find_spec
    monkeypatch.setattr(
        runtimes.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnxruntime" else real(name, *a),
    )
    with pytest.raises(UserError) as caught:
        Predictor.load(task_runs["classification"].model_dir, backend="onnx")
    assert str(caught.value) == (
        "--backend onnx needs the onnxruntime package, which is not installed: pip install 'encoder-tasks[onnx]'"
    )


def test_bf16_with_a_runtime_backend_is_refused(task_runs):
    with pytest.raises(UserError, match="--precision bf16: the onnx backend computes in fp32"):
        Predictor.load(task_runs["classification"].model_dir, backend="onnx", precision="bf16")


def test_environment_sets_the_default_backend(task_runs, monkeypatch):
    monkeypatch.setenv(runtimes.BACKEND_ENV, "onnx")
    assert Predictor.load(task_runs["embedding"].model_dir).args.backend == "onnx"
    monkeypatch.setenv(runtimes.BACKEND_ENV, "torch")
    assert Predictor.load(task_runs["embedding"].model_dir).args.backend == "torch"


def test_serve_runs_the_encoder_on_the_chosen_backend(task_runs, caplog):
    import httpx

    from tests.serving import live_server

    run = task_runs["ner"]
    expected = Predictor.load(run.model_dir, backend="torch", precision="fp32")(run.records)
    with (
        caplog.at_level("INFO", logger="encoder_tasks.runtimes"),
        live_server({"ner": run.model_dir}, backend="onnx", max_wait_ms=0) as url,
    ):
        answer = httpx.post(f"{url}/v1/models/ner/predict", json={"inputs": run.records}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert "backend onnx: the encoder runs in onnx" in caplog.text
    assert_close_records(answer.json()["predictions"], expected, TOLERANCE)


def test_serve_refuses_an_unknown_backend():
    from encoder_tasks.serving.app import ServeOptions

    with pytest.raises(UserError, match="--backend must be one of auto, torch, onnx, openvino, found 'gpu'"):
        ServeOptions(backend="gpu")


def test_python_api_load_takes_the_backend(task_runs):
    from encoder_tasks.api import load

    model = load(task_runs["classification"].model_dir, backend="onnx")
    assert runtimes.describe(model.predictor.model)["backend"] == "onnx"


def test_auto_reuses_what_it_measured_for_the_same_encoder(task_runs, graph_cache, caplog, monkeypatch):
    monkeypatch.setattr(runtimes, "_busy", lambda: None)  # a busy machine's choice is not remembered
    run = task_runs["qa"]
    with caplog.at_level("INFO", logger="encoder_tasks.runtimes"):
        first = Predictor.load(run.model_dir, backend="auto").args.backend
        caplog.clear()
        second = Predictor.load(run.model_dir, backend="auto")
    assert second.args.backend == first
    assert "measured before on this machine" in caplog.text
    assert "exported the encoder" not in caplog.text
    expected = Predictor.load(run.model_dir, backend="torch", precision="fp32")(run.records)
    assert_close_records(second(run.records), expected, TOLERANCE)

"""``encoder-tasks quantize --backend onnx``: an int8 ONNX graph of the encoder in a run directory
that loads with no flag, calibrated (static) on the task's own inputs, with the metric guardrail
keeping layers in fp32 when a tight ``--max_metric_loss`` asks for it; a bare encoder folder
quantizes as an embedding model.

The tiny runs' int8 records agree with fp32 within 0.05 (scores, probabilities, components) on
their labels: their margins are wider than what int8 moves (measured ~1e-2 on these models).
"""

import json

import pytest

from encoder_tasks import runtimes
from encoder_tasks.cli import main
from encoder_tasks.commands.quantize import quantize_run
from encoder_tasks.errors import UserError
from encoder_tasks.inference import Predictor
from tests.helpers import error_line, read_json
from tests.quantized import assert_guardrail_order, labels, quantize_with_zero_tolerance
from tests.samples import STS_COLUMNS

pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.usefixtures("graph_cache", "auto_backend")  # tests/cli/conftest.py

READ_FLAGS = {"pair": STS_COLUMNS}


@pytest.mark.parametrize("task", ["classification", "ner"])
def test_static_int8_run_loads_with_no_flag_and_predicts_the_fp32_labels(task_runs, tmp_path, task):
    run = task_runs[task]
    dest = tmp_path / "int8"
    argv = ["quantize", str(run.model_dir), str(dest), "--backend", "onnx", "--method", "static"]
    assert (
        main([*argv, "--validation_file", str(run.train_file), "--repeats", "1", *READ_FLAGS.get(task, [])])
        == 0
    )
    settings = read_json(dest / "encoder_tasks.json")["settings"]
    runtime = settings["runtime"]
    assert runtime["backend"] == "onnx" and runtime["precision"] == "int8" and runtime["method"] == "static"
    assert (dest / runtime["file"]).is_file()
    predictor = Predictor.load(dest)  # no backend flag: the saved graph
    assert runtimes.describe(predictor.model) == {
        "backend": "onnx",
        "precision": "int8",
        "path": str(dest / runtime["file"]),
    }
    fp32 = Predictor.load(run.model_dir, backend="torch", precision="fp32")
    assert labels(predictor(run.records)) == labels(fp32(run.records))
    report = read_json(dest / "quantization_report.json")
    assert report["metric"]["name"] and report["metrics"]["fp32"] and report["metrics"]["int8"]
    assert report["quantization"]["calibration"]["validation_inputs"] > 0
    assert (
        report["speed"]["fp32"]["inputs_per_second"] > 0 and report["speed"]["int8"]["inputs_per_second"] > 0
    )
    # --backend torch on the same directory runs the fp32 weights it keeps
    assert runtimes.describe(Predictor.load(dest, backend="torch").model) == {"backend": "torch"}


def test_tight_max_metric_loss_keeps_the_most_sensitive_layers_in_fp32(task_runs, tmp_path):
    run = task_runs["pair"]
    report = quantize_with_zero_tolerance(run, tmp_path / "int8", "onnx")
    excluded = assert_guardrail_order(report)
    settings = read_json(tmp_path / "int8" / "encoder_tasks.json")["settings"]
    assert settings["runtime"]["excluded_layers"] == excluded
    readme = (tmp_path / "int8" / "README.md").read_text()
    assert f"kept in fp32 by the metric guardrail: {excluded}" in readme


def test_calibration_file_is_read_as_serve_inputs(task_runs, tmp_path):
    run = task_runs["qa"]
    calibration = tmp_path / "calibration.jsonl"
    calibration.write_text("".join(json.dumps(r) + "\n" for r in run.records))
    report = quantize_run(
        run.model_dir, tmp_path / "int8", backend="onnx", method="static", calibration_file=str(calibration)
    )
    assert report["quantization"]["calibration"]["file"] == str(calibration)
    assert report["quantization"]["calibration"]["inputs"] >= len(run.records)  # QA: one or more windows each
    assert "metric" not in report  # no validation file: no guardrail, said in the report
    answers = Predictor.load(tmp_path / "int8")(run.records)
    assert len(answers) == len(run.records)


def test_dynamic_int8_of_a_bare_encoder_folder_is_an_embedding_run(tiny_bert, tmp_path):
    dest = tmp_path / "int8"
    assert main(["quantize", tiny_bert, str(dest), "--backend", "onnx", "--method", "dynamic"]) == 0
    metadata = read_json(dest / "encoder_tasks.json")
    assert metadata["task"] == "embedding" and metadata["settings"]["runtime"]["method"] == "dynamic"
    int8 = Predictor.load(dest)
    fp32 = Predictor.load(tiny_bert, backend="torch", precision="fp32")
    texts = [{"text": "the cat sat"}, {"text": "a dog ran in the park"}]
    for got, want in zip(int8(texts), fp32(texts)):
        cosine = sum(a * b for a, b in zip(got["embedding"], want["embedding"]))
        assert cosine > 0.99


def test_bare_encoder_folder_quantizes_with_torch_too(tiny_bert, tmp_path):
    report = quantize_run(tiny_bert, tmp_path / "int8")
    assert report["task"] == "embedding" and report["quantization"]["layers"]
    assert Predictor.load(tmp_path / "int8").task.name == "embedding"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--backend", "onnx", "--method", "static"],
            "quantize --method static calibrates on inputs: give --calibration_file",
        ),
        (
            ["--backend", "torch", "--method", "static"],
            "quantize --backend torch is dynamic int8 only (no calibration)",
        ),
        (["--method", "static"], "quantize --method static calibrates on inputs: give --calibration_file"),
        (
            ["--backend", "onnx", "--max_metric_loss", "5"],
            "quantize: --max_metric_loss is a fraction (0.01: 1%), found 5.0",
        ),
        (
            ["--backend", "onnx", "--calibration_file", "nowhere.jsonl"],
            "quantize: --calibration_file nowhere.jsonl: no such file",
        ),
    ],
)
def test_bad_quantize_flags_are_refused_in_one_line(task_runs, tmp_path, capsys, flags, message):
    code = main(["quantize", str(task_runs["classification"].model_dir), str(tmp_path / "d"), *flags])
    assert code != 0
    assert message in error_line(capsys.readouterr().err)
    assert not (tmp_path / "d").exists()


def test_an_int8_graph_run_is_not_quantized_again(task_runs, tmp_path):
    dest = tmp_path / "int8"
    quantize_run(task_runs["classification"].model_dir, dest, backend="onnx", method="dynamic")
    with pytest.raises(UserError, match="already holds an int8 onnx graph; quantize the fp32 run"):
        quantize_run(dest, tmp_path / "again", backend="onnx", method="dynamic")


def test_every_matrix_product_of_the_graph_is_mapped_to_its_layer(tiny_bert, tmp_path):
    from encoder_tasks.backbone import load_encoder
    from encoder_tasks.quantization.onnx import quantizable_nodes
    from encoder_tasks.runtimes.onnx import export_encoder

    encoder = load_encoder(tiny_bert).eval()
    nodes = quantizable_nodes(export_encoder(encoder, tmp_path))
    layers = encoder.config.num_hidden_layers
    assert sorted(set(nodes.values())) == list(range(layers))
    for layer in range(layers):  # fused attention + attention output + the two feed-forward products
        own = sorted(name for name, at in nodes.items() if at == layer)
        assert len(own) == 4 and f"Attention_{layer}" in own, own
        assert all(f"layer.{layer}/" in name for name in own if not name.startswith("Attention_"))

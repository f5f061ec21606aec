"""``encoder-tasks quantize --backend openvino``: a static int8 OpenVINO graph (nncf) of the encoder in
a run directory that loads with no flag, calibrated on the task's own inputs, with the metric
guardrail leaving the most sensitive layers' linear layers to nncf's ignored scope when a tight
``--max_metric_loss`` asks for it; a bare encoder folder quantizes as an embedding model.

As in test_quantize_onnx.py, the tiny runs' labels are wider apart than int8 moves their scores.
"""

import pytest

from encoder_tasks import runtimes
from encoder_tasks.cli import main
from encoder_tasks.inference import Predictor
from tests.helpers import error_line, read_json
from tests.quantized import assert_guardrail_order, labels, quantize_with_zero_tolerance

pytest.importorskip("openvino")
pytest.importorskip("nncf")


pytestmark = pytest.mark.usefixtures("graph_cache", "auto_backend")  # tests/cli/conftest.py


@pytest.mark.parametrize("task", ["classification", "ner"])
def test_static_int8_run_loads_with_no_flag_and_predicts_the_fp32_labels(task_runs, tmp_path, task):
    run = task_runs[task]
    dest = tmp_path / "int8"
    # no --method: static, the one method of the openvino backend
    argv = ["quantize", str(run.model_dir), str(dest), "--backend", "openvino"]
    assert main([*argv, "--validation_file", str(run.train_file), "--repeats", "1"]) == 0
    runtime = read_json(dest / "encoder_tasks.json")["settings"]["runtime"]
    assert (
        runtime["backend"] == "openvino" and runtime["precision"] == "int8" and runtime["method"] == "static"
    )
    assert runtime["file"] == "encoder.xml" and (dest / "encoder.bin").is_file()
    assert read_json(dest / "encoder_info.json")["precision"] == "int8"
    predictor = Predictor.load(dest)  # no backend flag: the saved graph
    assert runtimes.describe(predictor.model) == {
        "backend": "openvino",
        "precision": "int8",
        "path": str(dest / "encoder.xml"),
    }
    fp32 = Predictor.load(run.model_dir, backend="torch", precision="fp32")
    assert labels(predictor(run.records)) == labels(fp32(run.records))
    report = read_json(dest / "quantization_report.json")
    assert report["metrics"]["fp32"] and report["metrics"]["int8"]
    assert report["quantization"]["calibration"]["validation_inputs"] > 0
    assert report["quantization"]["nncf"] and report["quantization"]["openvino"]
    assert report["size"]["int8_bytes"] < report["size"]["fp32_bytes"]  # int8 weights in encoder.bin
    assert report["speed"]["int8"]["inputs_per_second"] > 0
    assert runtimes.describe(Predictor.load(dest, backend="torch").model) == {"backend": "torch"}


def test_tight_max_metric_loss_keeps_the_most_sensitive_layers_in_fp32(task_runs, tmp_path):
    run = task_runs["pair"]
    report = quantize_with_zero_tolerance(
        run,
        tmp_path / "int8",
        "openvino",
        metric="loss",  # moves with any change of the scores (the tiny run's Spearman ranks do not)
    )
    excluded = assert_guardrail_order(report)
    # the excluded layers' ops (six linear layers and the attention) are nncf's ignored scope, no others
    info = read_json(tmp_path / "int8" / "encoder_info.json")
    layers_of = {layer for name in info["ignored_layers"] for layer in [_layer(name)]}
    assert layers_of == set(excluded) and len(info["ignored_layers"]) == 7 * len(excluded)
    assert report["runtime"]["quantized_nodes"] == len(report["quantization"]["layers"])
    readme = (tmp_path / "int8" / "README.md").read_text()
    assert f"kept in fp32 by the metric guardrail: {excluded}" in readme and "OpenVINO" in readme


def _layer(name):
    from encoder_tasks.quantization.openvino import layer_of

    return layer_of(name)


def test_static_int8_of_a_bare_encoder_folder_is_an_embedding_run(tiny_bert, tmp_path):
    calibration = tmp_path / "calibration.jsonl"
    texts = [{"text": "the cat sat"}, {"text": "a dog ran in the park"}, {"text": "rain again today"}]
    calibration.write_text("".join(f'{{"text": "{t["text"]}"}}\n' for t in texts))
    dest = tmp_path / "int8"
    argv = ["quantize", tiny_bert, str(dest), "--backend", "openvino", "--calibration_file", str(calibration)]
    assert main(argv) == 0
    metadata = read_json(dest / "encoder_tasks.json")
    assert metadata["task"] == "embedding" and metadata["settings"]["runtime"]["backend"] == "openvino"
    int8 = Predictor.load(dest)
    assert runtimes.describe(int8.model)["backend"] == "openvino"
    fp32 = Predictor.load(tiny_bert, backend="torch", precision="fp32")
    for got, want in zip(int8(texts), fp32(texts)):
        cosine = sum(a * b for a, b in zip(got["embedding"], want["embedding"]))
        assert cosine > 0.98


def test_every_linear_layer_of_the_graph_is_mapped_to_its_layer(tiny_bert, tmp_path):
    from encoder_tasks.backbone import load_encoder
    from encoder_tasks.quantization.openvino import linear_nodes
    from encoder_tasks.runtimes.openvino import export_encoder

    encoder = load_encoder(tiny_bert).eval()
    nodes = linear_nodes(export_encoder(encoder, tmp_path))
    layers = encoder.config.num_hidden_layers
    inside = {name: at for name, at in nodes.items() if at >= 0}
    assert sorted(set(inside.values())) == list(range(layers))
    for layer in range(layers):
        # query, key, value, the attention (SDPA here), attention output, the two feed-forward
        # products: a layer kept in fp32 keeps every one of them
        own = [name for name, at in inside.items() if at == layer]
        assert len(own) == 7 and all(f"layer.{layer}." in name for name in own), own


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--backend", "openvino", "--method", "dynamic"],
            "quantize --backend openvino is static int8 only (nncf, calibrated on your inputs)",
        ),
        (["--backend", "openvino"], "quantize --method static calibrates on inputs: give --calibration_file"),
    ],
)
def test_bad_openvino_flags_are_refused_in_one_line(task_runs, tmp_path, capsys, flags, message):
    code = main(["quantize", str(task_runs["classification"].model_dir), str(tmp_path / "d"), *flags])
    assert code != 0
    assert message in error_line(capsys.readouterr().err)
    assert not (tmp_path / "d").exists()

"""``encoder-tasks quantize`` for every task: the int8 run loads wherever a run loads (Predictor,
``<task> predict``, ``<task> evaluate``), predicts what the fp32 run predicts, holds int8 tensors in a
smaller file, and reports the metric before and after; what cannot be quantized is refused in one line.

"Predicts what the fp32 run predicts": the records are equal, numbers within 0.02 (probabilities,
scores, embedding components), so every label, tag, answer span and candidate is the same. The tiny
models' margins allow it: their int8 scores differ from fp32 by 2e-3 at most, while their closest
choices are further apart, except the untrained MLM head's lower candidates (2e-5 apart: the top 2
are compared, 2e-4 apart).
"""

import json
import shutil

import pytest
import torch
from safetensors import safe_open

from encoder_tasks.cli import main
from encoder_tasks.inference import Predictor
from encoder_tasks.quantization.int8 import is_int8
from tests.helpers import assert_close_records, error_line, predict_argv, read_json, read_jsonl, train_argv
from tests.samples import STS_COLUMNS

TASKS = ["classification", "pair", "ner", "qa", "embedding", "mlm"]
#: What ``<task> evaluate`` needs to read a task's training file beyond the saved settings.
READ_FLAGS = {"pair": STS_COLUMNS}
#: Predict flags of the comparison (see the module docstring).
COMPARED = {"mlm": {"top_k": 2}}


@pytest.fixture(scope="module")
def quantized(task_runs, tmp_path_factory):
    """``{task: DEST}``: every task's run quantized once, with the report on its training file."""
    root = tmp_path_factory.mktemp("int8")
    dests = {}
    for task, run in task_runs.items():
        dest = root / task
        # torch's dynamic int8 (auto would calibrate OpenVINO static int8 on the validation file).
        argv = [
            "quantize",
            str(run.model_dir),
            str(dest),
            "--backend",
            "torch",
            "--validation_file",
            str(run.train_file),
        ]
        assert main([*argv, "--repeats", "1", *READ_FLAGS.get(task, [])]) == 0
        dests[task] = dest
    return dests


@pytest.mark.parametrize("task", TASKS)
def test_int8_run_predicts_what_the_fp32_run_predicts(task_runs, quantized, task):
    run = task_runs[task]
    int8 = Predictor.load(quantized[task], **COMPARED.get(task, {}))
    assert int8.task.name == task and is_int8(int8.model)
    assert int8.args.precision == "fp32"  # auto: no bf16 around int8 kernels
    expected = Predictor.load(run.model_dir, precision="fp32", **COMPARED.get(task, {}))(run.records)
    assert_close_records(int8(run.records), expected, tolerance=0.02)


def _cli_records(task, model_dir, predict_file, out) -> list[dict]:
    action = "encode" if task == "embedding" else "predict"  # embedding: vectors, as the Predictor
    assert main(predict_argv(task, model_dir, predict_file, out, action=action)) == 0
    dropped = ("line", "id") if task == "embedding" else ("line",)  # what the Predictor has not
    return [{k: v for k, v in r.items() if k not in dropped} for r in read_jsonl(out)]


@pytest.mark.parametrize("task", TASKS)
def test_predict_cli_loads_the_int8_run(task_runs, quantized, task, tmp_path):
    run = task_runs[task]
    found = _cli_records(task, quantized[task], run.predict_file, tmp_path / "out.jsonl")
    assert_close_records(found, Predictor.load(quantized[task])(run.records))


@pytest.mark.parametrize("task", TASKS)
def test_weights_are_int8_tensors_in_a_smaller_file(task_runs, quantized, task):
    dest = quantized[task]
    record = read_json(dest / "encoder_tasks.json")["settings"]["quantization"]
    assert record["method"] == "dynamic-int8" and record["source"] == str(task_runs[task].model_dir)
    # The tiny BERT: 2 layers x (query, key, value, attention output, intermediate, output).
    assert len(record["layers"]) == 12 and all(name.startswith("encoder.") for name in record["layers"])
    with safe_open(str(dest / "model.safetensors"), "pt") as weights:
        keys = set(weights.keys())
        for name in record["layers"]:
            if task == "embedding":  # saved as a bare encoder (sentence-transformers' layout)
                name = name.removeprefix("encoder.")
            assert weights.get_tensor(f"{name}.weight_int8").dtype == torch.int8
            assert weights.get_tensor(f"{name}.weight_scale").dtype == torch.float32
            assert f"{name}.weight" not in keys
    source = (task_runs[task].model_dir / "model.safetensors").stat().st_size
    assert (dest / "model.safetensors").stat().st_size < 0.8 * source
    assert {"config.json", "tokenizer.json", "README.md"} <= {p.name for p in dest.iterdir()}


@pytest.mark.parametrize("task", TASKS)
def test_report_holds_both_metrics_speeds_and_sizes(quantized, task):
    report = read_json(quantized[task] / "quantization_report.json")
    metric = report["metric"]
    assert metric["name"].startswith("eval_") and metric["name"] in report["metrics"]["int8"]
    assert metric["before"] == report["metrics"]["fp32"][metric["name"]]
    assert metric["after"] == report["metrics"]["int8"][metric["name"]]
    speed = report["speed"]
    assert speed["inputs"] > 0 and speed["batch_size"] == 64 and speed["repeats"] == 1
    assert speed["fp32"]["inputs_per_second"] > 0 and speed["int8"]["inputs_per_second"] > 0
    assert report["size"]["int8_bytes"] < report["size"]["fp32_bytes"]


def test_evaluate_cli_scores_the_int8_run_as_the_report_did(task_runs, quantized, tmp_path):
    dest = tmp_path / "ner-int8"
    shutil.copytree(quantized["ner"], dest)
    argv = [
        "ner",
        "evaluate",
        "--model_name_or_path",
        str(dest),
        "--validation_file",
        str(task_runs["ner"].train_file),
    ]
    assert main([*argv, "--mixed_precision", "no", "--per_device_eval_batch_size", "64"]) == 0
    (saved,) = (dest / "eval").iterdir()
    report = read_json(dest / "quantization_report.json")
    assert read_json(saved)["eval_f1_strict"] == report["metric"]["after"]


def test_heads_quantizes_the_mlm_vocabulary_projection(task_runs, tmp_path):
    run = task_runs["mlm"]
    assert main(["quantize", str(run.model_dir), str(tmp_path / "mlm"), "--heads"]) == 0
    layers = read_json(tmp_path / "mlm" / "encoder_tasks.json")["settings"]["quantization"]["layers"]
    assert {"head.dense", "head.decoder"} <= set(layers)
    # An int8 vocabulary projection moves the untrained head's near-tied candidates (1e-5 apart
    # below the top two): the best candidate of each mask is compared.
    expected = Predictor.load(run.model_dir, precision="fp32", top_k=1)(run.records)
    assert_close_records(Predictor.load(tmp_path / "mlm", top_k=1)(run.records), expected, tolerance=0.02)
    # Without --validation_file, the report holds the sizes only.
    assert set(read_json(tmp_path / "mlm" / "quantization_report.json")) == {
        "task",
        "source",
        "dest",
        "quantization",
        "size",
    }


def _unmerged_lora_copy(run_dir, target):
    shutil.copytree(run_dir, target)
    metadata = read_json(target / "encoder_tasks.json")
    metadata["settings"]["lora"] = {"r": 4, "alpha": 8, "target_modules": ["query", "value"]}
    (target / "encoder_tasks.json").write_text(json.dumps(metadata), encoding="utf-8")
    return target


def test_what_cannot_be_quantized_is_refused_in_one_line(task_runs, quantized, tmp_path, capsys):
    run, int8 = task_runs["classification"], quantized["classification"]
    lora = _unmerged_lora_copy(run.model_dir, tmp_path / "lora")
    cases = [
        (
            ["quantize", str(int8), str(tmp_path / "again")],
            f"quantize: {int8} is already an int8 model (from {run.model_dir}); quantize the fp32 run",
        ),
        (
            ["quantize", str(run.model_dir), str(int8)],
            f"quantize: {int8} already holds files; choose another destination or pass --overwrite",
        ),
        (
            ["quantize", str(lora), str(tmp_path / "lora-int8")],
            f"quantize: {lora} holds unmerged LoRA adapters (a checkpoint of a --lora_r run); quantize the "
            "finished run, whose adapters are merged",
        ),
        (
            ["quantize", str(tmp_path), str(tmp_path / "x")],
            f"quantize: {tmp_path}: not a saved model (no encoder_tasks.json and no config.json)",
        ),
        (
            ["quantize", str(run.model_dir), str(tmp_path / "x"), "--text_column", "review"],
            "encoder-tasks quantize: unknown flag --text_column (the task's flags for reading a file come "
            "with --validation_file)",
        ),
        (
            [
                "quantize",
                str(run.model_dir),
                str(tmp_path / "x"),
                "--validation_file",
                str(tmp_path / "no.csv"),
            ],
            f"quantize: --validation_file {tmp_path / 'no.csv'}: no such file",
        ),
        (
            ["quantize", str(run.model_dir), str(tmp_path / "x"), "--skip", "."],
            f"quantize: no linear layer of {run.model_dir} is left to quantize (--skip '.')",
        ),
        (
            predict_argv(
                "classification", int8, run.predict_file, tmp_path / "p.jsonl", "--precision", "bf16"
            ),
            f"--precision bf16: {int8} is an int8 model (encoder-tasks quantize), which computes in fp32 "
            "around its int8 matrix products; use --precision auto or fp32, or predict with the fp32 run in bf16",
        ),
        (
            train_argv("classification", int8, run.train_file, tmp_path / "retrained"),
            f"{int8} is an int8 model (encoder-tasks quantize), which cannot be trained further; start from "
            f"the fp32 run it was quantized from ({run.model_dir})",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert error_line(capsys.readouterr().err) == f"encoder-tasks: error: {message}"
    assert not (tmp_path / "x").exists() and not (tmp_path / "again").exists()


def test_overwrite_replaces_an_earlier_int8_run(task_runs, tmp_path):
    run, dest = task_runs["pair"], tmp_path / "pair-int8"
    assert main(["quantize", str(run.model_dir), str(dest)]) == 0
    assert (
        main(
            [
                "quantize",
                str(run.model_dir),
                str(dest),
                "--overwrite",
                "--skip",
                r"intermediate|output\.dense",
            ]
        )
        == 0
    )
    layers = read_json(dest / "encoder_tasks.json")["settings"]["quantization"]["layers"]
    assert len(layers) == 6 and not any("intermediate" in name or "output.dense" in name for name in layers)
    assert not [p for p in dest.iterdir() if p.name.startswith(".export-tmp-")]


def test_auto_candidates_need_inputs_to_calibrate_and_time_on(task_runs):
    from encoder_tasks.commands.quantize import auto_candidates

    run = task_runs["classification"]
    assert auto_candidates(None, None, heads=False, skip=None)[0] == [
        ("torch", "dynamic")
    ]  # nothing to time on
    assert auto_candidates(str(run.train_file), None, heads=True, skip=None)[0] == [("torch", "dynamic")]
    assert auto_candidates(str(run.train_file), None, heads=False, skip=None)[0] == [
        ("openvino", "static"),
        ("onnx", "dynamic"),
    ]


def _auto_argv(run, dest) -> list[str]:
    """``quantize`` at its defaults with a file to calibrate, score and time on: ``auto``'s comparison."""
    return [
        "quantize",
        str(run.model_dir),
        str(dest),
        "--validation_file",
        str(run.train_file),
        "--repeats",
        "1",
    ]


def test_auto_keeps_the_fastest_int8_graph_timed_here_within_the_guardrail(task_runs, tmp_path, caplog):
    run = task_runs["classification"]
    dest = tmp_path / "auto"
    with caplog.at_level("INFO"):
        assert main(_auto_argv(run, dest)) == 0
    report = read_json(dest / "quantization_report.json")
    auto = report["auto"]
    assert set(auto["candidates"]) == {"openvino", "onnx"}
    within = {n: c for n, c in auto["candidates"].items() if c["within_target"]}
    assert auto["chosen"] == max(within, key=lambda n: within[n]["speedup"])
    assert f"kept {auto['chosen']}" in caplog.text
    # DEST is the kept candidate's run, and only it: its graph, no other candidate's, no leftovers.
    runtime = read_json(dest / "encoder_tasks.json")["settings"]["runtime"]
    assert runtime["backend"] == auto["chosen"] and report["dest"] == str(dest)
    graphs = {"openvino": "encoder.xml", "onnx": "encoder.int8.onnx"}
    assert (dest / graphs[auto["chosen"]]).is_file()
    other = ({"openvino", "onnx"} - {auto["chosen"]}).pop()
    assert not (dest / graphs[other]).exists() and not (dest / other).exists()
    assert not [p for p in dest.iterdir() if p.name.startswith(".")]
    # Loaded at the defaults (no --backend), it runs the kept graph and keeps the fp32 labels.
    int8 = Predictor.load(dest)
    fp32 = Predictor.load(run.model_dir, precision="fp32")
    assert [r["label"] for r in int8(run.records)] == [r["label"] for r in fp32(run.records)]


def test_auto_prefers_a_graph_within_the_guardrail_to_a_faster_one_outside_it():
    from encoder_tasks.commands.quantize_auto import fastest

    reports = {
        "openvino": {"speed": {"speedup": 3.0}, "metric": {"within_target": False}},
        "onnx": {"speed": {"speedup": 1.2}, "metric": {"within_target": True}},
    }
    assert fastest(reports) == "onnx"
    reports["onnx"]["metric"]["within_target"] = False  # none within: the fastest
    assert fastest(reports) == "openvino"


def test_auto_keeps_what_succeeded_when_one_candidate_fails(task_runs, tmp_path, monkeypatch, caplog):
    from encoder_tasks.commands import quantize_runtime
    from encoder_tasks.errors import UserError

    real = quantize_runtime.quantize_with_runtime

    def onnx_fails(model_dir, dest, *, backend, **options):
        if backend == "onnx":
            raise UserError("the onnx candidate broke")
        return real(model_dir, dest, backend=backend, **options)

    monkeypatch.setattr(quantize_runtime, "quantize_with_runtime", onnx_fails)
    run = task_runs["classification"]
    dest = tmp_path / "auto"
    with caplog.at_level("INFO"):
        assert main(_auto_argv(run, dest)) == 0
    assert "onnx dynamic int8 failed: the onnx candidate broke" in caplog.text
    assert read_json(dest / "encoder_tasks.json")["settings"]["runtime"]["backend"] == "openvino"
    assert not (dest / "onnx").exists()

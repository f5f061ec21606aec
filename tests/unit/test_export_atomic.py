"""An export lands whole and checked, or not at all: a failed parity check leaves no
``model.onnx`` (nor anything else) in the destination, an earlier export replaced with
``--overwrite`` survives a failed one, and without onnxruntime the export says that its
parity was not checked."""

import json
import sys

import pytest

from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.commands.export import export_model
from encoder_tasks.commands.export import main as export_main
from encoder_tasks.export import EXPORT_INFO, ExportError
from encoder_tasks.export.onnx import export_onnx
from encoder_tasks.registry import TASKS
from tests.unit.test_export import classifier, save

pytest.importorskip("onnx")


@pytest.fixture
def run(tiny_models, tmp_path):
    path = tiny_models["bert"]
    return save(classifier(path, pooling="mean"), load_tokenizer(path), tmp_path / "run")


def files(directory):
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def test_a_failed_parity_check_leaves_no_model_onnx(tiny_models, run, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    dest = tmp_path / "onnx"
    # The real comparison, with a tolerance nothing meets: the check fails after the graph
    # and its files were written (to the temporary folder).
    model = classifier(tiny_models["bert"], pooling="mean")
    with pytest.raises(ExportError, match="differ from PyTorch's"):
        export_onnx(model, load_tokenizer(run), dest, TASKS["classification"], tolerance=-1.0)
    assert not (dest / "model.onnx").exists()
    assert not dest.exists()  # nor a tokenizer, settings or a temporary folder

    # Through `export`: a good export, then a failing one over it with --overwrite.
    info = export_model(run, dest, fmt="onnx")
    assert info["parity"] == "checked" and info["max_abs_diff"] < 1e-3
    before = {name: (dest / name).read_bytes() for name in files(dest) if (dest / name).is_file()}
    monkeypatch.setattr("encoder_tasks.export.onnx.onnx_parity", lambda *args: (1.0, 0.0))
    with pytest.raises(ExportError, match="differ from PyTorch's by 1"):
        export_model(run, dest, fmt="onnx", overwrite=True)
    assert {name: (dest / name).read_bytes() for name in before} == before  # the earlier export, intact
    assert files(dest) == sorted(before)  # and nothing else


def test_without_onnxruntime_the_export_says_parity_was_not_checked(run, tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    dest = tmp_path / "onnx"
    with caplog.at_level("INFO", logger="encoder_tasks.export"):
        assert export_main([str(run), str(dest), "--format", "onnx"]) == 0
    info = json.loads((dest / EXPORT_INFO).read_text())
    assert info["parity"] == "not checked: onnxruntime not installed" and "max_abs_diff" not in info
    warning = next(r for r in caplog.records if r.levelname == "WARNING")
    assert "were not compared with PyTorch's" in warning.getMessage()
    assert "pip install 'encoder-tasks[onnx]'" in warning.getMessage()
    assert "as onnx (parity not checked: onnxruntime not installed)" in caplog.text  # the final line
    assert (dest / "model.onnx").is_file()


def test_an_interrupted_exports_temporary_folder_is_no_export(run, tmp_path, caplog):
    dest = tmp_path / "onnx"
    leftover = dest / ".export-tmp-killed" / "model.onnx"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half")
    with caplog.at_level("INFO", logger="encoder_tasks.export"):
        export_model(run, dest, fmt="onnx")  # not "already holds files": the folder is no export
    assert "the temporary folder of an interrupted export" in caplog.text
    assert not any(name.startswith(".export-tmp-") for name in files(dest))
    assert {"model.onnx", EXPORT_INFO, "encoder_tasks.json"} <= set(files(dest))

"""A finished run keeps its final model only: the checkpoint-* folders (optimizer state) go when
training ends unless ``--keep_checkpoints``, and the folder's size is said; ``exported/`` (the docs'
export folder) is git-ignored; the package's license is an SPDX expression."""

import logging

import tomllib

from encoder_tasks.cli import main
from tests.helpers import REPO, train_argv, write
from tests.samples import REVIEWS_CSV

FLAGS = ["--num_train_epochs", "2", "--per_device_train_batch_size", "8", "--save_strategy", "epoch"]
FLAGS += ["--report_to", "none"]


def train(tiny_bert, tmp_path, caplog, keep: str):
    data = write(tmp_path / "train.csv", REVIEWS_CSV)
    out = tmp_path / f"run-{keep}"
    with caplog.at_level(logging.INFO, logger="encoder_tasks"):
        assert (
            main(train_argv("classification", tiny_bert, data, out, *FLAGS, "--keep_checkpoints", keep)) == 0
        )
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"run folder {out}")]
    return out, said


def test_a_finished_run_keeps_only_its_final_model(tiny_bert, tmp_path, caplog):
    out, said = train(tiny_bert, tmp_path, caplog, "false")
    assert not list(out.glob("checkpoint-*"))
    assert (out / "model.safetensors").is_file() and (out / "encoder_tasks.json").is_file()
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / (1024 * 1024)
    assert len(said) == 1 and f": {size:.1f} MiB (the model " in said[0]
    assert "removed 2 checkpoint(s) with their optimizer state" in said[0] and "--keep_checkpoints" in said[0]


def test_keep_checkpoints_keeps_them(tiny_bert, tmp_path, caplog):
    out, said = train(tiny_bert, tmp_path, caplog, "true")
    kept = sorted(out.glob("checkpoint-*"))
    assert len(kept) == 2 and all((p / "optimizer.pt").is_file() for p in kept)  # one per epoch
    assert len(said) == 1 and ", checkpoints " in said[0]


def test_exported_is_git_ignored_and_the_license_is_spdx():
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert "exported/" in ignored and "runs/" in ignored
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"  # a string: no deprecation warning on install
    assert "setuptools>=77" in project["build-system"]["requires"][0]

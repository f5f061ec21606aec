"""``--engine ray`` (:mod:`encoder_tasks.engines`): on a local Ray instance with two model replicas,
``predict`` and ``embedding encode`` write what the local commands write, in input order; a replica
killed mid-run loses and repeats no row; bad flags, an unreachable cluster and a bad row end in one
line. Ray starts once for the module (it is slow to start on a small machine)."""

from __future__ import annotations

import json
import os
import socket
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from encoder_tasks.cli import main  # noqa: E402
from encoder_tasks.engines import ray_engine, ray_stages  # noqa: E402
from tests.helpers import assert_close_records, predict_argv, read_jsonl, write  # noqa: E402
from tests.samples import REVIEWS  # noqa: E402

#: Two replicas on half a CPU each leave one of the instance's two CPUs to read the input; two
#: rows per call make every file several calls, spread over both replicas.
RAY = ["--engine", "ray", "--ray_workers", "2", "--ray_cpus_per_worker", "0.5", "--ray_batch_size", "2"]
FP32 = ["--precision", "fp32"]


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray instance for the module: two CPUs, a small object store, no dashboard."""
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 2**20, logging_level="warning")
    yield
    ray.shutdown()


#: (task, the file of its run it predicts): streamed JSON lines, tables and text lines, and the
#: formats read whole on the driver (NER CoNLL, QA SQuAD JSON, MLM text documents).
CASES = [
    ("classification", "predict_file"),  # .jsonl
    ("pair", "predict_file"),  # .jsonl, two columns
    ("ner", "predict_file"),  # .txt, one text per line
    ("ner", "train_file"),  # CoNLL, tokens
    ("qa", "predict_file"),  # SQuAD JSON
    ("embedding", "train_file"),  # .tsv of scored pairs (predict scores pairs)
    ("mlm", "predict_file"),  # .txt documents
]


def test_without_an_address_a_run_starts_and_stops_its_own_ray(task_runs, tmp_path):
    """The default: no cluster named, so the run starts a Ray instance here and stops it (first in
    the module, before the module's own instance)."""
    if ray.is_initialized():
        pytest.skip("Ray is up already (this test runs first in its module)")
    run = task_runs["classification"]
    local, on_ray = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    assert main(predict_argv("classification", run.model_dir, run.predict_file, local, *FP32)) == 0
    assert main(predict_argv("classification", run.model_dir, run.predict_file, on_ray, *FP32, *RAY)) == 0
    assert not ray.is_initialized()
    assert_close_records(read_jsonl(on_ray), read_jsonl(local))


@pytest.mark.parametrize(("task", "inputs"), CASES)
def test_ray_predict_writes_what_predict_writes(ray_instance, task_runs, tmp_path, task, inputs):
    run = task_runs[task]
    data = getattr(run, inputs)
    local, on_ray = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    assert main(predict_argv(task, run.model_dir, data, local, *FP32)) == 0
    assert main(predict_argv(task, run.model_dir, data, on_ray, *FP32, *RAY)) == 0
    expected, found = read_jsonl(local), read_jsonl(on_ray)
    assert [r["line"] for r in found] == [r["line"] for r in expected]  # input order, every row once
    assert_close_records(found, expected)
    # ... and, as predict, never over an existing file.
    assert main(predict_argv(task, run.model_dir, data, on_ray, *FP32, *RAY)) == 2


@pytest.mark.parametrize("suffix", [".npy", ".jsonl"])
def test_ray_encode_writes_what_encode_writes(ray_instance, task_runs, tmp_path, suffix):
    run = task_runs["embedding"]
    local, on_ray = tmp_path / f"local{suffix}", tmp_path / f"ray{suffix}"
    argv = predict_argv("embedding", run.model_dir, run.predict_file, local, *FP32, action="encode")
    assert main(argv) == 0
    argv = predict_argv("embedding", run.model_dir, run.predict_file, on_ray, *FP32, *RAY, action="encode")
    assert main(argv) == 0
    if suffix == ".jsonl":
        assert_close_records(read_jsonl(on_ray), read_jsonl(local))
        return
    # The vectors pass through the replicas' JSON records (7 decimals), the ids file is the same.
    np.testing.assert_allclose(np.load(on_ray), np.load(local), atol=1e-6)
    assert np.load(on_ray).dtype == np.float32
    ids = (tmp_path / "ray.ids.json").read_text(), (tmp_path / "local.ids.json").read_text()
    assert ids[0] == ids[1] and json.loads(ids[0])["ids"] == ["1", "2", "3"]


class DiesOnce(ray_stages.Replica):
    """A replica that kills its own process on the first batch any replica gets, once: whoever
    removes the marker file dies (``os._exit``: no clean-up, as a lost node or the OOM killer)."""

    marker: str = ""

    def __call__(self, batch):
        try:
            os.remove(self.marker)
        except FileNotFoundError:
            return super().__call__(batch)
        os._exit(1)


def test_a_replica_killed_mid_run_loses_and_repeats_no_row(ray_instance, task_runs, tmp_path, monkeypatch):
    run = task_runs["classification"]
    folder = tmp_path / "reviews"  # a folder of two CSV files, streamed: records name their file
    for name, rows in (("a.csv", REVIEWS * 3), ("b.csv", REVIEWS[::-1] * 2)):
        write(folder / name, "text,label\n" + "\n".join(rows) + "\n")
    expected = []
    for name in ("a.csv", "b.csv"):
        out = tmp_path / f"{name}.jsonl"
        assert main(predict_argv("classification", run.model_dir, folder / name, out, *FP32)) == 0
        # The local engine writes each labelled row's gold beside its prediction; the Ray engine
        # does not yet for classification (docs/batch-inference.md): compared without it.
        expected += [
            {"file": str(folder / name), **{k: v for k, v in record.items() if k != "gold"}}
            for record in read_jsonl(out)
        ]

    marker = write(tmp_path / "die-once", "")
    monkeypatch.setattr(DiesOnce, "marker", str(marker))
    monkeypatch.setattr(ray_engine, "Replica", DiesOnce)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    try:
        out = tmp_path / "ray.jsonl"
        assert main(predict_argv("classification", run.model_dir, folder, out, *FP32, *RAY)) == 0
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert not marker.exists()  # a replica did die
    found = read_jsonl(out)
    assert [(r["file"], r["line"]) for r in found] == [(r["file"], r["line"]) for r in expected]
    assert_close_records(found, expected)


def test_a_bad_row_fails_the_run_naming_its_file_and_line(ray_instance, task_runs, tmp_path, capsys):
    rows = [{"text": "a fine film"}, {"text": "  "}, {"text": "dull"}]
    inputs = write(tmp_path / "in.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    argv = predict_argv("classification", task_runs["classification"].model_dir, inputs, out, *RAY)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"encoder-tasks: error: {inputs} line 2: column 'text' is empty; every row needs text"
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--engine", "spark"], "--engine must be one of local, ray, found 'spark'"),
        (["--ray_workers", "4"], "--ray_workers applies to --engine ray only"),
        (["--engine", "ray", "--ray_workers", "0"], "--ray_workers must be at least 1, found 0"),
        (
            ["--engine", "ray", "--ray_address", "head-without-port"],
            "--ray_address 'head-without-port': expected",
        ),
        (["--engine", "ray", "--ray_address", "ray://127.0.0.1:PORT"], "no Ray cluster answers there"),
    ],
)
def test_bad_engine_flags_end_in_one_line(task_runs, tmp_path, capsys, flags, message):
    run = task_runs["classification"]
    flags = [f.replace("PORT", str(_closed_port())) for f in flags]
    assert (
        main(predict_argv("classification", run.model_dir, run.predict_file, tmp_path / "o.jsonl", *flags))
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("encoder-tasks: error: ") and message in err[0]
    assert not (tmp_path / "o.jsonl").exists()


def test_what_ray_does_not_run_is_refused(task_runs, tmp_path, capsys):
    run = task_runs["embedding"]
    argv = [
        *predict_argv("embedding", run.model_dir, run.predict_file, tmp_path / "o.jsonl", action="retrieve")
    ]
    assert main([*argv, "--corpus_file", str(run.predict_file), "--engine", "ray"]) == 2
    assert "--engine ray runs `predict` and `embedding encode`" in capsys.readouterr().err
    argv = predict_argv("embedding", run.model_dir, run.predict_file, tmp_path / "v.npy", action="encode")
    assert main([*argv, "--dimensions", "8", "--engine", "ray"]) == 2  # encode's own flag: not applied
    assert "--dimensions is not supported with --engine ray" in capsys.readouterr().err
    qa = task_runs["qa"]
    argv = ["qa", "predict", "--model_dir", str(qa.model_dir), "--question", "who?", "--context", "Ann."]
    assert main([*argv, "--output_file", str(tmp_path / "a.jsonl"), "--engine", "ray"]) == 2
    assert "--question answers one question in this process" in capsys.readouterr().err

"""No noise that looks like failure: transformers' "Token indices sequence length is longer than
the specified maximum" (the toolkit windows or cuts long texts itself) is dropped, the local
model copy is announced once per run, and ``make finetune``'s accelerate launch passes every
value accelerate would otherwise warn about."""

import logging
import re
import subprocess
import sys

from encoder_tasks import backbone
from tests.helpers import REPO, subprocess_env

LONG_TEXT = """
import sys
from transformers import AutoTokenizer
if sys.argv[2] == "toolkit":
    from encoder_tasks.log import configure_logging; configure_logging()
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
tokenizer.model_max_length = 8
assert len(tokenizer("word " * 50)["input_ids"]) > 8
"""


def test_the_too_long_sequence_warning_is_dropped(tiny_bert):
    def stderr(mode: str) -> str:
        env = subprocess_env(TRANSFORMERS_VERBOSITY="warning")  # as users run it (tests run at error)
        argv = [sys.executable, "-c", LONG_TEXT, str(tiny_bert), mode]
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stderr

    assert "Token indices sequence length is longer" in stderr("plain")  # what transformers says
    assert "Token indices sequence length" not in stderr("toolkit")


def test_the_local_copy_is_announced_once(monkeypatch, caplog):
    monkeypatch.setattr(backbone, "_SAID_MIRROR", set())
    monkeypatch.setattr(
        backbone, "LOCAL_MIRRORS", {"org/model": ("tests.helpers", "repo_path")}, raising=False
    )
    import tests.helpers

    monkeypatch.setattr(tests.helpers, "repo_path", lambda: REPO, raising=False)
    with caplog.at_level(logging.INFO, logger="encoder_tasks.backbone"):
        for _ in range(3):
            assert backbone.resolve_model_path("org/model") == str(REPO)
    said = [r.getMessage() for r in caplog.records if "loading the copy shipped" in r.getMessage()]
    assert said == [f"org/model: loading the copy shipped in package tests.helpers ({REPO})"]


def test_make_finetune_launch_passes_every_accelerate_default():
    makefile = (REPO / "Makefile").read_text()
    flags = re.search(r"^\s*LAUNCH_FLAGS := (--num_processes.*)$", makefile, re.M).group(1).split()
    accelerate = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *flags,
        "-m",
        "encoder_tasks.cli",
        "--help",
    ]
    done = subprocess.run(
        accelerate, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "had defaults used instead" not in done.stderr, done.stderr

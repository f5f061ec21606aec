"""Test configuration: offline always, tiny models built in code, once per session."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # any download attempt fails loudly
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from encoder_tasks.log import configure_logging  # noqa: E402
from encoder_tasks.testing import FAMILIES, make_tiny_model  # noqa: E402

# The toolkit speaks through logging, as the CLI shows it; tests that call library functions
# directly read the same lines from stdout/stderr.
configure_logging()

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("ENCODER_TASKS_DATA_DIR", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Directory of a tiny random encoder per family, built once per session."""
    root = tmp_path_factory.mktemp("tiny-models")
    return {family: make_tiny_model(family, str(root / family)) for family in FAMILIES}


@pytest.fixture(scope="session")
def tiny_bert(tiny_models):
    return tiny_models["bert"]


@pytest.fixture
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent")
    return SHARED_DATA


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


#: CLI flags for a few-step training run on the tiny files the CLI tests write: one epoch of
#: batch 4, a log line per step, no checkpoints, no trackers. Tests add their task's own flags
#: after these (a repeated flag takes its last value).
FAST_TRAINING = [
    "--num_train_epochs",
    "1",
    "--per_device_train_batch_size",
    "4",
    "--logging_steps",
    "1",
    "--save_strategy",
    "no",
    "--report_to",
    "none",
]

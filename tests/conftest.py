"""Test configuration: offline always, tiny models built in code, once per session.

Fixtures only (shared helpers are in ``tests/helpers.py``, tiny data sets in ``tests/samples.py``),
and the hook that makes each test's tier follow its folder:

- ``tests/unit/``: fast, no CLI (``make test``);
- ``tests/cli/``: the real CLI end to end on tiny models (marked ``cli``; in ``make test``);
- ``tests/slow/``: marked ``slow`` (``make test-slow``);
- ``tests/multiprocess/``: marked ``multiprocess`` (``make test-multiprocess``).

A test skipped because a package of the development install is missing (``pytest.importorskip``
of a module in ``REQUIRED_MODULES``) FAILS instead: ``make install`` installs them, so such a skip
means a broken environment, not an optional feature (``ENCODER_TASKS_ALLOW_MISSING=1`` lets them
skip, for a partial install).
"""

import os
import re

os.environ["HF_HUB_OFFLINE"] = "1"  # any download attempt fails loudly
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Models load on torch unless a test asks for a backend (tests/cli/test_backends.py): ``auto``
# would export and time every tiny model the suite loads; exported graphs never go to ~/.cache.
os.environ.setdefault("ENCODER_TASKS_BACKEND", "torch")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from encoder_tasks.log import configure_logging  # noqa: E402
from encoder_tasks.testing import FAMILIES, make_tiny_model  # noqa: E402
from tests.helpers import SHARED_DATA, resume_argv, resume_csv  # noqa: E402

# The toolkit speaks through logging, as the CLI shows it; tests that call library functions
# directly read the same lines from stdout/stderr.
configure_logging()

TESTS = Path(__file__).resolve().parent
#: The marker each test folder gives its tests (None: none); a tier marker set by hand must match.
FOLDER_MARKERS = {"unit": None, "cli": "cli", "slow": "slow", "multiprocess": "multiprocess"}
TIER_MARKERS = ("slow", "multiprocess")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the markers must be there by then
def pytest_collection_modifyitems(config, items):
    misplaced = []
    for item in items:
        path = Path(item.path)
        if not path.is_relative_to(TESTS) or not path.name.startswith("test_"):
            continue  # not a test module of ours (e.g. a doctest of tests/helpers.py)
        folder = path.relative_to(TESTS).parts[0]
        if folder not in FOLDER_MARKERS:
            misplaced.append(f"{item.nodeid}: outside tests/{{{','.join(FOLDER_MARKERS)}}}/")
            continue
        wanted = FOLDER_MARKERS[folder]
        wrong = [m for m in TIER_MARKERS if m != wanted and item.get_closest_marker(m)]
        if wrong:
            misplaced.append(f"{item.nodeid}: marked {', '.join(wrong)} but in tests/{folder}/")
        if wanted and not item.get_closest_marker(wanted):
            item.add_marker(wanted)
    if misplaced:
        raise pytest.UsageError(
            "tests in the wrong folder (the folder decides the tier; move them):\n  " + "\n  ".join(misplaced)
        )


#: Modules of the extras the Makefile's install line installs (pyproject.toml: dev, onnx, plots,
#: search, peft, sentence-transformers, chinese, tensorboard): a test may not skip for want of them.
REQUIRED_MODULES = frozenset(
    {
        "bm25s",
        "fastapi",
        "httptools",
        "httpx",
        "huggingface_hub",
        "hypothesis",
        "jieba",
        "langchain_openai",
        "matplotlib",
        "nncf",
        "onnx",
        "onnxruntime",
        "onnxscript",
        "openai",
        "openvino",
        "optuna",
        "peft",
        "ray",
        "sentence_transformers",
        "tensorboard",
        "uvicorn",
        "uvloop",
    }
)
ALLOW_MISSING = "ENCODER_TASKS_ALLOW_MISSING"
_IMPORT_SKIP = re.compile(r"could not import '([\w.]+)'")  # pytest.importorskip's reason


def missing_required(reason: str) -> str | None:
    """The required module a skip ``reason`` says could not be imported, else None.

    Example:
        >>> missing_required("could not import 'jieba': No module named 'jieba'")
        'jieba'
        >>> missing_required("could not import 'flash_attn': No module named 'flash_attn'") is None
        True
    """
    match = _IMPORT_SKIP.search(reason)
    if match and match.group(1).split(".")[0] in REQUIRED_MODULES:
        return match.group(1)
    return None


def _fail_required_skip(report, where: str) -> None:
    if not report.skipped or hasattr(report, "wasxfail") or os.environ.get(ALLOW_MISSING) == "1":
        return
    longrepr = report.longrepr
    module = missing_required(longrepr[2] if isinstance(longrepr, tuple) else str(longrepr))
    if module is not None:
        report.outcome = "failed"
        report.longrepr = (
            f"{where} skipped because {module!r} is missing, but the development install has it: run "
            f"`make install` (the extras in the Makefile's install line), or set {ALLOW_MISSING}=1 to let "
            "it skip"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    _fail_required_skip(report, item.nodeid)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield  # a module-level importorskip skips the whole module at collection
    _fail_required_skip(report, collector.nodeid)
    return report


@pytest.fixture(autouse=True)
def _a_quiet_machine(request, monkeypatch):
    """``--backend auto`` does not remember a choice timed while the load average is above the
    core count (``encoder_tasks.runtimes._busy``). Tests run beside other jobs and load the
    machine themselves, so they see a quiet one, except those marked ``real_load``."""
    if "real_load" in request.keywords:
        return
    from encoder_tasks import runtimes

    monkeypatch.setattr(runtimes, "_busy", lambda: None)


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


@pytest.fixture(scope="session")
def resume_reference(tmp_path_factory, tiny_bert):
    """``(model, data, reference run)``: the uninterrupted run that resumed runs must reproduce."""
    from encoder_tasks.cli import main

    root = tmp_path_factory.mktemp("resume")
    data = resume_csv(root / "train.csv")
    reference = root / "reference"
    assert main(resume_argv(tiny_bert, data, reference)) == 0
    return tiny_bert, data, reference


@pytest.fixture(scope="session")
def task_runs(tmp_path_factory, tiny_bert):
    """``{task: tests.runs.TaskRun}``: one tiny trained run per task (serve, Ray, quantize tests)."""
    from tests.runs import build_task_runs

    return build_task_runs(tmp_path_factory.mktemp("task-runs"), tiny_bert)

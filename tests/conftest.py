"""Test configuration: offline always, tiny models built in code, once per session.

Fixtures only (shared helpers are in ``tests/helpers.py``, tiny data sets in ``tests/samples.py``),
and the hook that makes each test's tier follow its folder:

- ``tests/unit/``: fast, no CLI (``make test``);
- ``tests/cli/``: the real CLI end to end on tiny models (marked ``cli``; in ``make test``);
- ``tests/slow/``: marked ``slow`` (``make test-slow``);
- ``tests/multiprocess/``: marked ``multiprocess`` (``make test-multiprocess``).
"""

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

"""A test that skips because a package of the development install is missing FAILS (the hook in
``tests/conftest.py``); other skips stay skips.

The hook runs in a separate pytest on a few tests written here, where a required module is made
unimportable (``sys.modules[name] = None``) so ``pytest.importorskip`` skips exactly as it would
without the package.
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

from tests.conftest import ALLOW_MISSING, REQUIRED_MODULES, missing_required
from tests.helpers import REPO, subprocess_env, write

HIDE = "import sys\nimport pytest\nsys.modules[{name!r}] = None  # as if not installed\n"
TESTS = """
def test_required_missing():
    pytest.importorskip("jieba")

def test_optional_missing():
    pytest.importorskip("flash_attn_surely_absent")

def test_plain_skip():
    pytest.skip("needs a CUDA GPU")

@pytest.fixture
def tb():
    return pytest.importorskip("tensorboard")

def test_required_missing_in_a_fixture(tb):
    pass

def test_passes():
    pass
"""


def outcomes(tmp_path, **env: str) -> dict:
    """Run pytest with the hook (``-p tests.conftest``) on the tests above: {test: outcome}, and
    the run's ``exit code`` and ``output``."""
    write(tmp_path / "test_inside.py", HIDE.format(name="jieba") + HIDE.format(name="tensorboard") + TESTS)
    # a module whose import skips it whole: a collection report, not a test report
    write(
        tmp_path / "test_module_level.py",
        HIDE.format(name="onnxruntime") + 'pytest.importorskip("onnxruntime")\n',
    )
    cmd = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q"]
    # a failed collection stops the run otherwise; the junit report gives each test's outcome
    cmd += [
        "--continue-on-collection-errors",
        "--junitxml",
        "report.xml",
        "test_inside.py",
        "test_module_level.py",
    ]
    done = subprocess.run(
        cmd, cwd=tmp_path, env=subprocess_env(**env), capture_output=True, text=True, timeout=300
    )
    found = {}
    for case in ElementTree.parse(tmp_path / "report.xml").iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[case.get("name") or case.get("classname")] = kinds[0] if kinds else "passed"
    found["exit code"] = done.returncode
    return found | {"output": done.stdout}


def test_a_skip_for_a_required_package_fails_and_others_skip(tmp_path):
    found = outcomes(tmp_path)
    assert found["test_required_missing"] == "failure", found["output"]
    assert found["test_required_missing_in_a_fixture"] == "error"  # failed in setup: reported as an error
    assert found["test_module_level"] == "error"  # the module failed to collect
    assert found["test_optional_missing"] == found["test_plain_skip"] == "skipped"
    assert found["test_passes"] == "passed" and found["exit code"] == 1
    assert "'jieba' is missing, but the development install has it: run `make install`" in found["output"]


def test_the_escape_hatch_lets_them_skip(tmp_path):
    found = outcomes(tmp_path, **{ALLOW_MISSING: "1"})
    assert found["test_required_missing"] == found["test_required_missing_in_a_fixture"] == "skipped"
    assert found["exit code"] == 0, found["output"]


@pytest.mark.parametrize(
    ("reason", "module"),
    [
        (
            "could not import 'sentence_transformers': No module named 'sentence_transformers'",
            "sentence_transformers",
        ),
        ("Skipped: could not import 'onnxruntime.capi': boom", "onnxruntime.capi"),
        ("could not import 'flash_attn': No module named 'flash_attn'", None),
        ("needs a CUDA GPU and the flash-attn package", None),
        ("tensorboard is not wanted here", None),  # names the package, but is no failed import
    ],
)
def test_which_skips_name_a_required_module(reason, module):
    assert missing_required(reason) == module


def test_the_required_modules_are_installed():
    """What the development install must have is importable here (else the hook fails its tests)."""
    import importlib.util

    assert not [name for name in sorted(REQUIRED_MODULES) if importlib.util.find_spec(name) is None]


def test_the_required_modules_are_the_makefile_extras():
    """REQUIRED_MODULES follows the extras the Makefile installs (DEV_EXTRAS, from pyproject.toml);
    the dev tools that no test imports (pytest, ruff) aside."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = re.search(r"^DEV_EXTRAS\s*:=\s*(\S+)", (REPO / "Makefile").read_text(), re.M).group(1).split(",")
    optional = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.match(r"[\w.-]+", spec).group(0) for extra in extras for spec in optional[extra]}
    assert {n.replace("-", "_") for n in names} - {"pytest", "ruff"} == REQUIRED_MODULES

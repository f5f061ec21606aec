"""``encoder-tasks recipes ls|cp|validate``: in the checkout, and from a wheel installed outside it.

The wheel test builds the wheel offline (``pip wheel --no-build-isolation``) from a copy of the
package's sources, installs it with ``--no-deps`` into a fresh virtual environment that sees the
test environment's dependencies through a ``.pth`` file (not its ``encoder_tasks``), and runs the
installed ``encoder-tasks`` script from a folder outside the checkout.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from encoder_tasks.cli import main
from tests.helpers import REPO, write

RECIPES = REPO / "recipes"
#: Every task recipe in the checkout, by listed name, in listing order (accelerate/ holds launch configs).
RECIPE_NAMES = [
    str(p.relative_to(RECIPES).with_suffix(""))
    for p in sorted(RECIPES.glob("*/*.yaml"))
    if p.parent.name != "accelerate"
]


def test_recipes_list_copy_validate(tmp_path, capsys):
    assert main(["recipes"]) == 0
    listed = capsys.readouterr().out
    assert "classification/default" in listed and "cls/sst2/train.tsv" in listed
    target = tmp_path / "mine.yaml"
    assert main(["recipes", "cp", "classification/default", str(target)]) == 0
    assert target.read_text().startswith("#")
    assert main(["recipes", "cp", "classification/default", str(target)]) == 2  # never overwrites
    capsys.readouterr()
    assert main(["recipes", "validate", str(target), "--task", "classification"]) == 0
    assert "valid classification recipe" in capsys.readouterr().out
    target.write_text(target.read_text() + "learning_rat: 1e-4\n")
    assert main(["recipes", "validate", str(target), "--task", "classification"]) == 2
    assert "did you mean 'learning_rate'" in capsys.readouterr().err
    assert main(["recipes", "cp", "classification/defualt", str(tmp_path / "b.yaml")]) == 2
    assert "did you mean classification/default" in capsys.readouterr().err


def test_recipes_validate_reads_accelerate_configs(tmp_path, capsys):
    good = write(
        tmp_path / "ddp.yaml",
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 2\n",
    )
    assert main(["recipes", "validate", str(good)]) == 0
    assert "valid accelerate (MULTI_GPU, 2 processes) config" in capsys.readouterr().out
    bad = write(tmp_path / "bad.yaml", "compute_environment: LOCAL_MACHINE\n")
    assert main(["recipes", "validate", str(bad)]) == 2
    assert "not a valid accelerate config" in capsys.readouterr().err


def test_every_recipe_is_listed_from_the_package():
    from encoder_tasks.recipes import list_recipes, recipes_root

    assert recipes_root().resolve() == RECIPES.resolve()  # the editable install maps the package here
    assert [r["name"] for r in list_recipes()] == RECIPE_NAMES


# ---- from an installed wheel ---------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)


def _run_all(commands: list[list[str]], cwd: Path) -> list[subprocess.CompletedProcess]:
    """Run ``commands`` side by side; their results in order."""
    started = [
        subprocess.Popen(c, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for c in commands
    ]
    results = []
    for command, process in zip(commands, started):
        out, err = process.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(command, process.returncode, out, err))
    return results


def _build_wheel(root: Path) -> Path:
    """The wheel, built from a copy of what the wheel is made of (the checkout stays untouched)."""
    source = root / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("encoder_tasks", "recipes"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip"]
    built = _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", "dist", str(source)], root
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (root / "dist").glob("encoder_tasks-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(wheel, bin folder, site-packages)`` of encoder-tasks installed from a fresh wheel."""
    root = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(root)
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root
        ).stdout.strip()
    )
    # The dependencies (torch, transformers, ...) come from this environment; a path in a .pth
    # file is added as it is, so this environment's editable encoder_tasks finder does not come too.
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    done = _run([*pip, "install", "--no-deps", "--no-index", "-q", str(wheel)], root)
    assert done.returncode == 0, done.stderr[-3000:]
    return wheel, venv / "bin", site


def test_wheel_holds_every_package_and_recipe(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {str(p.parent.relative_to(REPO)) for p in (REPO / "encoder_tasks").rglob("__init__.py")}
    missing = sorted(p for p in packages if f"{p}/__init__.py" not in names)
    assert not missing, f"packages missing from the wheel (list them in pyproject.toml): {missing}"
    recipes = {f"encoder_tasks/recipes_data/{p.relative_to(RECIPES)}" for p in RECIPES.rglob("*.yaml")}
    assert recipes <= names, sorted(recipes - names)


def test_installed_wheel_lists_copies_and_validates_recipes(installed, tmp_path):
    _, bin_dir, site = installed
    work = tmp_path / "elsewhere"  # outside the checkout: nothing can come from recipes/ there
    work.mkdir()
    where = _run([str(bin_dir / "python"), "-c", "import encoder_tasks; print(encoder_tasks.__file__)"], work)
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout + where.stderr
    cli = str(bin_dir / "encoder-tasks")

    listed = _run([cli, "recipes", "ls"], work)
    assert listed.returncode == 0, listed.stderr
    shown = [line.split()[0] for line in listed.stdout.splitlines() if "/" in line.split(" ", 1)[0]]
    assert shown == RECIPE_NAMES, listed.stdout

    copied = _run([cli, "recipes", "cp", "classification/default", "mine.yaml"], work)
    assert copied.returncode == 0, copied.stderr
    assert "encoder-tasks classification train --config mine.yaml" in copied.stdout
    packaged = site / "encoder_tasks" / "recipes_data" / "classification" / "default.yaml"
    mine = (work / "mine.yaml").read_bytes()
    assert mine == packaged.read_bytes() == (RECIPES / "classification" / "default.yaml").read_bytes()

    (work / "bad.yaml").write_bytes(mine + b"learning_rat: 1e-4\n")
    # Both at once: each spends seconds importing transformers for TrainingArguments.
    valid, invalid = _run_all(
        [
            [cli, "recipes", "validate", "mine.yaml"],
            [cli, "recipes", "validate", "bad.yaml", "--task", "classification"],
        ],
        work,
    )
    assert valid.returncode == 0, valid.stderr
    assert "mine.yaml: valid classification recipe" in valid.stdout
    assert invalid.returncode == 2, invalid.stdout + invalid.stderr
    assert "learning_rat" in invalid.stderr and "did you mean 'learning_rate'" in invalid.stderr

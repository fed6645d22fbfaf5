"""The wheel: built from the sources alone, installed into a fresh virtual environment,
it runs ``evalcore`` without the repository, and says one version everywhere.

A fresh environment that installed the dependencies from the package index would take
minutes; the new environment instead sees this interpreter's site-packages through a
``.pth`` path entry. That entry puts the directory on ``sys.path`` without running the
``.pth`` files inside it, so the editable install of the repository (a ``.pth`` that
installs an import finder) stays out: ``evalcore`` there can only be the wheel's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, object]:
    """Build the wheel from a copy of the sources, install it into a new venv."""
    work = tmp_path_factory.mktemp("wheel")
    # A copy, so the build leaves no build/ or egg-info in the work tree and takes
    # nothing that is not a source file.
    source = work / "source"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("evalcore", "flows"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    # Without the repository on the path: PYTHONPATH would hand the sources to every child.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    dist = work / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(source)], work, env, 600)
    wheel = next(dist.glob("evalcore-*.whl"))
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work, env)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet", str(wheel)], work, env)
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work, env).stdout.strip())
    (purelib / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    outside = work / "elsewhere"
    outside.mkdir()
    return {"wheel": wheel, "venv": venv, "python": python, "evalcore": venv / "bin" / "evalcore", "cwd": outside, "env": env}


def test_wheel_holds_both_packages_and_the_entry_points(installed):
    with zipfile.ZipFile(installed["wheel"]) as wheel:
        names = wheel.namelist()
        entry_points = next(wheel.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "evalcore/__init__.py" in names and "evalcore/cli/__init__.py" in names
    assert "flows/__init__.py" in names and "flows/cli.py" in names
    assert "evalcore = evalcore.cli:command" in entry_points
    assert "run = flows.cli:run_command" in entry_points


def test_installed_wheel_is_what_runs_outside_the_repository(installed):
    where = _run([str(installed["python"]), "-c", "import evalcore, flows; print(evalcore.__file__); print(flows.__file__)"],
                 installed["cwd"], installed["env"]).stdout.split()
    for path in where:
        assert Path(path).resolve().is_relative_to(Path(installed["venv"]).resolve()), path
    assert "usage" in _run([str(installed["evalcore"]), "run", "--help"], installed["cwd"], installed["env"]).stdout


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_installed_wheel_evaluates(installed):
    cwd, env, evalcore = installed["cwd"], installed["env"], str(installed["evalcore"])
    _run([evalcore, "synth", "--n-ref", "200", "--out", "data"], cwd, env)
    _run([evalcore, "evaluate", "-p", "data/predicted.parquet", "-r", "data/reference.parquet", "-o", "m.json"], cwd, env)
    metrics = json.loads((cwd / "m.json").read_text())
    assert metrics["count_reference"] > 100 and 0.0 <= metrics["f1"] <= 1.0


def test_one_version_everywhere(installed):
    """The wheel's metadata, ``evalcore --version`` and the evaluator version of the
    evidence bundle are one number, written once (evalcore/_version.py)."""
    cwd, env = installed["cwd"], installed["env"]
    namespace: dict[str, str] = {}
    exec((ROOT / "evalcore" / "_version.py").read_text(), namespace)
    version = namespace["__version__"]
    assert installed["wheel"].name.startswith(f"evalcore-{version}-")
    assert _run([str(installed["evalcore"]), "--version"], cwd, env).stdout.strip() == f"evalcore {version}"
    script = (
        "from importlib import metadata; from evalcore.evidence import evaluation_contract;"
        "c = evaluation_contract({}, parameters={}, metric_parameters={}, input_manifest_sha256='0',"
        " inputs={'inputs': []}, labels={}, run_id='r');"
        "print(metadata.version('evalcore')); print(c['evaluator']['version'])"
    )
    assert _run([str(installed["python"]), "-c", script], cwd, env).stdout.split() == [version, version]

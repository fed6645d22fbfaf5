"""Report tests: two real run directories for the session, and Debian's chromium.

``run_dirs`` generates one small layer pair (``evalcore synth``, 500 fields) and runs
``evalcore run`` on it twice, at the same time, in subprocesses: ``full`` (strata, size
classes, AOIs, scores, 20 bootstrap resamples, a gates file) and ``minimal`` (no option:
no strata, size classes, AOIs, scores or intervals). Both talk to the session's
temporary Prefect server (``prefect_server``, tests/conftest.py: ``PREFECT_API_URL``)
instead of starting an ephemeral server each (tests/flows/test_newcomer.py runs
``evalcore run`` with its own). ``reports`` is the ``report.html`` the flow's
``html-report`` task built in each (:func:`evalcore.html_report.build_report`, which
test_html_report.py also calls in this process to rebuild a copy).

``chromium`` is the path of Debian's ``chromium``; when it is missing, the fixture
installs it with ``apt-get`` (the machine's package registry), and skips only when that
cannot be done (not root, no apt-get, or the install fails).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_BIN = Path(sys.executable).parent
N_REF = 500
SEED = 2
GATES = """gates:
  - id: G-F1-OVERALL
    metric: f1
    op: ">="
    threshold: 0.0
  - id: G-RECALL-CI
    metric: recall
    op: ">="
    threshold: 0.0
    use: ci_lower
"""


def _evalcore() -> str:
    exe = _BIN / "evalcore"
    return str(exe) if exe.exists() else "evalcore"


@pytest.fixture(scope="session")
def run_dirs(tmp_path_factory: pytest.TempPathFactory, prefect_server: str) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("report-runs")
    data = root / "data"
    subprocess.run([_evalcore(), "synth", "--n-ref", str(N_REF), "--seed", str(SEED), "--out", str(data)], check=True, capture_output=True, timeout=300)
    gates = root / "gates.yaml"
    gates.write_text(GATES, encoding="utf-8")
    layers = ["-p", str(data / "predicted.parquet"), "-r", str(data / "reference.parquet"), "--workers", "1"]
    commands = {
        "full": layers + ["--strata-column", "stratum", "--size-bins", "auto", "--aoi", str(data / "aoi.parquet"), "--aoi-id-column", "aoi_id",
                          "--score-column", "score", "--class-column", "crop", "--bootstrap", "20", "--gates", str(gates),
                          "-o", str(root / "full")],
        "minimal": layers + ["-o", str(root / "minimal")],
    }
    env = dict(os.environ, PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_API_URL=prefect_server)
    procs = {name: subprocess.Popen([_evalcore(), "run", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
             for name, args in commands.items()}
    out = {}
    for name, proc in procs.items():
        log, _ = proc.communicate(timeout=600)
        run_dir = root / name
        if proc.returncode != 0 or not (run_dir / "metrics.json").is_file():
            tail = log.decode(errors="replace")[-2000:]
            pytest.fail(f"evalcore run ({name}) exited {proc.returncode} without a complete run directory:\n{tail}")
        out[name] = run_dir
    return out


@pytest.fixture(scope="session")
def reports(run_dirs: dict[str, Path]) -> dict[str, Path]:
    out = {name: path / "report.html" for name, path in run_dirs.items()}
    for name, page in out.items():
        assert page.is_file() and page.stat().st_size > 10_000, f"evalcore run ({name}) wrote no report.html"
    return out


def _install_chromium() -> str | None:
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return None
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for attempt in (["apt-get", "install", "-y", "-q", "chromium"], ["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        done = subprocess.run(attempt, env=env, capture_output=True, timeout=900)
        if attempt[1] == "install" and done.returncode == 0:
            break
    return shutil.which("chromium")


@pytest.fixture(scope="session")
def chromium() -> str:
    path = shutil.which("chromium") or _install_chromium()
    if path is None:
        pytest.skip("Debian's chromium is not installed and cannot be installed here (apt-get install -y chromium needs root and the package registry)")
    return path

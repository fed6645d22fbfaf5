"""The markers ``cluster``, ``prefect``, ``browser`` and ``cli`` sit where tests/markers.py says.

``make quick`` runs the tests without them; its selection, collected in a subprocess,
keeps no test that uses a session fixture starting a cluster, a Prefect server or a
browser, and drops every test of the modules that start their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.markers import FIXTURE_MARKERS, MARKERS, QUICK, subprocess_needs

ROOT = Path(__file__).resolve().parents[2]


def _collect(tmp_path: Path, expression: str) -> dict[str, dict[str, list[str]]]:
    """Node id -> fixtures and markers of the tests ``-m expression`` selects."""
    report = tmp_path / f"collected-{abs(hash(expression))}.json"
    env = dict(os.environ, EVALCORE_MARKERS_REPORT=str(report))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "tests.markers", "-m", expression],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(report.read_text(encoding="utf-8"))


@pytest.mark.slow  # 17 s: a whole collection in a subprocess (make slow); make quick's EVALCORE_CHECK_MARKERS fails an unmarked test
def test_the_quick_selection_keeps_no_test_of_a_cluster_a_server_a_browser_or_a_subprocess(tmp_path):
    quick = _collect(tmp_path, QUICK)
    using = {node: sorted(FIXTURE_MARKERS.keys() & set(seen["fixtures"])) for node, seen in quick.items()}
    assert not {node: names for node, names in using.items() if names}
    assert not [node for node, seen in quick.items() if {*MARKERS, "slow"} & set(seen["markers"])]
    # Modules whose every test starts a cluster, a flow, a server, a browser or evalcore.
    for module in ("tests/distributed/test_end_to_end.py", "tests/distributed/test_warm.py", "tests/flows/test_evaluate_flow.py",
                   "tests/flows/test_local_stack.py", "tests/report/test_browser.py",
                   "tests/reliability/test_faults.py", "tests/reliability/test_gates_bombs.py"):
        assert not [node for node in quick if node.startswith(module)], module
    assert len(quick) > 500  # the unit and property tests are kept
    # A module that calls the command line in this process keeps only its subprocess case out.
    tamper = [node for node in quick if node.startswith("tests/reliability/test_verify_tamper.py")]
    assert tamper and not [node for node in tamper if "test_an_added_part_file_is_an_error" in node]


def test_make_quick_selects_by_the_same_expression():
    assert f'-m "{QUICK}"' in (ROOT / "Makefile").read_text(encoding="utf-8")


def test_a_subprocess_is_classified_by_its_command_line():
    assert subprocess_needs([sys.executable, "-m", "evalcore.cli", "run", "-p", "a", "-r", "b"]) == {"prefect", "cluster", "cli"}
    assert subprocess_needs(["/venv/bin/evalcore", "evaluate", "-p", "a", "-r", "b", "--cluster", "local"]) == {"cluster", "cli"}
    assert subprocess_needs(["/venv/bin/evalcore", "evaluate", "-p", "a", "-r", "b"]) == {"cli"}
    assert subprocess_needs(["/venv/bin/evalcore", "run", "--help"]) == {"cli"}
    assert subprocess_needs(["/venv/bin/evalcore", "synth", "--n-ref", "10", "--out", "d"]) == {"cli"}
    assert subprocess_needs(["/venv/bin/dask", "scheduler", "--port", "0"]) == {"cluster"}
    assert subprocess_needs(["/usr/bin/chromium", "--headless", "about:blank"]) == {"browser"}
    assert subprocess_needs([sys.executable, "-c", "from distributed import LocalCluster; LocalCluster()"]) == {"cluster"}
    assert subprocess_needs([sys.executable, "-c", "from flows.params import EvaluateParams"]) == set()
    assert subprocess_needs(["bash", "-n", "start.sh"]) == set()

"""What a newcomer trips over in the acceptance gates (issue 33, items 1 and 2), through the CLI.

* ``use: ci_lower`` prints the bound and the metric's value, never the bound alone.
* A metric path no run can hold (``recal``) is refused (exit 2, the rule and the closest
  path named, nothing written); a path a run can hold but this one lacks stays
  ``not_evaluable``; every path of a real ``metrics.json`` with every option is accepted.
* An unquoted ``op: >=`` says to quote it.
* ``deploy/gates.example.yaml`` names the files ``evalcore gate`` and ``run`` write.
* ``evalcore run --gates`` that does not pass prints the summary and the rules that did
  not pass, exits 1 without a traceback.

The run directories of ``evalcore gate`` are a hand-written ``metrics.json`` (the command
reads nothing else); the one ``evalcore run`` talks to the session's Prefect server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalcore.gates import Gate, check_metric_paths
from tests.common import cli_in_process

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "gates.example.yaml"
_BIN = Path(sys.executable).parent


def _evalcore() -> str:
    exe = _BIN / "evalcore"
    return str(exe) if exe.exists() else "evalcore"


def _cli(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """The command in this process (:func:`tests.common.cli_in_process`); with ``env``, the
    installed ``evalcore`` in a subprocess of that environment (``evalcore run`` here)."""
    if env is None:
        return cli_in_process(*args, cwd=ROOT)
    return subprocess.run([_evalcore(), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    metrics = {"precision": 0.9, "recall": 0.816, "f1": 0.86, "count_reference": 200, "ap50": None,
               "bootstrap": {"n_resamples": 50, "ci": {"recall": [0.81, 0.83]}}}
    (run / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    return run


def _gates(tmp_path: Path, text: str, name: str = "gates.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_ci_lower_prints_the_bound_and_the_value(tmp_path):
    run = _run_dir(tmp_path)
    gates = _gates(tmp_path, "gates:\n  - {id: G-R, metric: recall, op: '>=', threshold: 0.75, use: ci_lower}\n")
    done = _cli("gate", str(run), str(gates))
    assert done.returncode == 0, done.stderr
    assert "recall ci_lower 0.810 (value 0.816) >= 0.75" in done.stdout, done.stdout
    written = json.loads((run / "acceptance-gates.json").read_text(encoding="utf-8"))
    assert written["rules"][0]["observed"] == 0.81 and written["rules"][0]["value"] == 0.816


def test_a_path_no_run_can_hold_is_refused_naming_the_closest(tmp_path):
    run = _run_dir(tmp_path)
    for metric, closest in (("recal", "recall"), ("per_stratum.*.f11", "per_stratum.*.f1")):
        gates = _gates(tmp_path, f"gates:\n  - {{id: G-OK, metric: f1, op: '>=', threshold: 0}}\n"
                                 f"  - {{id: G-TYPO, metric: '{metric}', op: '>=', threshold: 0.5}}\n")
        done = _cli("gate", str(run), str(gates))
        assert done.returncode == 2, (metric, done.stdout, done.stderr)
        assert "G-TYPO" in done.stderr and repr(closest) in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not list(run.glob("acceptance-gates*.json"))


def test_a_path_this_run_lacks_stays_not_evaluable(tmp_path):
    run = _run_dir(tmp_path)
    gates = _gates(tmp_path, "gates:\n  - {id: G-AP, metric: ap50, op: '>=', threshold: 0.5}\n"
                             "  - {id: G-STRATA, metric: per_stratum.*.f1, op: '>=', threshold: 0.5}\n")
    done = _cli("gate", str(run), str(gates))
    assert done.returncode == 3, done.stderr
    assert "value is null" in done.stdout and "no metric at this path" in done.stdout


def test_an_unquoted_comparison_says_to_quote_it(tmp_path):
    run = _run_dir(tmp_path)
    gates = _gates(tmp_path, "gates:\n  - id: G\n    metric: recall\n    op: >=\n    threshold: 0.5\n")
    done = _cli("gate", str(run), str(gates))
    assert done.returncode == 2
    assert 'quote the comparison, op: ">="' in done.stderr and "line 4" in done.stderr, done.stderr
    assert "chomping" not in done.stderr


def test_the_example_names_the_files_gate_writes(tmp_path):
    text = EXAMPLE.read_text(encoding="utf-8")
    assert "acceptance-gates.vN.json" in text and "acceptance-gates.json" in text
    assert "min_support" in text and "below_support: block" in text and 'op: ">="' in text
    run = _run_dir(tmp_path)
    # A run of the flow always holds acceptance-gates.json ("not_configured" without --gates).
    (run / "acceptance-gates.json").write_text('{"state": "not_configured"}', encoding="utf-8")
    easy = _gates(tmp_path, "gates:\n  - {id: G, metric: recall, op: '>=', threshold: 0}\n")
    done = _cli("gate", str(run), str(easy))
    assert done.returncode == 0, done.stderr
    assert (run / "acceptance-gates.v2.json").is_file() and "acceptance-gates.v2.json" in done.stdout


@pytest.fixture(scope="module")
def every_option_metrics(tmp_path_factory) -> dict:
    """metrics.json of ``evalcore evaluate`` with every family and grouping asked for."""
    out = tmp_path_factory.mktemp("every_option")
    assert _cli("synth", "--n-ref", "120", "--seed", "3", "--out", str(out / "s"), timeout=300).returncode == 0
    s = out / "s"
    done = _cli("evaluate", "-p", str(s / "predicted.parquet"), "-r", str(s / "reference.parquet"), "--strata-column", "stratum",
                "--size-bins", "auto", "--bootstrap", "3", "--aoi", str(s / "aoi.parquet"), "--aoi-id-column", "aoi_id",
                "--score-column", "score", "--annotated-area", str(s / "annotated.parquet"), "--score-threshold", "0.5",
                "--precision-targets", "0.9", "--boundary-tolerance-m", "2", "--pixel-gsd-m", "10", "--boundary-iou-width-m", "5",
                "--class-column", "crop",
                "--study-area", str(s / "aoi.parquet"), "--training-area", str(s / "annotated.parquet"),
                "-o", str(out / "metrics.json"), "-q", timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))


def _paths(node: object, prefix: tuple[str, ...] = ()) -> list[str]:
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in _paths(v, (*prefix, str(k)))]
    if isinstance(node, list) and node and all(isinstance(v, dict) for v in node):
        return [p for i, v in enumerate(node) for p in _paths(v, (*prefix, str(i)))]
    return [".".join(prefix)]


def test_every_path_of_a_real_run_is_a_path_a_run_can_hold(every_option_metrics):
    paths = _paths(every_option_metrics)
    assert len(paths) > 300
    for path in paths:
        check_metric_paths([Gate(id="G", metric=path, op=">=", threshold=0)])


@pytest.mark.cli
@pytest.mark.cluster  # evalcore run: a flow on a LocalCluster, in a subprocess
@pytest.mark.prefect
@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_run_with_gates_that_fail_prints_the_summary_and_the_failing_rules(tmp_path, prefect_server):
    data = tmp_path / "data"
    assert _cli("synth", "--n-ref", "150", "--seed", "4", "--out", str(data), timeout=300).returncode == 0
    gates = _gates(tmp_path, "gates:\n  - {id: G-EASY, metric: f1, op: '>=', threshold: 0}\n"
                             "  - {id: G-NEVER, metric: recall, op: '>', threshold: 1}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_API_URL=prefect_server)
    out = tmp_path / "run"
    done = _cli("run", "-p", str(data / "predicted.parquet"), "-r", str(data / "reference.parquet"), "--workers", "1",
                "--gates", str(gates), "-o", str(out), env=env, timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr and "GatesNotPassed" not in done.stdout + done.stderr, done.stderr
    stdout = done.stdout
    assert "precision" in stdout and "run directory" in stdout, stdout  # the summary, as a passed run prints it
    assert "G-NEVER" in stdout and "G-EASY" not in stdout, stdout  # only the rules that did not pass
    assert "fail           G-NEVER: recall" in stdout
    status = json.loads((out / "status.json").read_text(encoding="utf-8"))
    assert status["status"] == "failed" and status["failure"] == "gates"


def test_an_empty_aoi_is_reported_not_blocking(tmp_path):
    # Issue 33 item 2: an AOI with no field made the example's decision not_evaluable.
    run = _run_dir(tmp_path)
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    metrics["aois"] = {"count_aois": 2, "per_aoi": {
        "big": {"count_reference": 200, "recall": 0.816, "support": 200, "ci": {"recall": [0.81, 0.83]}},
        "empty": {"count_reference": 0, "recall": None, "support": 0, "ci": {"recall": [None, None]}}}}
    (run / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    rule = "gates:\n  - {id: G-AOI, metric: aois.*.recall, op: '>=', threshold: 0.6, min_support: 30, use: ci_lower%s}\n"
    done = _cli("gate", str(run), str(_gates(tmp_path, rule % "")))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("reported") and "G-AOI[empty]" in line and "support 0 below the minimum 30" in line for line in lines), done.stdout
    assert any(line.startswith("pass") and "G-AOI[big]" in line for line in lines), done.stdout
    assert "decision: pass (1 pass, 0 fail, 1 not evaluable, of which 1 below min_support, reported)" in done.stdout
    written = json.loads((run / "acceptance-gates.json").read_text(encoding="utf-8"))
    assert [r["blocks"] for r in written["rules"]] == [True, False]
    # The rule can ask for the old behaviour.
    done = _cli("gate", str(run), str(_gates(tmp_path, rule % ", below_support: block", "block.yaml")))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "decision: not_evaluable" in done.stdout

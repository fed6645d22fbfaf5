"""What a newcomer reads after a run with scores, a frozen threshold, precision targets and
an annotated area (issue 33, item 4): the terminal summary through the real command line
and report.md's headline, each line worked out here from the values in metrics.json.
"""

from __future__ import annotations

import copy
import json
import math

import pytest

from evalcore.cli.text import format_summary
from evalcore.present import number
from evalcore.report import render_report
from tests.common import cli_in_process

MIN_SUPPORT = 40


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One ``evaluate`` of 300 synthetic fields: its stdout and its metrics dict."""
    tmp = tmp_path_factory.mktemp("summary")
    data = tmp / "data"
    synth = cli_in_process("synth", "--n-ref", "300", "--out", str(data))
    assert synth.returncode == 0, synth.stderr
    out = tmp / "metrics.json"
    proc = cli_in_process(
        "evaluate", "-p", str(data / "predicted.parquet"), "-r", str(data / "reference.parquet"),
        "--strata-column", "stratum", "--score-column", "score", "--score-threshold", "0.5",
        "--precision-targets", "0.8,0.9", "--annotated-area", str(data / "annotated.parquet"),
        "--min-support", str(MIN_SUPPORT), "--bootstrap", "20", "-o", str(out),
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(out.read_text())


def f3(value: float) -> str:
    return f"{value:.3f}"


def test_terminal_shows_the_operating_point(run):
    stdout, m = run
    op = m["operating_point"]["0.5"]
    assert (f"at score ≥ 0.5 (IoU ≥ 0.5): precision {f3(op['precision'])}  recall {f3(op['recall'])}  F1 {f3(op['f1'])}"
            in stdout.splitlines())


def test_terminal_shows_each_precision_target(run):
    stdout, m = run
    points = m["risk_coverage"]["overall"]["operating_points"]
    assert [p["precision_target"] for p in points] == [0.8, 0.9] and all(p["met"] for p in points)
    line = next(x for x in stdout.splitlines() if x.startswith("precision targets: "))
    assert line == "precision targets: " + ";  ".join(
        f"≥ {p['precision_target']:g} from score ≥ {f3(p['score_threshold'])} "
        f"({p['n_retained']} predictions kept, precision {f3(p['precision'])})" for p in points)


def test_a_target_not_reached_says_so(run):
    _, m = run
    m = copy.deepcopy(m)
    m["risk_coverage"]["overall"]["operating_points"].append(
        {"precision_target": 0.99, "met": False, "score_threshold": None, "coverage": 0.0, "precision": None,
         "risk": None, "n_retained": 0, "n_errors": 0})
    summary = format_summary(m)
    assert next(x for x in summary.splitlines() if x.startswith("precision targets: ")).endswith(";  ≥ 0.99 not reached")
    assert "| Lowest score threshold with precision ≥ 0.99 | not reached |" in render_report(m)


def test_terminal_shows_precision_in_the_annotated_area_with_its_interval(run):
    stdout, m = run
    lo, hi = m["bootstrap"]["ci"]["precision_annotated"]
    expected = f"precision inside the annotated area {f3(m['precision_annotated'])} [{f3(lo)}, {f3(hi)}]"
    assert any(expected in line for line in stdout.splitlines())


def test_terminal_marks_groups_below_min_support(run):
    stdout, m = run
    lines = stdout.splitlines()
    groups = m["per_stratum"]
    assert {g["insufficient_support"] for g in groups.values()} == {True, False}
    for name, g in groups.items():
        row = next(x for x in lines if x.startswith(f"{name} "))
        assert row.endswith("  *") == (g["count_reference"] < MIN_SUPPORT) == g["insufficient_support"]
    assert "* fewer reference fields than --min-support: the group's numbers are shown but too uncertain to rank it" in lines


def test_report_headline_has_the_operating_point_targets_and_annotated_precision(run):
    _, m = run
    report = render_report(m)
    op = m["operating_point"]["0.5"]
    for label, key in (("Precision", "precision"), ("Recall", "recall"), ("F1", "f1")):
        assert f"| {label} at score ≥ 0.5 (IoU ≥ 0.5) | {f3(op[key])} |" in report
    for p in m["risk_coverage"]["overall"]["operating_points"]:
        goal = f"precision ≥ {p['precision_target']:g}"
        if p["met"]:
            assert f"| Lowest score threshold with {goal} | {f3(p['score_threshold'])} |" in report
            assert f"| Share of predictions kept at {goal} | {f3(p['coverage'])} |" in report
        else:
            assert f"| Lowest score threshold with {goal} | not reached |" in report
    lo, hi = m["bootstrap"]["ci"]["precision_annotated"]
    assert f"| Precision inside the annotated area | {f3(m['precision_annotated'])} [{f3(lo)}, {f3(hi)}] |" in report
    headline = report[report.index("| metric |"):report.index("\n\n", report.index("| metric |"))]
    assert "Precision inside the annotated area" in headline and "Lowest score threshold" in headline


def test_a_missing_distance_has_no_unit():
    from evalcore.metrics.distance import Distance

    line = Distance().summary_lines({"hausdorff_mean_m": None, "hausdorff_median_m": math.nan,
                                     "boundary_distance_mean_m": 3.8})[0]
    assert line == "Hausdorff mean n/a, median n/a;  boundary distance mean 3.80 m"
    assert number(None, 2, unit="m") == "n/a" and number(2.0, 2, unit="m") == "2.00 m"

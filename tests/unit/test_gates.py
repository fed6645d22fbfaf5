"""Acceptance gates (SPEC 6.8): evalcore.gates on constructed metrics and on a real run.

* Each state of a rule: pass, fail, and not_evaluable for a null (or NaN) value, a
  support under the minimum, a path that matches nothing, an interval asked for
  without a bootstrap; a ``*`` over groups where one group fails.
* Each comparison and each ``use``; the decision and exit status for all-pass,
  one-fail and none-fail-but-one-not-evaluable; the outcome is JSON without NaN.
* Bad gates files (not YAML, unknown op, no id, duplicate ids, ...) raise one-line
  EvalInputError naming the file and the rule.
* A real ``metrics.json`` (``evalcore evaluate`` with strata, AOIs and a bootstrap)
  checked with deploy/gates.example.yaml, directly and through ``evalcore gate``.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import pytest
import yaml

from evalcore.errors import EvalInputError
from evalcore.gates import Gate, evaluate_gates, exit_status, load_gates, parse_gates

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "gates.example.yaml"
REAL_METRICS = Path("/tmp/gates_m.json")


def _group(recall, support, ci=(None, None), f1=0.8):
    return {"recall": recall, "f1": f1, "support": support, "insufficient_support": support < 30,
            "ci": {"recall": list(ci), "f1": [f1 - 0.05, f1 + 0.05]}}


def _metrics(bootstrap: bool = True) -> dict:
    """A small metrics dict in the layout of metrics.json."""
    m = {
        "precision": 0.9,
        "recall": 0.8,
        "f1": 0.85,
        "count_ratio": 1.05,
        "count_reference": 200,
        "iou_mean": None,
        "per_stratum": {
            "north": _group(0.82, 120, (0.75, 0.88)),
            "south": _group(0.55, 60, (0.45, 0.66)),
            "tiny": _group(0.9, 5, (0.6, 1.0)),
        },
        "tiles": {
            "count_tiles": 4,
            "micro": {"recall": 0.8, "f1": 0.85},
            "macro": {"f1": {"value": 0.81, "n_units": 4}},
            "worst": {"f1": {"group": "32633_1_2", "value": 0.7, "support": 40}, "recall": None},
        },
        "aois": {
            "count_aois": 2,
            "micro": {"recall": 0.8},
            "per_aoi": {
                "a": {"count_reference": 150, "recall": 0.85, "support": 150, "ci": {"recall": [0.8, 0.9]}},
                "b": {"count_reference": 50, "recall": 0.7, "support": 50, "ci": {"recall": [0.6, 0.8]}},
            },
        },
    }
    if bootstrap:
        m["bootstrap"] = {"n_resamples": 100, "ci": {"recall": [0.76, 0.84], "precision": [0.87, 0.93], "f1": [0.82, 0.88]}}
    else:
        for entry in m["per_stratum"].values():
            entry.pop("ci")
        for entry in m["aois"]["per_aoi"].values():
            entry.pop("ci")
    return m


def _gate(metric="recall", op=">=", threshold=0.5, min_support=None, use="value", id="G"):
    return Gate(id=id, metric=metric, op=op, threshold=threshold, min_support=min_support, use=use)


def _one(metrics: dict, gate: Gate) -> dict:
    result = evaluate_gates(metrics, [gate])
    assert len(result["rules"]) == 1, result["rules"]
    return result["rules"][0]


def _write(tmp_path: Path, text: str, name: str = "gates.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- states of one rule


def test_pass_and_fail_on_a_top_level_metric():
    m = _metrics()
    row = _one(m, _gate("recall", ">=", 0.75))
    assert row == {"id": "G", "metric": "recall", "group": None, "observed": 0.8, "use": "value", "op": ">=",
                   "expected": 0.75, "support": 200, "min_support": None, "state": "pass", "reason": None, "value": 0.8,
                   "blocks": True}
    row = _one(m, _gate("recall", ">=", 0.85))
    assert (row["state"], row["observed"], row["reason"]) == ("fail", 0.8, None)


@pytest.mark.parametrize("value", [None, float("nan")])
def test_null_or_nan_value_is_not_evaluable(value):
    m = _metrics()
    m["recall"] = value
    row = _one(m, _gate("recall", ">=", 0.5))
    assert row["state"] == "not_evaluable"
    assert row["reason"] == "value is null"
    assert row["observed"] is None
    # A null on the way (no worst group) is the same.
    row = _one(m, _gate("tiles.worst.recall.value", ">=", 0.5))
    assert (row["state"], row["reason"]) == ("not_evaluable", "value is null")


def test_support_under_the_minimum_is_not_evaluable():
    m = _metrics()
    row = _one(m, _gate("per_stratum.tiny.recall", ">=", 0.5, min_support=30))
    assert row["state"] == "not_evaluable"
    assert row["reason"] == "support 5 below the minimum 30"
    assert (row["support"], row["min_support"], row["observed"]) == (5, 30, 0.9)
    # Support equal to the minimum is enough; the run's own support is count_reference.
    assert _one(m, _gate("per_stratum.tiny.recall", ">=", 0.5, min_support=5))["state"] == "pass"
    row = _one(m, _gate("recall", ">=", 0.5, min_support=201))
    assert row["reason"] == "support 200 below the minimum 201"


def test_below_support_is_reported_not_blocking_by_default():
    # Hand-made: north (120 fields) passes 0.6, tiny (5 fields) is below 30.
    m = _metrics()
    m["per_stratum"].pop("south")
    result = evaluate_gates(m, [_gate("per_stratum.*.recall", ">=", 0.6, min_support=30)])
    rows = {row["group"]: row for row in result["rules"]}
    assert list(rows) == ["north", "tiny"]
    assert (rows["north"]["state"], rows["north"]["blocks"]) == ("pass", True)
    # The small group is still listed, with its value, support and reason.
    assert rows["tiny"]["state"] == "not_evaluable" and rows["tiny"]["blocks"] is False
    assert (rows["tiny"]["observed"], rows["tiny"]["support"], rows["tiny"]["reason"]) == (0.9, 5, "support 5 below the minimum 30")
    assert result["decision"] == "pass" and exit_status(result) == 0
    assert result["counts"] == {"pass": 1, "fail": 0, "not_evaluable": 1}


def test_below_support_block_keeps_the_decision_from_pass():
    m = _metrics()
    m["per_stratum"].pop("south")
    gate = Gate(id="G", metric="per_stratum.*.recall", op=">=", threshold=0.6, min_support=30, below_support="block")
    result = evaluate_gates(m, [gate])
    rows = {row["group"]: row for row in result["rules"]}
    assert rows["tiny"]["blocks"] is True and rows["tiny"]["reason"] == "support 5 below the minimum 30"
    assert result["decision"] == "not_evaluable" and exit_status(result) == 3


def test_below_support_does_not_hide_a_failure_or_other_not_evaluable_rows():
    m = _metrics()  # south (60 fields) fails 0.6
    result = evaluate_gates(m, [_gate("per_stratum.*.recall", ">=", 0.6, min_support=30)])
    assert result["decision"] == "fail"
    # A null value of a supported group still blocks.
    m = _metrics()
    m["per_stratum"].pop("south")
    m["per_stratum"]["north"]["recall"] = None
    result = evaluate_gates(m, [_gate("per_stratum.*.recall", ">=", 0.6, min_support=30)])
    assert result["decision"] == "not_evaluable"
    # Unknown support is not "below" it: it blocks.
    result = evaluate_gates({"recall": 0.8}, [_gate("recall", ">=", 0.5, min_support=30)])
    (row,) = result["rules"]
    assert (row["reason"], row["blocks"], result["decision"]) == ("support unknown; the minimum is 30", True, "not_evaluable")


def test_only_below_support_rows_is_not_a_vacuous_pass():
    m = _metrics()
    result = evaluate_gates(m, [_gate("per_stratum.tiny.recall", ">=", 0.5, min_support=30)])
    (row,) = result["rules"]
    assert row["blocks"] is False and row["reason"] == "support 5 below the minimum 30"
    # Nothing was judged: not a pass, but the unit is listed.
    assert result["decision"] == "not_evaluable"
    # Beside a passing rule the small group no longer blocks.
    result = evaluate_gates(m, [_gate("per_stratum.tiny.recall", ">=", 0.5, min_support=30, id="T"), _gate("recall", ">=", 0.5, id="R")])
    assert result["decision"] == "pass" and [r["id"] for r in result["rules"]] == ["T", "R"]


def test_below_support_with_an_interval_rule_and_an_empty_aoi():
    # An AOI with no reference field: recall null, no interval, support 0.
    m = _metrics()
    m["aois"]["per_aoi"]["empty"] = {"count_reference": 0, "recall": None, "support": 0, "ci": {"recall": [None, None]}}
    result = evaluate_gates(m, [_gate("aois.*.recall", ">=", 0.6, min_support=30, use="ci_lower")])
    rows = {row["group"]: row for row in result["rules"]}
    assert rows["empty"]["reason"] == "support 0 below the minimum 30" and rows["empty"]["blocks"] is False
    assert rows["a"]["state"] == "pass" and rows["b"]["state"] == "pass"
    assert result["decision"] == "pass"


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("{id: G-X, metric: recall, op: '>=', threshold: 0.5, min_support: 3, below_support: ignore}", "below_support 'ignore'"),
        ("{id: G-X, metric: recall, op: '>=', threshold: 0.5, below_support: block}", "without min_support"),
    ],
)
def test_bad_below_support_is_refused(line, needle):
    with pytest.raises(EvalInputError) as err:
        parse_gates({"gates": [yaml.safe_load(line)]}, source="g.yaml")
    assert needle in str(err.value) and "'G-X'" in str(err.value)
    assert "\n" not in str(err.value)


def test_below_support_parses():
    (gate,) = parse_gates({"gates": [{"id": "G", "metric": "recall", "op": ">=", "threshold": 0.5, "min_support": 3}]}, source="g.yaml")
    assert gate.below_support == "report"
    (gate,) = parse_gates({"gates": [{"id": "G", "metric": "recall", "op": ">=", "threshold": 0.5, "min_support": 3,
                                      "below_support": "block"}]}, source="g.yaml")
    assert gate.below_support == "block"


def test_missing_path_is_not_evaluable_not_an_error():
    m = _metrics()
    for path in ("recal", "per_stratum.west.recall", "per_stratum.north.ap50", "per_size_class.*.f1", "tiles.micro.f1.value"):
        row = _one(m, _gate(path))
        assert (row["state"], row["reason"], row["group"]) == ("not_evaluable", "no metric at this path", None), path


def test_interval_without_a_bootstrap_is_not_evaluable():
    m = _metrics(bootstrap=False)
    for use in ("ci_lower", "ci_upper"):
        for path in ("recall", "per_stratum.north.recall", "aois.a.recall"):
            row = _one(m, _gate(path, use=use))
            assert row["state"] == "not_evaluable", (path, use)
            assert row["reason"] == "interval asked for but the run has no bootstrap"
    # With a bootstrap, a metric that has no interval says so.
    row = _one(_metrics(), _gate("tiles.micro.recall", use="ci_lower"))
    assert (row["state"], row["reason"]) == ("not_evaluable", "the run has no interval for this metric")


def test_star_over_groups_one_group_fails():
    m = _metrics()
    result = evaluate_gates(m, [_gate("per_stratum.*.recall", ">=", 0.6, min_support=30)])
    rows = {row["group"]: row for row in result["rules"]}
    assert list(rows) == ["north", "south", "tiny"]
    assert rows["north"]["state"] == "pass" and rows["north"]["support"] == 120
    assert rows["south"]["state"] == "fail" and rows["south"]["observed"] == 0.55
    assert rows["tiny"]["state"] == "not_evaluable" and rows["tiny"]["reason"] == "support 5 below the minimum 30"
    assert all(row["id"] == "G" and row["metric"] == "per_stratum.*.recall" for row in rows.values())
    assert result["decision"] == "fail" and exit_status(result) == 1
    assert result["counts"] == {"pass": 1, "fail": 1, "not_evaluable": 1}


def test_star_over_an_empty_grouping_is_one_not_evaluable_row():
    m = _metrics()
    m["per_size_class"] = {}
    row = _one(m, _gate("per_size_class.*.f1"))
    assert (row["state"], row["reason"], row["group"]) == ("not_evaluable", "no metric at this path", None)


def test_aois_star_expands_over_per_aoi_and_tiles_star_is_not_evaluable():
    m = _metrics()
    rows = evaluate_gates(m, [_gate("aois.*.recall", ">=", 0.75)])["rules"]
    assert [(r["group"], r["state"], r["support"]) for r in rows] == [("a", "pass", 150), ("b", "fail", 50)]
    # The explicit path and a single unit give the same.
    assert [r["observed"] for r in evaluate_gates(m, [_gate("aois.per_aoi.*.recall")])["rules"]] == [0.85, 0.7]
    assert _one(m, _gate("aois.b.recall"))["observed"] == 0.7
    assert _one(m, _gate("aois.micro.recall"))["observed"] == 0.8  # a key of the block itself stays literal
    row = _one(m, _gate("tiles.*.f1"))
    assert row["state"] == "not_evaluable"
    assert "no per-tile entries" in row["reason"]


def test_worst_tile_value_and_its_support():
    m = _metrics()
    row = _one(m, _gate("tiles.worst.f1.value", ">", 0.65))
    assert (row["state"], row["observed"], row["support"]) == ("pass", 0.7, 40)
    row = _one(m, _gate("tiles.macro.f1.value", "<", 0.8))
    assert (row["state"], row["observed"], row["support"]) == ("fail", 0.81, 200)


def test_a_value_that_is_not_a_number_is_not_evaluable():
    m = _metrics()
    row = _one(m, _gate("tiles.worst.f1"))
    assert (row["state"], row["reason"]) == ("not_evaluable", "value is not a number")
    m["recall"] = float("inf")
    row = _one(m, _gate("recall"))
    assert (row["state"], row["reason"], row["observed"]) == ("not_evaluable", "value is not finite", None)


def test_keys_with_dots_list_indices_and_integer_keys():
    m = _metrics()
    m["per_stratum"]["St. Louis"] = _group(0.77, 40)
    m["iou_sweep"] = [{"iou_threshold": 0.5, "recall": 0.8}, {"iou_threshold": 0.55, "recall": 0.78}]
    m["per_size_class"] = {0: _group(0.6, 35), 1: _group(0.9, 80)}  # as evaluate() may return it in Python
    assert _one(m, _gate("per_stratum.St. Louis.recall"))["observed"] == 0.77
    assert _one(m, _gate("iou_sweep.1.recall"))["observed"] == 0.78
    assert _one(m, _gate("iou_sweep.2.recall"))["reason"] == "no metric at this path"
    rows = evaluate_gates(m, [_gate("iou_sweep.*.recall", ">=", 0.79)])["rules"]
    assert [(r["group"], r["state"], r["support"]) for r in rows] == [("0", "pass", 200), ("1", "fail", 200)]
    assert _one(m, _gate("per_size_class.1.recall"))["support"] == 80
    assert [r["group"] for r in evaluate_gates(m, [_gate("per_size_class.*.recall")])["rules"]] == ["0", "1"]


@pytest.mark.parametrize(
    ("op", "threshold", "state"),
    [(">=", 0.8, "pass"), (">=", 0.81, "fail"), (">", 0.79, "pass"), (">", 0.8, "fail"),
     ("<=", 0.8, "pass"), ("<=", 0.79, "fail"), ("<", 0.81, "pass"), ("<", 0.8, "fail")],
)
def test_each_comparison(op, threshold, state):
    assert _one(_metrics(), _gate("recall", op, threshold))["state"] == state


@pytest.mark.parametrize(
    ("path", "use", "observed"),
    [("recall", "value", 0.8), ("recall", "ci_lower", 0.76), ("recall", "ci_upper", 0.84),
     ("per_stratum.south.recall", "value", 0.55), ("per_stratum.south.recall", "ci_lower", 0.45),
     ("per_stratum.south.recall", "ci_upper", 0.66), ("aois.b.recall", "ci_lower", 0.6), ("aois.b.recall", "ci_upper", 0.8)],
)
def test_each_use(path, use, observed):
    row = _one(_metrics(), _gate(path, ">=", 0.0, use=use))
    assert (row["observed"], row["use"], row["state"]) == (observed, use, "pass")


def test_a_null_interval_bound_is_not_evaluable():
    m = _metrics()
    m["per_stratum"]["north"]["ci"]["recall"] = [None, 0.9]
    row = _one(m, _gate("per_stratum.north.recall", use="ci_lower"))
    assert (row["state"], row["reason"]) == ("not_evaluable", "value is null")
    assert _one(m, _gate("per_stratum.north.recall", use="ci_upper"))["observed"] == 0.9


# --------------------------------------------------------------------------- decision, exit status, JSON


def test_decision_and_exit_status():
    m = _metrics()
    all_pass = evaluate_gates(m, [_gate("recall", ">=", 0.7, id="A"), _gate("per_stratum.*.f1", ">=", 0.7, id="B")])
    assert all_pass["decision"] == "pass" and exit_status(all_pass) == 0
    assert all_pass["counts"] == {"pass": 4, "fail": 0, "not_evaluable": 0}

    one_fail = evaluate_gates(m, [_gate("recall", ">=", 0.7, id="A"), _gate("precision", ">=", 0.95, id="B"),
                                  _gate("iou_mean", id="C")])
    assert one_fail["decision"] == "fail" and exit_status(one_fail) == 1

    not_evaluable = evaluate_gates(m, [_gate("recall", ">=", 0.7, id="A"), _gate("iou_mean", id="C")])
    assert not_evaluable["decision"] == "not_evaluable" and exit_status(not_evaluable) == 3
    assert not_evaluable["counts"] == {"pass": 1, "fail": 0, "not_evaluable": 1}

    nothing = evaluate_gates(m, [])
    assert nothing["decision"] == "not_evaluable" and exit_status(nothing) == 3
    with pytest.raises(ValueError):
        exit_status({"decision": "maybe"})


def test_outcome_is_json_without_nan_and_records_the_evidence():
    m = _metrics()
    m["precision"] = float("nan")
    m["per_stratum"]["south"]["recall"] = float("nan")
    m["per_stratum"]["north"]["ci"]["recall"] = [float("nan"), float("nan")]
    gates = [_gate("precision", id="P"), _gate("per_stratum.*.recall", id="R"), _gate("per_stratum.*.recall", use="ci_lower", id="L"),
             _gate("f1", use="ci_upper", id="F")]
    result = evaluate_gates(m, gates, evidence_file="metrics.json", evidence_sha256="ab" * 32)
    text = json.dumps(result, allow_nan=False)
    assert json.loads(text) == result
    assert result["evidence"] == {"file": "metrics.json", "sha256": "ab" * 32}
    assert set(result) == {"decision", "rules", "evidence", "counts"}
    assert sum(result["counts"].values()) == len(result["rules"])
    for row in result["rules"]:
        assert set(row) == {"id", "metric", "group", "observed", "use", "op", "expected", "support", "min_support", "state", "reason", "value", "blocks"}
        assert row["observed"] is None or math.isfinite(row["observed"])
        assert row["value"] is None or math.isfinite(row["value"])
        assert (row["reason"] is None) == (row["state"] != "not_evaluable")
    assert evaluate_gates(m, gates)["evidence"] == {"file": "metrics.json", "sha256": None}


def test_evaluate_gates_does_not_change_the_metrics():
    m = _metrics()
    before = copy.deepcopy(m)
    evaluate_gates(m, [_gate("per_stratum.*.recall", use="ci_lower"), _gate("aois.*.recall")])
    assert m == before


# --------------------------------------------------------------------------- gates files


GOOD = """\
gates:
  - id: G-RECALL-STRATA        # unique
    metric: per_stratum.*.recall
    op: ">="
    threshold: 0.6
    min_support: 30
    use: ci_lower
  - id: G-PRECISION
    metric: precision
    op: "<"
    threshold: 1
"""


def test_load_gates(tmp_path):
    gates = load_gates(_write(tmp_path, GOOD))
    assert gates == [
        Gate(id="G-RECALL-STRATA", metric="per_stratum.*.recall", op=">=", threshold=0.6, min_support=30, use="ci_lower"),
        Gate(id="G-PRECISION", metric="precision", op="<", threshold=1.0, min_support=None, use="value"),
    ]
    with pytest.raises(AttributeError):
        gates[0].threshold = 0.7  # frozen
    # YAML 1.1 leaves 1e-3 a string; it is still a number.
    assert load_gates(_write(tmp_path, "gates:\n  - {id: a, metric: recall, op: '>', threshold: 1e-3}\n"))[0].threshold == 0.001


def test_the_example_file_loads():
    gates = load_gates(EXAMPLE)
    assert len(gates) >= 4
    metrics = {g.metric for g in gates}
    assert {"recall", "per_stratum.*.f1", "tiles.worst.f1.value", "aois.*.recall"} <= metrics
    by_metric = {g.metric: g for g in gates}
    assert by_metric["recall"].use == "ci_lower"
    assert by_metric["per_stratum.*.f1"].min_support is not None


@pytest.mark.parametrize(
    ("text", "names", "says"),
    [
        ("gates: [\n  - id: a\n", (), "not valid YAML"),
        ("gates:\n  - id: a\n    metric: recall\n    op: >=\n    threshold: 0.5\n", (), "not valid YAML"),
        ("{}\n", (), "gates"),
        ("", (), "empty"),
        ("gates: {id: a}\n", (), "list"),
        ("gates: []\n", (), "no rule"),
        ("gates:\n  - metric: recall\n    op: '>='\n    threshold: 0.5\n", ("#1",), "no id"),
        ("gates:\n  - {id: a, metric: recall, op: '>=', threshold: 0.5}\n  - {metric: f1, op: '>=', threshold: 0.5}\n",
         ("#2",), "no id"),
        ("gates:\n  - {id: a, metric: recall, op: '>=', threshold: 0.5}\n  - {id: a, metric: f1, op: '>=', threshold: 0.5}\n",
         ("'a'", "#2", "#1"), "unique"),
        ("gates:\n  - {id: G-X, metric: recall, op: '=>', threshold: 0.5}\n", ("'G-X'", "'=>'"), "unknown comparison"),
        ("gates:\n  - {id: G-X, metric: recall, op: '==', threshold: 0.5}\n", ("'G-X'",), "unknown comparison"),
        ("gates:\n  - {id: G-X, metric: recall, op: '>=', threshold: high}\n", ("'G-X'",), "not a finite number"),
        ("gates:\n  - {id: G-X, metric: recall, op: '>=', threshold: .nan}\n", ("'G-X'",), "not a finite number"),
        ("gates:\n  - {id: G-X, metric: recall, op: '>=', threshold: 0.5, use: ci_low}\n", ("'G-X'", "'ci_low'"), "use"),
        ("gates:\n  - {id: G-X, metric: recall, op: '>=', threshold: 0.5, min_support: -1}\n", ("'G-X'",), "min_support"),
        ("gates:\n  - {id: G-X, metric: recall, op: '>=', threshold: 0.5, min_support: 2.5}\n", ("'G-X'",), "min_support"),
        ("gates:\n  - {id: G-X, metric: recall, op: '>=', threshold: 0.5, min_suport: 30}\n", ("'G-X'", "'min_suport'"), "unknown key"),
        ("gates:\n  - {id: G-X, op: '>=', threshold: 0.5}\n", ("'G-X'",), "no 'metric'"),
        ("gates:\n  - {id: G-X, metric: 'per_stratum.*.aois.*.f1', op: '>=', threshold: 0.5}\n", ("'G-X'",), "more than one"),
        ("gates:\n  - {id: G-X, metric: recall, op: '>=', threshold: 0.5, op: '<'}\n", (), "twice"),
        ("gates:\n  - just text\n", ("#1",), "not a mapping"),
    ],
)
def test_bad_gates_files_name_the_file_and_the_rule(tmp_path, text, names, says):
    path = _write(tmp_path, text, "bad-gates.yaml")
    with pytest.raises(EvalInputError) as info:
        load_gates(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    for name in names:
        assert name in message, (name, message)
    assert says in message, message


def test_missing_gates_file(tmp_path):
    with pytest.raises(EvalInputError, match="cannot be read"):
        load_gates(tmp_path / "nope.yaml")


def test_parse_gates_names_its_source():
    with pytest.raises(EvalInputError, match=r"'inline'.*#1.*no id"):
        parse_gates({"gates": [{"metric": "recall", "op": ">=", "threshold": 1}]}, source="inline")


# --------------------------------------------------------------------------- a real run


@pytest.fixture(scope="module")
def real_metrics(tmp_path_factory) -> Path:
    """metrics.json of ``evalcore evaluate`` with strata, AOIs and 50 resamples (made in-process if absent)."""
    if REAL_METRICS.is_file():
        return REAL_METRICS
    from evalcore.cli import main

    out = tmp_path_factory.mktemp("gates_run")
    assert main(["synth", "--n-ref", "300", "--seed", "1", "--out", str(out / "s")]) == 0
    target = out / "metrics.json"
    assert main(["evaluate", "-p", str(out / "s" / "predicted.parquet"), "-r", str(out / "s" / "reference.parquet"),
                 "--strata-column", "stratum", "--bootstrap", "50", "--aoi", str(out / "s" / "aoi.parquet"),
                 "--aoi-id-column", "aoi_id", "-o", str(target), "-q"]) == 0
    return target


def test_real_metrics_with_the_example_gates(real_metrics):
    metrics = json.loads(real_metrics.read_text(encoding="utf-8"))
    gates = load_gates(EXAMPLE)
    result = evaluate_gates(metrics, gates, evidence_sha256="0" * 64)
    json.dumps(result, allow_nan=False)
    rows = result["rules"]
    by_id: dict[str, list[dict]] = {}
    for row in rows:
        by_id.setdefault(row["id"], []).append(row)
    assert set(by_id) == {g.id for g in gates}

    (overall,) = by_id["G-RECALL-OVERALL"]
    assert overall["observed"] == metrics["bootstrap"]["ci"]["recall"][0]
    assert overall["support"] == metrics["count_reference"]

    strata = by_id["G-F1-STRATA"]
    assert [r["group"] for r in strata] == list(metrics["per_stratum"])
    for r in strata:
        entry = metrics["per_stratum"][r["group"]]
        assert r["support"] == entry["support"]
        if entry["support"] < 30:
            assert r["state"] == "not_evaluable" and r["reason"] == f"support {entry['support']} below the minimum 30"
        else:
            assert r["state"] == ("pass" if entry["f1"] >= 0.7 else "fail")

    (tile,) = by_id["G-F1-WORST-TILE"]
    assert tile["observed"] == metrics["tiles"]["worst"]["f1"]["value"]
    assert tile["support"] == metrics["tiles"]["worst"]["f1"]["support"]

    aois = by_id["G-RECALL-AOIS"]
    assert [r["group"] for r in aois] == list(metrics["aois"]["per_aoi"])
    for r in aois:
        entry = metrics["aois"]["per_aoi"][r["group"]]
        if entry["support"] >= 30:
            assert r["observed"] == entry["ci"]["recall"][0]
            assert r["state"] in ("pass", "fail")
        else:
            assert r["state"] == "not_evaluable"

    assert sum(result["counts"].values()) == len(rows)
    states = {r["state"] for r in rows}
    # With the example's min_support rules (below_support: report by default), a group
    # below the minimum is listed but holds nothing up.
    for r in rows:
        assert r["blocks"] == (r["reason"] is None or "below the minimum" not in r["reason"])
    blocking = {r["state"] for r in rows if r["blocks"]}
    expected = "fail" if "fail" in states else "pass" if blocking == {"pass"} else "not_evaluable"
    assert result["decision"] == expected


def test_evalcore_gate_on_a_run_directory(real_metrics, tmp_path, capsys):
    from evalcore import cli

    if "gate" not in cli.COMMANDS:
        pytest.skip("this evalcore.cli has no 'gate' command yet")
    main = cli.main
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(real_metrics, run_dir / "metrics.json")
    strict = _write(tmp_path, "gates:\n  - {id: G-NEVER, metric: recall, op: '>', threshold: 1}\n", "strict.yaml")
    assert main(["gate", str(run_dir), str(strict), "-q"]) == 1
    written = json.loads((run_dir / "acceptance-gates.json").read_text(encoding="utf-8"))
    assert written["decision"] == "fail" and written["evidence"]["file"] == "metrics.json"
    assert len(written["evidence"]["sha256"]) == 64

    easy = _write(tmp_path, "gates:\n  - {id: G-ANY, metric: recall, op: '>=', threshold: 0}\n", "easy.yaml")
    assert main(["gate", str(run_dir), str(easy), "-q"]) == 0
    missing = _write(tmp_path, "gates:\n  - {id: G-ANY, metric: recall, op: '>=', threshold: 0}\n"
                               "  - {id: G-NONE, metric: per_size_class.*.f1, op: '>=', threshold: 0}\n", "missing.yaml")
    assert main(["gate", str(run_dir), str(missing), "-q"]) == 3
    bad = _write(tmp_path, "gates:\n  - {id: G-X, metric: recall, op: '~', threshold: 0}\n", "bad.yaml")
    assert main(["gate", str(run_dir), str(bad), "-q"]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "'G-X'" in err

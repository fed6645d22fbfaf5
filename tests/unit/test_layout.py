"""The output layout of SPEC 5.1: agribound 1.0.1's dict, so its scripts run unchanged.

Extra keys of ours are allowed; a missing or moved key is not. Layers are strips in
EPSG:6933 (tests.common.strip: one unit = 100 m, 100 m high), so a strip of one unit
is exactly 1 ha and size classes are known by hand.

The bootstrap layout (county, strips):
    Curry      [0, 1] [2, 3] [4, 5] [6, 7]   1 ha each, each with an identical prediction
    Roosevelt  [10, 12] [13, 15] [16, 18]    2 ha each, only [10, 12] has a prediction
    (missing)  [20, 21]                      1 ha, with an identical prediction
    one prediction [30, 31] overlaps nothing.
A resample of Curry always holds 4 matched fields: recall and precision are 1 in every
resample, and nothing is undefined. A resample of Roosevelt misses its matched field
with probability (2/3)^3 = 8/27, and then the means over matched pairs (e.g.
area_error_signed_mean_m2) are undefined: with 40 resamples, P(no such resample) =
(19/27)^40 < 1e-6.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from evalcore import evaluate
from evalcore.writers import write_json
from tests.common import EA, GROUP_KEYS, layer, scenario_a, strips

DISTANCE_CRS = "WGS 84 / UTM zone of each polygon's centroid"

GROUP_METRIC_KEYS = GROUP_KEYS
BOOTSTRAP_KEYS = {"n_resamples", "seed", "confidence_level", "method", "resampling", "ci", "n_undefined"}

CURRY = [(0, 1), (2, 3), (4, 5), (6, 7)]
ROOSEVELT = [(10, 12), (13, 15), (16, 18)]
NO_COUNTY = [(20, 21)]
REF_STRIPS = CURRY + ROOSEVELT + NO_COUNTY
COUNTY = ["Curry"] * 4 + ["Roosevelt"] * 3 + [None]
PRED_STRIPS = CURRY + ROOSEVELT[:1] + NO_COUNTY + [(30, 31)]


def _layers():
    return layer(strips(PRED_STRIPS, EA), EA), layer(strips(REF_STRIPS, EA), EA, county=COUNTY)


# --------------------------------------------------------------------------------------
# distance_crs, strata
# --------------------------------------------------------------------------------------


def test_distance_crs_string():
    pred, ref = scenario_a()
    assert evaluate(pred, ref)["distance_crs"] == DISTANCE_CRS


def test_strata_given_as_a_column_name():
    pred, ref = _layers()
    m = evaluate(pred, ref, strata="county")
    assert m["strata_column"] == "county"
    assert m["count_reference_no_stratum"] == 1
    assert set(m["per_stratum"]) == {"Curry", "Roosevelt"}
    assert m["per_stratum"]["Curry"]["n"] == 4
    assert m["per_stratum"]["Roosevelt"]["n"] == 3
    for entry in m["per_stratum"].values():
        assert GROUP_METRIC_KEYS <= set(entry), GROUP_METRIC_KEYS - set(entry)
        assert entry["n"] == entry["count_reference"]
    # By hand: Curry 4 of 4 matched, Roosevelt 1 of 3.
    assert m["per_stratum"]["Curry"]["recall"] == 1.0
    assert m["per_stratum"]["Roosevelt"]["recall"] == pytest.approx(1 / 3, rel=1e-12)


@pytest.mark.parametrize("as_type", ["series", "list", "array"])
def test_strata_given_as_values_have_no_column_name(as_type):
    pred, ref = _layers()
    values = {"series": ref["county"], "list": list(COUNTY), "array": np.array(COUNTY, dtype=object)}[as_type]
    m = evaluate(pred, ref.drop(columns="county"), strata=values)
    assert m["strata_column"] is None
    assert m["count_reference_no_stratum"] == 1
    assert {k: v["n"] for k, v in m["per_stratum"].items()} == {"Curry": 4, "Roosevelt": 3}


def test_strata_column_null_in_json(tmp_path):
    pred, ref = _layers()
    path = write_json(tmp_path / "m.json", evaluate(pred, ref, strata=ref["county"]))
    loaded = json.loads(path.read_text())
    assert "strata_column" in loaded and loaded["strata_column"] is None


def test_numeric_strata_are_keyed_by_their_string():
    pred, ref = _layers()
    m = evaluate(pred, ref, strata=[7, 7, 7, 7, 35, 35, 35, None])
    assert {k: v["n"] for k, v in m["per_stratum"].items()} == {"7": 4, "35": 3}


# --------------------------------------------------------------------------------------
# Size classes
# --------------------------------------------------------------------------------------


def test_size_classes_layout():
    pred, ref = _layers()
    # Fields of 1 ha (5) and 2 ha (3); [0.5, 1.5) holds the 1 ha fields, [1.5, 1.8] none;
    # the 2 ha fields are above the last edge: outside every class.
    m = evaluate(pred, ref, size_bins=[0.5, 1.5, 1.8])
    assert m["size_class_edges_ha"] == [0.5, 1.5, 1.8]
    assert m["count_reference_outside_size_classes"] == 3
    assert set(m["per_size_class"]) == {"0.5-1.5", "1.5-1.8"}
    first, second = m["per_size_class"]["0.5-1.5"], m["per_size_class"]["1.5-1.8"]
    assert (first["lower_ha"], first["upper_ha"], first["n"]) == (0.5, 1.5, 5)
    assert (second["lower_ha"], second["upper_ha"], second["n"]) == (1.5, 1.8, 0)
    assert GROUP_METRIC_KEYS <= set(first)
    assert first["n"] == first["count_reference"]


def test_size_classes_with_infinity_are_null_in_json(tmp_path):
    pred, ref = _layers()
    m = evaluate(pred, ref, size_bins=[0, 1.5, float("inf")])
    assert m["size_class_edges_ha"] == [0.0, 1.5, math.inf]
    assert m["count_reference_outside_size_classes"] == 0
    assert m["per_size_class"]["1.5-inf"]["upper_ha"] == math.inf
    assert (m["per_size_class"]["0-1.5"]["n"], m["per_size_class"]["1.5-inf"]["n"]) == (5, 3)
    text = write_json(tmp_path / "m.json", m).read_text()
    loaded = json.loads(text)
    assert loaded["size_class_edges_ha"] == [0.0, 1.5, None]
    assert loaded["per_size_class"]["1.5-inf"]["upper_ha"] is None
    assert loaded["per_size_class"]["1.5-inf"]["lower_ha"] == 1.5


def test_auto_size_classes_report_their_edges():
    pred, ref = _layers()
    # Areas 1 and 2 ha: the 1-2-5 series from 1 to 2.
    m = evaluate(pred, ref, size_bins="auto")
    assert m["size_class_edges_ha"] == [1.0, 2.0]
    assert m["count_reference_outside_size_classes"] == 0
    assert {k: v["n"] for k, v in m["per_size_class"].items()} == {"1-2": 8}


# --------------------------------------------------------------------------------------
# Bootstrap
# --------------------------------------------------------------------------------------


def test_bootstrap_block_with_strata():
    pred, ref = _layers()
    m = evaluate(pred, ref, strata="county", size_bins=[0, 1.5, 3], bootstrap=40)
    b = m["bootstrap"]
    assert BOOTSTRAP_KEYS <= set(b)
    assert (b["n_resamples"], b["seed"], b["confidence_level"]) == (40, 42, 0.95)
    assert b["method"] == "percentile"
    assert b["resampling"] == "reference fields with replacement within strata"
    for metric in ("precision", "recall", "f1", "iou_mean"):
        lo, hi = b["ci"][metric]
        assert 0.0 <= lo <= hi <= 1.0, metric
    # Every resample holds Curry's 4 matched fields: no metric is undefined overall.
    assert b["n_undefined"] == {}


def test_bootstrap_seed_is_reported():
    pred, ref = _layers()
    assert evaluate(pred, ref, bootstrap=5, bootstrap_seed=7)["bootstrap"]["seed"] == 7


def test_bootstrap_block_without_strata_and_its_undefined_counts():
    # Roosevelt alone: 1 of 3 fields matched; a resample without it has no matched pair.
    ref = layer(strips(ROOSEVELT, EA), EA)
    pred = layer(strips(ROOSEVELT[:1], EA), EA)
    b = evaluate(pred, ref, bootstrap=40)["bootstrap"]
    assert b["resampling"] == "reference fields with replacement"
    assert b["method"] == "percentile"
    assert b["n_undefined"], "some resample must lack a matched pair"
    assert all(count > 0 for count in b["n_undefined"].values()), b["n_undefined"]
    assert set(b["n_undefined"]) <= set(b["ci"])
    assert 0 < b["n_undefined"]["area_error_signed_mean_m2"] < 40


def test_group_entries_carry_ci_directly():
    pred, ref = _layers()
    m = evaluate(pred, ref, strata="county", size_bins=[0, 1.5, 3], bootstrap=40)
    # A script written for agribound: m["per_stratum"]["Curry"]["ci"]["recall"].
    assert list(m["per_stratum"]["Curry"]["ci"]["recall"]) == [1.0, 1.0]
    assert list(m["per_stratum"]["Curry"]["ci"]["precision"]) == [1.0, 1.0]
    for group in ("per_stratum", "per_size_class"):
        for name, entry in m[group].items():
            assert "ci" in entry, (group, name)
            for metric in ("precision", "recall", "f1"):
                lo, hi = entry["ci"][metric]
                assert lo <= hi, (group, name, metric)


def test_ci_n_undefined_only_where_some_count_is_not_zero():
    pred, ref = _layers()
    m = evaluate(pred, ref, strata="county", size_bins=[0, 1.5, 3], bootstrap=40)
    # Curry, and the 1 ha class (Curry and the field without county, all matched):
    # every resample defines every metric.
    assert "ci_n_undefined" not in m["per_stratum"]["Curry"]
    assert "ci_n_undefined" not in m["per_size_class"]["0-1.5"]
    # Roosevelt, and the 2 ha class (the Roosevelt fields): undefined where its matched
    # field is not drawn.
    for entry in (m["per_stratum"]["Roosevelt"], m["per_size_class"]["1.5-3"]):
        counts = entry["ci_n_undefined"]
        assert counts and all(count > 0 for count in counts.values()), counts
        assert 0 < counts["area_error_signed_mean_m2"] < 40


# --------------------------------------------------------------------------------------
# The command line writes the same layout, with null for NaN and infinity
# --------------------------------------------------------------------------------------


def _no_constants(name: str) -> object:
    raise AssertionError(f"JSON constant {name} in the output")


def _assert_same_json(a: object, b: object, path: str = "") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (path, set(a) ^ set(b) if isinstance(b, dict) else b)
        for key in a:
            _assert_same_json(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_json(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (path, a, b)
    else:
        assert a == b, (path, a, b)


@pytest.mark.cli
def test_cli_round_trip_has_the_same_layout(tmp_path):
    pred, ref = _layers()
    ref_path, pred_path = tmp_path / "ref.gpkg", tmp_path / "pred.parquet"
    ref.to_file(ref_path)
    pred.to_parquet(pred_path)
    out = tmp_path / "cli.json"
    done = subprocess.run(
        [
            sys.executable, "-m", "evalcore.cli", "evaluate", "-p", str(pred_path), "-r", str(ref_path),
            "--strata-column", "county", "--size-bins", "0,1.5,3,inf", "--bootstrap", "20", "-o", str(out), "-q",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "NaN" not in text and "Infinity" not in text
    from_cli = json.loads(text, parse_constant=_no_constants)

    m = evaluate(str(pred_path), str(ref_path), strata="county", size_bins=[0, 1.5, 3, float("inf")], bootstrap=20)
    from_python = json.loads(write_json(tmp_path / "py.json", m).read_text(), parse_constant=_no_constants)
    _assert_same_json(from_cli, from_python)

    # The agribound layout, read back from the file.
    assert from_cli["distance_crs"] == DISTANCE_CRS
    assert from_cli["strata_column"] == "county"
    assert from_cli["count_reference_no_stratum"] == 1
    assert {k: v["n"] for k, v in from_cli["per_stratum"].items()} == {"Curry": 4, "Roosevelt": 3}
    assert from_cli["size_class_edges_ha"] == [0.0, 1.5, 3.0, None]
    assert from_cli["count_reference_outside_size_classes"] == 0
    assert from_cli["per_size_class"]["1.5-3"]["n"] == 3
    last = from_cli["per_size_class"]["3-inf"]
    assert (last["lower_ha"], last["upper_ha"], last["n"]) == (3.0, None, 0)
    # The empty class: NaN rates and count ratio, written as null.
    assert last["precision"] is None and last["recall"] is None and last["count_ratio"] is None
    b = from_cli["bootstrap"]
    assert BOOTSTRAP_KEYS <= set(b)
    assert (b["n_resamples"], b["seed"], b["method"]) == (20, 42, "percentile")
    assert b["resampling"] == "reference fields with replacement within strata"
    assert from_cli["per_stratum"]["Curry"]["ci"]["recall"] == [1.0, 1.0]
    assert "ci_n_undefined" not in from_cli["per_stratum"]["Curry"]
    assert from_cli["count_ratio"] == pytest.approx(7 / 8, rel=1e-12)  # 7 predictions, 8 fields

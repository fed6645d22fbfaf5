"""Strata and field-size classes (SPEC section 5), unit and through evaluate.

Size-class edges are tested on layers in EPSG:6933 whose areas are exact (strips of
100 m height: 1 unit = 1 ha exactly), so an area can sit exactly on an edge.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from evalcore import evaluate, evaluate_frame
from evalcore.groups import SizeClasses, auto_size_edges, encode_strata, size_classes, strata_values
from tests.common import EA, UTM, assert_metrics_equal, ea_areas, layer, scenario_a, strips

# --------------------------------------------------------------------------------------
# auto edges: the 1-2-5 series from the largest value not above the smallest area to
# the smallest value not below the largest area.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "areas, edges",
    [
        ([0.3, 4.0, 17.0], [0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0]),
        ([2.0], [2.0, 5.0]),
        ([1.0, 1.0], [1.0, 2.0]),
        ([5.0], [5.0, 10.0]),
        ([1.0, 2.0], [1.0, 2.0]),
        ([0.05, 0.07], [0.05, 0.1]),
        ([0.011, 999.0], [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]),
        ([3.0, 3.5, 4.9], [2.0, 5.0]),
        ([1.0, 10.0], [1.0, 2.0, 5.0, 10.0]),
        ([0.999, 1.001], [0.5, 1.0, 2.0]),
        ([120.0], [100.0, 200.0]),
    ],
)
def test_auto_size_edges_by_hand(areas, edges):
    assert auto_size_edges(np.array(areas)) == edges


def test_auto_size_edges_span_any_areas():
    rng = np.random.default_rng(0)
    series = sorted(m * 10.0**e for m in (1, 2, 5) for e in range(-4, 6))
    for _ in range(200):
        areas = 10 ** rng.uniform(-3, 4, rng.integers(1, 6))
        edges = auto_size_edges(areas)
        assert len(edges) >= 2
        assert all(any(math.isclose(e, s, rel_tol=1e-12) for s in series) for e in edges)
        assert all(b > a for a, b in zip(edges, edges[1:]))
        # consecutive members of the series
        k = [min(range(len(series)), key=lambda i: abs(series[i] - e)) for e in edges]
        assert k == list(range(k[0], k[0] + len(k)))
        assert edges[0] <= areas.min() and edges[-1] >= areas.max()
        # tight: the next series value above the first edge exceeds the smallest area,
        # the one below the last edge is below the largest area
        assert series[k[0] + 1] > areas.min()
        if len(edges) > 2:
            assert series[k[-1] - 1] < areas.max()


def test_auto_size_edges_of_no_areas():
    assert auto_size_edges(np.array([])) == []


# --------------------------------------------------------------------------------------
# Size classes: [lower, upper) except the last, [lower, upper]; keys f"{lo:g}-{hi:g}".
# --------------------------------------------------------------------------------------


def test_size_class_keys():
    classes = SizeClasses([0, 0.5, 1, 2, 5, 10, float("inf")])
    assert classes.keys == ["0-0.5", "0.5-1", "1-2", "2-5", "5-10", "10-inf"]
    assert SizeClasses([0.25, 1e6]).keys == ["0.25-1e+06"]


def test_size_class_codes_at_the_edges():
    classes = SizeClasses([0.5, 1, 2])
    areas = np.array([0.4, 0.5, 0.99, 1.0, 1.5, 2.0, 2.01])
    # below first edge: none; at an inner edge: upper class; at the last edge: last class
    assert classes.codes(areas).tolist() == [-1, 0, 0, 1, 1, 1, -1]
    open_ended = SizeClasses([0, 1, float("inf")])
    assert open_ended.codes(np.array([0.0, 1.0, 1e9])).tolist() == [0, 1, 1]


@pytest.mark.parametrize("bins", [[1, 1, 2], [2, 1], [5], [], [0, float("nan")], "quantiles", [0, "x"], 3])
def test_size_classes_rejects_bad_edges(bins):
    with pytest.raises(ValueError, match="size_bins"):
        size_classes(bins, np.array([1.0]))


def test_size_classes_accepts_auto_and_edges():
    assert size_classes("auto", np.array([0.3, 17.0])).edges == [0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0]
    assert size_classes((0, 1, 2), np.array([])).edges == [0.0, 1.0, 2.0]
    assert size_classes(np.array([0.0, 1.0]), np.array([])).keys == ["0-1"]


# --------------------------------------------------------------------------------------
# Strata values
# --------------------------------------------------------------------------------------


def test_strata_values_from_column_series_and_array():
    _, ref = scenario_a(UTM, county=["x", "y", None, "x"])
    by_column = strata_values(ref, "county", 4)
    assert by_column.tolist() == ["x", "y", None, "x"]
    # A Series aligned on the index, given in another order.
    series = pd.Series(["x", "y", None, "x"], index=ref.index)[::-1]
    assert strata_values(ref, series, 4).tolist() == ["x", "y", None, "x"]
    assert strata_values(ref, np.array(["x", "y", None, "x"], dtype=object), 4).tolist() == ["x", "y", None, "x"]
    assert strata_values(ref, ["x", "y", None, "x"], 4).tolist() == ["x", "y", None, "x"]


def test_strata_values_missing_markers_and_str_keys():
    _, ref = scenario_a(UTM)
    values = strata_values(ref, [np.nan, pd.NA, None, 7], 4)
    assert values.tolist() == [None, None, None, "7"]
    assert strata_values(ref, pd.array([1, None, 2, 1], dtype="Int64"), 4).tolist() == ["1", None, "2", "1"]


def test_strata_values_wrong_length_or_column():
    _, ref = scenario_a(UTM, crop=["a"] * 4)
    with pytest.raises(ValueError, match="4"):
        strata_values(ref, ["a", "b"], 4)
    with pytest.raises(ValueError, match="4"):
        strata_values(ref, pd.Series(["a", "b"]), 4)
    with pytest.raises(ValueError, match="crop"):
        strata_values(ref, "county", 4)


def test_encode_strata_sorted_names():
    enc = encode_strata(np.array(["b", None, "a", "b"], dtype=object))
    assert enc.names == ["a", "b"]
    assert enc.codes.tolist() == [1, -1, 0, 1]


# --------------------------------------------------------------------------------------
# per_stratum through evaluate (scenario A, strata a, b, a, missing)
# --------------------------------------------------------------------------------------
# a: R0 (P0 matched, IoU 0.9) and R2 (P2 matched 0.6; P3 unmatched, home R2)
# b: R1 (P1 unmatched, IoU 1/3, home R1)
# missing: R3 (no prediction); P4 has no home: overall only.


def test_per_stratum_by_hand():
    pred, ref = scenario_a(UTM, county=["a", "b", "a", None])
    a_ref = ea_areas(strips([(0, 1), (2, 3), (4, 6), (8, 9)]), UTM)
    a_pred = ea_areas(strips([(0, 0.9), (2.5, 3.5), (4, 5.2), (5.2, 6), (10, 11)]), UTM)
    m = evaluate(pred, ref, strata="county")
    assert set(m["per_stratum"]) == {"a", "b"}
    assert m["count_reference_no_stratum"] == 1
    a, b = m["per_stratum"]["a"], m["per_stratum"]["b"]
    assert (a["count_reference"], a["count_predicted"], a["count_tp"], a["count_fp"], a["count_fn"]) == (2, 3, 2, 1, 0)
    assert a["precision"] == pytest.approx(2 / 3, rel=1e-9)
    assert a["recall"] == 1.0
    assert a["f1"] == pytest.approx(0.8, rel=1e-9)
    assert a["iou_mean"] == pytest.approx(0.75, rel=1e-6)
    assert a["best_iou_mean"] == pytest.approx(0.75, rel=1e-6)
    assert a["area_weighted_recall"] == 1.0
    assert a["area_weighted_precision"] == pytest.approx(2.1 / 2.9, rel=1e-6)
    assert a["oversegmentation_mean"] == pytest.approx((0.1 + 0.4) / 2, rel=1e-6)
    assert a["undersegmentation_mean"] == pytest.approx(0.0, abs=1e-6)
    assert a["over_segmentation"] == 0.0 and a["under_segmentation"] == 0.0
    assert a["reference_area_ha"] == pytest.approx((a_ref[0] + a_ref[2]) / 1e4, rel=1e-6)
    assert a["predicted_area_ha"] == pytest.approx((a_pred[0] + a_pred[2] + a_pred[3]) / 1e4, rel=1e-6)
    assert a["median_area_ha"] == pytest.approx((a_ref[0] + a_ref[2]) / 2e4, rel=1e-6)  # median of two
    errors = [a_pred[0] - a_ref[0], a_pred[2] - a_ref[2]]
    assert a["area_error_signed_mean_m2"] == pytest.approx(np.mean(errors), rel=1e-6)
    assert (b["count_reference"], b["count_predicted"], b["count_tp"], b["count_fp"], b["count_fn"]) == (1, 1, 0, 1, 1)
    for key in ("precision", "recall", "f1", "iou_mean", "area_weighted_precision", "area_weighted_recall"):
        assert b[key] == 0.0, key
    assert b["best_iou_mean"] == pytest.approx(1 / 3, rel=1e-6)
    assert b["oversegmentation_mean"] == pytest.approx(0.5, rel=1e-6)
    assert b["undersegmentation_mean"] == pytest.approx(0.5, rel=1e-6)
    assert math.isnan(b["area_error_signed_mean_m2"])
    assert b["area_error_mean_m2"] == 0.0
    # Predictions: 3 in a, 1 in b, P4 (no home) only overall.
    assert m["count_predicted"] == 5
    assert m["count_fp_unassigned"] == 1


def test_strata_as_column_series_array_give_the_same_groups():
    values = ["a", "b", "a", None]
    pred, ref = scenario_a(UTM, county=values)
    by_column = evaluate(pred, ref, strata="county")
    shuffled = pd.Series(values, index=ref.index).iloc[[2, 0, 3, 1]]
    # The same groups whichever way the strata come; only strata_column says where from.
    assert by_column["strata_column"] == "county"
    skip = {"strata_column"}
    assert_metrics_equal(evaluate(pred, ref, strata=shuffled), by_column, skip=skip)
    assert_metrics_equal(evaluate(pred, ref, strata=np.array(values, dtype=object)), by_column, skip=skip)
    assert_metrics_equal(evaluate(pred, ref, strata=values), by_column, skip=skip)
    assert_metrics_equal(evaluate(pred, ref, strata=pd.Series(values, index=ref.index)), by_column, skip=skip)
    assert evaluate(pred, ref, strata=values)["strata_column"] is None


def test_strata_keys_are_str_of_the_values():
    pred, ref = scenario_a(UTM, code=pd.array([7, 8, 7, None], dtype="Int64"))
    m = evaluate(pred, ref, strata="code")
    assert set(m["per_stratum"]) == {"7", "8"}
    assert m["count_reference_no_stratum"] == 1
    m = evaluate(pred, ref, strata=[1.5, np.nan, 1.5, 2.5])
    assert set(m["per_stratum"]) == {"1.5", "2.5"}
    assert m["count_reference_no_stratum"] == 1


def test_all_strata_missing():
    pred, ref = scenario_a(UTM)
    m = evaluate(pred, ref, strata=[None, np.nan, None, pd.NA])
    assert m["per_stratum"] == {}
    assert m["count_reference_no_stratum"] == 4
    assert m["count_tp"] == 2  # still counted overall


def test_groups_leave_the_overall_metrics_unchanged():
    pred, ref = scenario_a(UTM, county=["a", "b", "a", None])
    plain = evaluate(pred, ref)
    grouped = evaluate(pred, ref, strata="county", size_bins=[0, 1.5, 10])
    for key in (
        "per_stratum", "count_reference_no_stratum", "strata_column", "per_size_class", "size_class_edges_ha",
        "count_reference_outside_size_classes", "worst",
    ):
        grouped.pop(key)
    assert_metrics_equal(grouped, plain)


def test_per_stratum_counts_add_up_to_overall_minus_unassigned_and_missing():
    pred, ref = scenario_a(UTM, county=["a", "b", "c", "d"])
    m = evaluate(pred, ref, strata="county", matching="many_to_one")
    groups = m["per_stratum"].values()
    assert sum(g["count_reference"] for g in groups) == m["count_reference"]
    assert sum(g["count_tp"] for g in groups) == m["count_tp"]
    assert sum(g["count_predicted"] for g in groups) == m["count_predicted"] - m["count_fp_unassigned"]
    assert sum(g["reference_area_ha"] for g in groups) == pytest.approx(m["reference_area_ha"], rel=1e-12)


# --------------------------------------------------------------------------------------
# per_size_class through evaluate, exact areas in EPSG:6933:
# R0, R1, R3 are 1 ha, R2 is 2 ha.
# --------------------------------------------------------------------------------------


def _size_n(m: dict) -> dict[str, int]:
    return {k: v["n"] for k, v in m["per_size_class"].items()}


def test_field_at_an_inner_edge_goes_to_the_upper_class():
    pred, ref = scenario_a(EA)
    m = evaluate(pred, ref, size_bins=[1, 2, 4])
    assert _size_n(m) == {"1-2": 3, "2-4": 1}
    lo, hi = m["per_size_class"]["1-2"], m["per_size_class"]["2-4"]
    assert (lo["lower_ha"], lo["upper_ha"], hi["lower_ha"], hi["upper_ha"]) == (1.0, 2.0, 2.0, 4.0)
    # "1-2": R0 (P0 matched), R1 (P1 home, unmatched), R3 (nothing).
    assert (lo["count_reference"], lo["count_predicted"], lo["count_tp"], lo["count_fp"], lo["count_fn"]) == (3, 2, 1, 1, 2)
    assert lo["precision"] == 0.5
    assert lo["recall"] == pytest.approx(1 / 3, rel=1e-12)
    assert lo["iou_mean"] == pytest.approx(0.9, rel=1e-12)
    assert lo["best_iou_mean"] == pytest.approx((0.9 + 1 / 3 + 0) / 3, rel=1e-12)
    assert lo["oversegmentation_mean"] == pytest.approx((0.1 + 0.5 + 1.0) / 3, rel=1e-12)
    assert lo["undersegmentation_mean"] == pytest.approx(0.25, rel=1e-12)
    assert lo["reference_area_ha"] == pytest.approx(3.0, rel=1e-12)
    assert lo["predicted_area_ha"] == pytest.approx(1.9, rel=1e-12)
    assert lo["median_area_ha"] == pytest.approx(1.0, rel=1e-12)
    assert lo["area_weighted_recall"] == pytest.approx(1 / 3, rel=1e-12)
    assert lo["area_weighted_precision"] == pytest.approx(0.9 / 1.9, rel=1e-12)
    # "2-4": R2 with P2 (matched, 0.6) and P3 (home R2).
    assert (hi["count_reference"], hi["count_predicted"], hi["count_tp"], hi["count_fp"], hi["count_fn"]) == (1, 2, 1, 1, 0)
    assert hi["precision"] == 0.5 and hi["recall"] == 1.0
    assert hi["iou_mean"] == pytest.approx(0.6, rel=1e-12)
    assert hi["area_weighted_precision"] == pytest.approx(0.6, rel=1e-12)
    assert hi["area_error_mean_m2"] == pytest.approx(8000.0, rel=1e-12)
    assert hi["area_error_signed_mean_m2"] == pytest.approx(-8000.0, rel=1e-12)
    assert hi["median_area_ha"] == pytest.approx(2.0, rel=1e-12)
    assert hi["predicted_area_ha"] == pytest.approx(2.0, rel=1e-12)


def test_field_at_the_last_edge_goes_into_the_last_class_and_empty_class():
    pred, ref = scenario_a(EA)
    m = evaluate(pred, ref, size_bins=[0.5, 1, 2])
    assert _size_n(m) == {"0.5-1": 0, "1-2": 4}
    empty = m["per_size_class"]["0.5-1"]
    # An empty size class: n = 0 and NaN rates.
    for key in ("precision", "recall", "f1", "iou_mean", "best_iou_mean", "area_weighted_precision", "area_weighted_recall", "area_weighted_f1"):
        assert math.isnan(empty[key]), key
    assert empty["count_reference"] == 0 and empty["count_predicted"] == 0
    full = m["per_size_class"]["1-2"]
    assert (full["count_reference"], full["count_tp"]) == (4, 2)
    assert full["count_predicted"] == 4  # P4 has no home


def test_fields_outside_every_class_count_only_overall():
    pred, ref = scenario_a(EA)
    m = evaluate(pred, ref, size_bins=[1.5, 2, 3])  # 1 ha fields below the first edge
    assert _size_n(m) == {"1.5-2": 0, "2-3": 1}
    m = evaluate(pred, ref, size_bins=[0, 1.5])  # the 2 ha field above the last edge
    assert _size_n(m) == {"0-1.5": 3}
    assert m["count_reference"] == 4
    f = evaluate_frame(pred, ref, size_bins=[0, 1.5])
    assert f["size_class"].tolist()[:2] == ["0-1.5", "0-1.5"]
    assert pd.isna(f["size_class"].iloc[2])


def test_auto_size_bins_on_exact_areas():
    pred, ref = scenario_a(EA)
    m = evaluate(pred, ref, size_bins="auto")
    # areas 1, 1, 2, 1 ha: edges [1, 2]; the 2 ha field sits on the closed last edge.
    assert _size_n(m) == {"1-2": 4}
    ref = layer(strips([(0, 0.3), (1, 5), (6, 23)], EA), EA)  # 0.3, 4, 17 ha
    m = evaluate(ref, ref, size_bins="auto")
    assert _size_n(m) == {"0.2-0.5": 1, "0.5-1": 0, "1-2": 0, "2-5": 1, "5-10": 0, "10-20": 1}
    assert m["per_size_class"]["10-20"]["lower_ha"] == 10.0
    assert m["per_size_class"]["10-20"]["recall"] == 1.0
    assert math.isnan(m["per_size_class"]["5-10"]["recall"])


def test_infinite_last_edge():
    pred, ref = scenario_a(EA)
    m = evaluate(pred, ref, size_bins=[0, 1.5, float("inf")])
    assert _size_n(m) == {"0-1.5": 3, "1.5-inf": 1}
    assert m["per_size_class"]["1.5-inf"]["upper_ha"] == float("inf")


def test_size_classes_of_an_empty_reference():
    pred, _ = scenario_a(EA)
    m = evaluate(pred, layer([], EA), size_bins="auto")
    assert m["per_size_class"] == {}
    m = evaluate(pred, layer([], EA), size_bins=[0, 1])
    assert _size_n(m) == {"0-1": 0}

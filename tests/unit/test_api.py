"""The public API: evaluate, evaluate_frame, pixels_per_field, check_options.

Every expected value is computed by hand from SPEC.md and seed 000 (see the comments
next to each case); areas come from tests.common.ea_area, which projects with pyproj
directly. Boundary-distance and tolerance values are not checked here (only that the
keys exist): they belong to evalcore/boundary.py and its own tests.
"""

from __future__ import annotations

import math

import geopandas
import numpy as np
import pandas as pd
import pytest
import shapely
from shapely.geometry import GeometryCollection, LineString, MultiPolygon, Point, Polygon

import evalcore
from evalcore import evaluate, evaluate_frame, pixels_per_field
from evalcore.api import check_options
from tests.common import (
    BOUNDARY_VALUE_KEYS,
    EA,
    EA_X0,
    EA_Y0,
    FRAME_COLUMNS,
    SCENARIO_A_PRED,
    SCENARIO_A_REF,
    SUMMARY_KEYS,
    TOLERANCE_SUMMARY_KEYS,
    FAMILY_KEYS,
    UTM,
    WGS84,
    X0,
    Y0,
    assert_metrics_equal,
    ea_area,
    ea_areas,
    empty_layer,
    layer,
    scenario_a,
    square,
    strip,
    strips,
)

# Ratios of reprojected geometries (UTM / EPSG:4326 -> EPSG:6933). Edges are split at
# 50 m before reprojection (SPEC 2.3), so a prediction lying inside a reference in UTM
# can stick out of it by ~1e-4 m in EPSG:6933: ratios hold to ~1e-7, not exactly.
REL = 1e-6
ABS = 1e-6


def approx(value: float, rel: float = REL) -> object:
    return pytest.approx(value, rel=rel, abs=ABS)


# --------------------------------------------------------------------------------------
# Scenario A (tests/common.py): 4 reference strips, 5 predictions, by hand.
#   R0=[0,1] R1=[2,3] R2=[4,6] R3=[8,9];  P0=[0,.9] P1=[2.5,3.5] P2=[4,5.2] P3=[5.2,6] P4=[10,11]
#   IoU: R0-P0 0.9, R1-P1 1/3, R2-P2 0.6, R2-P3 0.4; P4 overlaps nothing.
# --------------------------------------------------------------------------------------


def _scenario_a_areas(crs: str) -> tuple[np.ndarray, np.ndarray]:
    return ea_areas(strips(SCENARIO_A_REF, crs), crs), ea_areas(strips(SCENARIO_A_PRED, crs), crs)


@pytest.mark.parametrize("crs", [UTM, WGS84, EA])
def test_scenario_a_summary_at_threshold_one_half(crs):
    pred, ref = scenario_a(crs)
    a_ref, a_pred = _scenario_a_areas(crs)
    m = evaluate(pred, ref)  # iou_threshold=0.5, one_to_one
    # Matches: R0-P0 (0.9), R2-P2 (0.6). R1-P1 (1/3) and R2-P3 (0.4) are below 0.5.
    assert (m["count_reference"], m["count_predicted"]) == (4, 5)
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (2, 3, 2)
    assert m["precision"] == approx(2 / 5)
    assert m["recall"] == approx(2 / 4)
    assert m["f1"] == approx(2 * 0.4 * 0.5 / 0.9)  # 4/9
    assert m["iou_mean"] == approx((0.9 + 0.6) / 2)
    # best IoU per reference field: 0.9, 1/3, 0.6, 0 (R3: nothing overlaps).
    assert m["best_iou_mean"] == approx((0.9 + 1 / 3 + 0.6 + 0.0) / 4)  # 11/24
    # area-weighted: matched reference area (R0 + R2) = 3 of 5 units; matched predicted
    # area (P0 + P2) = 2.1 of 4.9 units.
    assert m["area_weighted_recall"] == approx(3 / 5)
    assert m["area_weighted_precision"] == approx(2.1 / 4.9)  # 3/7
    assert m["area_weighted_f1"] == approx(0.5)  # 2 (3/5)(3/7) / (3/5 + 3/7)
    # 0.1.x: no reference has two predictions at IoU >= 0.5, no prediction two references.
    assert m["over_segmentation"] == 0.0
    assert m["under_segmentation"] == 0.0
    # OS = 1 - |r ∩ p'| / |r|: R0 0.1, R1 0.5, R2 1 - 1.2/2 = 0.4 (p' = P2), R3 1 (none).
    assert m["oversegmentation_mean"] == approx((0.1 + 0.5 + 0.4 + 1.0) / 4)
    # US = 1 - |r ∩ p'| / |p'| over overlapped fields: R0 0, R1 0.5, R2 0.
    assert m["undersegmentation_mean"] == approx(0.5 / 3)
    assert m["count_fp_unassigned"] == 1  # P4
    # Areas: matched pairs (P0, R0) and (P2, R2).
    errors = np.array([a_pred[0] - a_ref[0], a_pred[2] - a_ref[2]])
    assert m["area_error_mean_m2"] == approx(np.abs(errors).mean())
    assert m["area_error_signed_mean_m2"] == approx(errors.mean())
    assert m["area_error_signed_mean_m2"] < 0  # both predictions are smaller
    assert m["reference_area_ha"] == approx(a_ref.sum() / 1e4)
    assert m["predicted_area_ha"] == approx(a_pred.sum() / 1e4)
    assert m["median_area_ha"] == approx(np.median(a_ref) / 1e4)
    assert m["median_area_ha"] == approx(a_ref[0] / 1e4)  # areas 1, 1, 2, 1 units
    assert m["iou_threshold"] == 0.5
    assert m["matching"] == "one_to_one"
    assert m["equal_area_crs"] == "EPSG:6933"
    assert m["utm_epsg_codes"] == [32613]
    for key in ("count_reference_dropped", "count_predicted_dropped", "count_reference_repaired", "count_predicted_repaired"):
        assert m[key] == 0


def test_scenario_a_ha_are_about_one_hectare_per_unit_in_utm():
    """100 m x 100 m in UTM 13N at its central meridian: about 1 ha (scale 0.9996)."""
    pred, ref = scenario_a(UTM)
    m = evaluate(pred, ref)
    assert m["reference_area_ha"] == pytest.approx(5.0, rel=1e-3)
    assert m["predicted_area_ha"] == pytest.approx(4.9, rel=1e-3)
    assert m["median_area_ha"] == pytest.approx(1.0, rel=1e-3)
    assert m["area_error_mean_m2"] == pytest.approx(4500.0, rel=1e-3)


@pytest.mark.parametrize("crs", [UTM, WGS84])
def test_scenario_a_summary_at_threshold_0_3(crs):
    pred, ref = scenario_a(crs)
    a_ref, a_pred = _scenario_a_areas(crs)
    m = evaluate(pred, ref, 0.3)
    # Now R1-P1 (1/3) matches too, and R2 has two predictions at IoU >= 0.3 (0.6, 0.4).
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (3, 2, 1)
    assert m["precision"] == approx(3 / 5)
    assert m["recall"] == approx(3 / 4)
    assert m["f1"] == approx(2 / 3)
    assert m["iou_mean"] == approx((0.9 + 1 / 3 + 0.6) / 3)
    assert m["over_segmentation"] == approx(1 / 4)
    assert m["under_segmentation"] == 0.0
    assert m["area_weighted_recall"] == approx(4 / 5)
    assert m["area_weighted_precision"] == approx(3.1 / 4.9)
    assert m["area_weighted_f1"] == approx(2 * 0.8 * (3.1 / 4.9) / (0.8 + 3.1 / 4.9))
    errors = np.array([a_pred[0] - a_ref[0], a_pred[1] - a_ref[1], a_pred[2] - a_ref[2]])
    assert m["area_error_mean_m2"] == approx(np.abs(errors).mean())
    assert m["area_error_signed_mean_m2"] == approx(errors.mean())
    # Threshold-free metrics do not change.
    assert m["best_iou_mean"] == approx(11 / 24)
    assert m["oversegmentation_mean"] == approx(0.5)
    assert m["undersegmentation_mean"] == approx(1 / 6)
    assert m["iou_threshold"] == 0.3


def test_scenario_a_many_to_one_equals_one_to_one_without_conflicts():
    pred, ref = scenario_a(UTM)
    one = evaluate(pred, ref)
    many = evaluate(pred, ref, matching="many_to_one")
    assert many["matching"] == "many_to_one"
    assert_metrics_equal(one, many, skip={"matching"} | BOUNDARY_VALUE_KEYS)


def test_summary_has_exactly_the_seed_keys():
    pred, ref = scenario_a(UTM)
    assert set(evaluate(pred, ref)) == SUMMARY_KEYS | FAMILY_KEYS
    assert set(evaluate(pred, ref, iou_sweep_thresholds=None)) == SUMMARY_KEYS | FAMILY_KEYS - {"iou_sweep"}


def test_summary_keys_with_tolerance_strata_size_bins_and_bootstrap():
    pred, ref = scenario_a(UTM, county=["a", "b", "a", None])
    m = evaluate(pred, ref, strata="county", size_bins=[0, 1.5, 10], bootstrap=5, boundary_tolerance_m=5.0)
    extra = {
        "per_stratum", "count_reference_no_stratum", "strata_column", "per_size_class", "size_class_edges_ha",
        "count_reference_outside_size_classes", "bootstrap", "worst",
    }
    assert set(m) == SUMMARY_KEYS | TOLERANCE_SUMMARY_KEYS | FAMILY_KEYS | extra
    assert m["boundary_tolerance_m"] == 5.0
    assert set(m["bootstrap"]) == {
        "n_resamples", "seed", "confidence_level", "method", "resampling", "partition_size_m", "ci", "n_undefined", "unit", "n_units", "tile_km",
    }
    for entry in list(m["per_stratum"].values()) + list(m["per_size_class"].values()):
        assert "ci" in entry and "bootstrap" not in entry
    for entry in m["per_size_class"].values():
        assert {"lower_ha", "upper_ha", "n"} <= set(entry)


def test_boundary_sample_spacing_argument_is_reported():
    pred, ref = scenario_a(UTM)
    assert evaluate(pred, ref)["boundary_sample_spacing_m"] == 1.0
    assert evaluate(pred, ref, boundary_sample_spacing_m=None)["boundary_sample_spacing_m"] is None
    assert evaluate(pred, ref, boundary_sample_spacing_m=2.5)["boundary_sample_spacing_m"] == 2.5


def test_geoseries_inputs_give_the_same_summary():
    pred, ref = scenario_a(UTM)
    assert_metrics_equal(evaluate(pred.geometry, ref.geometry), evaluate(pred, ref))


def test_inputs_are_not_modified():
    pred, ref = scenario_a(WGS84, county=["a", "b", "a", None])
    pred_before, ref_before = pred.copy(), ref.copy()
    evaluate(pred, ref, strata="county", size_bins="auto")
    evaluate_frame(pred, ref, strata="county")
    pd.testing.assert_frame_equal(pred, pred_before)
    pd.testing.assert_frame_equal(ref, ref_before)
    assert pred.crs == ref.crs == WGS84


# --------------------------------------------------------------------------------------
# Two squares offset by half a side: IoU = 0.5 / 1.5 = 1/3.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("crs, rel", [(UTM, 1e-6), (EA, 1e-12)])
def test_half_offset_squares_iou_one_third(crs, rel):
    ref = layer([strip(0, 1, crs)], crs)
    pred = layer([strip(0.5, 1.5, crs)], crs)
    at_half = evaluate(pred, ref, 0.5)
    assert at_half["count_tp"] == 0
    assert at_half["best_iou_mean"] == pytest.approx(1 / 3, rel=rel)  # not conditional on a match
    assert at_half["iou_mean"] == 0.0  # nothing matched: a rate, 0.0
    assert at_half["precision"] == 0.0 and at_half["recall"] == 0.0 and at_half["f1"] == 0.0
    assert at_half["oversegmentation_mean"] == pytest.approx(0.5, rel=rel)
    assert at_half["undersegmentation_mean"] == pytest.approx(0.5, rel=rel)
    assert math.isnan(at_half["area_error_signed_mean_m2"])  # a mean with no pair
    assert at_half["area_error_mean_m2"] == 0.0  # 0.1.x key: 0.0
    at_third = evaluate(pred, ref, 0.3)
    assert at_third["count_tp"] == 1
    assert at_third["iou_mean"] == pytest.approx(1 / 3, rel=rel)
    assert at_third["precision"] == 1.0 and at_third["recall"] == 1.0


def test_iou_one_third_in_equal_area_crs_is_exact():
    ref = layer([strip(0, 1, EA)], EA)
    pred = layer([strip(0.5, 1.5, EA)], EA)
    assert evaluate(pred, ref, 0.3)["iou_mean"] == pytest.approx(1 / 3, rel=1e-12)


# --------------------------------------------------------------------------------------
# A reference covered by two halves (OS/US and the 0.1.x over_segmentation).
# --------------------------------------------------------------------------------------


def test_reference_split_in_two_halves_exact_in_equal_area_crs():
    # R = [0, 2]; P0 = [0, 1], P1 = [1, 2]: each IoU = 1/2 exactly, a tie.
    ref = layer([strip(0, 2, EA)], EA)
    pred = layer(strips([(1, 2), (0, 1)], EA), EA, index=["right", "left"])
    m = evaluate(pred, ref, 0.5)
    # IoU exactly at the threshold matches; the tie goes to prediction position 0.
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (1, 1, 0)
    assert m["iou_mean"] == 0.5
    assert m["precision"] == 0.5 and m["recall"] == 1.0
    assert m["over_segmentation"] == 1.0  # one reference field with two predictions at IoU >= 0.5
    assert m["under_segmentation"] == 0.0
    # p' has |r ∩ p'| = 1 of |r| = 2: OS = 1/2; p' lies inside r: US = 0.
    assert m["oversegmentation_mean"] == 0.5
    assert m["undersegmentation_mean"] == 0.0
    assert m["area_error_mean_m2"] == 10_000.0  # |1 ha - 2 ha|
    assert m["area_error_signed_mean_m2"] == -10_000.0
    assert m["count_fp_unassigned"] == 0  # the unmatched half overlaps the reference
    frame = evaluate_frame(pred, ref, iou_threshold=0.5)
    assert frame["pred_index"].tolist() == ["right"]
    assert frame["n_overlapping_pred"].tolist() == [2]


def test_reference_split_in_two_halves_in_utm_below_one_half():
    ref = layer([strip(0, 2)])
    pred = layer(strips([(0, 1), (1, 2)]))
    m = evaluate(pred, ref, 0.4)
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (1, 1, 0)
    assert m["over_segmentation"] == 1.0
    assert m["iou_mean"] == approx(0.5)
    assert m["oversegmentation_mean"] == approx(0.5)
    assert m["undersegmentation_mean"] == approx(0.0, rel=1e-6)


def test_over_segmentation_with_overlapping_predictions():
    # R = [0, 2]; P0 = [0, 1.2], P1 = [0.8, 2] overlap each other: IoU 0.6 each.
    ref = layer([strip(0, 2, EA)], EA)
    pred = layer(strips([(0, 1.2), (0.8, 2)], EA), EA)
    m = evaluate(pred, ref, 0.5)
    assert m["over_segmentation"] == 1.0
    assert (m["count_tp"], m["count_fp"]) == (1, 1)
    assert m["iou_mean"] == pytest.approx(0.6, rel=1e-12)
    assert m["oversegmentation_mean"] == pytest.approx(1 - 1.2 / 2, rel=1e-12)
    assert m["undersegmentation_mean"] == pytest.approx(0.0, abs=1e-12)
    # Above 0.6 neither pair is eligible.
    m = evaluate(pred, ref, 0.7)
    assert m["over_segmentation"] == 0.0 and m["count_tp"] == 0


def test_under_segmentation_one_prediction_over_two_references():
    # R0 = [0, 1.2], R1 = [0.8, 2] (overlapping references); P = [0, 2]: IoU 0.6 each.
    ref = layer(strips([(0, 1.2), (0.8, 2)], EA), EA)
    pred = layer([strip(0, 2, EA)], EA)
    m = evaluate(pred, ref, 0.5)
    assert m["under_segmentation"] == 1.0  # 1 of 1 prediction has two references at IoU >= 0.5
    assert m["over_segmentation"] == 0.0
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (1, 0, 1)
    assert m["recall"] == 0.5


# --------------------------------------------------------------------------------------
# count_fp_unassigned
# --------------------------------------------------------------------------------------


def test_prediction_touching_only_along_an_edge_is_unassigned():
    ref = layer([strip(0, 1)])
    pred = layer(strips([(1, 2), (0, 1)]))  # P0 shares an edge with R (zero-area intersection)
    m = evaluate(pred, ref)
    assert (m["count_tp"], m["count_fp"], m["count_fp_unassigned"]) == (1, 1, 1)
    frame = evaluate_frame(pred, ref)
    assert frame["n_overlapping_pred"].tolist() == [1]


def test_unassigned_false_positives_count_only_unmatched_without_overlap():
    pred, ref = scenario_a(UTM)
    m = evaluate(pred, ref)
    # Precision among predictions that touch the reference (seed 000):
    touching = m["count_tp"] / (m["count_tp"] + m["count_fp"] - m["count_fp_unassigned"])
    assert touching == pytest.approx(2 / 4)


# --------------------------------------------------------------------------------------
# Empty layers and empty denominators (seed 000: rates and 0.1.x keys 0.0, other
# means NaN; both layers empty: rates 1.0).
# --------------------------------------------------------------------------------------

RATES = (
    "precision", "recall", "f1", "iou_mean", "best_iou_mean",
    "area_weighted_precision", "area_weighted_recall", "area_weighted_f1",
)
LEGACY = ("over_segmentation", "under_segmentation", "area_error_mean_m2")


@pytest.mark.parametrize("pred_crs", [UTM, None])
def test_empty_predicted_layer(pred_crs):
    _, ref = scenario_a(UTM)
    m = evaluate(empty_layer(pred_crs), ref)
    assert (m["count_predicted"], m["count_reference"]) == (0, 4)
    assert (m["count_tp"], m["count_fp"], m["count_fn"], m["count_fp_unassigned"]) == (0, 0, 4, 0)
    for key in RATES + LEGACY:
        assert m[key] == 0.0, key
    assert m["oversegmentation_mean"] == 1.0  # every field: OS = 1 (nothing overlaps)
    for key in ("undersegmentation_mean", "area_error_signed_mean_m2", "hausdorff_mean_m", "boundary_distance_mean_m"):
        assert math.isnan(m[key]), key
    assert m["predicted_area_ha"] == 0.0
    assert m["reference_area_ha"] > 0
    assert m["utm_epsg_codes"] == [32613]


@pytest.mark.parametrize("ref_crs", [UTM, None])
def test_empty_reference_layer(ref_crs):
    pred, _ = scenario_a(UTM)
    m = evaluate(pred, empty_layer(ref_crs))
    assert (m["count_predicted"], m["count_reference"]) == (5, 0)
    assert (m["count_tp"], m["count_fp"], m["count_fn"], m["count_fp_unassigned"]) == (0, 5, 0, 5)
    for key in RATES + LEGACY:
        assert m[key] == 0.0, key
    for key in ("oversegmentation_mean", "undersegmentation_mean", "area_error_signed_mean_m2", "median_area_ha"):
        assert math.isnan(m[key]), key
    assert m["reference_area_ha"] == 0.0


@pytest.mark.parametrize("crs", [UTM, None])
def test_both_layers_empty(crs):
    m = evaluate(empty_layer(crs), empty_layer(crs))
    assert set(m) == SUMMARY_KEYS | FAMILY_KEYS
    for key in RATES:
        assert m[key] == 1.0, key
    for key in LEGACY:
        assert m[key] == 0.0, key
    for key in ("oversegmentation_mean", "undersegmentation_mean", "area_error_signed_mean_m2", "median_area_ha", "hausdorff_mean_m"):
        assert math.isnan(m[key]), key
    for key in ("count_predicted", "count_reference", "count_tp", "count_fp", "count_fn", "count_fp_unassigned"):
        assert m[key] == 0, key
    assert m["reference_area_ha"] == 0.0 and m["predicted_area_ha"] == 0.0
    assert m["utm_epsg_codes"] == []


def test_both_layers_empty_with_groups_and_bootstrap():
    ref = empty_layer(UTM)
    ref["county"] = pd.Series([], dtype=object)
    m = evaluate(empty_layer(UTM), ref, strata="county", size_bins=[0, 1, 2], bootstrap=10)
    assert m["per_stratum"] == {}
    assert m["count_reference_no_stratum"] == 0
    assert set(m["per_size_class"]) == {"0-1", "1-2"}
    for entry in m["per_size_class"].values():
        assert entry["n"] == 0
        assert math.isnan(entry["precision"]) and math.isnan(entry["recall"])


NOT_POLYGONAL = [
    None,
    Polygon(),
    Point(X0, Y0),
    LineString([(X0, Y0), (X0 + 100, Y0 + 100)]),
    Polygon([(X0, Y0), (X0 + 100, Y0), (X0 + 200, Y0), (X0, Y0)]),  # zero area
    GeometryCollection([Point(X0, Y0), LineString([(X0, Y0), (X0 + 10, Y0)])]),
]


def test_all_rows_dropped_on_both_sides_is_both_empty():
    m = evaluate(layer(NOT_POLYGONAL), layer(NOT_POLYGONAL))
    assert (m["count_reference_dropped"], m["count_predicted_dropped"]) == (6, 6)
    assert (m["count_reference"], m["count_predicted"]) == (0, 0)
    assert (m["count_reference_repaired"], m["count_predicted_repaired"]) == (0, 0)
    for key in RATES:
        assert m[key] == 1.0, key
    for key in LEGACY:
        assert m[key] == 0.0, key


def test_all_reference_rows_dropped():
    pred, _ = scenario_a(UTM)
    m = evaluate(pred, layer(NOT_POLYGONAL))
    assert m["count_reference_dropped"] == 6
    assert m["count_reference"] == 0
    assert m["count_fp"] == m["count_fp_unassigned"] == 5
    assert m["recall"] == 0.0 and m["precision"] == 0.0


def test_layer_of_only_null_geometries_needs_no_crs():
    m = evaluate(layer([None, None], crs=None), layer([None], crs=None))
    assert (m["count_predicted_dropped"], m["count_reference_dropped"]) == (2, 1)
    assert m["precision"] == 1.0  # both empty after dropping


# --------------------------------------------------------------------------------------
# Preparation visible through evaluate: dropped and repaired rows, CRSs.
# --------------------------------------------------------------------------------------


def test_dropped_rows_are_counted_and_excluded():
    valid = square(X0, Y0, 100)
    ref = layer([NOT_POLYGONAL[0], valid, *NOT_POLYGONAL[1:]], index=list("abcdefg"))
    pred = layer([square(X0, Y0, 100), None, Point(X0 + 50, Y0 + 50)])
    m = evaluate(pred, ref)
    assert (m["count_reference"], m["count_reference_dropped"]) == (1, 6)
    assert (m["count_predicted"], m["count_predicted_dropped"]) == (1, 2)
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (1, 0, 0)
    assert m["precision"] == m["recall"] == 1.0  # dropped rows are in no denominator
    assert m["reference_area_ha"] == approx(ea_area(valid, UTM) / 1e4)
    frame = evaluate_frame(pred, ref)
    assert frame.index.tolist() == ["b"]
    assert bool(frame.loc["b", "matched"])


def test_multipolygon_is_kept_and_not_repaired():
    parts = MultiPolygon([square(X0, Y0, 100), square(X0 + 200, Y0, 100)])
    m = evaluate(layer([parts]), layer([parts]))
    assert m["count_reference"] == 1 and m["count_reference_repaired"] == 0
    assert m["iou_mean"] == 1.0
    assert m["reference_area_ha"] == approx(2 * ea_area(square(X0, Y0, 100), UTM) / 1e4, rel=1e-5)


def test_polygonal_part_of_a_collection_is_kept():
    coll = GeometryCollection([square(X0, Y0, 100), LineString([(X0, Y0), (X0 - 50, Y0 - 50)])])
    m = evaluate(layer([square(X0, Y0, 100)]), layer([coll]))
    assert m["count_reference"] == 1 and m["count_reference_dropped"] == 0
    assert m["count_tp"] == 1 and m["iou_mean"] == approx(1.0)


def test_spike_is_repaired_away():
    # A square with a one-dimensional spike: make_valid(keep_collapsed=False) keeps the square.
    spiky = Polygon([(X0, Y0), (X0 + 100, Y0), (X0 + 100, Y0 + 100), (X0 + 50, Y0 + 100), (X0 + 50, Y0 + 150), (X0 + 50, Y0 + 100), (X0, Y0 + 100)])
    assert not spiky.is_valid
    m = evaluate(layer([square(X0, Y0, 100)]), layer([spiky]))
    assert (m["count_reference_repaired"], m["count_reference_dropped"]) == (1, 0)
    assert m["iou_mean"] == approx(1.0)
    assert m["reference_area_ha"] == approx(ea_area(square(X0, Y0, 100), UTM) / 1e4)


def test_bow_tie_is_repaired_and_counted():
    # A bow-tie over the unit square: make_valid(method="structure") keeps its two
    # triangles, half of the square's area, so IoU with the square = 1/2.
    bow_tie = Polygon([(X0, Y0), (X0 + 100, Y0 + 100), (X0 + 100, Y0), (X0, Y0 + 100)])
    assert not bow_tie.is_valid
    far_bow_tie = shapely.affinity.translate(bow_tie, 5000, 0)
    ref = layer([bow_tie])
    pred = layer([square(X0, Y0, 100), far_bow_tie])
    m = evaluate(pred, ref, 0.4)
    assert (m["count_reference_repaired"], m["count_predicted_repaired"]) == (1, 1)
    assert (m["count_reference_dropped"], m["count_predicted_dropped"]) == (0, 0)
    assert (m["count_reference"], m["count_predicted"]) == (1, 2)
    assert m["count_tp"] == 1
    assert m["iou_mean"] == approx(0.5)
    square_ha = ea_area(square(X0, Y0, 100), UTM) / 1e4
    assert m["reference_area_ha"] == approx(square_ha / 2)
    assert m["predicted_area_ha"] == approx(square_ha * 1.5)
    assert m["count_fp_unassigned"] == 1


def test_layer_with_geometries_but_no_crs_is_refused():
    pred, ref = scenario_a(UTM)
    with pytest.raises(ValueError, match="reference"):
        evaluate(pred, ref.set_crs(None, allow_override=True))
    with pytest.raises(ValueError, match="predicted"):
        evaluate(pred.set_crs(None, allow_override=True), ref)
    with pytest.raises(evalcore.CRSError):
        evaluate_frame(pred, ref.set_crs(None, allow_override=True))


def _to(gdf: geopandas.GeoDataFrame, crs: str) -> geopandas.GeoDataFrame:
    """The same shapes in another CRS: edges split at 1 m first, so a straight UTM edge
    stays (to ~1e-8 m) the same line on the ground after reprojection."""
    return gdf.set_geometry(gdf.geometry.segmentize(1.0)).to_crs(crs)


def test_layers_in_different_crss_give_the_same_results():
    pred, ref = scenario_a(UTM)
    # Sweep thresholds away from the scenario's IoUs (0.6, 0.75, 0.9 up to reprojection
    # noise of ~1e-7, which a threshold exactly at them would turn into a count change).
    sweep = {"iou_sweep_thresholds": [0.3, 0.55, 0.8]}
    both_utm = evaluate(pred, ref, 0.3, **sweep)
    skip = BOUNDARY_VALUE_KEYS
    assert_metrics_equal(evaluate(_to(pred, WGS84), ref, 0.3, **sweep), both_utm, rel=1e-6, skip=skip)
    assert_metrics_equal(evaluate(pred, _to(ref, WGS84), 0.3, **sweep), both_utm, rel=1e-6, skip=skip)
    assert_metrics_equal(evaluate(_to(pred, EA), _to(ref, WGS84), 0.3, **sweep), both_utm, rel=1e-6, skip=skip)


def test_southern_hemisphere_zone():
    ref = layer([shapely.box(3.0, -1.001, 3.001, -1.0)], WGS84)
    m = evaluate(ref, ref)
    assert m["utm_epsg_codes"] == [32731]
    assert m["iou_mean"] == 1.0


def test_equal_area_crs_argument():
    pred, ref = scenario_a(UTM)
    m = evaluate(pred, ref, equal_area_crs="EPSG:6933")
    assert m["equal_area_crs"] == "EPSG:6933"
    # Another equal-area CRS (Albers for the contiguous US): the same ratios.
    m = evaluate(pred, ref, equal_area_crs="EPSG:5070")
    assert m["equal_area_crs"] == "EPSG:5070"
    assert m["iou_mean"] == approx(0.75, rel=1e-5)
    assert m["area_weighted_recall"] == approx(0.6, rel=1e-5)


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [[square(X0, Y0, 1)], square(X0, Y0, 1), pd.DataFrame({"a": [1]}), None, 3.0])
def test_inputs_that_are_not_geodataframes_raise_type_error(bad):
    pred, ref = scenario_a(UTM)
    with pytest.raises(TypeError, match="predicted"):
        evaluate(bad, ref)
    with pytest.raises(TypeError, match="reference"):
        evaluate(pred, bad)
    with pytest.raises(TypeError):
        evaluate_frame(pred, bad)
    with pytest.raises(TypeError):
        pixels_per_field(bad, 10.0)


@pytest.mark.parametrize("thr", [0, 0.0, -0.1, 1.5, 1.0000001, float("nan"), float("inf"), "0.5", None, True])
def test_iou_threshold_outside_unit_interval(thr):
    pred, ref = scenario_a(UTM)
    with pytest.raises(ValueError, match="iou_threshold"):
        evaluate(pred, ref, thr)
    with pytest.raises(ValueError, match="iou_threshold"):
        evaluate_frame(pred, ref, iou_threshold=thr)


def test_iou_threshold_one_is_allowed_and_matches_identical_polygons():
    pred, ref = scenario_a(UTM)
    m = evaluate(ref, ref, 1.0)
    assert m["count_tp"] == 4 and m["iou_threshold"] == 1.0
    assert evaluate(pred, ref, 1)["count_tp"] == 0


@pytest.mark.parametrize("value", [-1, 1.5, "10", True])
def test_bad_bootstrap(value):
    pred, ref = scenario_a(UTM)
    with pytest.raises(ValueError, match="bootstrap"):
        evaluate(pred, ref, bootstrap=value)


def test_bad_bootstrap_seed():
    pred, ref = scenario_a(UTM)
    with pytest.raises(ValueError, match="bootstrap_seed"):
        evaluate(pred, ref, bootstrap=2, bootstrap_seed=-1)


@pytest.mark.parametrize("name", ["boundary_tolerance_m", "boundary_sample_spacing_m", "partition_size_m"])
@pytest.mark.parametrize("value", [0, 0.0, -1.0, float("nan"), float("inf")])
def test_non_positive_lengths(name, value):
    pred, ref = scenario_a(UTM)
    with pytest.raises(ValueError, match=name):
        evaluate(pred, ref, **{name: value})


def test_non_positive_lengths_in_evaluate_frame():
    pred, ref = scenario_a(UTM)
    with pytest.raises(ValueError, match="boundary_tolerance_m"):
        evaluate_frame(pred, ref, boundary_tolerance_m=0)
    with pytest.raises(ValueError, match="boundary_sample_spacing_m"):
        evaluate_frame(pred, ref, boundary_sample_spacing_m=-1)


@pytest.mark.parametrize("bins", [[1, 1, 2], [2, 1], [5], [], [0, float("nan"), 2], "linear", [0, "x"]])
def test_bad_size_bins(bins):
    pred, ref = scenario_a(UTM)
    with pytest.raises(ValueError, match="size_bins"):
        evaluate(pred, ref, size_bins=bins)


@pytest.mark.parametrize("matching", ["one-to-one", "greedy", "", None])
def test_unknown_matching_mode_lists_the_valid_ones(matching):
    pred, ref = scenario_a(UTM)
    with pytest.raises(ValueError, match="matching") as info:
        evaluate(pred, ref, matching=matching)
    assert "one_to_one" in str(info.value) and "many_to_one" in str(info.value)


def test_missing_strata_column_lists_the_existing_columns():
    pred, ref = scenario_a(UTM, crop=["wheat"] * 4, region=[1, 2, 3, 4])
    with pytest.raises(ValueError, match="county") as info:
        evaluate(pred, ref, strata="county")
    assert "crop" in str(info.value) and "region" in str(info.value)


@pytest.mark.parametrize("crs", ["EPSG:4326", "EPSG:2263"])  # geographic; projected in US feet
def test_equal_area_crs_must_be_projected_in_metres(crs):
    pred, ref = scenario_a(UTM)
    with pytest.raises(ValueError, match="equal_area_crs"):
        evaluate(pred, ref, equal_area_crs=crs)


def test_unparseable_equal_area_crs():
    pred, ref = scenario_a(UTM)
    with pytest.raises(ValueError, match="equal_area_crs"):
        evaluate(pred, ref, equal_area_crs="not a crs")


def test_polygon_crossing_the_antimeridian_is_refused():
    # From lon 179.9 to -179.9: the message names the layer and the row.
    crossing = Polygon([(179.9, 10.0), (-179.9, 10.0), (-179.9, 10.1), (179.9, 10.1)])
    fine = shapely.box(179.8, 10.0, 179.85, 10.1)
    with pytest.raises(ValueError, match="antimeridian") as info:
        evaluate(layer([fine], WGS84), layer([fine, crossing], WGS84, index=["ok", "fiji"]))
    assert "reference" in str(info.value) and "fiji" in str(info.value)
    with pytest.raises(ValueError, match="predicted"):
        evaluate(layer([crossing], WGS84), layer([fine], WGS84))
    # A polygon next to (but not across) the antimeridian is fine.
    assert evaluate(layer([fine], WGS84), layer([fine], WGS84))["iou_mean"] == 1.0


# --------------------------------------------------------------------------------------
# evaluate_frame
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("crs", [UTM, WGS84])
def test_frame_of_scenario_a(crs):
    pred, ref = scenario_a(crs)
    a_ref, a_pred = _scenario_a_areas(crs)
    f = evaluate_frame(pred, ref)
    assert list(f.columns) == FRAME_COLUMNS
    assert f.index.tolist() == [10, 11, 12, 13]
    assert f["matched"].tolist() == [True, False, True, False]
    assert str(f["pred_index"].dtype) == "Int64"
    assert f["pred_index"].tolist() == [100, pd.NA, 102, pd.NA]
    assert str(f["max_overlap_pred_index"].dtype) == "Int64"
    assert f["max_overlap_pred_index"].tolist() == [100, 101, 102, pd.NA]
    np.testing.assert_allclose(f["iou"].to_numpy(), [0.9, np.nan, 0.6, np.nan], rtol=REL)
    np.testing.assert_allclose(f["best_iou"].to_numpy(), [0.9, 1 / 3, 0.6, 0.0], rtol=REL)
    assert f["n_overlapping_pred"].tolist() == [1, 1, 2, 0]
    np.testing.assert_allclose(f["oversegmentation"].to_numpy(), [0.1, 0.5, 0.4, 1.0], rtol=REL)
    np.testing.assert_allclose(f["undersegmentation"].to_numpy(), [0.0, 0.5, 0.0, np.nan], rtol=REL, atol=ABS)
    np.testing.assert_allclose(f["area_m2"].to_numpy(), a_ref, rtol=REL)
    np.testing.assert_allclose(f["area_ha"].to_numpy(), a_ref / 1e4, rtol=REL)
    np.testing.assert_allclose(f["pred_area_m2"].to_numpy(), [a_pred[0], np.nan, a_pred[2], np.nan], rtol=REL)
    assert f["utm_epsg"].tolist() == [32613] * 4
    for col in ("hausdorff_m", "boundary_mean_distance_m", "boundary_sample_spacing_m"):
        assert f[col].isna().tolist() == [False, True, False, True], col  # NaN when unmatched


def test_frame_perimeter_in_the_home_zone():
    pred, ref = scenario_a(UTM)
    f = evaluate_frame(pred, ref)
    # The layer is in its own home zone (EPSG:32613): 100 x 100 m and 200 x 100 m.
    assert f["perimeter_m"].tolist() == [400.0, 400.0, 600.0, 400.0]
    # In EPSG:4326 the perimeter is measured after reprojecting into EPSG:32613.
    pred, ref = scenario_a(WGS84)
    f = evaluate_frame(pred, ref)
    expected = [ref.geometry.iloc[[i]].to_crs(UTM).length.iloc[0] for i in range(4)]
    np.testing.assert_allclose(f["perimeter_m"].to_numpy(), expected, rtol=1e-6)


def test_frame_sums_agree_with_the_summary():
    pred, ref = scenario_a(WGS84)
    m = evaluate(pred, ref, 0.3)
    f = evaluate_frame(pred, ref, iou_threshold=0.3)
    assert f["matched"].sum() == m["count_tp"]
    assert f["iou"].sum() / f["matched"].sum() == pytest.approx(m["iou_mean"], rel=1e-12)
    assert f["best_iou"].mean() == pytest.approx(m["best_iou_mean"], rel=1e-12)
    assert f["oversegmentation"].mean() == pytest.approx(m["oversegmentation_mean"], rel=1e-12)
    assert f["undersegmentation"].mean() == pytest.approx(m["undersegmentation_mean"], rel=1e-12)  # NaN skipped
    assert f["area_ha"].sum() == pytest.approx(m["reference_area_ha"], rel=1e-12)
    assert f["area_ha"].median() == pytest.approx(m["median_area_ha"], rel=1e-12)
    err = (f["pred_area_m2"] - f["area_m2"]).dropna()
    assert err.abs().mean() == pytest.approx(m["area_error_mean_m2"], rel=1e-9)
    assert err.mean() == pytest.approx(m["area_error_signed_mean_m2"], rel=1e-9)


def test_frame_with_string_labels_and_groups():
    pred, ref = scenario_a(UTM, county=["a", "b", "a", None])
    ref.index = ["r0", "r1", "r2", "r3"]
    pred.index = ["p0", "p1", "p2", "p3", "p4"]
    f = evaluate_frame(pred, ref, strata="county", size_bins=[0, 1.5, 10])
    assert list(f.columns) == FRAME_COLUMNS + ["stratum", "size_class"]
    assert f.index.tolist() == ["r0", "r1", "r2", "r3"]
    assert f.loc["r0", "pred_index"] == "p0" and f.loc["r2", "pred_index"] == "p2"
    assert pd.isna(f.loc["r1", "pred_index"]) and pd.isna(f.loc["r3", "pred_index"])
    assert f.loc["r1", "max_overlap_pred_index"] == "p1"
    assert f["stratum"].tolist()[:3] == ["a", "b", "a"] and pd.isna(f.loc["r3", "stratum"])
    # ~1 ha fields in 0-1.5, the ~2 ha field in 1.5-10.
    assert f["size_class"].tolist() == ["0-1.5", "0-1.5", "1.5-10", "0-1.5"]


def test_frame_with_tolerance_has_the_tolerance_columns():
    pred, ref = scenario_a(UTM)
    f = evaluate_frame(pred, ref, boundary_tolerance_m=5.0)
    assert {"boundary_within_tolerance_m", "boundary_recall", "within_tolerance"} <= set(f.columns)
    assert list(f.columns[: len(FRAME_COLUMNS)]) == FRAME_COLUMNS


def test_frame_many_to_one_shares_a_prediction():
    ref = layer(strips([(0, 1), (1, 2)], EA), EA, index=[7, 3])
    pred = layer([strip(0, 2, EA)], EA, index=[42])
    f = evaluate_frame(pred, ref, matching="many_to_one")
    assert f["pred_index"].tolist() == [42, 42]
    assert f["iou"].tolist() == [0.5, 0.5]
    f = evaluate_frame(pred, ref)  # one_to_one: the tie goes to reference position 0
    assert f["pred_index"].tolist() == [42, pd.NA]


def test_frame_of_empty_reference():
    pred, _ = scenario_a(UTM)
    f = evaluate_frame(pred, empty_layer(UTM))
    assert len(f) == 0
    assert list(f.columns) == FRAME_COLUMNS


# --------------------------------------------------------------------------------------
# pixels_per_field
# --------------------------------------------------------------------------------------


def test_pixels_per_field_exact_in_equal_area_crs():
    ref = layer(
        [square(EA_X0, EA_Y0, 100), None, square(EA_X0 + 1000, EA_Y0, 30), Point(EA_X0, EA_Y0)],
        EA,
        index=["a", "b", "c", "d"],
    )
    px = pixels_per_field(ref, 10.0)
    assert px.index.tolist() == ["a", "b", "c", "d"]
    assert px["a"] == 100.0  # 10 000 m² / 100 m²
    assert px["c"] == pytest.approx(9.0, rel=1e-12)  # 900 m² / 100 m²
    assert math.isnan(px["b"]) and math.isnan(px["d"])
    assert pixels_per_field(ref, 3.0)["a"] == pytest.approx(10_000 / 9, rel=1e-12)


@pytest.mark.parametrize("crs", [UTM, WGS84])
def test_pixels_per_field_projected_and_geographic(crs):
    pred, ref = scenario_a(crs)
    px = pixels_per_field(ref, 10.0)
    a_ref, _ = _scenario_a_areas(crs)
    np.testing.assert_allclose(px.to_numpy(), a_ref / 100.0, rtol=REL)
    assert px.index.tolist() == [10, 11, 12, 13]
    px_series = pixels_per_field(ref.geometry, 30.0)
    np.testing.assert_allclose(px_series.to_numpy(), a_ref / 900.0, rtol=REL)


def test_pixels_per_field_utm_square_is_about_100_pixels():
    px = pixels_per_field(layer([square(X0, Y0, 100)]), 10.0)
    assert px.iloc[0] == pytest.approx(100.0, rel=1e-3)


@pytest.mark.parametrize("gsd", [0, -10, float("nan")])
def test_pixels_per_field_bad_gsd(gsd):
    _, ref = scenario_a(UTM)
    with pytest.raises(ValueError, match="gsd_m"):
        pixels_per_field(ref, gsd)


# --------------------------------------------------------------------------------------
# check_options
# --------------------------------------------------------------------------------------


def test_check_options_defaults_and_normalisation():
    opts = check_options()
    assert (opts.iou_threshold, opts.matching, opts.bootstrap, opts.bootstrap_seed) == (0.5, "one_to_one", 0, 42)
    assert opts.boundary_tolerance_m is None and opts.boundary_sample_spacing_m == 1.0
    assert opts.partition_size_m == 50_000.0
    opts = check_options(iou_threshold=1, bootstrap=np.int64(3), boundary_tolerance_m=2)
    assert opts.iou_threshold == 1.0 and isinstance(opts.iou_threshold, float)
    assert opts.bootstrap == 3 and opts.boundary_tolerance_m == 2.0


def test_check_options_names_the_argument_and_value():
    with pytest.raises(ValueError, match=r"iou_threshold.*1\.5"):
        check_options(iou_threshold=1.5)
    with pytest.raises(ValueError, match=r"bootstrap.*-3"):
        check_options(bootstrap=-3)
    with pytest.raises(ValueError, match=r"boundary_tolerance_m.*-2"):
        check_options(boundary_tolerance_m=-2.0)


def test_layers_in_two_utm_zones():
    # The reference field's centroid is east of lon -108 (zone 13), the prediction's west
    # of it (zone 12). Both boxes share a latitude band, so in EPSG:6933 (cylindrical) the
    # overlap of 0.001 deg of 0.002 deg widths gives IoU = 1/3.
    ref = layer([shapely.box(-108.0005, 40.0, -107.9985, 40.001)], WGS84)
    pred = layer([shapely.box(-108.0015, 40.0, -107.9995, 40.001)], WGS84)
    m = evaluate(pred, ref, 0.3)
    assert m["utm_epsg_codes"] == [32612, 32613]
    assert m["count_tp"] == 1
    assert m["iou_mean"] == pytest.approx(1 / 3, rel=1e-9)
    assert evaluate_frame(pred, ref, iou_threshold=0.3)["utm_epsg"].tolist() == [32613]


# --------------------------------------------------------------------------------------
# Layers given as files (SPEC section 1)
# --------------------------------------------------------------------------------------


def test_layers_from_files_give_the_same_summary(tmp_path):
    pred, ref = scenario_a(UTM, county=["a", "b", "a", None])
    pred.to_crs(WGS84).to_file(tmp_path / "pred.gpkg", layer="fields")
    ref.to_parquet(tmp_path / "ref.parquet")
    from_frames = evaluate(pred.to_crs(WGS84), ref, strata="county")
    from_files = evaluate(str(tmp_path / "pred.gpkg"), tmp_path / "ref.parquet", strata="county")
    assert_metrics_equal(from_files, from_frames, rel=1e-12)
    assert from_files["count_tp"] == 2 and set(from_files["per_stratum"]) == {"a", "b"}


def test_missing_empty_and_truncated_files_name_the_file(tmp_path):
    pred, ref = scenario_a(UTM)
    missing = tmp_path / "nope.gpkg"
    with pytest.raises(ValueError, match="nope.gpkg") as info:
        evaluate(missing, ref)
    assert "predicted" in str(info.value)
    empty = tmp_path / "empty.gpkg"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty.gpkg") as info:
        evaluate(pred, empty)
    assert "reference" in str(info.value)
    ref.to_parquet(tmp_path / "whole.parquet")
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes((tmp_path / "whole.parquet").read_bytes()[:200])
    with pytest.raises(ValueError, match="truncated.parquet"):
        evaluate(pred, truncated)


def test_exploded_layers_with_a_multiindex_evaluate():
    # GeoDataFrame.explode(index_parts=True) gives a MultiIndex; the summary does not care.
    pred, ref = scenario_a(UTM)
    m = evaluate(pred.explode(index_parts=True), ref.explode(index_parts=True))
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (2, 3, 2)


def test_frame_of_a_reference_with_a_multiindex():
    pred, ref = scenario_a(UTM)
    f = evaluate_frame(pred, ref.explode(index_parts=True))
    assert f.index.tolist() == [(10, 0), (11, 0), (12, 0), (13, 0)]
    assert f["pred_index"].tolist() == [100, pd.NA, 102, pd.NA]


def test_frame_of_predictions_with_a_multiindex():
    pred, ref = scenario_a(UTM)
    f = evaluate_frame(pred.explode(index_parts=True), ref)
    assert f["pred_index"].tolist()[0] == (100, 0)
    assert f["max_overlap_pred_index"].tolist()[1] == (101, 0)
    assert pd.isna(f["pred_index"].tolist()[1])

"""Sufficient statistics (evalcore.stats) and the metrics computed from them
(evalcore.summaries), including the empty-denominator conventions of seed 000."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalcore.errors import IncompatibleStatsError
from evalcore.quantities import QUANTITY_COLUMNS, QuantityTable
from evalcore.stats import QuantitySums, group_sums
from evalcore.summaries import (
    INTERVAL_KEYS,
    LEGACY_ZERO_KEYS,
    MEAN_KEYS,
    RATE_KEYS,
    TOLERANCE_KEYS,
    metric_values,
    point_metrics,
)

C = len(QUANTITY_COLUMNS)
COL = {name: k for k, name in enumerate(QUANTITY_COLUMNS)}


def row(**values: float) -> np.ndarray:
    out = np.zeros(C)
    for name, v in values.items():
        out[COL[name]] = v
    return out


def zero_sums() -> dict[str, float]:
    return {name: 0.0 for name in QUANTITY_COLUMNS}


# --------------------------------------------------------------------------------------
# QuantitySums
# --------------------------------------------------------------------------------------


def test_from_rows_sums_columns_and_takes_max_spacing():
    values = np.stack([row(n_ref=1, tp=1, iou_matched=0.8), row(n_ref=1, n_pred=2), row(n_ref=1, tp=1, iou_matched=0.6)])
    sums = QuantitySums.from_rows(values, np.array([1.0, np.nan, 2.5]))
    d = sums.as_dict()
    assert (d["n_ref"], d["tp"], d["n_pred"]) == (3.0, 2.0, 2.0)
    assert d["iou_matched"] == pytest.approx(1.4)
    assert sums.spacing_max_m == 2.5
    assert math.isnan(QuantitySums.from_rows(values, np.full(3, np.nan)).spacing_max_m)


def test_from_rows_adds_the_unassigned_row():
    values = np.stack([row(n_ref=1, n_pred=1)])
    sums = QuantitySums.from_rows(values, np.array([np.nan]), unassigned=row(n_pred=4, area_pred_m2=10.0))
    assert sums.as_dict()["n_pred"] == 5.0
    assert sums.as_dict()["area_pred_m2"] == 10.0


def test_from_table_with_and_without_unassigned():
    table = QuantityTable(
        ref_pos=np.array([0, 3]),
        values=np.stack([row(n_ref=1, n_pred=1), row(n_ref=1)]),
        unassigned=row(n_pred=2),
        spacing_m=np.array([1.0, np.nan]),
    )
    assert QuantitySums.from_table(table).as_dict()["n_pred"] == 3.0
    assert QuantitySums.from_table(table, with_unassigned=False).as_dict()["n_pred"] == 1.0


def test_empty_is_the_identity_and_merge_adds():
    a = QuantitySums.from_rows(np.stack([row(n_ref=1, tp=1)]), np.array([1.0]))
    b = QuantitySums.from_rows(np.stack([row(n_ref=2, n_pred=3)]), np.array([3.0]))
    e = QuantitySums.empty()
    assert e.sums.tolist() == [0.0] * C and math.isnan(e.spacing_max_m)
    assert e.merge(a).sums.tolist() == a.sums.tolist() and e.merge(a).spacing_max_m == 1.0
    assert a.merge(e).sums.tolist() == a.sums.tolist() and a.merge(e).spacing_max_m == 1.0
    ab = a.merge(b)
    assert ab.as_dict()["n_ref"] == 3.0 and ab.as_dict()["n_pred"] == 3.0 and ab.as_dict()["tp"] == 1.0
    assert ab.spacing_max_m == 3.0
    assert ab.sums.tolist() == b.merge(a).sums.tolist()


def test_merge_refuses_different_columns():
    a = QuantitySums.empty()
    other = QuantitySums(QUANTITY_COLUMNS[::-1], np.zeros(C), float("nan"))
    with pytest.raises(IncompatibleStatsError):
        a.merge(other)
    with pytest.raises(ValueError):  # IncompatibleStatsError is a ValueError
        a.merge(other)


def test_merge_does_not_mutate():
    a = QuantitySums.from_rows(np.stack([row(n_ref=1)]), np.array([1.0]))
    before = a.sums.copy()
    a.merge(a)
    assert a.sums.tolist() == before.tolist()


def test_group_sums_by_hand():
    values = np.stack([row(n_ref=1, tp=1), row(n_ref=1, n_pred=2), row(n_ref=1, tp=1), row(n_ref=1, n_pred=1)])
    table = QuantityTable(np.arange(4), values, row(n_pred=7), np.array([2.0, np.nan, 5.0, 1.0]))
    groups = group_sums(table, np.array([0, 2, -1, 0]), 3)
    assert len(groups) == 3
    assert groups[0].as_dict()["n_ref"] == 2.0 and groups[0].as_dict()["tp"] == 1.0
    assert groups[0].as_dict()["n_pred"] == 1.0  # the unassigned row is in no group
    assert groups[0].spacing_max_m == 2.0
    assert groups[1].sums.tolist() == [0.0] * C and math.isnan(groups[1].spacing_max_m)
    assert groups[2].as_dict()["n_pred"] == 2.0 and math.isnan(groups[2].spacing_max_m)
    assert group_sums(table, np.full(4, -1), 0) == []


# --------------------------------------------------------------------------------------
# metric_values
# --------------------------------------------------------------------------------------


def test_metric_values_by_hand():
    s = zero_sums()
    s.update(
        n_ref=4, tp=2, n_pred=5, n_pred_matched=2, iou_matched=1.5, best_iou=11 / 6,
        area_ref_m2=5.0, area_ref_matched_m2=3.0, area_pred_m2=4.9, area_pred_matched_m2=2.1,
        area_abs_err_m2=0.9, area_signed_err_m2=-0.9, oversegmentation=2.0, undersegmentation=0.5,
        n_ref_with_overlap=3, n_ref_overseg=1, n_pred_underseg=1,
        hausdorff_m=10.0, boundary_mean_m=4.0,
    )
    v = {k: float(val) for k, (val, _) in metric_values(s, with_tolerance=False).items()}
    assert v["precision"] == pytest.approx(2 / 5)
    assert v["recall"] == pytest.approx(1 / 2)
    assert v["f1"] == pytest.approx(4 / 9)
    assert v["iou_mean"] == pytest.approx(0.75)
    assert v["best_iou_mean"] == pytest.approx(11 / 24)
    assert v["area_weighted_recall"] == pytest.approx(0.6)
    assert v["area_weighted_precision"] == pytest.approx(3 / 7)
    assert v["area_weighted_f1"] == pytest.approx(0.5)
    assert v["over_segmentation"] == pytest.approx(1 / 4)  # per reference field
    assert v["under_segmentation"] == pytest.approx(1 / 5)  # per prediction
    assert v["area_error_mean_m2"] == pytest.approx(0.45)
    assert v["area_error_signed_mean_m2"] == pytest.approx(-0.45)
    assert v["oversegmentation_mean"] == pytest.approx(0.5)
    assert v["undersegmentation_mean"] == pytest.approx(1 / 6)  # over overlapped fields only
    assert v["hausdorff_mean_m"] == pytest.approx(5.0)
    assert v["boundary_distance_mean_m"] == pytest.approx(2.0)
    assert not set(TOLERANCE_KEYS) & set(v)


def test_metric_values_many_to_one_precision():
    # 2 TP from one matched prediction, plus 1 unmatched prediction.
    s = zero_sums()
    s.update(n_ref=2, tp=2, n_pred=2, n_pred_matched=1)
    v = metric_values(s, with_tolerance=False)
    assert float(v["precision"][0]) == pytest.approx(2 / 3)


def test_metric_values_with_tolerance():
    s = zero_sums()
    s.update(
        n_ref=2, area_ref_m2=3.0, perimeter_ref_m=10.0, ref_within_tol_m=5.0,
        perimeter_pred_m=8.0, pred_within_tol_m=6.0, n_within_tol=1, area_within_tol_m2=1.0,
    )
    v = {k: float(val) for k, (val, _) in metric_values(s, with_tolerance=True).items()}
    assert set(TOLERANCE_KEYS) <= set(v)
    # These are ratios of sums (the lengths themselves come from evalcore.boundary).
    assert v["boundary_recall"] == pytest.approx(0.5)
    assert v["boundary_precision"] == pytest.approx(0.75)
    assert v["boundary_f1"] == pytest.approx(0.6)
    assert v["coverage_within_tolerance"] == pytest.approx(0.5)
    assert v["coverage_within_tolerance_area"] == pytest.approx(1 / 3)


def test_metric_values_on_arrays_marks_undefined_entries():
    s = {name: np.zeros(3) for name in QUANTITY_COLUMNS}
    s["n_ref"] = np.array([2.0, 0.0, 1.0])
    s["tp"] = np.array([1.0, 0.0, 0.0])
    s["n_pred"] = np.array([1.0, 0.0, 0.0])
    s["n_pred_matched"] = np.array([1.0, 0.0, 0.0])
    v = metric_values(s, with_tolerance=False)
    value, defined = v["recall"]
    assert defined.tolist() == [True, False, True]
    assert value[0] == 0.5 and math.isnan(value[1]) and value[2] == 0.0
    value, defined = v["precision"]
    assert defined.tolist() == [True, False, False]
    value, defined = v["f1"]
    assert defined.tolist() == [True, False, False]
    value, defined = v["iou_mean"]
    assert defined.tolist() == [True, False, False]


def test_f1_of_zero_precision_and_recall_is_zero():
    s = zero_sums()
    s.update(n_ref=3, n_pred=2)
    value, defined = metric_values(s, with_tolerance=False)["f1"]
    assert bool(defined) and float(value) == 0.0


# --------------------------------------------------------------------------------------
# point_metrics: empty denominators
# --------------------------------------------------------------------------------------


def test_key_families():
    rates = {"precision", "recall", "f1", "iou_mean", "best_iou_mean", "area_weighted_precision", "area_weighted_recall", "area_weighted_f1"}
    assert set(RATE_KEYS) == rates
    assert set(LEGACY_ZERO_KEYS) == {"over_segmentation", "under_segmentation", "area_error_mean_m2"}
    assert {"area_error_signed_mean_m2", "oversegmentation_mean", "undersegmentation_mean"} <= set(MEAN_KEYS)
    assert set(INTERVAL_KEYS) == set(RATE_KEYS) | set(LEGACY_ZERO_KEYS) | set(MEAN_KEYS)
    assert not any("median" in k for k in INTERVAL_KEYS)


def test_undefined_rates_and_legacy_keys_are_zero_means_nan():
    out = point_metrics(zero_sums(), with_tolerance=True, both_empty=False)
    for key in RATE_KEYS + LEGACY_ZERO_KEYS:
        assert out[key] == 0.0, key
    for key in ("coverage_within_tolerance", "coverage_within_tolerance_area", "boundary_precision", "boundary_recall", "boundary_f1"):
        assert out[key] == 0.0, key  # rates by their names
    for key in MEAN_KEYS:
        assert math.isnan(out[key]), key


def test_both_layers_empty_rates_are_one():
    out = point_metrics(zero_sums(), with_tolerance=True, both_empty=True)
    for key in RATE_KEYS + TOLERANCE_KEYS:
        assert out[key] == 1.0, key
    for key in LEGACY_ZERO_KEYS:
        assert out[key] == 0.0, key
    for key in MEAN_KEYS:
        assert math.isnan(out[key]), key


def test_empty_group_is_nan():
    out = point_metrics(zero_sums(), with_tolerance=False, both_empty=False, empty_group=True)
    for key in RATE_KEYS:
        assert math.isnan(out[key]), key


def test_defined_values_pass_through():
    s = zero_sums()
    s.update(n_ref=4, tp=1, n_pred=2, n_pred_matched=1, iou_matched=0.7, best_iou=1.0, area_ref_m2=4.0, oversegmentation=3.0)
    out = point_metrics(s, with_tolerance=False, both_empty=False)
    assert out["precision"] == 0.5 and out["recall"] == 0.25
    assert out["iou_mean"] == pytest.approx(0.7)
    assert out["oversegmentation_mean"] == 0.75
    assert math.isnan(out["undersegmentation_mean"])  # no field overlapped
    assert out["area_weighted_precision"] == 0.0  # no predicted area: undefined rate -> 0.0

"""Sufficient statistics (evalcore.stats) and the metrics the families compute from them
(evalcore.metrics), including the empty-denominator conventions of seed 000."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalcore.errors import IncompatibleStatsError
from evalcore.metrics.registry import enabled_families, finalize_all, interval_keys, quantity_columns
from evalcore.metrics.base import GroupView
from evalcore.options import check_options
from evalcore.stats import GroupSums, group_sums

OPTS = check_options()
OPTS_TOL = check_options(boundary_tolerance_m=1.0)
QUANTITY_COLUMNS = quantity_columns(OPTS_TOL)
C = len(QUANTITY_COLUMNS)
COL = {name: k for k, name in enumerate(QUANTITY_COLUMNS)}

RATE_KEYS = ("precision", "recall", "f1", "iou_mean", "best_iou_mean", "area_weighted_precision", "area_weighted_recall", "area_weighted_f1")
LEGACY_ZERO_KEYS = ("over_segmentation", "under_segmentation", "area_error_mean_m2")
MEAN_KEYS = ("area_error_signed_mean_m2", "oversegmentation_mean", "undersegmentation_mean", "hausdorff_mean_m", "boundary_distance_mean_m")
TOLERANCE_KEYS = ("boundary_precision", "boundary_recall", "boundary_f1", "coverage_within_tolerance", "coverage_within_tolerance_area")


def row(**values: float) -> np.ndarray:
    out = np.zeros(C)
    for name, v in values.items():
        out[COL[name]] = v
    return out


def zero_sums() -> dict[str, float]:
    return {name: 0.0 for name in QUANTITY_COLUMNS}


def metric_values(s: dict, *, with_tolerance: bool) -> dict:
    return finalize_all(s, OPTS_TOL if with_tolerance else OPTS)


def point_metrics(sums: dict, *, with_tolerance: bool, both_empty: bool, empty_group: bool = False) -> dict:
    """A group's entry as the summary writes it (every family's keys)."""
    options = OPTS_TOL if with_tolerance else OPTS
    view = GroupView(
        sums=sums, maxima={"spacing_m": float("nan")}, order={}, values=finalize_all(sums, options),
        both_empty=both_empty, empty_group=empty_group, options=options,
    )
    out: dict = {}
    for family in enabled_families(options):
        out.update(family.summarize(view))
    return out


# --------------------------------------------------------------------------------------
# GroupSums
# --------------------------------------------------------------------------------------


def _sums(values: np.ndarray, spacing: np.ndarray, codes: np.ndarray | None = None, n_groups: int = 1) -> GroupSums:
    flat = np.empty((len(values), 0), np.int64) if codes is None else codes.reshape(-1, 1)
    return group_sums(values, spacing.reshape(-1, 1), flat, n_groups, QUANTITY_COLUMNS, ("spacing_m",))


def test_group_sums_sums_columns_and_takes_max_spacing():
    values = np.stack([row(n_ref=1, tp=1, iou_matched=0.8), row(n_ref=1, n_pred=2), row(n_ref=1, tp=1, iou_matched=0.6)])
    sums = _sums(values, np.array([1.0, np.nan, 2.5]))
    d = sums.as_dict()
    assert (d["n_ref"], d["tp"], d["n_pred"]) == (3.0, 2.0, 2.0)
    assert d["iou_matched"] == pytest.approx(1.4)
    assert sums.maxima_dict()["spacing_m"] == 2.5
    assert math.isnan(_sums(values, np.full(3, np.nan)).maxima_dict()["spacing_m"])


def test_add_to_group_adds_the_unassigned_row_to_one_group():
    sums = _sums(np.stack([row(n_ref=1, n_pred=1)]), np.array([np.nan]), np.array([1]), 2).add_to_group(
        0, row(n_pred=4, area_pred_m2=10.0)
    )
    assert sums.as_dict(0)["n_pred"] == 5.0 and sums.as_dict(0)["area_pred_m2"] == 10.0
    assert sums.as_dict(1)["n_pred"] == 1.0


def test_empty_is_the_identity_and_merge_adds():
    a = _sums(np.stack([row(n_ref=1, tp=1)]), np.array([1.0]))
    b = _sums(np.stack([row(n_ref=2, n_pred=3)]), np.array([3.0]))
    e = GroupSums.empty(QUANTITY_COLUMNS, ("spacing_m",), 1)
    assert e.sums.tolist() == [[0.0] * C] and math.isnan(e.maxima[0, 0])
    assert e.merge(a).sums.tolist() == a.sums.tolist() and e.merge(a).maxima_dict()["spacing_m"] == 1.0
    assert a.merge(e).sums.tolist() == a.sums.tolist() and a.merge(e).maxima_dict()["spacing_m"] == 1.0
    ab = a.merge(b)
    assert ab.as_dict()["n_ref"] == 3.0 and ab.as_dict()["n_pred"] == 3.0 and ab.as_dict()["tp"] == 1.0
    assert ab.maxima_dict()["spacing_m"] == 3.0
    assert ab.sums.tolist() == b.merge(a).sums.tolist()


def test_merge_refuses_different_columns():
    a = GroupSums.empty(QUANTITY_COLUMNS, ("spacing_m",), 1)
    other = GroupSums.empty(QUANTITY_COLUMNS[::-1], ("spacing_m",), 1)
    with pytest.raises(IncompatibleStatsError):
        a.merge(other)
    with pytest.raises(ValueError):  # IncompatibleStatsError is a ValueError
        a.merge(other)
    with pytest.raises(IncompatibleStatsError):
        a.merge(GroupSums.empty(QUANTITY_COLUMNS, ("spacing_m",), 2))


def test_merge_does_not_mutate():
    a = _sums(np.stack([row(n_ref=1)]), np.array([1.0]))
    before = a.sums.copy()
    a.merge(a)
    assert a.sums.tolist() == before.tolist()


def test_group_sums_by_hand():
    values = np.stack([row(n_ref=1, tp=1), row(n_ref=1, n_pred=2), row(n_ref=1, tp=1), row(n_ref=1, n_pred=1)])
    # Flat group axis: 0 overall, 1-3 one grouping's groups; row 2 is in none of them.
    sums = _sums(values, np.array([2.0, np.nan, 5.0, 1.0]), np.array([1, 3, -1, 1]), 4)
    assert sums.as_dict(0)["n_ref"] == 4.0 and sums.maxima_dict(0)["spacing_m"] == 5.0
    assert sums.as_dict(1)["n_ref"] == 2.0 and sums.as_dict(1)["tp"] == 1.0
    assert sums.as_dict(1)["n_pred"] == 1.0
    assert sums.maxima_dict(1)["spacing_m"] == 2.0
    assert sums.sums[2].tolist() == [0.0] * C and math.isnan(sums.maxima_dict(2)["spacing_m"])
    assert sums.as_dict(3)["n_pred"] == 2.0 and math.isnan(sums.maxima_dict(3)["spacing_m"])


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


def test_interval_keys_cover_every_rate_and_mean_but_no_median():
    keys = set(interval_keys(OPTS))
    assert set(RATE_KEYS) | set(LEGACY_ZERO_KEYS) | set(MEAN_KEYS) <= keys
    assert set(TOLERANCE_KEYS) <= set(interval_keys(OPTS_TOL)) and not set(TOLERANCE_KEYS) & keys
    assert not any("median" in k for k in keys)


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

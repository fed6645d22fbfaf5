"""Metrics from quantity sums (SPEC section 4, seed 000 "Summary metrics").

:func:`metric_values` computes every sum-based metric together with whether it is
defined (its denominator is not zero). It works on scalars and on arrays of
bootstrap replicates alike. :func:`point_metrics` applies the reporting conventions
for undefined values:

* rates (keys ending in precision, recall, f1, iou_mean, and the coverage keys) and
  the 0.1.x keys over_segmentation, under_segmentation and area_error_mean_m2 are
  0.0;
* other means and distances are NaN;
* when both layers are empty the rates are 1.0.

The bootstrap instead leaves an undefined replicate out and counts it in
``n_undefined``.
"""

from __future__ import annotations

import numpy as np

from evalcore._typing import F64Array

__all__ = [
    "RATE_KEYS",
    "LEGACY_ZERO_KEYS",
    "MEAN_KEYS",
    "TOLERANCE_KEYS",
    "INTERVAL_KEYS",
    "metric_values",
    "point_metrics",
]

RATE_KEYS: tuple[str, ...] = (
    "precision",
    "recall",
    "f1",
    "iou_mean",
    "best_iou_mean",
    "area_weighted_precision",
    "area_weighted_recall",
    "area_weighted_f1",
)
LEGACY_ZERO_KEYS: tuple[str, ...] = ("over_segmentation", "under_segmentation", "area_error_mean_m2")
MEAN_KEYS: tuple[str, ...] = (
    "area_error_signed_mean_m2",
    "oversegmentation_mean",
    "undersegmentation_mean",
    "hausdorff_mean_m",
    "boundary_distance_mean_m",
)
TOLERANCE_KEYS: tuple[str, ...] = (
    "boundary_precision",
    "boundary_recall",
    "boundary_f1",
    "coverage_within_tolerance",
    "coverage_within_tolerance_area",
)
INTERVAL_KEYS: tuple[str, ...] = RATE_KEYS + LEGACY_ZERO_KEYS + MEAN_KEYS
"""Metrics that get bootstrap intervals (plus TOLERANCE_KEYS with a tolerance)."""

_RATES_WITH_TOLERANCE = frozenset(RATE_KEYS + TOLERANCE_KEYS)


def _ratio(num: F64Array, den: F64Array) -> tuple[F64Array, F64Array]:
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    defined = den != 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(defined, num / np.where(defined, den, 1.0), np.nan)
    return value, defined


def _harmonic(p: tuple[F64Array, F64Array], r: tuple[F64Array, F64Array]) -> tuple[F64Array, F64Array]:
    """Harmonic mean of two rates; 0 when both are 0, defined when both are."""
    (pv, pd), (rv, rd) = p, r
    defined = pd & rd
    pv0 = np.where(defined, pv, 0.0)
    rv0 = np.where(defined, rv, 0.0)
    s = pv0 + rv0
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(s > 0.0, 2.0 * pv0 * rv0 / np.where(s > 0.0, s, 1.0), 0.0)
    return np.where(defined, value, np.nan), defined


def metric_values(s: dict[str, F64Array], *, with_tolerance: bool) -> dict[str, tuple[F64Array, F64Array]]:
    """Every sum-based metric as ``(value, defined)``.

    Parameters
    ----------
    s : dict of str to float or ndarray
        Column sums of the quantity table, by column name; arrays (one entry per
        bootstrap replicate) are computed element-wise.
    with_tolerance : bool
        Also compute the tolerance metrics.

    Returns
    -------
    dict of str to (value, defined)
        ``value`` is NaN where ``defined`` is False.
    """
    tp = np.asarray(s["tp"], dtype=np.float64)
    n_ref = np.asarray(s["n_ref"], dtype=np.float64)
    n_pred = np.asarray(s["n_pred"], dtype=np.float64)
    fp = n_pred - s["n_pred_matched"]
    out: dict[str, tuple[F64Array, F64Array]] = {}
    out["precision"] = _ratio(tp, tp + fp)
    out["recall"] = _ratio(tp, n_ref)
    out["f1"] = _harmonic(out["precision"], out["recall"])
    out["iou_mean"] = _ratio(s["iou_matched"], tp)
    out["best_iou_mean"] = _ratio(s["best_iou"], n_ref)
    out["area_weighted_precision"] = _ratio(s["area_pred_matched_m2"], s["area_pred_m2"])
    out["area_weighted_recall"] = _ratio(s["area_ref_matched_m2"], s["area_ref_m2"])
    out["area_weighted_f1"] = _harmonic(out["area_weighted_precision"], out["area_weighted_recall"])
    out["over_segmentation"] = _ratio(s["n_ref_overseg"], n_ref)
    out["under_segmentation"] = _ratio(s["n_pred_underseg"], n_pred)
    out["area_error_mean_m2"] = _ratio(s["area_abs_err_m2"], tp)
    out["area_error_signed_mean_m2"] = _ratio(s["area_signed_err_m2"], tp)
    out["oversegmentation_mean"] = _ratio(s["oversegmentation"], n_ref)
    out["undersegmentation_mean"] = _ratio(s["undersegmentation"], s["n_ref_with_overlap"])
    out["hausdorff_mean_m"] = _ratio(s["hausdorff_m"], tp)
    out["boundary_distance_mean_m"] = _ratio(s["boundary_mean_m"], tp)
    if with_tolerance:
        out["boundary_recall"] = _ratio(s["ref_within_tol_m"], s["perimeter_ref_m"])
        out["boundary_precision"] = _ratio(s["pred_within_tol_m"], s["perimeter_pred_m"])
        out["boundary_f1"] = _harmonic(out["boundary_precision"], out["boundary_recall"])
        out["coverage_within_tolerance"] = _ratio(s["n_within_tol"], n_ref)
        out["coverage_within_tolerance_area"] = _ratio(s["area_within_tol_m2"], s["area_ref_m2"])
    return out


def point_metrics(
    sums: dict[str, float],
    *,
    with_tolerance: bool,
    both_empty: bool,
    empty_group: bool = False,
) -> dict[str, float]:
    """Metric values for reporting, with the empty-denominator conventions applied.

    Parameters
    ----------
    sums : dict of str to float
    with_tolerance : bool
    both_empty : bool
        Both layers are empty: every rate is 1.0.
    empty_group : bool
        A group (stratum or size class) without reference fields: every metric is NaN.
    """
    out = {}
    for key, (value, defined) in metric_values(sums, with_tolerance=with_tolerance).items():
        value = float(value)
        if empty_group:
            value = float("nan")
        elif not bool(defined):
            if both_empty and key in _RATES_WITH_TOLERANCE:
                value = 1.0
            elif key in _RATES_WITH_TOLERANCE or key in LEGACY_ZERO_KEYS:
                value = 0.0
        out[key] = value
    return out

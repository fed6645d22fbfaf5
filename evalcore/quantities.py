"""Per-field columns and the per-reference quantity table (SPEC section 4).

Every summary metric except the medians is a function of column sums of one table
with a row per reference field: the field's own quantities plus those of the
predictions whose home it is. Predictions without a home are summed into one extra
``unassigned`` row. This module builds, from the matched pairs:

* :func:`reference_fields`: the per-reference columns of the per-field table,
* :func:`prediction_fields`: the per-prediction columns,
* :func:`quantity_rows`: the quantity table those columns sum into.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from evalcore._typing import BoolArray, F64Array, IdArray
from evalcore.matching import Resolution

__all__ = [
    "QUANTITY_COLUMNS",
    "QuantityTable",
    "reference_fields",
    "prediction_fields",
    "quantity_rows",
]

QUANTITY_COLUMNS: tuple[str, ...] = (
    # reference side
    "n_ref",  # 1 per reference field
    "area_ref_m2",
    "tp",  # 1 when the field is matched
    "iou_matched",  # IoU of the match, 0 otherwise
    "area_ref_matched_m2",
    "area_abs_err_m2",  # |pred - ref| area of the matched pair
    "area_signed_err_m2",  # pred - ref area of the matched pair
    "best_iou",
    "oversegmentation",  # 1 - |r ∩ p'| / |r| (1 when nothing overlaps)
    "undersegmentation",  # 1 - |r ∩ p'| / |p'| (0 and not counted when nothing overlaps)
    "n_ref_with_overlap",
    "n_ref_overseg",  # more than one prediction at IoU >= threshold (0.1.x)
    "perimeter_ref_m",
    "ref_within_tol_m",
    "hausdorff_m",  # of the matched pair
    "boundary_mean_m",  # symmetric mean distance of the matched pair
    "n_within_tol",  # matched and mean distance <= tolerance
    "area_within_tol_m2",
    # prediction side (summed over the home predictions)
    "n_pred",
    "n_pred_matched",
    "area_pred_m2",
    "area_pred_matched_m2",
    "n_pred_underseg",  # more than one reference at IoU >= threshold (0.1.x)
    "perimeter_pred_m",
    "pred_within_tol_m",
)
_COL = {name: k for k, name in enumerate(QUANTITY_COLUMNS)}


@dataclass(frozen=True, slots=True)
class QuantityTable:
    """Quantity rows of some reference fields, and the unassigned predictions' row.

    Attributes
    ----------
    ref_pos : ndarray of int64, shape (n,)
        Input positions of the reference fields, increasing.
    values : ndarray of float64, shape (n, len(QUANTITY_COLUMNS))
    unassigned : ndarray of float64, shape (len(QUANTITY_COLUMNS),)
        Sum of the rows of the predictions without a home reference.
    spacing_m : ndarray of float64, shape (n,)
        Boundary sample spacing of the matched pair (NaN when unmatched); merges by max.
    """

    ref_pos: IdArray
    values: F64Array
    unassigned: F64Array
    spacing_m: F64Array

    def column(self, name: str) -> F64Array:
        return self.values[:, _COL[name]]


def _lookup(sorted_keys: IdArray, keys: IdArray) -> IdArray:
    """Index of each key in ``sorted_keys``; every key must be present."""
    idx = np.searchsorted(sorted_keys, keys)
    if len(keys) and (idx.max(initial=0) >= len(sorted_keys) or not np.array_equal(sorted_keys[idx], keys)):
        raise KeyError("a position is missing from the table it is looked up in")
    return idx


def _best_per_group(groups: IdArray, *keys: F64Array | IdArray) -> IdArray:
    """For rows grouped by ``groups``, the index of each group's first row in lexicographic ``keys`` order."""
    order = np.lexsort(tuple(reversed(keys)) + (groups,))
    g = groups[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = g[1:] != g[:-1]
    return order[first]


def reference_fields(
    ref_pos: IdArray,
    area_m2: F64Array,
    resolution: Resolution,
    pred_area_of_pair: F64Array,
) -> pd.DataFrame:
    """The pair-derived per-field columns of the given reference fields.

    Parameters
    ----------
    ref_pos : ndarray of int64, shape (n,)
        Input positions of the reference fields, increasing.
    area_m2 : ndarray of float64, shape (n,)
        Their equal-area areas, square metres.
    resolution : Resolution
        The global matching; only pairs of these fields are used.
    pred_area_of_pair : ndarray of float64, shape (n_pairs,)
        Area of each pair's prediction, aligned with ``resolution.pairs``.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``ref_pos``, with columns ``matched``, ``matched_pred_pos`` (-1 when
        unmatched), ``iou``, ``pred_area_m2`` (NaN when unmatched), ``best_iou``,
        ``n_overlapping_pred``, ``max_overlap_pred_pos`` (-1 when none),
        ``oversegmentation``, ``undersegmentation`` (NaN when none) and
        ``n_eligible_pred``.
    """
    pairs = resolution.pairs
    n = len(ref_pos)
    mine = np.isin(pairs.ref_pos, ref_pos)
    k_all = np.flatnonzero(mine)
    row = _lookup(ref_pos, pairs.ref_pos[k_all])

    matched = np.zeros(n, dtype=bool)
    matched_pred = np.full(n, -1, dtype=np.int64)
    iou = np.full(n, np.nan)
    pred_area = np.full(n, np.nan)
    k_match = k_all[resolution.is_match[k_all]]
    r_match = row[resolution.is_match[k_all]]
    matched[r_match] = True
    matched_pred[r_match] = pairs.pred_pos[k_match]
    iou[r_match] = pairs.iou[k_match]
    pred_area[r_match] = pred_area_of_pair[k_match]

    best_iou = np.zeros(n)
    np.maximum.at(best_iou, row, pairs.iou[k_all])
    n_overlap = np.bincount(row, minlength=n).astype(np.int64)
    n_eligible = np.bincount(row[resolution.is_eligible[k_all]], minlength=n).astype(np.int64)

    # p': the prediction with the largest intersection (ties: first prediction position).
    max_overlap = np.full(n, -1, dtype=np.int64)
    inter_best = np.zeros(n)
    pred_area_best = np.full(n, np.nan)
    if len(k_all):
        best = _best_per_group(row, -pairs.inter_m2[k_all], pairs.pred_pos[k_all])
        r_best = row[best]
        max_overlap[r_best] = pairs.pred_pos[k_all[best]]
        inter_best[r_best] = pairs.inter_m2[k_all[best]]
        pred_area_best[r_best] = pred_area_of_pair[k_all[best]]
    with np.errstate(divide="ignore", invalid="ignore"):
        overseg = 1.0 - inter_best / area_m2
        underseg = np.where(n_overlap > 0, 1.0 - inter_best / pred_area_best, np.nan)
    return pd.DataFrame(
        {
            "matched": matched,
            "matched_pred_pos": matched_pred,
            "iou": iou,
            "pred_area_m2": pred_area,
            "best_iou": best_iou,
            "n_overlapping_pred": n_overlap,
            "max_overlap_pred_pos": max_overlap,
            "oversegmentation": np.clip(overseg, 0.0, 1.0),
            "undersegmentation": np.clip(underseg, 0.0, 1.0),
            "n_eligible_pred": n_eligible,
        },
        index=pd.Index(ref_pos, name="ref_pos"),
    )


def prediction_fields(pred_pos: IdArray, resolution: Resolution) -> pd.DataFrame:
    """Matching outcome of the given predictions.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``pred_pos``, with columns ``matched`` (bool), ``n_eligible_ref``
        and ``home_ref_pos`` (-1 when the prediction has no home).
    """
    pairs = resolution.pairs
    n = len(pred_pos)
    mine = np.flatnonzero(np.isin(pairs.pred_pos, pred_pos))
    row = _lookup(pred_pos, pairs.pred_pos[mine])
    matched = np.zeros(n, dtype=bool)
    matched[row[resolution.is_match[mine]]] = True
    n_eligible = np.bincount(row[resolution.is_eligible[mine]], minlength=n).astype(np.int64)
    home = np.full(n, -1, dtype=np.int64)
    has = np.isin(resolution.home_pred_pos, pred_pos)
    home[_lookup(pred_pos, resolution.home_pred_pos[has])] = resolution.home_ref_pos[has]
    return pd.DataFrame(
        {"matched": matched, "n_eligible_ref": n_eligible, "home_ref_pos": home},
        index=pd.Index(pred_pos, name="pred_pos"),
    )


def quantity_rows(
    ref: pd.DataFrame,
    pred: pd.DataFrame,
    *,
    tolerance_m: float | None,
) -> QuantityTable:
    """Sum reference and home-prediction quantities into the quantity table.

    Parameters
    ----------
    ref : pandas.DataFrame
        Indexed by reference position (increasing): the columns of
        :func:`reference_fields` plus ``area_m2``, ``perimeter_m``, ``hausdorff_m``,
        ``boundary_mean_distance_m``, ``boundary_sample_spacing_m`` and, with a
        tolerance, ``boundary_within_tolerance_m``.
    pred : pandas.DataFrame
        Indexed by prediction position: the columns of :func:`prediction_fields`
        plus ``area_m2``, ``perimeter_m`` and, with a tolerance,
        ``boundary_within_tolerance_m``. Only the predictions whose home is in
        ``ref`` or that have no home may appear; the latter go to ``unassigned``.
    tolerance_m : float or None

    Returns
    -------
    QuantityTable
    """
    n = len(ref)
    values = np.zeros((n, len(QUANTITY_COLUMNS)))

    def put(name: str, column: F64Array | BoolArray) -> None:
        values[:, _COL[name]] = column

    matched = ref["matched"].to_numpy(bool)
    area = ref["area_m2"].to_numpy(np.float64)
    pred_area = ref["pred_area_m2"].to_numpy(np.float64)
    put("n_ref", 1.0)
    put("area_ref_m2", area)
    put("tp", matched)
    put("iou_matched", np.where(matched, ref["iou"].to_numpy(np.float64), 0.0))
    put("area_ref_matched_m2", np.where(matched, area, 0.0))
    put("area_abs_err_m2", np.where(matched, np.abs(pred_area - area), 0.0))
    put("area_signed_err_m2", np.where(matched, pred_area - area, 0.0))
    put("best_iou", ref["best_iou"].to_numpy(np.float64))
    put("oversegmentation", ref["oversegmentation"].to_numpy(np.float64))
    has_overlap = ref["n_overlapping_pred"].to_numpy() > 0
    put("undersegmentation", np.where(has_overlap, ref["undersegmentation"].to_numpy(np.float64), 0.0))
    put("n_ref_with_overlap", has_overlap)
    put("n_ref_overseg", ref["n_eligible_pred"].to_numpy() > 1)
    put("perimeter_ref_m", ref["perimeter_m"].to_numpy(np.float64))
    mean_dist = ref["boundary_mean_distance_m"].to_numpy(np.float64)
    # Unmatched fields contribute 0; a matched pair without distances (NaN) makes the sum NaN.
    put("hausdorff_m", np.where(matched, ref["hausdorff_m"].to_numpy(np.float64), 0.0))
    put("boundary_mean_m", np.where(matched, mean_dist, 0.0))
    if tolerance_m is not None:
        within = matched & (mean_dist <= tolerance_m)
        put("ref_within_tol_m", ref["boundary_within_tolerance_m"].to_numpy(np.float64))
        put("n_within_tol", within)
        put("area_within_tol_m2", np.where(within, area, 0.0))

    home = pred["home_ref_pos"].to_numpy(np.int64)
    pmatched = pred["matched"].to_numpy(bool)
    parea = pred["area_m2"].to_numpy(np.float64)
    prow = np.zeros((len(pred), len(QUANTITY_COLUMNS)))
    prow[:, _COL["n_pred"]] = 1.0
    prow[:, _COL["n_pred_matched"]] = pmatched
    prow[:, _COL["area_pred_m2"]] = parea
    prow[:, _COL["area_pred_matched_m2"]] = np.where(pmatched, parea, 0.0)
    prow[:, _COL["n_pred_underseg"]] = pred["n_eligible_ref"].to_numpy() > 1
    prow[:, _COL["perimeter_pred_m"]] = pred["perimeter_m"].to_numpy(np.float64)
    if tolerance_m is not None:
        prow[:, _COL["pred_within_tol_m"]] = pred["boundary_within_tolerance_m"].to_numpy(np.float64)
    homed = home >= 0
    ref_pos = ref.index.to_numpy(np.int64)
    np.add.at(values, _lookup(ref_pos, home[homed]), prow[homed])
    spacing = np.where(matched, ref["boundary_sample_spacing_m"].to_numpy(np.float64), np.nan)
    return QuantityTable(
        ref_pos=ref_pos,
        values=values,
        unassigned=prow[~homed].sum(axis=0),
        spacing_m=spacing,
    )

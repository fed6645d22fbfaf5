"""Per-field columns and the per-reference quantity table (SPEC section 4).

Every summary metric except the medians is a function of column sums of one table
with a row per reference field: the field's own quantities plus those of the
predictions whose home it is. Predictions without a home are summed into one extra
``unassigned`` row. This module builds, from the matched pairs:

* :func:`reference_fields`: the per-reference columns of the per-field table,
* :func:`prediction_fields`: the per-prediction columns,
* :func:`prediction_contributions`: what every prediction adds to reference rows,
  summed per target field (centrally, after the matching),
* :func:`quantity_table`: the quantity table of one partition, built by the metric
  families (:mod:`evalcore.metrics`) from those columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from evalcore._typing import F64Array, IdArray
from evalcore.arrays import index_of
from evalcore.matching import Resolution
from evalcore.metrics.registry import enabled_families, max_columns, quantity_columns
from evalcore.metrics.base import PredContext, RefContext

__all__ = [
    "QuantityTable",
    "Contributions",
    "reference_fields",
    "prediction_fields",
    "quantity_table",
    "prediction_contributions",
]

@dataclass(frozen=True, slots=True)
class QuantityTable:
    """Quantity rows of some reference fields (their home predictions' columns added).

    Attributes
    ----------
    ref_pos : ndarray of int64, shape (n,)
        Input positions of the reference fields, increasing.
    columns : tuple of str
        The summed columns (:func:`evalcore.metrics.registry.quantity_columns`).
    values : ndarray of float64, shape (n, len(columns))
    max_columns : tuple of str
    maxima : ndarray of float64, shape (n, len(max_columns))
        Values merged by max (NaN: none).
    """

    ref_pos: IdArray
    columns: tuple[str, ...]
    values: F64Array
    max_columns: tuple[str, ...]
    maxima: F64Array

    def column(self, name: str) -> F64Array:
        return self.values[:, self.columns.index(name)]


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
    row = index_of(ref_pos, pairs.ref_pos[k_all])

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
    row = index_of(pred_pos, pairs.pred_pos[mine])
    matched = np.zeros(n, dtype=bool)
    matched[row[resolution.is_match[mine]]] = True
    n_eligible = np.bincount(row[resolution.is_eligible[mine]], minlength=n).astype(np.int64)
    home = np.full(n, -1, dtype=np.int64)
    has = np.isin(resolution.home_pred_pos, pred_pos)
    home[index_of(pred_pos, resolution.home_pred_pos[has])] = resolution.home_ref_pos[has]
    return pd.DataFrame(
        {"matched": matched, "n_eligible_ref": n_eligible, "home_ref_pos": home},
        index=pd.Index(pred_pos, name="pred_pos"),
    )


def quantity_table(ctx: RefContext, contributions: Contributions) -> QuantityTable:
    """The quantity rows of one partition's fields: every family's reference columns plus
    what the predictions homed in them add (``contributions``, computed centrally).

    Parameters
    ----------
    ctx : RefContext
    contributions : Contributions
        Rows for some of these fields (any order of families' columns).
    """
    options = ctx.options
    columns = quantity_columns(options)
    max_cols = max_columns(options)
    col = {name: k for k, name in enumerate(columns)}
    values = np.zeros((ctx.n, len(columns)))
    maxima = np.full((ctx.n, len(max_cols)), np.nan)
    for family in enabled_families(options):
        for name, column in family.reference_columns(ctx).items():
            values[:, col[name]] = column
        for name, column in family.maximum_values(ctx).items():
            maxima[:, max_cols.index(name)] = column
    ref_pos = ctx.fields.index.to_numpy(np.int64)
    if len(contributions.ref_pos):
        rows = index_of(ref_pos, contributions.ref_pos)
        cols = [col[name] for name in contributions.columns]
        # One row per field at most, so this is an assignment-add without repeated indices.
        values[np.ix_(rows, cols)] += contributions.values
    return QuantityTable(ref_pos, columns, values, max_cols, maxima)


@dataclass(frozen=True, slots=True)
class Contributions:
    """What predictions add to reference rows, summed per target field.

    Attributes
    ----------
    ref_pos : ndarray of int64, shape (n,)
        Target reference positions, increasing (never -1: the unassigned row is apart).
    columns : tuple of str
        The prediction-side columns.
    values : ndarray of float64, shape (n, len(columns))
    """

    ref_pos: IdArray
    columns: tuple[str, ...]
    values: F64Array

    def take(self, rows: IdArray) -> Contributions:
        return Contributions(self.ref_pos[rows], self.columns, self.values[rows])


def prediction_contributions(ctx: PredContext) -> tuple[Contributions, dict[str, float], F64Array]:
    """Every family's prediction columns, summed per target reference field.

    Targets are visited in a fixed order (home, base home, overlap) and predictions in
    position order, so the sums have the same bits however the work was partitioned.

    Returns
    -------
    contributions : Contributions
    unassigned : dict of str to float
        Sum over predictions without a target (no candidate pair).
    homeless : ndarray of float64, shape (n_homeless, len(columns))
        The row of each of those predictions (in position order), for draws that weigh
        them one by one (the block bootstrap).
    """
    per_target: dict[str, dict[str, np.ndarray]] = {}
    for family in enabled_families(ctx.options):
        for target, columns in family.prediction_columns(ctx).items():
            per_target.setdefault(target, {}).update(columns)
    columns = tuple(dict.fromkeys(c for cols in per_target.values() for c in cols))
    col = {name: k for k, name in enumerate(columns)}
    targets = {name: ctx.target(name) for name in _TARGET_ORDER if name in per_target}
    every = np.concatenate(list(targets.values())) if targets else np.empty(0, np.int64)
    uniq = np.unique(every)
    out = np.zeros((len(uniq), len(columns)))
    for name, target in targets.items():
        row = np.searchsorted(uniq, target)
        for cname, v in per_target[name].items():
            # bincount adds in input order, as np.add.at would, and much faster.
            out[:, col[cname]] += np.bincount(row, weights=np.asarray(v, dtype=np.float64), minlength=len(uniq))
    assigned = uniq >= 0
    unassigned = {c: 0.0 for c in columns}
    if len(uniq) and not assigned[0]:
        unassigned = {c: float(out[0, k]) for c, k in col.items()}
    # A prediction without a home has no target at all (every target is -1).
    without = np.flatnonzero(ctx.target("home") < 0)
    homeless = np.zeros((len(without), len(columns)))
    for name in targets:
        for cname, v in per_target[name].items():
            homeless[:, col[cname]] += np.asarray(v, dtype=np.float64)[without]
    # uniq is sorted, so the unassigned target (-1) can only be its first row: a slice,
    # not a masked copy of the whole table (which would hold it twice at the peak).
    first = 0 if not len(uniq) or assigned[0] else 1
    return Contributions(uniq[first:], columns, out[first:]), unassigned, homeless


_TARGET_ORDER = ("home", "base_home", "overlap")

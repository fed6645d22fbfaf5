"""Error taxonomy (SPEC 6.8, seed 004 §15): one primary code per reference field and per
prediction, secondary flags, and their counts in every grouping.

Primary codes, at the main IoU threshold and matching:

* a reference field is ``TP`` (matched), ``M-FN-MISSED`` (no prediction overlaps it:
  no candidate pair) or ``M-FN-LOCALISATION`` (overlapped, unmatched);
* a prediction is ``TP`` (matched), ``M-FP-BACKGROUND`` (overlaps no reference field),
  ``M-FP-DUPLICATE`` (its largest-overlap reference, SPEC 3's tie rule, is matched by
  another prediction) or ``M-FP-LOCALISATION`` (overlaps a reference field, below the
  threshold, and is not a duplicate).

Secondary flags, which do not change the primary code: ``merge`` (a reference field
covered by a merging prediction; a merging prediction), ``split`` (a split reference
field; a prediction held by a split reference field), both by the majority rule of the
topology family (SPEC 6.2), and with ``boundary_tolerance_m`` ``M-BOUNDARY`` (matched,
and the matched pair's mean boundary distance is more than the tolerance).

The counts follow SPEC 6's grouping rule: a reference code in its field's group, a
prediction code with its home reference (a prediction without a home, always
``M-FP-BACKGROUND``, overall and in its own tile and AOI). ``TP`` counts matched
reference fields (``tp``), ``merge`` the merging predictions (``count_merges``) and
``split`` the split reference fields (``count_splits``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evalcore._typing import F64Array, IdArray
from evalcore.metrics.base import GroupView, MetricFamily, PredContext, RefContext

__all__ = [
    "Taxonomy",
    "REFERENCE_CODES",
    "PREDICTION_CODES",
    "TAXONOMY_KEYS",
    "reference_codes",
    "prediction_codes",
    "reference_flags",
    "prediction_flags",
    "code_labels",
    "taxonomy_counts",
]

REFERENCE_CODES: tuple[str, ...] = ("TP", "M-FN-MISSED", "M-FN-LOCALISATION")
"""Primary codes of a reference field, by their integer code 0, 1, 2."""
PREDICTION_CODES: tuple[str, ...] = ("TP", "M-FP-BACKGROUND", "M-FP-DUPLICATE", "M-FP-LOCALISATION")
"""Primary codes of a prediction, by their integer code 0, 1, 2, 3."""

TAXONOMY_KEYS: dict[str, str] = {
    "TP": "count_tp",
    "M-FP-BACKGROUND": "count_fp_background",
    "M-FP-DUPLICATE": "count_fp_duplicate",
    "M-FP-LOCALISATION": "count_fp_localisation",
    "M-FN-MISSED": "count_fn_missed",
    "M-FN-LOCALISATION": "count_fn_localisation",
    "merge": "count_merges",
    "split": "count_splits",
    "M-BOUNDARY": "count_boundary_errors",
}
"""Each code of ``error-taxonomy.json`` and the key (or table column) that counts it."""

_REF_COLUMNS = ("fn_missed", "fn_localisation")
_PRED_COLUMNS = ("fp_background", "fp_duplicate", "fp_localisation")


def reference_codes(matched: np.ndarray, n_overlapping_pred: IdArray) -> np.ndarray:
    """Primary code of each reference field (int8 into :data:`REFERENCE_CODES`)."""
    matched = np.asarray(matched, dtype=bool)
    overlapped = np.asarray(n_overlapping_pred) > 0
    return np.where(matched, 0, np.where(overlapped, 2, 1)).astype(np.int8)


def prediction_codes(matched: np.ndarray, overlap_ref_pos: IdArray, matched_ref_pos: IdArray) -> np.ndarray:
    """Primary code of each prediction (int8 into :data:`PREDICTION_CODES`).

    Parameters
    ----------
    matched : ndarray of bool
        The prediction is matched.
    overlap_ref_pos : ndarray of int64
        Its largest-overlap reference field (-1: no candidate pair).
    matched_ref_pos : ndarray of int64
        Positions of every matched reference field of the run, sorted.
    """
    matched = np.asarray(matched, dtype=bool)
    overlap = np.asarray(overlap_ref_pos, dtype=np.int64)
    taken = np.zeros(len(overlap), dtype=bool)
    has = overlap >= 0
    if len(matched_ref_pos) and has.any():
        at = np.searchsorted(matched_ref_pos, overlap[has])
        at = np.minimum(at, len(matched_ref_pos) - 1)
        taken[has] = matched_ref_pos[at] == overlap[has]
    # An unmatched prediction whose reference is matched lost it to another prediction.
    code = np.where(~has, 1, np.where(taken, 2, 3))
    return np.where(matched, 0, code).astype(np.int8)


def reference_flags(merged_reference: F64Array | None, splits: F64Array | None, matched: np.ndarray,
                    mean_distance_m: F64Array, tolerance_m: float | None) -> dict[str, np.ndarray]:
    """``merge``, ``split`` and (with a tolerance) ``boundary_error`` of reference fields.

    Parameters
    ----------
    merged_reference, splits : ndarray of float64, optional
        The topology family's quantity columns of the fields (None: not computed).
    matched : ndarray of bool
    mean_distance_m : ndarray of float64
        Mean boundary distance of the matched pair, metres (NaN when unmatched).
    tolerance_m : float, optional
        ``boundary_tolerance_m`` (None: no ``boundary_error`` flag).
    """
    n = len(matched)
    out = {}
    for flag, values in (("merge", merged_reference), ("split", splits)):
        out[flag] = np.zeros(n, dtype=bool) if values is None else np.asarray(values) > 0
    if tolerance_m is not None:
        with np.errstate(invalid="ignore"):
            out["boundary_error"] = np.asarray(matched, dtype=bool) & (np.asarray(mean_distance_m) > tolerance_m)
    return out


def prediction_flags(pred_pos: IdArray, pairs: object, pair_values: dict, pred_area_of_pair: F64Array,
                     pair_mean_distance_m: F64Array, options: object) -> dict[str, np.ndarray]:
    """``merge``, ``split`` and (with a tolerance) ``boundary_error`` of every prediction.

    Parameters
    ----------
    pred_pos : ndarray of int64
        Every prediction position of the run, increasing.
    pairs : evalcore.pairtable.PairTable
        Every candidate pair of the run.
    pair_values : dict
        The resolve phase's per-pair values (``is_match`` and topology's ``merge_cover``).
    pred_area_of_pair, pair_mean_distance_m : ndarray of float64
        Per pair: the prediction's area (m²) and the mean boundary distance (metres, NaN
        where not computed).
    """
    n = len(pred_pos)
    row = np.searchsorted(pred_pos, pairs.pred_pos)
    merge = np.zeros(n, dtype=bool)
    if "merge_cover" in pair_values:
        merge[row[pair_values["merge_cover"]]] = True
    split = np.zeros(n, dtype=bool)
    if len(pairs):
        held = pairs.inter_m2 > options.majority_fraction * pred_area_of_pair
        n_ref = int(pairs.ref_pos.max()) + 1
        n_held = np.bincount(pairs.ref_pos[held], minlength=n_ref)
        split[row[held & (n_held[pairs.ref_pos] >= 2)]] = True
    out = {"merge": merge, "split": split}
    if options.boundary_tolerance_m is not None:
        boundary = np.zeros(n, dtype=bool)
        with np.errstate(invalid="ignore"):
            far = pair_values["is_match"] & (np.asarray(pair_mean_distance_m) > options.boundary_tolerance_m)
        boundary[row[far]] = True
        out["boundary_error"] = boundary
    return out


def code_labels(codes: np.ndarray, names: tuple[str, ...]) -> pd.api.extensions.ExtensionArray:
    """The codes as a string column (for the per-field and per-prediction tables)."""
    return pd.array(np.asarray(names, dtype=object)[np.asarray(codes, dtype=np.int64)], dtype="string")


def taxonomy_counts(entry: dict) -> dict[str, int | None]:
    """``{code: count}`` of one group's summary entry (or table row), null where not computed."""
    out = {}
    for code, key in TAXONOMY_KEYS.items():
        value = entry.get(key)
        out[code] = None if value is None or (isinstance(value, float) and not np.isfinite(value)) else int(value)
    return out


class Taxonomy(MetricFamily):
    """Counts of the primary codes (and of ``M-BOUNDARY``) in every group."""

    name = "taxonomy"

    def columns(self, options: object) -> tuple[str, ...]:
        tolerance = ("boundary_errors",) if options.boundary_tolerance_m is not None else ()
        return _REF_COLUMNS + _PRED_COLUMNS + tolerance

    def reference_columns(self, ctx: RefContext) -> dict[str, F64Array]:
        f = ctx.fields
        codes = reference_codes(f["matched"].to_numpy(bool), f["n_overlapping_pred"].to_numpy(np.int64))
        out = {"fn_missed": (codes == 1).astype(np.float64), "fn_localisation": (codes == 2).astype(np.float64)}
        tolerance = ctx.options.boundary_tolerance_m
        if tolerance is not None:
            with np.errstate(invalid="ignore"):
                far = f["matched"].to_numpy(bool) & (f["boundary_mean_distance_m"].to_numpy(np.float64) > tolerance)
            out["boundary_errors"] = far.astype(np.float64)
        return out

    def prediction_columns(self, ctx: PredContext) -> dict[str, dict[str, F64Array]]:
        codes = ctx.preds["error_code"].to_numpy(np.int8)
        return {"home": {name: (codes == k).astype(np.float64) for k, name in enumerate(_PRED_COLUMNS, start=1)}}

    def unit_columns(self, options: object) -> tuple[str, ...]:
        return self.columns(options)

    def unit_values(self, s, options):
        # The counts of error-taxonomy.json per unit: the codes, then the topology
        # family's merge and split flags (TAXONOMY_KEYS), then M-BOUNDARY.
        out = {f"count_{name}": s[name].astype(np.int64) for name in _REF_COLUMNS + _PRED_COLUMNS}
        out |= {"count_merges": s["merges"].astype(np.int64), "count_splits": s["splits"].astype(np.int64)}
        if "boundary_errors" in s:
            out["count_boundary_errors"] = s["boundary_errors"].astype(np.int64)
        return out

    def summarize(self, g: GroupView) -> dict[str, object]:
        out: dict[str, object] = {
            "count_fp_background": g.count("fp_background"),
            "count_fp_duplicate": g.count("fp_duplicate"),
            "count_fp_localisation": g.count("fp_localisation"),
            "count_fn_missed": g.count("fn_missed"),
            "count_fn_localisation": g.count("fn_localisation"),
        }
        if g.options is not None and g.options.boundary_tolerance_m is not None:
            out["count_boundary_errors"] = g.count("boundary_errors")
        return out

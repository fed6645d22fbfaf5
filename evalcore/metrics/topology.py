"""Topology: merges, splits and the count ratio, by majority overlap (SPEC 6.2, seed 001).

A prediction *covers* a reference field when more than ``majority_fraction`` of the
field lies in it; covering two or more fields makes it a merge. A reference field
*holds* a prediction when more than ``majority_fraction`` of the prediction lies in it;
holding two or more makes it a split. Whether a prediction is a merge needs all of its
pairs, which span partitions, so that step runs centrally with the matching
(:meth:`Topology.pair_values`); holding needs only the field's own pairs.

In a group a merge counts with its prediction's home reference,
``count_merged_reference`` with each covered field's own group, a split with its field.

``count_split_predictions`` counts distinct predictions: with overlapping reference
fields one prediction can be held by two split fields, and it counts once overall and,
in a group, once when at least one of its split fields is in the group. A distinct count
is not a sum of per-field counts, so the central step credits each such prediction to
one of its split fields per group: in each grouping, the split field of lowest position
among those in the same group (:meth:`Topology.pair_values`). Each field then sums its
credits, and a group's sum of a grouping's credit column is the group's distinct count,
exactly, whatever the partitioning (integers add exactly).
"""

from __future__ import annotations

import numpy as np

from evalcore.config import MAJORITY_FRACTION
from evalcore.metrics.base import NULL, GroupView, MetricFamily, Option, PairContext, PredContext, RefContext, ratio
from evalcore.metrics.checks import open_unit_interval
from evalcore.present import Shown

__all__ = ["Topology"]


_CREDIT = {
    None: "split_predictions",
    "per_stratum": "split_predictions_per_stratum",
    "per_size_class": "split_predictions_per_size_class",
}
"""The credit column of ``count_split_predictions`` in each grouping (None: overall)."""


def _first_per_group(pred_pos: np.ndarray, ref_pos: np.ndarray, codes: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Per pair: a candidate pair whose field has the lowest position among the candidate
    pairs of its prediction whose fields share its group code (code -1: in no group,
    never credited).

    Examples
    --------
    >>> _first_per_group(np.array([0, 0, 0, 1]), np.array([5, 3, 4, 3]), np.array([0, 0, 1, 0]),
    ...                  np.array([True, True, True, False])).tolist()
    [False, True, True, False]
    """
    out = np.zeros(len(pred_pos), dtype=bool)
    rows = np.flatnonzero(candidate & (codes >= 0))
    if len(rows) == 0:
        return out
    # Sort by (prediction, group, reference position); the first of each run is credited.
    order = rows[np.lexsort((ref_pos[rows], codes[rows], pred_pos[rows]))]
    p, c = pred_pos[order], codes[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (p[1:] != p[:-1]) | (c[1:] != c[:-1])
    out[order[first]] = True
    return out


class Topology(MetricFamily):
    name = "topology"
    options = (
        Option(
            "majority_fraction", MAJORITY_FRACTION,
            "share of a polygon (strictly more than this) that makes a cover or a hold; in (0, 1) (default 0.5)",
            open_unit_interval, parse=float, annotation=float,
        ),
    )
    shown = (Shown("count_ratio", "Count ratio (predicted / reference)", better=None, headline=False),)

    def columns(self, options: object) -> tuple[str, ...]:
        return ("merges", "merged_reference", "splits") + tuple(_CREDIT.values())

    def pair_values(self, ctx: PairContext) -> dict[str, np.ndarray]:
        f = ctx.options.majority_fraction
        pairs = ctx.pairs
        covers = pairs.inter_m2 > f * ctx.ref_area_m2
        n_pred = int(pairs.pred_pos.max()) + 1 if len(pairs) else 0
        n_covered = np.bincount(pairs.pred_pos[covers], minlength=n_pred)
        merging = n_covered >= 2
        out = {"merge_cover": covers & merging[pairs.pred_pos] if len(pairs) else np.zeros(0, bool)}
        # A split held pair: its field holds two or more predictions (all of a field's
        # pairs are here, so the split is decided globally, as the partitions decide it).
        held = pairs.inter_m2 > f * ctx.pred_area_m2
        n_ref = int(pairs.ref_pos.max()) + 1 if len(pairs) else 0
        split_held = held & (np.bincount(pairs.ref_pos[held], minlength=n_ref) >= 2)[pairs.ref_pos] if len(pairs) else held
        overall = _first_per_group(pairs.pred_pos, pairs.ref_pos, np.zeros(len(pairs), np.int64), split_held)
        for grouping, column in _CREDIT.items():
            codes = ctx.ref_groups.get(grouping)
            # Overall, or a grouping the run does not have (its column is never read): one group.
            out[column] = overall if codes is None else _first_per_group(pairs.pred_pos, pairs.ref_pos, codes, split_held)
        return out

    def reference_columns(self, ctx: RefContext) -> dict[str, np.ndarray]:
        f = ctx.options.majority_fraction
        held = ctx.pairs.inter_m2 > f * ctx.pred_area_m2
        n_held = np.bincount(ctx.row_of_pair[held], minlength=ctx.n).astype(np.float64)
        merged = np.zeros(ctx.n, dtype=bool)
        merged[ctx.row_of_pair[ctx.pair_values["merge_cover"]]] = True
        split = n_held >= 2
        out = {
            "merged_reference": merged.astype(np.float64),
            "splits": split.astype(np.float64),
        }
        for column in _CREDIT.values():
            credited = ctx.pair_values[column]
            out[column] = np.bincount(ctx.row_of_pair[credited], minlength=ctx.n).astype(np.float64)
        return out

    def prediction_columns(self, ctx: PredContext) -> dict[str, dict[str, np.ndarray]]:
        pairs = ctx.pairs
        is_merge = np.zeros(len(ctx.preds), dtype=np.float64)
        covering = pairs.pred_pos[ctx.pair_values["merge_cover"]]
        if len(covering):
            is_merge[np.searchsorted(ctx.preds.index.to_numpy(np.int64), np.unique(covering))] = 1.0
        return {"home": {"merges": is_merge}}

    def run_keys(self, options: object) -> dict[str, object]:
        return {"majority_fraction": options.majority_fraction}

    def finalize(self, s, options):
        return {"count_ratio": ratio(s["n_pred"], s["n_ref"])}

    def interval_keys(self, options: object) -> tuple[str, ...]:
        return ("count_ratio",)

    def replicate_columns(self, options: object) -> tuple[str, ...]:
        return ()  # count_ratio reads the detection family's n_pred and n_ref

    def unit_columns(self, options: object) -> tuple[str, ...]:
        return ("merges", "splits")

    def unit_values(self, s, options):
        n_ref = s["n_ref"]
        with np.errstate(divide="ignore", invalid="ignore"):
            count_ratio = np.where(n_ref > 0, s["n_pred"] / n_ref, np.nan)
        return {"count_ratio": count_ratio}

    def summarize(self, g: GroupView) -> dict[str, object]:
        return {
            "count_merges": g.count("merges"),
            "count_merged_reference": g.count("merged_reference"),
            "count_splits": g.count("splits"),
            "count_split_predictions": g.count(_CREDIT.get(g.grouping, _CREDIT[None])),
            "count_ratio": g.point("count_ratio", NULL),
        }

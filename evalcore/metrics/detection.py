"""Detection: counts, precision, recall, F1 and mean IoU of the matching (SPEC 3, 4).

Owns the matching options (``iou_threshold``, ``matching``) and the columns every other
family may read: ``n_ref`` (1 per reference field), ``tp``, ``n_pred`` and
``n_pred_matched`` (summed over a field's home predictions).
"""

from __future__ import annotations

import numpy as np

from evalcore.config import MATCHING_METHODS
from evalcore.metrics.base import RATE, ZERO, GroupView, MetricFamily, Option, PredContext, RefContext, count_rates, ratio
from evalcore.matching import check_matching
from evalcore.metrics.checks import unit_interval
from evalcore.rates import F1_HARMONIC_POSITIVE, detection_rates
from evalcore.present import GROUPS, Shown, with_interval

__all__ = ["Detection"]

_INTERVALS = ("precision", "recall", "f1", "iou_mean", "best_iou_mean", "over_segmentation", "under_segmentation")


class Detection(MetricFamily):
    name = "detection"
    options = (
        Option(
            "iou_threshold", 0.5, "a pair can match when IoU >= this (relative tolerance 1e-9); in (0, 1] (default 0.5)",
            unit_interval, parse=float, annotation=float,
        ),
        Option(
            "matching", "one_to_one", "one_to_one (greedy by IoU), many_to_one (each field its best prediction) "
            "or max_weight (the one-to-one set with the largest total IoU) (default one_to_one)",
            lambda name, value: check_matching(value), annotation=str, choices=MATCHING_METHODS,
        ),
    )
    shown = (
        Shown("precision", "Precision", "precision", compared=GROUPS),
        Shown("recall", "Recall", "recall", compared=GROUPS),
        Shown("f1", "F1", "F1", compared=GROUPS),
        Shown("iou_mean", "Mean IoU of matches", "mean IoU", compared=GROUPS),
        Shown("best_iou_mean", "Mean best IoU"),
    )

    def summary_lines(self, metrics: dict) -> list[str]:
        """The counts, then precision, recall, F1 and mean IoU with their intervals."""
        # agribound reports a mean IoU of 0.0 without matches; a reader must not take it for a measured 0.
        iou = with_interval(metrics, "iou_mean") if metrics["count_tp"] else "n/a (no matches)"
        return [
            f"reference fields {metrics['count_reference']}  predictions {metrics['count_predicted']}  "
            f"TP {metrics['count_tp']}  FP {metrics['count_fp']} ({metrics['count_fp_unassigned']} overlap nothing)  FN {metrics['count_fn']}",
            f"precision {with_interval(metrics, 'precision')}  recall {with_interval(metrics, 'recall')}  "
            f"F1 {with_interval(metrics, 'f1')}  mean IoU {iou}",
        ]

    def columns(self, options: object) -> tuple[str, ...]:
        return ("n_ref", "tp", "iou_matched", "best_iou", "n_ref_overseg", "n_pred", "n_pred_matched", "n_pred_underseg")

    def reference_columns(self, ctx: RefContext) -> dict[str, np.ndarray]:
        f = ctx.fields
        matched = f["matched"].to_numpy(bool)
        return {
            "n_ref": np.ones(ctx.n),
            "tp": matched.astype(np.float64),
            "iou_matched": np.where(matched, f["iou"].to_numpy(np.float64), 0.0),
            "best_iou": f["best_iou"].to_numpy(np.float64),
            # more than one prediction at IoU >= threshold (agribound 0.1.x)
            "n_ref_overseg": (f["n_eligible_pred"].to_numpy() > 1).astype(np.float64),
        }

    def prediction_columns(self, ctx: PredContext) -> dict[str, dict[str, np.ndarray]]:
        p = ctx.preds
        return {
            "home": {
                "n_pred": np.ones(len(p)),
                "n_pred_matched": p["matched"].to_numpy(bool).astype(np.float64),
                "n_pred_underseg": (p["n_eligible_ref"].to_numpy() > 1).astype(np.float64),
            }
        }

    def finalize(self, s, options):
        tp = np.asarray(s["tp"], dtype=np.float64)
        n_ref = np.asarray(s["n_ref"], dtype=np.float64)
        n_pred = np.asarray(s["n_pred"], dtype=np.float64)
        fp = n_pred - s["n_pred_matched"]
        out = dict(zip(("precision", "recall", "f1"), count_rates(tp, fp, n_ref - tp)))
        out["iou_mean"] = ratio(s["iou_matched"], tp)
        out["over_segmentation"] = ratio(s["n_ref_overseg"], n_ref)
        out["under_segmentation"] = ratio(s["n_pred_underseg"], n_pred)
        out["best_iou_mean"] = ratio(s["best_iou"], n_ref)
        return out

    def interval_keys(self, options: object) -> tuple[str, ...]:
        return _INTERVALS

    def unit_columns(self, options: object) -> tuple[str, ...]:
        return ("n_ref", "tp", "n_pred", "n_pred_matched")

    def unit_values(self, s, options):
        n_ref, tp, n_pred = s["n_ref"], s["tp"], s["n_pred"]
        fp = n_pred - s["n_pred_matched"]
        # SPEC 6.3's rule: F1 is null at P = R = 0 as well (evalcore.rates.F1_HARMONIC_POSITIVE).
        precision, recall, f1 = detection_rates(tp, fp, n_ref - tp, f1=F1_HARMONIC_POSITIVE)
        return {
            "count_reference": n_ref.astype(np.int64),
            "count_predicted": n_pred.astype(np.int64),
            "count_tp": tp.astype(np.int64),
            "count_fp": fp.astype(np.int64),
            "count_fn": (n_ref - tp).astype(np.int64),
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "count_error": (n_pred - n_ref).astype(np.int64),
        }

    def unit_interval_keys(self, options: object) -> tuple[str, ...]:
        return ("precision", "recall", "f1")

    def summarize(self, g: GroupView) -> dict[str, object]:
        n_pred, n_ref, tp = g.count("n_pred"), g.count("n_ref"), g.count("tp")
        return {
            "precision": g.point("precision", RATE),
            "recall": g.point("recall", RATE),
            "f1": g.point("f1", RATE),
            "iou_mean": g.point("iou_mean", RATE),
            "over_segmentation": g.point("over_segmentation", ZERO),
            "under_segmentation": g.point("under_segmentation", ZERO),
            "count_predicted": n_pred,
            "count_reference": n_ref,
            "count_tp": tp,
            "count_fp": n_pred - g.count("n_pred_matched"),
            "count_fn": n_ref - tp,
            "best_iou_mean": g.point("best_iou_mean", RATE),
        }

"""Incomplete references (SPEC 6.4, seeds 000 and 003): precision among predictions that
touch the reference, and precision inside the annotated area.

Where the reference layer misses fields, a prediction over an unmapped field is counted
as a false positive although it may be right. ``precision_touching`` leaves out the false
positives that overlap no reference field at all (``count_fp_unassigned``):
TP / (TP + FP − count_fp_unassigned). A group holds only predictions with a home
reference, so there it equals the group's precision (but is null, never 0, when
undefined).

With an annotated-area layer (polygons where the reference is complete), an unmatched
prediction is a false positive only when more than ``annotated_fraction`` of its area
lies inside the union of the annotated polygons: ``precision_annotated`` = TP / (TP +
those FP), and ``count_fp_outside_annotation`` counts the other unmatched predictions
(those without a home included, overall). Recall is unchanged.
"""

from __future__ import annotations

import numpy as np

from evalcore.sites import layer_input
from evalcore.metrics.base import NULL, GroupView, MetricFamily, Option, PredContext, ratio
from evalcore.metrics.checks import fraction, optional_text
from evalcore.present import Row, interval_of

__all__ = ["Incomplete"]


class Incomplete(MetricFamily):
    name = "incomplete"
    options = (
        Option(
            "annotated_area", None,
            "annotated-area layer (polygons where the reference is complete): precision_annotated (default: none)",
            layer_input, annotation=str | None,
        ),
        Option(
            "annotated_area_layer", None, "layer name inside the annotated-area file (default: its only layer)",
            optional_text, annotation=str | None,
        ),
        Option(
            "annotated_fraction", 0.5,
            "an unmatched prediction is a false positive of precision_annotated when more than this share of its area "
            "is annotated; in [0, 1) (default 0.5)",
            fraction, parse=float, annotation=float,
        ),
    )

    def columns(self, options: object) -> tuple[str, ...]:
        if options.annotated_area is None:
            return ("n_pred_touching",)
        return ("n_pred_touching", "n_pred_fp_annotated", "n_pred_fp_outside")

    def prediction_columns(self, ctx: PredContext) -> dict[str, dict[str, np.ndarray]]:
        # Only predictions with a home add here: a homeless one's "home" target is the
        # unassigned row, which must not count it as touching.
        touching = ctx.target("home") >= 0
        columns = {"n_pred_touching": touching.astype(np.float64)}
        if ctx.options.annotated_area is not None:
            unmatched = ~ctx.preds["matched"].to_numpy(bool)
            inside = ctx.preds["annotated_fraction"].to_numpy(np.float64) > ctx.options.annotated_fraction
            columns["n_pred_fp_annotated"] = (unmatched & inside).astype(np.float64)
            columns["n_pred_fp_outside"] = (unmatched & ~inside).astype(np.float64)
        return {"home": columns}

    def finalize(self, s, options):
        tp = np.asarray(s["tp"], dtype=np.float64)
        fp_touching = np.asarray(s["n_pred_touching"], dtype=np.float64) - s["n_pred_matched"]
        out = {"precision_touching": ratio(tp, tp + fp_touching)}
        if options.annotated_area is not None:
            out["precision_annotated"] = ratio(tp, tp + np.asarray(s["n_pred_fp_annotated"], dtype=np.float64))
        return out

    def interval_keys(self, options: object) -> tuple[str, ...]:
        if options.annotated_area is None:
            return ("precision_touching",)
        return ("precision_touching", "precision_annotated")

    def replicate_columns(self, options: object) -> tuple[str, ...]:
        return tuple(c for c in self.columns(options) if c != "n_pred_fp_outside")  # a count, no interval

    def summarize(self, g: GroupView) -> dict[str, object]:
        out: dict[str, object] = {"precision_touching": g.point("precision_touching", NULL)}
        if g.options.annotated_area is not None:
            out["precision_annotated"] = g.point("precision_annotated", NULL)
            out["count_fp_outside_annotation"] = g.count("n_pred_fp_outside")
        return out

    def headline_rows(self, metrics) -> list[Row]:
        """``precision_annotated`` with its interval, when the run had an annotated area."""
        if "precision_annotated" not in metrics:
            return []
        return [Row("precision_annotated", "Precision inside the annotated area", metrics["precision_annotated"],
                    interval_of(metrics, "precision_annotated"))]

    def run_keys(self, options: object) -> dict[str, object]:
        if options.annotated_area is None:
            return {}
        return {"annotated_fraction": options.annotated_fraction}

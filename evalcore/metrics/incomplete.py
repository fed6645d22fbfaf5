"""Incomplete references (SPEC 6.4, seeds 000 and 003): precision among predictions that
touch the reference.

Where the reference layer misses fields, a prediction over an unmapped field is counted
as a false positive although it may be right. ``precision_touching`` leaves out the false
positives that overlap no reference field at all (``count_fp_unassigned``):
TP / (TP + FP − count_fp_unassigned). A group holds only predictions with a home
reference, so there it equals the group's precision (but is null, never 0, when
undefined).
"""

from __future__ import annotations

import numpy as np

from evalcore.metrics.base import NULL, GroupView, MetricFamily, PredContext, ratio

__all__ = ["Incomplete"]


class Incomplete(MetricFamily):
    name = "incomplete"

    def columns(self, options: object) -> tuple[str, ...]:
        return ("n_pred_touching",)

    def prediction_columns(self, ctx: PredContext) -> dict[str, dict[str, np.ndarray]]:
        # Only predictions with a home add here: a homeless one's "home" target is the
        # unassigned row, which must not count it as touching.
        touching = ctx.target("home") >= 0
        return {"home": {"n_pred_touching": touching.astype(np.float64)}}

    def finalize(self, s, options):
        tp = np.asarray(s["tp"], dtype=np.float64)
        fp_touching = np.asarray(s["n_pred_touching"], dtype=np.float64) - s["n_pred_matched"]
        return {"precision_touching": ratio(tp, tp + fp_touching)}

    def interval_keys(self, options: object) -> tuple[str, ...]:
        return ("precision_touching",)

    def summarize(self, g: GroupView) -> dict[str, object]:
        return {"precision_touching": g.point("precision_touching", NULL)}

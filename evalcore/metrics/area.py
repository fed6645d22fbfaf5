"""Areas: area-weighted precision, recall and F1, total and median areas, area errors (seed 000)."""

from __future__ import annotations

import numpy as np

from evalcore.metrics.base import MEAN, RATE, ZERO, GroupView, MetricFamily, PredContext, RefContext, harmonic, ratio
from evalcore.present import Shown, with_interval

__all__ = ["Area"]


class Area(MetricFamily):
    name = "area"
    shown = (
        Shown("area_weighted_precision", "Area-weighted precision", "area-weighted precision"),
        Shown("area_weighted_recall", "Area-weighted recall", "recall"),
        Shown("area_weighted_f1", "Area-weighted F1"),
    )

    def summary_lines(self, metrics: dict) -> list[str]:
        return [f"area-weighted precision {with_interval(metrics, 'area_weighted_precision')}  "
                f"recall {with_interval(metrics, 'area_weighted_recall')}"]

    def columns(self, options: object) -> tuple[str, ...]:
        return (
            "area_ref_m2", "area_ref_matched_m2", "area_abs_err_m2", "area_signed_err_m2",
            "area_pred_m2", "area_pred_matched_m2",
        )

    def reference_columns(self, ctx: RefContext) -> dict[str, np.ndarray]:
        f = ctx.fields
        matched = f["matched"].to_numpy(bool)
        area = f["area_m2"].to_numpy(np.float64)
        pred_area = f["pred_area_m2"].to_numpy(np.float64)  # of the matched prediction
        return {
            "area_ref_m2": area,
            "area_ref_matched_m2": np.where(matched, area, 0.0),
            "area_abs_err_m2": np.where(matched, np.abs(pred_area - area), 0.0),
            "area_signed_err_m2": np.where(matched, pred_area - area, 0.0),
        }

    def prediction_columns(self, ctx: PredContext) -> dict[str, dict[str, np.ndarray]]:
        p = ctx.preds
        area = p["area_m2"].to_numpy(np.float64)
        return {"home": {"area_pred_m2": area, "area_pred_matched_m2": np.where(p["matched"].to_numpy(bool), area, 0.0)}}

    def unit_columns(self, options: object) -> tuple[str, ...]:
        return ("area_ref_m2", "area_pred_m2")

    def unit_values(self, s, options):
        return {"area_bias_ha": (s["area_pred_m2"] - s["area_ref_m2"]) / 1e4}

    def gathered(self, ctx: RefContext) -> dict[str, np.ndarray]:
        return {"area_ha": ctx.fields["area_m2"].to_numpy(np.float64) / 1e4}

    def order_statistics(self, options: object) -> dict[str, tuple[object, ...]]:
        return {"area_ha": ("median",)}

    def finalize(self, s, options):
        tp = np.asarray(s["tp"], dtype=np.float64)
        out = {
            "area_error_mean_m2": ratio(s["area_abs_err_m2"], tp),
            "area_weighted_precision": ratio(s["area_pred_matched_m2"], s["area_pred_m2"]),
            "area_weighted_recall": ratio(s["area_ref_matched_m2"], s["area_ref_m2"]),
            "area_error_signed_mean_m2": ratio(s["area_signed_err_m2"], tp),
        }
        out["area_weighted_f1"] = harmonic(out["area_weighted_precision"], out["area_weighted_recall"])
        return out

    def interval_keys(self, options: object) -> tuple[str, ...]:
        return (
            "area_weighted_precision", "area_weighted_recall", "area_weighted_f1",
            "area_error_mean_m2", "area_error_signed_mean_m2",
        )

    def summarize(self, g: GroupView) -> dict[str, object]:
        return {
            "area_error_mean_m2": g.point("area_error_mean_m2", ZERO),
            "area_weighted_recall": g.point("area_weighted_recall", RATE),
            "area_weighted_precision": g.point("area_weighted_precision", RATE),
            "area_weighted_f1": g.point("area_weighted_f1", RATE),
            "reference_area_ha": float(g.sums["area_ref_m2"]) / 1e4,
            "predicted_area_ha": float(g.sums["area_pred_m2"]) / 1e4,
            "median_area_ha": g.median("area_ha"),
            "area_error_signed_mean_m2": g.point("area_error_signed_mean_m2", MEAN),
        }

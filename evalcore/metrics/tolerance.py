"""Boundary precision, recall and F1 within a tolerance, and coverage (seed 000 "With boundary_tolerance_m")."""

from __future__ import annotations

import numpy as np

from evalcore.metrics.base import RATE, GroupView, MetricFamily, Option, PredContext, RefContext, harmonic, ratio
from evalcore.metrics.checks import positive_or_none
from evalcore.present import Shown, with_interval

__all__ = ["Tolerance"]

_KEYS = ("boundary_precision", "boundary_recall", "boundary_f1", "coverage_within_tolerance", "coverage_within_tolerance_area")


class Tolerance(MetricFamily):
    name = "tolerance"
    options = (
        Option(
            "boundary_tolerance_m", None,
            "tolerance in metres for boundary precision/recall/F1 and coverage (default: off)",
            positive_or_none, parse=float, annotation=float | None,
        ),
    )
    shown = (
        Shown("boundary_precision", "Boundary precision", "boundary precision"),
        Shown("boundary_recall", "Boundary recall", "recall"),
        Shown("boundary_f1", "Boundary F1", "F1"),
        Shown("coverage_within_tolerance", "Coverage within tolerance", "coverage"),
    )

    def summary_lines(self, metrics: dict) -> list[str]:
        if "boundary_tolerance_m" not in metrics:
            return []
        return [f"within {metrics['boundary_tolerance_m']:g} m: " + "  ".join(f"{s.short} {with_interval(metrics, s.key)}" for s in self.shown)]

    def enabled(self, options: object) -> bool:
        return options.boundary_tolerance_m is not None

    def columns(self, options: object) -> tuple[str, ...]:
        return ("perimeter_ref_m", "ref_within_tol_m", "n_within_tol", "area_within_tol_m2", "perimeter_pred_m", "pred_within_tol_m")

    def reference_columns(self, ctx: RefContext) -> dict[str, np.ndarray]:
        f = ctx.fields
        tol = ctx.options.boundary_tolerance_m
        area = f["area_m2"].to_numpy(np.float64)
        within = f["matched"].to_numpy(bool) & (f["boundary_mean_distance_m"].to_numpy(np.float64) <= tol)
        return {
            "perimeter_ref_m": f["perimeter_m"].to_numpy(np.float64),
            "ref_within_tol_m": f["boundary_within_tolerance_m"].to_numpy(np.float64),
            "n_within_tol": within.astype(np.float64),
            "area_within_tol_m2": np.where(within, area, 0.0),
        }

    def prediction_columns(self, ctx: PredContext) -> dict[str, dict[str, np.ndarray]]:
        p = ctx.preds
        return {
            "home": {
                "perimeter_pred_m": p["perimeter_m"].to_numpy(np.float64),
                "pred_within_tol_m": p["boundary_within_tolerance_m"].to_numpy(np.float64),
            }
        }

    def finalize(self, s, options):
        out = {
            "boundary_recall": ratio(s["ref_within_tol_m"], s["perimeter_ref_m"]),
            "boundary_precision": ratio(s["pred_within_tol_m"], s["perimeter_pred_m"]),
        }
        out["boundary_f1"] = harmonic(out["boundary_precision"], out["boundary_recall"])
        out["coverage_within_tolerance"] = ratio(s["n_within_tol"], s["n_ref"])
        out["coverage_within_tolerance_area"] = ratio(s["area_within_tol_m2"], s["area_ref_m2"])
        return out

    def interval_keys(self, options: object) -> tuple[str, ...]:
        return _KEYS

    def summarize(self, g: GroupView) -> dict[str, object]:
        return {key: g.point(key, RATE) for key in _KEYS}

"""Boundary distances of matched pairs: Hausdorff and symmetric mean (SPEC 4, evalcore.boundary)."""

from __future__ import annotations

import numpy as np

from evalcore.config import BOUNDARY_SAMPLE_SPACING_M
from evalcore.metrics.base import MEAN, GroupView, MetricFamily, Option, RefContext, ratio
from evalcore.metrics.checks import positive_or_none
from evalcore.present import LOWER, Shown, number

__all__ = ["Distance"]


def _spacing(text: str) -> float | None:
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--boundary-sample-spacing-m {text!r}: expected metres or 'none'") from None


class Distance(MetricFamily):
    name = "distance"
    options = (
        Option(
            "boundary_sample_spacing_m", BOUNDARY_SAMPLE_SPACING_M,
            "spacing of boundary samples in metres, or 'none' for max(1 m, perimeter / 1000) (default 1)",
            positive_or_none, parse=_spacing, annotation=float | None,
        ),
    )
    maxima = ("spacing_m",)
    shown = (
        Shown("hausdorff_mean_m", "Hausdorff distance, mean (m)", better=LOWER),
        Shown("boundary_distance_mean_m", "Boundary distance, mean (m)", better=LOWER),
    )

    def summary_lines(self, metrics: dict) -> list[str]:
        def metres(key: str) -> str:
            return number(metrics.get(key), 2, unit="m")

        return [f"Hausdorff mean {metres('hausdorff_mean_m')}, median {metres('hausdorff_median_m')};  "
                f"boundary distance mean {metres('boundary_distance_mean_m')}"]

    def columns(self, options: object) -> tuple[str, ...]:
        return ("hausdorff_m", "boundary_mean_m")

    def reference_columns(self, ctx: RefContext) -> dict[str, np.ndarray]:
        f = ctx.fields
        matched = f["matched"].to_numpy(bool)
        # Unmatched fields add 0; a matched pair without distances (NaN) makes the sum NaN.
        return {
            "hausdorff_m": np.where(matched, f["hausdorff_m"].to_numpy(np.float64), 0.0),
            "boundary_mean_m": np.where(matched, f["boundary_mean_distance_m"].to_numpy(np.float64), 0.0),
        }

    def gathered(self, ctx: RefContext) -> dict[str, np.ndarray]:
        f = ctx.fields
        matched = f["matched"].to_numpy(bool)
        return {
            "hausdorff_m": np.where(matched, f["hausdorff_m"].to_numpy(np.float64), np.nan),
            "boundary_mean_distance_m": np.where(matched, f["boundary_mean_distance_m"].to_numpy(np.float64), np.nan),
        }

    def order_statistics(self, options: object) -> dict[str, tuple[object, ...]]:
        return {"hausdorff_m": ("median",), "boundary_mean_distance_m": ("median",)}

    def maximum_values(self, ctx: RefContext) -> dict[str, np.ndarray]:
        f = ctx.fields
        return {"spacing_m": np.where(f["matched"].to_numpy(bool), f["boundary_sample_spacing_m"].to_numpy(np.float64), np.nan)}

    def finalize(self, s, options):
        return {
            "hausdorff_mean_m": ratio(s["hausdorff_m"], s["tp"]),
            "boundary_distance_mean_m": ratio(s["boundary_mean_m"], s["tp"]),
        }

    def interval_keys(self, options: object) -> tuple[str, ...]:
        return ("hausdorff_mean_m", "boundary_distance_mean_m")

    def summarize(self, g: GroupView) -> dict[str, object]:
        return {
            "hausdorff_mean_m": g.point("hausdorff_mean_m", MEAN),
            "hausdorff_median_m": g.median("hausdorff_m"),
            "boundary_distance_mean_m": g.point("boundary_distance_mean_m", MEAN),
            "boundary_distance_median_m": g.median("boundary_mean_distance_m"),
            "boundary_sample_spacing_max_m": float(g.maxima["spacing_m"]),
        }

"""Over- and under-segmentation by maximum-overlap pairing (seed 000, Clinton et al. 2010)."""

from __future__ import annotations

import numpy as np

from evalcore.metrics.base import MEAN, GroupView, MetricFamily, RefContext, ratio
from evalcore.present import LOWER, Shown, number

__all__ = ["Segmentation"]


class Segmentation(MetricFamily):
    name = "segmentation"
    shown = (
        Shown("oversegmentation_mean", "Over-segmentation (mean)", better=LOWER),
        Shown("undersegmentation_mean", "Under-segmentation (mean)", better=LOWER),
    )

    def summary_lines(self, metrics: dict) -> list[str]:
        return [f"over-/under-segmentation {number(metrics.get('oversegmentation_mean'))} / {number(metrics.get('undersegmentation_mean'))}"]

    def columns(self, options: object) -> tuple[str, ...]:
        return ("oversegmentation", "undersegmentation", "n_ref_with_overlap")

    def reference_columns(self, ctx: RefContext) -> dict[str, np.ndarray]:
        f = ctx.fields
        has_overlap = f["n_overlapping_pred"].to_numpy() > 0
        return {
            # 1 - |r ∩ p'| / |r| (1 when nothing overlaps)
            "oversegmentation": f["oversegmentation"].to_numpy(np.float64),
            # 1 - |r ∩ p'| / |p'| (not counted when nothing overlaps)
            "undersegmentation": np.where(has_overlap, f["undersegmentation"].to_numpy(np.float64), 0.0),
            "n_ref_with_overlap": has_overlap.astype(np.float64),
        }

    def finalize(self, s, options):
        return {
            "oversegmentation_mean": ratio(s["oversegmentation"], s["n_ref"]),
            "undersegmentation_mean": ratio(s["undersegmentation"], s["n_ref_with_overlap"]),
        }

    def interval_keys(self, options: object) -> tuple[str, ...]:
        return ("oversegmentation_mean", "undersegmentation_mean")

    def summarize(self, g: GroupView) -> dict[str, object]:
        return {
            "oversegmentation_mean": g.point("oversegmentation_mean", MEAN),
            "undersegmentation_mean": g.point("undersegmentation_mean", MEAN),
        }

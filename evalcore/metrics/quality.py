"""Geometry quality (SPEC 6.11): panoptic quality, the matched-IoU distribution, Dice,
area bias and, with ``boundary_iou_width_m``, boundary IoU.

Every number comes from the main matching (SPEC 3). ``pq``, ``sq`` and ``rq`` are
:func:`evalcore.rates.panoptic_quality` of the detection family's sums (ΣIoU of matches,
TP, FP, FN); the area biases are ratios of the area family's sums. The family's own
columns are the matched pairs' Dice sum and, with a band width, their boundary-IoU sum
and count. The quantiles of the matched IoU and the median boundary IoU are taken from
the gathered per-field values, as the section 4 medians are: they are order
statistics, not sums, found exactly at the merge without holding the values
(:mod:`evalcore.selection`), so they get no interval.

The pairs' boundary IoU is computed in the pairs phase (:func:`evalcore.boundary.
pair_boundary_iou`, for every pair at or above the threshold, on the geometries of the
boundary distances) and read here from the per-field column ``boundary_iou``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from evalcore.metrics.base import NULL, GroupView, MetricFamily, Option, RefContext, ratio
from evalcore.metrics.checks import positive_or_none
from evalcore.present import GROUPS, OVERALL, Shown, number, with_interval
from evalcore.rates import panoptic_quality
from evalcore.selection import statistics_of

__all__ = ["Quality", "IOU_QUANTILES", "IOU_STATISTICS", "iou_distribution"]

IOU_QUANTILES: tuple[tuple[str, float], ...] = (
    ("q05", 0.05), ("q10", 0.10), ("q25", 0.25), ("median", 0.50), ("q75", 0.75), ("q90", 0.90),
)
"""The quantiles of ``iou_distribution`` (SPEC 6.11), by key, between ``min`` and ``max``."""

IOU_STATISTICS: tuple[object, ...] = ("count", "min", *(p for _, p in IOU_QUANTILES), "max")
"""The order statistics of the matched IoU behind ``iou_distribution`` (:mod:`evalcore.selection`)."""

_INTERVALS = ("pq", "sq", "rq", "dice_mean", "area_bias", "matched_area_bias")


def iou_distribution(values: np.ndarray) -> dict[str, object]:
    """``count``, ``min``, the :data:`IOU_QUANTILES` and ``max`` of the matched pairs' IoU.

    Quantiles as :func:`numpy.quantile`'s default (linear interpolation between order
    statistics); every value but ``count`` is NaN (null) without a matched pair. NaN
    inputs (unmatched fields) are left out.

    Examples
    --------
    >>> iou_distribution(np.array([0.5, np.nan, 1.0]))["median"]
    0.75
    >>> iou_distribution(np.array([]))["count"], iou_distribution(np.array([]))["min"]
    (0, nan)
    """
    return _distribution(statistics_of(values, IOU_STATISTICS))


def _distribution(stats: Mapping[object, object]) -> dict[str, object]:
    """``iou_distribution``'s keys from the :data:`IOU_STATISTICS` (selected or computed whole)."""
    out: dict[str, object] = {"count": int(stats.get("count", 0)), "min": float(stats.get("min", float("nan")))}
    out |= {k: float(stats.get(p, float("nan"))) for k, p in IOU_QUANTILES}
    out["max"] = float(stats.get("max", float("nan")))
    return out


def _signed_percent(value: object) -> str:
    if not isinstance(value, float) or not np.isfinite(value):
        return "n/a"
    return f"{100.0 * value:+.1f} %"


class Quality(MetricFamily):
    name = "quality"
    options = (
        Option(
            "boundary_iou_width_m", None,
            "band width of boundary IoU in metres (Cheng et al. 2021; inner bands X - buffer(X, -d) in the "
            "reference field's UTM zone) (default: no boundary IoU)",
            positive_or_none, parse=float, annotation=float | None,
        ),
    )
    shown = (
        Shown("pq", "Panoptic quality (PQ = SQ x RQ)", compared=GROUPS),
        Shown("sq", "Segmentation quality (SQ, mean IoU of matches)", compared=GROUPS),
        Shown("rq", "Recognition quality (RQ, F1 as TP / (TP + FP/2 + FN/2))", compared=GROUPS),
        Shown("dice_mean", "Mean Dice of matches", compared=GROUPS),
        # Only with a band width: compared overall when both runs have it.
        Shown("boundary_iou_mean", "Boundary IoU of matches, mean", compared=OVERALL),
        Shown("boundary_iou_median", "Boundary IoU of matches, median", headline=False),
        Shown("area_bias", "Area bias (predicted / reference area - 1)", better=None, compared=GROUPS),
        Shown("matched_area_bias", "Area bias of matched pairs", better=None, compared=GROUPS),
    )
    section = "Geometry quality"

    @staticmethod
    def _band(options: object) -> bool:
        return getattr(options, "boundary_iou_width_m", None) is not None

    def columns(self, options: object) -> tuple[str, ...]:
        return ("dice_matched",) + (("boundary_iou_sum", "n_boundary_iou") if self._band(options) else ())

    def reference_columns(self, ctx: RefContext) -> dict[str, np.ndarray]:
        f = ctx.fields
        matched = f["matched"].to_numpy(bool)
        iou = np.where(matched, f["iou"].to_numpy(np.float64), 0.0)
        out = {"dice_matched": np.where(matched, 2.0 * iou / (1.0 + iou), 0.0)}
        if self._band(ctx.options):
            band = f["boundary_iou"].to_numpy(np.float64)
            has = matched & ~np.isnan(band)  # null where both bands are empty (SPEC 6.11)
            out["boundary_iou_sum"] = np.where(has, band, 0.0)
            out["n_boundary_iou"] = has.astype(np.float64)
        return out

    def gathered(self, ctx: RefContext) -> dict[str, np.ndarray]:
        f = ctx.fields
        matched = f["matched"].to_numpy(bool)
        out = {"matched_iou": np.where(matched, f["iou"].to_numpy(np.float64), np.nan)}
        if self._band(ctx.options):
            out["matched_boundary_iou"] = np.where(matched, f["boundary_iou"].to_numpy(np.float64), np.nan)
        return out

    def order_statistics(self, options: object) -> dict[str, tuple[object, ...]]:
        return {"matched_iou": IOU_STATISTICS} | ({"matched_boundary_iou": ("median",)} if self._band(options) else {})

    def finalize(self, s: Mapping[str, np.ndarray], options: object) -> dict:
        tp = np.asarray(s["tp"], dtype=np.float64)
        fp = np.asarray(s["n_pred"], dtype=np.float64) - s["n_pred_matched"]
        fn = np.asarray(s["n_ref"], dtype=np.float64) - tp
        pq, sq, rq = panoptic_quality(s["iou_matched"], tp, fp, fn)
        out = {name: (v, ~np.isnan(v)) for name, v in (("pq", pq), ("sq", sq), ("rq", rq))}
        out["dice_mean"] = ratio(s["dice_matched"], tp)
        area_ref = np.asarray(s["area_ref_m2"], dtype=np.float64)
        out["area_bias"] = ratio(np.asarray(s["area_pred_m2"], dtype=np.float64) - area_ref, area_ref)
        # Σ (matched prediction's area − field's area) over the matched pairs, the area family's sum.
        out["matched_area_bias"] = ratio(s["area_signed_err_m2"], s["area_ref_matched_m2"])
        if self._band(options):
            out["boundary_iou_mean"] = ratio(s["boundary_iou_sum"], s["n_boundary_iou"])
        return out

    def interval_keys(self, options: object) -> tuple[str, ...]:
        return _INTERVALS + (("boundary_iou_mean",) if self._band(options) else ())

    def run_keys(self, options: object) -> dict[str, object]:
        return {"boundary_iou_width_m": options.boundary_iou_width_m} if self._band(options) else {}

    def summarize(self, g: GroupView) -> dict[str, object]:
        out: dict[str, object] = {key: g.point(key, NULL) for key in ("pq", "sq", "rq")}
        out["iou_distribution"] = _distribution(g.statistics("matched_iou"))
        out["dice_mean"] = g.point("dice_mean", NULL)
        out["area_bias"] = g.point("area_bias", NULL)
        out["matched_area_bias"] = g.point("matched_area_bias", NULL)
        if self._band(g.options):
            out["boundary_iou_mean"] = g.point("boundary_iou_mean", NULL)
            out["boundary_iou_median"] = g.median("matched_boundary_iou")
        return out

    def summary_lines(self, metrics: Mapping[str, object]) -> list[str]:
        """``PQ = SQ x RQ`` with the values, Dice and the area biases; then the matched-IoU
        quantiles and, with a band width, boundary IoU."""
        if "pq" not in metrics:
            return []
        first = (f"quality: PQ {with_interval(metrics, 'pq')} = SQ {number(metrics.get('sq'))} x RQ {number(metrics.get('rq'))};  "
                 f"Dice {with_interval(metrics, 'dice_mean')};  area bias {_signed_percent(metrics.get('area_bias'))} "
                 f"(matched pairs {_signed_percent(metrics.get('matched_area_bias'))})")
        d = metrics.get("iou_distribution") or {}
        second = (f"matched IoU ({d.get('count', 0)} pairs): min {number(d.get('min'))}  q10 {number(d.get('q10'))}  "
                  f"q25 {number(d.get('q25'))}  median {number(d.get('median'))}  q90 {number(d.get('q90'))}")
        if "boundary_iou_mean" in metrics:
            second += (f";  boundary IoU at {metrics.get('boundary_iou_width_m'):g} m: mean {with_interval(metrics, 'boundary_iou_mean')}"
                       f"  median {number(metrics.get('boundary_iou_median'))}")
        return [first, second]

    def report_lines(self, metrics: Mapping[str, object]) -> list[str]:
        """The matched-IoU distribution as a Markdown table (report.md)."""
        d = metrics.get("iou_distribution")
        if not isinstance(d, Mapping):
            return []
        keys = ["min", *(k for k, _ in IOU_QUANTILES), "max"]
        return [
            f"Matched IoU distribution ({d.get('count', 0)} pairs):",
            "",
            "| " + " | ".join(keys) + " |",
            "|" + "---|" * len(keys),
            "| " + " | ".join(number(d.get(k), missing="–") for k in keys) + " |",
        ]

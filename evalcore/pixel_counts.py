"""Pixel counts of a reporting tile, which merge by addition, and the metrics drawn from them
(SPEC 6.7; seeds 001 and 002).

:class:`PixelCounts` holds the evaluated pixels' confusion counts and boundary counts of
one tile (:func:`evalcore.pixels.tile_pixel_counts` makes them) or of several, summed: a
national result is the sum of its tiles' counts, whatever the partitioning.
:func:`pixel_metrics` and :func:`boundary_metrics` turn counts into rates (NaN where
undefined), and :func:`micro_macro` turns a list of per-tile counts into the summary's
pixel block (micro: pooled counts; macro: mean of the tiles' values).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from evalcore._typing import F64Array
from evalcore.errors import IncompatibleStatsError
from evalcore.rates import F1_DICE, detection_rates

__all__ = [
    "PIXEL_METRICS",
    "PixelCounts",
    "sum_counts",
    "tversky_weight",
    "pixel_metrics",
    "boundary_metrics",
    "micro_macro",
]

PIXEL_METRICS = ("precision", "recall", "f1", "iou", "mcc", "tversky")
"""The metrics of :func:`pixel_metrics`, in output order."""


@dataclass(frozen=True, slots=True)
class PixelCounts:
    """Pixel counts of one tile (or of several, summed); merge by addition.

    Attributes
    ----------
    tp, fp, fn, tn : int
        Evaluated pixels positive in both layers, in the prediction only, in the
        reference only, in neither (pixels).
    ref_boundary, pred_boundary : int
        Evaluated boundary pixels of the reference and of the prediction (pixels).
    ref_boundary_hit, pred_boundary_hit : int
        Those within ``tolerance_px`` of the other layer's boundary (pixels).
    gsd_m : float or None
        The pixel size the counts were made at (metres); None for :meth:`zero`.
    tolerance_px : int or None
        The boundary tolerance (pixels); None for :meth:`zero`.

    Notes
    -----
    ``a + b`` (or ``a.merge(b)``) adds every count. Counts made with another
    ``gsd_m`` or ``tolerance_px`` refuse to merge (:class:`IncompatibleStatsError`);
    :meth:`zero` has no settings and is the identity of the addition.

    Examples
    --------
    >>> a = PixelCounts(tp=3, fp=1, fn=0, tn=12, gsd_m=10.0, tolerance_px=2)
    >>> (PixelCounts.zero() + a) == a
    True
    >>> (a + a).tp, (a + a).n_pixels
    (6, 32)
    """

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    ref_boundary: int = 0
    ref_boundary_hit: int = 0
    pred_boundary: int = 0
    pred_boundary_hit: int = 0
    gsd_m: float | None = None
    tolerance_px: int | None = None

    @staticmethod
    def zero() -> PixelCounts:
        """The identity of the addition: every count 0, no settings."""
        return PixelCounts()

    @property
    def n_pixels(self) -> int:
        """Evaluated pixels: ``tp + fp + fn + tn``."""
        return self.tp + self.fp + self.fn + self.tn

    def merge(self, other: PixelCounts) -> PixelCounts:
        """The counts of both, added; refuses counts made with other settings."""
        if not isinstance(other, PixelCounts):
            raise TypeError(f"Expected PixelCounts to merge with, but got {type(other).__name__}.")
        return PixelCounts(
            tp=self.tp + other.tp,
            fp=self.fp + other.fp,
            fn=self.fn + other.fn,
            tn=self.tn + other.tn,
            ref_boundary=self.ref_boundary + other.ref_boundary,
            ref_boundary_hit=self.ref_boundary_hit + other.ref_boundary_hit,
            pred_boundary=self.pred_boundary + other.pred_boundary,
            pred_boundary_hit=self.pred_boundary_hit + other.pred_boundary_hit,
            gsd_m=_same_setting("gsd_m", self.gsd_m, other.gsd_m),
            tolerance_px=_same_setting("tolerance_px", self.tolerance_px, other.tolerance_px),
        )

    def __add__(self, other: PixelCounts) -> PixelCounts:
        if not isinstance(other, PixelCounts):
            return NotImplemented
        return self.merge(other)


def _same_setting(name: str, a: object, b: object) -> object:
    if a is None:
        return b
    if b is None or a == b:
        return a
    raise IncompatibleStatsError(f"PixelCounts made with different {name} cannot merge: {a!r} vs {b!r}.")


def sum_counts(counts: Iterable[PixelCounts]) -> PixelCounts:
    """Every count added (:meth:`PixelCounts.zero` for none)."""
    return functools.reduce(PixelCounts.merge, counts, PixelCounts.zero())


def tversky_weight(value: object, name: str) -> float:
    """A Tversky weight (``alpha``, ``beta``) checked: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ValueError(f"Expected the Tversky weight `{name}` to be a finite number >= 0, but got {value!r}.")
    return float(value)


def _counts(values: Sequence[object], names: Sequence[str]) -> list[F64Array]:
    arrays = [np.asarray(v, dtype=np.float64) for v in values]
    for a, name in zip(arrays, names):
        if (a < 0).any():
            raise ValueError(f"Expected `{name}` to be counts >= 0, but got {a.min()!r}.")
    return list(np.broadcast_arrays(*arrays))


def _ratio(num: F64Array, den: F64Array) -> F64Array:
    ok = den > 0
    return np.where(ok, num / np.where(ok, den, 1.0), np.nan)


def _out(values: dict[str, F64Array]) -> dict[str, float | F64Array]:
    return {k: (float(v) if np.ndim(v) == 0 else v) for k, v in values.items()}


def pixel_metrics(tp: object, fp: object, fn: object, tn: object, alpha: float = 0.5,
                  beta: float = 0.5) -> dict[str, float | F64Array]:
    """Precision, recall, F1, IoU, MCC and Tversky from pixel counts; NaN where undefined.

    ``precision = TP / (TP + FP)``, ``recall = TP / (TP + FN)``,
    ``f1 = 2 TP / (2 TP + FP + FN)`` (= Dice; 0 for a tile with false positives only),
    ``iou = TP / (TP + FP + FN)`` (= F1 / (2 - F1)),
    ``mcc = (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))`` (NaN when any of the
    four sums is 0), ``tversky = TP / (TP + alpha FP + beta FN)`` (F1 at 0.5, 0.5; IoU at
    1, 1). Each is NaN when its denominator is 0.

    Parameters
    ----------
    tp, fp, fn, tn : int or array_like of int
        Pixel counts (broadcast together).
    alpha, beta : float, optional
        Tversky weights of FP and FN, >= 0 (default 0.5 and 0.5).

    Returns
    -------
    dict
        :data:`PIXEL_METRICS` to floats (scalar counts) or float64 arrays.

    Examples
    --------
    >>> m = pixel_metrics(90, 10, 10, 890)
    >>> round(m["f1"], 3), round(m["iou"], 4), round(m["mcc"], 4)
    (0.9, 0.8182, 0.8889)
    >>> pixel_metrics(0, 5, 0, 95)["f1"], pixel_metrics(0, 5, 0, 95)["recall"]
    (0.0, nan)
    >>> pixel_metrics([0, 1], [0, 1], [0, 0], [4, 2])["precision"]
    array([nan, 0.5])
    """
    tp, fp, fn, tn = _counts((tp, fp, fn, tn), ("tp", "fp", "fn", "tn"))
    a = tversky_weight(alpha, "alpha")
    b = tversky_weight(beta, "beta")
    with np.errstate(invalid="ignore", over="ignore"):
        marginals = ((tp + fp) * (tp + fn), (tn + fp) * (tn + fn))
        defined = (tp + fp > 0) & (tp + fn > 0) & (tn + fp > 0) & (tn + fn > 0)
        den = np.sqrt(marginals[0]) * np.sqrt(marginals[1])
        mcc = np.where(defined, (tp * tn - fp * fn) / np.where(defined, den, 1.0), np.nan)
        precision, recall, f1 = detection_rates(tp, fp, fn, f1=F1_DICE)
        out = {
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "iou": _ratio(tp, tp + fp + fn),
            "mcc": mcc,
            "tversky": _ratio(tp, tp + a * fp + b * fn),
        }
    return _out(out)


def boundary_metrics(ref_boundary: object, ref_boundary_hit: object, pred_boundary: object,
                     pred_boundary_hit: object) -> dict[str, float | F64Array]:
    """Boundary precision, recall and F1 from boundary counts; NaN where undefined.

    ``precision = pred_boundary_hit / pred_boundary``, ``recall = ref_boundary_hit /
    ref_boundary``, ``f1 = 2 P R / (P + R)``: NaN when P or R is NaN or both are 0.

    Examples
    --------
    >>> {k: round(v, 4) for k, v in boundary_metrics(40, 30, 50, 30).items()}
    {'precision': 0.6, 'recall': 0.75, 'f1': 0.6667}
    >>> boundary_metrics(40, 0, 0, 0)
    {'precision': nan, 'recall': 0.0, 'f1': nan}
    """
    ref_b, ref_hit, pred_b, pred_hit = _counts(
        (ref_boundary, ref_boundary_hit, pred_boundary, pred_boundary_hit),
        ("ref_boundary", "ref_boundary_hit", "pred_boundary", "pred_boundary_hit"),
    )
    precision = _ratio(pred_hit, pred_b)
    recall = _ratio(ref_hit, ref_b)
    with np.errstate(invalid="ignore"):
        f1 = _ratio(2.0 * precision * recall, precision + recall)
    return _out({"precision": precision, "recall": recall, "f1": f1})


def _null(value: float) -> float | None:
    return None if not np.isfinite(value) else float(value)


def micro_macro(per_tile_counts: Iterable[PixelCounts], *, alpha: float = 0.5, beta: float = 0.5) -> dict[str, object]:
    """The pixel block of the summary from the counts of the evaluated tiles.

    Micro pools the counts of all tiles and computes each metric once; macro is the
    plain mean of the per-tile values over the tiles where the value is defined,
    published with that number of tiles. Undefined values are None (JSON null).

    Parameters
    ----------
    per_tile_counts : iterable of PixelCounts
        One per evaluated tile (same ``gsd_m`` and ``tolerance_px``).
    alpha, beta : float, optional
        Tversky weights (default 0.5, 0.5).

    Returns
    -------
    dict
        ``{"count_pixels", "count_tp", "count_fp", "count_fn", "count_tn",
        "micro": {metric: value}, "macro": {metric: {"value", "n_units"}},
        "boundary_f1": {"precision", "recall", "f1", "tolerance_px"}}`` with the
        metrics of :data:`PIXEL_METRICS`; the boundary F1 is pooled (micro).

    Examples
    --------
    >>> a = PixelCounts(tp=90, fp=10, fn=10, tn=890, tolerance_px=2)
    >>> b = PixelCounts(tp=0, fp=5, fn=0, tn=995, tolerance_px=2)
    >>> out = micro_macro([a, b])
    >>> round(out["micro"]["f1"], 3), out["macro"]["f1"], out["macro"]["recall"]
    (0.878, {'value': 0.45, 'n_units': 2}, {'value': 0.9, 'n_units': 1})
    >>> micro_macro([])["micro"]["f1"], micro_macro([])["macro"]["f1"]
    (None, {'value': None, 'n_units': 0})
    """
    counts = list(per_tile_counts)
    total = sum_counts(counts)
    a = tversky_weight(alpha, "alpha")
    b = tversky_weight(beta, "beta")
    micro = pixel_metrics(total.tp, total.fp, total.fn, total.tn, a, b)
    per_tile = pixel_metrics(*(np.array([getattr(c, k) for c in counts], dtype=np.float64) for k in ("tp", "fp", "fn", "tn")), a, b)
    macro = {}
    for metric in PIXEL_METRICS:
        values = np.asarray(per_tile[metric], dtype=np.float64)
        ok = ~np.isnan(values)
        macro[metric] = {"value": _null(float(values[ok].mean())) if ok.any() else None, "n_units": int(ok.sum())}
    edge = boundary_metrics(total.ref_boundary, total.ref_boundary_hit, total.pred_boundary, total.pred_boundary_hit)
    return {
        "count_pixels": total.n_pixels,
        "count_tp": total.tp,
        "count_fp": total.fp,
        "count_fn": total.fn,
        "count_tn": total.tn,
        "micro": {m: _null(micro[m]) for m in PIXEL_METRICS},
        "macro": macro,
        "boundary_f1": {k: _null(edge[k]) for k in ("precision", "recall", "f1")} | {"tolerance_px": total.tolerance_px},
    }

"""Detection rates: precision, recall and F1 from true positive, false positive and
false negative counts, with the empty-denominator conventions of the SPEC.

The one place where precision, recall and F1 are computed from counts: the detection
family (and its IoU sweep), the reporting tiles and AOIs, the paired comparison of
units and the pixel metrics all call :func:`detection_rates`. It imports nothing of
evalcore, so any module may use it.

Three F1 rules are in use, and they differ in the last bit or where a value is
undefined, so each caller names its rule (the outputs were fixed before this module
existed and no number may change):

``F1_HARMONIC``
    ``2 P R / (P + R)``; 0 when P = R = 0; undefined when P or R is. SPEC section 4's
    ``f1`` (detection, the IoU sweep), where the reporting convention then turns an
    undefined value into 0.0 or 1.0.
``F1_HARMONIC_POSITIVE``
    ``2 P R / (P + R)``; undefined when P or R is, *and* when P = R = 0. The tiles and
    AOIs of SPEC 6.3 (docs/metrics.md, "Tiles and AOIs"), and their paired deltas in
    ``compare``: a unit with false positives and missed fields but no true positive
    has no F1 there, so it is left out of the macro mean and the quantiles.
``F1_DICE``
    ``2 TP / (2 TP + FP + FN)`` (Dice); undefined only when TP = FP = FN = 0, so 0 for
    a tile with false positives only. The pixel metrics of SPEC 6.7.

SPEC section 6 says only that a new rate with an empty denominator is null; the Dice
form's denominator is empty only when TP = FP = FN = 0, which ``F1_HARMONIC_POSITIVE``
does not follow at P = R = 0 (see the note in docs/metrics.md).
"""

from __future__ import annotations

import numpy as np

from evalcore._typing import F64Array

__all__ = ["F1_HARMONIC", "F1_HARMONIC_POSITIVE", "F1_DICE", "F1_RULES", "detection_rates", "panoptic_quality"]

F1_HARMONIC = "harmonic"
"""``2 P R / (P + R)``, 0 when P = R = 0, undefined when P or R is (SPEC section 4)."""
F1_HARMONIC_POSITIVE = "harmonic_positive"
"""``2 P R / (P + R)``, undefined when P or R is or when P = R = 0 (tiles and AOIs, SPEC 6.3)."""
F1_DICE = "dice"
"""``2 TP / (2 TP + FP + FN)``, undefined when TP = FP = FN = 0 (pixels, SPEC 6.7)."""
F1_RULES: tuple[str, ...] = (F1_HARMONIC, F1_HARMONIC_POSITIVE, F1_DICE)


def _ratio(num: F64Array, den: F64Array) -> F64Array:
    """``num / den`` where ``den != 0``, NaN elsewhere (no warning)."""
    defined = den != 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(defined, num / np.where(defined, den, 1.0), np.nan)


def detection_rates(tp: object, fp: object, fn: object, *, f1: str) -> tuple[F64Array, F64Array, F64Array]:
    """Precision, recall and F1 from counts, NaN where undefined, element-wise.

    ``precision = TP / (TP + FP)`` (undefined without a prediction), ``recall = TP /
    (TP + FN)`` (undefined without a reference object); F1 by the rule ``f1`` (module
    docstring). Counts are non-negative and integer-valued (weighted by bootstrap draw
    counts they stay integers), so ``TP + (N - TP)`` gives back ``N`` exactly.

    Parameters
    ----------
    tp, fp, fn : float or array_like of float
        True positives, false positives and false negatives (objects or pixels),
        broadcast together: scalars, per-unit arrays or arrays of bootstrap replicates.
    f1 : {"harmonic", "harmonic_positive", "dice"}
        The F1 rule (:data:`F1_HARMONIC`, :data:`F1_HARMONIC_POSITIVE`, :data:`F1_DICE`).

    Returns
    -------
    precision, recall, f1 : ndarray of float64
        Of the broadcast shape (0-d for scalar counts); NaN exactly where undefined.

    Examples
    --------
    >>> [float(v) for v in detection_rates(3.0, 1.0, 2.0, f1="harmonic")]
    [0.75, 0.6, 0.6666666666666665]
    >>> float(detection_rates(3.0, 1.0, 2.0, f1="dice")[2])  # one rounding, not four
    0.6666666666666666
    >>> [float(v) for v in detection_rates(0.0, 0.0, 0.0, f1="harmonic")]
    [nan, nan, nan]
    >>> [float(detection_rates(0.0, 2.0, 3.0, f1=rule)[2]) for rule in F1_RULES]
    [0.0, nan, 0.0]
    >>> [float(detection_rates(0.0, 0.0, 3.0, f1=rule)[2]) for rule in F1_RULES]
    [nan, nan, 0.0]
    """
    if f1 not in F1_RULES:
        raise ValueError(f"Expected `f1` to be one of {F1_RULES}, but got {f1!r}.")
    tp, fp, fn = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (tp, fp, fn)))
    precision = _ratio(tp, tp + fp)
    recall = _ratio(tp, tp + fn)
    if f1 == F1_DICE:
        return precision, recall, _ratio(2.0 * tp, 2.0 * tp + fp + fn)
    defined = ~(np.isnan(precision) | np.isnan(recall))
    p = np.where(defined, precision, 0.0)
    r = np.where(defined, recall, 0.0)
    s = p + r
    with np.errstate(divide="ignore", invalid="ignore"):
        both_zero = 0.0 if f1 == F1_HARMONIC else np.nan
        value = np.where(s > 0.0, 2.0 * p * r / np.where(s > 0.0, s, 1.0), both_zero)
    return precision, recall, np.where(defined, value, np.nan)


def panoptic_quality(iou_sum: object, tp: object, fp: object, fn: object) -> tuple[F64Array, F64Array, F64Array]:
    """Panoptic, segmentation and recognition quality (SPEC 6.11), element-wise.

    As panopticapi computes them (Kirillov et al. 2019): ``sq = ΣIoU / TP``, ``rq = TP /
    (TP + FP/2 + FN/2)``, ``pq = ΣIoU / (TP + FP/2 + FN/2)``, each 0 where there is no
    match and NaN only where both layers are empty (TP = FP = FN = 0). ``rq`` equals the
    Dice form of F1 and ``pq`` equals ``sq * rq`` up to the last bit.

    Parameters
    ----------
    iou_sum : float or array_like of float
        Sum of the matched pairs' IoU.
    tp, fp, fn : float or array_like of float
        Matched pairs, unmatched predictions and unmatched reference objects, broadcast
        together with ``iou_sum`` (scalars, per-group arrays or bootstrap replicates).

    Returns
    -------
    pq, sq, rq : ndarray of float64

    Examples
    --------
    >>> [float(v) for v in panoptic_quality(1.5, 2.0, 1.0, 1.0)]
    [0.5, 0.75, 0.6666666666666666]
    >>> [float(v) for v in panoptic_quality(0.0, 0.0, 2.0, 0.0)]
    [0.0, 0.0, 0.0]
    >>> [float(v) for v in panoptic_quality(0.0, 0.0, 0.0, 0.0)]
    [nan, nan, nan]
    """
    iou_sum, tp, fp, fn = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (iou_sum, tp, fp, fn)))
    den = tp + 0.5 * fp + 0.5 * fn
    empty = den == 0.0
    sq = np.where(tp > 0.0, _ratio(iou_sum, tp), 0.0)
    rq = _ratio(tp, den)
    pq = _ratio(iou_sum, den)
    return np.where(empty, np.nan, pq), np.where(empty, np.nan, sq), np.where(empty, np.nan, rq)

"""numba kernels of the score-ordered (COCO) matching and its precision-recall sums.

The COCO matching is greedy in score order, like pycocotools' ``evaluateImg``: each
prediction in turn takes, among the reference fields not yet taken, the one with the
highest IoU at or above the threshold, and of equal IoUs the later reference position
(pycocotools keeps the last ``>=``). It is sequential by nature; these loops run it over
the candidate pairs only (never the geometries), in O(pairs) per threshold.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from evalcore.config import NUMBA_OPTIONS

__all__ = ["_coco_match", "_weighted_ap"]


@njit(**NUMBA_OPTIONS)
def _coco_match(
    order: np.ndarray,
    pair_start: np.ndarray,
    pair_ref_row: np.ndarray,
    pair_iou: np.ndarray,
    n_ref: int,
    thresholds: np.ndarray,
) -> np.ndarray:
    """Whether each prediction (in score order) is a true positive at each threshold.

    Parameters
    ----------
    order : int64 (n_pred,)
        Prediction rows in descending score order (ties: position).
    pair_start : int64 (n_pred + 1,)
        Pairs of prediction row p are ``pair_start[p]:pair_start[p + 1]``, by increasing
        reference position.
    pair_ref_row : int64 (n_pairs,)
        Reference row of each pair, in ``[0, n_ref)``.
    pair_iou : float64 (n_pairs,)
    thresholds : float64 (n_thr,)
        A pair qualifies when its IoU is at least the threshold (already relaxed).

    Returns
    -------
    bool (n_thr, n_pred)
        ``tp[t, k]``: the k-th prediction in score order matched at threshold t.
    """
    n_thr = thresholds.shape[0]
    n_pred = order.shape[0]
    tp = np.zeros((n_thr, n_pred), dtype=np.bool_)
    for t in range(n_thr):
        taken = np.zeros(n_ref, dtype=np.bool_)
        for k in range(n_pred):
            p = order[k]
            best = -1
            best_iou = thresholds[t]
            for j in range(pair_start[p], pair_start[p + 1]):
                r = pair_ref_row[j]
                if taken[r]:
                    continue
                if pair_iou[j] < best_iou:
                    continue
                best_iou = pair_iou[j]
                best = r
            if best >= 0:
                taken[best] = True
                tp[t, k] = True
    return tp


@njit(**NUMBA_OPTIONS)
def _weighted_ap(tp: np.ndarray, weights: np.ndarray, n_ref: float, rec_thrs: np.ndarray, eps: float) -> np.ndarray:
    """COCO AP per threshold with every prediction counted ``weights[k]`` times.

    The same arithmetic as pycocotools' ``accumulate``: cumulative TP and FP in score
    order, ``rc = tp / n_ref``, ``pr = tp / (tp + fp + eps)``, the precision envelope
    from right to left, precision read at the first point whose recall reaches each of
    ``rec_thrs`` (0 beyond the last), and the mean over ``rec_thrs``.

    Parameters
    ----------
    tp : bool (n_thr, n_pred)
        In score order.
    weights : float64 (n_pred,)
    n_ref : float
        Reference fields (> 0).
    rec_thrs : float64 (n_rec,)
    eps : float
        ``np.spacing(1)``, as pycocotools adds to the precision's denominator.
    """
    n_thr, n_pred = tp.shape
    n_rec = rec_thrs.shape[0]
    out = np.zeros(n_thr)
    rc = np.empty(n_pred)
    pr = np.empty(n_pred)
    for t in range(n_thr):
        tps = 0.0
        fps = 0.0
        m = 0
        for k in range(n_pred):
            w = weights[k]
            if w == 0.0:
                continue
            if tp[t, k]:
                tps += w
            else:
                fps += w
            rc[m] = tps / n_ref
            pr[m] = tps / (fps + tps + eps)
            m += 1
        for i in range(m - 1, 0, -1):
            if pr[i] > pr[i - 1]:
                pr[i - 1] = pr[i]
        total = 0.0
        i = 0
        for r in range(n_rec):
            # first i with rc[i] >= rec_thrs[r] (numpy searchsorted, side "left")
            while i < m and rc[i] < rec_thrs[r]:
                i += 1
            if i < m:
                total += pr[i]
        out[t] = total / n_rec
    return out

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

__all__ = ["_coco_match", "_weighted_ap", "_replicate_ap", "_replicate_aurc"]


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


@njit(**NUMBA_OPTIONS)
def _replicate_ap(tp_by_pred: np.ndarray, weights: np.ndarray, n_refs: np.ndarray, rec_thrs: np.ndarray, eps: float) -> np.ndarray:
    """:func:`_weighted_ap` for several replicates at once, with the same bits per replicate.

    The bootstrap asks for AP in every resample (1,000 by default), so this form is laid
    out for speed: the thresholds are the inner loop (one weight load serves them all,
    and their additions and divisions vectorise), the TP flags add as ``w * flag``
    (adding 0.0 leaves a sum's bits unchanged, and no branch is mispredicted), and the
    recall ``tp / n_ref`` is computed only where the 101 recall thresholds are looked up,
    by bisection (it is non-decreasing: ``tp`` is, and a correctly rounded division by a
    positive constant keeps the order). The precision envelope is the same suffix maximum.

    Parameters
    ----------
    tp_by_pred : float64 (n_pred, n_thr)
        1.0 where the k-th prediction in score order is a true positive at threshold t.
    weights : float64 (n_rep, n_pred)
        Each replicate's weight of every prediction, in score order.
    n_refs : float64 (n_rep,)
        Each replicate's reference count; AP is NaN where it is not positive.

    Returns
    -------
    float64 (n_rep, n_thr)
    """
    n_pred, n_thr = tp_by_pred.shape
    n_rep = weights.shape[0]
    n_rec = rec_thrs.shape[0]
    out = np.empty((n_rep, n_thr))
    tps_at = np.empty((n_pred, n_thr))
    pr = np.empty((n_pred, n_thr))
    tps = np.empty(n_thr)
    fps = np.empty(n_thr)
    for b in range(n_rep):
        n_ref = n_refs[b]
        if not n_ref > 0.0:
            out[b, :] = np.nan
            continue
        tps[:] = 0.0
        fps[:] = 0.0
        m = 0
        for k in range(n_pred):
            w = weights[b, k]
            if w == 0.0:
                continue
            for t in range(n_thr):
                flag = tp_by_pred[k, t]
                tps[t] += w * flag
                fps[t] += w * (1.0 - flag)
                tps_at[m, t] = tps[t]
                pr[m, t] = tps[t] / (fps[t] + tps[t] + eps)
            m += 1
        for i in range(m - 1, 0, -1):
            for t in range(n_thr):
                if pr[i, t] > pr[i - 1, t]:
                    pr[i - 1, t] = pr[i, t]
        for t in range(n_thr):
            total = 0.0
            lo = 0
            for r in range(n_rec):
                # first i >= lo with tps_at[i] / n_ref >= rec_thrs[r] (the thresholds increase)
                hi = m
                while lo < hi:
                    mid = (lo + hi) // 2
                    if tps_at[mid, t] / n_ref < rec_thrs[r]:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo < m:
                    total += pr[lo, t]
            out[b, t] = total / n_rec
    return out


@njit(**NUMBA_OPTIONS)
def _replicate_aurc(error: np.ndarray, weights: np.ndarray, members: np.ndarray, member_start: np.ndarray,
                    last: np.ndarray) -> np.ndarray:
    """Every group's weighted aurc in several replicates (``scores._weighted_curve``'s value).

    Parameters
    ----------
    error : float64 (n_pred,)
        1.0 for an unmatched prediction, in score order.
    weights : float64 (n_rep, n_pred)
        In score order.
    members : int64 (n_members,)
        The score-order rows of group g are ``members[member_start[g]:member_start[g + 1]]``,
        increasing.
    last : bool (n_members,)
        Whether each member is the last of its distinct score within its group.

    Returns
    -------
    float64 (n_rep, n_groups)
        NaN where a group weighs nothing. The steps' products are added one after the
        other (``_weighted_curve`` adds them pairwise: the last bits may differ).
    """
    n_rep = weights.shape[0]
    n_groups = member_start.shape[0] - 1
    out = np.empty((n_rep, n_groups))
    for b in range(n_rep):
        for g in range(n_groups):
            retained = 0.0
            errors = 0.0
            previous = 0.0
            area = 0.0
            for j in range(member_start[g], member_start[g + 1]):
                k = members[j]
                w = weights[b, k]
                retained += w
                errors += w * error[k]
                if last[j]:
                    risk = errors / retained if retained > 0.0 else 0.0
                    area += (retained - previous) * risk
                    previous = retained
            out[b, g] = area / retained if retained > 0.0 else np.nan
    return out

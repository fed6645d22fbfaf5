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

__all__ = ["_coco_match", "_weighted_ap", "_replicate_envelope", "_replicate_ap_of", "_replicate_aurc_digits", "_transposed"]


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


@njit(**NUMBA_OPTIONS, error_model="numpy")
def _replicate_envelope(tp_flags: np.ndarray, weights: np.ndarray, n_refs: np.ndarray, tp_before: np.ndarray,
                        fp_before: np.ndarray, rec_thrs: np.ndarray, eps: float, no_point: float) -> np.ndarray:
    """Per replicate, threshold and recall point, the largest precision among some predictions'
    points whose recall reaches the point (``no_point``: none): a score range's share of AP.

    pycocotools' arithmetic (:func:`_weighted_ap`) along the predictions in score order,
    laid out for speed: a replicate's weighted points found once for every threshold (64
    replicates x 250,000 predictions, 10 thresholds: 0.246-0.252 s -> 0.183-0.187 s,
    2026-12-07), then one threshold at a time (its points in contiguous rows; with the
    thresholds as the inner loop the kernel took 1.01-1.05 s against 0.88 s for
    1000 replicates x 50,000 predictions), the cumulative counts as integers in one loop
    and the precisions in another (for the same, uint8 weights against the float64 ones
    the kernel read before: 0.87 -> 0.77 s; float64 weights, each converted, take 1.26 s,
    so the callers hand counts, :func:`evalcore.metrics.score_ranges.as_counts`), and the recall
    ``tp / n_ref`` computed only where the recall points are looked up, by bisection (it
    is non-decreasing). The weights are whole numbers (bootstrap counts; others are
    refused) and the counts start from the weighted counts of the predictions ahead
    (whole numbers too): every sum is exact, so each point's precision and recall have
    the bits of the whole run's, the float sums pycocotools makes. AP's interpolated precision at a recall
    point is the largest precision at a recall at or beyond it: the maximum of these over
    the ranges (exact), read by :func:`_replicate_ap_of`.

    Parameters
    ----------
    tp_flags : float64 (n_thr, n_pred), C-contiguous
        1.0 where the k-th prediction in score order is a true positive at threshold t
        (one row per threshold, as :attr:`evalcore.metrics.score_ranges.ScoreRows.tp` holds them).
    weights : (n_rep, n_pred), any unsigned integer type or float64
        Each replicate's weight of every prediction, in score order: whole numbers below
        2**63 (a fraction raises ValueError).
    n_refs : float64 (n_rep,)
        Each replicate's reference count; nothing is reached where it is not positive.
    tp_before, fp_before : float64 (n_rep, n_thr)
        Weighted true and false positives of the predictions ahead of these.

    Returns
    -------
    float64 (n_rep, n_thr, n_rec)
    """
    n_thr, n_pred = tp_flags.shape
    n_rep = weights.shape[0]
    n_rec = rec_thrs.shape[0]
    out = np.full((n_rep, n_thr, n_rec), no_point)
    flags = np.empty((n_thr, n_pred), dtype=np.uint8)  # a byte a flag: less to read per point
    for t in range(n_thr):
        for k in range(n_pred):
            flags[t, k] = np.uint8(tp_flags[t, k])
    # A replicate's weighted points, the same at every threshold: their predictions, weights
    # and running total weight (true plus false positives), made once per replicate; then
    # one threshold at a time, its counts, precisions and recalls in contiguous rows.
    point_row = np.empty(n_pred, dtype=np.int64)
    point_weight = np.empty(n_pred, dtype=np.int64)
    point_total = np.empty(n_pred, dtype=np.int64)
    tp_count = np.empty(n_pred, dtype=np.int64)
    tps_at = np.empty(n_pred)
    pr = np.empty(n_pred)
    for b in range(n_rep):
        n_ref = n_refs[b]
        if not n_ref > 0.0:
            continue
        wb = weights[b]
        # Each point is written at slot m whatever the weight: a weight of 0 leaves m as
        # it was and the slot is taken by the next weighted prediction (no branch on a
        # weight of 0, too frequent and random to predict). The counts are integers: an
        # integer addition waits one cycle for the previous, a float one three or four,
        # and the sums of whole numbers are the same either way.
        total = 0
        whole = True
        m = 0
        for k in range(n_pred):
            w = np.int64(wb[k])
            whole &= np.float64(w) == wb[k]
            total += w
            point_row[m] = k
            point_weight[m] = w
            point_total[m] = total
            m += w != 0
        if not whole:
            raise ValueError("replicate weights must be whole numbers")
        for t in range(n_thr):
            flag_t = flags[t]
            tp_sum = 0
            for i in range(m):
                tp_sum += point_weight[i] * np.int64(flag_t[point_row[i]])
                tp_count[i] = tp_sum
            # Then each point's precision, in a loop of its own, free of the counts'
            # chain of additions, which the compiler vectorizes: numpy's error model (a
            # division by zero gives inf or nan, not an exception) leaves it no branch, and
            # no divisor here is 0 (eps > 0, n_ref > 0), so the numbers are the same. The
            # false positives are the total less the true ones (whole numbers: exact).
            tps_before = tp_before[b, t]
            fps_before = fp_before[b, t]
            for i in range(m):
                tps = tps_before + np.float64(tp_count[i])
                fps = fps_before + np.float64(point_total[i] - tp_count[i])
                tps_at[i] = tps
                pr[i] = tps / (fps + tps + eps)
            # Interpolated precision: the largest at or after each point.
            best = pr[m - 1] if m > 0 else 0.0
            for i in range(m - 2, -1, -1):
                best = max(best, pr[i])
                pr[i] = best
            lo = 0
            for r in range(n_rec):
                # first i >= lo with tps_at[i] / n_ref >= rec_thrs[r] (the thresholds increase)
                hi = m
                while lo < hi:
                    mid = (lo + hi) // 2
                    if tps_at[mid] / n_ref < rec_thrs[r]:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo < m:
                    out[b, t, r] = pr[lo]
    return out


@njit(**NUMBA_OPTIONS)
def _replicate_ap_of(envelope: np.ndarray, n_refs: np.ndarray, no_point: float) -> np.ndarray:
    """AP per replicate and threshold from the run's envelope (the maximum over the ranges of
    :func:`_replicate_envelope`): the mean over the recall points, added in recall order as
    pycocotools adds them (a point nothing reaches adds nothing); NaN where the replicate
    has no reference field.

    Returns
    -------
    float64 (n_rep, n_thr)
    """
    n_rep, n_thr, n_rec = envelope.shape
    out = np.empty((n_rep, n_thr))
    for b in range(n_rep):
        if not n_refs[b] > 0.0:
            out[b, :] = np.nan
            continue
        for t in range(n_thr):
            total = 0.0
            for r in range(n_rec):
                v = envelope[b, t, r]
                if v != no_point:
                    total += v
            out[b, t] = total / n_rec
    return out


@njit(**NUMBA_OPTIONS)
def _replicate_aurc_digits(error: np.ndarray, weights: np.ndarray, members: np.ndarray, member_start: np.ndarray,
                           last: np.ndarray, retained_before: np.ndarray, errors_before: np.ndarray,
                           units: np.ndarray) -> np.ndarray:
    """Every group's weighted aurc terms in several replicates, as exact digit sums: a score
    range's share. Their value, ``sum_k D_k 2**(24 k - 72)`` (:func:`evalcore.exact.value_of`),
    is exactly that of the terms' :func:`evalcore.exact.digits` summed; the digits themselves
    may differ from those sums by carries (digits 3 to 0 are summed as two numbers of 48 bits,
    then cut by bits), which nothing reads but their value.

    At each step (the last member of a distinct score within its group) the term is
    ``(retained - previous) * risk``, ``risk = errors / retained`` (0 while nothing is
    retained), as ``scores._weighted_curve`` makes it; the retained weight and errors
    start from those of the group's members ahead (whole numbers, exact). The digits add
    across ranges in any grouping; the aurc is their value over the group's weight.

    Parameters
    ----------
    error : float64 (n_pred,)
        1.0 for an unmatched prediction, in score order.
    weights : (n_rep, n_pred), any unsigned integer type or float64
        Whole numbers, in score order (each is read as a float64).
    members : int64 (n_members,)
        The score-order rows of group g are ``members[member_start[g]:member_start[g + 1]]``,
        increasing.
    last : bool (n_members,)
        Whether each member is the last of its distinct score within its group.
    retained_before, errors_before : float64 (n_rep, n_groups)
        The weight and weighted errors of each group's members ahead of these.
    units : float64 (n_digits,)
        The digits' units, :data:`evalcore.exact._UNITS`.

    Returns
    -------
    float64 (n_rep, n_groups, n_digits)
        Whole numbers of magnitude below 2**53.
    """
    n_rep = weights.shape[0]
    n_groups = member_start.shape[0] - 1
    # The split below is evalcore._exact_kernels._digits_of's, written again here rather
    # than called: numba's cache does not follow a call into another module, so a cached
    # caller would keep the old callee after it changed.
    if units.shape[0] != 6 or not np.all(units == 2.0 ** (24.0 * np.arange(6) - 72.0)):
        raise ValueError("the aurc digits are written for six digits of 24 bits from 2**-72 (evalcore.exact)")
    inverse = 1.0 / units  # powers of two: exact
    out = np.zeros((n_rep, n_groups, 6))
    low = np.int64(2**24 - 1)
    for b in range(n_rep):
        for g in range(n_groups):
            retained = retained_before[b, g]
            errors = errors_before[b, g]
            previous = retained
            # The digit sums as integers in registers: whole numbers below 2**53, exact in
            # any order, and the same numbers as float sums of the digits.
            s0 = s1 = s2 = s3 = np.int64(0)
            s4 = s5 = 0.0
            first, stop = member_start[g], member_start[g + 1]
            while first < stop:
                # Digits 3 and 2 of the terms summed as one whole number of units of 2**-24
                # (each below 2**48), digits 1 and 0 as one of units of 2**-72: up to 2**15
                # terms at a time, so that neither sum reaches 2**63; then cut into digits.
                upper = lower = np.int64(0)
                for j in range(first, min(first + 2**15, stop)):
                    k = members[j]
                    w = weights[b, k]
                    retained += w
                    errors += w * error[k]
                    if last[j]:
                        risk = errors / retained if retained > 0.0 else 0.0
                        term = (retained - previous) * risk
                        previous = retained
                        # A term of 0 (a weight of 0, about a third of a bootstrap's weights,
                        # at random) goes through the digits too: its digits are 0, and a
                        # branch on it, mispredicted that often, cost more than the digits.
                        # evalcore.exact.digits of one term, every step exact: digits 5 and
                        # 4 (units of 2**48 and 2**24) one at a time, as that function makes
                        # them, when the term reaches 2**24 (never for bootstrap counts); the
                        # rest, below 2**24, as two whole numbers of 48 bits, rest * 2**24
                        # and the fraction left * 2**48, each truncated once (the floor of
                        # a non-negative value): two conversions instead of four floors,
                        # products and differences chained one after the other (64
                        # replicates x 250,000 predictions in two groups each, best of 5:
                        # 0.179-0.183 s -> 0.115 s, 2026-12-07).
                        rest = abs(term)
                        negative = term < 0.0
                        if rest >= units[4]:
                            d5 = np.floor(rest * inverse[5])
                            rest -= d5 * units[5]
                            d4 = np.floor(rest * inverse[4])
                            rest -= d4 * units[4]
                            s5 += -d5 if negative else d5
                            s4 += -d4 if negative else d4
                        scaled = rest * inverse[2]  # below 2**48: exact
                        high = np.int64(scaled)
                        below = np.int64((scaled - np.float64(high)) * inverse[1])
                        if negative:
                            upper -= high
                            lower -= below
                        else:
                            upper += high
                            lower += below
                first += 2**15
                # Cut by bits, toward minus infinity: digit 3 may come out one lower and
                # digit 2 that many units higher than the terms' own digits, the same value.
                s3 += upper >> 24
                s2 += upper & low
                s1 += lower >> 24
                s0 += lower & low
            out[b, g, 0] = np.float64(s0)
            out[b, g, 1] = np.float64(s1)
            out[b, g, 2] = np.float64(s2)
            out[b, g, 3] = np.float64(s3)
            out[b, g, 4] = s4
            out[b, g, 5] = s5
    return out


@njit(**NUMBA_OPTIONS)
def _transposed(a: np.ndarray) -> np.ndarray:
    """``a.T`` as a new C-contiguous array, copied in tiles of 64 x 64.

    For blocks of a score range's weights, stored rows x replicates and read by the
    replicate kernels replicates x rows (:func:`evalcore.metrics.score_ranges._chunks`,
    which has the numbers): numpy copies a transposed view element by element along the
    source's columns.

    Parameters
    ----------
    a : (n, m) array of any numeric type, any strides

    Returns
    -------
    (m, n) array of ``a``'s type
    """
    n, m = a.shape
    out = np.empty((m, n), dtype=a.dtype)
    for i0 in range(0, n, 64):
        i1 = min(i0 + 64, n)
        for j0 in range(0, m, 64):
            j1 = min(j0 + 64, m)
            for j in range(j0, j1):
                for i in range(i0, i1):
                    out[j, i] = a[i, j]
    return out

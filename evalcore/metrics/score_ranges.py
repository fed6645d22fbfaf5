"""The scores' curves over the run's score order, computed range by range (issue 29).

AP, the precision-recall curves (with their best F1 and operating point) and the
risk-coverage curves (with their aurc and operating points) are read along the
predictions in descending score order, ties by position (:mod:`evalcore.metrics.scores`).
Cut score space at some values (*splitters*): a range holds the predictions with
``lower < score <= upper``, so the predictions of one distinct score, which enter a curve
together, never straddle two ranges. A range's part of every curve then needs only a few
counts of the ranges before it (:class:`RangeCounts`: predictions, true positives per IoU
threshold, steps, and per risk group its predictions, errors and steps), and gives back a
few numbers (:class:`RangeValues`):

* AP's interpolated precision at COCO's recall point r is the largest precision among the
  points with recall >= r (the right-to-left envelope): each range gives its largest per
  threshold and recall point, the merge takes the maximum (exact), and the sum over the
  101 recall points is made once, in recall order, as pycocotools makes it;
* the curves' points are cumulative counts (whole numbers, exact in float64) divided as
  the whole-run curve divides them, so each range writes its rows of the exact tables and
  gives the thinned summary points that fall in it, its best F1 and its last row at or
  above a score threshold or a precision target;
* aurc is a sum of one product per step: its exact digits (:mod:`evalcore.exact`) add
  across ranges in any grouping.

The whole-run computation (:meth:`Scores.global_values`) is this with one range, so the
distributed run, any number of ranges, gives the same bits (``tests/unit/test_score_ranges.py``
holds that as a property). The classes family could reuse :class:`ScoreRows`' shuffle by
score range for any curve over a global order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from evalcore._typing import F64Array, IdArray
from evalcore.config import IOU_SWEEP_THRESHOLDS
from evalcore.exact import N_DIGITS, digits, value_of

__all__ = [
    "AP_THRESHOLDS", "REC_THRS", "PR_THRESHOLDS", "MAX_CURVE_POINTS", "ScoreRows", "RangeCounts", "RangeValues",
    "range_of", "splitters", "range_counts", "prefix_counts", "range_values", "pr_rows", "risk_rows", "ap_of",
    "thinned_rows", "ReplicateCounts", "ReplicateShares", "group_members", "replicate_counts", "replicate_shares",
    "replicate_values", "as_counts",
]

AP_THRESHOLDS: tuple[float, ...] = IOU_SWEEP_THRESHOLDS
"""The ten IoU thresholds of AP (SPEC 6: the decimals 0.50 ... 0.95)."""

REC_THRS = np.linspace(0.0, 1.0, 101)
"""COCO's 101 recall points (as pycocotools builds them)."""

PR_THRESHOLDS: tuple[float, ...] = (0.5, 0.75)
"""IoU thresholds of the published precision-recall curves."""

MAX_CURVE_POINTS = 1000
"""Points of a curve in the summary (the exact curve goes to a Parquet file)."""

EPS = float(np.spacing(1))
"""pycocotools' addition to the precision's denominator in AP."""

NO_POINT = -1.0
"""An AP envelope value where no point of a range reaches the recall (precisions are >= 0)."""


def thinned_rows(n: int) -> IdArray:
    """The rows of an ``n``-row curve shown in the summary: :data:`MAX_CURVE_POINTS` evenly spread, or all."""
    if n > MAX_CURVE_POINTS:
        return np.unique(np.round(np.linspace(0, n - 1, MAX_CURVE_POINTS)).astype(np.int64))
    return np.arange(n, dtype=np.int64)


def _none(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else float(v)


def step_ends(score_sorted: np.ndarray) -> np.ndarray:
    """Whether each row (scores descending) is the last of its distinct score."""
    last = np.ones(len(score_sorted), dtype=bool)
    last[:-1] = score_sorted[1:] != score_sorted[:-1]
    return last


@dataclass(frozen=True)
class ScoreRows:
    """Some predictions of the run as the score curves need them.

    Attributes
    ----------
    pos : ndarray of int64, shape (n,)
        Input positions.
    score : ndarray of float64, shape (n,)
    tp : ndarray of bool, shape (len(AP_THRESHOLDS), n)
        The score-ordered (COCO) matching's true positives at each AP threshold; they
        depend only on the prediction's connected component of the candidate-pair graph.
    error : ndarray of bool, shape (n,)
        Unmatched in the main matching (risk-coverage's error).
    group : ndarray of int64, shape (n,)
        Stratum of the prediction's home (index in the run's strata; -1: none).
    """

    pos: IdArray
    score: F64Array
    tp: np.ndarray
    error: np.ndarray
    group: IdArray

    def __len__(self) -> int:
        return len(self.pos)

    def take(self, rows: np.ndarray) -> ScoreRows:
        return ScoreRows(self.pos[rows], self.score[rows], self.tp[:, rows], self.error[rows], self.group[rows])

    @staticmethod
    def concat(parts: list[ScoreRows]) -> ScoreRows:
        if not parts:
            return ScoreRows.empty()
        return ScoreRows(
            np.concatenate([p.pos for p in parts]).astype(np.int64), np.concatenate([p.score for p in parts]).astype(np.float64),
            np.concatenate([p.tp for p in parts], axis=1).astype(bool), np.concatenate([p.error for p in parts]).astype(bool),
            np.concatenate([p.group for p in parts]).astype(np.int64),
        )

    @staticmethod
    def empty() -> ScoreRows:
        return ScoreRows(np.empty(0, np.int64), np.empty(0), np.zeros((len(AP_THRESHOLDS), 0), bool), np.empty(0, bool),
                         np.empty(0, np.int64))

    def in_score_order(self) -> ScoreRows:
        """The rows by descending score, ties by position (the global order restricted to them)."""
        return self.take(np.lexsort((self.pos, -self.score)))

    def as_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays for an arrays file (:func:`evalcore.distributed.storage.write_summary`) (:meth:`from_arrays` reads them back)."""
        return {"pos": self.pos, "score": self.score, "tp": self.tp, "error": self.error, "group": self.group}

    @staticmethod
    def from_arrays(a: dict[str, np.ndarray]) -> ScoreRows:
        return ScoreRows(a["pos"].astype(np.int64), a["score"].astype(np.float64),
                         a["tp"].reshape(len(AP_THRESHOLDS), len(a["pos"])).astype(bool), a["error"].astype(bool),
                         a["group"].astype(np.int64))


def range_of(score: F64Array, cuts: F64Array) -> IdArray:
    """The range of each score: range k holds ``cuts[k] < score <= cuts[k - 1]`` (``cuts``
    strictly decreasing; range 0 is above the first cut, the last range at or below the last).

    Examples
    --------
    >>> range_of(np.array([0.9, 0.5, 0.4, 0.1]), np.array([0.5, 0.2])).tolist()
    [0, 1, 1, 2]
    """
    ascending = np.asarray(cuts, np.float64)[::-1]
    return (len(ascending) - np.searchsorted(ascending, np.asarray(score, np.float64), side="left")).astype(np.int64)


def splitters(samples: F64Array, n_ranges: int) -> F64Array:
    """At most ``n_ranges - 1`` cuts, strictly decreasing, spread over sampled scores.

    Any cuts give the same numbers (a cut only decides which range computes what); these
    balance the ranges as far as the samples (each part's scores at evenly spaced ranks)
    tell.
    """
    values = np.unique(np.asarray(samples, np.float64))[::-1]  # distinct, descending
    if n_ranges <= 1 or len(values) <= 1:
        return np.empty(0)
    at = np.unique(np.round(np.linspace(0, len(values) - 1, n_ranges + 1)[1:-1]).astype(np.int64))
    return values[at]


@dataclass(frozen=True)
class RangeCounts:
    """What the ranges before a range hold (or a range, or the run): whole counts.

    Attributes
    ----------
    n : int
        Predictions.
    tp : ndarray of int64, shape (len(AP_THRESHOLDS),)
        True positives at each AP threshold.
    steps : int
        Distinct scores (rows of a PR curve).
    group_n, group_errors, group_steps : ndarray of int64, shape (n_groups,)
        Per risk group (0: every prediction; 1 + k: stratum k): predictions, errors and
        distinct scores.
    """

    n: int
    tp: IdArray
    steps: int
    group_n: IdArray
    group_errors: IdArray
    group_steps: IdArray

    @staticmethod
    def zero(n_groups: int) -> RangeCounts:
        z = np.zeros(n_groups, np.int64)
        return RangeCounts(0, np.zeros(len(AP_THRESHOLDS), np.int64), 0, z, z, z)

    def __add__(self, other: RangeCounts) -> RangeCounts:
        return RangeCounts(self.n + other.n, self.tp + other.tp, self.steps + other.steps, self.group_n + other.group_n,
                           self.group_errors + other.group_errors, self.group_steps + other.group_steps)


def _members(rows: ScoreRows, g: int) -> IdArray:
    return np.arange(len(rows)) if g == 0 else np.flatnonzero(rows.group == g - 1)


def range_counts(rows: ScoreRows, n_groups: int) -> RangeCounts:
    """The counts of one range's rows (in score order)."""
    group_n, group_errors, group_steps = (np.zeros(n_groups, np.int64) for _ in range(3))
    for g in range(n_groups):
        m = _members(rows, g)
        group_n[g] = len(m)
        group_errors[g] = int(np.count_nonzero(rows.error[m]))
        group_steps[g] = int(np.count_nonzero(step_ends(rows.score[m])))
    return RangeCounts(len(rows), rows.tp.sum(axis=1).astype(np.int64), int(group_steps[0]), group_n, group_errors, group_steps)


def prefix_counts(counts: list[RangeCounts], n_groups: int) -> tuple[list[RangeCounts], RangeCounts]:
    """Each range's counts before it (ranges in score order), and the run's."""
    before, total = [], RangeCounts.zero(n_groups)
    for c in counts:
        before.append(total)
        total = total + c
    return before, total


def pr_rows(tp: np.ndarray, score_sorted: F64Array, n_ref: int, tp_before: int = 0, n_before: int = 0) -> pd.DataFrame:
    """The precision-recall curve's rows of some predictions in score order (complete ties),
    ``tp_before`` true positives among the ``n_before`` predictions ahead of them."""
    tp = np.asarray(tp, dtype=bool)
    tps = (tp_before + np.cumsum(tp, dtype=np.int64)).astype(np.float64)
    fps = ((n_before - tp_before) + np.cumsum(~tp, dtype=np.int64)).astype(np.float64)
    last = step_ends(score_sorted)
    tps, fps, s = tps[last], fps[last], score_sorted[last]
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = tps / (tps + fps)
        recall = tps / n_ref if n_ref > 0 else np.full(len(tps), np.nan)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), np.where(np.isnan(recall), np.nan, 0.0))
    return pd.DataFrame({"score": s, "precision": precision, "recall": recall, "f1": f1, "tp": tps.astype(np.int64),
                         "fp": fps.astype(np.int64)})


def risk_rows(score_sorted: F64Array, error_sorted: np.ndarray, n_total: int, n_before: int = 0,
              errors_before: int = 0) -> tuple[pd.DataFrame, F64Array]:
    """The risk-coverage curve's rows of some predictions in score order (complete ties), and
    the digits of their steps' aurc terms Σ Δretained · risk (not yet divided by ``n_total``).

    ``n_before`` predictions with ``errors_before`` errors are ahead of them; ``n_total``
    predictions are in the curve.
    """
    last = step_ends(score_sorted)
    error = np.asarray(error_sorted, dtype=bool)
    retained = (n_before + np.cumsum(np.ones(len(error), np.int64)))[last].astype(np.float64)
    errors = (errors_before + np.cumsum(error, dtype=np.int64))[last].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        risk = errors / retained
    grown = np.diff(retained, prepend=float(n_before))
    terms = digits(grown * risk).sum(axis=0) if len(retained) else np.zeros(N_DIGITS)
    curve = pd.DataFrame({
        "score": score_sorted[last],
        "n_retained": retained.astype(np.int64),
        "n_errors": errors.astype(np.int64),
        "coverage": retained / n_total if n_total else retained,
        "risk": risk,
        "precision": (retained - errors) / retained,
    })
    return curve, terms


def ap_envelope(tp: np.ndarray, n_ref: int, tp_before: IdArray, n_before: int) -> F64Array:
    """Per AP threshold and recall point, the largest precision among these rows whose recall
    reaches the point (:data:`NO_POINT`: none), with pycocotools' arithmetic."""
    n_thr, n = tp.shape
    out = np.full((n_thr, len(REC_THRS)), NO_POINT)
    if n == 0 or n_ref <= 0:
        return out
    for t in range(n_thr):
        tps = (tp_before[t] + np.cumsum(tp[t], dtype=np.int64)).astype(np.float64)
        fps = ((n_before - tp_before[t]) + np.cumsum(~tp[t], dtype=np.int64)).astype(np.float64)
        rc = tps / float(n_ref)
        pr = tps / (fps + tps + EPS)
        envelope = np.maximum.accumulate(pr[::-1])[::-1]
        first = np.searchsorted(rc, REC_THRS, side="left")  # rc is non-decreasing
        reached = first < n
        out[t, reached] = envelope[first[reached]]
    return out


def ap_of(envelope: F64Array, n_ref: int) -> F64Array:
    """AP per threshold from the run's envelope maxima: the mean over the recall points, added
    in recall order (pycocotools' sum; a point no prediction reaches adds 0); NaN without
    reference fields."""
    if n_ref <= 0:
        return np.full(envelope.shape[0], np.nan)
    out = np.empty(envelope.shape[0])
    for t in range(envelope.shape[0]):
        total = 0.0
        for v in envelope[t].tolist():
            if v != NO_POINT:
                total += v
        out[t] = total / len(REC_THRS)
    return out


def _point(curve: pd.DataFrame, row: int) -> dict[str, float | None]:
    r = curve.iloc[row]
    return {k: _none(float(r[k])) for k in ("score", "precision", "recall", "f1")}


def _target_record(curve: pd.DataFrame, row: int, target: float) -> dict[str, object]:
    r = curve.iloc[row]
    return {
        "precision_target": target, "met": True, "score_threshold": float(r["score"]), "coverage": float(r["coverage"]),
        "precision": float(r["precision"]), "risk": float(r["risk"]), "n_retained": int(r["n_retained"]),
        "n_errors": int(r["n_errors"]),
    }


def _shown(curve: pd.DataFrame, keys: tuple[str, ...], first: int, n_curve: int) -> tuple[IdArray, dict[str, F64Array]]:
    """The summary's thinned points of a curve of ``n_curve`` rows that fall in these rows (``first``: the first one's row)."""
    wanted = thinned_rows(n_curve)
    wanted = wanted[(wanted >= first) & (wanted < first + len(curve))]
    return wanted, {k: curve[k].to_numpy(np.float64)[wanted - first] for k in keys}


@dataclass(frozen=True)
class RangeValues:
    """A range's share of the run-level score values; ``a + b`` merges a range ``a`` with the
    range ``b`` after it (associative: envelopes by max, aurc digits by sum, points by rule).

    Attributes
    ----------
    envelope : ndarray, shape (len(AP_THRESHOLDS), len(REC_THRS))
        :func:`ap_envelope`.
    pr_points : tuple, per PR threshold
        ``(rows, {key: values})``: the summary's thinned curve points in the range.
    best : tuple, per PR threshold
        ``(f1, row, point)`` of the first largest F1, or None.
    operating : tuple, per PR threshold
        ``(row, point)`` of the last row at or above the score threshold, or None.
    aurc_digits : ndarray, shape (n_groups, N_DIGITS)
    risk_points : tuple, per risk group
        Like ``pr_points`` (score, coverage, risk).
    targets : tuple, per risk group, of tuples per precision target
        ``(row, record)`` of the last step meeting the target, or None.
    """

    envelope: F64Array
    pr_points: tuple
    best: tuple
    operating: tuple
    aurc_digits: F64Array
    risk_points: tuple
    targets: tuple = field(default=())

    def __add__(self, b: RangeValues) -> RangeValues:
        def points(x, y):
            return tuple((np.concatenate([p[0], q[0]]), {k: np.concatenate([p[1][k], q[1][k]]) for k in p[1]}) for p, q in zip(x, y))

        def later(x, y):
            return y if y is not None else x

        return RangeValues(
            np.maximum(self.envelope, b.envelope),
            points(self.pr_points, b.pr_points),
            tuple(x if y is None or (x is not None and not y[0] > x[0]) else y for x, y in zip(self.best, b.best)),
            tuple(later(x, y) for x, y in zip(self.operating, b.operating)),
            self.aurc_digits + b.aurc_digits,
            points(self.risk_points, b.risk_points),
            tuple(tuple(later(x, y) for x, y in zip(xs, ys)) for xs, ys in zip(self.targets, b.targets)),
        )


PR_KEYS = ("score", "precision", "recall", "f1")
RISK_KEYS = ("score", "coverage", "risk")


def range_values(
    rows: ScoreRows, before: RangeCounts, total: RangeCounts, n_ref: int, score_threshold: float | None,
    precision_targets: tuple[float, ...] | None,
) -> tuple[RangeValues, list[pd.DataFrame], list[pd.DataFrame]]:
    """A range's values and its rows of the exact tables.

    Parameters
    ----------
    rows : ScoreRows
        The range's predictions in score order (every prediction of each of its scores).
    before, total : RangeCounts
        What the ranges ahead of it hold, and the run.
    n_ref : int
        Reference fields of the run.

    Returns
    -------
    values : RangeValues
    pr_parts : list of DataFrame
        Its rows of the PR curve at each of :data:`PR_THRESHOLDS` (with ``iou_threshold``).
    risk_parts : list of DataFrame
        Its rows of each risk group's curve.
    """
    pr_points, best, operating, pr_parts = [], [], [], []
    for t in PR_THRESHOLDS:
        k = AP_THRESHOLDS.index(t)
        curve = pr_rows(rows.tp[k], rows.score, n_ref, int(before.tp[k]), before.n)
        pr_parts.append(curve.assign(iou_threshold=t)[["iou_threshold", "score", "precision", "recall", "f1", "tp", "fp"]])
        pr_points.append(_shown(curve, PR_KEYS, before.steps, total.steps))
        f1 = curve["f1"].to_numpy(np.float64)
        if np.isfinite(f1).any():
            at = int(np.nanargmax(f1))
            best.append((float(f1[at]), before.steps + at, _point(curve, at)))
        else:
            best.append(None)
        op = None
        if score_threshold is not None:
            kept = np.flatnonzero(curve["score"].to_numpy() >= score_threshold)
            if len(kept):
                op = (before.steps + int(kept[-1]), _point(curve, int(kept[-1])))
        operating.append(op)
    n_groups = len(total.group_n)
    aurc_digits = np.zeros((n_groups, N_DIGITS))
    risk_points, targets, risk_parts = [], [], []
    for g in range(n_groups):
        m = _members(rows, g)
        curve, terms = risk_rows(rows.score[m], rows.error[m], int(total.group_n[g]), int(before.group_n[g]),
                                 int(before.group_errors[g]))
        risk_parts.append(curve)
        aurc_digits[g] = terms
        first = int(before.group_steps[g])
        risk_points.append(_shown(curve, RISK_KEYS, first, int(total.group_steps[g])))
        met = []
        precision = curve["precision"].to_numpy(np.float64)
        for target in precision_targets or ():
            ok = np.flatnonzero(precision >= target)
            met.append((first + int(ok[-1]), _target_record(curve, int(ok[-1]), target)) if len(ok) else None)
        targets.append(tuple(met))
    envelope = ap_envelope(rows.tp, n_ref, before.tp, before.n)
    values = RangeValues(envelope, tuple(pr_points), tuple(best), tuple(operating), aurc_digits, tuple(risk_points), tuple(targets))
    return values, pr_parts, risk_parts


def _listed(points: tuple[IdArray, dict[str, F64Array]], keys: tuple[str, ...]) -> dict[str, list]:
    return {k: [_none(v) for v in points[1][k].tolist()] for k in keys}


def run_keys(values: RangeValues, total: RangeCounts, n_ref: int, score_threshold: float | None,
             precision_targets: tuple[float, ...] | None, strata: list[str] | None) -> tuple[dict[str, object], list[dict]]:
    """The summary's keys from the merged values of every range and the run's counts.

    Returns
    -------
    keys : dict
        ``ap50``, ``ap75``, ``ap50_95``, ``ap_per_threshold``, ``ap_iou_thresholds``,
        ``pr_curve``, ``best_f1``, ``operating_point`` (with a score threshold), ``aurc``
        and ``risk_coverage`` (``per_stratum`` when ``strata`` is not None).
    blocks : list of dict
        The risk-coverage block of each group (the bootstrap adds their intervals).
    """
    ap = ap_of(values.envelope, n_ref)
    keys: dict[str, object] = {
        "ap50": _none(ap[0]),
        "ap75": _none(ap[AP_THRESHOLDS.index(0.75)]),
        "ap50_95": _none(float(np.mean(ap))) if n_ref > 0 else None,
        "ap_per_threshold": [_none(v) for v in ap],
        "ap_iou_thresholds": list(AP_THRESHOLDS),
    }
    missing = {"score": None, "precision": None, "recall": 0.0 if n_ref > 0 else None, "f1": None}
    curves, best, operating = {}, {}, {}
    for i, t in enumerate(PR_THRESHOLDS):
        name = f"{t:g}"
        curves[name] = _listed(values.pr_points[i], PR_KEYS)
        best[name] = values.best[i][2] if values.best[i] is not None else dict(missing)
        if score_threshold is not None:
            point = values.operating[i][1] if values.operating[i] is not None else dict(missing)
            operating[name] = {**point, "score_threshold": score_threshold}
    keys["pr_curve"] = curves
    keys["best_f1"] = best
    if score_threshold is not None:
        keys["operating_point"] = operating
    blocks = []
    for g in range(len(total.group_n)):
        n = int(total.group_n[g])
        value = float(value_of(values.aurc_digits[g])) / n if n > 0 else float("nan")
        block: dict[str, object] = {"n": n, "n_errors": int(total.group_errors[g]), "aurc": _none(value),
                                    "curve": _listed(values.risk_points[g], RISK_KEYS)}
        if precision_targets is not None:
            block["operating_points"] = [
                met[1] if met is not None else {"precision_target": target, "met": False, "score_threshold": None, "coverage": 0.0,
                                                "precision": None, "risk": None, "n_retained": 0, "n_errors": 0}
                for target, met in zip(precision_targets, values.targets[g])
            ]
        blocks.append(block)
    keys["aurc"] = blocks[0]["aurc"]
    risk: dict[str, object] = {"overall": blocks[0]}
    if strata is not None:
        risk["per_stratum"] = dict(zip(strata, blocks[1:]))
    if precision_targets is not None:
        risk["precision_targets"] = list(precision_targets)
    keys["risk_coverage"] = risk
    return keys, blocks


# --- The bootstrap's replicates by score ranges -----------------------------------------
#
# In replicate b a prediction weighs its home reference's draw count (field draws; a
# prediction without a home weighs 1) or its unit's (block draws): small whole numbers,
# so every weighted cumulative count is a sum of whole numbers below 2**53, exact in any
# order and grouping. A range's part of a replicate's AP and aurc then needs only the
# weighted counts of the ranges ahead (:class:`ReplicateCounts`, pass 1) and gives back
# its envelope maxima and its aurc digits (:class:`ReplicateShares`, pass 2), merged by
# max and by sum. The whole run is one range (:func:`evalcore.metrics.scores.replicate_ap_and_aurc`).

REPLICATE_CHUNK_BYTES = 32 * 2**20
"""Memory of one chunk of replicate weights (replicates x predictions, counted as float64;
pass 2's chunks hold the counts in their own small type, an eighth of it as uint8) in a
range's computations."""


@dataclass(frozen=True)
class ReplicateCounts:
    """Weighted counts of some predictions in every replicate (whole numbers in float64).

    Attributes
    ----------
    tp, fp : ndarray, shape (n_replicates, len(AP_THRESHOLDS))
        Weighted true and false positives at each AP threshold.
    group_n, group_errors : ndarray, shape (n_replicates, n_groups)
        Weight and weighted errors of each risk group (0: every prediction; 1 + k: stratum k).
    """

    tp: F64Array
    fp: F64Array
    group_n: F64Array
    group_errors: F64Array

    @staticmethod
    def zero(n_replicates: int, n_groups: int) -> ReplicateCounts:
        t = np.zeros((n_replicates, len(AP_THRESHOLDS)))
        g = np.zeros((n_replicates, n_groups))
        return ReplicateCounts(t, t, g, g)

    def __add__(self, other: ReplicateCounts) -> ReplicateCounts:
        return ReplicateCounts(self.tp + other.tp, self.fp + other.fp, self.group_n + other.group_n,
                               self.group_errors + other.group_errors)


@dataclass(frozen=True)
class ReplicateShares:
    """A range's share of the replicates' AP and aurc; ``a + b`` merges ranges (any order).

    Attributes
    ----------
    envelope : ndarray, shape (n_replicates, len(AP_THRESHOLDS), len(REC_THRS))
        Per replicate, threshold and recall point, the largest precision among the range's
        points reaching the recall (:data:`NO_POINT`: none).
    aurc_digits : ndarray, shape (n_replicates, n_groups, N_DIGITS)
        Exact digits of the range's aurc terms per replicate and group.
    """

    envelope: F64Array
    aurc_digits: F64Array

    def __add__(self, other: ReplicateShares) -> ReplicateShares:
        return ReplicateShares(np.maximum(self.envelope, other.envelope), self.aurc_digits + other.aurc_digits)


def group_members(group: IdArray, score_sorted: F64Array, n_groups: int) -> tuple[IdArray, IdArray, np.ndarray]:
    """The risk groups of some predictions in score order, as the replicate kernels take them.

    Returns
    -------
    members, member_start : ndarray of int64
        Group g's rows are ``members[member_start[g]:member_start[g + 1]]`` (group 0: every
        row; 1 + k: the rows of stratum k).
    last : ndarray of bool
        Whether each member is the last of its distinct score within its group.
    """
    from evalcore.bootstrap import group_members as members_of

    group = np.asarray(group, dtype=np.int64)
    members, member_start = members_of(np.where(group >= 0, group + 1, -1)[:, None], n_groups)
    last = (np.concatenate([step_ends(score_sorted[members[a:b]]) for a, b in zip(member_start[:-1], member_start[1:], strict=True)])
            if len(members) else np.empty(0, bool))
    return members, member_start, last


def _chunks(weights: np.ndarray, chunk_bytes: int):
    """Consecutive replicates of ``weights`` (n_replicates, n) as contiguous blocks of their type.

    A score range's weights are stored rows x replicates (each weights file's rows are
    runs of bytes) and handed here transposed (:func:`evalcore.bootstrap._by_row`): such a
    block is copied by :func:`evalcore._score_kernels._transposed`, in 64 x 64 tiles.
    numpy copies a transposed view element by element along the source's columns: 11.6
    of a 2M-field run's 89.8 score-values task-seconds (py-spy, 2026-12-06); every chunk of
    a range of 250,000 rows x 1000 replicates of bytes, 0.53-0.65 s that way, 0.34-0.35 s
    in tiles. A whole transposed copy made once would hold the range's weights twice.
    """
    from evalcore._score_kernels import _transposed
    from evalcore.bootstrap import _by_row, replicates_per_chunk

    step = replicates_per_chunk(weights.shape[1], chunk_bytes)
    by_row = _by_row(weights)
    for a in range(0, weights.shape[0], step):
        yield a, _transposed(weights.T[:, a:a + step]) if by_row else np.ascontiguousarray(weights[a:a + step])


def as_counts(weights: np.ndarray) -> np.ndarray:
    """Replicate weights as the replicate kernels read them best: as they are when of an
    unsigned integer type, else in the smallest one holding them
    (:func:`evalcore.bootstrap.small_counts`) when they are whole numbers from 0 to
    2**32 - 1 (bootstrap counts, always), else as float64.

    The kernels read counts in any type with the same bits (their sums are of whole
    numbers, exact); a byte a weight instead of eight is less to convert and to read, and
    their counts add as integers.
    """
    from evalcore.bootstrap import small_counts

    w = np.asarray(weights)
    if np.issubdtype(w.dtype, np.unsignedinteger) or w.size == 0:
        return w
    counts = small_counts(w)
    return counts if counts is not None else w.astype(np.float64, copy=False)


def _check_weights(rows: ScoreRows, weights: np.ndarray) -> None:
    if weights.ndim != 2 or weights.shape[1] != len(rows):
        raise ValueError(f"replicate weights of shape {weights.shape} for {len(rows)} predictions")


def replicate_counts(rows: ScoreRows, weights: np.ndarray, n_groups: int,
                     chunk_bytes: int = REPLICATE_CHUNK_BYTES) -> ReplicateCounts:
    """Pass 1: a range's weighted counts in every replicate.

    Every count is a sum of whole numbers (a weight times a 0/1 flag), each partial sum
    below 2**53: exact in float64 whatever the order of the additions. So the counts are
    one matrix product per block of rows, the weights by the rows' indicator columns
    (true positive at each threshold, member of each risk group, error in it), made by
    BLAS: its blocking and order change no bit. The false positives are the total weight
    (group 0's: every row) less the true positives (whole numbers: exact).

    Parameters
    ----------
    rows : ScoreRows
        In score order.
    weights : ndarray, shape (n_replicates, len(rows))
        Whole numbers (any numeric dtype): each prediction's weight in each replicate.
        About ``chunk_bytes`` of them are made float64 at a time.
    n_groups : int
        Risk groups, group 0 (every prediction) included: at least 1.

    Raises
    ------
    ValueError
        A weight that is negative, not a whole number, or so large that a count could
        reach 2**53.
    """
    from evalcore.bootstrap import _by_row, rows_per_block

    _check_weights(rows, weights)
    n_rep, n = weights.shape
    n_thr = rows.tp.shape[0]
    out = np.zeros((n_rep, n_thr + 2 * n_groups))
    members, member_start, _ = group_members(rows.group, rows.score, n_groups)
    in_group = np.zeros((n, n_groups), dtype=bool)
    for g in range(n_groups):
        in_group[members[member_start[g]:member_start[g + 1]], g] = True
    step = rows_per_block(n_rep, chunk_bytes)
    # Weights kept rows x replicates (a score range's, handed transposed) are read a block of
    # whole rows at a time and multiplied from the other side: every count is exact, so the
    # product's order changes no bit.
    by_row = _by_row(weights)
    for a in range(0, n, step):
        b = slice(a, min(n, a + step))
        w = np.asarray(weights.T[b] if by_row else weights[:, b], dtype=np.float64)
        # Unsigned integers are whole and not negative: only a float or signed type is looked at.
        whole = weights.dtype.kind == "u" or ((w >= 0.0).all() and np.array_equal(w, np.floor(w)))
        if w.size and (not whole or float(w.max()) * n >= 2.0**53):
            raise ValueError(f"replicate weights must be whole numbers from 0 to {2.0**53 / max(n, 1):.0f}")
        tp = np.asarray(rows.tp[:, b], dtype=bool).T
        error = np.asarray(rows.error[b], dtype=bool)[:, None]
        flags = np.concatenate([tp, in_group[b], in_group[b] & error], axis=1).astype(np.float64)
        out += (flags.T @ w).T if by_row else w @ flags
    tp, group_n, group_errors = out[:, :n_thr], out[:, n_thr:n_thr + n_groups], out[:, n_thr + n_groups:]
    return ReplicateCounts(tp, group_n[:, :1] - tp, group_n, group_errors)


def replicate_shares(rows: ScoreRows, weights: np.ndarray, before: ReplicateCounts, n_refs: F64Array,
                     chunk_bytes: int = REPLICATE_CHUNK_BYTES) -> ReplicateShares:
    """Pass 2: a range's share of every replicate's AP and aurc.

    Parameters
    ----------
    rows, weights
        As :func:`replicate_counts`.
    before : ReplicateCounts
        What the ranges ahead of it hold.
    n_refs : ndarray of float64, shape (n_replicates,)
        Each replicate's reference count (its reference fields' weights summed).
    """
    from evalcore._score_kernels import _replicate_aurc_digits, _replicate_envelope
    from evalcore.exact import _UNITS

    _check_weights(rows, weights)
    n_groups = before.group_n.shape[1]
    members, member_start, last = group_members(rows.group, rows.score, n_groups)
    tp_flags = np.ascontiguousarray(rows.tp, dtype=np.float64)
    error = rows.error.astype(np.float64)
    n_refs = np.asarray(n_refs, dtype=np.float64)
    units = np.asarray(_UNITS)
    envelopes, aurc_digits = [], []
    # The kernels take the counts in their own small type: no float64 copy of the matrix.
    for a, w in _chunks(as_counts(weights), chunk_bytes):
        b = slice(a, a + len(w))
        envelopes.append(_replicate_envelope(tp_flags, w, n_refs[b], np.ascontiguousarray(before.tp[b]),
                                             np.ascontiguousarray(before.fp[b]), REC_THRS, EPS, NO_POINT))
        aurc_digits.append(_replicate_aurc_digits(error, w, members, member_start, last, np.ascontiguousarray(before.group_n[b]),
                                                  np.ascontiguousarray(before.group_errors[b]), units))
    if not envelopes:
        return ReplicateShares(np.full((0, len(AP_THRESHOLDS), len(REC_THRS)), NO_POINT), np.zeros((0, n_groups, N_DIGITS)))
    return ReplicateShares(np.concatenate(envelopes), np.concatenate(aurc_digits))


def replicate_values(shares: ReplicateShares, total: ReplicateCounts, n_refs: F64Array) -> tuple[F64Array, F64Array]:
    """Every replicate's AP per threshold and aurc per group from the merged shares of all
    ranges and the run's counts.

    Returns
    -------
    ap : ndarray, shape (n_replicates, len(AP_THRESHOLDS))
        NaN where the replicate has no reference field.
    aurc : ndarray, shape (n_replicates, n_groups)
        NaN where the group weighs nothing.
    """
    from evalcore._score_kernels import _replicate_ap_of

    ap = _replicate_ap_of(np.ascontiguousarray(shares.envelope), np.asarray(n_refs, dtype=np.float64), NO_POINT)
    weight = total.group_n
    with np.errstate(divide="ignore", invalid="ignore"):
        aurc = np.where(weight > 0.0, value_of(shares.aurc_digits) / np.where(weight > 0.0, weight, 1.0), np.nan)
    return ap, aurc

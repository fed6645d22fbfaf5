"""Scores (SPEC 6.5, seed 004 §5.3 and §9): COCO AP, precision-recall curves, calibration.

With a confidence column on the predictions (``score_column``, finite, in [0, 1]):

* **AP** as pycocotools' ``COCOeval`` computes it (``iouType="bbox"`` semantics) with the
  exact polygon IoU of the pairs, the whole layer as one image, one category, no area
  range and no cap on detections. Predictions are visited in descending score order
  (ties by position, globally); each takes the not yet taken reference field with the
  highest IoU at or above the threshold (of equal IoUs, the later reference position);
  precision is read at the 101 recall points ``np.linspace(0, 1, 101)`` after the
  right-to-left envelope. This *score-ordered* matching is the detector benchmarks'; the
  main matching (by IoU, agribound's) is never mixed into these keys, nor they into it.
* **PR curves** at IoU 0.5 and 0.75 from that matching: precision, recall and F1 after
  every distinct score (all predictions of a tied score enter together), the best F1,
  and the values at a frozen ``score_threshold``.
* **Calibration** against the main matching: y = 1 when the prediction is matched at
  ``iou_threshold``. Fixed bins ``[b/B, (b+1)/B)`` (edges ``b / B`` in double precision,
  the last bin closed); ECE = Σ_b |Σ y − Σ score|_b / n, Brier = mean((score − y)²). The
  bins are sums, so calibration is a quantity family like the others: per stratum and
  size class (a prediction in its home's group) and with intervals from the resamples.

* **Risk-coverage** (seed 004 §11) against the main matching too: a prediction is an
  *error* when it is unmatched at ``iou_threshold``. Predictions are retained as the
  score threshold falls, one step per distinct score (tied predictions enter together);
  at the step of score s, ``coverage`` = retained / all predictions and ``risk`` =
  errors among the retained / retained (1 − their precision). ``aurc`` is the area under
  that step curve, Σ_k (coverage_k − coverage_{k−1}) · risk_k (coverage_0 = 0): with
  distinct scores, the mean of the n selective risks. ``precision_targets`` give the
  operating points: for each target, the step of largest coverage whose retained
  precision meets it. Overall and per stratum (a prediction in its home's stratum).

AP is not a sum: it is read along the run's score order, from the pairs and the scores
(never the geometries), by score ranges (:mod:`evalcore.metrics.score_ranges`): the
single process is one range (:meth:`Scores.global_values`); a distributed run without a
bootstrap computes the COCO true positives per connected component in the resolves
(:meth:`Scores.run_level_rows`) and the curves range by range on the workers, to the same
bits. With a bootstrap it is computed on the client from every prediction. Its bootstrap intervals hold the
matching fixed and weigh each prediction by the draws of its home reference (homeless
predictions weigh 1), the reference count being the resample's. So are the risk-coverage
curves and their ``aurc`` intervals (a prediction weighs as it is drawn; the steps stay
those of the distinct scores).

The module stays whole at about 750 lines: AP, the PR curves, calibration and
risk-coverage are one family (one score column, one set of options, sums and replicates
drawn together), and the family interface wants it in one module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

from evalcore._score_kernels import _coco_match, _replicate_ap_of, _replicate_aurc_digits, _replicate_envelope, _weighted_ap
from evalcore.arrays import index_of
from evalcore.bootstrap import bias_corrected_intervals, percentile_intervals, replicates_per_chunk
from evalcore.config import IOU_MATCH_RTOL
from evalcore.exact import _UNITS, digits, value_of
from evalcore.errors import EvalInputError
from evalcore.metrics.base import NULL, GlobalContext, GroupView, MetricFamily, Option, PredContext, ratio
from evalcore.metrics.checks import choice, optional_text, positive_int
from evalcore.metrics.score_ranges import (
    AP_THRESHOLDS,
    NO_POINT,
    PR_THRESHOLDS,
    REC_THRS,
    RangeCounts,
    ScoreRows,
    _none,
    as_counts,
    pr_rows,
    range_counts,
    range_values,
    risk_rows,
    run_keys,
    step_ends,
    thinned_rows,
)
from evalcore.present import LOWER, OVERALL, Row, Shown, interval_text, markdown_text, number, row_text, with_interval

__all__ = [
    "Scores", "score_values", "ScoreCheck", "calibration_bin", "coco_true_positives", "coco_ap", "pr_curve", "risk_coverage", "aurc",
    "operating_points", "AP_KEYS",
]

AP_KEYS: tuple[str, ...] = ("ap50", "ap75", "ap50_95")
"""The AP keys: at IoU 0.5, at 0.75, and averaged over :data:`AP_THRESHOLDS`."""


def _score_or_none(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or not (0.0 <= float(value) <= 1.0):
        raise ValueError(f"{name} must be a score in [0, 1] or None, but got {value!r}.")
    return float(value)


AP_INTERVALS = ("percentile", "bc")
"""Interval methods of the AP keys: the run's percentile interval, or the bias-corrected one (:func:`~evalcore.bootstrap.bias_corrected_intervals`)."""


def _parse_score(text: str) -> float | None:
    return None if text.strip().lower() == "none" else float(text)


def _precision_targets(name: str, value: object) -> tuple[float, ...] | None:
    """None, or a non-empty strictly increasing sequence of precisions in (0, 1]."""
    if value is None:
        return None
    rule = f"{name} (--precision-targets) must be increasing precisions in (0, 1], e.g. [0.9, 0.95], or None"
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, np.ndarray)):
        raise ValueError(f"{rule}, but got {value!r}.")
    values = list(value)
    ok = all(not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating)) and 0.0 < float(v) <= 1.0 for v in values)
    if not values or not ok or any(float(b) <= float(a) for a, b in zip(values, values[1:])):
        raise ValueError(f"{rule}, but got {value!r}.")
    return tuple(float(v) for v in values)


def _parse_targets(text: str) -> tuple[float, ...] | None:
    """``0.9,0.95`` -> (0.9, 0.95); ``none`` -> None."""
    if text.strip().lower() == "none":
        return None
    try:
        return tuple(float(part) for part in text.split(",") if part.strip() != "")
    except ValueError:
        raise ValueError(f"--precision-targets {text!r}: expected comma-separated precisions like 0.9,0.95, or 'none'") from None


def score_values(layer: object, column: str, where: str, *, label: str = "score column") -> np.ndarray:
    """The scores of a layer's rows as float64, checked: a numeric column, finite, in [0, 1].

    The one check of a score column: the library's (``label`` "score column") and the
    command line's (``label`` "--score-column") messages differ only by that label; the
    command line checks a file a chunk at a time with :class:`ScoreCheck`.

    Raises
    ------
    EvalInputError
        Naming the layer, the column and the first bad row (0-based; a chunk of a file,
        indexed by its rows' positions, names the row in the file), or listing the
        numeric columns when the column is missing.
    """
    check = ScoreCheck(column, where, label)
    v = check.add(layer)
    check.finish()
    return v


class ScoreCheck:
    """A score column checked chunk by chunk (:func:`score_values` is one chunk).

    :meth:`add` checks a chunk (a frame indexed by its rows' positions in the file) and
    returns its scores; a value that is not a number fails at once, naming its row. Rows
    that are not finite numbers in [0, 1] are counted over every chunk, and :meth:`finish`
    fails naming the first of them and their count in the whole file, as the check of the
    whole column would.
    """

    def __init__(self, column: str, where: str, label: str = "score column"):
        self.column, self.where, self.label = column, where, label
        self.n_rows = 0
        self.n_bad = 0
        self.first_bad: tuple[int, object, str] | None = None  # (row in the file, value, what is wrong)
        self.non_numeric: tuple[str, int, object] | None = None  # (dtype, row in the file, value)

    def add(self, layer: object) -> np.ndarray:
        from pandas.api.types import is_bool_dtype, is_numeric_dtype

        column, where, label = self.column, self.where, self.label
        columns = [str(c) for c in getattr(layer, "columns", []) if c != getattr(layer, "geometry", pd.Series()).name]
        if column not in columns:
            numeric = [c for c in columns if is_numeric_dtype(layer[c]) and not is_bool_dtype(layer[c])]
            raise EvalInputError(
                f"{label} {column!r} is not a column of the {where}; its numeric columns are: "
                f"{', '.join(map(repr, numeric)) or '(none)'}."
            )
        index = getattr(layer, "index", None)

        def row_name(row: int) -> int:
            return int(index[row]) if isinstance(index, pd.RangeIndex) else self.n_rows + row

        values = pd.Series(layer[column]).reset_index(drop=True)
        if is_bool_dtype(values) or not is_numeric_dtype(values):
            numbers = pd.to_numeric(values, errors="coerce")
            bad = np.flatnonzero(numbers.isna().to_numpy() & values.notna().to_numpy())
            if len(bad):
                self.non_numeric = (str(values.dtype), row_name(int(bad[0])), _plain(values.iloc[int(bad[0])]))
                self.finish()
            # No value that is not a number here: the whole column's check names its first
            # row, unless a later chunk holds one (then that row).
            if self.non_numeric is None and len(values):
                self.non_numeric = (str(values.dtype), row_name(0), _plain(values.iloc[0]))
            self.n_rows += len(values)
            return numbers.to_numpy(dtype=np.float64, na_value=np.nan)
        v = values.to_numpy(dtype=np.float64, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~np.isfinite(v) | (v < 0.0) | (v > 1.0))
        if len(bad) and self.first_bad is None:
            row = int(bad[0])
            what = "missing" if np.isnan(v[row]) else "not finite" if not np.isfinite(v[row]) else "outside [0, 1]"
            self.first_bad = (row_name(row), _plain(values.iloc[row]), what)
        self.n_bad += len(bad)
        self.n_rows += len(v)
        return v

    def finish(self) -> None:
        """Fail when the column is not numeric, or a chunk held a score that is not a finite number in [0, 1]."""
        if self.non_numeric is not None:
            dtype, row, value = self.non_numeric
            raise EvalInputError(
                f"{self.label} {self.column!r} of the {self.where} is not numeric (dtype {dtype}): row {row} (0-based) holds "
                f"{value!r}. Scores must be numbers in [0, 1]; convert the column or choose another one."
            )
        if self.first_bad is not None:
            row, value, what = self.first_bad
            raise EvalInputError(
                f"{self.label} {self.column!r} of the {self.where}: row {row} (0-based) holds {value!r}, which is {what} "
                f"({self.n_bad} of {self.n_rows} rows are not finite numbers in [0, 1]). Fix or remove those rows."
            )


def _plain(value: object) -> object:
    """A numpy scalar as the Python value it holds (messages show ``1.5``, not ``np.float64(1.5)``)."""
    return value.item() if hasattr(value, "item") else value


def calibration_bin(score: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin of each score: b with ``b / B <= score < (b + 1) / B``, the last bin closed.

    Examples
    --------
    >>> calibration_bin(np.array([0.0, 0.1, 0.3, 0.99, 1.0]), 10).tolist()
    [0, 1, 3, 9, 9]
    """
    edges = np.arange(n_bins + 1, dtype=np.float64) / n_bins
    return np.clip(np.searchsorted(edges, score, side="right") - 1, 0, n_bins - 1).astype(np.int64)


def _relaxed(thresholds: tuple[float, ...]) -> np.ndarray:
    return np.array([t * (1.0 - IOU_MATCH_RTOL) for t in thresholds])


def coco_true_positives(
    score: np.ndarray, pred_pos: np.ndarray, ref_pos: np.ndarray, pairs: object, thresholds: tuple[float, ...] = AP_THRESHOLDS
) -> tuple[np.ndarray, np.ndarray]:
    """The score-ordered matching: prediction rows in score order and their TP flags per threshold.

    Parameters
    ----------
    score, pred_pos : ndarray, shape (n_pred,)
        Every prediction's score and position (increasing).
    ref_pos : ndarray of int64
        Every reference position (increasing).
    pairs : PairTable
        Every candidate pair of the run.

    Returns
    -------
    order : ndarray of int64
        Prediction rows by descending score, ties by position.
    tp : ndarray of bool, shape (len(thresholds), n_pred)
        In that order.
    """
    order = np.lexsort((pred_pos, -score)).astype(np.int64)
    by_pred = np.lexsort((pairs.ref_pos, pairs.pred_pos))
    pred_row = index_of(pred_pos, pairs.pred_pos[by_pred])
    ref_row = index_of(ref_pos, pairs.ref_pos[by_pred])
    start = np.searchsorted(pred_row, np.arange(len(pred_pos) + 1)).astype(np.int64)
    tp = _coco_match(order, start, ref_row.astype(np.int64), pairs.iou[by_pred].astype(np.float64), len(ref_pos), _relaxed(thresholds))
    return order, tp


def coco_ap(tp: np.ndarray, n_ref: float, weights: np.ndarray | None = None) -> np.ndarray:
    """AP per threshold (NaN without reference fields), pycocotools' arithmetic."""
    if n_ref <= 0:
        return np.full(tp.shape[0], np.nan)
    w = np.ones(tp.shape[1]) if weights is None else np.asarray(weights, dtype=np.float64)
    return _weighted_ap(tp, w, float(n_ref), REC_THRS, float(np.spacing(1)))


def pr_curve(tp: np.ndarray, score_sorted: np.ndarray, n_ref: int) -> pd.DataFrame:
    """Precision, recall and F1 after every distinct score (descending), from TP flags in score order."""
    return pr_rows(tp, score_sorted, n_ref)


def _weighted_curve(error_sorted: np.ndarray, weights_sorted: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Retained weight and errors at each step, and the aurc (NaN when nothing weighs)."""
    retained = np.cumsum(weights_sorted)[last]
    errors = np.cumsum(weights_sorted * error_sorted)[last]
    total = float(retained[-1]) if len(retained) else 0.0
    if total <= 0.0:
        return retained, errors, float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        risk = np.where(retained > 0.0, errors / np.where(retained > 0.0, retained, 1.0), 0.0)
    grown = np.diff(retained, prepend=0.0)
    # An exact sum (evalcore.exact): the curve computed by score ranges adds the same
    # terms in other groupings (evalcore.metrics.score_ranges).
    return retained, errors, float(value_of(digits(grown * risk).sum(axis=0))) / total


def risk_coverage(score: np.ndarray, correct: np.ndarray) -> pd.DataFrame:
    """The risk-coverage curve: one row per distinct score, descending.

    Parameters
    ----------
    score : ndarray of float64, shape (n,)
    correct : ndarray of bool, shape (n,)
        Whether each prediction is right (matched); an error otherwise.

    Returns
    -------
    DataFrame
        ``score`` (retain score >= it), ``n_retained``, ``n_errors``, ``coverage``
        (n_retained / n), ``risk`` (n_errors / n_retained) and ``precision`` (1 − risk).
        No rows without predictions.

    Examples
    --------
    >>> c = risk_coverage(np.array([0.9, 0.5, 0.5, 0.2]), np.array([True, False, True, False]))
    >>> c["coverage"].tolist(), c["risk"].tolist()
    ([0.25, 0.75, 1.0], [0.0, 0.3333333333333333, 0.5])
    >>> len(risk_coverage(np.empty(0), np.empty(0, bool)))
    0
    """
    score = np.asarray(score, dtype=np.float64)
    order = np.lexsort((np.arange(len(score)), -score))
    return risk_rows(score[order], ~np.asarray(correct, dtype=bool)[order], len(score))[0]


def aurc(score: np.ndarray, correct: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Area under the risk-coverage step curve, Σ_k Δcoverage_k · risk_k; NaN without predictions.

    With ``weights`` (a bootstrap replicate: how many times each prediction is drawn),
    coverage and risk are weighted counts; the steps are still the distinct scores.

    Examples
    --------
    >>> aurc(np.array([0.9, 0.5, 0.5, 0.2]), np.array([True, False, True, False]))
    0.29166666666666663
    >>> aurc(np.empty(0), np.empty(0, bool))
    nan
    """
    score = np.asarray(score, dtype=np.float64)
    order = np.lexsort((np.arange(len(score)), -score))
    w = np.ones(len(score)) if weights is None else np.asarray(weights, dtype=np.float64)[order]
    error = (~np.asarray(correct, dtype=bool)[order]).astype(np.float64)
    return _weighted_curve(error, w, step_ends(score[order]))[2]


def operating_points(curve: pd.DataFrame, targets: tuple[float, ...]) -> list[dict[str, object]]:
    """For each precision target, the step of largest coverage whose retained precision meets it.

    ``met`` is False (and the threshold, precision and risk null, coverage 0) when no
    step reaches the target: only retaining nothing would.
    """
    out = []
    precision = curve["precision"].to_numpy(np.float64)
    for target in targets:
        ok = np.flatnonzero(precision >= target)
        if len(ok) == 0:
            out.append({"precision_target": target, "met": False, "score_threshold": None, "coverage": 0.0,
                        "precision": None, "risk": None, "n_retained": 0, "n_errors": 0})
            continue
        r = curve.iloc[int(ok[-1])]
        out.append({
            "precision_target": target, "met": True, "score_threshold": float(r["score"]), "coverage": float(r["coverage"]),
            "precision": float(r["precision"]), "risk": float(r["risk"]), "n_retained": int(r["n_retained"]),
            "n_errors": int(r["n_errors"]),
        })
    return out


def _thinned(curve: pd.DataFrame, keys: tuple[str, ...] = ("score", "precision", "recall", "f1")) -> dict[str, list]:
    part = curve.iloc[thinned_rows(len(curve))]
    return {k: [_none(v) for v in part[k].to_numpy(np.float64)] for k in keys}


class Scores(MetricFamily):
    name = "scores"
    options = (
        Option(
            "score_column", None,
            "predicted column with a confidence score in [0, 1] per prediction: AP, PR curves, calibration (default: none)",
            optional_text, annotation=str | None,
        ),
        Option("calibration_bins", 10, "equal-width calibration bins on [0, 1] (default 10)", positive_int, parse=int, annotation=int),
        Option(
            "score_threshold", None, "a frozen score threshold in [0, 1]: the PR curves' operating point (default: none)",
            _score_or_none, parse=_parse_score, annotation=float | None,
        ),
        Option(
            "precision_targets", None,
            "precisions in (0, 1], comma-separated and increasing, e.g. 0.9,0.95: the risk-coverage operating points "
            "(lowest score threshold meeting each) (default: none)",
            _precision_targets, parse=_parse_targets, annotation=list[float] | None,
        ),
        Option(
            "ap_interval", "percentile",
            "interval of AP50, AP75 and AP50:95 with --bootstrap: percentile (default, as every rate) or bc, bias-corrected "
            "for AP's step function, with the point's place in its bootstrap distribution (docs/intervals.md)",
            lambda name, value: choice(name, value, AP_INTERVALS), annotation=str, choices=AP_INTERVALS,
        ),
    )
    shown = (
        Shown("ap50", "AP at IoU 0.5", "AP50", headline=False, compared=OVERALL),
        Shown("ap75", "AP at IoU 0.75", "AP75", headline=False, compared=OVERALL),
        Shown("ap50_95", "AP 0.5:0.95", "AP50:95", headline=False, compared=OVERALL),
        Shown("aurc", "Area under the risk-coverage curve", better=LOWER, headline=False, compared=OVERALL),
    )

    def summary_lines(self, metrics: dict) -> list[str]:
        """AP with its intervals and the calibration, on one line."""
        if "ap50" not in metrics:
            return []
        cal = metrics.get("calibration", {})
        return [
            f"scores ({metrics.get('score_column')}): AP50 {with_interval(metrics, 'ap50')}  AP75 {with_interval(metrics, 'ap75')}  "
            f"AP50:95 {with_interval(metrics, 'ap50_95')}"
            + (" (bias-corrected intervals)" if (metrics.get("ap_interval") or {}).get("method") == "bc" else "") + ";  "
            f"calibration ECE {number(cal.get('ece'))}  Brier {number(cal.get('brier'))} over {cal.get('n')} predictions"
        ] + self._operating_lines(metrics)

    def _operating_lines(self, metrics: dict) -> list[str]:
        """The frozen threshold's operating point and the precision targets' thresholds, a line each."""
        lines = []
        op = self._operating_point(metrics)
        if op is not None:
            t, point = op
            lines.append(f"at score ≥ {point['score_threshold']:g} (IoU ≥ {t}): precision {number(point['precision'])}  "
                         f"recall {number(point['recall'])}  F1 {number(point['f1'])}")
        targets = self._targets(metrics)
        if targets:
            lines.append("precision targets: " + ";  ".join(
                f"≥ {p['precision_target']:g} from score ≥ {number(p['score_threshold'])} "
                f"({p['n_retained']} predictions kept, precision {number(p['precision'])})" if p["met"]
                else f"≥ {p['precision_target']:g} not reached" for p in targets))
        return lines

    @staticmethod
    def _operating_point(metrics: dict) -> tuple[str, dict] | None:
        """``(IoU threshold, block)`` of ``operating_point`` at the run's IoU threshold, else its first."""
        blocks = metrics.get("operating_point")
        if not blocks:
            return None
        name = f"{metrics.get('iou_threshold', 0.5):g}"
        return (name, blocks[name]) if name in blocks else next(iter(blocks.items()))

    @staticmethod
    def _targets(metrics: dict) -> list[dict]:
        return ((metrics.get("risk_coverage") or {}).get("overall") or {}).get("operating_points") or []

    def headline_rows(self, metrics: dict) -> list[Row]:
        """Precision, recall and F1 at ``--score-threshold``; the score threshold and coverage of each precision target."""
        rows = []
        op = self._operating_point(metrics)
        if op is not None:
            t, point = op
            at = f"at score ≥ {point['score_threshold']:g} (IoU ≥ {t})"
            rows += [Row(f"operating_point.{t}.{k}", f"{label} {at}", point[k])
                     for k, label in (("precision", "Precision"), ("recall", "Recall"), ("f1", "F1"))]
        for i, p in enumerate(self._targets(metrics)):
            key = f"risk_coverage.overall.operating_points.{i}"
            goal = f"precision ≥ {p['precision_target']:g}"
            if p["met"]:
                rows += [Row(f"{key}.score_threshold", f"Lowest score threshold with {goal}", p["score_threshold"]),
                         Row(f"{key}.coverage", f"Share of predictions kept at {goal}", p["coverage"])]
            else:
                rows.append(Row(f"{key}.score_threshold", f"Lowest score threshold with {goal}", "not reached"))
        return rows

    def report_lines(self, metrics: dict) -> list[str]:
        """AP, the best F1 per threshold and the reliability table."""
        if "ap50" not in metrics:
            return []

        def num(value: object) -> str:
            return number(value, missing="–", text=markdown_text)

        def ci(key: str) -> str:
            return with_interval(metrics, key, missing="–", defined_only=True, text=markdown_text)

        lines = [
            "## Scores: AP and calibration",
            "",
            f"Scores from the column {markdown_text(metrics.get('score_column'))}. AP as pycocotools computes it (exact polygon IoU, "
            "the whole layer as one image, no cap on detections, matching in score order): "
            f"AP50 {ci('ap50')}, AP75 {ci('ap75')}, AP50:95 {ci('ap50_95')}.",
            "",
        ]
        if "ap50" in ((metrics.get("bootstrap") or {}).get("ci") or {}):
            bc = metrics.get("ap_interval") or {}
            lines += [
                "AP intervals may sit lopsided around their point: AP reads precision at 101 fixed recall levels, so it moves in "
                "steps across resamples and its bootstrap distribution is skewed, not centred on the point (docs/intervals.md, "
                "\"AP intervals\"). "
                + ("These are bias-corrected (`--ap-interval bc`); the point's quantile among its resamples: "
                   + ", ".join(f"{k} {number((bc.get('point_quantile') or {}).get(k), 2)}" for k in AP_KEYS)
                   + "; percentile intervals: " + ", ".join(f"{k}{interval_text((bc.get('percentile') or {}).get(k), missing='–')}"
                                                           for k in AP_KEYS) + "."
                   if bc.get("method") == "bc" else "`--ap-interval bc` gives the bias-corrected interval."),
                "",
            ]
        lines += [
            "| IoU ≥ | best F1 | at score ≥ | precision | recall |",
            "|---:|---|---|---|---|",
        ]
        for t, b in (metrics.get("best_f1") or {}).items():
            lines.append(f"| {t} | {num(b['f1'])} | {num(b['score'])} | {num(b['precision'])} | {num(b['recall'])} |")
        cal = metrics.get("calibration")
        if cal:
            lines += [
                "",
                f"Calibration against the main matching (matched at IoU ≥ {metrics['iou_threshold']}): ECE {num(cal['ece'])}, "
                f"Brier {num(cal['brier'])} over {cal['n']} predictions.",
                "",
                "| score bin | predictions | mean score | matched share |",
                "|---|---:|---|---|",
            ]
            for b in cal["bins"]:
                lines.append(f"| [{b['lower']:g}, {b['upper']:g}) | {b['n']} | {num(b['mean_score'])} | {num(b['accuracy'])} |")
        return lines + [""]

    def enabled(self, options: object) -> bool:
        return options.score_column is not None

    def columns(self, options: object) -> tuple[str, ...]:
        bins = range(options.calibration_bins)
        return (
            tuple(f"cal_{what}@{b}" for b in bins for what in ("n", "score", "y")) + ("cal_brier",)
        )

    def prediction_columns(self, ctx: PredContext) -> dict[str, dict[str, np.ndarray]]:
        p = ctx.preds
        score = p["score"].to_numpy(np.float64)
        y = p["matched"].to_numpy(bool).astype(np.float64)
        b = calibration_bin(score, ctx.options.calibration_bins)
        columns = {}
        for k in range(ctx.options.calibration_bins):
            inside = (b == k).astype(np.float64)
            columns[f"cal_n@{k}"] = inside
            columns[f"cal_score@{k}"] = inside * score
            columns[f"cal_y@{k}"] = inside * y
        columns["cal_brier"] = (score - y) ** 2
        return {"home": columns}

    def finalize(self, s, options):
        bins = range(options.calibration_bins)
        n = sum(np.asarray(s[f"cal_n@{b}"], dtype=np.float64) for b in bins)
        gap = sum(np.abs(np.asarray(s[f"cal_y@{b}"], dtype=np.float64) - s[f"cal_score@{b}"]) for b in bins)
        return {"ece": ratio(gap, n), "brier": ratio(s["cal_brier"], n)}

    def interval_keys(self, options: object) -> tuple[str, ...]:
        return ("ece", "brier")

    def block_interval_keys(self, options: object) -> tuple[str, ...]:
        return ()  # inside the calibration block

    def summarize(self, g: GroupView) -> dict[str, object]:
        B = g.options.calibration_bins
        bins = []
        for b in range(B):
            n = g.count(f"cal_n@{b}")
            mean_score, _ = ratio(g.sums[f"cal_score@{b}"], n)
            accuracy, _ = ratio(g.sums[f"cal_y@{b}"], n)
            upper = (b + 1) / B
            bins.append({"lower": b / B, "upper": upper, "n": n, "mean_score": float(mean_score), "accuracy": float(accuracy)})
        block: dict[str, object] = {
            "ece": g.point("ece", NULL),
            "brier": g.point("brier", NULL),
            "n": sum(e["n"] for e in bins),
            "bins": bins,
        }
        if g.ci:
            block["ci"] = {k: g.ci[k] for k in ("ece", "brier")}
            undefined = {k: g.n_undefined[k] for k in ("ece", "brier") if g.n_undefined.get(k)}
            if undefined:
                block["ci_n_undefined"] = undefined
        return {"calibration": block}

    def run_keys(self, options: object) -> dict[str, object]:
        return {"score_column": options.score_column}

    def run_level_rows(self, ctx: GlobalContext) -> dict[str, np.ndarray]:
        """Each prediction's score, COCO true positives, error and stratum (:class:`ScoreRows`), for the
        run-level values computed by score ranges on the workers (a resolve of some components:
        the score-ordered matching couples only predictions and references that are connected)."""
        return self._score_rows(ctx)[0].as_arrays()

    def run_level_on_workers(self, options: object) -> bool:
        """Always: with a bootstrap too, the replicates' AP and aurc are computed by score
        ranges (:mod:`evalcore.metrics.score_ranges`), each prediction weighed as drawn."""
        return True

    @staticmethod
    def _score_rows(ctx: GlobalContext) -> tuple[ScoreRows, list[str] | None, np.ndarray, np.ndarray]:
        """The context's predictions as :class:`ScoreRows` in score order, the strata, the order and the TP flags."""
        p = ctx.preds
        score = p["score"].to_numpy(np.float64)
        positions = p.index.to_numpy(np.int64)
        order, tp = coco_true_positives(score, positions, ctx.ref_pos, ctx.pairs)
        strata = _strata(ctx)
        code = _stratum_codes(strata, ctx.home_ref_row, ctx.ref_strata)
        rows = ScoreRows(positions[order], score[order], tp, ~p["matched"].to_numpy(bool)[order], code[order])
        return rows, strata, order, tp

    def global_values(self, ctx: GlobalContext) -> dict[str, object]:
        """AP, the PR curves, the best F1, the operating point and risk-coverage; the exact curves as tables.

        The whole run as one score range (:mod:`evalcore.metrics.score_ranges`), so the
        distributed run, by many ranges, gives the same bits.
        """
        options = ctx.options
        n_ref = len(ctx.ref_pos)
        rows, strata, order, tp = self._score_rows(ctx)
        n_groups = 1 + len(strata or ())
        total = range_counts(rows, n_groups)
        values, pr_parts, risk_parts = range_values(rows, RangeCounts.zero(n_groups), total, n_ref, options.score_threshold,
                                                    options.precision_targets)
        keys, blocks = run_keys(values, total, n_ref, options.score_threshold, options.precision_targets, strata)
        score = ctx.preds["score"].to_numpy(np.float64)
        groups = _RiskGroups.of(score, ctx.preds["matched"].to_numpy(bool), ctx.home_ref_row, ctx.ref_strata, strata)

        ap_values, aurc_values = np.empty((0, len(AP_THRESHOLDS))), np.empty((0, groups.n_groups))
        if ctx.replicate_weights is not None and n_ref == 0 and options.bootstrap_unit == "field":
            # No reference field to draw: every prediction is homeless and weighs 1 in every resample.
            aurc_values = np.array([groups.replicate_aurc(np.ones(len(score)))] * options.bootstrap)
        elif ctx.replicate_weights is not None:
            ap_values, aurc_values = replicate_ap_and_aurc(ctx.replicate_weights, tp, order, groups, n_ref > 0)
        ci, n_undefined, replicates = replicate_keys(keys, blocks, ap_values, aurc_values, options, n_ref,
                                                     ctx.replicate_weights is not None)
        table = pd.concat(pr_parts, ignore_index=True)
        risk_table = pd.concat([part.assign(stratum=name) for part, name in zip(risk_parts, [None, *(strata or ())])], ignore_index=True)
        return {"keys": keys, "ci": ci, "n_undefined": n_undefined, "tables": {"pr_curve": table, "risk_coverage": risk_table},
                "replicates": replicates}


def replicate_keys(keys: dict, blocks: list[dict], ap_values: np.ndarray, aurc_values: np.ndarray, options: object,
                   n_ref: int, bootstrap: bool) -> tuple[dict, dict, dict]:
    """The intervals of AP and aurc from their replicates (the single process's and the
    score ranges' on the workers alike): adds ``ap_interval`` to ``keys`` (the bias-corrected
    intervals) and each risk group's ``ci`` to ``blocks``.

    Parameters
    ----------
    ap_values : ndarray, shape (n_replicates or 0, len(AP_THRESHOLDS))
        Empty when the run has no reference field (AP undefined in every resample).
    aurc_values : ndarray, shape (n_replicates or 0, n_groups)
    bootstrap : bool
        Whether the run has a bootstrap.

    Returns
    -------
    ci, n_undefined, replicates : dict
    """
    ci, n_undefined, replicates = {}, {}, {}
    if bootstrap and n_ref == 0:
        # Undefined in every resample, like any rate without a denominator.
        ci = {k: [float("nan"), float("nan")] for k in AP_KEYS}
        n_undefined = dict.fromkeys(ci, options.bootstrap)
    if len(ap_values):
        reps = np.asarray(ap_values)
        replicates = {"ap50": reps[:, 0], "ap75": reps[:, AP_THRESHOLDS.index(0.75)], "ap50_95": reps.mean(axis=1)}
        ci, n_undefined = percentile_intervals({k: (v, ~np.isnan(v)) for k, v in replicates.items()})
        if options.ap_interval == "bc":
            # The percentile bounds stay in ap_interval.percentile; ci holds the BC ones.
            points = {k: np.nan if keys[k] is None else float(keys[k]) for k in replicates}
            bc, _, where = bias_corrected_intervals({k: (v, ~np.isnan(v)) for k, v in replicates.items()}, points)
            keys["ap_interval"] = {"method": "bc", "percentile": {k: [_none(b) for b in ci[k]] for k in replicates},
                                   "point_quantile": {k: _none(q) for k, q in where.items()}}
            ci = {**ci, **bc}
    if len(aurc_values):
        per_group = np.asarray(aurc_values)  # (replicates, groups)
        n_groups = per_group.shape[1]
        group_ci, group_undefined = percentile_intervals({g: (per_group[:, g], ~np.isnan(per_group[:, g])) for g in range(n_groups)})
        for g, block in enumerate(blocks):
            block["ci"] = {"aurc": [_none(v) for v in group_ci[g]]}
            if group_undefined[g]:
                block["ci_n_undefined"] = {"aurc": group_undefined[g]}
        replicates["aurc"] = per_group[:, 0]
        ci["aurc"], n_undefined["aurc"] = group_ci[0], group_undefined[0]
    return ci, n_undefined, replicates


def _strata(ctx: GlobalContext) -> list[str] | None:
    """The run's strata (None: a run without strata): the plan's, else those of the context's references, sorted."""
    if ctx.ref_strata is None:
        return None
    if ctx.strata_names is not None:
        return [str(v) for v in ctx.strata_names]
    return sorted({str(v) for v in ctx.ref_strata.tolist() if v is not None})


def _stratum_codes(strata: list[str] | None, home_ref_row: np.ndarray, ref_strata: np.ndarray | None) -> np.ndarray:
    """Each prediction's stratum (index in ``strata``), its home reference's; -1 without a home or a stratum."""
    code = np.full(len(home_ref_row), -1, dtype=np.int64)
    if ref_strata is None or not strata:
        return code
    lookup = {name: k for k, name in enumerate(strata)}
    ref_code = np.array([-1 if v is None else lookup.get(str(v), -1) for v in ref_strata.tolist()], dtype=np.int64)
    has = home_ref_row >= 0
    code[has] = ref_code[home_ref_row[has]]
    return code


REPLICATE_CHUNK_BYTES = 32 * 2**20
"""Memory of one chunk of replicate weights (replicates x predictions, float64) in
:func:`replicate_ap_and_aurc`; two chunks are alive at a time."""


def replicate_ap_and_aurc(
    replicate_weights: Callable[[], Iterator[tuple[np.ndarray, float]]],
    tp: np.ndarray,
    order: np.ndarray,
    groups: _RiskGroups,
    with_ap: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """AP per threshold and every group's aurc in every bootstrap replicate.

    The replicates' weights are generated one after the other (each regenerates its
    draws, :attr:`GlobalContext.replicate_weights`) into chunks of
    :data:`REPLICATE_CHUNK_BYTES`; while this thread fills the next chunk, two others
    run the kernels (:func:`evalcore._score_kernels._replicate_envelope`,
    ``_replicate_ap_of``, ``_replicate_aurc_digits``, which release the GIL) on the two
    halves of the last, so the draws and the arithmetic use the cores the workers leave
    idle during the resolve phase. The run is one score range of
    :mod:`evalcore.metrics.score_ranges`' replicates (nothing ahead of it): the same
    kernels as a run by ranges on the workers, so the same bits. The aurc is
    ``_weighted_curve``'s (its terms' exact sum over the group's weight).

    Returns
    -------
    ap : ndarray, shape (n_replicates, n_thresholds)
        Empty (0, n_thresholds) when ``with_ap`` is False.
    aurc : ndarray, shape (n_replicates, n_groups)
    """
    from concurrent.futures import ThreadPoolExecutor

    n_pred = len(order)
    chunk = replicates_per_chunk(n_pred, REPLICATE_CHUNK_BYTES)
    members = np.concatenate(groups.members).astype(np.int64) if groups.members else np.empty(0, np.int64)
    member_start = np.concatenate([[0], np.cumsum([len(m) for m in groups.members])]).astype(np.int64)
    last = np.concatenate(groups.last) if groups.last else np.empty(0, bool)
    error = np.ascontiguousarray(groups.error, dtype=np.float64)
    eps = float(np.spacing(1))
    tp_flags = np.ascontiguousarray(tp, dtype=np.float64)

    units = np.asarray(_UNITS)
    n_thr = tp.shape[0]

    def kernels(weights: np.ndarray, n_refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # The whole run as one score range: nothing ahead of it (score_ranges' replicates).
        n = len(weights)
        counts = as_counts(weights)  # the kernels' small integer type, the same bits
        if with_ap:
            nothing = np.zeros((n, n_thr))
            envelope = _replicate_envelope(tp_flags, counts, n_refs, nothing, nothing, REC_THRS, eps, NO_POINT)
            ap = _replicate_ap_of(envelope, n_refs, NO_POINT)
        else:
            ap = np.empty((n, n_thr))
        nothing = np.zeros((n, groups.n_groups))
        aurc_digits = _replicate_aurc_digits(error, counts, members, member_start, last, nothing, nothing, units)
        weight = np.stack([weights[:, m].sum(axis=1) for m in groups.members], axis=1)  # whole numbers: exact
        with np.errstate(divide="ignore", invalid="ignore"):
            aurc = np.where(weight > 0.0, value_of(aurc_digits) / np.where(weight > 0.0, weight, 1.0), np.nan)
        return ap, aurc

    def submit(pool, weights: np.ndarray, n_refs: np.ndarray) -> list:
        # Two halves of the chunk on two threads: each replicate is computed on its own,
        # so the halves give the bits of the whole.
        half = (len(weights) + 1) // 2
        return [pool.submit(kernels, weights[a:b], n_refs[a:b]) for a, b in ((0, half), (half, len(weights))) if b > a]

    ap_parts, aurc_parts = [], []

    def collect(futures: list) -> None:
        for future in futures:
            ap, au = future.result()
            ap_parts.append(ap)
            aurc_parts.append(au)

    with ThreadPoolExecutor(2, thread_name_prefix="evalcore-replicates") as pool:
        pending: list = []
        rows: list[np.ndarray] = []
        n_refs: list[float] = []
        for pred_weights, n_ref_b in replicate_weights():
            rows.append(np.asarray(pred_weights, dtype=np.float64)[order])
            n_refs.append(n_ref_b)
            if len(rows) == chunk:
                collect(pending)
                pending = submit(pool, np.stack(rows), np.asarray(n_refs, dtype=np.float64))
                rows, n_refs = [], []
        collect(pending)
        if rows:
            collect(submit(pool, np.stack(rows), np.asarray(n_refs, dtype=np.float64)))
    n_thr, n_groups = tp.shape[0], groups.n_groups
    ap = np.concatenate(ap_parts) if ap_parts and with_ap else np.empty((0, n_thr))
    aurc = np.concatenate(aurc_parts) if aurc_parts else np.empty((0, n_groups))
    return ap, aurc


class _RiskGroups:
    """The predictions in score order, with their groups: overall (group 0), then each stratum (sorted).

    A prediction is in its home reference's stratum; one without a home, or whose home
    has no stratum, only overall (SPEC 5).
    """

    def __init__(self, order: np.ndarray, score_sorted: np.ndarray, error_sorted: np.ndarray, code_sorted: np.ndarray,
                 strata: list[str]):
        self.order = order
        self.score = score_sorted
        self.error = error_sorted
        self.strata = strata  # group k + 1 is the stratum of code k
        self.members = [np.arange(len(order))] + [np.flatnonzero(code_sorted == k) for k in range(len(strata))]
        self.last = [step_ends(score_sorted[m]) for m in self.members]

    @property
    def n_groups(self) -> int:
        return len(self.members)

    @classmethod
    def of(cls, score: np.ndarray, matched: np.ndarray, home_ref_row: np.ndarray, ref_strata: np.ndarray | None,
           strata: list[str] | None = None) -> _RiskGroups:
        """``strata``: the run's (default: those of ``ref_strata``, sorted)."""
        order = np.lexsort((np.arange(len(score)), -score)).astype(np.int64)
        if strata is None and ref_strata is not None:
            strata = sorted({str(v) for v in ref_strata.tolist() if v is not None})
        code = _stratum_codes(strata, home_ref_row, ref_strata)
        return cls(order, score[order], (~matched[order]).astype(np.float64), code[order], list(strata or ()))

    def curve(self, g: int) -> pd.DataFrame:
        m = self.members[g]
        return risk_coverage(self.score[m], self.error[m] == 0.0)

    def block(self, g: int, targets: tuple[float, ...] | None) -> dict[str, object]:
        curve = self.curve(g)
        m = self.members[g]
        value = _weighted_curve(self.error[m], np.ones(len(m)), self.last[g])[2]
        out: dict[str, object] = {
            "n": len(m),
            "n_errors": int(self.error[m].sum()),
            "aurc": _none(value),
            "curve": _thinned(curve, ("score", "coverage", "risk")),
        }
        if targets is not None:
            out["operating_points"] = operating_points(curve, targets)
        return out

    def replicate_aurc(self, pred_weights: np.ndarray) -> np.ndarray:
        """Every group's aurc with the predictions weighed as one replicate draws them."""
        w = np.asarray(pred_weights, dtype=np.float64)[self.order]
        return np.array([_weighted_curve(self.error[m], w[m], last)[2] for m, last in zip(self.members, self.last)])

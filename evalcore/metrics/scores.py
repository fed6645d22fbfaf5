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

AP is not a sum: it is computed once, centrally, from the pairs and the scores (never
the geometries) by :meth:`Scores.global_values`. Its bootstrap intervals hold the
matching fixed and weigh each prediction by the draws of its home reference (homeless
predictions weigh 1), the reference count being the resample's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evalcore._score_kernels import _coco_match, _weighted_ap
from evalcore.bootstrap import percentile_intervals
from evalcore.config import IOU_MATCH_RTOL, IOU_SWEEP_THRESHOLDS
from evalcore.metrics.base import NULL, GlobalContext, GroupView, MetricFamily, Option, PredContext, ratio
from evalcore.metrics.checks import optional_text, positive_int

__all__ = ["Scores", "score_values", "calibration_bin", "coco_true_positives", "coco_ap", "pr_curve"]

AP_THRESHOLDS: tuple[float, ...] = IOU_SWEEP_THRESHOLDS
"""The ten IoU thresholds of AP (SPEC 6: the decimals 0.50 ... 0.95)."""

REC_THRS = np.linspace(0.0, 1.0, 101)
"""COCO's 101 recall points (as pycocotools builds them)."""

PR_THRESHOLDS: tuple[float, ...] = (0.5, 0.75)
"""IoU thresholds of the published precision-recall curves."""

MAX_CURVE_POINTS = 1000
"""Points of a PR curve in the summary (the exact curve goes to a Parquet file)."""


def _score_or_none(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or not (0.0 <= float(value) <= 1.0):
        raise ValueError(f"{name} must be a score in [0, 1] or None, but got {value!r}.")
    return float(value)


def _parse_score(text: str) -> float | None:
    return None if text.strip().lower() == "none" else float(text)


def score_values(layer: object, column: str, where: str, *, label: str = "score column") -> np.ndarray:
    """The scores of a layer's rows as float64, checked: a numeric column, finite, in [0, 1].

    The one check of a score column: the library's (``label`` "score column") and the
    command line's (``label`` "--score-column") messages differ only by that label.

    Raises
    ------
    EvalInputError
        Naming the layer, the column and the first bad row (0-based; a chunk of a file,
        indexed by its rows' positions, names the row in the file), or listing the
        numeric columns when the column is missing.
    """
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    from evalcore.errors import EvalInputError

    columns = [str(c) for c in getattr(layer, "columns", []) if c != getattr(layer, "geometry", pd.Series()).name]
    if column not in columns:
        numeric = [c for c in columns if is_numeric_dtype(layer[c]) and not is_bool_dtype(layer[c])]
        raise EvalInputError(
            f"{label} {column!r} is not a column of the {where}; its numeric columns are: "
            f"{', '.join(map(repr, numeric)) or '(none)'}."
        )
    index = getattr(layer, "index", None)

    def row_name(row: int) -> int:
        return int(index[row]) if isinstance(index, pd.RangeIndex) else row

    values = pd.Series(layer[column]).reset_index(drop=True)
    if is_bool_dtype(values) or not is_numeric_dtype(values):
        numbers = pd.to_numeric(values, errors="coerce")
        bad = np.flatnonzero(numbers.isna().to_numpy() & values.notna().to_numpy())
        row = int(bad[0]) if len(bad) else 0
        raise EvalInputError(
            f"{label} {column!r} of the {where} is not numeric (dtype {values.dtype}): row {row_name(row)} (0-based) holds "
            f"{_plain(values.iloc[row])!r}. Scores must be numbers in [0, 1]; convert the column or choose another one."
        )
    v = values.to_numpy(dtype=np.float64, na_value=np.nan)
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(~np.isfinite(v) | (v < 0.0) | (v > 1.0))
    if len(bad):
        row = int(bad[0])
        what = "missing" if np.isnan(v[row]) else "not finite" if not np.isfinite(v[row]) else "outside [0, 1]"
        raise EvalInputError(
            f"{label} {column!r} of the {where}: row {row_name(row)} (0-based) holds {_plain(values.iloc[row])!r}, which is {what} "
            f"({len(bad)} of {len(v)} rows are not finite numbers in [0, 1]). Fix or remove those rows."
        )
    return v


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
    from evalcore.quantities import index_of

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
    tps = np.cumsum(tp).astype(np.float64)
    fps = np.cumsum(~tp).astype(np.float64)
    last = np.ones(len(score_sorted), dtype=bool)
    last[:-1] = score_sorted[1:] != score_sorted[:-1]
    tps, fps, s = tps[last], fps[last], score_sorted[last]
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = tps / (tps + fps)
        recall = tps / n_ref if n_ref > 0 else np.full(len(tps), np.nan)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), np.where(np.isnan(recall), np.nan, 0.0))
    return pd.DataFrame({"score": s, "precision": precision, "recall": recall, "f1": f1, "tp": tps.astype(np.int64), "fp": fps.astype(np.int64)})


def _none(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else float(v)


def _thinned(curve: pd.DataFrame) -> dict[str, list]:
    rows = np.arange(len(curve))
    if len(curve) > MAX_CURVE_POINTS:
        rows = np.unique(np.round(np.linspace(0, len(curve) - 1, MAX_CURVE_POINTS)).astype(np.int64))
    part = curve.iloc[rows]
    return {k: [_none(v) for v in part[k].to_numpy(np.float64)] for k in ("score", "precision", "recall", "f1")}


def _point(curve: pd.DataFrame, row: int | None, n_ref: int) -> dict[str, float | None]:
    if row is None:
        return {"score": None, "precision": None, "recall": 0.0 if n_ref > 0 else None, "f1": None}
    r = curve.iloc[row]
    return {k: _none(float(r[k])) for k in ("score", "precision", "recall", "f1")}


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
    )

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

    def global_values(self, ctx: GlobalContext) -> dict[str, object]:
        """AP, the PR curves, the best F1 and the operating point; the exact curves as tables."""
        p = ctx.preds
        options = ctx.options
        score = p["score"].to_numpy(np.float64)
        positions = p.index.to_numpy(np.int64)
        n_ref = len(ctx.ref_pos)
        order, tp = coco_true_positives(score, positions, ctx.ref_pos, ctx.pairs)
        ap = coco_ap(tp, n_ref)
        keys: dict[str, object] = {
            "ap50": _none(ap[0]),
            "ap75": _none(ap[AP_THRESHOLDS.index(0.75)]),
            "ap50_95": _none(float(np.mean(ap))) if n_ref > 0 else None,
            "ap_per_threshold": [_none(v) for v in ap],
            "ap_iou_thresholds": list(AP_THRESHOLDS),
        }
        curves, best, operating, tables = {}, {}, {}, []
        score_sorted = score[order]
        for t in PR_THRESHOLDS:
            curve = pr_curve(tp[AP_THRESHOLDS.index(t)], score_sorted, n_ref)
            name = f"{t:g}"
            curves[name] = _thinned(curve)
            f1 = curve["f1"].to_numpy(np.float64)
            best[name] = _point(curve, int(np.nanargmax(f1)) if np.isfinite(f1).any() else None, n_ref)
            if options.score_threshold is not None:
                kept = np.flatnonzero(curve["score"].to_numpy() >= options.score_threshold)
                point = _point(curve, int(kept[-1]) if len(kept) else None, n_ref)
                operating[name] = {**point, "score_threshold": options.score_threshold}
            tables.append(curve.assign(iou_threshold=t))
        keys["pr_curve"] = curves
        keys["best_f1"] = best
        if options.score_threshold is not None:
            keys["operating_point"] = operating
        ci, n_undefined = {}, {}
        if ctx.replicate_weights is not None and n_ref == 0:
            # Undefined in every resample, like any rate without a denominator.
            ci = {k: [float("nan"), float("nan")] for k in ("ap50", "ap75", "ap50_95")}
            n_undefined = dict.fromkeys(ci, options.bootstrap)
        elif ctx.replicate_weights is not None:
            values = []
            for pred_weights, n_ref_b in ctx.replicate_weights():
                values.append(coco_ap(tp, n_ref_b, pred_weights[order]))
            reps = np.asarray(values)
            ci, n_undefined = percentile_intervals({
                "ap50": (reps[:, 0], ~np.isnan(reps[:, 0])),
                "ap75": (reps[:, AP_THRESHOLDS.index(0.75)], ~np.isnan(reps[:, AP_THRESHOLDS.index(0.75)])),
                "ap50_95": (reps.mean(axis=1), ~np.isnan(reps.mean(axis=1))),
            })
        table = pd.concat(tables, ignore_index=True)[["iou_threshold", "score", "precision", "recall", "f1", "tp", "fp"]]
        replicates = {}
        if ctx.replicate_weights is not None and n_ref > 0:
            replicates = {"ap50": reps[:, 0], "ap75": reps[:, AP_THRESHOLDS.index(0.75)], "ap50_95": reps.mean(axis=1)}
        return {"keys": keys, "ci": ci, "n_undefined": n_undefined, "tables": {"pr_curve": table}, "replicates": replicates}

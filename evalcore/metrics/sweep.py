"""IoU-threshold sweep (SPEC 6.1, seed 001): the detection counts at every threshold.

One matching serves the whole sweep. Greedy one-to-one matching visits pairs by
descending IoU, so the pairs eligible at a threshold t are a prefix of its visiting
order and the matching at t is the matching at the lowest threshold restricted to the
pairs with IoU >= t; under many-to-one each field keeps its best prediction while that
prediction's IoU reaches t. A prediction's home at t is its matched home (the base
matching's) while the match reaches t, else its largest-overlap reference: so each
prediction adds to at most two reference rows, and the sweep costs four summed columns
per threshold, not a resolve per threshold.

The optimal matcher (``matching="max_weight"``, SPEC 6.11) has no such shortcut: the
optimum at a higher threshold can keep a pair the optimum at a lower one gave up for two
lighter ones. Under it the sweep solves each threshold (:meth:`Sweep.pair_values`, next to
the main matching) and counts a prediction matched at t on its match's reference row (a
reference column: the match is a pair of that field) and an unmatched one at its
largest-overlap reference, as :func:`evalcore.matching.resolve` homes it at t.
"""

from __future__ import annotations

import numpy as np

from evalcore.arrays import index_of
from evalcore.config import IOU_SWEEP_THRESHOLDS
from evalcore.matching import eligible, match_max_weight
from evalcore.metrics.base import RATE, GroupView, MetricFamily, Option, PairContext, PredContext, RefContext, count_rates, ratio
from evalcore.metrics.checks import thresholds

__all__ = ["Sweep", "parse_thresholds"]


def parse_thresholds(text: str) -> tuple[float, ...] | None:
    """``0.5,0.75`` -> (0.5, 0.75); ``none`` -> None (no sweep); ``default`` -> the ten SPEC thresholds."""
    word = text.strip().lower()
    if word == "none":
        return None
    if word == "default":
        return IOU_SWEEP_THRESHOLDS
    try:
        return tuple(float(part) for part in text.split(",") if part.strip() != "") or ()
    except ValueError:
        raise ValueError(
            f"--iou-sweep-thresholds {text!r}: expected comma-separated thresholds like 0.5,0.75, or 'none'"
        ) from None


def _name(t: float) -> str:
    return f"{t:g}"


def _match_key(t: float) -> str:
    """Pair value holding the optimal matching at threshold t (``max_weight`` only)."""
    return f"sweep_match@{_name(t)}"


class Sweep(MetricFamily):
    name = "sweep"
    options = (
        Option(
            "iou_sweep_thresholds", IOU_SWEEP_THRESHOLDS,
            "IoU thresholds of the sweep, comma-separated and increasing, or 'none' "
            "(default 0.5,0.55,...,0.95)",
            thresholds, parse=parse_thresholds, annotation=list[float] | None,
        ),
    )

    def enabled(self, options: object) -> bool:
        return options.iou_sweep_thresholds is not None

    def lowest_threshold(self, options: object) -> float | None:
        return options.iou_sweep_thresholds[0]

    def columns(self, options: object) -> tuple[str, ...]:
        return tuple(
            f"sweep_{what}@{_name(t)}"
            for t in options.iou_sweep_thresholds
            for what in ("tp", "iou", "n_pred", "n_pred_matched")
        )

    def pair_values(self, ctx: PairContext) -> dict[str, np.ndarray]:
        if ctx.options.matching != "max_weight":
            return {}  # the greedy matchers' sweep reads the base matching
        main = ctx.options.iou_threshold
        return {
            _match_key(t): ctx.base_match.copy() if t == main else match_max_weight(ctx.pairs, t)
            for t in ctx.options.iou_sweep_thresholds
        }

    def reference_columns(self, ctx: RefContext) -> dict[str, np.ndarray]:
        if ctx.options.matching == "max_weight":
            return self._optimal_reference_columns(ctx)
        matched = np.flatnonzero(ctx.pair_values["base_match"])
        row = ctx.row_of_pair[matched]
        iou_of_match = np.full(ctx.n, np.nan)  # every field has at most one base match; NaN: none
        iou_of_match[row] = ctx.pairs.iou[matched]
        out = {}
        for t in ctx.options.iou_sweep_thresholds:
            tp = eligible(iou_of_match, t)
            out[f"sweep_tp@{_name(t)}"] = tp.astype(np.float64)
            out[f"sweep_iou@{_name(t)}"] = np.where(tp, iou_of_match, 0.0)
        return out

    def _optimal_reference_columns(self, ctx: RefContext) -> dict[str, np.ndarray]:
        """Per threshold: the field's match at t, which is also where its prediction counts."""
        out = {}
        for t in ctx.options.iou_sweep_thresholds:
            matched = np.flatnonzero(ctx.pair_values[_match_key(t)])
            row = ctx.row_of_pair[matched]  # one match per field: no repeated rows
            tp = np.zeros(ctx.n)
            tp[row] = 1.0
            iou = np.zeros(ctx.n)
            iou[row] = ctx.pairs.iou[matched]
            k = _name(t)
            out[f"sweep_tp@{k}"] = tp
            out[f"sweep_iou@{k}"] = iou
            out[f"sweep_n_pred_matched@{k}"] = tp
            out[f"sweep_n_pred@{k}"] = tp.copy()  # plus the unmatched ones homed here (prediction columns)
        return out

    def prediction_columns(self, ctx: PredContext) -> dict[str, dict[str, np.ndarray]]:
        if ctx.options.matching == "max_weight":
            at_overlap = {}
            positions = ctx.preds.index.to_numpy(np.int64)
            for t in ctx.options.iou_sweep_thresholds:
                matched = np.zeros(len(positions), dtype=bool)
                matched[index_of(positions, ctx.pairs.pred_pos[ctx.pair_values[_match_key(t)]])] = True
                at_overlap[f"sweep_n_pred@{_name(t)}"] = (~matched).astype(np.float64)
            return {"overlap": at_overlap}
        base_iou = ctx.preds["base_home_iou"].to_numpy(np.float64)
        at_base: dict[str, np.ndarray] = {}
        at_overlap: dict[str, np.ndarray] = {}
        for t in ctx.options.iou_sweep_thresholds:
            matched = eligible(base_iou, t)  # NaN (no base match) is never eligible
            at_base[f"sweep_n_pred@{_name(t)}"] = matched.astype(np.float64)
            at_base[f"sweep_n_pred_matched@{_name(t)}"] = matched.astype(np.float64)
            # Unmatched at t: home is the largest-overlap reference (or none: unassigned).
            at_overlap[f"sweep_n_pred@{_name(t)}"] = (~matched).astype(np.float64)
        return {"base_home": at_base, "overlap": at_overlap}

    def finalize(self, s, options):
        out = {}
        n_ref = np.asarray(s["n_ref"], dtype=np.float64)
        for t in options.iou_sweep_thresholds:
            k = _name(t)
            tp = np.asarray(s[f"sweep_tp@{k}"], dtype=np.float64)
            fp = np.asarray(s[f"sweep_n_pred@{k}"], dtype=np.float64) - s[f"sweep_n_pred_matched@{k}"]
            for m, value in zip(("precision", "recall", "f1"), count_rates(tp, fp, n_ref - tp)):
                out[f"iou_sweep@{k}.{m}"] = value
            out[f"iou_sweep@{k}.iou_mean"] = ratio(s[f"sweep_iou@{k}"], tp)
        return out

    def interval_keys(self, options: object) -> tuple[str, ...]:
        return tuple(f"iou_sweep@{_name(t)}.{m}" for t in options.iou_sweep_thresholds for m in ("precision", "recall", "f1"))

    def block_interval_keys(self, options: object) -> tuple[str, ...]:
        return ()  # published inside each sweep entry

    def replicate_columns(self, options: object) -> tuple[str, ...]:
        # The intervals are the rates': the IoU sums only make the point values' means.
        return tuple(c for c in self.columns(options) if not c.startswith("sweep_iou@"))

    def summarize(self, g: GroupView) -> dict[str, object]:
        entries = []
        for t in g.options.iou_sweep_thresholds:
            k = _name(t)
            n_pred = g.count(f"sweep_n_pred@{k}")
            tp = g.count(f"sweep_tp@{k}")
            entry: dict[str, object] = {
                "iou_threshold": t,
                "precision": g.point(f"iou_sweep@{k}.precision", RATE),
                "recall": g.point(f"iou_sweep@{k}.recall", RATE),
                "f1": g.point(f"iou_sweep@{k}.f1", RATE),
                "iou_mean": g.point(f"iou_sweep@{k}.iou_mean", RATE),
                "count_tp": tp,
                "count_fp": n_pred - g.count(f"sweep_n_pred_matched@{k}"),
                "count_fn": g.count("n_ref") - tp,
            }
            if g.ci:
                entry["ci"] = {m: g.ci[f"iou_sweep@{k}.{m}"] for m in ("precision", "recall", "f1")}
                undefined = {m: g.n_undefined[f"iou_sweep@{k}.{m}"] for m in ("precision", "recall", "f1")}
                if any(undefined.values()):
                    entry["ci_n_undefined"] = {m: n for m, n in undefined.items() if n}
            entries.append(entry)
        return {"iou_sweep": entries}

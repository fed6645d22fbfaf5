"""The scores' curves by score ranges (issue 29): any cut of score space gives the whole run's bits.

The distributed run cuts score space at sampled scores, computes each range's share of AP,
the PR curves and the risk-coverage curves from the counts of the ranges ahead of it, and
merges the shares. Here random scores with many ties, random flags and random cuts: the
merged keys and the ranges' table rows must equal the one-range computation (the single
process) to the bit, and AP must equal the pycocotools-arithmetic kernel
(:func:`evalcore.metrics.scores.coco_ap`, an independent loop).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from evalcore.metrics.score_ranges import (
    AP_THRESHOLDS,
    RangeCounts,
    ScoreRows,
    prefix_counts,
    range_counts,
    range_of,
    range_values,
    run_keys,
    splitters,
)
from evalcore.metrics.scores import coco_ap


def _rows(data: st.DataObject, n: int, n_strata: int) -> ScoreRows:
    levels = data.draw(st.lists(st.sampled_from([0.0, 0.05, 0.1, 0.25, 0.3, 0.5, 0.55, 0.7, 0.75, 0.9, 1.0]), min_size=1, max_size=6))
    score = np.array(data.draw(st.lists(st.sampled_from(levels), min_size=n, max_size=n)), dtype=np.float64)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    # TP flags thinning as the threshold rises, as the matching's do (any flags would do here).
    base = rng.random(n)
    tp = np.stack([base < 0.8 - 0.05 * k for k in range(len(AP_THRESHOLDS))])
    pos = rng.permutation(10 * n)[:n].astype(np.int64)
    error = rng.random(n) < 0.4
    group = rng.integers(-1, n_strata, n).astype(np.int64) if n_strata else np.full(n, -1, np.int64)
    return ScoreRows(pos, score, tp, error, group).in_score_order()


def _by_ranges(rows: ScoreRows, cuts: np.ndarray, n_ref: int, threshold: float | None, targets: tuple | None, n_groups: int):
    which = range_of(rows.score, cuts)
    parts = [rows.take(np.flatnonzero(which == k)) for k in range(len(cuts) + 1)]
    before, total = prefix_counts([range_counts(p, n_groups) for p in parts], n_groups)
    merged, pr_parts, risk_parts = None, [], []
    for part, ahead in zip(parts, before):
        values, pr, risk = range_values(part, ahead, total, n_ref, threshold, targets)
        merged = values if merged is None else merged + values
        pr_parts.append(pr)
        risk_parts.append(risk)
    keys, _ = run_keys(merged, total, n_ref, threshold, targets, [f"s{k}" for k in range(n_groups - 1)] or None)
    pr_table = pd.concat([p[i] for i in range(len(pr_parts[0])) for p in pr_parts], ignore_index=True)
    risk_table = pd.concat([p[g].assign(group=g) for g in range(n_groups) for p in risk_parts], ignore_index=True)
    return keys, pr_table, risk_table, total


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(0, 60), n_ref=st.integers(0, 40), n_strata=st.integers(0, 2))
def test_any_cut_of_score_space_gives_the_whole_runs_bits(data, n, n_ref, n_strata):
    rows = _rows(data, n, n_strata)
    threshold = data.draw(st.sampled_from([None, 0.0, 0.5, 0.55, 0.95]))
    targets = data.draw(st.sampled_from([None, (0.5,), (0.6, 0.9, 1.0)]))
    distinct = sorted(set(rows.score.tolist()) | {0.2, 0.6}, reverse=True)
    cuts = np.array(sorted(data.draw(st.sets(st.sampled_from(distinct), max_size=5)), reverse=True), dtype=np.float64)
    n_groups = 1 + n_strata
    whole = _by_ranges(rows, np.empty(0), n_ref, threshold, targets, n_groups)
    split = _by_ranges(rows, cuts, n_ref, threshold, targets, n_groups)
    assert split[0] == whole[0] or _same_with_nan(split[0], whole[0])
    pd.testing.assert_frame_equal(split[1], whole[1], check_exact=True)
    pd.testing.assert_frame_equal(split[2], whole[2], check_exact=True)
    # AP: pycocotools' arithmetic, as the bootstrap's kernel computes it (another loop).
    ap = coco_ap(rows.tp, n_ref)
    got = np.array([np.nan if v is None else v for v in split[0]["ap_per_threshold"]])
    np.testing.assert_array_equal(got, np.where(np.isfinite(ap), ap, np.nan))
    assert split[3].n == n and split[3].steps == len(set(rows.score.tolist()))


def _same_with_nan(a: object, b: object) -> bool:
    """Equality where NaN equals NaN (None is how the keys spell an undefined value, but be safe)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_with_nan(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_with_nan(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return a == b


def test_hand_worked_ranges():
    # Scores 0.9, 0.8, 0.8, 0.4 (two tied): TP at 0.5 for the first and the third; 2 references.
    tp = np.zeros((len(AP_THRESHOLDS), 4), bool)
    tp[0] = [True, False, True, False]
    rows = ScoreRows(np.array([3, 0, 1, 2]), np.array([0.9, 0.8, 0.8, 0.4]), tp, np.array([False, True, False, True]),
                     np.full(4, -1)).in_score_order()
    keys, pr, risk, total = _by_ranges(rows, np.array([0.8]), 2, 0.5, (0.6,), 1)
    # PR at 0.5 after each distinct score: (1/1, 1/2), (2/3, 2/2), (2/4, 2/2)
    assert pr[pr["iou_threshold"] == 0.5][["precision", "recall"]].values.tolist() == [[1.0, 0.5], [2 / 3, 1.0], [0.5, 1.0]]
    # AP50: recall points <= 0.5 read precision 1, the rest 2/3 (envelope): (51 + 50 * (2/3 with eps)) / 101
    eps = np.spacing(1)
    expected = 0.0
    for r in np.linspace(0, 1, 101):
        expected += (1.0 / (0.0 + 1.0 + eps)) if r <= 0.5 else (2.0 / (1.0 + 2.0 + eps))
    assert keys["ap50"] == expected / 101
    assert keys["best_f1"]["0.5"]["score"] == 0.8 and keys["operating_point"]["0.5"]["score"] == 0.8
    # Risk: steps at coverage 1/4 (risk 0), 3/4 (risk 1/3), 1 (risk 1/2); aurc = (1*0 + 2*(1/3) + 1*(1/2)) / 4
    assert keys["aurc"] == (2 * (1 / 3) + 0.5) / 4
    assert keys["risk_coverage"]["overall"]["operating_points"][0]["score_threshold"] == 0.8
    assert total.steps == 3


def test_range_of_and_splitters():
    assert range_of(np.array([1.0, 0.5, 0.5, 0.0]), np.array([0.5])).tolist() == [0, 1, 1, 1]
    cuts = splitters(np.array([0.1, 0.2, 0.2, 0.9, 0.5, 0.7]), 3)
    assert np.all(np.diff(cuts) < 0) and len(cuts) <= 2
    assert len(splitters(np.array([0.3, 0.3]), 4)) == 0 and len(splitters(np.array([0.3, 0.4]), 1)) == 0
    assert RangeCounts.zero(2).n == 0


def test_long_curves_thin_to_the_same_points_whatever_the_cuts():
    """Over :data:`MAX_CURVE_POINTS` distinct scores the summary shows evenly spread rows of
    the whole curve: each range must pick those falling in it, from its offset."""
    rng = np.random.default_rng(7)
    n = 3000
    score = np.round(rng.random(n), 4)  # about 2,600 distinct scores, some ties
    base = rng.random(n)
    tp = np.stack([base < 0.7 - 0.05 * k for k in range(len(AP_THRESHOLDS))])
    rows = ScoreRows(np.arange(n, dtype=np.int64), score, tp, rng.random(n) < 0.3, rng.integers(-1, 2, n)).in_score_order()
    whole = _by_ranges(rows, np.empty(0), 2000, 0.5, (0.7, 0.8), 3)
    assert whole[3].steps > 1000 and len(whole[0]["pr_curve"]["0.5"]["score"]) == 1000
    for n_cuts in (1, 7, 40):
        cuts = np.sort(rng.choice(np.unique(score), n_cuts, replace=False))[::-1]
        split = _by_ranges(rows, cuts, 2000, 0.5, (0.7, 0.8), 3)
        assert split[0] == whole[0]
        pd.testing.assert_frame_equal(split[1], whole[1], check_exact=True)

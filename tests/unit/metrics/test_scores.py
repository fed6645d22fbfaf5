"""Scores (SPEC 6.5): COCO AP, precision-recall curves, calibration.

* AP is checked against pycocotools itself (``COCOeval``, ``iouType="bbox"``) on
  axis-aligned rectangles given in EPSG:6933: the equal-area CRS, so no geometry is
  reprojected and the exact polygon IoU of a pair is its box IoU. The harness below
  makes the whole layer one image and one category, with one area range covering
  everything and no cap on detections (``maxDets`` larger than the layer).
* Everything else is worked out by hand in the comments, on strips of
  ``tests.common.strip`` (one unit = 100 m, 100 m high, in EPSG:6933).
* Bad input goes through the ``evalcore`` command line, called in this process.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd
import pytest
from shapely.geometry import box

import evalcore
from evalcore.metrics.scores import REC_THRS, calibration_bin, coco_ap
from tests.common import EA, cli_in_process, layer, strips

THRESHOLDS = [round(0.5 + 0.05 * k, 2) for k in range(10)]


def is_null(v: object) -> bool:
    """Undefined: None (JSON null) or NaN (its Python form, SPEC 6)."""
    return v is None or (isinstance(v, float) and math.isnan(v))


# --------------------------------------------------------------------------------------
# The pycocotools harness
# --------------------------------------------------------------------------------------


def pycoco_ap(gts: np.ndarray, dts: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """pycocotools' AP per IoU threshold (0.50 ... 0.95) of boxes (x0, y0, x1, y1).

    One image, one category, area range [0, 1e12] ("all"), maxDets above the number of
    detections. -1 where pycocotools has no value (no ground truth).
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    def xywh(b):
        x0, y0, x1, y1 = (float(v) for v in b)
        return [x0, y0, x1 - x0, y1 - y0]

    ds = {
        "images": [{"id": 1, "width": 10**7, "height": 10**7}],
        "categories": [{"id": 1, "name": "field"}],
        "annotations": [
            {"id": i + 1, "image_id": 1, "category_id": 1, "bbox": xywh(b), "area": xywh(b)[2] * xywh(b)[3], "iscrowd": 0}
            for i, b in enumerate(gts)
        ],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = ds
        gt.createIndex()
        res = [{"image_id": 1, "category_id": 1, "bbox": xywh(b), "score": float(s)} for b, s in zip(dts, scores)]
        dt = gt.loadRes(res) if res else COCO()
        E = COCOeval(gt, dt, "bbox")
        E.params.maxDets = [len(dts) + 1] * 3
        E.params.areaRng = [[0, 1e12]]
        E.params.areaRngLbl = ["all"]
        E.evaluate()
        E.accumulate()
    p = E.eval["precision"][:, :, 0, 0, -1]  # T x R, K = 0, A = 0, M = -1
    assert p.shape == (10, 101)
    return np.array([np.mean(r[r > -1]) if (r > -1).any() else -1.0 for r in p])


def box_layers(gts: np.ndarray, dts: np.ndarray, scores: np.ndarray):
    """(predicted, reference) GeoDataFrames in EPSG:6933 of boxes (x0, y0, x1, y1)."""
    ref = geopandas.GeoDataFrame(geometry=[box(*b) for b in gts], crs=EA)
    pred = geopandas.GeoDataFrame({"score": np.asarray(scores, dtype=np.float64)}, geometry=[box(*b) for b in dts], crs=EA)
    return pred, ref


def ours(gts, dts, scores, **kwargs) -> dict:
    pred, ref = box_layers(np.asarray(gts, dtype=float).reshape(-1, 4), np.asarray(dts, dtype=float).reshape(-1, 4), scores)
    return evalcore.evaluate(pred, ref, score_column="score", iou_sweep_thresholds=None, **kwargs)


def random_boxes(seed: int, *, n: int = 60, m: int = 70, extent: float = 2000.0, decimals: int | None = 1):
    """``n`` reference boxes near (1e6, 1e6) m and ``m`` jittered copies (with duplicates)."""
    rng = np.random.default_rng(seed)
    x, y = rng.uniform(0, extent, n), rng.uniform(0, extent, n)
    w, h = rng.uniform(20, 80, n), rng.uniform(20, 80, n)
    gts = np.column_stack([x, y, x + w, y + h]) + 1e6
    src = rng.integers(0, n, m)
    sigma = rng.uniform(0.3, 8.0, (m, 1))  # from near-copies (IoU > 0.95) to poor localisation
    dts = gts[src] + rng.normal(0, 1, (m, 4)) * sigma
    dts[:, 2] = np.maximum(dts[:, 2], dts[:, 0] + 1)
    dts[:, 3] = np.maximum(dts[:, 3], dts[:, 1] + 1)
    scores = rng.uniform(0, 1, m)
    if decimals is not None:
        scores = np.round(scores, decimals)  # many ties
    return gts, dts, scores


def assert_ap_matches_pycocotools(r: dict, theirs: np.ndarray) -> None:
    got = np.array([np.nan if v is None else v for v in r["ap_per_threshold"]])
    np.testing.assert_allclose(got, theirs, rtol=0, atol=1e-9)
    assert r["ap_iou_thresholds"] == THRESHOLDS
    assert r["ap50"] == pytest.approx(theirs[0], abs=1e-9)
    assert r["ap75"] == pytest.approx(theirs[5], abs=1e-9)
    assert r["ap50_95"] == pytest.approx(float(np.mean(theirs)), abs=1e-9)


# --------------------------------------------------------------------------------------
# 1. AP equals pycocotools
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed, extent, decimals",
    [(0, 2000.0, 1), (1, 2000.0, 1), (2, 600.0, 1), (3, 600.0, 1), (4, 400.0, 1), (5, 2000.0, None)],
    ids=["s0", "s1", "s2-dense", "s3-dense", "s4-denser", "s5-no-ties"],
)
def test_ap_equals_pycocotools_on_random_boxes(seed, extent, decimals):
    gts, dts, scores = random_boxes(seed, extent=extent, decimals=decimals)
    theirs = pycoco_ap(gts, dts, scores)
    assert (theirs > 0).all() and (theirs < 1).all()  # a non-trivial case at every threshold
    if decimals is not None:
        assert len(np.unique(scores)) < len(scores) / 3  # many ties
    assert_ap_matches_pycocotools(ours(gts, dts, scores), theirs)


def test_ap_without_references_is_null_as_pycocotools_has_none():
    _, dts, scores = random_boxes(0)
    theirs = pycoco_ap(np.zeros((0, 4)), dts, scores)
    assert (theirs == -1).all()
    r = ours(np.zeros((0, 4)), dts, scores)
    assert r["ap50"] is None and r["ap75"] is None and r["ap50_95"] is None
    assert r["ap_per_threshold"] == [None] * 10


def test_ap_without_predictions_is_zero_as_pycocotools():
    gts, _, _ = random_boxes(0)
    theirs = pycoco_ap(gts, np.zeros((0, 4)), np.zeros(0))
    assert (theirs == 0).all()
    r = ours(gts, np.zeros((0, 4)), np.zeros(0))
    assert r["ap50"] == 0.0 and r["ap75"] == 0.0 and r["ap50_95"] == 0.0
    assert r["ap_per_threshold"] == [0.0] * 10


# Equal IoUs. All coordinates are integers near 1e6, so every area is exact in doubles:
#   reference A = [-2, 8] x [0, 10], reference B = [2, 12] x [0, 10] (mirrored about P1)
#   P1 = [0, 10] x [0, 10], score 0.9: IoU 80 / 120 = 2/3 with A and with B (a tie)
# pycocotools keeps the last ">=" reference: P1 takes B (the later position). Then
#   P2 near A = [-3, 7] x [0, 10], score 0.5: IoU 90 / 110 with A, 50 / 150 with B
#   P2 near B = [3, 13] x [0, 10], score 0.5: IoU 50 / 150 with A, 90 / 110 with B
# At 0.5 (and up to 0.65): P2 near A finds A free (TP, AP 1); P2 near B finds B taken and
# A below the threshold (FP, AP 0.5 at every recall point up to 1/2: 51 / 101).
_C = 1_000_000.0
_A, _B = (_C - 2, _C, _C + 8, _C + 10), (_C + 2, _C, _C + 12, _C + 10)
_P1 = (_C, _C, _C + 10, _C + 10)
_NEAR_A, _NEAR_B = (_C - 3, _C, _C + 7, _C + 10), (_C + 3, _C, _C + 13, _C + 10)


@pytest.mark.parametrize(
    "second, tp_at_50, ap50",
    [(_NEAR_A, 2, 1.0), (_NEAR_B, 1, 51 / 101)],
    ids=["second-near-A-finds-it-free", "second-near-B-finds-it-taken"],
)
@pytest.mark.parametrize("swap", [False, True], ids=["A-first", "B-first"])
def test_equal_iou_takes_the_later_reference(second, tp_at_50, ap50, swap):
    gts = [_A, _B]
    if swap:  # B at position 0, A at position 1: now P1 takes A, the roles swap
        gts = [_B, _A]
        second = _NEAR_B if second == _NEAR_A else _NEAR_A
    dts, scores = np.array([_P1, second]), np.array([0.9, 0.5])
    pred, ref = box_layers(np.array(gts), dts, scores)
    r = evalcore.evaluate(pred, ref, score_column="score")
    assert r["ap50"] == pytest.approx(ap50, abs=1e-12)
    tables = evalcore.evaluate_tables(pred, ref, score_column="score")
    curve = tables.pr_curve[tables.pr_curve["iou_threshold"] == 0.5]
    assert curve["tp"].tolist() == [1, tp_at_50] and curve["fp"].tolist() == [0, 2 - tp_at_50]
    assert_ap_matches_pycocotools(r, pycoco_ap(np.array(gts), dts, scores))


def test_equal_scores_are_visited_by_position():
    """Two predictions of one score compete for one reference: the first position wins.

    R = [0, 10] x [0, 10]; Q0 = [1, 11] (IoU 90/110 = 0.818), Q1 = R itself (IoU 1),
    both 0.7. Up to 0.80, Q0 comes first and takes R: TP then FP, points (1, 1) and
    (1, 1/2), every recall point reads #0: AP 1 (the order within a tie counts for AP,
    unlike the PR curve). From 0.85 Q0 no longer qualifies: FP then TP, points (0, 0)
    and (1, 1/2), envelope 1/2 everywhere: AP 1/2.
    """
    gts = np.array([(_C, _C, _C + 10, _C + 10)])
    dts = np.array([(_C + 1, _C, _C + 11, _C + 10), (_C, _C, _C + 10, _C + 10)])
    scores = np.array([0.7, 0.7])
    r = ours(gts, dts, scores)
    assert_ap_matches_pycocotools(r, pycoco_ap(gts, dts, scores))
    assert r["ap_per_threshold"] == pytest.approx([1.0] * 7 + [0.5] * 3, abs=1e-12)
    # Swapped positions: Q1 (IoU 1) first takes R at every threshold: AP 1 throughout.
    r = ours(gts, dts[::-1], scores)
    assert r["ap_per_threshold"] == pytest.approx([1.0] * 10, abs=1e-12)
    # the main matching (by IoU) gives R to Q1 whatever the scores: not mixed with AP's
    pred, ref = box_layers(gts, dts, scores)
    tables = evalcore.evaluate_tables(pred, ref, score_column="score")
    assert tables.predictions["matched"].tolist() == [False, True]


def test_ties_are_broken_by_position_not_by_label():
    """The same two tied predictions as above, labelled 9 and 3: Q0 (label 9) still comes
    first, and the AP sweep stays [1] * 7 + [1/2] * 3."""
    gts = np.array([(_C, _C, _C + 10, _C + 10)])
    dts = np.array([(_C + 1, _C, _C + 11, _C + 10), (_C, _C, _C + 10, _C + 10)])
    pred, ref = box_layers(gts, dts, np.array([0.7, 0.7]))
    r = evalcore.evaluate(pred.set_index(pd.Index([9, 3])), ref, score_column="score")
    assert r["ap_per_threshold"] == pytest.approx([1.0] * 7 + [0.5] * 3, abs=1e-12)


def test_ap_intervals_without_references_are_undefined_not_missing():
    pred, _ = five_predictions()
    r = evalcore.evaluate(pred, layer([], EA), score_column="score", bootstrap=20)
    boot = r["bootstrap"]
    assert "recall" in boot["ci"] and boot["n_undefined"]["recall"] == 20  # how the others do it
    for key in ("ap50", "ap75", "ap50_95"):
        assert key in boot["ci"] and all(is_null(v) for v in boot["ci"][key]), key
        assert boot["n_undefined"].get(key) == 20, key


# --------------------------------------------------------------------------------------
# 2. AP by hand
# --------------------------------------------------------------------------------------


def hand_ap(points: list[tuple[float, float]]) -> float:
    """COCO's interpolation of (recall, precision) points written out by hand: the
    right-to-left envelope, then at each of 101 recall points the envelope at the first
    point whose recall reaches it (0 beyond the last)."""
    env = [max(p for _, p in points[i:]) for i in range(len(points))]
    total = 0.0
    for r in np.linspace(0.0, 1.0, 101):  # the recall points, as pycocotools builds them
        first = next((i for i, (rc, _) in enumerate(points) if rc >= r), None)
        total += 0.0 if first is None else env[first]
    return total / 101


def five_predictions():
    """Four reference strips, five predictions (scores 0.9 ... 0.5), in EPSG:6933.

    R0 = [0, 1]  R1 = [3, 4]  R2 = [6, 7]  R3 = [9, 10]      (R3 is never found)
    P0 = [0, 1]       0.9   IoU 1 with R0
    P1 = [20, 21]     0.8   overlaps nothing
    P2 = [0.1, 1.1]   0.7   IoU 0.9 / 1.1 = 0.818 with R0 (a duplicate: R0 is taken by then)
    P3 = [3.1, 4.1]   0.6   IoU 0.818 with R1
    P4 = [6.2, 7.2]   0.5   IoU 0.8 / 1.2 = 0.667 with R2
    """
    ref = layer(strips([(0, 1), (3, 4), (6, 7), (9, 10)], EA), EA)
    pred = layer(strips([(0, 1), (20, 21), (0.1, 1.1), (3.1, 4.1), (6.2, 7.2)], EA), EA, score=[0.9, 0.8, 0.7, 0.6, 0.5])
    return pred, ref


def test_ap_by_hand_on_five_predictions():
    pred, ref = five_predictions()
    r = evalcore.evaluate(pred, ref, score_column="score")
    # Thresholds 0.50 ... 0.65 (IoUs 1, 0.818, 0.818, 0.667 all qualify), n_ref = 4:
    #   score   0.9  0.8  0.7  0.6  0.5
    #   TP/FP   TP   FP   FP   TP   TP       (P2 is a FP: R0 is taken)
    #   cum TP  1    1    1    2    3
    #   cum FP  0    1    2    2    2
    #   prec    1    1/2  1/3  1/2  3/5
    #   recall  1/4  1/4  1/4  1/2  3/4
    #   envel.  1    3/5  3/5  3/5  3/5      (right to left maximum)
    #   recall points 0.00 ... 0.25 (26): first point reaching them is #0 -> 1
    #                 0.26 ... 0.50 (25): #3 -> 3/5 (its raw precision is 1/2)
    #                 0.51 ... 0.75 (25): #4 -> 3/5
    #                 0.76 ... 1.00 (25): none -> 0
    #   AP = (26 + 25 * 3/5 + 25 * 3/5) / 101 = 56 / 101
    low = (26 * 1 + 25 * 0.6 + 25 * 0.6) / 101
    assert low == pytest.approx(56 / 101, abs=1e-15)
    assert hand_ap([(0.25, 1), (0.25, 1 / 2), (0.25, 1 / 3), (0.5, 1 / 2), (0.75, 3 / 5)]) == pytest.approx(low, abs=1e-15)
    # Thresholds 0.70 ... 0.80 (P4's 0.667 fails):
    #   TP/FP   TP   FP   FP   TP   FP
    #   prec    1    1/2  1/3  1/2  2/5;  recall 1/4 1/4 1/4 1/2 1/2
    #   envel.  1    1/2  1/2  1/2  2/5
    #   AP = (26 * 1 + 25 * 1/2) / 101 = 38.5 / 101
    mid = (26 * 1 + 25 * 0.5) / 101
    assert hand_ap([(0.25, 1), (0.25, 1 / 2), (0.25, 1 / 3), (0.5, 1 / 2), (0.5, 2 / 5)]) == pytest.approx(mid, abs=1e-15)
    # Thresholds 0.85 ... 0.95 (only P0 qualifies): TP FP FP FP FP, recall 1/4 at most:
    #   AP = 26 / 101
    high = 26 / 101
    expected = [low] * 4 + [mid] * 3 + [high] * 3
    assert r["ap_per_threshold"] == pytest.approx(expected, abs=1e-12)
    assert r["ap50"] == pytest.approx(low, abs=1e-12)
    assert r["ap75"] == pytest.approx(mid, abs=1e-12)
    assert r["ap50_95"] == pytest.approx((4 * 56 + 3 * 38.5 + 3 * 26) / 1010, abs=1e-12)


def test_envelope_is_taken_right_to_left_on_a_hand_drawn_curve():
    # n_ref = 5, eight predictions in score order:
    #   TP/FP   F    T    F    F    T    T    F    T
    #   cum TP  0    1    1    1    2    3    3    4
    #   prec    0    1/2  1/3  1/4  2/5  1/2  3/7  1/2
    #   recall  0    .2   .2   .2   .4   .6   .6   .8
    #   envel.  1/2  1/2  1/2  1/2  1/2  1/2  1/2  1/2   (the last point's 1/2 carries left)
    #   A left-to-right running maximum would give 0, 1/2, 1/2, ...; no envelope would read
    #   2/5 at #4. Recall points: 0.00 -> #0 (rc 0 >= 0): 1/2; 0.01 ... 0.20 (20) -> #1: 1/2;
    #   0.21 ... 0.40 (20) -> #4: 1/2; 0.41 ... 0.60 (20) -> #5: 1/2; 0.61 ... 0.80 (20) ->
    #   #7: 1/2; 0.81 ... 1.00 (20): 0.   AP = 81 * 1/2 / 101
    tp = np.array([[False, True, False, False, True, True, False, True]])
    expected = 81 * 0.5 / 101
    points = [(0, 0), (0.2, 1 / 2), (0.2, 1 / 3), (0.2, 1 / 4), (0.4, 2 / 5), (0.6, 1 / 2), (0.6, 3 / 7), (0.8, 1 / 2)]
    assert hand_ap(points) == pytest.approx(expected, abs=1e-15)
    assert coco_ap(tp, 5)[0] == pytest.approx(expected, abs=1e-12)
    # A curve whose envelope differs from the raw precision at the points read:
    #   T F F T, n_ref 2: prec 1, 1/2, 1/3, 1/2; recall .5 .5 .5 1; envelope 1, 1/2, 1/2, 1/2
    #   0.00 ... 0.50 (51) -> #0: 1;  0.51 ... 1.00 (50) -> #3: 1/2.  AP = (51 + 25) / 101
    tp = np.array([[True, False, False, True]])
    assert coco_ap(tp, 2)[0] == pytest.approx((51 + 25) / 101, abs=1e-12)
    # ... and one where the envelope lifts a point that is read: T F T T F T, n_ref 4
    #   prec 1, 1/2, 2/3, 3/4, 3/5, 2/3; recall .25 .25 .5 .75 .75 1
    #   envelope 1, 3/4, 3/4, 3/4, 2/3, 2/3: recall 0.26 ... 0.50 read #2, lifted 2/3 -> 3/4
    #   AP = (26 * 1 + 25 * 3/4 + 25 * 3/4 + 25 * 2/3) / 101
    tp = np.array([[True, False, True, True, False, True]])
    assert coco_ap(tp, 4)[0] == pytest.approx((26 + 25 * 0.75 + 25 * 0.75 + 25 * 2 / 3) / 101, abs=1e-12)


def test_recall_points_are_pycocotools():
    assert np.array_equal(REC_THRS, np.linspace(0.0, 1.0, 101))


@pytest.mark.parametrize("seed", range(5))
def test_weighted_ap_equals_ap_of_repeated_predictions(seed):
    """The bootstrap's weights (SPEC 6.5): a prediction weighing k counts as k copies of
    itself, in place; weight 0 drops it. Checked against the unweighted AP of the
    repeated sequence (all ties of the copies are consecutive, so nothing reorders)."""
    rng = np.random.default_rng(seed)
    n = 40
    tp = rng.random((10, n)) < 0.6
    w = rng.integers(0, 4, n).astype(np.float64)
    n_ref = float(rng.integers(20, 60))
    repeated = np.repeat(tp, w.astype(int), axis=1)
    np.testing.assert_allclose(coco_ap(tp, n_ref, w), coco_ap(repeated, n_ref), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------------------
# 3. Calibration by hand
# --------------------------------------------------------------------------------------


def test_calibration_bin_edges_are_doubles_b_over_B():
    s = np.array([0.0, np.nextafter(0.1, 0), 0.1, 0.3, 0.30000000000000004, np.nextafter(0.3, 0), 0.7, 0.99, np.nextafter(1, 0), 1.0])
    assert calibration_bin(s, 10).tolist() == [0, 0, 1, 3, 3, 2, 7, 9, 9, 9]
    third = 1 / 3
    s = np.array([np.nextafter(third, 0), third, np.nextafter(2 / 3, 0), 2 / 3, 1.0])
    assert calibration_bin(s, 3).tolist() == [0, 1, 1, 2, 2]
    assert calibration_bin(np.array([0.0, 0.5, 1.0]), 1).tolist() == [0, 0, 0]


def calibration_layers():
    """Five reference strips (strata a, a, b, b, c) and five predictions whose scores sit on
    bin edges. Main matching at IoU 0.5 (y):

    R0 = [0, 1] a   R1 = [3, 4] a   R2 = [6, 7] b   R3 = [9, 10] b   R4 = [12, 13] c
    PA = [20, 21]      0.0    overlaps nothing, no home             y 0   (overall only)
    PB = [0, 1]        0.1    IoU 1 with R0                         y 1   (a)
    PC = [6, 7]        1.0    IoU 1 with R2                         y 1   (b)
    PD = [9.7, 10.7]   0.3    IoU 0.3 / 1.7 with R3, home R3        y 0   (b)
    PE = [3.1, 4.1]    0.35   IoU 0.818 with R1                     y 1   (a)
    """
    ref = layer(strips([(0, 1), (3, 4), (6, 7), (9, 10), (12, 13)], EA), EA, county=["a", "a", "b", "b", "c"])
    pred = layer(strips([(20, 21), (0, 1), (6, 7), (9.7, 10.7), (3.1, 4.1)], EA), EA, score=[0.0, 0.1, 1.0, 0.3, 0.35])
    return pred, ref


def assert_bins(bins: list[dict], expected: dict[int, tuple[int, float, float]], n_bins: int = 10) -> None:
    assert len(bins) == n_bins
    for b, entry in enumerate(bins):
        assert entry["lower"] == pytest.approx(b / n_bins, abs=1e-15) and entry["upper"] == pytest.approx((b + 1) / n_bins, abs=1e-15)
        if b in expected:
            n, mean_score, accuracy = expected[b]
            assert entry["n"] == n, (b, entry)
            assert entry["mean_score"] == pytest.approx(mean_score, abs=1e-12), (b, entry)
            assert entry["accuracy"] == pytest.approx(accuracy, abs=1e-12), (b, entry)
        else:
            assert entry["n"] == 0 and is_null(entry["mean_score"]) and is_null(entry["accuracy"]), (b, entry)


def test_ece_brier_and_reliability_bins_by_hand():
    pred, ref = calibration_layers()
    cal = evalcore.evaluate(pred, ref, score_column="score")["calibration"]
    # Bins of 0.1: PA (0.0) -> 0; PB (exactly 0.1) -> 1; PD (0.3 = 3/10) and PE (0.35) -> 3;
    # PC (1.0, the closed last bin) -> 9.
    #   bin 0: n 1, mean score 0,     accuracy 0    |0 - 0|           = 0
    #   bin 1: n 1, mean score 0.1,   accuracy 1    |1 - 0.1|         = 0.9
    #   bin 3: n 2, mean score 0.325, accuracy 0.5  |0.5 - 0.325| * 2 = 0.35
    #   bin 9: n 1, mean score 1,     accuracy 1    0
    # ECE = (1 * 0 + 1 * 0.9 + 2 * 0.175 + 1 * 0) / 5 = 1.25 / 5 = 0.25
    # Brier = (0^2 + 0.9^2 + 0^2 + 0.3^2 + 0.65^2) / 5 = (0.81 + 0.09 + 0.4225) / 5 = 0.2645
    assert cal["n"] == 5
    assert cal["ece"] == pytest.approx(0.25, abs=1e-12)
    assert cal["brier"] == pytest.approx(0.2645, abs=1e-12)
    assert_bins(cal["bins"], {0: (1, 0.0, 0.0), 1: (1, 0.1, 1.0), 3: (2, 0.325, 0.5), 9: (1, 1.0, 1.0)})


def test_calibration_with_four_bins():
    pred, ref = calibration_layers()
    cal = evalcore.evaluate(pred, ref, score_column="score", calibration_bins=4)["calibration"]
    # Bins of 0.25: 0.0, 0.1 -> 0 (y 0, 1); 0.3, 0.35 -> 1 (y 0, 1); 1.0 -> 3 (y 1).
    #   ECE = (|1 - 0.1| + |1 - 0.65| + |1 - 1|) / 5 = 1.25 / 5 = 0.25 (Brier as before)
    assert cal["ece"] == pytest.approx(0.25, abs=1e-12)
    assert cal["brier"] == pytest.approx(0.2645, abs=1e-12)
    assert_bins(cal["bins"], {0: (2, 0.05, 0.5), 1: (2, 0.325, 0.5), 3: (1, 1.0, 1.0)}, n_bins=4)


def test_calibration_per_stratum():
    pred, ref = calibration_layers()
    r = evalcore.evaluate(pred, ref, score_column="score", strata="county")
    per = r["per_stratum"]
    assert set(per) == {"a", "b", "c"}
    # a: PB (0.1, y 1) in bin 1, PE (0.35, y 1) in bin 3
    #    ECE = (0.9 + 0.65) / 2 = 0.775, Brier = (0.81 + 0.4225) / 2 = 0.61625
    a = per["a"]["calibration"]
    assert a["n"] == 2 and a["ece"] == pytest.approx(0.775, abs=1e-12) and a["brier"] == pytest.approx(0.61625, abs=1e-12)
    assert_bins(a["bins"], {1: (1, 0.1, 1.0), 3: (1, 0.35, 1.0)})
    # b: PC (1.0, y 1) in bin 9, PD (0.3, y 0, its home R3) in bin 3
    #    ECE = (0 + 0.3) / 2 = 0.15, Brier = (0 + 0.09) / 2 = 0.045
    b = per["b"]["calibration"]
    assert b["n"] == 2 and b["ece"] == pytest.approx(0.15, abs=1e-12) and b["brier"] == pytest.approx(0.045, abs=1e-12)
    assert_bins(b["bins"], {3: (1, 0.3, 0.0), 9: (1, 1.0, 1.0)})
    # c: no prediction -> n 0, ECE and Brier undefined, every bin empty
    c = per["c"]["calibration"]
    assert c["n"] == 0 and is_null(c["ece"]) and is_null(c["brier"])
    assert_bins(c["bins"], {})
    # PA (no home) counts overall only
    assert r["calibration"]["n"] == 5


def test_calibration_per_size_class():
    pred, ref = calibration_layers()
    # R0 ... R4 are 1 ha each: one class [0.5, 2] ha holds all five fields; PA has no home.
    r = evalcore.evaluate(pred, ref, score_column="score", size_bins=[0.5, 2.0, 5.0])
    classes = r["per_size_class"]
    full = next(v for v in classes.values() if v["n"] == 5)
    empty = next(v for v in classes.values() if v["n"] == 0)
    cal = full["calibration"]
    # PB, PC, PD, PE: ECE = (0.9 + |1 - 0.65| + 0) / 4 = 1.25 / 4; Brier = 1.3225 / 4
    assert cal["n"] == 4 and cal["ece"] == pytest.approx(1.25 / 4, abs=1e-12) and cal["brier"] == pytest.approx(1.3225 / 4, abs=1e-12)
    assert empty["calibration"]["n"] == 0 and is_null(empty["calibration"]["ece"])


def test_calibration_without_predictions_is_null():
    _, ref = calibration_layers()
    pred = layer([], EA, score=np.array([], dtype=np.float64))
    r = evalcore.evaluate(pred, ref, score_column="score")
    cal = r["calibration"]
    assert cal["n"] == 0 and is_null(cal["ece"]) and is_null(cal["brier"])
    assert_bins(cal["bins"], {})
    assert r["ap50"] == 0.0 and r["ap50_95"] == 0.0


def test_calibration_uses_the_main_matching_and_ap_the_score_order():
    """R = [0, 1]; Q0 = [0.2, 1.2] score 0.9 (IoU 0.8 / 1.2 = 0.667), Q1 = [0, 0.92]
    score 0.2 (IoU 0.92). The main matching (by IoU) gives R to Q1: y = (0, 1), Brier =
    (0.81 + 0.64) / 2 = 0.725, ECE = (0.9 + 0.8) / 2 = 0.85. The score-ordered matching
    gives R to Q0 up to 0.65: TP then FP, precision 1 at recall 1, AP 1; from 0.70 Q0
    fails and Q1 takes R: FP then TP, envelope 1/2 at every recall point: AP 1/2 up to
    0.90; at 0.95 nothing qualifies: 0."""
    ref = layer(strips([(0, 1)], EA), EA)
    pred = layer(strips([(0.2, 1.2), (0, 0.92)], EA), EA, score=[0.9, 0.2])
    r = evalcore.evaluate(pred, ref, score_column="score")
    assert r["calibration"]["brier"] == pytest.approx(0.725, abs=1e-12)
    assert r["calibration"]["ece"] == pytest.approx(0.85, abs=1e-12)
    assert r["ap_per_threshold"] == pytest.approx([1.0] * 4 + [0.5] * 5 + [0.0], abs=1e-12)
    assert r["count_tp"] == 1 and r["iou_mean"] == pytest.approx(0.92, abs=1e-9)


def test_calibration_follows_the_main_iou_threshold():
    """At iou_threshold 0.85, PE (IoU 0.818) is no longer matched: y = 0 for it.
    Bin 3 now holds 0.3 and 0.35 with no hit: |0 - 0.65| = 0.65.
    ECE = (0 + 0.9 + 0.65 + 0) / 5 = 0.31; Brier = (0.81 + 0.09 + 0.35^2) / 5 = 1.0225 / 5.
    AP is the COCO sweep, whatever iou_threshold is."""
    pred, ref = calibration_layers()
    r = evalcore.evaluate(pred, ref, score_column="score", iou_threshold=0.85)
    assert r["calibration"]["ece"] == pytest.approx(0.31, abs=1e-12)
    assert r["calibration"]["brier"] == pytest.approx(1.0225 / 5, abs=1e-12)
    assert_bins(r["calibration"]["bins"], {0: (1, 0.0, 0.0), 1: (1, 0.1, 1.0), 3: (2, 0.325, 0.0), 9: (1, 1.0, 1.0)})
    assert r["ap_per_threshold"] == evalcore.evaluate(pred, ref, score_column="score")["ap_per_threshold"]


def test_intervals_of_a_perfect_layer_are_degenerate():
    """Every prediction a TP of IoU 1 with score 1: AP 1 and ECE = Brier = 0 in every
    resample, whatever the draws."""
    ref = layer(strips([(3 * k, 3 * k + 1) for k in range(12)], EA), EA, county=["a", "b"] * 6)
    pred = layer(strips([(3 * k, 3 * k + 1) for k in range(12)], EA), EA, score=[1.0] * 12)
    r = evalcore.evaluate(pred, ref, score_column="score", bootstrap=25, strata="county")
    ci = r["bootstrap"]["ci"]
    assert ci["ap50"] == [1.0, 1.0] and ci["ap75"] == [1.0, 1.0] and ci["ap50_95"] == [1.0, 1.0]
    assert r["calibration"]["ci"] == {"ece": [0.0, 0.0], "brier": [0.0, 0.0]}
    for entry in r["per_stratum"].values():
        assert entry["calibration"]["ci"] == {"ece": [0.0, 0.0], "brier": [0.0, 0.0]}


def test_intervals_hold_the_point_estimates_on_random_boxes():
    gts, dts, scores = random_boxes(1, extent=600.0)
    pred, ref = box_layers(gts, dts, scores)
    r = evalcore.evaluate(pred, ref, score_column="score", bootstrap=50)
    ci = r["bootstrap"]["ci"]
    for key in ("ap50", "ap75", "ap50_95"):
        lo, hi = ci[key]
        assert 0.0 <= lo <= hi <= 1.0 and lo < hi, (key, ci[key])
        assert lo - 0.05 <= r[key] <= hi + 0.05, (key, r[key], ci[key])
    for key in ("ece", "brier"):
        lo, hi = r["calibration"]["ci"][key]
        assert 0.0 <= lo <= hi <= 1.0 and lo < hi


# --------------------------------------------------------------------------------------
# 4. PR curve, best F1, operating point
# --------------------------------------------------------------------------------------


def pr_layers():
    """R0 = [0, 1], R1 = [3, 4], R2 = [6, 7], R3 = [9, 10] (n_ref 4); predictions:

    Q0 = [20, 21]     0.8  overlaps nothing (FP), tied with Q2 and first by position
    Q1 = [0, 1]       0.9  IoU 1 with R0
    Q2 = [3, 4]       0.8  IoU 1 with R1
    Q3 = [6.2, 7.2]   0.5  IoU 0.667 with R2: TP at 0.5, FP at 0.75
    Q4 = [30, 31]     0.3  overlaps nothing (FP)
    """
    ref = layer(strips([(0, 1), (3, 4), (6, 7), (9, 10)], EA), EA)
    pred = layer(strips([(20, 21), (0, 1), (3, 4), (6.2, 7.2), (30, 31)], EA), EA, score=[0.8, 0.9, 0.8, 0.5, 0.3])
    return pred, ref


# After each distinct score (Q0 and Q2 enter together: no point with TP 1, FP 1):
#   IoU 0.5:  score  TP FP  precision  recall  F1
#             0.9    1  0   1          1/4     2 * 1/4 / (5/4)            = 2/5
#             0.8    2  1   2/3        1/2     2 * (1/3) / (7/6)          = 4/7
#             0.5    3  1   3/4        3/4     3/4                     <- best
#             0.3    3  2   3/5        3/4     2 * (9/20) / (27/20)       = 2/3
#   IoU 0.75: 0.9    1  0   1          1/4     2/5
#             0.8    2  1   2/3        1/2     4/7                     <- best
#             0.5    2  2   1/2        1/2     1/2
#             0.3    2  3   2/5        1/2     2 * (1/5) / (9/10)         = 4/9
PR_EXPECTED = {
    0.5: [(0.9, 1, 0, 1.0, 0.25, 0.4), (0.8, 2, 1, 2 / 3, 0.5, 4 / 7), (0.5, 3, 1, 0.75, 0.75, 0.75), (0.3, 3, 2, 0.6, 0.75, 2 / 3)],
    0.75: [(0.9, 1, 0, 1.0, 0.25, 0.4), (0.8, 2, 1, 2 / 3, 0.5, 4 / 7), (0.5, 2, 2, 0.5, 0.5, 0.5), (0.3, 2, 3, 0.4, 0.5, 4 / 9)],
}


def test_pr_curve_by_hand_ties_enter_together():
    pred, ref = pr_layers()
    r = evalcore.evaluate(pred, ref, score_column="score")
    tables = evalcore.evaluate_tables(pred, ref, score_column="score")
    table = tables.pr_curve
    assert list(table.columns) == ["iou_threshold", "score", "precision", "recall", "f1", "tp", "fp"]
    assert sorted(set(table["iou_threshold"])) == [0.5, 0.75]
    for t, rows in PR_EXPECTED.items():
        part = table[table["iou_threshold"] == t]
        assert len(part) == 4
        score, tp, fp, precision, recall, f1 = (list(c) for c in zip(*rows))
        assert part["score"].tolist() == score
        assert part["tp"].tolist() == tp and part["fp"].tolist() == fp
        np.testing.assert_allclose(part["precision"], precision, rtol=0, atol=1e-12)
        np.testing.assert_allclose(part["recall"], recall, rtol=0, atol=1e-12)
        np.testing.assert_allclose(part["f1"], f1, rtol=0, atol=1e-12)
        curve = r["pr_curve"][f"{t:g}"]
        assert set(curve) == {"score", "precision", "recall", "f1"}
        assert curve["score"] == score
        assert curve["precision"] == pytest.approx(precision, abs=1e-12)
        assert curve["recall"] == pytest.approx(recall, abs=1e-12)
        assert curve["f1"] == pytest.approx(f1, abs=1e-12)
    assert tables.predictions["score"].tolist() == [0.8, 0.9, 0.8, 0.5, 0.3]
    assert set(r["pr_curve"]) == {"0.5", "0.75"}


def test_best_f1_by_hand():
    pred, ref = pr_layers()
    best = evalcore.evaluate(pred, ref, score_column="score")["best_f1"]
    assert set(best) == {"0.5", "0.75"}
    assert best["0.5"] == pytest.approx({"score": 0.5, "precision": 0.75, "recall": 0.75, "f1": 0.75}, abs=1e-12)
    assert best["0.75"] == pytest.approx({"score": 0.8, "precision": 2 / 3, "recall": 0.5, "f1": 4 / 7}, abs=1e-12)


@pytest.mark.parametrize(
    "threshold, row50, row75",
    [
        (0.8, 1, 1),     # the tie at 0.8 is kept whole
        (0.85, 0, 0),    # only 0.9 is kept
        (0.6, 1, 1),     # between 0.8 and 0.5: the 0.8 point
        (0.5, 2, 2),
        (0.0, 3, 3),     # everything
    ],
)
def test_operating_point_by_hand(threshold, row50, row75):
    pred, ref = pr_layers()
    r = evalcore.evaluate(pred, ref, score_column="score", score_threshold=threshold)
    op = r["operating_point"]
    assert set(op) == {"0.5", "0.75"}
    for name, t, row in (("0.5", 0.5, row50), ("0.75", 0.75, row75)):
        score, _, _, precision, recall, f1 = PR_EXPECTED[t][row]
        expected = {"score": score, "precision": precision, "recall": recall, "f1": f1, "score_threshold": threshold}
        assert op[name] == pytest.approx(expected, abs=1e-12), (name, op[name])


def test_operating_point_above_every_score():
    pred, ref = pr_layers()
    op = evalcore.evaluate(pred, ref, score_column="score", score_threshold=0.95)["operating_point"]
    # nothing kept: no TP and no FP, precision and F1 undefined, recall 0 of 4
    for name in ("0.5", "0.75"):
        assert op[name]["score"] is None and is_null(op[name]["precision"]) and is_null(op[name]["f1"])
        assert op[name]["recall"] == 0.0 and op[name]["score_threshold"] == 0.95


def test_no_operating_point_without_a_threshold():
    pred, ref = pr_layers()
    assert "operating_point" not in evalcore.evaluate(pred, ref, score_column="score")


def test_no_score_keys_without_a_score_column():
    pred, ref = pr_layers()
    r = evalcore.evaluate(pred, ref)
    for key in ("ap50", "ap75", "ap50_95", "ap_per_threshold", "pr_curve", "best_f1", "calibration"):
        assert key not in r


def test_summary_curve_is_thinned_to_1000_points():
    """1 200 distinct scores: 1 200 rows per threshold in the table, at most 1 000 in the
    summary, each a row of the table, first and last included, in order."""
    n = 1200
    ref = layer(strips([(0, 1)], EA), EA)
    geoms = strips([(5 + 2 * k, 6 + 2 * k) for k in range(n)], EA)  # all background
    scores = np.linspace(0.999, 0.001, n)
    pred = layer(strips([(0, 1)], EA) + geoms, EA, score=np.concatenate([[1.0], scores]))
    tables = evalcore.evaluate_tables(pred, ref, score_column="score", iou_sweep_thresholds=None)
    r = tables.summary
    for t in (0.5, 0.75):
        part = tables.pr_curve[tables.pr_curve["iou_threshold"] == t].reset_index(drop=True)
        assert len(part) == n + 1
        curve = r["pr_curve"][f"{t:g}"]
        assert 900 <= len(curve["score"]) <= 1000
        assert curve["score"][0] == 1.0 and curve["score"][-1] == part["score"].iloc[-1]
        assert all(a > b for a, b in zip(curve["score"], curve["score"][1:]))
        rows = part.set_index("score")
        for s, p, rc in zip(curve["score"], curve["precision"], curve["recall"]):
            assert rows.loc[s, "precision"] == p and rows.loc[s, "recall"] == rc


# --------------------------------------------------------------------------------------
# 5. The command line
# --------------------------------------------------------------------------------------


def cli_layers(tmp_path: Path, **pred_columns: object) -> tuple[Path, Path]:
    ref_path, pred_path = tmp_path / "in" / "ref.parquet", tmp_path / "in" / "pred.parquet"
    ref_path.parent.mkdir(parents=True, exist_ok=True)
    layer(strips([(0, 1), (3, 4), (6, 7)], EA), EA).to_parquet(ref_path)
    columns = pred_columns or {"score": [0.9, 0.5, 0.2]}
    layer(strips([(0.1, 1.1), (3.1, 4.1), (20, 21)], EA), EA, **columns).to_parquet(pred_path)
    return pred_path, ref_path


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


# (id, predicted columns (None: good scores), extra arguments, must appear in the message)
BAD_CLI = [
    ("missing-column", {"score": [0.9, 0.5, 0.2], "pid": [1, 2, 3], "label": ["x", "y", "z"]}, ["--score-column", "confidence"],
     ["'confidence'", "'score'", "'pid'", "pred.parquet"]),
    ("non-numeric", {"score": ["0.9", "high", "0.2"]}, ["--score-column", "score"], ["'score'", "numeric", "row 1", "'high'"]),
    ("nan", {"score": [0.9, np.nan, 0.2]}, ["--score-column", "score"], ["'score'", "row 1", "missing"]),
    ("infinite", {"score": [0.9, 0.5, np.inf]}, ["--score-column", "score"], ["'score'", "row 2", "not finite"]),
    ("negative", {"score": [0.9, -0.5, 0.2]}, ["--score-column", "score"], ["'score'", "row 1", "-0.5", "outside [0, 1]"]),
    ("above-one", {"score": [1.5, 0.5, 0.2]}, ["--score-column", "score"], ["'score'", "row 0", "1.5"]),
    ("calibration-bins-0", None, ["--score-column", "score", "--calibration-bins", "0"], ["calibration", "0"]),
    ("score-threshold-1.5", None, ["--score-column", "score", "--score-threshold", "1.5"], ["threshold", "1.5"]),
]
GOOD_CLI = ("good", None, ["--score-column", "score", "--calibration-bins", "5", "--score-threshold", "0.5",
                           "--pr-curve-out", "{out}/pr.parquet", "-q"], [])


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """Every command-line case, each ``evalcore evaluate`` called in this process
    (tests.common.cli_in_process: the exit status and what it printed, without a
    subprocess's imports)."""
    done = {}
    for kind, columns, args, _ in [*BAD_CLI, GOOD_CLI]:
        root = tmp_path_factory.mktemp(kind)
        pred, ref = cli_layers(root, **(columns or {}))
        (root / "out").mkdir()
        out = root / "out" / "m.json"
        before = _files(root)
        run = cli_in_process("evaluate", "-p", pred, "-r", ref, "-o", out, *(a.format(out=root / "out") for a in args))
        done[kind] = {"status": run.returncode, "stdout": run.stdout, "stderr": run.stderr, "root": root, "out": out, "before": before}
    return done


@pytest.mark.parametrize("kind, needles", [(c[0], c[3]) for c in BAD_CLI], ids=[c[0] for c in BAD_CLI])
def test_bad_score_input_through_the_cli(cli_runs, kind, needles):
    run = cli_runs[kind]
    stderr = run["stderr"]
    assert run["status"] == 2, (run["status"], stderr)
    assert "Traceback" not in stderr + run["stdout"]
    assert stderr.count("\n") == 1 and stderr.startswith("evalcore: error: "), stderr
    for needle in needles:
        assert needle in stderr, (needle, stderr)
    assert not run["out"].exists()
    assert _files(run["root"]) == run["before"], "an output was left behind"


def test_missing_score_column_through_the_api_lists_the_numeric_columns():
    from evalcore.errors import EvalInputError

    pred, ref = pr_layers()
    pred = pred.assign(pid=np.arange(len(pred)), label=list("abcde"), flag=[True] * len(pred))
    with pytest.raises(EvalInputError) as info:
        evalcore.evaluate(pred, ref, score_column="confidence")
    message = str(info.value)
    assert "'confidence'" in message and "'score'" in message and "'pid'" in message
    assert "'label'" not in message and "'flag'" not in message


@pytest.mark.parametrize(
    "scores, needles",
    [([0.8, 0.9, np.nan, 0.5, 0.3], ["row 2", "missing"]), ([0.8, 0.9, 0.8, 1.0000001, -0.0], ["row 3", "outside [0, 1]"]),
     ([0.8, -np.inf, 0.8, 0.5, 0.3], ["row 1", "not finite"])],
    ids=["nan", "above-one", "minus-infinity"],
)
def test_bad_scores_through_the_api_name_the_row(scores, needles):
    from evalcore.errors import EvalInputError

    pred, ref = pr_layers()
    with pytest.raises(EvalInputError) as info:
        evalcore.evaluate(pred.assign(score=scores), ref, score_column="score")
    for needle in ["'score'", *needles]:
        assert needle in str(info.value), (needle, str(info.value))


def test_bad_score_message_through_the_api_shows_the_plain_value():
    from evalcore.errors import EvalInputError

    pred, ref = pr_layers()
    with pytest.raises(EvalInputError) as info:
        evalcore.evaluate(pred.assign(score=[0.8, 1.5, 0.8, 0.5, 0.3]), ref, score_column="score")
    assert "holds 1.5," in str(info.value) and "np.float64" not in str(info.value), str(info.value)


@pytest.mark.parametrize(
    "options", [{"calibration_bins": 0}, {"calibration_bins": -3}, {"score_threshold": 1.5}, {"score_threshold": -0.1}]
)
def test_bad_score_options_through_the_api(options):
    pred, ref = pr_layers()
    with pytest.raises((ValueError, TypeError)):
        evalcore.evaluate(pred, ref, score_column="score", **options)


def test_cli_writes_score_keys_and_the_exact_curve(cli_runs):
    run = cli_runs["good"]
    assert run["status"] == 0, run["stderr"]
    out, pr_out = run["out"], run["root"] / "out" / "pr.parquet"
    m = json.loads(out.read_text())
    # R0 = [0, 1], R1 = [3, 4], R2 = [6, 7]; P0 = [0.1, 1.1] 0.9 and P1 = [3.1, 4.1] 0.5
    # (IoU 0.818: TP up to 0.8), P2 = [20, 21] 0.2 (FP). At 0.5: TP TP FP, recall 1/3, 2/3,
    # 2/3; precision 1, 1, 2/3: AP = 67 / 101 (recall points 0 ... 0.66 read 1).
    assert m["ap50"] == pytest.approx(67 / 101, abs=1e-12)
    assert m["ap_per_threshold"][-3:] == [0.0, 0.0, 0.0]  # 0.85 ... 0.95: nothing qualifies
    cal = m["calibration"]
    assert len(cal["bins"]) == 5 and cal["n"] == 3
    # 0.2 -> bin 1 (0.2 = 1/5 exactly), 0.5 -> bin 2, 0.9 -> bin 4; bins 0 and 3 empty: null
    assert [b["n"] for b in cal["bins"]] == [0, 1, 1, 0, 1]
    assert cal["bins"][0]["mean_score"] is None and cal["bins"][3]["accuracy"] is None
    # ECE = (|0 - 0.2| + |1 - 0.5| + |1 - 0.9|) / 3 = 0.8 / 3; Brier = (0.04 + 0.25 + 0.01) / 3
    assert cal["ece"] == pytest.approx(0.8 / 3, abs=1e-12) and cal["brier"] == pytest.approx(0.1, abs=1e-12)
    assert m["operating_point"]["0.5"] == pytest.approx(
        {"score": 0.5, "precision": 1.0, "recall": 2 / 3, "f1": 0.8, "score_threshold": 0.5}, abs=1e-12
    )
    table = pd.read_parquet(pr_out)
    assert list(table.columns) == ["iou_threshold", "score", "precision", "recall", "f1", "tp", "fp"]
    assert table[table["iou_threshold"] == 0.5]["tp"].tolist() == [1, 2, 2]
    assert table[table["iou_threshold"] == 0.75]["fp"].tolist() == [0, 0, 1]

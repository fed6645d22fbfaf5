"""Geometry quality (SPEC 6.11): panoptic quality, the matched-IoU distribution, Dice,
area bias and boundary IoU, by hand.

Layouts are strips in EPSG:6933 (tests.common.strip: a unit is 100 m wide, every strip
100 m high, areas exact), so a prediction inside a 1-unit field with width x has IoU x
exactly. Boundary IoU is checked on squares and regular polygons in metres, where the
inner band of a convex polygon is the polygon minus a similar one (the negative buffer
of a convex polygon keeps its corners sharp), so the band areas have closed forms.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shapely.geometry import Point, box

from evalcore import evaluate, evaluate_frame, evaluate_tables
from evalcore.boundary import inner_band, pair_boundary_iou
from evalcore.metrics.quality import iou_distribution
from tests.common import EA, UTM, X0, Y0, empty_layer, layer, run_cli, scenario_a, square, strip, strips

QUANTILE_KEYS = ("q05", "q10", "q25", "median", "q75", "q90")


def naive_rect_boundary_iou(r: tuple[float, ...], p: tuple[float, ...], d: float) -> float:
    """Boundary IoU of two axis-aligned rectangles (x0, y0, x1, y1) by inclusion-exclusion.

    The inner band of a rectangle R is R minus I, I = R shrunk by d on every side (empty
    when a side is at most 2d). With I1 in R1 and I2 in R2:
    |band1 ∩ band2| = |R1∩R2| - |I1∩R2| - |R1∩I2| + |I1∩I2|, every term a rectangle overlap.
    """

    def shrink(a):
        x0, y0, x1, y1 = a[0] + d, a[1] + d, a[2] - d, a[3] - d
        return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None

    def overlap(a, b):
        if a is None or b is None:
            return 0.0
        return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))

    i1, i2 = shrink(r), shrink(p)
    inter = overlap(r, p) - overlap(i1, p) - overlap(r, i2) + overlap(i1, i2)
    band1, band2 = overlap(r, r) - overlap(i1, i1), overlap(p, p) - overlap(i2, i2)
    return inter / (band1 + band2 - inter)


def panopticapi_pq(ious: list[float], fp: int, fn: int) -> tuple[float, float, float]:
    """panopticapi's pq_compute for one category, written out: the matched IoUs, FP and FN."""
    tp = len(ious)
    if tp + fp + fn == 0:
        return 0.0, 0.0, 0.0  # panopticapi skips the category; evalcore says null (tested apart)
    sq = sum(ious) / tp if tp else 0.0
    rq = tp / (tp + 0.5 * fp + 0.5 * fn)
    return sq * rq, sq, rq


# --------------------------------------------------------------------------------------
# Panoptic quality
# --------------------------------------------------------------------------------------


def test_pq_of_scenario_a_by_hand():
    # Scenario A (tests.common): R0-P0 IoU 0.9 and R2-P2 IoU 0.6 match; P1 (1/3), P3 (0.4)
    # and P4 (nothing) are FP; R1 and R3 are FN. TP 2, FP 3, FN 2:
    # SQ = 1.5 / 2 = 0.75, RQ = 2 / (2 + 1.5 + 1) = 4/9, PQ = 1.5 / 4.5 = 1/3.
    pred, ref = scenario_a(EA)
    m = evaluate(pred, ref)
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (2, 3, 2)
    assert m["sq"] == pytest.approx(0.75, rel=1e-12)
    assert m["rq"] == pytest.approx(4 / 9, rel=1e-12)
    assert m["pq"] == pytest.approx(1 / 3, rel=1e-12)
    hand = panopticapi_pq([0.9, 0.6], fp=3, fn=2)
    assert (m["pq"], m["sq"], m["rq"]) == pytest.approx(hand, rel=1e-12)
    # SPEC 6.11: sq is iou_mean, rq is f1, pq = sq x rq
    assert m["sq"] == pytest.approx(m["iou_mean"], rel=1e-15)
    assert m["rq"] == pytest.approx(m["f1"], rel=1e-15)
    assert m["pq"] == pytest.approx(m["sq"] * m["rq"], rel=1e-15)


def test_pq_counts_a_pair_at_exactly_half_unlike_the_literature():
    # P = [0, 1] in R = [0, 2]: IoU exactly 0.5. evalcore matches it (IoU >= 0.5 (1 - 1e-9)):
    # TP 1, PQ = SQ = RQ... = 0.5 x 1. panopticapi's strict IoU > 0.5 would give TP 0,
    # FP 1, FN 1 and PQ 0 (docs/metrics.md, "Geometry quality").
    ref = layer([strip(0, 2, EA)], EA)
    pred = layer([strip(0, 1, EA)], EA)
    m = evaluate(pred, ref)
    assert m["count_tp"] == 1
    assert (m["pq"], m["sq"], m["rq"]) == pytest.approx((0.5, 0.5, 1.0), rel=1e-12)
    assert panopticapi_pq([], fp=1, fn=1) == (0.0, 0.0, 0.0)


def test_pq_is_zero_without_a_match_and_null_when_both_layers_are_empty():
    # Predictions only: TP 0, FP 2: PQ, SQ, RQ 0 as panopticapi.
    m = evaluate(layer(strips([(0, 1), (3, 4)], EA), EA), empty_layer(EA))
    assert (m["pq"], m["sq"], m["rq"]) == (0.0, 0.0, 0.0)
    assert m["iou_distribution"]["count"] == 0 and math.isnan(m["iou_distribution"]["median"])
    assert math.isnan(m["dice_mean"]) and math.isnan(m["area_bias"]) and math.isnan(m["matched_area_bias"])
    # References only, none matched: 0 as well.
    m = evaluate(empty_layer(EA), layer([strip(0, 1, EA)], EA))
    assert (m["pq"], m["sq"], m["rq"]) == (0.0, 0.0, 0.0)
    assert m["area_bias"] == -1.0
    # Both empty: null (SPEC 6: never 1).
    m = evaluate(empty_layer(EA), empty_layer(EA))
    assert all(math.isnan(m[k]) for k in ("pq", "sq", "rq", "dice_mean", "area_bias", "matched_area_bias"))


# --------------------------------------------------------------------------------------
# IoU distribution, Dice, area bias
# --------------------------------------------------------------------------------------

# Six fields of 1 unit at x = 3k, each with a prediction [3k, 3k + w] inside it (IoU w),
# one unmatched prediction of 1 unit far away (FP) and one field without a prediction (FN).
WIDTHS = [0.5, 0.6, 0.75, 0.8, 0.9, 1.0]


def _hand_layers():
    refs = [strip(3 * k, 3 * k + 1, EA) for k in range(len(WIDTHS))] + [strip(30, 31, EA)]
    preds = [strip(3 * k, 3 * k + w, EA) for k, w in enumerate(WIDTHS)] + [strip(40, 41, EA)]
    return layer(preds, EA), layer(refs, EA, stratum=["a", "a", "a", "b", "b", "b", "b"])


def test_iou_distribution_dice_and_area_bias_by_hand():
    pred, ref = _hand_layers()
    m = evaluate(pred, ref)
    d = m["iou_distribution"]
    assert d["count"] == 6 == m["count_tp"]
    assert d["min"] == pytest.approx(0.5, rel=1e-12) and d["max"] == pytest.approx(1.0, rel=1e-12)
    # median of six sorted values: (0.75 + 0.8) / 2; q25: position 1.25 -> 0.6 + 0.25 x 0.15
    assert d["median"] == pytest.approx(0.775, rel=1e-12)
    assert d["q25"] == pytest.approx(0.6375, rel=1e-12)
    # q05: position 0.25 -> 0.5 + 0.25 x 0.1; q90: position 4.5 -> 0.9 + 0.5 x 0.1
    assert d["q05"] == pytest.approx(0.525, rel=1e-12)
    assert d["q90"] == pytest.approx(0.95, rel=1e-12)
    expected = np.quantile(WIDTHS, [0.05, 0.10, 0.25, 0.5, 0.75, 0.9])
    assert [d[k] for k in QUANTILE_KEYS] == pytest.approx(expected.tolist(), rel=1e-12)
    assert m["dice_mean"] == pytest.approx(np.mean([2 * w / (1 + w) for w in WIDTHS]), rel=1e-12)
    # Σ reference 7 units, Σ predicted 4.55 + 1 = 5.55: (5.55 - 7) / 7; matched: (4.55 - 6) / 6
    assert m["area_bias"] == pytest.approx((5.55 - 7) / 7, rel=1e-9)
    assert m["matched_area_bias"] == pytest.approx((4.55 - 6) / 6, rel=1e-9)


def test_groups_get_their_own_quality_keys():
    pred, ref = _hand_layers()
    m = evaluate(pred, ref, strata="stratum", size_bins=[0, 1, 10])
    a, b = m["per_stratum"]["a"], m["per_stratum"]["b"]
    # a: IoUs 0.5, 0.6, 0.75; nothing unmatched in it. PQ = SQ = 0.6166..., RQ 1
    assert a["iou_distribution"]["count"] == 3 and a["iou_distribution"]["median"] == pytest.approx(0.6, rel=1e-12)
    assert (a["pq"], a["sq"], a["rq"]) == pytest.approx((1.85 / 3, 1.85 / 3, 1.0), rel=1e-12)
    # b: IoUs 0.8, 0.9, 1.0 and the FN field; the far FP has no home, so it counts overall only.
    # TP 3, FP 0, FN 1: RQ = 3 / 3.5, PQ = 2.7 / 3.5
    assert (b["pq"], b["sq"], b["rq"]) == pytest.approx((2.7 / 3.5, 0.9, 3 / 3.5), rel=1e-12)
    assert b["area_bias"] == pytest.approx((2.7 - 4) / 4, rel=1e-9)
    # every field is 1 ha: the class [0, 1) is empty (null), [1, 10] holds all
    empty, full = m["per_size_class"]["0-1"], m["per_size_class"]["1-10"]
    assert empty["n"] == 0 and math.isnan(empty["pq"]) and empty["iou_distribution"]["count"] == 0
    assert full["pq"] == pytest.approx(4.55 / (6 + 0.5), rel=1e-12)  # the homeless FP is not in a size class


def test_iou_distribution_helper():
    assert iou_distribution(np.array([0.2, np.nan, 0.4, 0.9])) == pytest.approx(
        {"count": 3, "min": 0.2, **dict(zip(QUANTILE_KEYS, np.quantile([0.2, 0.4, 0.9], [0.05, 0.1, 0.25, 0.5, 0.75, 0.9]))), "max": 0.9})
    one = iou_distribution(np.array([0.7]))
    assert all(one[k] == 0.7 for k in ("min", *QUANTILE_KEYS, "max"))


def test_bootstrap_intervals_of_the_new_rates():
    pred, ref = scenario_a(EA)
    m = evaluate(pred, ref, bootstrap=30, boundary_iou_width_m=10.0)
    ci = m["bootstrap"]["ci"]
    for key in ("pq", "sq", "rq", "dice_mean", "area_bias", "matched_area_bias", "boundary_iou_mean"):
        assert key in ci and ci[key][0] <= ci[key][1], key
    # medians and quantiles have none (SPEC 5)
    assert "boundary_iou_median" not in ci and "iou_distribution" not in ci


# --------------------------------------------------------------------------------------
# Boundary IoU: closed forms
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("side, width", [(10.0, 1.0), (100.0, 5.0), (100.0, 49.0)])
def test_inner_band_of_a_square(side, width):
    # square of side a, band width d < a / 2: a^2 - (a - 2d)^2
    band = inner_band(np.array([box(0, 0, side, side)]), width)
    assert band[0].area == pytest.approx(side**2 - (side - 2 * width) ** 2, rel=1e-12)


def test_inner_band_wider_than_the_polygon_is_the_polygon():
    band = inner_band(np.array([box(0, 0, 10, 10)]), 6.0)
    assert band[0].area == pytest.approx(100.0, rel=1e-12)


def test_boundary_iou_of_offset_squares_by_hand():
    # R = [0, 100]^2, P = R shifted by 20 m in x, d = 5 m. Each band: 100^2 - 90^2 = 1900.
    # The bands meet in the strips y in [0, 5] and [95, 100] over x in [20, 100]: 2 x 5 x 80
    # = 800 (in between, R's band is x < 5 or x > 95 and P's is x < 25 or x > 115: no overlap
    # inside [20, 100]). Boundary IoU = 800 / (1900 + 1900 - 800) = 4/15.
    r, p = np.array([box(0, 0, 100, 100)]), np.array([box(20, 0, 120, 100)])
    assert pair_boundary_iou(r, p, 5.0)[0] == pytest.approx(4 / 15, rel=1e-12)
    # Identical: 1. Wider than half the side: the bands are the squares, so it is the IoU.
    assert pair_boundary_iou(r, r, 5.0)[0] == pytest.approx(1.0, rel=1e-12)
    assert pair_boundary_iou(r, p, 60.0)[0] == pytest.approx(8000 / 12000, rel=1e-12)


def _regular_polygon_area(inradius: float, n: int) -> float:
    return n * math.tan(math.pi / n) * inradius**2


@pytest.mark.parametrize("r_ref, r_pred, width", [(50.0, 45.0, 8.0), (50.0, 50.0, 3.0), (30.0, 60.0, 10.0)])
def test_boundary_iou_of_concentric_discs_in_closed_form(r_ref, r_pred, width):
    # Point.buffer(R, quad_segs=q) is a regular n-gon (n = 4q) with circumradius R, so inradius
    # R cos(pi / n). Its negative buffer is the similar n-gon with inradius reduced by d, and
    # two concentric ones are nested: the bands are rings between inradii, and their
    # intersection the ring between max(inner radii) and min(outer radii).
    q = 64
    n = 4 * q
    c = math.cos(math.pi / n)
    outer = sorted((r_ref * c, r_pred * c))
    bands = [_regular_polygon_area(o, n) - _regular_polygon_area(o - width, n) for o in outer]
    low, high = max(o - width for o in outer), min(outer)
    inter = max(0.0, _regular_polygon_area(high, n) - _regular_polygon_area(low, n)) if high > low else 0.0
    expected = inter / (sum(bands) - inter)
    ref = np.array([Point(0, 0).buffer(r_ref, quad_segs=q)])
    pred = np.array([Point(0, 0).buffer(r_pred, quad_segs=q)])
    assert pair_boundary_iou(ref, pred, width)[0] == pytest.approx(expected, rel=1e-9)
    # and the polygons approach the discs: pi (R^2 - (R - d)^2) to 1e-3
    band_area = inner_band(ref, width)[0].area
    assert band_area == pytest.approx(math.pi * (r_ref**2 - (r_ref - width) ** 2), rel=1e-3)


_rect = st.tuples(st.integers(0, 60), st.integers(0, 60), st.integers(1, 60), st.integers(1, 60))


@settings(max_examples=200, deadline=None)
@given(r=_rect, p=_rect, d=st.sampled_from([0.5, 1.0, 2.5, 7.0, 40.0]))
def test_boundary_iou_of_rectangles_equals_inclusion_exclusion(r, p, d):
    ra = (r[0], r[1], r[0] + r[2], r[1] + r[3])
    pa = (p[0], p[1], p[0] + p[2], p[1] + p[3])
    got = pair_boundary_iou(np.array([box(*ra)]), np.array([box(*pa)]), d)[0]
    assert got == pytest.approx(naive_rect_boundary_iou(ra, pa, d), rel=1e-9, abs=1e-12)
    # symmetric in the two polygons
    assert pair_boundary_iou(np.array([box(*pa)]), np.array([box(*ra)]), d)[0] == pytest.approx(got, rel=1e-12, abs=1e-15)


def test_boundary_iou_of_a_missing_geometry_is_null():
    assert math.isnan(pair_boundary_iou(np.array([None]), np.array([box(0, 0, 1, 1)]), 1.0)[0])


def test_boundary_iou_through_evaluate_in_the_reference_zone():
    # UTM 13N squares of 100 m: field 0 with its copy shifted 20 m (IoU 80/120 = 2/3,
    # boundary IoU 4/15 at 5 m), field 1 with an exact copy (1), field 2 unmatched.
    ref = layer([square(X0, Y0, 100), square(X0 + 300, Y0, 100), square(X0 + 600, Y0, 100)], UTM)
    pred = layer([square(X0 + 20, Y0, 100), square(X0 + 300, Y0, 100)], UTM)
    m = evaluate(pred, ref, boundary_iou_width_m=5.0)
    assert m["boundary_iou_width_m"] == 5.0
    assert m["boundary_iou_mean"] == pytest.approx((4 / 15 + 1) / 2, rel=1e-9)
    assert m["boundary_iou_median"] == pytest.approx((4 / 15 + 1) / 2, rel=1e-9)
    frame = evaluate_frame(pred, ref, boundary_iou_width_m=5.0)
    assert frame["boundary_iou"].tolist()[:2] == pytest.approx([4 / 15, 1.0], rel=1e-9)
    assert math.isnan(frame["boundary_iou"].iloc[2])
    tables = evaluate_tables(pred, ref, boundary_iou_width_m=5.0)
    assert tables.predictions["boundary_iou"].tolist() == pytest.approx([4 / 15, 1.0], rel=1e-9)
    # off by default: no key, no column
    m = evaluate(pred, ref)
    assert "boundary_iou_mean" not in m and "boundary_iou_width_m" not in m
    assert "boundary_iou" not in evaluate_frame(pred, ref).columns


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------

_boxes = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 6), st.integers(1, 8), st.integers(1, 4)), min_size=0, max_size=8
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(refs=_boxes, preds=_boxes)
def test_pq_is_sq_times_rq_and_the_distribution_is_ordered(refs, preds):
    def geoms(rows):
        return [box(EA_X + 10 * x, EA_Y + 10 * y, EA_X + 10 * (x + w), EA_Y + 10 * (y + h)) for x, y, w, h in rows]

    m = evaluate(layer(geoms(preds), EA), layer(geoms(refs), EA), boundary_iou_width_m=3.0)
    d = m["iou_distribution"]
    assert d["count"] == m["count_tp"]
    if not refs and not preds:
        assert math.isnan(m["pq"])
        return
    assert m["pq"] == pytest.approx(m["sq"] * m["rq"], rel=1e-12, abs=1e-15)
    assert m["rq"] == pytest.approx(m["f1"], rel=1e-12, abs=1e-15)
    if m["count_tp"]:
        values = [d["min"], *(d[k] for k in QUANTILE_KEYS), d["max"]]
        assert values == sorted(values) and 0.5 * (1 - 1e-9) <= d["min"] and d["max"] <= 1.0
        assert d["median"] == pytest.approx(m["sq"], abs=0.5)
        assert 0.0 <= m["boundary_iou_mean"] <= 1.0
        assert m["dice_mean"] >= m["sq"] - 1e-12  # 2x / (1 + x) >= x on [0, 1]
    else:
        assert m["pq"] == 0.0


EA_X, EA_Y = -10_131_000.0, 4_707_000.0


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), "5", True])
def test_bad_boundary_iou_width_is_refused_naming_the_option(value):
    pred, ref = scenario_a(EA)
    with pytest.raises(ValueError, match="boundary_iou_width_m"):
        evaluate(pred, ref, boundary_iou_width_m=value)


@pytest.mark.cli
@pytest.mark.parametrize("value", ["0", "-2", "nan", "inf"])
def test_cli_bad_boundary_iou_width_exits_2_with_one_line(tmp_path, value):
    pred, ref = scenario_a(EA)
    pred_path, ref_path, out = tmp_path / "p.parquet", tmp_path / "r.parquet", tmp_path / "m.json"
    pred.to_parquet(pred_path)
    ref.to_parquet(ref_path)
    done = run_cli("evaluate", "-p", str(pred_path), "-r", str(ref_path), "-o", str(out), f"--boundary-iou-width-m={value}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("evalcore: error:")
    assert "--boundary-iou-width-m" in done.stderr
    assert not out.exists()


# --------------------------------------------------------------------------------------
# Where people look: terminal, report.md, report.html
# --------------------------------------------------------------------------------------


def test_terminal_lines_show_pq_as_sq_times_rq():
    from evalcore.metrics.quality import Quality

    pred, ref = scenario_a(EA)
    m = evaluate(pred, ref, boundary_iou_width_m=5.0)
    first, second = Quality().summary_lines(m)
    # PQ 1/3 = SQ 0.75 x RQ 4/9
    assert first.startswith("quality: PQ 0.333 = SQ 0.750 x RQ 0.444;")
    assert "area bias -2.0 %" in first and "matched pairs -30.0 %" in first
    assert second.startswith("matched IoU (2 pairs): min 0.600") and "median 0.750" in second
    assert "boundary IoU at 5 m: mean" in second
    assert "boundary IoU" not in Quality().summary_lines(evaluate(pred, ref))[1]


def test_report_md_has_the_pq_row_and_the_distribution():
    from evalcore.report import render_report

    pred, ref = scenario_a(EA)
    text = render_report(evaluate(pred, ref))
    assert "| Panoptic quality (PQ = SQ x RQ) | 0.333 |" in text
    assert "Matched IoU distribution (2 pairs):" in text and "| 0.600 | 0.615 |" in text


def test_report_html_draws_the_iou_histogram_with_boundary_iou_beside(tmp_path):
    from evalcore.html_report import build_report
    from evalcore.writers import write_json

    pred, ref = scenario_a(EA)
    tables = evaluate_tables(pred, ref, boundary_iou_width_m=5.0)
    run = tmp_path / "run"
    (run / "fields").mkdir(parents=True)
    write_json(run / "metrics.json", tables.summary)
    tables.fields.rename_axis("ref_index").reset_index().to_parquet(run / "fields" / "part-0.parquet")
    html = build_report(run).read_text(encoding="utf-8")
    assert 'data-figure="iou_distribution"' in html and (run / "figures" / "iou_distribution.png").is_file()
    median = re.search(r'data-key="iou_distribution.median" data-value="([^"]+)"', html)
    assert median and float(median.group(1)) == pytest.approx(0.75, rel=1e-12)
    assert "Mean boundary IoU of matches (band 5.0 m)" in html  # beside mean IoU in the headline
    assert 'id="family-quality"' in html


def test_compare_pairs_the_quality_keys_overall_and_per_stratum():
    from evalcore.compare import compare
    from tests.common import grid_layers

    pred, ref = grid_layers(100)
    ref["stratum"] = ["a" if i % 2 else "b" for i in range(len(ref))]
    cand = pred.iloc[::2]  # the predictions of the fields of stratum b only
    result = compare(cand, pred, ref, strata="stratum", bootstrap=20, boundary_iou_width_m=5.0)
    alone_c = evaluate(cand, ref, strata="stratum", boundary_iou_width_m=5.0)
    alone_i = evaluate(pred, ref, strata="stratum", boundary_iou_width_m=5.0)
    for key in ("pq", "sq", "rq", "dice_mean", "area_bias", "matched_area_bias"):
        assert key in result["metrics"]
        entry = result["overall"][key]
        assert entry["candidate"] == pytest.approx(alone_c[key], rel=1e-12)
        assert entry["incumbent"] == pytest.approx(alone_i[key], rel=1e-12)
        assert entry["ci"][0] <= entry["delta"] <= entry["ci"][1] or math.isclose(entry["ci"][0], entry["ci"][1])
        assert result["per_stratum"]["b"][key]["candidate"] == pytest.approx(alone_c["per_stratum"]["b"][key], rel=1e-12)
    # stratum a lost every prediction: PQ 0 there, a delta below zero with certainty
    a = result["per_stratum"]["a"]["pq"]
    assert a["candidate"] == 0.0 and a["ci"][1] < 0
    # boundary IoU only with the option, paired overall
    assert result["overall"]["boundary_iou_mean"]["candidate"] == pytest.approx(alone_c["boundary_iou_mean"], rel=1e-12)


def test_gates_read_the_quality_keys():
    from evalcore.gates import Gate, check_metric_paths, evaluate_gates

    pred, ref = scenario_a(EA)
    m = evaluate(pred, ref, strata=["x", "x", "y", "y"], bootstrap=20, boundary_iou_width_m=5.0)
    gates = [
        Gate(id="pq", metric="pq", op=">=", threshold=0.3),  # 1/3: pass
        Gate(id="tail", metric="iou_distribution.q10", op=">=", threshold=0.7),  # 0.63: fail
        Gate(id="band", metric="boundary_iou_mean", op=">", threshold=0.0),
        Gate(id="strata", metric="per_stratum.*.pq", op=">=", threshold=0.0),
        Gate(id="lower", metric="pq", op=">=", threshold=0.0, use="ci_lower"),
    ]
    check_metric_paths(gates)
    rows = {r["id"] if "id" in r else r["gate"]: r for r in evaluate_gates(m, gates)["rules"]}
    states = {k: r.get("state", r.get("status")) for k, r in rows.items()}
    assert states["pq"] == "pass" and states["tail"] == "fail" and states["band"] == "pass" and states["lower"] == "pass", rows
    assert rows["tail"]["observed"] == pytest.approx(0.63, rel=1e-9)

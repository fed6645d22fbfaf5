"""Properties of evaluate on random layers of rectangles, and of the sufficient statistics.

Layers are axis-aligned rectangles with integer-metre corners in EPSG:32613 (at most
15 per layer). Reference layers are either arbitrary (may overlap) or one rectangle per
cell of a grid (never overlap, like a field registry); predictions are jittered copies
of reference fields plus random rectangles. The "ci" hypothesis profile (conftest.py)
keeps the examples few; HYPOTHESIS_PROFILE=slow runs many more.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import shapely
from hypothesis import assume, given
from hypothesis import strategies as st
from shapely.geometry import box

from evalcore import evaluate, evaluate_frame
from evalcore.metrics.registry import quantity_columns
from evalcore.options import check_options
from evalcore.stats import GroupSums, group_sums
from tests.common import BOUNDARY_VALUE_KEYS, X0, Y0, assert_metrics_equal, layer

MAX_N = 15
RATE_KEYS = (
    "precision", "recall", "f1", "iou_mean", "best_iou_mean", "area_weighted_precision",
    "area_weighted_recall", "area_weighted_f1", "over_segmentation", "under_segmentation",
)
# Keys computed from boundaries (evalcore/boundary.py) are left to that module's tests.
SKIP = BOUNDARY_VALUE_KEYS
FAST = {"boundary_sample_spacing_m": None}


def _rect(x: int, y: int, w: int, h: int) -> shapely.Polygon:
    return box(X0 + x, Y0 + y, X0 + x + w, Y0 + y + h)


rect_params = st.tuples(st.integers(0, 1_500), st.integers(0, 1_500), st.integers(10, 400), st.integers(10, 400))


@st.composite
def free_layer(draw: st.DrawFn, min_size: int = 0) -> list[shapely.Polygon]:
    """Arbitrary rectangles (they may overlap or repeat)."""
    return [_rect(*p) for p in draw(st.lists(rect_params, min_size=min_size, max_size=MAX_N))]


@st.composite
def grid_layer(draw: st.DrawFn) -> list[shapely.Polygon]:
    """At most one rectangle per 400 m cell of a 5 x 5 grid: no two overlap."""
    cells = draw(st.lists(st.integers(0, 24), unique=True, max_size=MAX_N))
    out = []
    for c in cells:
        x0, y0 = 400 * (c % 5), 400 * (c // 5)
        left, bottom = draw(st.integers(0, 150)), draw(st.integers(0, 150))
        w, h = draw(st.integers(40, 400 - left)), draw(st.integers(40, 400 - bottom))
        out.append(_rect(x0 + left, y0 + bottom, w, h))
    return out


@st.composite
def predictions_for(draw: st.DrawFn, refs: list[shapely.Polygon]) -> list[shapely.Polygon]:
    """Jittered copies of some reference fields plus some random rectangles, shuffled."""
    out = []
    for r in refs:
        if draw(st.booleans()):
            x0, y0, x1, y1 = (int(round(v - o)) for v, o in zip(r.bounds, (X0, Y0, X0, Y0)))
            dx, dy = draw(st.integers(-80, 80)), draw(st.integers(-80, 80))
            dw, dh = draw(st.integers(-30, 60)), draw(st.integers(-30, 60))
            out.append(_rect(x0 + dx, y0 + dy, max(10, x1 - x0 + dw), max(10, y1 - y0 + dh)))
    out += draw(free_layer())
    out = out[:MAX_N]
    return draw(st.permutations(out)) if out else out


@st.composite
def layer_pair(draw: st.DrawFn, grid: bool | None = None) -> tuple[list, list]:
    """(predicted, reference) rectangle lists."""
    use_grid = draw(st.booleans()) if grid is None else grid
    refs = draw(grid_layer() if use_grid else free_layer())
    return draw(predictions_for(refs)), refs


def _utm_pairs(pred: list, ref: list) -> list[tuple[int, int, float, float]]:
    """(i_ref, i_pred, iou, inter) of every pair with a positive intersection, in UTM."""
    out = []
    for i, r in enumerate(ref):
        for j, p in enumerate(pred):
            inter = r.intersection(p).area
            if inter > 0:
                out.append((i, j, inter / (r.area + p.area - inter), inter))
    return out


def _distinct(values: list[float], rel: float = 1e-6) -> bool:
    v = sorted(values)
    return all(b - a > rel * max(abs(b), 1e-12) for a, b in zip(v, v[1:]))


def _no_ties(pred: list, ref: list) -> bool:
    """No two candidate pairs with the same IoU, and no reference field with two equal
    intersections (the only ties that can change overall metrics)."""
    pairs = _utm_pairs(pred, ref)
    if not _distinct([p[2] for p in pairs]):
        return False
    for i in range(len(ref)):
        if not _distinct([p[3] for p in pairs if p[0] == i]):
            return False
    return True


# --------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------


@given(geoms=free_layer(), matching=st.sampled_from(["one_to_one", "many_to_one"]), thr=st.sampled_from([0.1, 0.5, 0.9, 1.0]))
def test_a_layer_against_itself_is_perfect(geoms, matching, thr):
    if matching == "many_to_one":
        # Exact duplicates tie at IoU 1 and all take the first copy (the others become
        # false positives), so many-to-one is perfect only without duplicates.
        geoms = list({g.wkb: g for g in geoms}.values())
    gdf = layer(geoms)
    m = evaluate(gdf, gdf, thr, matching=matching, **FAST)
    for key in ("precision", "recall", "f1", "iou_mean", "best_iou_mean", "area_weighted_precision", "area_weighted_recall", "area_weighted_f1"):
        assert m[key] == 1.0, key
    assert m["count_tp"] == m["count_reference"] == m["count_predicted"] == len(geoms)
    assert m["count_fp"] == m["count_fn"] == 0
    assert m["reference_area_ha"] == pytest.approx(m["predicted_area_ha"], rel=1e-12)
    if geoms:
        assert m["oversegmentation_mean"] == pytest.approx(0.0, abs=1e-12)
        assert m["area_error_mean_m2"] == 0.0


@given(geoms=free_layer(min_size=1), copies=st.integers(2, 3))
def test_duplicates_under_many_to_one_share_the_first_copy(geoms, copies):
    gdf = layer(list({g.wkb: g for g in geoms}.values()) * copies)
    m = evaluate(gdf, gdf, 0.5, matching="many_to_one", **FAST)
    n = len(gdf) // copies
    assert m["recall"] == 1.0
    assert (m["count_tp"], m["count_fp"]) == (len(gdf), len(gdf) - n)
    assert m["precision"] == pytest.approx(len(gdf) / (2 * len(gdf) - n), rel=1e-12)


@given(pair=layer_pair(), thr=st.sampled_from([0.2, 0.3, 0.5, 0.7]))
def test_counts_add_up_and_rates_are_in_the_unit_interval(pair, thr):
    pred, ref = layer(pair[0]), layer(pair[1])
    one = evaluate(pred, ref, thr, **FAST)
    assert one["count_tp"] + one["count_fn"] == one["count_reference"] == len(ref)
    assert one["count_tp"] + one["count_fp"] == one["count_predicted"] == len(pred)
    assert 0 <= one["count_fp_unassigned"] <= one["count_fp"]
    many = evaluate(pred, ref, thr, matching="many_to_one", **FAST)
    assert many["count_tp"] + many["count_fn"] == len(ref)
    assert many["count_tp"] + many["count_fp"] >= len(pred)
    assert many["count_tp"] >= one["count_tp"]  # every reference takes its best eligible
    for m in (one, many):
        for key in RATE_KEYS:
            assert 0.0 <= m[key] <= 1.0, (key, m[key])
        for key in ("oversegmentation_mean", "undersegmentation_mean"):
            assert math.isnan(m[key]) or 0.0 <= m[key] <= 1.0, key
        # The best IoU of a matched field is at least its matched IoU.
        assert m["best_iou_mean"] >= m["iou_mean"] * m["recall"] - 1e-12
        assert m["area_error_mean_m2"] >= abs(m["area_error_signed_mean_m2"]) - 1e-6 or m["count_tp"] == 0
    # Threshold-free metrics do not depend on the matching mode (up to summation order:
    # homes, hence the order in which predictions are summed, can differ).
    for key in ("best_iou_mean", "oversegmentation_mean", "undersegmentation_mean", "reference_area_ha", "predicted_area_ha", "over_segmentation", "under_segmentation"):
        assert one[key] == pytest.approx(many[key], rel=1e-12, nan_ok=True), key
    assert one["count_fp_unassigned"] == many["count_fp_unassigned"]


@given(pair=layer_pair(), matching=st.sampled_from(["one_to_one", "many_to_one"]))
def test_raising_the_threshold_keeps_the_matches_above_it(pair, matching):
    # Greedy by descending IoU: the eligible pairs at a higher threshold are a prefix of
    # the order at a lower one, so the matches at 0.6 are exactly the matches at 0.3
    # with IoU >= 0.6.
    pred, ref = layer(pair[0]), layer(pair[1])
    low = evaluate_frame(pred, ref, iou_threshold=0.3, matching=matching, **FAST)
    high = evaluate_frame(pred, ref, iou_threshold=0.6, matching=matching, **FAST)
    keep = low["matched"] & (low["iou"] >= 0.6 * (1 - 1e-9))
    assert high["matched"].tolist() == keep.tolist()
    assert high["pred_index"][keep].tolist() == low["pred_index"][keep].tolist()


@given(pair=layer_pair(), data=st.data(), matching=st.sampled_from(["one_to_one", "many_to_one"]))
def test_permuting_rows_changes_no_metric(pair, data, matching):
    pred_geoms, ref_geoms = pair
    assume(_no_ties(pred_geoms, ref_geoms))
    pred, ref = layer(pred_geoms), layer(ref_geoms)
    pred_perm = pred.iloc[data.draw(st.permutations(range(len(pred))))]
    ref_perm = ref.iloc[data.draw(st.permutations(range(len(ref))))]
    base = evaluate(pred, ref, matching=matching, **FAST)
    assert_metrics_equal(evaluate(pred_perm, ref_perm, matching=matching, **FAST), base, rel=1e-9, skip=SKIP)
    f = evaluate_frame(pred, ref, matching=matching, **FAST)
    fp = evaluate_frame(pred_perm, ref_perm, matching=matching, **FAST).loc[f.index]
    for col in ("matched", "pred_index", "n_overlapping_pred", "max_overlap_pred_index"):
        assert fp[col].tolist() == f[col].tolist(), col
    for col in ("iou", "best_iou", "area_m2", "oversegmentation", "undersegmentation"):
        np.testing.assert_allclose(fp[col].to_numpy(float), f[col].to_numpy(float), rtol=1e-12)


@given(pair=layer_pair(grid=True), data=st.data())
def test_groups_partition_the_reference_fields(pair, data):
    pred, ref = layer(pair[0]), layer(pair[1])
    strata = data.draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=len(ref), max_size=len(ref)))
    m = evaluate(pred, ref, strata=strata, size_bins=[0, 2, 8, float("inf")], **FAST)
    groups = list(m["per_stratum"].values())
    assert m["count_reference_no_stratum"] == 0
    assert sum(g["count_reference"] for g in groups) == m["count_reference"]
    assert sum(g["count_tp"] for g in groups) == m["count_tp"]
    assert sum(g["count_fn"] for g in groups) == m["count_fn"]
    assert sum(g["count_predicted"] for g in groups) == m["count_predicted"] - m["count_fp_unassigned"]
    assert sum(g["count_fp"] for g in groups) == m["count_fp"] - m["count_fp_unassigned"]
    sizes = list(m["per_size_class"].values())
    assert sum(g["n"] for g in sizes) == m["count_reference"]
    assert sum(g["count_predicted"] for g in sizes) == m["count_predicted"] - m["count_fp_unassigned"]
    assert sum(g["reference_area_ha"] for g in sizes) == pytest.approx(m["reference_area_ha"], rel=1e-9)


@given(pair=layer_pair())
def test_the_frame_and_the_summary_agree(pair):
    pred, ref = layer(pair[0]), layer(pair[1])
    m = evaluate(pred, ref, 0.4, **FAST)
    f = evaluate_frame(pred, ref, iou_threshold=0.4, **FAST)
    assert len(f) == m["count_reference"]
    assert int(f["matched"].sum()) == m["count_tp"]
    if len(f):
        assert f["best_iou"].mean() == pytest.approx(m["best_iou_mean"], rel=1e-9, abs=1e-12)
        assert f["oversegmentation"].mean() == pytest.approx(m["oversegmentation_mean"], rel=1e-9)
        assert f["area_ha"].median() == pytest.approx(m["median_area_ha"], rel=1e-12)
        assert (f["best_iou"] >= f["iou"].fillna(0.0) - 1e-15).all()
        assert (f["n_overlapping_pred"] >= f["matched"].astype(int)).all()


# --------------------------------------------------------------------------------------
# Sufficient statistics: partial sums merge to the whole
# --------------------------------------------------------------------------------------

QUANTITY_COLUMNS = quantity_columns(check_options())
C = len(QUANTITY_COLUMNS)
MAX = ("spacing_m",)


@st.composite
def quantity_tables(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    n = draw(st.integers(0, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    values = rng.uniform(0, 1e4, (n, C)) * (rng.uniform(size=(n, C)) < 0.7)
    spacing = np.where(rng.uniform(size=n) < 0.4, np.nan, rng.uniform(0.5, 5.0, n))
    return values, spacing


def _sums(values: np.ndarray, spacing: np.ndarray, codes: np.ndarray | None = None, n_groups: int = 1) -> GroupSums:
    flat = np.empty((len(values), 0), np.int64) if codes is None else codes.reshape(-1, 1)
    return group_sums(values, spacing.reshape(-1, 1), flat, n_groups, QUANTITY_COLUMNS, MAX)


def _assert_sums_close(a: GroupSums, b: GroupSums) -> None:
    # Exact sums (evalcore.exact): any split and any order give the same bits.
    assert a.columns == b.columns and a.max_columns == b.max_columns
    np.testing.assert_array_equal(a.sums, b.sums)
    np.testing.assert_array_equal(a.maxima, b.maxima)  # NaN equals NaN here


@given(table=quantity_tables(), data=st.data())
def test_merged_partial_sums_equal_the_whole(table, data):
    values, spacing = table
    n = len(values)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=4)))
    bounds = [0, *cuts, n]
    parts = [_sums(values[a:b], spacing[a:b]) for a, b in zip(bounds, bounds[1:])]
    whole = _sums(values, spacing)
    empty = GroupSums.empty(QUANTITY_COLUMNS, MAX, 1)
    merged = empty
    for part in data.draw(st.permutations(parts)):  # any order
        merged = merged.merge(part)
    _assert_sums_close(merged, whole)
    _assert_sums_close(empty.merge(whole), whole)
    _assert_sums_close(whole.merge(empty), whole)


@given(table=quantity_tables(), data=st.data(), n_groups=st.integers(0, 4))
def test_group_sums_of_parts_merge_to_the_group_sums_of_the_whole(table, data, n_groups):
    values, spacing = table
    n = len(values)
    # One grouping of n_groups groups on the flat axis 1..n_groups (0 is overall).
    codes = np.array(data.draw(st.lists(st.integers(0, n_groups), min_size=n, max_size=n)), dtype=np.int64)
    codes = np.where(codes == 0, -1, codes)
    k = data.draw(st.integers(0, n))
    g_axis = n_groups + 1
    whole = _sums(values, spacing, codes, g_axis)
    first = _sums(values[:k], spacing[:k], codes[:k], g_axis)
    second = _sums(values[k:], spacing[k:], codes[k:], g_axis)
    _assert_sums_close(first.merge(second), whole)
    for g in range(1, g_axis):
        rows = codes == g
        alone = _sums(values[rows], spacing[rows])
        np.testing.assert_array_equal(whole.sums[g], alone.sums[0])
        np.testing.assert_array_equal(whole.maxima[g], alone.maxima[0])
    # The overall group is every row; the groups and the rows in none make it up.
    np.testing.assert_allclose(whole.sums[1:].sum(axis=0) + _sums(values[codes < 0], spacing[codes < 0]).sums[0],
                               whole.sums[0], rtol=1e-9, atol=1e-6)


@given(pair=layer_pair(), data=st.data(), tile=st.sampled_from([60.0, 137.0, 450.0, 1_000.0]), matching=st.sampled_from(["one_to_one", "many_to_one"]))
def test_tile_size_changes_no_point_estimate(pair, data, tile, matching):
    # The single-process run sums per partition tile; any tile size must give the
    # same summary (counts exactly, floats to 1e-9), groups included.
    pred, ref = layer(pair[0]), layer(pair[1])
    strata = data.draw(st.lists(st.sampled_from(["a", "b", None]), min_size=len(ref), max_size=len(ref)))
    kwargs = dict(matching=matching, strata=strata, size_bins=[0, 1, 4, float("inf")], **FAST)
    base = evaluate(pred, ref, 0.4, **kwargs)
    assert_metrics_equal(evaluate(pred, ref, 0.4, partition_size_m=tile, **kwargs), base, rel=1e-9, skip=SKIP)

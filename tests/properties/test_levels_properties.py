"""Levels (SPEC 6.3): the reporting tiles and AOIs do not depend on how the work is
partitioned, and every object counts in exactly one tile.

Layers are axis-aligned rectangles with integer-metre corners in UTM zone 33N
(EPSG:32633) around easting 500 000, northing 5 000 000. The partition tiles
(``partition_size_m``) and the reporting tiles (``tile_km``) are chosen so that fields,
and predictions with their home, straddle both grids.
"""

from __future__ import annotations

import geopandas
import numpy as np
import pandas as pd
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st
from shapely.geometry import box

from evalcore import evaluate_tables
from tests.common import assert_metrics_equal, layer

ZONE = "EPSG:32633"
E0, N0 = 500_000.0, 5_000_000.0
FAST = {"boundary_sample_spacing_m": None, "iou_sweep_thresholds": None}
COUNT_COLUMNS = ("count_reference", "count_predicted", "count_tp", "count_fp", "count_fn", "count_fp_unassigned")


def rbox(x0: float, y0: float, x1: float, y1: float) -> shapely.Polygon:
    return box(E0 + x0, N0 + y0, E0 + x1, N0 + y1)


def assert_tables_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Same columns and rows; integers and flags exactly, floats to 1e-9 relative, geometries equal."""
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b)
    assert a.index.tolist() == b.index.tolist()
    for column in a.columns:
        x, y = a[column], b[column]
        if isinstance(x, geopandas.GeoSeries):
            assert x.crs == y.crs, column
            assert bool(np.all(shapely.equals_exact(np.asarray(x.values), np.asarray(y.values), 1e-9))), column
        elif pd.api.types.is_float_dtype(x.dtype):
            np.testing.assert_allclose(x.to_numpy(np.float64), y.to_numpy(np.float64), rtol=1e-9, atol=1e-12,
                                       equal_nan=True, err_msg=column)
        else:
            assert x.dtype == y.dtype, column
            assert x.astype(object).where(x.notna(), None).tolist() == y.astype(object).where(y.notna(), None).tolist(), column


def assert_levels_equal(a, b) -> None:
    assert_metrics_equal(a.summary["tiles"], b.summary["tiles"], rel=1e-9)
    assert ("aois" in a.summary) == ("aois" in b.summary)
    if "aois" in a.summary:
        assert_metrics_equal(a.summary["aois"], b.summary["aois"], rel=1e-9)
        assert_tables_equal(a.aois, b.aois)
    assert_tables_equal(a.tiles, b.tiles)
    place = [c for c in ("tile_epsg", "tile_x", "tile_y", "aoi", "home_ref_index", "matched") if c in a.predictions]
    assert_tables_equal(a.predictions[place], b.predictions[place])
    place = [c for c in ("utm_epsg", "tile_x", "tile_y", "aoi") if c in a.fields]
    assert_tables_equal(a.fields[place], b.fields[place])


def assert_every_object_in_one_tile(t) -> None:
    s, tiles = t.summary, t.tiles
    for column in COUNT_COLUMNS:
        assert int(tiles[column].sum()) == s[column], column
    # The tables agree: a tile's fields and predictions are the rows that name it.
    keys = [tuple(k) for k in tiles[["epsg", "tile_x", "tile_y"]].to_numpy().tolist()]
    assert len(set(keys)) == len(keys)
    field_keys = list(zip(t.fields["utm_epsg"], t.fields["tile_x"], t.fields["tile_y"]))
    pred_keys = list(zip(t.predictions["tile_epsg"], t.predictions["tile_x"], t.predictions["tile_y"]))
    for key, n_ref, n_pred in zip(keys, tiles["count_reference"], tiles["count_predicted"]):
        assert field_keys.count(key) == n_ref and pred_keys.count(key) == n_pred, key
    assert set(field_keys) | set(pred_keys) == set(keys)  # a tile exists when it holds something
    assert s["tiles"]["count_tiles"] == len(tiles)
    if "aois" in s:
        # The AOIs and "in no AOI" make up the reference fields.
        in_none = int(t.fields["aoi"].isna().sum())
        assert sum(e["count_reference"] for e in s["aois"]["per_aoi"].values()) + in_none == s["count_reference"]
        assert len(s["aois"]["per_aoi"]) == len(t.aois) == s["aois"]["count_aois"]


# --------------------------------------------------------------------------- a fixed layout


def _spread_layout():
    """80 fields over 0-34 km x 0-24 km (several 10 km tiles, 1 km and 7 km partitions),
    with identical, shifted, missing and homeless predictions, and fields and pairs that
    straddle the 7 km and 10 km lines."""
    rng = np.random.default_rng(7)
    refs, preds = [], []
    for i in range(80):
        x, y = int(rng.integers(0, 34_000)), int(rng.integers(0, 24_000))
        g = rbox(x, y, x + 100, y + 100)
        refs.append(g)
        kind = i % 4
        if kind == 0:
            preds.append(g)
        elif kind == 1:
            preds.append(rbox(x + 30, y, x + 130, y + 100))  # IoU 70 / 130: matched
        elif kind == 2:
            preds.append(rbox(x + 70, y, x + 170, y + 100))  # IoU 30 / 170: a home, unmatched
    for x in (6_950, 9_950, 13_950, 19_970):  # straddling partition and tile lines
        refs.append(rbox(x - 80, 500, x + 20, 600))
        preds.append(rbox(x - 30, 500, x + 70, 600))
    for j in range(6):  # homeless
        preds.append(rbox(2_000 + 5_300 * j, 23_000, 2_100 + 5_300 * j, 23_100))
    aoi = layer([rbox(0, 0, 12_000, 12_000), rbox(6_000, 6_000, 30_000, 20_000), rbox(40_000, 0, 41_000, 1_000),
                 rbox(9_000, 0, 21_000, 24_000)], ZONE, id=["sw", "centre", "empty", "strip"])
    return layer(preds, ZONE), layer(refs, ZONE), aoi


@pytest.mark.parametrize("matching", ["one_to_one", "many_to_one", "max_weight"])
def test_levels_do_not_depend_on_the_partition_size(matching):
    pred, ref, aoi = _spread_layout()
    runs = [evaluate_tables(pred, ref, aoi=aoi, aoi_id_column="id", partition_size_m=size, matching=matching, **FAST)
            for size in (1_000.0, 7_000.0, 50_000.0)]
    assert runs[0].summary["tiles"]["count_tiles"] >= 6
    for other in runs[1:]:
        assert_levels_equal(runs[0], other)
    for t in runs:
        assert_every_object_in_one_tile(t)
    assert runs[0].summary["aois"]["per_aoi"]["empty"]["count_reference"] == 0


# --------------------------------------------------------------------------- random layers

WORLD = 3_000
rect_params = st.tuples(st.integers(0, WORLD), st.integers(0, WORLD), st.integers(10, 400), st.integers(10, 400))


def _rect(x: int, y: int, w: int, h: int) -> shapely.Polygon:
    return rbox(x, y, x + w, y + h)


@st.composite
def levels_case(draw: st.DrawFn):
    refs = [_rect(*p) for p in draw(st.lists(rect_params, max_size=15))]
    preds = []
    for r in refs:  # jittered copies of some fields: homes across tile and partition lines
        if draw(st.booleans()):
            x0, y0, x1, y1 = (round(v - o) for v, o in zip(r.bounds, (E0, N0, E0, N0)))
            dx, dy = draw(st.integers(-120, 120)), draw(st.integers(-120, 120))
            preds.append(_rect(x0 + dx, y0 + dy, max(10, x1 - x0 + draw(st.integers(-30, 60))), max(10, y1 - y0)))
    preds += [_rect(*p) for p in draw(st.lists(rect_params, max_size=6))]
    preds = draw(st.permutations(preds)) if preds else preds
    n_aoi = draw(st.integers(0, 3))
    aois = [_rect(*p) for p in draw(st.lists(st.tuples(st.integers(-500, WORLD), st.integers(-500, WORLD),
                                                       st.integers(200, 2_500), st.integers(200, 2_500)),
                                             min_size=n_aoi, max_size=n_aoi))]
    return preds, refs, aois


@settings(max_examples=15, deadline=None)
@given(case=levels_case(), tile_km=st.sampled_from([0.25, 0.5, 1.0, 10.0]),
       partition=st.sampled_from([60.0, 137.0, 450.0, 1_000.0, 7_000.0]), matching=st.sampled_from(["one_to_one", "many_to_one", "max_weight"]))
def test_random_layers_give_the_same_levels_for_any_partition_size(case, tile_km, partition, matching):
    preds, refs, aois = case
    kwargs = dict(tile_km=tile_km, matching=matching, min_support=2, **FAST)
    if aois:
        kwargs.update(aoi=layer(aois, ZONE, id=[f"a{i}" for i in range(len(aois))]), aoi_id_column="id")
    pred, ref = layer(preds, ZONE), layer(refs, ZONE)
    base = evaluate_tables(pred, ref, **kwargs)
    other = evaluate_tables(pred, ref, partition_size_m=partition, **kwargs)
    assert_levels_equal(base, other)
    assert_every_object_in_one_tile(base)
    assert_every_object_in_one_tile(other)

"""Pixel metrics of one tile (SPEC 6.7; seeds 001, 002): evalcore.pixels.

Expected values are computed by hand in the comments, or by the naive functions at the
top of this file, which rasterise with ``rasterio.features.rasterize`` in metres (the
zone's geotransform, not evalcore's pixel units), one raster large enough to hold every
polygon whole, and apply seed 001's ``boundary_f1`` recipe with scipy.ndimage as
written in the seed. The grid is 1 m unless said otherwise; pixel (i, j) has its centre
at ((i + 0.5) g, (j + 0.5) g).
"""

from __future__ import annotations

import dataclasses
import doctest
import itertools
import math
import tracemalloc

import numpy as np
import pytest
import shapely
from rasterio.features import rasterize
from rasterio.transform import Affine
from scipy import ndimage
from shapely.geometry import Polygon, box

from evalcore import pixel_counts, pixels
from evalcore.errors import IncompatibleStatsError
from evalcore.pixel_counts import PixelCounts, boundary_metrics, micro_macro, pixel_metrics
from evalcore.pixels import MAX_WINDOW_PIXELS, tile_pixel_bounds, tile_pixel_counts, window_bytes

EPSG = 32633
E0, N0 = 500_000.0, 5_000_000.0


# --------------------------------------------------------------------------------------
# Naive references
# --------------------------------------------------------------------------------------


def naive_indices(start_m: float, stop_m: float, g: float) -> np.ndarray:
    """The pixel indices whose centre (i + 0.5) g lies in [start_m, stop_m)."""
    i = np.arange(math.floor(start_m / g) - 2, math.ceil(stop_m / g) + 3)
    c = (i + 0.5) * g
    return i[(c >= start_m) & (c < stop_m)]


def naive_raster(geoms, g: float, i0: int, i1: int, j0: int, j1: int) -> np.ndarray:
    """GDAL's centre rule over pixels [i0, i1) x [j0, j1), in metres; rows from the north."""
    geoms = [p for p in geoms if p is not None and not p.is_empty]
    if not geoms:
        return np.zeros((j1 - j0, i1 - i0), dtype=bool)
    return rasterize(geoms, out_shape=(j1 - j0, i1 - i0), transform=Affine(g, 0.0, i0 * g, 0.0, -g, j1 * g),
                     all_touched=False, fill=0, default_value=1, dtype="uint8").astype(bool)


def seed_edges(m: np.ndarray) -> np.ndarray:
    """Seed 001: ``m ^ ndimage.binary_erosion(m, iterations=1)``."""
    return m ^ ndimage.binary_erosion(m, iterations=1)


def seed_boundary_f1(pred_mask: np.ndarray, ref_mask: np.ndarray, *, tolerance_px: int = 2) -> tuple[float, float, float]:
    """Seed 001's boundary_f1, as written there (also returning precision and recall)."""
    pe, re = seed_edges(pred_mask), seed_edges(ref_mask)
    d_ref = ndimage.distance_transform_edt(~re)
    d_pred = ndimage.distance_transform_edt(~pe)
    precision = (d_ref[pe] <= tolerance_px).mean() if pe.any() else 0.0
    recall = (d_pred[re] <= tolerance_px).mean() if re.any() else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def naive_counts(ref, pred, *, tile_x, tile_y, tile_size_m, gsd_m, tolerance_px, band=None, valid=None) -> dict:
    """The eight counts from one raster that holds the tile and every polygon whole."""
    g, t = gsd_m, tile_size_m
    ti = naive_indices(tile_x * t, (tile_x + 1) * t, g)
    tj = naive_indices(tile_y * t, (tile_y + 1) * t, g)
    geoms = [p for p in list(ref) + list(pred) if p is not None and not p.is_empty]
    x0, y0, x1, y1 = shapely.total_bounds(geoms) if geoms else (ti[0] * g, tj[0] * g, ti[0] * g, tj[0] * g)
    pad = tolerance_px + 3
    i0 = min(int(ti.min()), math.floor(x0 / g)) - pad
    i1 = max(int(ti.max()) + 1, math.ceil(x1 / g)) + pad
    j0 = min(int(tj.min()), math.floor(y0 / g)) - pad
    j1 = max(int(tj.max()) + 1, math.ceil(y1 / g)) + pad
    r = naive_raster(ref, g, i0, i1, j0, j1)
    p = naive_raster(pred, g, i0, i1, j0, j1)
    ev = np.zeros_like(r)
    rows = j1 - 1 - tj  # raster row of pixel row j
    ev[np.ix_(rows, ti - i0)] = True
    for area in (band, valid):
        if area is not None:
            ev &= naive_raster([area], g, i0, i1, j0, j1)
    re, pe = seed_edges(r), seed_edges(p)
    d_to_pred = ndimage.distance_transform_edt(~pe) if pe.any() else np.full(r.shape, np.inf)
    d_to_ref = ndimage.distance_transform_edt(~re) if re.any() else np.full(r.shape, np.inf)
    return {
        "tp": int((r & p & ev).sum()),
        "fp": int((~r & p & ev).sum()),
        "fn": int((r & ~p & ev).sum()),
        "tn": int((~r & ~p & ev).sum()),
        "ref_boundary": int((re & ev).sum()),
        "ref_boundary_hit": int((re & ev & (d_to_pred <= tolerance_px)).sum()),
        "pred_boundary": int((pe & ev).sum()),
        "pred_boundary_hit": int((pe & ev & (d_to_ref <= tolerance_px)).sum()),
    }


def as_dict(c: PixelCounts) -> dict:
    return {f.name: getattr(c, f.name) for f in dataclasses.fields(c) if f.name not in ("gsd_m", "tolerance_px")}


def counts(ref, pred, tx=0, ty=0, t=10.0, g=1.0, tol=1, **kw) -> PixelCounts:
    return tile_pixel_counts(ref, pred, epsg=EPSG, tile_x=tx, tile_y=ty, tile_size_m=t, gsd_m=g, tolerance_px=tol, **kw)


def mask_of(geoms, n: int = 10, g: float = 1.0) -> np.ndarray:
    """Positive pixels [j, i] (rows from the south) of pixels 0..n-1, by tile_pixel_counts on
    tiles of one pixel each (tile (i, j) of side g holds exactly pixel (i, j))."""
    out = np.zeros((n, n), dtype=bool)
    for j in range(n):
        for i in range(n):
            c = counts(geoms, [], tx=i, ty=j, t=g, g=g, tol=0)
            assert c.n_pixels == 1
            out[j, i] = c.fn == 1
    return out


def random_fields(rng: np.random.Generator, n: int, x0: float, y0: float, size: float, r_lo: float, r_hi: float):
    """Irregular polygons (buffered random triangles and rotated boxes) around [x0, x0 + size]²."""
    out = []
    for _ in range(n):
        cx = rng.uniform(x0 - 0.1 * size, x0 + 1.1 * size)
        cy = rng.uniform(y0 - 0.1 * size, y0 + 1.1 * size)
        r = rng.uniform(r_lo, r_hi)
        if rng.random() < 0.5:
            pts = np.column_stack([cx + r * rng.uniform(-1, 1, 3), cy + r * rng.uniform(-1, 1, 3)])
            g = Polygon(pts).buffer(r * 0.2, quad_segs=3)
        else:
            g = shapely.affinity.rotate(box(cx - r, cy - 0.5 * r, cx + r, cy + 0.5 * r), rng.uniform(0, 180))
        if rng.random() < 0.2:
            g = g.difference(shapely.Point(cx, cy).buffer(0.3 * r))
        out.append(g)
    return out


# --------------------------------------------------------------------------------------
# The grid and GDAL's centre rule
# --------------------------------------------------------------------------------------


def test_square_covering_4x4_centres():
    # box(2, 2, 6, 6) holds the centres 2.5, 3.5, 4.5, 5.5 on each axis: 16 pixels, i, j in 2..5.
    sq = box(2, 2, 6, 6)
    c = counts([sq], [sq], tol=0)
    assert (c.tp, c.fp, c.fn, c.tn) == (16, 0, 0, 84)
    # Its boundary: the 4x4 block minus its 2x2 interior = 12 pixels, all hits against itself.
    assert (c.ref_boundary, c.ref_boundary_hit, c.pred_boundary, c.pred_boundary_hit) == (12, 12, 12, 12)
    m = mask_of([sq])
    expected = np.zeros((10, 10), dtype=bool)
    expected[2:6, 2:6] = True
    assert np.array_equal(m, expected)
    # The same square at zone coordinates, 10 m pixels: tile (50, 500) of 10 km... here 100 m tiles.
    big = box(E0 + 20, N0 + 20, E0 + 60, N0 + 60)
    c = counts([big], [], tx=5000, ty=50000, t=100.0, g=10.0, tol=0)
    assert (c.fn, c.tn, c.ref_boundary) == (16, 84, 12)


def test_half_pixel_shift():
    ref = box(2, 2, 6, 6)  # columns 2..5, rows 2..5
    # Less than half a pixel: the same 16 centres.
    assert (counts([ref], [box(2.49, 2.49, 6.49, 6.49)], tol=0).tp, counts([ref], [box(2.49, 2, 6.49, 6)]).fp) == (16, 0)
    # Exactly half a pixel east: the west edge x = 2.5 passes through the centres of
    # column 2 and excludes them, the east edge x = 6.5 through column 6 and includes
    # them: columns 3..6, so 12 TP, 4 FP (column 6), 4 FN (column 2).
    c = counts([ref], [box(2.5, 2, 6.5, 6)], tol=0)
    assert (c.tp, c.fp, c.fn, c.tn) == (12, 4, 4, 80)
    # Boundaries, as (i, j): ref ring = column 2 (4) + column 5 (4) + rows 2 and 5 at
    # columns 3, 4 (4). Pred ring = column 3 (4) + column 6 (4) + rows 2 and 5 at columns
    # 4, 5 (4). Common: (3, 2), (3, 5), (4, 2), (4, 5), (5, 2), (5, 5): 6 hits each way at
    # tolerance 0; at tolerance 1 every ring pixel has the other ring one pixel away.
    assert (c.ref_boundary, c.ref_boundary_hit, c.pred_boundary, c.pred_boundary_hit) == (12, 6, 12, 6)
    c1 = counts([ref], [box(2.5, 2, 6.5, 6)], tol=1)
    assert (c1.ref_boundary_hit, c1.pred_boundary_hit) == (12, 12)
    # Half a pixel north: both east-west edges pass through centres and both include
    # them (rows 2..6): 5 rows x 4 columns = 20 pixels, 16 TP and 4 FP.
    c = counts([ref], [box(2, 2.5, 6, 6.5)], tol=0)
    assert (c.tp, c.fp, c.fn) == (16, 4, 0)
    # Just over half a pixel: columns 3..6 again, and rows 3..6.
    assert (counts([ref], [box(2.51, 2, 6.51, 6)]).tp, counts([ref], [box(2, 2.51, 6, 6.51)]).tp) == (12, 12)


def test_edge_through_centres_which_side_wins():
    # The square [2.5, 5.5]² has 16 centres on its boundary: positive where 2.5 < x <= 5.5
    # and 2.5 <= y <= 5.5 (east and both east-west edges in, west edge out): 3 x 4 = 12.
    sq = box(2.5, 2.5, 5.5, 5.5)
    expected = np.zeros((10, 10), dtype=bool)
    expected[2:6, 3:6] = True  # [j, i]
    assert np.array_equal(mask_of([sq]), expected)
    # Ring orientation and the first vertex do not matter.
    ring = list(sq.exterior.coords)[:-1]
    for k in range(4):
        for coords in (ring[k:] + ring[:k], (ring[k:] + ring[:k])[::-1]):
            assert counts([Polygon(coords)], []).fn == 12
    # Two fields sharing a north-south edge through centres (x = 4.5, column 4): the
    # centre goes to the western field only. West: columns 2..4 (12 px); east: 5..6 (8 px).
    west, east = box(2, 2, 4.5, 6), box(4.5, 2, 7, 6)
    c = counts([west], [east], tol=0)
    assert (c.tp, c.fn, c.fp) == (0, 12, 8)
    # Two fields sharing an east-west edge through centres (y = 4.5, row 4): both include
    # it. South: rows 2..4 (12 px); north: rows 4..6 (12 px); 4 pixels in both.
    south, north = box(2, 2, 6, 4.5), box(2, 4.5, 6, 7)
    c = counts([south], [north], tol=0)
    assert (c.tp, c.fn, c.fp) == (4, 8, 8)
    # A sloping edge through centres: the triangle under x + y = 10 (its east side) includes
    # the centres with i + j = 9; the triangle above y = x (its west side) excludes i = j.
    below = Polygon([(0, 0), (10, 0), (0, 10)])
    above = Polygon([(0, 0), (10, 0), (10, 10)])
    jj, ii = np.mgrid[0:10, 0:10]
    assert np.array_equal(mask_of([below]), ii + jj <= 9)
    assert np.array_equal(mask_of([above]), ii > jj)
    # An apex on a centre, with no interior to its west, is out: the triangle with base
    # y = 2.5 (x from 2.5 to 6.5) and apex (4.5, 6.5). Rows by hand: row 2 (the base, an
    # east-west edge): columns 3..6; row 3: x in (3, 6] -> 3..5; row 4: (3.5, 5.5] -> 4, 5;
    # row 5: (4, 5] -> 4; row 6: the apex (4.5, 4.5] -> none.
    tri = Polygon([(2.5, 2.5), (6.5, 2.5), (4.5, 6.5)])
    m = mask_of([tri])
    assert [sorted(np.flatnonzero(m[j])) for j in range(2, 7)] == [[3, 4, 5, 6], [3, 4, 5], [4, 5], [4], []]


def test_edge_rule_is_gdal_rule_in_metres_at_zone_coordinates():
    # 10 m pixels in zone 33N: a square whose edges pass through centres at
    # easting 500 005 + 10 k; rasterio in metres with the zone's geotransform agrees.
    g = 10.0
    sq = box(E0 + 25, N0 + 25, E0 + 75, N0 + 75)  # centres 25, 35, ... 75 on both axes
    c = counts([sq], [], tx=5000, ty=50000, t=100.0, g=g, tol=0)
    ref = naive_counts([sq], [], tile_x=5000, tile_y=50000, tile_size_m=100.0, gsd_m=g, tolerance_px=0)
    # By hand: x in (25, 75] -> 5 columns, y in [25, 75] -> 6 rows.
    assert c.fn == ref["fn"] == 30
    assert as_dict(c) == ref


def test_tile_bounds_when_side_is_not_a_multiple_of_gsd():
    # T = 7.5 m at 1 m: tile 0 holds centres 0.5..6.5 (7 columns), tile 1 centres 7.5..14.5
    # (8: the centre 7.5 on the shared edge goes to tile 1), tile 2 centres 15.5..21.5.
    assert tile_pixel_bounds(0, 0, tile_size_m=7.5, gsd_m=1.0) == (0, 7, 0, 7)
    assert tile_pixel_bounds(1, 2, tile_size_m=7.5, gsd_m=1.0) == (7, 15, 15, 22)
    assert tile_pixel_bounds(-1, 0, tile_size_m=7.5, gsd_m=1.0)[:2] == (-8, 0)
    # Adjacent tiles partition the pixels, whatever the sizes.
    for t, g in ((7.5, 1.0), (10_000.0, 3.0), (1000.0, 0.7), (0.5, 1.0)):
        bounds = [tile_pixel_bounds(k, 0, tile_size_m=t, gsd_m=g)[:2] for k in range(-3, 4)]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
        for k, (i0, i1) in zip(range(-3, 4), bounds):
            assert np.array_equal(np.arange(i0, i1), naive_indices(k * t, (k + 1) * t, g))
    # Tiles smaller than a pixel: tile (0, 0) of 0.5 m, [0, 0.5)², holds no centre; tile
    # (1, 1), [0.5, 1)², holds the centre (0.5, 0.5) of pixel (0, 0).
    assert counts([box(0, 0, 1, 1)], [], tx=0, ty=0, t=0.5, g=1.0).n_pixels == 0
    assert counts([box(0, 0, 1, 1)], [], tx=1, ty=1, t=0.5, g=1.0).fn == 1


# --------------------------------------------------------------------------------------
# Against rasterio + numpy and seed 001's recipe
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed, t, g, tol, window",
    [
        (0, 60.0, 1.0, 0, MAX_WINDOW_PIXELS),
        (1, 60.0, 1.0, 2, 24 * 24),     # many windows of 18 x 18 pixels plus the halo
        (2, 395.0, 10.0, 1, 16 * 16),  # 395 m tiles on a 10 m grid: 39 or 40 columns
        (3, 47.3, 0.7, 3, 32 * 32),
    ],
)
def test_counts_match_rasterio_and_numpy_on_random_polygons(seed, t, g, tol, window):
    rng = np.random.default_rng(seed)
    tx, ty = 5, 7
    x0, y0 = tx * t, ty * t
    ref = random_fields(rng, 25, x0, y0, t, 0.05 * t, 0.3 * t)
    pred = [shapely.affinity.translate(p, *rng.normal(0, 0.02 * t, 2)) for p in ref[:20]] + random_fields(rng, 5, x0, y0, t, 0.05 * t, 0.2 * t)
    valid = box(x0 + 0.1 * t, y0 - t, x0 + 2 * t, y0 + 0.8 * t).difference(shapely.Point(x0 + 0.5 * t, y0 + 0.4 * t).buffer(0.2 * t))
    for kw in ({}, {"valid": valid}):
        ours = counts(ref, pred, tx=tx, ty=ty, t=t, g=g, tol=tol, max_window_pixels=window, **kw)
        expected = naive_counts(ref, pred, tile_x=tx, tile_y=ty, tile_size_m=t, gsd_m=g, tolerance_px=tol, **kw)
        assert as_dict(ours) == expected
        assert ours.tp > 0 and ours.fp > 0 and ours.fn > 0 and ours.ref_boundary_hit < ours.ref_boundary
        assert (ours.gsd_m, ours.tolerance_px) == (g, tol)


@pytest.mark.parametrize("tol", [0, 1, 2, 4])
def test_boundary_f1_equals_seed_recipe_on_one_tile(tol):
    # Every polygon lies well inside the 64 m tile, so the tile raster holds the full masks
    # and seed 001's boundary_f1 over the whole raster is the tile's boundary F1.
    rng = np.random.default_rng(tol)
    ref = [shapely.affinity.rotate(box(8, 10, 30, 25), 17), Polygon([(35, 8), (56, 14), (50, 40)]),
           box(12, 35, 28, 55).difference(box(17, 40, 22, 46))]
    pred = [shapely.affinity.translate(p, *rng.normal(0, 1.2, 2)) for p in ref] + [box(40, 45, 50, 55)]
    ours = counts(ref, pred, t=64.0, tol=tol)
    r = naive_raster(ref, 1.0, 0, 64, 0, 64)
    p = naive_raster(pred, 1.0, 0, 64, 0, 64)
    precision, recall, f1 = seed_boundary_f1(p, r, tolerance_px=tol)
    got = boundary_metrics(ours.ref_boundary, ours.ref_boundary_hit, ours.pred_boundary, ours.pred_boundary_hit)
    assert got["precision"] == pytest.approx(precision, rel=1e-12)
    assert got["recall"] == pytest.approx(recall, rel=1e-12)
    assert got["f1"] == pytest.approx(f1, rel=1e-12)
    assert 0 < f1 < 1
    # And the pixel counts are the masks' own.
    assert (ours.tp, ours.fp, ours.fn) == (int((r & p).sum()), int((~r & p).sum()), int((r & ~p).sum()))


def test_large_polygon_and_band_are_clipped_per_window_without_changing_counts():
    # A field with 40 000 vertices (clipped to every window before rasterising) and a band
    # whose eastern edge is densified to 20 000 vertices (the restriction's clip path).
    disc = shapely.Point(31.3, 29.1).buffer(26.0, quad_segs=10_000)
    assert shapely.get_num_coordinates(disc) > pixels._CLIP_MIN_COORDS
    pred = [box(10, 10, 50, 45)]
    band = shapely.segmentize(Polygon([(-10, -10), (40.3, -10), (52.7, 70), (-10, 70)]), 0.004)
    assert shapely.get_num_coordinates(band) > 20_000
    for window in (MAX_WINDOW_PIXELS, 20 * 20):
        ours = counts([disc], pred, t=60.0, tol=2, band=band, max_window_pixels=window)
        assert as_dict(ours) == naive_counts([disc], pred, tile_x=0, tile_y=0, tile_size_m=60.0, gsd_m=1.0, tolerance_px=2, band=band)


# --------------------------------------------------------------------------------------
# Seams
# --------------------------------------------------------------------------------------


def test_square_across_four_tiles_has_no_boundary_at_tile_edges():
    # box(0, 0, 16, 16) covers the four 8 m tiles (0..1, 0..1) exactly. Its boundary is the
    # outer ring of the 16 x 16 block: 4 * 16 - 4 = 60 pixels (an 8 x 8 ring per tile, as a
    # cut mask would give, would be 4 * 28 = 112). The prediction box(1, 0, 16, 16) is
    # columns 1..15: ring 2 * 15 + 2 * 16 - 4 = 58.
    # Tolerance 1: everything hits. Tolerance 0: the ref's column 0 (16) misses; of the
    # pred's column 1, only rows 0 and 15 lie on the ref's ring: 58 - 14 = 44 hits.
    ref, pred = [box(0, 0, 16, 16)], [box(1, 0, 16, 16)]
    for tol, hits in ((1, (60, 58)), (0, (44, 44))):
        parts = [counts(ref, pred, tx=x, ty=y, t=8.0, tol=tol) for x in (0, 1) for y in (0, 1)]
        total = sum(parts, PixelCounts.zero())
        assert (total.tp, total.fp, total.fn, total.tn) == (240, 0, 16, 0)
        assert (total.ref_boundary, total.pred_boundary) == (60, 58)
        assert (total.ref_boundary_hit, total.pred_boundary_hit) == hits
        # Each corner tile alone: the ref ring's share is 8 + 7 = 15 pixels.
        assert [p.ref_boundary for p in parts] == [15, 15, 15, 15]


@pytest.mark.parametrize("t, g, tol", [(8.0, 1.0, 0), (8.0, 1.0, 2), (7.5, 1.0, 1), (30.0, 10.0 / 3.0, 3)])
def test_field_split_across_four_tiles_sums_to_one_big_tile(t, g, tol):
    # One irregular field centred on the common corner (t, t) of tiles (0..1, 0..1), a
    # shifted and rotated prediction, and a valid area; the four tiles of side t add up to
    # tile (0, 0) of side 2 t, key by key, boundary included, and both equal the naive counts.
    field = shapely.affinity.rotate(Polygon([(0.3 * t, 0.5 * t), (1.6 * t, 0.2 * t), (1.8 * t, 1.7 * t), (0.6 * t, 1.5 * t)]), 11)
    hole = shapely.Point(1.1 * t, 0.9 * t).buffer(0.15 * t)
    ref = [field.difference(hole)]
    pred = [shapely.affinity.rotate(shapely.affinity.translate(field, 0.04 * t, -0.03 * t), -4), box(0.1 * t, 1.8 * t, 0.3 * t, 1.95 * t)]
    valid = box(0.2 * t, 0.0, 2 * t, 1.9 * t)
    for kw in ({}, {"valid": valid}):
        parts = [counts(ref, pred, tx=x, ty=y, t=t, g=g, tol=tol, **kw) for x in (0, 1) for y in (0, 1)]
        whole = counts(ref, pred, tx=0, ty=0, t=2 * t, g=g, tol=tol, **kw)
        total = sum(parts, PixelCounts.zero())
        assert total == whole
        assert all(p.ref_boundary > 0 for p in parts)
        assert as_dict(whole) == naive_counts(ref, pred, tile_x=0, tile_y=0, tile_size_m=2 * t, gsd_m=g, tolerance_px=tol, **kw)


def test_windows_do_not_change_counts():
    rng = np.random.default_rng(5)
    ref = random_fields(rng, 30, 0, 0, 80, 3, 20)
    pred = [shapely.affinity.translate(p, *rng.normal(0, 1.5, 2)) for p in ref]
    for tol in (0, 3):
        one = counts(ref, pred, t=80.0, tol=tol)
        assert counts(ref, pred, t=80.0, tol=tol, max_window_pixels=16 * 16) == one
        assert counts(ref, pred, t=80.0, tol=tol, max_window_pixels=37 * 37) == one


# --------------------------------------------------------------------------------------
# Band and valid area
# --------------------------------------------------------------------------------------


def test_band_and_valid_restrict_the_counting_not_the_masks():
    ref = [box(2, 2, 8, 8)]       # 6 x 6 pixels, columns and rows 2..7
    pred = [box(3, 2, 8, 8)]      # columns 3..7: 30 pixels
    band = box(0, 0, 5, 10)       # centres x < 5: columns 0..4 (50 pixels)
    valid = box(0, 0, 10, 5)      # rows 0..4
    c = counts(ref, pred, tol=0, band=band)
    # Columns 0..4: ref columns 2..4 x 6 rows = 18, pred columns 3..4 x 6 = 12, TP 12.
    assert (c.tp, c.fp, c.fn, c.tn) == (12, 0, 6, 32)
    # The ref's boundary in columns 0..4: column 2 (6) + rows 2 and 7 at columns 3, 4 (4) = 10;
    # a mask cut at the band's edge would add column 4 (14). The pred's: column 3 (6) +
    # (4, 2), (4, 7) = 8. Hits at tolerance 0: the common pixels (3, 2), (3, 7), (4, 2), (4, 7).
    assert (c.ref_boundary, c.ref_boundary_hit, c.pred_boundary, c.pred_boundary_hit) == (10, 4, 8, 4)
    c = counts(ref, pred, tol=0, band=band, valid=valid)
    # Columns 0..4 and rows 0..4 (25 pixels): ref columns 2..4 x rows 2..4 = 9, pred 3..4 x 2..4 = 6.
    assert (c.tp, c.fp, c.fn, c.tn) == (6, 0, 3, 16)
    # Boundary among them, as (i, j): ref (2, 2), (2, 3), (2, 4), (3, 2), (4, 2) = 5; pred
    # (3, 2), (3, 3), (3, 4), (4, 2) = 4. At tolerance 0 the hits are the common pixels
    # (3, 2) and (4, 2): 2 each way.
    assert (c.ref_boundary, c.ref_boundary_hit, c.pred_boundary, c.pred_boundary_hit) == (5, 2, 4, 2)
    assert as_dict(c) == naive_counts(ref, pred, tile_x=0, tile_y=0, tile_size_m=10.0, gsd_m=1.0, tolerance_px=0, band=band, valid=valid)


def test_band_and_valid_follow_the_centre_rule():
    # A band whose east edge passes through the centres of column 4 includes them (50
    # pixels); a valid area whose west edge does excludes them (columns 5..9: 50 pixels).
    assert counts([], [], band=box(-5, -5, 4.5, 15)).tn == 50
    assert counts([], [], valid=box(4.5, -5, 15, 15)).tn == 50
    # An empty or disjoint valid area leaves nothing to count; a MultiPolygon is its union.
    assert counts([box(0, 0, 5, 5)], [], valid=Polygon()).n_pixels == 0
    assert counts([box(0, 0, 5, 5)], [], valid=box(20, 20, 30, 30)).n_pixels == 0
    mp = shapely.MultiPolygon([box(0, 0, 2, 10), box(8, 0, 10, 10)])
    c = counts([box(0, 0, 5, 5)], [], valid=mp)
    assert (c.fn, c.tn) == (10, 30)  # columns 0, 1, 8, 9: 40 pixels; ref in columns 0, 1, rows 0..4


def test_geometry_inputs():
    # MultiPolygons burn part by part; overlapping polygons count once; None and empty skip.
    mp = shapely.MultiPolygon([box(0, 0, 2, 2), box(5, 5, 7, 7)])
    c = counts([mp, box(1, 1, 3, 3), None, Polygon()], [])
    assert c.fn == 4 + 4 + 4 - 1
    gs = np.array([mp], dtype=object)
    assert counts(gs, []).fn == 8
    with pytest.raises(ValueError, match="ref_geoms"):
        counts([shapely.LineString([(0, 0), (5, 5)])], [])
    with pytest.raises(ValueError, match="pred_geoms"):
        counts([], [shapely.Point(1, 1)])
    with pytest.raises(ValueError, match="band"):
        counts([], [], band="everywhere")


# --------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------


def test_pixel_metrics_by_hand():
    # TP 6, FP 2, FN 4, TN 8: P = 6/8, R = 6/10, F1 = 12/18, IoU = 6/12,
    # MCC = (48 - 8) / sqrt(8 * 10 * 10 * 12) = 40 / sqrt(9600), Tversky(0.3, 0.7) = 6 / 9.4.
    m = pixel_metrics(6, 2, 4, 8, alpha=0.3, beta=0.7)
    assert m == pytest.approx({"precision": 0.75, "recall": 0.6, "f1": 2 / 3, "iou": 0.5,
                               "mcc": 40 / math.sqrt(9600), "tversky": 6 / 9.4}, rel=1e-12)
    # Seed 002: a tile with false positives only has F1 = 0 (and IoU 0, precision 0);
    # recall and MCC are undefined (no positives to find).
    m = pixel_metrics(0, 5, 0, 95)
    assert (m["f1"], m["iou"], m["precision"]) == (0.0, 0.0, 0.0)
    assert math.isnan(m["recall"]) and math.isnan(m["mcc"]) and m["tversky"] == 0.0
    # Nothing positive anywhere: every ratio undefined.
    assert all(math.isnan(v) for v in pixel_metrics(0, 0, 0, 100).values())
    # Perfect: MCC 1; all wrong: MCC -1.
    assert pixel_metrics(10, 0, 0, 90)["mcc"] == 1.0
    assert pixel_metrics(0, 10, 90, 0)["mcc"] == -1.0
    # Vectorised: arrays in, arrays out, NaN where undefined.
    m = pixel_metrics(np.array([6, 0, 0]), np.array([2, 5, 0]), np.array([4, 0, 0]), np.array([8, 95, 100]))
    assert np.allclose(m["f1"], [2 / 3, 0.0, np.nan], equal_nan=True)


def test_metric_relations():
    rng = np.random.default_rng(0)
    tp, fp, fn, tn = (rng.integers(0, 50, 500) for _ in range(4))
    m = pixel_metrics(tp, fp, fn, tn)
    ok = 2 * tp + fp + fn > 0
    dice = 2 * tp / np.where(ok, 2 * tp + fp + fn, 1)  # 2|A ∩ B| / (|A| + |B|), |A| = TP + FN, |B| = TP + FP
    assert np.allclose(m["f1"][ok], dice[ok], rtol=1e-12) and np.isnan(m["f1"][~ok]).all()
    assert np.allclose(m["iou"][ok], m["f1"][ok] / (2 - m["f1"][ok]), rtol=1e-12)
    assert np.allclose(m["tversky"][ok], m["f1"][ok], rtol=1e-12)
    assert np.allclose(pixel_metrics(tp, fp, fn, tn, alpha=1, beta=1)["tversky"][ok], m["iou"][ok], rtol=1e-12)
    # And on the counts of a real tile.
    c = counts([box(2, 2, 6, 6)], [box(3.2, 2.6, 7.1, 6.3)], tol=1)
    m = pixel_metrics(c.tp, c.fp, c.fn, c.tn)
    assert m["f1"] == pytest.approx(2 * c.tp / ((c.tp + c.fn) + (c.tp + c.fp)))
    assert m["iou"] == pytest.approx(m["f1"] / (2 - m["f1"]))


def test_boundary_metrics():
    # P = 30 / 50, R = 30 / 40, F1 = 2 * 0.6 * 0.75 / 1.35 = 2/3.
    assert boundary_metrics(40, 30, 50, 30) == pytest.approx({"precision": 0.6, "recall": 0.75, "f1": 2 / 3})
    m = boundary_metrics(40, 0, 50, 0)  # both 0: F1 undefined, not 0
    assert (m["precision"], m["recall"]) == (0.0, 0.0) and math.isnan(m["f1"])
    m = boundary_metrics(0, 0, 50, 10)  # no reference boundary: recall and F1 undefined
    assert m["precision"] == 0.2 and math.isnan(m["recall"]) and math.isnan(m["f1"])


def test_micro_macro_seed_002_example():
    # Seed 002: A (90, 10, 10): F1 0.9; B (0, 5, 0): F1 0. Micro F1 = 180 / 205 = 0.878;
    # macro F1 = 0.45 over 2 tiles; macro recall over A only (B has nothing to find).
    a = PixelCounts(90, 10, 10, 890, 40, 30, 50, 30, gsd_m=10.0, tolerance_px=2)
    b = PixelCounts(0, 5, 0, 995, 0, 0, 10, 0, gsd_m=10.0, tolerance_px=2)
    out = micro_macro([a, b])
    assert list(out) == ["count_pixels", "count_tp", "count_fp", "count_fn", "count_tn", "micro", "macro", "boundary_f1"]
    assert (out["count_pixels"], out["count_tp"], out["count_fp"], out["count_fn"], out["count_tn"]) == (2000, 90, 15, 10, 1885)
    assert list(out["micro"]) == ["precision", "recall", "f1", "iou", "mcc", "tversky"]
    assert out["micro"]["f1"] == pytest.approx(180 / 205)
    assert out["micro"]["precision"] == pytest.approx(90 / 105)
    assert out["micro"]["iou"] == pytest.approx(90 / 115)
    assert out["macro"]["f1"] == {"value": pytest.approx(0.45), "n_units": 2}
    assert out["macro"]["recall"] == {"value": pytest.approx(0.9), "n_units": 1}
    assert out["macro"]["mcc"]["n_units"] == 1
    # Boundary F1, pooled: P = 30 / 60, R = 30 / 40, F1 = 2 * 0.5 * 0.75 / 1.25 = 0.6.
    assert out["boundary_f1"] == {"precision": pytest.approx(0.5), "recall": pytest.approx(0.75),
                                  "f1": pytest.approx(0.6), "tolerance_px": 2}
    # Undefined is None (JSON null), never 0 or 1.
    empty = micro_macro([])
    assert empty["count_pixels"] == 0 and all(v is None for v in empty["micro"].values())
    assert all(v == {"value": None, "n_units": 0} for v in empty["macro"].values())
    assert empty["boundary_f1"] == {"precision": None, "recall": None, "f1": None, "tolerance_px": None}
    only_tn = micro_macro([PixelCounts(tn=100, tolerance_px=1)])
    assert only_tn["micro"]["f1"] is None and only_tn["macro"]["f1"]["n_units"] == 0
    # Tversky weights reach the macro values.
    t = micro_macro([a], alpha=1.0, beta=1.0)
    assert t["micro"]["tversky"] == pytest.approx(t["micro"]["iou"])


# --------------------------------------------------------------------------------------
# Counts that merge
# --------------------------------------------------------------------------------------


def test_pixel_counts_merge_by_addition():
    a = PixelCounts(1, 2, 3, 4, 5, 6, 7, 8, gsd_m=10.0, tolerance_px=2)
    b = PixelCounts(10, 20, 30, 40, 50, 60, 70, 80, gsd_m=10.0, tolerance_px=2)
    assert a + b == b + a == a.merge(b) == PixelCounts(11, 22, 33, 44, 55, 66, 77, 88, gsd_m=10.0, tolerance_px=2)
    assert PixelCounts.zero() + a == a + PixelCounts.zero() == a
    assert (a + b).n_pixels == 110
    with pytest.raises(IncompatibleStatsError, match="tolerance_px"):
        a + PixelCounts(tolerance_px=3, gsd_m=10.0)
    with pytest.raises(IncompatibleStatsError, match="gsd_m"):
        a.merge(PixelCounts(gsd_m=5.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.tp = 0
    assert not hasattr(a, "__dict__")  # slots


def test_merge_of_any_split_of_tiles_equals_the_whole():
    # The 3 x 3 tiles of 10 m, summed in any grouping, equal the 30 m tile.
    rng = np.random.default_rng(9)
    ref = random_fields(rng, 12, 0, 0, 30, 2, 8)
    pred = [shapely.affinity.translate(p, 0.7, -0.4) for p in ref]
    tiles = [counts(ref, pred, tx=x, ty=y, t=10.0, tol=1) for x in range(3) for y in range(3)]
    whole = counts(ref, pred, t=30.0, tol=1)
    for k in (0, 4, 9):
        assert sum(tiles[:k], PixelCounts.zero()) + sum(tiles[k:], PixelCounts.zero()) == whole
    assert micro_macro(tiles)["micro"] == micro_macro([whole])["micro"]


# --------------------------------------------------------------------------------------
# Memory bound and bad parameters
# --------------------------------------------------------------------------------------


def test_window_bytes_and_memory_bound():
    # 10 km tiles at 10 m: one window of at most (1001 + 2 * 3)² pixels at tolerance 2.
    assert window_bytes(10.0, 10_000.0, 2) == 1007**2 * pixels.BYTES_PER_WINDOW_PIXEL
    # At 1 m, the window is capped: 1024 x 1024 pixels, halo included.
    assert window_bytes(1.0, 10_000.0, 2) == MAX_WINDOW_PIXELS * pixels.BYTES_PER_WINDOW_PIXEL
    assert window_bytes(0.2, 10_000.0, 2) == window_bytes(1.0, 10_000.0, 2)
    assert window_bytes(1.0, 10_000.0, 2, max_window_pixels=64 * 64) == 64 * 64 * pixels.BYTES_PER_WINDOW_PIXEL
    # A halo that leaves less than half a window's side for the tile.
    with pytest.raises(ValueError, match=r"tolerance_px=300 .*smaller tolerance_px"):
        window_bytes(10.0, 10_000.0, 300)
    with pytest.raises(ValueError, match=r"tolerance_px=3 .*smaller tolerance_px"):
        counts([], [], tol=3, max_window_pixels=14 * 14)
    # A tile of more than MAX_TILE_PIXELS pixels: 10 km at 0.1 m is 1e10.
    with pytest.raises(ValueError, match=r"larger pixel_gsd_m or smaller tiles"):
        window_bytes(0.1, 10_000.0, 2)
    with pytest.raises(ValueError, match=r"larger pixel_gsd_m or smaller tiles"):
        counts([], [], t=10_000.0, g=0.1)


def test_peak_memory_stays_within_window_bytes():
    # A 500 m tile at 1 m in windows of at most 256 x 256 pixels: the peak of Python's and
    # numpy's allocations (traced by tracemalloc) stays under the stated bound.
    rng = np.random.default_rng(3)
    ref = random_fields(rng, 80, 0, 0, 500, 5, 60)
    pred = [shapely.affinity.translate(p, *rng.normal(0, 2, 2)) for p in ref]
    band = Polygon([(-10, -10), (430, -10), (330, 510), (-10, 510)])
    valid = box(20, 0, 500, 480)
    window = 256 * 256
    bound = window_bytes(1.0, 500.0, 3, max_window_pixels=window)
    assert bound == window * pixels.BYTES_PER_WINDOW_PIXEL
    counts(ref, pred, t=500.0, tol=3, band=band, valid=valid, max_window_pixels=window)  # warm up imports and caches
    tracemalloc.start()
    try:
        c = counts(ref, pred, t=500.0, tol=3, band=band, valid=valid, max_window_pixels=window)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert c.ref_boundary > 1000
    assert peak <= bound, (peak, bound)


@pytest.mark.parametrize("gsd", [0, -1.0, float("nan"), float("inf"), "10", True, None])
def test_bad_gsd(gsd):
    with pytest.raises(ValueError, match="gsd_m"):
        counts([], [], g=gsd)
    with pytest.raises(ValueError, match="gsd_m"):
        window_bytes(gsd, 100.0, 1)


@pytest.mark.parametrize("tol", [-1, 1.5, 2.0, True, "2", None])
def test_bad_tolerance(tol):
    with pytest.raises(ValueError, match="tolerance_px"):
        counts([], [], tol=tol)
    with pytest.raises(ValueError, match="tolerance_px"):
        window_bytes(1.0, 100.0, tol)


@pytest.mark.parametrize("name, value", [("alpha", -0.1), ("beta", -1), ("alpha", float("nan")), ("beta", "0.5")])
def test_bad_tversky_weights(name, value):
    with pytest.raises(ValueError, match=name):
        pixel_metrics(1, 1, 1, 1, **{name: value})
    with pytest.raises(ValueError, match=name):
        micro_macro([], **{name: value})


def test_other_bad_parameters():
    with pytest.raises(ValueError, match="tile_size_m"):
        counts([], [], t=0.0)
    with pytest.raises(ValueError, match="tile_x"):
        counts([], [], tx=1.5)
    with pytest.raises(ValueError, match="epsg"):
        tile_pixel_counts([], [], epsg="32633", tile_x=0, tile_y=0, tile_size_m=10.0, gsd_m=1.0, tolerance_px=1)
    with pytest.raises(ValueError, match="tp"):
        pixel_metrics(-1, 0, 0, 0)
    with pytest.raises(ValueError, match="max_window_pixels"):
        counts([], [], max_window_pixels=4)


def test_doctests():
    attempted = 0
    for module in (pixels, pixel_counts):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0
        attempted += result.attempted
    assert attempted > 10

"""Boundary distances and tolerance lengths (evalcore.boundary, evalcore._kernels).

Kernels are compared with the naive twins of ``tests/reference.py`` and with lengths
worked out by hand.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import geopandas
import numpy as np
import pytest
import shapely
from shapely.geometry import LineString, MultiPolygon, Polygon, box

from evalcore import _kernels
from evalcore.boundary import (
    _flatten,
    _pair_distances_batch,
    boundary_spacing,
    boundary_within_tolerance,
    matched_pair_distances,
    pair_boundary_distances,
    tolerance_lengths,
    tolerance_reach,
)
from evalcore.boundary import _source_rings_in_zone, _tolerance_candidates
from evalcore.crs import to_utm, utm_crs
from evalcore.prepare import prepare_layer
from evalcore.rings import Rings

try:
    from tests.reference import (
        naive_boundary_distances,
        naive_capsule_interval,
        naive_fine_distances,
        naive_length_within,
        naive_sample_distances,
        naive_union_length,
    )
except ImportError:  # pytest run without the project root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from reference import (  # type: ignore[no-redef]
        naive_boundary_distances,
        naive_capsule_interval,
        naive_fine_distances,
        naive_length_within,
        naive_sample_distances,
        naive_union_length,
    )

X0, Y0 = 500_000.0, 4_200_000.0  # UTM-like coordinates, so rounding is realistic


def random_polygon(rng: np.random.Generator, centre=(X0, Y0), radius=50.0, n=None) -> Polygon:
    """A valid star-shaped polygon with 3-40 vertices."""
    n = int(rng.integers(3, 40)) if n is None else n
    while True:
        angle = np.sort(rng.uniform(0.0, 2 * np.pi, n))
        r = rng.uniform(0.3 * radius, radius, n)
        poly = Polygon(np.c_[centre[0] + r * np.cos(angle), centre[1] + r * np.sin(angle)])
        if poly.is_valid and poly.area > 0:
            return poly


def random_shape(rng: np.random.Generator, centre=(X0, Y0), radius=50.0):
    """A polygon, a polygon with a hole, or a two-part multipolygon."""
    kind = rng.integers(0, 3)
    poly = random_polygon(rng, centre, radius)
    if kind == 1:
        while True:
            hole = random_polygon(rng, centre, 0.25 * radius)
            with_hole = Polygon(poly.exterior.coords, [hole.exterior.coords])
            if with_hole.is_valid:
                return with_hole
            poly = random_polygon(rng, centre, radius)
    if kind == 2:
        other = random_polygon(rng, (centre[0] + 2.5 * radius, centre[1]), radius / 2)
        return MultiPolygon([poly, other])
    return poly


def random_pair(rng: np.random.Generator):
    radius = rng.uniform(5.0, 200.0)
    ref = random_shape(rng, radius=radius)
    shift = rng.normal(0.0, radius / 6, 2)
    pred = random_shape(rng, centre=(X0 + shift[0], Y0 + shift[1]), radius=radius * rng.uniform(0.8, 1.2))
    return ref, pred


def segments_as_rings(*segments):
    """Flat arrays in which every polyline is one (open) ring: kernel input for bare segments."""
    xs, ys, off = [], [], [0]
    for line in segments:
        line = np.asarray(line, dtype=np.float64)
        xs.append(line[:, 0])
        ys.append(line[:, 1])
        off.append(off[-1] + len(line))
    return np.concatenate(xs), np.concatenate(ys), np.array(off, dtype=np.int64)


def length_within_segments(query, others, tol):
    """Kernel length of one polyline within ``tol`` of other polylines."""
    qx, qy, q_off = segments_as_rings(query)
    ox, oy, o_off = segments_as_rings(*others)
    geom_off = np.array([0, 1], dtype=np.int64)
    cell = max(4 * tol, 1.0)
    return _kernels._boundary_within_tolerance(qx, qy, q_off, geom_off, ox, oy, o_off, float(tol), cell)[0]


# ---------------------------------------------------------------------------
# Distances: closed forms
# ---------------------------------------------------------------------------
#
# Square r = [0, s]^2 and p = r shifted by d along x, 0 < d < s. Distance from each
# edge of ∂r to ∂p:
#   left   (x = 0):  p's left edge x = d is nearest everywhere: d          -> ∫ = s d
#   right  (x = s):  p's bottom/top edges pass through (s, 0) and (s, s), p's left
#                    edge is s - d away: min(y, s - y, s - d, d)           -> ∫ = d (s - d)
#                    (for d <= s/2: 2 * d^2/2 + d (s - 2d); for d > s/2: 2 (s-d)^2/2 + (s-d)(2d - s))
#   bottom (y = 0):  on p's bottom edge for x >= d, else (d - x) to p's corner (d, 0) -> ∫ = d^2 / 2
#   top    (y = s):  the same                                                -> ∫ = d^2 / 2
# I_r = s d + d (s - d) + d^2 = 2 s d, and I_p = I_r by symmetry (mirror x -> s + d - x).
# mean = (I_r + I_p) / (|∂r| + |∂p|) = 4 s d / 8 s = d / 2, and the Hausdorff distance
# is d (the left edge of r, and the right edge of p). The distance along each edge is
# piecewise linear with kinks at x or y in {d, s - d, s/2}: when Δ divides them the
# trapezoid rule is exact.


@pytest.mark.parametrize("d", [2.0, 5.0, 7.0])
@pytest.mark.parametrize("spacing", [0.5, 1.0])
def test_shifted_square_exact(d, spacing):
    s = 10.0
    ref = box(X0, Y0, X0 + s, Y0 + s)
    pred = box(X0 + d, Y0, X0 + s + d, Y0 + s)
    h, mean, used = pair_boundary_distances(np.array([ref]), np.array([pred]), spacing)
    assert h[0] == pytest.approx(d, rel=1e-12)
    assert mean[0] == pytest.approx(d / 2, rel=1e-12)
    assert used[0] == spacing


@pytest.mark.parametrize("spacing", [0.7, 0.37, 3.3])
def test_shifted_square_inexact_spacing(spacing):
    s, d = 10.0, 2.5
    ref = box(X0, Y0, X0 + s, Y0 + s)
    pred = box(X0 + d, Y0, X0 + s + d, Y0 + s)
    h, mean, _ = pair_boundary_distances(np.array([ref]), np.array([pred]), spacing)
    # Samples on r's left edge are all exactly d away: the maximum is reached.
    assert h[0] == pytest.approx(d, rel=1e-12)
    assert abs(mean[0] - d / 2) <= spacing / 4


def test_polygon_against_itself():
    rng = np.random.default_rng(3)
    geoms = np.array([random_shape(rng, radius=r) for r in (5.0, 40.0, 300.0)])
    h, mean, _ = pair_boundary_distances(geoms, geoms, 1.0)
    # Vertices are exactly 0 away; samples interpolated on a segment are a rounding
    # error away from it (coordinates ~4e6 m: ~1e-9 m).
    assert np.all(h < 1e-8) and np.all(mean < 1e-8)
    within = boundary_within_tolerance(geoms, geoms, 0.5)
    np.testing.assert_allclose(within, shapely.length(geoms), rtol=1e-12)
    # The same with tolerance 0: every segment lies on itself.
    np.testing.assert_allclose(boundary_within_tolerance(geoms, geoms, 0.0), shapely.length(geoms), rtol=1e-12)


def test_missing_and_empty_give_nan():
    a = box(0, 0, 10, 10)
    ref = np.array([None, a, Polygon(), a], dtype=object)
    pred = np.array([a, None, a, MultiPolygon()], dtype=object)
    for out in pair_boundary_distances(ref, pred, 1.0):
        assert np.isnan(out).all()
    within = boundary_within_tolerance(np.array([None, Polygon(), a], dtype=object), np.array([a, None]), 1.0)
    assert np.isnan(within[0]) and within[1] == 0.0 and within[2] == pytest.approx(40.0)
    assert boundary_within_tolerance(np.array([a]), np.array([], dtype=object), 1.0).tolist() == [0.0]
    assert [v.size for v in pair_boundary_distances(np.array([], dtype=object), np.array([], dtype=object), None)] == [0, 0, 0]


def test_bad_arguments():
    a = np.array([box(0, 0, 1, 1)])
    with pytest.raises(ValueError, match="spacing_m"):
        pair_boundary_distances(a, a, 0.0)
    with pytest.raises(ValueError, match="spacing_m"):
        pair_boundary_distances(a, a, float("nan"))
    with pytest.raises(ValueError, match="same length"):
        pair_boundary_distances(a, np.array([box(0, 0, 1, 1)] * 2), 1.0)
    with pytest.raises(ValueError, match="tolerance_m"):
        boundary_within_tolerance(a, a, -1.0)
    with pytest.raises(ValueError, match="Polygons or MultiPolygons"):
        boundary_within_tolerance(np.array([LineString([(0, 0), (1, 1)])]), a, 1.0)


# ---------------------------------------------------------------------------
# Distances: against the naive per-sample implementation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("spacing", [1.0, 2.7, None])
def test_kernel_matches_naive_at_same_samples(spacing):
    rng = np.random.default_rng(11)
    for _ in range(12):
        ref, pred = random_pair(rng)
        geoms = np.array([ref, pred])
        x, y, ring_off, geom_off = _flatten(geoms)
        step = boundary_spacing(shapely.length(geoms), spacing)
        for g_from, g_to in ((0, 1), (1, 0)):
            xy, weight, dist = naive_sample_distances(geoms[g_from], geoms[g_to], spacing)
            for chunk, prune in ((16, True), (3, True), (1, False)):
                sx, sy, w, d = _kernels._directed_sample_distances(
                    x, y, ring_off, geom_off, step, g_from, g_to, chunk, prune
                )
                # Same samples as shapely.segmentize, bit for bit.
                np.testing.assert_array_equal(np.c_[sx, sy], xy)
                np.testing.assert_allclose(w, weight, rtol=1e-12)
                np.testing.assert_allclose(d, dist, rtol=1e-9, atol=1e-9)
        expected = naive_boundary_distances(ref, pred, spacing)
        got = [v[0] for v in pair_boundary_distances(np.array([ref]), np.array([pred]), spacing)]
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


def test_batch_and_brute_force_agree():
    rng = np.random.default_rng(5)
    pairs = [random_pair(rng) for _ in range(25)]
    ref = np.array([p[0] for p in pairs])
    pred = np.array([p[1] for p in pairs])
    flat = (Rings.of(ref), Rings.of(pred), shapely.length(ref), shapely.length(pred), 1.5)
    pruned = _pair_distances_batch(*flat)
    brute = _pair_distances_batch(*flat, chunk=1, prune=False)
    for a, b in zip(pruned, brute):
        np.testing.assert_array_equal(a, b)  # the minimum over candidates is the same number
    one_by_one = [pair_boundary_distances(ref[i : i + 1], pred[i : i + 1], 1.5) for i in range(len(ref))]
    for k in range(3):
        np.testing.assert_array_equal(pruned[k], [v[k][0] for v in one_by_one])


@pytest.mark.parametrize("spacing", [1.0, 4.0, None])
def test_sampling_error_bounds(spacing):
    # Against samples 100 times finer that include the coarse ones: the Hausdorff
    # distance from samples is never above the finer one (beyond rounding) and at most
    # Δ/2 below it; the mean is within Δ/4 (plus the finer sampling's own Δ/400).
    rng = np.random.default_rng(7)
    for _ in range(6):
        ref, pred = random_pair(rng)
        h, mean, used = (v[0] for v in pair_boundary_distances(np.array([ref]), np.array([pred]), spacing))
        fine_h, fine_mean = naive_fine_distances(ref, pred, spacing)
        assert h <= fine_h + 1e-9 * max(fine_h, 1.0)
        assert h >= fine_h - used / 2 - 1e-9
        assert abs(mean - fine_mean) <= used / 4 + used / 400 + 1e-9


def test_spacing_none_uses_perimeter_over_1000():
    field = box(X0, Y0, X0 + 3000.0, Y0 + 500.0)  # perimeter 7000 m
    small = box(X0, Y0, X0 + 100.0, Y0 + 80.0)  # perimeter 360 m -> 1 m
    pred = shapely.affinity.translate(field, 3.0, -2.0)
    h, mean, used = pair_boundary_distances(np.array([field, small]), np.array([pred, small]), None)
    assert used.tolist() == [7.0, 1.0]
    expected = naive_boundary_distances(field, pred, 7.0)
    np.testing.assert_allclose([h[0], mean[0], used[0]], expected, rtol=1e-9)
    # and the samples are 7 m apart: 2 * (3000 / 7 -> 429 pieces) + 2 * (500 / 7 -> 72 pieces)
    x, y, ring_off, geom_off = _flatten(np.array([field]))
    sx, _, _ = _kernels._ring_samples(x, y, ring_off, 0, 7.0)
    assert len(sx) == 2 * 429 + 2 * 72


def test_multipolygon_and_hole_distances():
    outer = box(X0, Y0, X0 + 100, Y0 + 100)
    hole = box(X0 + 40, Y0 + 40, X0 + 60, Y0 + 60)
    with_hole = Polygon(outer.exterior.coords, [hole.exterior.coords])
    two = MultiPolygon([box(X0, Y0, X0 + 40, Y0 + 100), box(X0 + 45, Y0, X0 + 100, Y0 + 100)])
    for ref, pred in ((with_hole, outer), (two, outer), (with_hole, two)):
        got = [v[0] for v in pair_boundary_distances(np.array([ref]), np.array([pred]), 1.0)]
        np.testing.assert_allclose(got, naive_boundary_distances(ref, pred, 1.0), rtol=1e-9, atol=1e-12)
    # The hole's boundary is 40 m from the outer boundary of the filled square: Hausdorff 40.
    h, mean, _ = pair_boundary_distances(np.array([with_hole]), np.array([outer]), 1.0)
    assert h[0] == pytest.approx(40.0)
    # |∂r| = 400 + 80, |∂p| = 400; only the hole contributes: 80 m at distance 40.
    assert mean[0] == pytest.approx(80 * 40 / 880)


# ---------------------------------------------------------------------------
# Tolerance lengths: closed forms
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("e", [0.3, 1.0, 2.5])
def test_parallel_segments(e):
    query = [(X0, Y0 + e), (X0 + 10, Y0 + e)]
    other = [(X0, Y0), (X0 + 10, Y0)]
    assert length_within_segments(query, [other], e) == pytest.approx(10.0, rel=1e-12)
    assert length_within_segments(query, [other], 2 * e) == pytest.approx(10.0, rel=1e-12)
    assert length_within_segments(query, [other], e * (1 - 1e-9)) == 0.0
    assert length_within_segments(query, [other], 0.0) == 0.0
    # Two squares with facing edges e apart: facing edge whole, plus tol - e on the
    # top and bottom edges (within tol of the other square's near corners).
    a = box(X0, Y0, X0 + 10, Y0 + 10)
    b = box(X0 + 10 + e, Y0, X0 + 20 + e, Y0 + 10)
    for tol in (0.5 * e, e, 1.5 * e, 3 * e):
        expected = 10.0 + 2 * (tol - e) if tol >= e else 0.0
        got = boundary_within_tolerance(np.array([a]), np.array([b]), tol)[0]
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_perpendicular_segments():
    other = [(X0, Y0), (X0, Y0 + 100)]
    # Crossing the capsule's rectangle: |x| <= 2.
    assert length_within_segments([(X0 - 10, Y0 + 50), (X0 + 10, Y0 + 50)], [other], 2.0) == pytest.approx(4.0)
    # Passing 1 m beyond the end: inside the end disc for x^2 + 1 <= 4.
    got = length_within_segments([(X0 - 10, Y0 - 1), (X0 + 10, Y0 - 1)], [other], 2.0)
    assert got == pytest.approx(2 * math.sqrt(3.0), rel=1e-12)
    # Ending inside the capsule.
    assert length_within_segments([(X0 - 10, Y0 + 50), (X0 + 1, Y0 + 50)], [other], 2.0) == pytest.approx(3.0)


def test_collinear_overlapping_segments():
    query = [(X0, Y0), (X0 + 10, Y0)]
    other = [(X0 + 5, Y0), (X0 + 20, Y0)]
    assert length_within_segments(query, [other], 1.0) == pytest.approx(6.0)
    assert length_within_segments(query, [other], 0.0) == pytest.approx(5.0)
    reverse = [(X0 + 20, Y0), (X0 + 5, Y0)]
    assert length_within_segments(query, [reverse], 1.0) == pytest.approx(6.0)


def test_segments_meeting_at_a_vertex_count_once():
    # Other boundary: an L, (0,0)-(10,0)-(10,10). The query runs 1 m above the
    # horizontal leg and on past the vertical one. With tol 2: within the horizontal
    # leg's capsule for x <= 10 + sqrt(3), the vertical leg's for 8 <= x <= 12. The
    # union is [0, 12]: 12 m, not 10 + sqrt(3) + 4.
    other = [(X0, Y0), (X0 + 10, Y0), (X0 + 10, Y0 + 10)]
    query = [(X0, Y0 + 1), (X0 + 20, Y0 + 1)]
    assert length_within_segments(query, [other], 2.0) == pytest.approx(12.0, rel=1e-12)
    # The same legs given as two separate polylines.
    split = [other[:2], other[1:]]
    assert length_within_segments(query, split, 2.0) == pytest.approx(12.0, rel=1e-12)
    # A query made of two segments meeting at a vertex inside the capsule: each
    # segment counts its own part, the shared vertex adds nothing.
    query2 = [(X0, Y0 + 1), (X0 + 5, Y0 + 1), (X0 + 5, Y0 + 9)]
    assert length_within_segments(query2, [other[:2]], 2.0) == pytest.approx(5.0 + 1.0)
    # Squares touching at a corner, tolerance 0: a single point, length 0.
    a, b = box(X0, Y0, X0 + 1, Y0 + 1), box(X0 + 1, Y0 + 1, X0 + 2, Y0 + 2)
    assert boundary_within_tolerance(np.array([a]), np.array([b]), 0.0)[0] == 0.0
    # tol 0.5: 0.5 on each of the two edges meeting at the corner.
    assert boundary_within_tolerance(np.array([a]), np.array([b]), 0.5)[0] == pytest.approx(1.0)


def test_capsule_interval_matches_fine_grid():
    rng = np.random.default_rng(2)
    for _ in range(40):
        p, q, u, v = (rng.uniform(-10, 10, 2) for _ in range(4))
        tol = rng.uniform(0.0, 6.0)
        lo, hi = _kernels._capsule_interval(*p, *q, *u, *v, tol)
        n_lo, n_hi = naive_capsule_interval(p, q, u, v, tol)
        if n_lo > n_hi:  # nothing on the grid of step 5e-5
            assert lo > hi or hi - lo < 1e-4
        else:
            assert lo == pytest.approx(n_lo, abs=1e-4) and hi == pytest.approx(n_hi, abs=1e-4)


@pytest.mark.parametrize("n", [1, 3, 32, 33, 400])
def test_union_length(n):
    rng = np.random.default_rng(n)
    lo = rng.uniform(0.0, 1.0, n)
    lo[: n // 3] = lo[n // 3 : 2 * (n // 3)]  # ties in lo
    hi = np.minimum(lo + rng.uniform(0.0, 3.0 / n, n), 1.0)
    got = _kernels._union_length(lo.copy(), hi.copy(), n, np.empty(n, dtype=np.int64))
    assert got == pytest.approx(naive_union_length(lo, hi), rel=1e-12)


def test_radix_argsort_is_a_stable_sort():
    rng = np.random.default_rng(0)
    for top in (1, 300, 2**20, 2**40):
        keys = rng.integers(0, top, 5000).astype(np.int64)
        np.testing.assert_array_equal(_kernels._radix_argsort(keys), np.argsort(keys, kind="stable"))


# ---------------------------------------------------------------------------
# Tolerance lengths: properties and the naive sampler
# ---------------------------------------------------------------------------


def test_tolerance_monotone_and_bounded():
    rng = np.random.default_rng(13)
    geoms = np.array([random_shape(rng, centre=(X0 + 60 * i, Y0), radius=40) for i in range(6)])
    others = np.array([random_shape(rng, centre=(X0 + 60 * i + 5, Y0 + 3), radius=40) for i in range(6)])
    perimeter = shapely.length(geoms)
    previous = np.zeros(len(geoms))
    for tol in (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 50.0, 1000.0):
        within = boundary_within_tolerance(geoms, others, tol)
        assert np.all(within >= previous)
        assert np.all(within <= perimeter * (1 + 1e-12))
        previous = within
    np.testing.assert_allclose(previous, perimeter, rtol=1e-12)


@pytest.mark.parametrize("tol", [0.5, 3.0, 10.0])
def test_tolerance_matches_naive_sampling(tol):
    rng = np.random.default_rng(17)
    geoms = np.array([random_shape(rng, centre=(X0 + 70 * i, Y0), radius=30) for i in range(3)])
    others = np.array([random_shape(rng, centre=(X0 + 70 * i + 4, Y0 - 2), radius=30) for i in range(3)] + [None])
    got = boundary_within_tolerance(geoms, others, tol)
    for g, value in zip(geoms, got):
        expected, bound = naive_length_within(g, others, tol, step_m=0.05)
        assert abs(value - expected) <= bound + 1e-9


def test_holes_and_multipolygons_tolerance():
    outer = box(X0, Y0, X0 + 100, Y0 + 100)
    hole = box(X0 + 40, Y0 + 40, X0 + 60, Y0 + 60)
    with_hole = Polygon(outer.exterior.coords, [hole.exterior.coords])
    # Against itself: every ring counts (400 + 80).
    assert boundary_within_tolerance(np.array([with_hole]), np.array([with_hole]), 1.0)[0] == pytest.approx(480.0)
    # Against an island 0.5 m inside the hole: only the hole's ring, less 0.5 m at each
    # end of each edge (there the nearest island point is its corner, more than 0.5 m away).
    island = box(X0 + 40.5, Y0 + 40.5, X0 + 59.5, Y0 + 59.5)
    assert boundary_within_tolerance(np.array([with_hole]), np.array([island]), 0.5)[0] == pytest.approx(76.0)
    assert boundary_within_tolerance(np.array([with_hole]), np.array([island]), 1.0)[0] == pytest.approx(80.0)
    assert boundary_within_tolerance(np.array([with_hole]), np.array([island]), 0.4)[0] == 0.0
    # A multipolygon of two fields against one of them: only that part's boundary.
    two = MultiPolygon([box(X0, Y0, X0 + 40, Y0 + 100), box(X0 + 45, Y0, X0 + 100, Y0 + 100)])
    got = boundary_within_tolerance(np.array([two]), np.array([box(X0, Y0, X0 + 40, Y0 + 100)]), 1.0)[0]
    assert got == pytest.approx(280.0)
    for tol in (0.5, 5.0):
        expected, bound = naive_length_within(two, [with_hole], tol, step_m=0.05)
        value = boundary_within_tolerance(np.array([two]), np.array([with_hole]), tol)[0]
        assert abs(value - expected) <= bound + 1e-9


def test_shared_edge_counts_for_each_field():
    left, right = box(X0, Y0, X0 + 10, Y0 + 10), box(X0 + 10, Y0, X0 + 20, Y0 + 10)
    pred = np.array([box(X0 - 0.2, Y0, X0 + 20.2, Y0 + 10)])
    within = boundary_within_tolerance(np.array([left, right]), pred, 0.5)
    # Each field: its outer side, its top and bottom (3 * 10), and of the shared edge
    # only the 0.5 m at each end near the prediction's top and bottom edges.
    np.testing.assert_allclose(within, [31.0, 31.0])


# ---------------------------------------------------------------------------
# Prepared layers in several UTM zones
# ---------------------------------------------------------------------------


def lonlat_box(lon0, lat0, dx_m, dy_m):
    """A box of about dx_m by dy_m metres with its south-west corner at (lon0, lat0)."""
    dlat = dy_m / 111_320.0
    dlon = dx_m / (111_320.0 * math.cos(math.radians(lat0)))
    return box(lon0, lat0, lon0 + dlon, lat0 + dlat)


@pytest.fixture(scope="module")
def zone_layers():
    """Reference fields in zone 12 (just west of -108) and predictions on both sides."""
    lat = 38.0
    deg_m = 111_320.0 * math.cos(math.radians(lat))
    ref_geoms = [
        lonlat_box(-108.0 - 110 / deg_m, lat, 200, 150),  # straddles -108, centroid 10 m west: zone 12
        lonlat_box(-108.0 + 300 / deg_m, lat, 100, 100),  # zone 13
    ]
    pred_geoms = [
        lonlat_box(-108.0 - 90 / deg_m, lat + 2 / 111_320, 200, 147),  # centroid 10 m east: zone 13
        lonlat_box(-108.0 + 302 / deg_m, lat + 1 / 111_320, 100, 100),
    ]
    ref_gdf = geopandas.GeoDataFrame(geometry=ref_geoms, crs="EPSG:4326")
    pred_gdf = geopandas.GeoDataFrame(geometry=pred_geoms, crs="EPSG:4326").to_crs("EPSG:5070")
    ref = prepare_layer(ref_gdf, "reference")
    pred = prepare_layer(pred_gdf, "predicted")
    assert ref.utm_epsg.tolist() == [32612, 32613]
    assert pred.utm_epsg.tolist() == [32613, 32613]
    return ref, pred


def test_matched_pair_distances_in_reference_zone(zone_layers):
    ref, pred = zone_layers
    i_ref = np.array([0, 1])
    i_pred = np.array([0, 1])
    got = matched_pair_distances(ref, pred, i_ref, i_pred, 1.0)
    by_hand = to_utm(pred.geoms_source, pred.crs, np.array([32612, 32613]))
    expected = pair_boundary_distances(ref.geoms_utm, by_hand, 1.0)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    # The foreign prediction, reprojected flat into the reference's zone: to_utm's
    # coordinates, and (what sets the spacing without one) shapely's length of them.
    moved = _source_rings_in_zone(pred, np.array([0]), 32612)
    want = Rings.of(by_hand[:1])
    for a, b in zip((moved.x, moved.y, moved.ring_off, moved.geom_off), (want.x, want.y, want.ring_off, want.geom_off)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(moved.lengths().view(np.int64), shapely.length(by_hand[:1]).view(np.int64))
    assert moved.lengths()[0] != pred.perimeter_m[0]  # its length in its own zone differs
    # Measured in the prediction's zone instead, the first pair would differ.
    other_zone = pair_boundary_distances(
        to_utm(ref.geoms_source[:1], ref.crs, np.array([32613])), pred.geoms_utm[:1], 1.0
    )
    assert other_zone[1][0] != got[1][0]
    for a, b in zip(matched_pair_distances(ref, pred, np.array([], dtype=np.int64), np.array([], dtype=np.int64), 1.0), ([], [], [])):
        assert len(a) == len(b) == 0


def test_tolerance_lengths_in_home_zone(zone_layers):
    ref, pred = zone_layers
    tol = 10.0
    recall = tolerance_lengths(ref, pred, tol)
    precision = tolerance_lengths(pred, ref, tol)
    for layer, other, got in ((ref, pred, recall), (pred, ref, precision)):
        for i, code in enumerate(layer.utm_epsg):
            others = to_utm(other.geoms_source, other.crs, np.full(len(other), code))
            expected = boundary_within_tolerance(layer.geoms_utm[i : i + 1], others, tol)[0]
            assert got[i] == expected  # same coordinates, same numbers
            assert 0.0 < got[i] <= layer.perimeter_m[i] * (1 + 1e-12)
    assert len(tolerance_lengths(ref.take(np.array([], dtype=np.int64)), pred, tol)) == 0


def test_tolerance_candidates_not_missed_at_high_latitude():
    # At 65 N EPSG:6933 stretches east-west distances by about 2: an east neighbour
    # 9.5 m away must still be a candidate at tolerance 10 m (and one 10.5 m away
    # must contribute nothing).
    lat = 65.0
    deg_m = 111_320.0 * math.cos(math.radians(lat))
    a = lonlat_box(20.0, lat, 100, 100)
    lon_east = a.bounds[2]
    ref_gdf = geopandas.GeoDataFrame(geometry=[a], crs="EPSG:4326")
    ref = prepare_layer(ref_gdf, "reference")
    zone = int(ref.utm_epsg[0])
    for gap, positive in ((9.5, True), (10.5, False)):
        # Place the neighbour by its UTM distance, then go back to lon/lat.
        neighbour = geopandas.GeoSeries([lonlat_box(lon_east + gap / deg_m, lat, 100, 100)], crs="EPSG:4326")
        pred = prepare_layer(geopandas.GeoDataFrame(geometry=neighbour), "predicted")
        got = tolerance_lengths(ref, pred, 10.0)[0]
        others = to_utm(pred.geoms_source, pred.crs, np.array([zone]))
        expected = boundary_within_tolerance(ref.geoms_utm, others, 10.0)[0]
        assert got == pytest.approx(expected, rel=1e-12)
        assert (got > 0) == positive
    assert utm_crs(zone).to_epsg() == zone


def test_tolerance_reach_covers_candidates(zone_layers):
    # A halo built from the reach (boxes grown by each side's reach meet) holds every
    # candidate that tolerance_lengths selects, whichever layer is the query.
    ref, pred = zone_layers
    for layer, other in ((ref, pred), (pred, ref)):
        i_layer, i_other = _tolerance_candidates(layer, other, 10.0)
        a = shapely.bounds(layer.geoms_ea)[i_layer]
        b = shapely.bounds(other.geoms_ea)[i_other]
        gap = np.maximum(np.maximum(b[:, 0] - a[:, 2], a[:, 0] - b[:, 2]), np.maximum(b[:, 1] - a[:, 3], a[:, 1] - b[:, 3]))
        reach = tolerance_reach(layer, 10.0)[i_layer] + tolerance_reach(other, 10.0)[i_other]
        assert len(i_layer) and np.all(gap <= reach)


def test_tolerance_candidates_are_the_pairs_whose_grown_boxes_meet():
    """Every pair whose boxes, grown as the candidates' rule says, meet (touching counts), and
    no other: checked pair by pair against the boxes' closed intervals, on 60 and 80 fields
    of 20-200 m scattered over 1 km."""
    from evalcore import boundary
    from evalcore.crs import max_scale

    rng = np.random.default_rng(5)
    deg_m = 111_320.0 * math.cos(math.radians(45.0))

    def fields(n):
        lon = 9.0 + rng.random(n) * 1_000 / deg_m
        lat = 45.0 + rng.random(n) * 1_000 / 111_320
        geoms = [lonlat_box(x, y, w, h) for x, y, w, h in zip(lon, lat, rng.uniform(20, 200, n), rng.uniform(20, 200, n))]
        return geopandas.GeoDataFrame(geometry=geoms, crs="EPSG:4326")

    ref, pred = prepare_layer(fields(60), "reference"), prepare_layer(fields(80), "predicted")
    for layer, other in ((ref, pred), (pred, ref)):
        tol = 10.0
        a = boundary.candidate_boxes(layer)
        b = boundary.candidate_boxes(other)
        grow_a = (boundary._CANDIDATE_SCALE_SAFETY * max_scale(layer.equal_area_crs, layer.lon, layer.lat) * tol
                  + boundary._CANDIDATE_SIZE_MARGIN * np.hypot(a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]) + boundary._CANDIDATE_MARGIN_M)
        grow_b = boundary._CANDIDATE_SIZE_MARGIN * np.hypot(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1])
        lo_a, hi_a = a[:, :2] - grow_a[:, None], a[:, 2:] + grow_a[:, None]
        lo_b, hi_b = b[:, :2] - grow_b[:, None], b[:, 2:] + grow_b[:, None]
        expected = {(i, j) for i in range(len(a)) for j in range(len(b))
                    if lo_a[i, 0] <= hi_b[j, 0] and lo_b[j, 0] <= hi_a[i, 0] and lo_a[i, 1] <= hi_b[j, 1] and lo_b[j, 1] <= hi_a[i, 1]}
        i_layer, i_other = _tolerance_candidates(layer, other, tol)
        got = set(zip(i_layer.tolist(), i_other.tolist()))
        assert len(got) == len(i_layer)  # no pair twice
        assert got == expected and len(expected) > 100

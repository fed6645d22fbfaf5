"""The matched pairs' distance kernel against its previous versions and against brute force (issue 29).

The kernel was rewritten for speed (docs/boundary.md, "Pruning"); its numbers are part of
the contract with agribound's and must not move by one bit. Hypothesis draws polygon
pairs (holes, two-part multipolygons, shared vertices, identical boundaries, a copy
with some vertices moved, sub-metre to kilometre sizes at UTM-like coordinates) and
spacings; the current kernel must return exactly the numbers of the frozen kernels from
before issue 29 (benchmarks/boundary_previous.py) and after its first pass
(benchmarks/boundary_pass1.py, which also keeps the sampling and weight helpers as they
were) and of the brute-force path (every sample against every segment, the obvious
reference).
"""

from __future__ import annotations

import numpy as np
import shapely
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shapely.geometry import MultiPolygon, Polygon

from benchmarks.boundary_pass1 import _pair_distances_pass1
from benchmarks.boundary_previous import _pair_distances_previous
from evalcore import _kernels
from evalcore.boundary import _flatten, boundary_spacing

X0, Y0 = 500_000.0, 4_200_000.0  # UTM-like coordinates, so rounding is realistic


def _star(rng: np.random.Generator, cx: float, cy: float, radius: float, n: int) -> Polygon:
    """A valid star-shaped polygon with ``n`` vertices around (cx, cy)."""
    while True:
        angle = np.sort(rng.uniform(0.0, 2 * np.pi, n))
        r = rng.uniform(0.3 * radius, radius, n)
        poly = Polygon(np.c_[cx + r * np.cos(angle), cy + r * np.sin(angle)])
        if poly.is_valid and poly.area > 0:
            return poly


def _shape(rng: np.random.Generator, cx: float, cy: float, radius: float, kind: int, n: int):
    """A polygon (kind 0), a polygon with a hole (1) or a two-part multipolygon (2)."""
    poly = _star(rng, cx, cy, radius, n)
    if kind == 1:
        for _ in range(20):
            hole = _star(rng, cx, cy, 0.25 * radius, max(3, n // 3))
            with_hole = Polygon(poly.exterior.coords, [hole.exterior.coords])
            if with_hole.is_valid:
                return with_hole
    if kind == 2:
        return MultiPolygon([poly, _star(rng, cx + 2.5 * radius, cy, radius / 2, max(3, n // 2))])
    return poly


def _moved_copy(rng: np.random.Generator, poly: Polygon, share: float, radius: float) -> Polygon:
    """``poly``'s exterior with a share of its vertices moved (the others are shared exactly)."""
    coords = np.asarray(poly.exterior.coords)[:-1].copy()
    move = rng.random(len(coords)) < share
    coords[move] += rng.normal(0.0, radius / 20, (int(move.sum()), 2))
    moved = Polygon(coords)
    return moved if moved.is_valid and moved.area > 0 else poly


@st.composite
def pairs(draw):
    """A batch of 1-4 polygon pairs and a spacing (metres, or None for perimeter / 1000)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_pairs = draw(st.integers(1, 4))
    refs, preds = [], []
    for _ in range(n_pairs):
        radius = draw(st.sampled_from([0.4, 3.0, 40.0, 250.0, 1500.0]))
        kind_r = draw(st.integers(0, 2))
        n = draw(st.integers(3, 60))
        ref = _shape(rng, X0, Y0, radius, kind_r, n)
        relation = draw(st.sampled_from(["independent", "identical", "moved", "shifted"]))
        if relation == "identical":
            pred = ref
        elif relation == "moved":
            base = ref.geoms[0] if isinstance(ref, MultiPolygon) else Polygon(ref.exterior.coords)
            pred = _moved_copy(rng, base, draw(st.floats(0.0, 1.0)), radius)
        elif relation == "shifted":
            pred = shapely.affinity.translate(ref, *rng.normal(0.0, radius / 8, 2))
        else:
            shift = rng.normal(0.0, radius / 6, 2)
            kind_p = draw(st.integers(0, 2))
            n_p = draw(st.integers(3, 60))
            pred = _shape(rng, X0 + shift[0], Y0 + shift[1], radius * rng.uniform(0.8, 1.2), kind_p, n_p)
        refs.append(ref)
        preds.append(pred)
    spacing = draw(st.sampled_from([None, 0.1, 1.0, 2.7, 25.0]))
    return np.array(refs, dtype=object), np.array(preds, dtype=object), spacing


def _kernel_input(ref, pred, spacing):
    n = len(ref)
    geoms = np.concatenate([ref, pred])
    x, y, ring_off, geom_off = _flatten(geoms)
    step = boundary_spacing(shapely.length(geoms), spacing)
    a = np.arange(n, dtype=np.int64)
    return x, y, ring_off, geom_off, step, a, a + n


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs(), st.sampled_from([1, 3, 16, 40]))
def test_kernel_equals_previous_kernel_and_brute_force(batch, chunk):
    ref, pred, spacing = batch
    args = _kernel_input(ref, pred, spacing)
    new = _kernels._pair_distances(*args, chunk, True)
    previous = _pair_distances_previous(*args, 16, True)
    first_pass = _pair_distances_pass1(*args, 16, True)
    brute = _kernels._pair_distances(*args, 1, False)
    for got, old, first, slow in zip(new, previous, first_pass, brute):
        np.testing.assert_array_equal(got, old)  # bit for bit, not approximately
        np.testing.assert_array_equal(got, first)
        np.testing.assert_array_equal(got, slow)


def test_identical_boundaries():
    # Every sample lies on the other boundary up to the rounding of interpolation (about
    # 1e-9 m at these coordinates): U is about zero, and the touching segments must stay
    # candidates (the bound's slack never shrinks to zero).
    rng = np.random.default_rng(3)
    poly = _shape(rng, X0, Y0, 120.0, 1, 30)
    args = _kernel_input(np.array([poly]), np.array([poly]), 1.0)
    new = _kernels._pair_distances(*args, 16, True)
    for got, old in zip(new, _pair_distances_previous(*args, 16, True)):
        np.testing.assert_array_equal(got, old)
    hausdorff, integral_a, length_a, integral_b, length_b = new
    assert 0.0 <= hausdorff[0] < 1e-8
    assert length_a[0] == length_b[0] > 0


def test_samples_on_segment_ends_and_zero_length_segments():
    # Integer coordinates and a 1 m spacing put samples exactly where a projection falls
    # on a segment's end (t = 0 or t = |E|^2, where GEOS switches formulas), and repeated
    # vertices make zero-length segments on both sides: the kernel's branch-free distance
    # must hand those samples to GEOS's full formula. Checked bit for bit against the
    # frozen kernels and brute force, and against shapely.distance (GEOS) per sample.
    ref = Polygon([(X0, Y0), (X0 + 10, Y0), (X0 + 10, Y0), (X0 + 10, Y0 + 6), (X0 + 4, Y0 + 6), (X0, Y0 + 6)])
    pred = Polygon([(X0 + 2, Y0 - 3), (X0 + 12, Y0 - 3), (X0 + 12, Y0 + 9), (X0 + 2, Y0 + 9), (X0 + 2, Y0 + 9)])
    args = _kernel_input(np.array([ref, pred]), np.array([pred, ref]), 1.0)
    for chunk in (1, 3, 16):
        new = _kernels._pair_distances(*args, chunk, True)
        for got, old, first, slow in zip(
            new,
            _pair_distances_previous(*args, 16, True),
            _pair_distances_pass1(*args, 16, True),
            _kernels._pair_distances(*args, 1, False),
        ):
            np.testing.assert_array_equal(got, old)
            np.testing.assert_array_equal(got, first)
            np.testing.assert_array_equal(got, slow)
    x, y, ring_off, geom_off, step = args[:5]
    for g_from, g_to, other in ((0, 2, pred), (1, 3, ref)):
        sx, sy, _, dist = _kernels._directed_sample_distances(x, y, ring_off, geom_off, step, g_from, g_to, 16, True)
        expected = shapely.distance(shapely.points(sx, sy), other.boundary)
        np.testing.assert_allclose(dist, expected, rtol=1e-12, atol=1e-9)
    # Hand-computed: every sample of ref (10 x 6 m) is at most 3 m from pred's boundary
    # (12 x 10 m, around it), and pred's corner (X0 + 12, Y0 + 9) is hypot(2, 3) from ref's
    # corner (X0 + 10, Y0 + 6), the farthest any sample gets: the Hausdorff distance of
    # both pairs (the same two polygons, in either order).
    hausdorff = _kernels._pair_distances(*args, 16, True)[0]
    assert hausdorff[0] == hausdorff[1] == np.hypot(2.0, 3.0)

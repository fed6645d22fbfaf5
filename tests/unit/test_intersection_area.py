"""Intersection areas of polygon pairs (evalcore.pairs.intersection_areas, evalcore._area_kernels).

The boundary-integral kernel is checked on cases worked out by hand (shared edges and
vertices included, where it must be exact and must not fall back to GEOS), against
``shapely.area(shapely.intersection(a, b))`` on random valid polygons, on its GEOS
fallback, and for independence from batching and order.
"""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from hypothesis import assume, given
from hypothesis import strategies as st
from shapely.affinity import rotate, translate
from shapely.geometry import MultiPolygon, Polygon, box

from evalcore import _area_kernels
from evalcore.pairs import intersection_areas
from evalcore.rings import flatten_rings

OK, UNSAFE, TOO_LARGE = _area_kernels._OK, _area_kernels._UNSAFE, _area_kernels._TOO_LARGE


def kernel(a: list, b: list, max_work: int = 10**12) -> tuple[np.ndarray, np.ndarray]:
    """The kernel alone (no covers short-cut, no fallback): areas and status per pair."""
    a = np.array(a, dtype=object)
    b = np.array(b, dtype=object)
    x, y, ring_off, ring_ext, geom_off = flatten_rings(np.concatenate([a, b]))
    ga = np.arange(len(a), dtype=np.int64)
    return _area_kernels._intersection_areas(x, y, ring_off, ring_ext, geom_off, ga, ga + len(a), max_work)


def kernel_area(a, b) -> float:
    """Kernel area of one pair, which must not have fallen back."""
    area, status = kernel([a], [b])
    assert status[0] == OK
    return float(area[0])


def geos_area(a, b) -> float:
    return float(shapely.area(shapely.intersection(a, b)))


def tolerance(a, b) -> float:
    """1e-9 of the smaller area or 1e-6 absolute, whichever is larger."""
    return max(1e-9 * min(a.area, b.area), 1e-6)


def square(x0: float, y0: float, side: float = 1.0) -> Polygon:
    return box(x0, y0, x0 + side, y0 + side)


# ---------------------------------------------------------------------------
# Cases worked out by hand
# ---------------------------------------------------------------------------

HAND = {
    "half overlap": (square(0, 0), square(0.5, 0), 0.5),
    "shift along x, shared collinear edges": (square(0, 0, 2), square(0.75, 0, 2), 2.5),
    "shift along y, shared collinear edges": (square(0, 0, 2), square(0, -0.5, 2), 3.0),
    "diagonal shift": (square(0, 0), square(0.25, 0.5), 0.375),
    "identical squares": (square(0, 0), square(0, 0), 1.0),
    "touching along an edge": (square(0, 0), square(1, 0), 0.0),
    "touching along part of an edge": (square(0, 0), square(1, 0.5), 0.0),
    "touching at a corner": (square(0, 0), square(1, 1), 0.0),
    "disjoint": (square(0, 0), square(3, 0), 0.0),
    "contained": (square(0, 0, 4), square(1, 1), 1.0),
    "contained, touching from inside": (square(0, 0, 4), box(0, 1, 2, 2), 2.0),
    # A cross of two rectangles: four proper crossings, no vertex of one inside the other.
    "cross": (box(0, 1, 4, 2), box(1, 0, 2, 4), 1.0),
    # A triangle with two vertices on the square's corners and one on its top edge.
    "triangle in square, shared vertices": (Polygon([(0, 0), (2, 0), (1, 2)]), square(0, 0, 2), 2.0),
    # The triangle's apex lies on the bottom edge of the square (not a vertex of it).
    "vertex on an edge": (Polygon([(0, 2), (1, 0), (2, 2)]), box(-1, 0, 3, 3), 2.0),
    "vertex on an edge, pointing out": (Polygon([(0, 0), (2, 0), (1, 1)]), box(-1, 1, 3, 3), 0.0),
    # Diamond with its four vertices on the edges of the square.
    "diamond in square": (Polygon([(1, 0), (2, 1), (1, 2), (0, 1)]), square(0, 0, 2), 2.0),
    # Collinear overlapping edges running the same way (both rectangles lie above y = 0)
    # and opposite ways (one above, one below).
    "collinear, same direction": (box(0, 0, 3, 1), box(1, 0, 5, 2), 2.0),
    "collinear, opposite directions": (box(0, 0, 3, 1), box(1, -2, 5, 0), 0.0),
    "L-shape against a square sharing two edges": (
        Polygon([(0, 0), (2, 0), (2, 1), (1, 1), (1, 2), (0, 2)]),
        square(0, 0, 1.5),
        1.5 * 1.5 - 0.25,
    ),
}


@pytest.mark.parametrize("name", list(HAND))
def test_hand_cases(name: str) -> None:
    a, b, expected = HAND[name]
    assert kernel_area(a, b) == pytest.approx(expected, abs=1e-12)
    # And the other way round: B's pieces on A's boundary must not be counted twice.
    assert kernel_area(b, a) == pytest.approx(expected, abs=1e-12)


def test_square_with_hole() -> None:
    holed = box(0, 0, 4, 4).difference(box(1, 1, 3, 3))  # area 12, hole [1, 3]^2
    assert len(holed.interiors) == 1
    assert kernel_area(holed, box(1, 1, 3, 3)) == 0.0  # exactly the hole
    assert kernel_area(holed, box(0.5, 0.5, 3.5, 3.5)) == pytest.approx(9.0 - 4.0, abs=1e-12)
    assert kernel_area(holed, box(2, 2, 5, 5)) == pytest.approx(4.0 - 1.0, abs=1e-12)
    assert kernel_area(holed, box(-1, -1, 5, 5)) == pytest.approx(12.0, abs=1e-12)
    # Two holed squares: [1, 4] x [0, 4] (12) minus both holes within it ([1, 3] x [1, 3]
    # and [2, 4] x [1, 3], 4 each), plus their overlap [2, 3] x [1, 3] (2).
    other = box(1, 0, 5, 4).difference(box(2, 1, 4, 3))
    assert kernel_area(holed, other) == pytest.approx(12.0 - 4.0 - 4.0 + 2.0, abs=1e-12)
    assert kernel_area(other, holed) == pytest.approx(6.0, abs=1e-12)


def test_multipolygon_against_polygon() -> None:
    multi = MultiPolygon([square(0, 0), square(2, 0), box(0, 2, 3, 3)])
    assert kernel_area(multi, box(0.5, 0, 2.5, 1)) == pytest.approx(1.0, abs=1e-12)
    assert kernel_area(box(0.5, 0, 2.5, 1), multi) == pytest.approx(1.0, abs=1e-12)
    assert kernel_area(multi, box(0.5, 0.5, 2.5, 2.5)) == pytest.approx(0.25 + 0.25 + 1.0, abs=1e-12)
    # Multipolygon against multipolygon, parts with holes.
    other = MultiPolygon([box(0, 0, 3, 3).difference(square(1, 1)), square(4, 4)])
    assert kernel_area(multi, other) == pytest.approx(geos_area(multi, other), abs=1e-12)


def test_ring_orientation_does_not_matter() -> None:
    """Exterior rings given clockwise and holes counter-clockwise are reoriented."""
    cw = Polygon([(0, 0), (0, 2), (2, 2), (2, 0)], holes=[[(0.5, 0.5), (1.5, 0.5), (1.5, 1.5), (0.5, 1.5)]])
    assert cw.exterior.is_ccw is False and cw.interiors[0].is_ccw is True
    ccw = shapely.orient_polygons(cw)
    b = box(1, 1, 3, 3)
    assert kernel_area(cw, b) == kernel_area(ccw, b) == pytest.approx(0.75, abs=1e-12)


@pytest.mark.parametrize("offset", [(0.0, 0.0), (5e5, 4.2e6), (-1.0e7, 4.5e6), (1.7e7, -7.3e6)])
def test_large_coordinates(offset: tuple[float, float]) -> None:
    """UTM- and EPSG:6933-sized coordinates: the local origin keeps the result exact."""
    dx, dy = offset
    a = translate(Polygon([(0, 0), (100, 0), (100, 60), (40, 80), (0, 60)]), dx, dy)
    b = translate(Polygon([(30, -10), (130, -10), (130, 60), (70, 60), (30, 30)]), dx, dy)
    expected = 70 * 60 - 0.5 * 40 * 30  # the part of [30, 100] x [0, 60] right of b's diagonal
    assert kernel_area(a, b) == pytest.approx(expected, abs=1e-7)
    # Shared edges at large coordinates stay exact.
    c = translate(square(0, 0, 50), dx, dy)
    d = translate(square(20, 0, 50), dx, dy)
    assert kernel_area(c, d) == pytest.approx(30 * 50, abs=1e-7)
    assert kernel_area(c, translate(square(50, 10, 50), dx, dy)) == 0.0


def test_near_degenerate_pair_falls_back() -> None:
    """A vertex 1e-8 from the other's edge (not on it) is declined and left to GEOS."""
    a = square(0, 0, 2)
    b = Polygon([(1, 2 + 1e-8), (3, 3), (0.5, 3)])  # apex just above a's top edge
    c = Polygon([(1, 2 - 1e-8), (3, 3), (0.5, 3)])  # apex just below it
    area, status = kernel([a, a], [b, c])
    assert status.tolist() == [UNSAFE, UNSAFE]
    got = intersection_areas(np.array([a, a]), np.array([b, c]))
    assert got.tolist() == [geos_area(a, b), geos_area(a, c)]
    assert got[0] == 0.0 and got[1] > 0.0


def test_extreme_magnitudes_fall_back() -> None:
    """Coordinates where the error-free products would underflow or overflow are left to GEOS."""
    a = Polygon([(0, 0), (2, 1e-200), (2, 2), (0, 2)])
    b = Polygon([(1, -1), (3, -1), (3, 3), (1e-150, 3)])
    c = square(1e120, 1e120, 1e110)
    area, status = kernel([a, c], [b, c])
    assert status.tolist() == [UNSAFE, UNSAFE]
    got = intersection_areas(np.array([a, c]), np.array([b, translate(c, 1e109, 0)]))
    assert got[0] == pytest.approx(geos_area(a, b), abs=1e-12)
    assert got[1] == geos_area(c, translate(c, 1e109, 0))


def test_three_boundaries_meeting() -> None:
    """B's hole touches its shell at (2, 0), inside a shell edge; A's edge x = 2 passes there.

    On A's edge the crossing of B's shell (a rounded point) and the touch of B's hole
    vertex (an exact point) coincide: the kernel declines rather than order them by
    rounding. Through a vertex of the shell instead, all three events are exact points.
    """
    holed = Polygon([(0, 0), (4, 0), (4, 4), (0, 4)], holes=[[(2, 0), (3, 1), (1, 1)]])
    assert holed.is_valid
    strip = box(2, -1, 2.5, 2)
    area, status = kernel([strip, holed], [holed, strip])
    assert status.tolist() == [UNSAFE, UNSAFE]
    assert intersection_areas(np.array([strip, holed]), np.array([holed, strip])).tolist() == [geos_area(strip, holed)] * 2
    # [2, 2.5] x [0, 2] minus the hole's part: width min(y, 0.5) for y in [0, 1].
    assert geos_area(strip, holed) == pytest.approx(1.0 - (0.125 + 0.25), abs=1e-12)
    # The hole touching the shell at a shell vertex (0, 0) instead: exact, no fallback.
    corner = Polygon([(0, 0), (4, 0), (4, 4), (0, 4)], holes=[[(0, 0), (2, 1), (1, 2)]])
    assert corner.is_valid
    for other in (box(-1, -1, 1, 1), Polygon([(0, 0), (3, 0), (0, 3)]), Polygon([(-1, -1), (3, 1), (1, 3)])):
        assert kernel_area(corner, other) == pytest.approx(geos_area(corner, other), abs=1e-12)
        assert kernel_area(other, corner) == pytest.approx(geos_area(corner, other), abs=1e-12)


def comb(teeth: int, transpose: bool = False) -> Polygon:
    """A comb: ``teeth`` bars of width 1 and height 2 * teeth on a base, gaps of width 1."""
    pts = [(0.0, -1.0)]
    for i in range(teeth):
        pts += [(2.0 * i, 2.0 * teeth), (2.0 * i + 1, 2.0 * teeth), (2.0 * i + 1, 0.0), (2.0 * i + 2, 0.0)]
    pts += [(2.0 * teeth, -1.0)]
    if transpose:
        pts = [(y, x) for x, y in pts][::-1]
    return Polygon(pts)


def test_many_crossings() -> None:
    """Two combs at right angles: hundreds of crossings (the event buffer grows), all exact."""
    a, b = comb(12), comb(12, transpose=True)
    assert a.is_valid and b.is_valid
    # Teeth against teeth: 12 x 12 unit squares; each base lies outside the other comb.
    expected = 12.0 * 12.0
    assert geos_area(a, b) == pytest.approx(expected, abs=1e-9)
    assert kernel_area(a, b) == pytest.approx(expected, abs=1e-9)
    assert kernel_area(b, a) == pytest.approx(expected, abs=1e-9)


def test_large_pairs_are_declined() -> None:
    a, b = square(0, 0), square(0.5, 0.5)
    area, status = kernel([a], [b], max_work=15)
    assert status.tolist() == [TOO_LARGE]  # 4 x 4 edges
    area, status = kernel([a], [b], max_work=16)
    assert status.tolist() == [OK] and area[0] == 0.25


def test_forced_fallback_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every pair declined, the areas come from GEOS and match the kernel's."""
    rng = np.random.default_rng(5)
    a = shapely.buffer(shapely.points(rng.uniform(0, 10, (40, 2))), rng.uniform(1, 3, 40), quad_segs=4)
    b = shapely.buffer(shapely.points(rng.uniform(0, 10, (40, 2))), rng.uniform(1, 3, 40), quad_segs=3)
    with_kernel = intersection_areas(a, b)
    calls = []
    real = shapely.intersection

    def spy(x, y, *args, **kwargs):
        calls.append(len(np.atleast_1d(x)))
        return real(x, y, *args, **kwargs)

    monkeypatch.setattr(_area_kernels, "_MAX_WORK", 0)
    monkeypatch.setattr(shapely, "intersection", spy)
    with_geos = intersection_areas(a, b)
    n_overlay = int((~(shapely.covers(a, b) | shapely.covers(b, a))).sum())
    assert sum(calls) == n_overlay > 20
    assert with_geos.tolist() == shapely.area(real(a, b)).tolist()
    np.testing.assert_allclose(with_kernel, with_geos, rtol=0, atol=1e-9)
    assert (with_kernel > 0).sum() == (with_geos > 0).sum()


def test_covers_shortcut_is_kept() -> None:
    """A polygon against itself, or inside the other, gives the smaller area exactly."""
    p = Polygon([(0.1, 0.2), (3.3, 0.4), (2.9, 2.7), (0.7, 3.1)])
    inner = p.buffer(-0.3)
    got = intersection_areas(np.array([p, p, inner]), np.array([p, inner, p]))
    assert got.tolist() == [p.area, inner.area, inner.area]


def test_missing_and_empty_give_zero() -> None:
    empty = Polygon()
    got = intersection_areas(np.array([None, empty, square(0, 0)], dtype=object), np.array([square(0, 0), square(0, 0), empty]))
    assert got.tolist() == [0.0, 0.0, 0.0]
    assert intersection_areas(np.array([], dtype=object), np.array([], dtype=object)).shape == (0,)


def test_non_polygonal_goes_to_geos() -> None:
    """A geometry collection is not flattened into rings: GEOS computes the pair."""
    mixed = shapely.GeometryCollection([square(0, 0), shapely.LineString([(0, 0), (5, 5)])])
    got = intersection_areas(np.array([square(0, 0, 2), mixed], dtype=object), np.array([square(1, 1, 2), square(0.5, 0.5, 2)]))
    assert got.tolist() == [1.0, 0.25]


def test_independent_of_batching_and_order() -> None:
    rng = np.random.default_rng(11)
    centres = rng.uniform(0, 20, (60, 2))
    a = shapely.buffer(shapely.points(centres), rng.uniform(1, 4, 60), quad_segs=5)
    b = shapely.buffer(shapely.points(centres + rng.normal(0, 1.5, (60, 2))), rng.uniform(1, 4, 60), quad_segs=7)
    b[::7] = [snap(g, 0.5) for g in a[::7]]  # shared vertices and edges in some pairs
    whole = intersection_areas(a, b)
    assert (whole > 0).sum() > 40
    perm = rng.permutation(60)
    assert intersection_areas(a[perm], b[perm]).tolist() == whole[perm].tolist()
    pieces = np.concatenate([intersection_areas(a[i : i + 7], b[i : i + 7]) for i in range(0, 60, 7)])
    assert pieces.tolist() == whole.tolist()
    # A pair inside a large batch of unrelated pairs gives the same bits as alone.
    big_a = np.concatenate([a, np.array([box(0, 0, 1000, 1000).difference(box(10, 10, 990, 990))])])
    big_b = np.concatenate([b, np.array([shapely.buffer(shapely.Point(500, 500), 600, quad_segs=64)])])
    assert kernel(list(big_a), list(big_b))[0][:60].tolist() == kernel(list(a), list(b))[0].tolist()


# ---------------------------------------------------------------------------
# Properties against GEOS on random valid polygons
# ---------------------------------------------------------------------------

# Metre-like coordinates: hypothesis also likes values such as 1e-300, which the kernel
# declines (test_extreme_magnitudes_fall_back); map those to 0 so that most examples
# exercise the kernel.
coord = st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False).map(lambda v: v if v >= 1e-9 else 0.0)
shift = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False).map(lambda v: v if abs(v) >= 1e-9 else 0.0)


def snap(g, grid: float) -> shapely.Geometry:
    """``g`` snapped to a grid, without the precision model set_precision attaches.

    GEOS would otherwise snap-round every later overlay of the result to that grid, and
    its "intersection area" would not be the exact one.
    """
    return shapely.from_wkb(shapely.to_wkb(shapely.set_precision(g, grid)))


def polygonal(g) -> shapely.Geometry | None:
    """The polygonal part of ``g`` as a valid Polygon or MultiPolygon, or None."""
    if g is None or g.is_empty:
        return None
    parts = [p for p in shapely.get_parts(g) if p.geom_type == "Polygon" and not p.is_empty and p.area > 0]
    if not parts:
        return None
    out = parts[0] if len(parts) == 1 else MultiPolygon(parts)
    return out if out.is_valid else None


@st.composite
def convex(draw: st.DrawFn) -> shapely.Geometry | None:
    pts = draw(st.lists(st.tuples(coord, coord), min_size=3, max_size=12))
    return polygonal(shapely.MultiPoint(pts).convex_hull)


@st.composite
def star(draw: st.DrawFn) -> shapely.Geometry | None:
    """Non-convex: vertices at increasing angles around a centre, random radii."""
    cx, cy = draw(coord), draw(coord)
    n = draw(st.integers(3, 20))
    radii = draw(st.lists(st.floats(0.2, 6.0), min_size=n, max_size=n))
    angles = np.sort(np.asarray(draw(st.lists(st.floats(0.0, 2 * np.pi, exclude_max=True), min_size=n, max_size=n, unique=True))))
    return polygonal(Polygon(np.c_[cx + radii * np.cos(angles), cy + radii * np.sin(angles)]))


@st.composite
def made_valid(draw: st.DrawFn) -> shapely.Geometry | None:
    """make_valid of a random, usually self-intersecting ring: multipolygons, holes."""
    pts = draw(st.lists(st.tuples(coord, coord), min_size=4, max_size=10))
    return polygonal(shapely.make_valid(Polygon(pts)))


@st.composite
def blobs(draw: st.DrawFn) -> shapely.Geometry | None:
    """Union of buffered points, sometimes minus another: round shapes, holes, multipolygons."""
    k = draw(st.integers(1, 4))
    g = shapely.union_all(
        [shapely.Point(draw(coord), draw(coord)).buffer(draw(st.floats(0.3, 4.0)), quad_segs=draw(st.integers(1, 6))) for _ in range(k)]
    )
    if draw(st.booleans()):
        g = g.difference(shapely.Point(draw(coord), draw(coord)).buffer(draw(st.floats(0.3, 2.0)), quad_segs=2))
    return polygonal(g)


any_polygon = st.one_of(convex(), star(), made_valid(), blobs())


@st.composite
def snapped(draw: st.DrawFn) -> shapely.Geometry | None:
    """A random polygon snapped to a grid: shared vertices and collinear edges are frequent."""
    g = draw(any_polygon)
    if g is None:
        return None
    return polygonal(snap(g, draw(st.sampled_from([0.5, 1.0, 2.0]))))


@st.composite
def related_pair(draw: st.DrawFn) -> tuple:
    """(a, b): independent, or b a translated/rotated/snapped copy of a."""
    a = draw(st.one_of(any_polygon, snapped()))
    kind = draw(st.sampled_from(["independent", "snapped independent", "translated", "translated on grid", "rotated", "snapped copy"]))
    if kind == "independent":
        b = draw(any_polygon)
    elif kind == "snapped independent":
        b = draw(snapped())
    elif kind == "translated" and a is not None:
        b = translate(a, draw(shift), draw(shift))
    elif kind == "translated on grid" and a is not None:
        b = translate(a, draw(st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0, 2.0])), draw(st.sampled_from([-1.0, 0.0, 0.5, 1.0])))
    elif kind == "rotated" and a is not None:
        b = rotate(a, draw(st.sampled_from([90, 180, 270])), origin=(5.0, 5.0))
    elif a is not None:
        b = polygonal(snap(a, 1.0))
    else:
        b = None
    b = polygonal(b) if b is not None else None
    assume(a is not None and b is not None)
    return a, b


def check_against_geos(a, b, must_be_exact_path: bool = False) -> None:
    area, status = kernel([a], [b])
    expected = geos_area(a, b)
    if must_be_exact_path:
        assert status[0] == OK
    if status[0] == OK:
        assert area[0] == pytest.approx(expected, rel=0, abs=tolerance(a, b))
        assert (area[0] > 0) == (expected > 0) or abs(expected) <= tolerance(a, b)
    # Whatever the path, the public function agrees with GEOS.
    got = intersection_areas(np.array([a]), np.array([b]))[0]
    assert got == pytest.approx(expected, rel=0, abs=tolerance(a, b))


@given(related_pair())
def test_random_pairs_match_geos(pair: tuple) -> None:
    check_against_geos(*pair)


@given(related_pair())
def test_random_pairs_match_geos_swapped(pair: tuple) -> None:
    a, b = pair
    check_against_geos(b, a)


def one_ring(g) -> bool:
    return g.geom_type == "Polygon" and len(g.interiors) == 0


@given(snapped(), snapped())
def test_grid_pairs_never_fall_back(a, b) -> None:
    """On a coarse grid a vertex is on an edge or at least ~1/|edge| away from it.

    So two single-ring polygons are never near-degenerate and the kernel must take them
    exactly. (With holes or parts, a ring touching another ring at a point that the
    other polygon's edge crosses exactly is declined: see test_three_boundaries_meeting.)
    """
    assume(a is not None and b is not None)
    check_against_geos(a, b, must_be_exact_path=one_ring(a) and one_ring(b))


@given(snapped(), st.sampled_from([(5e5, 4.2e6), (-1.06e7, 4.5e6), (3.3e6, -2.1e6)]), st.data())
def test_grid_pairs_at_large_coordinates(a, offset, data) -> None:
    """The same at UTM / EPSG:6933 magnitudes (integer offsets keep the grid exact)."""
    assume(a is not None)
    b = data.draw(snapped())
    assume(b is not None)
    a2, b2 = translate(a, *offset), translate(b, *offset)
    exact = one_ring(a) and one_ring(b)
    check_against_geos(a2, b2, must_be_exact_path=exact)
    if exact:
        assert kernel_area(a2, b2) == pytest.approx(kernel_area(a, b), abs=1e-6)


def test_areas_from_rings_are_the_areas_from_geometries():
    """intersection_areas given the pairs' flat rings (the distributed pairs phase) gives
    the same bits as flattening the geometries, covered pairs, declined ones and missing
    geometries included."""
    from evalcore.pairs import PairRings, intersection_areas
    from evalcore.rings import Rings

    rng = np.random.default_rng(11)
    ref = shapely.buffer(shapely.points(rng.uniform(0, 400, 80), rng.uniform(0, 400, 80)), rng.uniform(5, 40, 80), quad_segs=4)
    pred = shapely.buffer(shapely.points(rng.uniform(0, 400, 90), rng.uniform(0, 400, 90)), rng.uniform(5, 40, 90), quad_segs=3)
    pred[3] = ref[5]  # identical: covered both ways
    pred[4] = shapely.buffer(ref[6], -2.0)  # inside
    pred[7] = shapely.MultiPolygon([pred[7], shapely.box(500, 500, 510, 510)])
    i_ref, i_pred = np.meshgrid(np.arange(80), np.arange(90), indexing="ij")
    i_ref, i_pred = i_ref.ravel(), i_pred.ravel()
    meets = shapely.intersects(ref[i_ref], pred[i_pred])
    i_ref, i_pred = i_ref[meets], i_pred[meets]
    plain = intersection_areas(ref[i_ref], pred[i_pred])
    flat = intersection_areas(ref[i_ref], pred[i_pred], rings=PairRings(Rings.of(ref), i_ref, Rings.of(pred), i_pred))
    np.testing.assert_array_equal(flat.view(np.int64), plain.view(np.int64))
    assert (plain > 0).sum() > 100

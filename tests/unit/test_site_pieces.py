"""The site layers' grid pieces (:func:`evalcore.sites.grid_pieces`) against the
obvious construction, and the site layers' trip to a worker (pickled as WKB).

The reference cuts the union cell by cell: every grid cell of the union's bounding box
is classified against the union (inside: the whole square; crossing: the union clipped
to the cell; outside: nothing), in row-major cell order. The fast version bisects and
clips the union to halves first; the pieces must be the same cells in the same order,
covering the same area (a vertex on a grid line may differ in its last bits).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import shapely
from shapely.geometry import MultiPolygon, Polygon, box

from evalcore.levels import AnnotatedArea, AoiLayer
from evalcore.sites import grid_pieces


def _slow_pieces(geoms, cell_m):
    union = shapely.union_all(np.asarray(geoms, dtype=object))
    minx, miny, maxx, maxy = union.bounds
    out = []
    for y in range(int(np.floor(miny / cell_m)), max(int(np.ceil(maxy / cell_m)), int(np.floor(miny / cell_m)) + 1)):
        for x in range(int(np.floor(minx / cell_m)), max(int(np.ceil(maxx / cell_m)), int(np.floor(minx / cell_m)) + 1)):
            cell = box(x * cell_m, y * cell_m, (x + 1) * cell_m, (y + 1) * cell_m)
            if not union.intersects(cell):
                continue
            piece = cell if union.contains_properly(cell) else shapely.clip_by_rect(union, *cell.bounds)
            if not piece.is_empty:
                out.append(piece)
    return np.asarray(out, dtype=object)


def _star(n_vertices, radius, seed):
    rng = np.random.default_rng(seed)
    angles = np.sort(rng.uniform(0, 2 * np.pi, n_vertices))
    r = radius * rng.uniform(0.3, 1.0, n_vertices)
    return Polygon(np.column_stack([1234.5 + r * np.cos(angles), -987.25 + r * np.sin(angles)]))


CASES = {
    "square on the grid": [box(0, 0, 4000, 2000)],
    "square off the grid": [box(-2500.5, 1000.25, 3100.75, 5999.0)],
    "polygon with a hole": [box(0, 0, 10_000, 10_000).difference(box(3000, 3000, 7000, 6500))],
    "two touching parts": [box(0, 0, 3000, 3000), box(3000, 500, 9000, 2500)],
    "multipolygon far apart": [MultiPolygon([box(0, 0, 1500, 1500), box(40_000, 9000, 43_500, 9100)])],
    "thin sliver": [box(100, 100, 30_000, 100.5)],
    "star": [_star(300, 15_000, 3)],
    "stars overlapping": [_star(200, 9000, 4), _star(200, 9000, 5).buffer(0).buffer(1)],
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("cell_m", [1000.0, 2000.0])
def test_pieces_equal_the_cell_by_cell_construction(name, cell_m):
    geoms = CASES[name]
    fast = grid_pieces(np.asarray(geoms, dtype=object), cell_m)
    slow = _slow_pieces(geoms, cell_m)
    assert len(fast) == len(slow)
    # Same cells in the same order: each piece's cell from its centre point.
    assert np.array_equal(np.floor(shapely.bounds(fast)[:, :2] / cell_m), np.floor(shapely.bounds(slow)[:, :2] / cell_m))
    assert np.allclose(shapely.area(fast), shapely.area(slow), rtol=0, atol=1e-6)
    assert shapely.area(shapely.symmetric_difference(fast, slow)).max() < 1e-6
    union = shapely.union_all(np.asarray(geoms, dtype=object))
    assert np.isclose(shapely.area(fast).sum(), union.area, rtol=1e-12)
    # Whole cells are exact squares, as before.
    whole = np.isclose(shapely.area(slow), cell_m * cell_m, rtol=0, atol=1e-9)
    assert shapely.equals_exact(fast[whole], slow[whole], 0).all()


def test_no_polygon_gives_no_piece():
    assert len(grid_pieces(np.asarray([None, Polygon()], dtype=object))) == 0


def _coordinates(geoms):
    return shapely.get_coordinates(np.asarray(geoms, dtype=object))


def test_site_layers_pickle_with_every_coordinate_bit():
    pieces = grid_pieces(np.asarray([CASES["star"][0]], dtype=object))
    star = np.asarray([CASES["star"][0]], dtype=object)
    aois = AoiLayer("aoi_id", np.asarray([7], dtype=object), ["7"], star, star, None, "the AOI layer x", pieces,
                    np.zeros(len(pieces), dtype=np.int64))
    annotated = AnnotatedArea(star, "the annotated-area layer y", star, None, pieces)
    for layer in (aois, annotated):
        back = pickle.loads(pickle.dumps(layer))
        assert type(back) is type(layer)
        for name in layer.__slots__:
            a, b = getattr(layer, name), getattr(back, name)
            if isinstance(a, np.ndarray) and a.dtype == object and isinstance(a[0], shapely.Geometry):
                assert b.dtype == object and len(b) == len(a)
                assert np.array_equal(_coordinates(a), _coordinates(b))  # bit for bit
                assert list(shapely.get_type_id(a)) == list(shapely.get_type_id(b))
            elif isinstance(a, np.ndarray):
                assert np.array_equal(a, b) and a.dtype == b.dtype
            else:
                assert a == b

"""The UTM reprojection from the vertices' halfway point gives the direct transformation's bits.

:func:`evalcore.crs.reproject_polygons` runs the steps that the transformation to the
equal-area CRS shares with those to the UTM zones (an inverse projection, a unit
conversion, a datum shift) once, and :func:`evalcore.crs.to_utm` runs only the rest. The
reference here is the plain one: ``shapely.transform`` with pyproj's transformer from
the source CRS to the zone, vertex by vertex.
"""

from __future__ import annotations

import geopandas
import numpy as np
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st
from pyproj import CRS, Transformer

from evalcore import crs as crs_module
from evalcore import _kernels
from evalcore.crs import reproject_polygons, to_utm, utm_epsg_of
from evalcore.prepare import prepare_layer
from evalcore.rings import flatten_rings

# (source CRS, a longitude and latitude inside its area of use)
SOURCES = [(5070, -99.0, 36.0), (4326, 9.2, 45.5), (3857, 2.3, 48.9), (2154, 2.3, 46.5), (27700, -1.5, 52.5),
           (32633, 15.0, 50.0), (3035, 10.0, 52.0)]


def _plain_utm(geoms: np.ndarray, src: CRS, code: int) -> np.ndarray:
    transformer = Transformer.from_crs(src, CRS.from_epsg(code), always_xy=True)
    return shapely.transform(geoms, lambda xy: np.column_stack(transformer.transform(xy[:, 0], xy[:, 1])))


def _fields(src: CRS, lon: float, lat: float, n: int, seed: int) -> np.ndarray:
    """Squares, wobbly rings, a hole, a multipolygon, a repeated vertex and an empty polygon near (lon, lat)."""
    rng = np.random.default_rng(seed)
    to_src = Transformer.from_crs(4326, src, always_xy=True)
    out = []
    for i in range(n):
        clon, clat = lon + rng.uniform(-1.5, 1.5), lat + rng.uniform(-1.0, 1.0)
        angles = np.sort(rng.uniform(0, 2 * np.pi, 12))
        radius = rng.uniform(0.0005, 0.003) * (1 + 0.3 * rng.uniform(-1, 1, 12))
        x, y = to_src.transform(clon + radius * np.cos(angles), clat + radius * np.sin(angles))
        ring = list(zip(x, y))
        if i % 5 == 1:
            ring.insert(3, ring[3])  # a vertex repeated: the edge split drops the copy
        shell = shapely.Polygon(ring)
        if i % 7 == 2:
            cx, cy = to_src.transform(clon, clat)
            hole = shapely.Point(cx, cy).buffer(shapely.length(shell) / 200, quad_segs=2)
            shell = shapely.Polygon(shell.exterior.coords, [hole.exterior.coords])
        if i % 6 == 3:
            other = shapely.affinity.translate(shell, xoff=shapely.length(shell), yoff=0.0)
            shell = shapely.MultiPolygon([shell, other]) if shapely.Polygon(other.exterior).is_valid else shell
        out.append(shell)
    out.append(shapely.Polygon())
    return np.asarray(out, dtype=object)


@pytest.mark.parametrize("epsg, lon, lat", SOURCES)
def test_halfway_utm_is_the_direct_transformation(epsg, lon, lat):
    src = CRS.from_epsg(epsg)
    geoms = _fields(src, lon, lat, 60, seed=epsg)
    split = crs_module.edge_split_length(src)
    ea = CRS.from_epsg(6933)
    plain_ea = reproject_polygons(geoms, src, ea, split=split)
    geoms_ea, halfway = reproject_polygons(geoms, src, ea, split=split, halfway=True)
    assert list(shapely.to_wkb(geoms_ea)) == list(shapely.to_wkb(plain_ea))
    # Not split: a geographic source (pyproj would turn the radians the shared unit
    # conversion gives back into degrees; the probe points catch it) and one for which PROJ
    # chooses among different datum shifts point by point.
    assert (halfway is None) == (epsg in (4326, 27700))
    centre = utm_epsg_of(np.array([lon]), np.array([lat]))[0]
    # Two zones (the home one and its neighbour), each row in one of them.
    codes = np.where(np.arange(len(geoms)) % 2 == 0, centre, centre + 1)
    got = to_utm(geoms, src, codes, halfway)
    for code in np.unique(codes):
        rows = np.flatnonzero(codes == code)
        expected = _plain_utm(geoms[rows], src, int(code))
        assert list(shapely.to_wkb(got[rows])) == list(shapely.to_wkb(expected))


def test_halfway_follows_the_kept_rows():
    src = CRS.from_epsg(5070)
    geoms = _fields(src, -99.0, 36.0, 30, seed=3)
    _, halfway = reproject_polygons(geoms, src, CRS.from_epsg(6933), split=50.0, halfway=True)
    keep = np.array([7, 2, 19, 30, 11])  # any order, the empty polygon included
    got = to_utm(geoms[keep], src, np.full(len(keep), 32614), halfway.take(keep))
    assert list(shapely.to_wkb(got)) == list(shapely.to_wkb(_plain_utm(geoms[keep], src, 32614)))


def test_original_positions_find_every_vertex_worked_by_hand():
    # A 120 x 10 rectangle with a repeated corner, split at 50: the corners are samples
    # 0, 3, 4, 7 of 0 40 80 120 | 120,10 80 40 0 | close.
    x = np.array([0.0, 120.0, 120.0, 120.0, 0.0, 0.0])
    y = np.array([0.0, 0.0, 0.0, 10.0, 10.0, 0.0])
    ring_off = np.array([0, 6], dtype=np.int64)
    dx, dy, d_off = _kernels._densify_rings(x, y, ring_off, 50.0)
    assert dx.tolist() == [0.0, 40.0, 80.0, 120.0, 120.0, 80.0, 40.0, 0.0, 0.0]
    at = _kernels._original_positions(x, y, ring_off, dx, dy, d_off)
    assert at.tolist() == [0, 3, 3, 4, 7, 8]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), split=st.sampled_from([0.5, 3.0, 50.0]))
def test_original_positions_point_at_equal_samples(seed, split):
    rng = np.random.default_rng(seed)
    pts = np.round(rng.uniform(0, 20, (rng.integers(3, 9), 2)), 1)
    ring = shapely.Polygon(np.vstack([pts, pts[:1]])).convex_hull
    if ring.geom_type != "Polygon":
        return
    x, y, ring_off, _, _ = flatten_rings(np.asarray([ring], dtype=object))
    dx, dy, d_off = _kernels._densify_rings(x, y, ring_off, split)
    at = _kernels._original_positions(x, y, ring_off, dx, dy, d_off)
    assert (at >= 0).all() and (dx[at] == x).all() and (dy[at] == y).all()
    assert (np.diff(at) >= 0).all()


def test_prepared_layer_is_the_same_without_the_halfway(monkeypatch):
    src = CRS.from_epsg(5070)
    layer = geopandas.GeoDataFrame(geometry=_fields(src, -99.0, 36.0, 80, seed=11)[:-1], crs=src)
    with_halfway = prepare_layer(layer, "predicted")
    monkeypatch.setattr(crs_module, "_shared_steps", lambda src, dst: None)
    without = prepare_layer(layer, "predicted")
    assert list(shapely.to_wkb(with_halfway.geoms_utm)) == list(shapely.to_wkb(without.geoms_utm))
    assert list(shapely.to_wkb(with_halfway.geoms_ea)) == list(shapely.to_wkb(without.geoms_ea))
    assert np.array_equal(with_halfway.perimeter_m, without.perimeter_m)
    assert np.array_equal(with_halfway.utm_epsg, without.utm_epsg)


def test_no_split_of_a_transformation_that_is_no_pipeline():
    # A transformation that is no pipeline (a CRS to itself) has no step to share.
    assert crs_module._shared_steps(CRS.from_epsg(32631), CRS.from_epsg(32631)) is None


@pytest.mark.parametrize("epsg, lon, lat", [(5070, -99.0, 36.0), (4326, -99.0, 36.0)])
def test_utm_rings_are_the_utm_geometries_flattened(epsg, lon, lat):
    """crs.to_utm_rings gives the arrays of flattening crs.to_utm's geometries, across two
    zones: from the halfway vertices (a projected source) and directly (a geographic one)."""
    from evalcore.crs import to_utm_rings
    from evalcore.rings import Rings

    src = CRS.from_epsg(epsg)
    geoms = _fields(src, lon, lat, 60, seed=5)
    _, halfway = reproject_polygons(geoms, src, CRS.from_epsg(6933), split=crs_module.edge_split_length(src), halfway=True)
    assert (halfway is None) == (epsg == 4326)
    centre = utm_epsg_of(np.array([lon]), np.array([lat]))[0]
    codes = np.where(np.arange(len(geoms)) % 3 == 0, centre + 1, centre)
    got, want = to_utm_rings(geoms, src, codes, halfway), Rings.of(to_utm(geoms, src, codes, halfway))
    for a, b in zip((got.x, got.y, got.ring_off, got.ring_ext, got.geom_off), (want.x, want.y, want.ring_off, want.ring_ext, want.geom_off)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert len(got.x) > 1000 and (np.diff(got.geom_off) > 1).any()  # many vertices, and multipolygons among them

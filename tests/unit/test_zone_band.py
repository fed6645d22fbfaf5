"""The zone's 6° band decided by longitude (SPEC 6.3, 6.7; evalcore.zone_band).

A pixel centre is in its zone's band when its longitude, from pyproj's inverse
projection of the centre, lies in [lon0 - 3°, lon0 + 3°); a tile's band area is the
planar area of its square between the two meridians. Both are checked here against
independent computations: every pixel centre inverse-projected one array at a time
(brute force, no bisection), masks burnt by rasterio on the zone's pixel grid, and the
square clipped by a polygon whose meridians are sampled every few centimetres.
"""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from pyproj import Transformer
from rasterio.features import rasterize
from rasterio.transform import Affine
from shapely.geometry import box

from evalcore.api import check_options
from evalcore.crs import WGS84, transform_xy, utm_crs
from evalcore.levels import tile_band_area_km2
from evalcore.pixels import ZONE_BAND, count_tiles, tile_pixel_counts
from evalcore.zone_band import EDGE_MARGIN_M, band_area_m2, band_columns, band_position, zone_band, zone_band_limits


def centre_longitudes(epsg: int, g: float, i0: int, i1: int, j0: int, j1: int) -> np.ndarray:
    """Longitude of every pixel centre, rows j0.. (south first) x columns i0.., by a
    transformer of its own (pyproj, EPSG zone -> EPSG:4326, longitude first)."""
    to_lonlat = Transformer.from_crs(f"EPSG:{epsg}", "EPSG:4326", always_xy=True)
    x = (np.arange(i0, i1) + 0.5) * g
    y = (np.arange(j0, j1) + 0.5) * g
    xx, yy = np.meshgrid(x, y)
    lon, _ = to_lonlat.transform(xx, yy)
    return np.asarray(lon)


def in_band_brute_force(epsg, g, i0, i1, j0, j1) -> np.ndarray:
    west, east = zone_band_limits(epsg)
    lon = centre_longitudes(epsg, g, i0, i1, j0, j1)
    return (lon >= west) & (lon < east)


def edge_easting(epsg: int, lon: float, lat: float) -> tuple[float, float]:
    x, y = transform_xy(np.array([lon]), np.array([lat]), WGS84, utm_crs(epsg))
    return float(x[0]), float(y[0])


def test_zone_band_limits():
    assert zone_band_limits(32601) == (-180.0, -174.0)
    assert zone_band_limits(32633) == (12.0, 18.0)
    assert zone_band_limits(32733) == (12.0, 18.0)
    assert zone_band_limits(32660) == (174.0, 180.0)


# --------------------------------------------------------------------------------------
# Pixels
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("epsg", "lon", "lat", "g"), [
    (32633, 12.0, 50.0, 1.0),     # the west edge, 1 m pixels
    (32633, 18.0, 50.0, 1.0),     # the east edge
    (32633, 18.0, 71.0, 0.7),     # far north, a GSD that does not divide the metre
    (32733, 12.0, -33.0, 2.5),    # southern zone
])
def test_band_columns_equal_every_centre_inverse_projected(epsg, lon, lat, g):
    x, y = edge_easting(epsg, lon, lat)
    i_mid, j0 = int(x // g), int(y // g)
    i0, i1, j1 = i_mid - 40, i_mid + 40, j0 + 3000  # 3000 rows, the edge curving across them
    start, stop = band_columns(epsg, g, i0, i1, j0, j1)
    expected = in_band_brute_force(epsg, g, i0, i1, j0, j1)
    columns = np.arange(i0, i1)[None, :]
    got = (columns >= start[:, None]) & (columns < stop[:, None])
    assert np.array_equal(got, expected)
    assert 0 < expected.sum() < expected.size  # the edge is in the block


def test_the_sampled_band_polygon_is_within_the_margin_of_the_meridians():
    """band_position trusts zone_band's sampled edge to EDGE_MARGIN_M: check it at many
    latitudes (points on the true meridian, projected, lie within a few cm of the edge)."""
    for epsg in (32633, 32733):
        boundary = zone_band(epsg).boundary
        for lon in zone_band_limits(epsg):
            lat = np.linspace(-84.0, 84.0, 3_001)  # off the 0.05° samples
            x, y = transform_xy(np.full(len(lat), lon), lat, WGS84, utm_crs(epsg))
            d = shapely.distance(shapely.points(x, y), boundary)
            assert d.max() < 0.05 < EDGE_MARGIN_M


def rasterio_counts(ref, pred, epsg, g, i0, i1, j0, j1) -> tuple[int, int, int, int]:
    """TP, FP, FN, TN with rasterio's masks on the zone's grid and the brute-force band."""
    transform = Affine(g, 0.0, i0 * g, 0.0, -g, j1 * g)
    shape = (j1 - j0, i1 - i0)

    def burn(geoms):
        if not geoms:
            return np.zeros(shape, bool)
        return rasterize(geoms, out_shape=shape, transform=transform, fill=0, default_value=1, dtype="uint8").astype(bool)

    r, p = burn(ref), burn(pred)
    band = in_band_brute_force(epsg, g, i0, i1, j0, j1)[::-1]  # raster order: north first
    tp = int((r & p & band).sum())
    fp = int((~r & p & band).sum())
    fn = int((r & ~p & band).sum())
    return tp, fp, fn, int(band.sum()) - tp - fp - fn


@pytest.mark.parametrize(("lon", "lat"), [(12.0, 50.0), (18.0, 50.0)])
def test_tile_counts_on_the_zone_edge_equal_rasterio_and_the_brute_force_band(lon, lat):
    epsg, g, side = 32633, 2.0, 400.0
    x, y = edge_easting(epsg, lon, lat)
    tx, ty = int(x // side), int(y // side)
    x0, y0 = tx * side, ty * side
    # A field across the edge, a prediction shifted against it, windows smaller than the tile.
    ref = [box(x0 + 50, y0 + 40, x0 + 330, y0 + 370)]
    pred = [box(x0 + 70, y0 + 20, x0 + 350, y0 + 300)]
    c = tile_pixel_counts(ref, pred, epsg=epsg, tile_x=tx, tile_y=ty, tile_size_m=side, gsd_m=g, tolerance_px=1,
                          band=ZONE_BAND, max_window_pixels=80 * 80)
    i0, j0 = int(x0 // g), int(y0 // g)
    expected = rasterio_counts(ref, pred, epsg, g, i0, i0 + 200, j0, j0 + 200)
    assert (c.tp, c.fp, c.fn, c.tn) == expected
    assert 0 < c.n_pixels < 200 * 200


def test_count_tiles_on_a_zone_edge_counts_exactly_the_centres_in_the_band():
    """A 10 km tile at 10 m pixels across zone 33's west edge at 50°N: the evaluated pixels
    are exactly the centres whose longitude is >= 12° (brute force over its 10^6 centres).
    The band polygon sampled every 0.05° of latitude (the construction before) put the
    edge up to a few centimetres off and miscounted a few pixels here."""
    epsg, g, side = 32633, 10.0, 10_000.0
    x, y = edge_easting(epsg, 12.0, 50.0)
    tx, ty = int(x // side), int(y // side)
    options = check_options(pixel_gsd_m=g, tile_km=side / 1000.0, pixel_tolerance_px=0)
    out = count_tiles(np.array([[epsg, tx, ty]]), np.empty(0, object), utm_crs(epsg), np.empty(0, object),
                      utm_crs(epsg), options)
    n = int(side / g)
    i0, j0 = tx * n, ty * n
    assert out[(epsg, tx, ty)].tn == int(in_band_brute_force(epsg, g, i0, i0 + n, j0, j0 + n).sum())


def test_tiles_far_from_an_edge_need_no_projection():
    x, y = edge_easting(32633, 15.0, 50.0)
    rects = np.array([[x, y, x + 10_000, y + 10_000], [x - 400_000, y, x - 390_000, y + 10_000]])
    assert band_position(32633, rects).tolist() == [1, 0]
    c = tile_pixel_counts([], [], epsg=32633, tile_x=int(x // 1000), tile_y=int(y // 1000), tile_size_m=1000.0,
                          gsd_m=10.0, tolerance_px=0, band=ZONE_BAND)
    assert c.tn == 100 * 100


# --------------------------------------------------------------------------------------
# Tile area
# --------------------------------------------------------------------------------------

def densified_band_area(epsg: int, rect, spacing_m: float = 0.02) -> float:
    """The rectangle clipped by the band with meridians sampled every ``spacing_m`` metres
    (a reference much finer than the 0.05° polygon; its chords are within ~1e-12 m of
    the curve), planar area m²."""
    west, east = zone_band_limits(epsg)
    x0, y0, x1, y1 = rect
    _, lats = transform_xy(np.array([x0, x1, x0, x1]), np.array([y0, y0, y1, y1]), utm_crs(epsg), WGS84)
    lo, hi = max(-90.0, lats.min() - 0.05), min(90.0, lats.max() + 0.05)
    n = int((hi - lo) * 111_320 / spacing_m) + 2
    lat = np.linspace(lo, hi, n)
    xw, yw = transform_xy(np.full(n, west), lat, WGS84, utm_crs(epsg))
    xe, ye = transform_xy(np.full(n, east), lat, WGS84, utm_crs(epsg))
    ring = np.concatenate([np.column_stack([xw, yw]), np.column_stack([xe, ye])[::-1]])
    return float(shapely.area(shapely.intersection(shapely.Polygon(ring), box(*rect))))


@pytest.mark.parametrize(("epsg", "lon", "lat", "dx"), [
    (32633, 12.0, 50.0, 0.0),
    (32633, 18.0, 50.0, 0.0),
    (32633, 12.0, 0.02, 0.0),      # a tile across the equator
    (32733, 18.0, -35.0, 0.0),
    (32633, 12.0, 80.0, 0.0),
    (32633, 12.0, 50.0, -9_990.0),  # a sliver: the band cuts the tile's east edge by ~10 m
])
def test_band_area_equals_a_finely_densified_band(epsg, lon, lat, dx):
    side = 10_000.0
    x, y = edge_easting(epsg, lon, lat)
    x = x + (dx if lon == 12.0 else -dx)
    rect = np.array([x // side * side, y // side * side, x // side * side + side, y // side * side + side])
    if dx:
        rect = np.array([x, y // side * side, x + side, y // side * side + side])
    ours = band_area_m2(epsg, rect[None])[0]
    reference = densified_band_area(epsg, rect)
    assert 0 < reference < side * side
    assert ours == pytest.approx(reference, rel=1e-9)


def test_tile_band_area_km2_is_exact_on_edge_tiles_and_whole_inside():
    side = 10_000.0
    x, y = edge_easting(32633, 12.0, 50.0)
    keys = np.array([[32633, int(x // side), int(y // side)], [32633, 50, 550], [32633, 0, 550]])
    area = tile_band_area_km2(keys, side)
    rect = [keys[0, 1] * side, keys[0, 2] * side, keys[0, 1] * side + side, keys[0, 2] * side + side]
    assert area[0] == pytest.approx(densified_band_area(32633, rect) / 1e6, rel=1e-9)
    assert area[1] == 100.0  # wholly inside: the square
    assert area[2] == 0.0    # easting 0-10 km at 50°N: west of 12°


@pytest.mark.parametrize("epsg", [32614, 32731, 32601, 32660])
def test_band_position_is_the_distance_and_intersection_rule(epsg):
    """The segment tree and centre test of band_position give what its rule says: -1 within
    EDGE_MARGIN_M of the band's boundary (shapely.distance to the whole boundary), else 1
    where the box meets the band, 0 where not; on 10 km tiles across the zone and its
    neighbours, small boxes, and boxes touching the edge's margin."""
    rng = np.random.default_rng(epsg)
    x0 = np.floor(rng.uniform(-300_000, 1_300_000, 3000) / 10_000) * 10_000
    y0 = np.floor(rng.uniform(0, 9_900_000, 3000) / 10_000) * 10_000
    rects = np.concatenate([
        np.column_stack([x0, y0, x0 + 10_000, y0 + 10_000]),
        np.column_stack([x0 + 3.3, y0, x0 + 7.9, y0 + 4.1]),
    ])
    band = zone_band(epsg)
    edge_x = shapely.get_coordinates(band.exterior)[::50]
    # Boxes whose nearest side is just inside and just outside the margin from a boundary vertex.
    for d in (EDGE_MARGIN_M * 0.5, EDGE_MARGIN_M * 2.0):
        rects = np.concatenate([rects, np.column_stack([edge_x[:, 0] + d, edge_x[:, 1], edge_x[:, 0] + d + 5.0, edge_x[:, 1] + 5.0])])
    boxes = shapely.box(rects[:, 0], rects[:, 1], rects[:, 2], rects[:, 3])
    near = shapely.distance(boxes, band.boundary) <= EDGE_MARGIN_M
    want = np.where(near, -1, np.where(shapely.intersects(band, boxes), 1, 0))
    got = band_position(epsg, rects)
    assert got.tolist() == want.tolist()
    assert set(got.tolist()) == {-1, 0, 1}

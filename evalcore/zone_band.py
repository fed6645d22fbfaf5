"""A UTM zone's 6° band, decided by longitude (SPEC 6.3 tiles, 6.7 pixels).

A point of a zone's plane (easting, northing in the zone's metres) lies in the zone's
band when its longitude, computed with pyproj by inverse projection of that point, lies
in ``[central meridian - 3°, central meridian + 3°)`` (all latitudes, no hemisphere
test). This module answers that question exactly for the two places that ask it:

* :func:`band_columns`: which pixel centres of a tile's rows lie in the band. Along a
  row of the zone's grid (fixed northing, south of the pole) the longitude increases
  with the easting, so the centres of a row in the band are one run of columns, found
  by bisection on the column index with the inverse projection of the centres
  themselves: exactly pyproj's answer for every centre, at a cost of a few dozen
  projected points per row instead of one per pixel.
* :func:`band_area_m2`: the planar area (zone metres) of a rectangle inside the band.
  Across a rectangle the band's edge is a meridian, the curve ``x = X(y)`` of the
  points of longitude ``lon0 ± 3°``; the area is the integral over the northing of the
  width of the rectangle between the two meridians, each meridian's easting at a
  northing found by Newton's method on the latitude of its forward projection (to
  1e-8 m in the northing), integrated by
  Gauss-Legendre quadrature between the northings where the meridian crosses the
  rectangle's sides (where the width has a kink) and the equator. The width is
  analytic between those points, so the quadrature's error is at the level of
  floating-point rounding (a test compares with a polygon densified at centimetres).

Both start from :func:`zone_band`, the band as a polygon in the zone's metres whose
meridians are sampled every 0.05° of latitude (within a few centimetres of the curve):
it only sorts rectangles into those far inside, far outside (more than
:data:`EDGE_MARGIN_M` from its edge) and those near an edge, which alone get the exact
treatment.
"""

from __future__ import annotations

import functools

import numpy as np
import shapely

from evalcore._typing import F64Array, IdArray
from evalcore.crs import WGS84, transform_xy, utm_crs

__all__ = ["EDGE_MARGIN_M", "zone_band", "zone_band_limits", "band_position", "band_columns", "band_area_m2"]

EDGE_MARGIN_M = 1.0
"""Rectangles farther than this (metres) from :func:`zone_band`'s edge are wholly in or
out; the sampled edge is within a few centimetres of the true meridians (tested)."""

_GAUSS_NODES = 24  # Gauss-Legendre nodes per smooth piece of the width
_BISECTIONS = 64   # halvings of a latitude interval: beyond float64 resolution
_NEWTON_STEPS = 12
_NEWTON_TOLERANCE_M = 1e-8  # a northing this close: the easting is off by less (|dx/dy| < 1 on a meridian)


def zone_band_limits(epsg: int) -> tuple[float, float]:
    """The band's longitudes ``[west, east)`` of a UTM zone's EPSG code, degrees.

    Examples
    --------
    >>> zone_band_limits(32633)
    (12.0, 18.0)
    """
    lon0 = -183.0 + 6.0 * (int(epsg) % 100)
    return lon0 - 3.0, lon0 + 3.0


@functools.lru_cache(maxsize=256)
def zone_band(epsg: int) -> shapely.Geometry:
    """The zone's 6° longitude band (all latitudes, no hemisphere test) in the zone's metres.

    The meridians are sampled every 0.05° of latitude (at most a few centimetres from
    the curved meridian between samples): an approximation, used only to find the
    rectangles near the band's edge (:func:`band_position`).
    """
    west, east = zone_band_limits(epsg)
    lat = np.linspace(-90.0, 90.0, 3601)
    lon = np.concatenate([np.full(len(lat), west), np.full(len(lat), east)])
    lats = np.concatenate([lat, lat[::-1]])
    x, y = transform_xy(lon, lats, WGS84, utm_crs(int(epsg)))
    band = shapely.Polygon(np.column_stack([x, y]))
    if not band.is_valid:
        band = shapely.make_valid(band)
    shapely.prepare(band)
    return band


def band_position(epsg: int, rects: F64Array) -> IdArray:
    """Where rectangles lie relative to the zone's band: 1 inside, 0 outside, -1 near its edge.

    Parameters
    ----------
    epsg : int
    rects : ndarray of float64, shape (n, 4)
        ``xmin, ymin, xmax, ymax`` in the zone's metres.

    Returns
    -------
    ndarray of int64, shape (n,)
        -1 for a rectangle within :data:`EDGE_MARGIN_M` of the sampled band's edge
        (decide it exactly), else 1 or 0.
    """
    rects = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
    if len(rects) == 0:
        return np.empty(0, np.int64)
    band, edges = _band_edges(int(epsg))
    boxes = shapely.box(rects[:, 0], rects[:, 1], rects[:, 2], rects[:, 3])
    # A box's distance to the band's boundary is its distance to the nearest of the
    # boundary's segments: the tree finds those within the margin (a country's tiles:
    # 0.9 s of the 2M benchmark's client measuring each box against the whole boundary).
    near = np.zeros(len(rects), dtype=bool)
    near[edges.query(boxes, predicate="dwithin", distance=EDGE_MARGIN_M)[0]] = True
    # A box farther from the boundary lies wholly on one side: its centre tells which.
    inside = shapely.contains_xy(band, 0.5 * (rects[:, 0] + rects[:, 2]), 0.5 * (rects[:, 1] + rects[:, 3]))
    return np.where(near, -1, np.where(inside, 1, 0)).astype(np.int64)


@functools.lru_cache(maxsize=64)
def _band_edges(epsg: int) -> tuple[shapely.Geometry, shapely.STRtree]:
    """The zone's band (prepared) and a tree of its boundary's segments, ring by ring."""
    band = zone_band(epsg)
    shapely.prepare(band)
    segments = []
    for ring in shapely.get_rings(band):
        xy = shapely.get_coordinates(ring)
        segments.append(shapely.linestrings(np.stack([xy[:-1], xy[1:]], axis=1)))
    return band, shapely.STRtree(np.concatenate(segments))


def _longitude(epsg: int, x: F64Array, y: F64Array) -> F64Array:
    """Longitude (degrees) of zone points by pyproj's inverse projection."""
    lon, _ = transform_xy(np.asarray(x, np.float64), np.asarray(y, np.float64), utm_crs(int(epsg)), WGS84)
    return lon


def band_columns(epsg: int, gsd_m: float, i0: int, i1: int, j0: int, j1: int) -> tuple[IdArray, IdArray]:
    """The columns of each pixel row whose centre lies in the zone's band.

    Pixel ``(i, j)`` has its centre at ``((i + 0.5) g, (j + 0.5) g)`` in the zone's
    metres; it is in the band when the centre's longitude (pyproj, inverse projection)
    is in ``[west, east)`` (:func:`zone_band_limits`).

    Parameters
    ----------
    epsg : int
    gsd_m : float
        Pixel side ``g``, metres.
    i0, i1, j0, j1 : int
        Columns ``[i0, i1)`` and rows ``[j0, j1)``.

    Returns
    -------
    start, stop : ndarray of int64, shape (j1 - j0,)
        Row ``j0 + k`` has its centres in the band at columns ``[start[k], stop[k])``
        (empty when ``start >= stop``).
    """
    west, east = zone_band_limits(epsg)
    g = float(gsd_m)
    rows = np.arange(j0, j1, dtype=np.int64)
    y = (rows + 0.5) * g

    def first_at_least(bound: float) -> IdArray:
        # Lower bound by bisection on the column: lon increases with the column along a row.
        lo = np.full(len(rows), i0, dtype=np.int64)
        hi = np.full(len(rows), i1, dtype=np.int64)
        while True:
            open_ = lo < hi
            if not open_.any():
                return lo
            k = np.flatnonzero(open_)
            mid = (lo[k] + hi[k]) // 2
            at_least = _longitude(epsg, (mid + 0.5) * g, y[k]) >= bound
            hi[k] = np.where(at_least, mid, hi[k])
            lo[k] = np.where(at_least, lo[k], mid + 1)

    return first_at_least(west), first_at_least(east)


def _meridian_xy(epsg: int, lon: float, lat: F64Array) -> tuple[F64Array, F64Array]:
    return transform_xy(np.full(len(lat), lon), np.asarray(lat, np.float64), WGS84, utm_crs(int(epsg)))


def _bisect_latitude(epsg: int, lon: float, target: F64Array, lat_lo: F64Array, lat_hi: F64Array,
                     coordinate: int) -> F64Array:
    """Latitudes on meridian ``lon`` where the projected coordinate (0: x, 1: y) equals
    ``target``, for a coordinate monotone in the latitude on ``[lat_lo, lat_hi]``."""
    lo, hi = np.array(lat_lo, np.float64), np.array(lat_hi, np.float64)
    increasing = _meridian_xy(epsg, lon, lo)[coordinate] <= _meridian_xy(epsg, lon, hi)[coordinate]
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        value = _meridian_xy(epsg, lon, mid)[coordinate]
        towards_hi = (value < target) == increasing
        lo = np.where(towards_hi, mid, lo)
        hi = np.where(towards_hi, hi, mid)
    return 0.5 * (lo + hi)


def _meridian_x_at(epsg: int, lon: float, y: F64Array, lat_guess: F64Array) -> F64Array:
    """Easting of meridian ``lon`` at northings ``y``: Newton's method on the latitude of
    its forward projection from ``lat_guess`` (the northing grows with the latitude along
    a meridian), falling back to bisection over [-90°, 90°] where it does not settle."""
    y = np.asarray(y, np.float64)
    lat = np.array(lat_guess, np.float64)
    h = 1e-6  # degrees: a centred difference of the northing, ~0.1 m apart
    done = np.zeros(len(y), dtype=bool)
    for _ in range(_NEWTON_STEPS):
        k = np.flatnonzero(~done)
        if len(k) == 0:
            break
        _, below = _meridian_xy(epsg, lon, lat[k] - h)
        _, above = _meridian_xy(epsg, lon, lat[k] + h)
        _, here = _meridian_xy(epsg, lon, lat[k])
        step = (here - y[k]) * (2.0 * h) / (above - below)
        lat[k] = np.clip(lat[k] - step, -90.0, 90.0)
        done[k] = np.abs(here - y[k]) < _NEWTON_TOLERANCE_M
    k = np.flatnonzero(~done)
    if len(k):
        lat[k] = _bisect_latitude(epsg, lon, y[k], np.full(len(k), -90.0), np.full(len(k), 90.0), 1)
    return _meridian_xy(epsg, lon, lat)[0]


def _meridian_crossings(epsg: int, lon: float, x: F64Array, y0: F64Array, y1: F64Array) -> F64Array:
    """Per rectangle, the northings in ``(y0, y1)`` where meridian ``lon`` crosses the
    vertical line ``x``, shape (n, 2) (NaN: none).

    Off the central meridian a meridian's easting is monotone in the latitude in each
    hemisphere (farthest from the central meridian at the equator), so each hemisphere
    has at most one crossing: column 0 the northern one, column 1 the southern.
    """
    out = np.full((len(x), 2), np.nan)
    for column, (a, b) in enumerate(((0.0, 90.0), (-90.0, 0.0))):
        xa, xb = _meridian_xy(epsg, lon, np.array([a, b]))[0]
        k = np.flatnonzero((x >= min(xa, xb)) & (x <= max(xa, xb)))
        if len(k) == 0:
            continue
        lat = _bisect_latitude(epsg, lon, x[k], np.full(len(k), a), np.full(len(k), b), 0)
        y = _meridian_xy(epsg, lon, lat)[1]
        out[k, column] = np.where((y > y0[k]) & (y < y1[k]), y, np.nan)
    return out


def _equator_northing(epsg: int) -> float:
    return 10_000_000.0 if 32701 <= int(epsg) <= 32760 else 0.0


def band_area_m2(epsg: int, rects: F64Array) -> F64Array:
    """Planar area (zone metres, m²) of each rectangle (as in :func:`band_position`)
    inside the zone's band, shape (n,): rectangles far inside the band have their whole
    area, far outside 0; those near an edge the integral of their width between the
    band's meridians (module notes).
    """
    rects = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
    full = (rects[:, 2] - rects[:, 0]) * (rects[:, 3] - rects[:, 1])
    position = band_position(epsg, rects)
    out = np.where(position == 1, full, 0.0)
    edge = np.flatnonzero(position == -1)
    if len(edge) == 0:
        return out
    x0, y0, x1, y1 = rects[edge].T
    west, east = zone_band_limits(epsg)
    # The width's kinks: where a meridian crosses a vertical side, and the equator (where
    # the meridians are farthest apart); a missing cut is y0, a piece of no length.
    cuts = [y0[:, None], y1[:, None]]
    for lon in (west, east):
        for x in (x0, x1):
            cuts.append(_meridian_crossings(epsg, lon, x, y0, y1))
    equator = _equator_northing(epsg)
    cuts.append(np.where((y0 < equator) & (equator < y1), equator, np.nan)[:, None])
    edges = np.concatenate(cuts, axis=1)
    edges = np.sort(np.where(np.isnan(edges), y0[:, None], edges), axis=1)
    a, b = edges[:, :-1], edges[:, 1:]
    nodes, weights = np.polynomial.legendre.leggauss(_GAUSS_NODES)
    # Every piece's nodes at once: northings (rectangles x pieces x nodes).
    half = 0.5 * (b - a)
    y = half[:, :, None] * nodes + (0.5 * (a + b))[:, :, None]
    piece = np.broadcast_to((b > a)[:, :, None], y.shape)  # padded pieces add nothing
    xs = np.broadcast_to(0.5 * (x0 + x1)[:, None, None], y.shape)
    _, lat_guess = transform_xy(xs[piece], y[piece], utm_crs(int(epsg)), WGS84)
    width = np.zeros(y.shape)
    x_west = _meridian_x_at(epsg, west, y[piece], lat_guess)
    x_east = _meridian_x_at(epsg, east, y[piece], lat_guess)
    lo = np.broadcast_to(x0[:, None, None], y.shape)[piece]
    hi = np.broadcast_to(x1[:, None, None], y.shape)[piece]
    width[piece] = np.maximum(0.0, np.minimum(hi, x_east) - np.maximum(lo, x_west))
    out[edge] = np.sum(half * (width @ weights), axis=1)
    return out

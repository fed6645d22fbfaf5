"""Pixel counts of one reporting tile: both layers rasterised (SPEC 6.7; seeds 001 and 002).

Both layers are rasterised on the pixel grid of the tile's UTM zone and compared pixel
by pixel into the tile's :class:`~evalcore.pixel_counts.PixelCounts`. Everything here is
per tile and merges by addition: a national result is the sum of the counts of its
tiles, whatever the partitioning, and :func:`evalcore.pixel_counts.micro_macro` turns a
list of per-tile counts into the JSON block. The counts and the metrics drawn from them
live in :mod:`evalcore.pixel_counts`.

The module stays whole at about 650 lines, nearly 250 of them docstrings (the rules
below and the doctests): the grid, the windows with their halo, GDAL's rule for centres on an edge and
the boundary counting depend on each other, and only together make a tile's counts
exact.

The grid
--------
Pixel ``(i, j)`` of a zone covers ``[i g, (i+1) g) x [j g, (j+1) g)`` metres of the
zone's CRS (``g`` = ``gsd_m``); its centre is ``((i + 0.5) g, (j + 0.5) g)``. Tile
``(tile_x, tile_y)`` of side ``T`` (``tile_size_m``) holds the pixels whose centre lies
in ``[tile_x T, (tile_x+1) T) x [tile_y T, (tile_y+1) T)`` (compared in float64). ``T``
need not be a multiple of ``g``: pixels are never split, so a tile holds
``floor(T / g)`` or ``ceil(T / g)`` columns (and rows), the tiles of a zone partition
its pixels exactly (every pixel belongs to exactly one tile), and the evaluated area
of a tile is its pixel count times ``g**2``, not exactly ``T**2``
(:func:`tile_pixel_bounds`).

Positive pixels (GDAL's rule)
-----------------------------
A pixel is positive in a layer when its centre lies inside one of the layer's polygons,
as ``rasterio.features.rasterize(..., all_touched=False)`` (GDAL's scanline fill)
decides it. A centre strictly inside or strictly outside a polygon is decided by the
geometry alone. For a centre exactly *on* a polygon's boundary, GDAL (checked with
GDAL 3.10, the one bundled with rasterio 1.4) says:

* the centre is positive when the polygon's interior lies immediately to its **west**,
  i.e. at ``(x - e, y + d)`` or at ``(x - e, y - d)`` for small ``0 < d << e``;
* so on a north-south edge, the **east** edge of a polygon includes its centres and the
  **west** edge excludes them (a centre on the shared edge of two side-by-side fields is
  positive in exactly one: the western field); the same holds for any sloping edge;
* on an east-west edge, centres are positive whether the interior lies north or south
  of the edge (a square includes the centres on its north and on its south edge),
  except where no interior lies immediately west (the western end of the edge at a
  convex corner);
* a vertex with no interior to its west (e.g. the apex of a triangle) is negative.

For example the square ``[2.5, 5.5] x [2.5, 5.5]`` on a 1 m grid, whose edges pass
through 16 pixel centres, is positive at the 12 centres with ``2.5 < x <= 5.5`` and
``2.5 <= y <= 5.5``. Ring orientation and the first vertex of a ring do not matter.
The rule is tested in ``tests/unit/test_pixels.py``. It is applied in pixel units:
coordinates are divided by ``g`` and shifted by whole pixels before they are handed to
GDAL, so a pixel's value does not depend on the window, the tile or the position of
the tile in the zone (exactly so when ``x / g`` and ``y / g`` are representable in
float64, e.g. whole or half metres on a 1 m grid; otherwise a centre within
floating-point rounding, about 1e-12 pixels, of an edge can go either way). Multi-part
geometries are burnt part by part, so a pixel is positive when its centre is inside
any part, and overlapping polygons of a layer count once.

Evaluated pixels
----------------
The pixels whose centre is in the tile, in ``band`` and positive in ``valid`` (the
annotated area, or None for all; decided by the same rule as the layers). ``band`` is
:data:`ZONE_BAND`, the zone's 6° band, for which a centre is in when its longitude,
computed with pyproj by inverse projection of the centre itself, lies in
``[central meridian - 3°, central meridian + 3°)`` (:func:`evalcore.zone_band.band_columns`:
exact, never a polygon standing in for the curved meridian); or a polygon, decided by
the layers' rule; or None for all. TP, FP, FN and TN count the evaluated pixels.

Boundary F1
-----------
Seed 001's definition: a layer's boundary is ``mask XOR binary_erosion(mask)`` with
the 4-neighbour (cross) structure, and a boundary pixel is a *hit* when the Euclidean
distance (``scipy.ndimage.distance_transform_edt``, in pixels, between pixel centres)
to the other layer's nearest boundary pixel is ``<= tolerance_px``. The masks are the
layers' full masks: every window is rasterised with a halo of ``tolerance_px + 1``
pixels (the erosion needs one pixel beyond the tolerance), so neither the boundary nor
the distances are cut at tile or window edges, and a field split between tiles gives
the same sums as the field in one tile. Only the boundary pixels among the evaluated
pixels are counted: ``band`` and ``valid`` restrict the counting, never the masks.

Memory
------
A tile is processed in windows of at most ``MAX_WINDOW_PIXELS`` pixels, halo included
(:func:`window_bytes` gives the bound in bytes), whatever the GSD and the tile size.
Two more checks raise ValueError: a halo that leaves less than half of a window's side
for the tile (a tolerance too large for the window), and a tile of more than
``MAX_TILE_PIXELS`` pixels (hours of work for one tile; use a larger GSD or smaller
tiles).
"""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass

import numpy as np
import shapely
from rasterio.features import rasterize
from rasterio.transform import Affine
from scipy import ndimage

from evalcore._typing import BoolArray, F64Array, GeomArray, IdArray
from evalcore.crs import to_utm
from evalcore.zone_band import band_columns, band_position
from evalcore.metrics.base import Option
from evalcore.pixel_counts import PixelCounts, tversky_weight

__all__ = [
    "ZONE_BAND",
    "PIXEL_OPTIONS",
    "count_tiles",
    "tile_region",
    "BYTES_PER_WINDOW_PIXEL",
    "MAX_TILE_PIXELS",
    "MAX_WINDOW_PIXELS",
    "tile_pixel_bounds",
    "tile_pixel_counts",
    "window_bytes",
]

logger = logging.getLogger(__name__)

MAX_WINDOW_PIXELS = 1024 * 1024
"""Largest window rasterised at once, halo included, in pixels (a 1024 x 1024 square)."""

MAX_TILE_PIXELS = 2**32
"""Largest tile, in pixels (about 4.3e9: a 10 km tile down to a GSD of about 0.16 m)."""

BYTES_PER_WINDOW_PIXEL = 48
"""Peak bytes of working arrays per window pixel (measured peak: about 40, see the tests).

The two layers' masks and boundaries (1 byte each), the tile's evaluated mask and its
temporaries (a few bytes), and scipy's Euclidean distance transform of the other
layer's boundary (an int8 copy, int32 feature indices and float64 distances: about 33
bytes at its peak). Geometries and GDAL's own scanline buffers come on top.
"""

ZONE_BAND = "zone"
"""``band`` of :func:`tile_pixel_counts`: the tile's zone's 6° band, by the longitude of
each pixel centre (the module's notes)."""

_CROSS = ndimage.generate_binary_structure(2, 1)
_CLIP_MIN_COORDS = 10_000  # a polygon with more coordinates is clipped to each window first


# --------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------


def _positive_m(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"`{name}` must be a positive, finite length in metres, but got {value!r}.")
    return float(value)


def _integer(value: object, name: str, *, minimum: int | None = None, what: str = "an integer") -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or (minimum is not None and value < minimum):
        raise ValueError(f"`{name}` must be {what}, but got {value!r}.")
    return int(value)


def _tolerance(value: object) -> int:
    return _integer(value, "tolerance_px", minimum=0, what="a non-negative integer number of pixels")


# --------------------------------------------------------------------------------------
# Grid, windows and the memory bound
# --------------------------------------------------------------------------------------


def _first_centre(edge_m: float, gsd_m: float) -> int:
    """The smallest index i with ``(i + 0.5) * gsd_m >= edge_m`` (float64)."""
    i = math.ceil(edge_m / gsd_m - 0.5)
    while (i - 0.5) * gsd_m >= edge_m:
        i -= 1
    while (i + 0.5) * gsd_m < edge_m:
        i += 1
    return i


def tile_pixel_bounds(tile_x: int, tile_y: int, *, tile_size_m: float, gsd_m: float) -> tuple[int, int, int, int]:
    """Pixel index ranges ``(i0, i1, j0, j1)`` of a tile: columns ``i0 <= i < i1``, rows ``j0 <= j < j1``.

    A pixel belongs to the tile when its centre ``((i + 0.5) g, (j + 0.5) g)`` lies in
    ``[tile_x T, (tile_x+1) T) x [tile_y T, (tile_y+1) T)``; adjacent tiles share their
    bound, so the tiles partition the pixels.

    Parameters
    ----------
    tile_x, tile_y : int
        The tile's key in its zone (⌊easting / T⌋, ⌊northing / T⌋).
    tile_size_m : float
        Tile side ``T`` (metres).
    gsd_m : float
        Pixel side ``g`` (metres).

    Returns
    -------
    tuple of 4 int

    Examples
    --------
    >>> tile_pixel_bounds(50, 500, tile_size_m=10_000.0, gsd_m=10.0)
    (50000, 51000, 500000, 501000)
    >>> tile_pixel_bounds(0, 0, tile_size_m=7.5, gsd_m=1.0), tile_pixel_bounds(1, 0, tile_size_m=7.5, gsd_m=1.0)
    ((0, 7, 0, 7), (7, 15, 0, 7))
    """
    tx = _integer(tile_x, "tile_x")
    ty = _integer(tile_y, "tile_y")
    t = _positive_m(tile_size_m, "tile_size_m")
    g = _positive_m(gsd_m, "gsd_m")
    return (_first_centre(tx * t, g), _first_centre((tx + 1) * t, g), _first_centre(ty * t, g), _first_centre((ty + 1) * t, g))


def _window_plan(gsd_m: float, tile_size_m: float, tolerance_px: int, max_window_pixels: int) -> tuple[int, int, int]:
    """(halo, core side, largest tile side) in pixels; raises when a bound is exceeded."""
    max_window_pixels = _integer(max_window_pixels, "max_window_pixels", minimum=16, what="an integer >= 16")
    halo = tolerance_px + 1
    side = math.isqrt(max_window_pixels)
    core = side - 2 * halo
    if 2 * core < side:
        raise ValueError(
            f"tolerance_px={tolerance_px} needs a halo of {halo} pixels on every side of a window, which leaves "
            f"less than half of a window's side ({side} pixels: max_window_pixels={max_window_pixels}) for the "
            f"tile. Use a smaller tolerance_px (at most {side // 4 - 1} here); the tolerance is in pixels, so a "
            "larger pixel_gsd_m reaches the same distance in metres with fewer pixels."
        )
    tile_side = math.ceil(tile_size_m / gsd_m) + 1  # the most pixel centres a tile can hold along an axis
    if tile_side * tile_side > MAX_TILE_PIXELS:
        raise ValueError(
            f"A tile of {tile_size_m:g} m at gsd_m={gsd_m:g} holds about {tile_side - 1} x {tile_side - 1} pixels, "
            f"more than MAX_TILE_PIXELS={MAX_TILE_PIXELS}. Use a larger pixel_gsd_m or smaller tiles (tile_km)."
        )
    return halo, core, tile_side


def window_bytes(gsd_m: float, tile_size_m: float, tolerance_px: int, *,
                 max_window_pixels: int = MAX_WINDOW_PIXELS) -> int:
    """Upper bound on the working memory of :func:`tile_pixel_counts` for one tile (bytes).

    A tile is processed one window at a time; a window is a block of at most
    ``(side - 2 h)**2`` tile pixels plus a halo of ``h = tolerance_px + 1`` pixels on
    every side, with ``side = isqrt(max_window_pixels)``, and costs at most
    ``BYTES_PER_WINDOW_PIXEL`` bytes per pixel. Small tiles have smaller windows. The
    input geometries (and their copies in pixel units) come on top.

    Parameters
    ----------
    gsd_m : float
        Pixel side (metres).
    tile_size_m : float
        Tile side (metres).
    tolerance_px : int
        Boundary tolerance (pixels).
    max_window_pixels : int, optional
        Window size limit, halo included (pixels); default :data:`MAX_WINDOW_PIXELS`.

    Returns
    -------
    int
        Bytes.

    Raises
    ------
    ValueError
        When the halo leaves less than half of a window's side for the tile, or a tile
        holds more than :data:`MAX_TILE_PIXELS` pixels; the message says what to change.

    Examples
    --------
    >>> window_bytes(10.0, 10_000.0, 2)  # one window of at most (1001 + 2 * 3)**2 pixels
    48674352
    >>> window_bytes(1.0, 10_000.0, 2) == 1024**2 * BYTES_PER_WINDOW_PIXEL
    True
    """
    g = _positive_m(gsd_m, "gsd_m")
    t = _positive_m(tile_size_m, "tile_size_m")
    tol = _tolerance(tolerance_px)
    halo, core, tile_side = _window_plan(g, t, tol, max_window_pixels)
    side = min(core, tile_side) + 2 * halo
    return side * side * BYTES_PER_WINDOW_PIXEL


# --------------------------------------------------------------------------------------
# Geometries in pixel units
# --------------------------------------------------------------------------------------


def _polygons(geoms: object, name: str) -> GeomArray:
    """The polygons of a layer, one per part; None and empty geometries are skipped."""
    arr = np.asarray(geoms, dtype=object)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    arr = arr.ravel()
    arr = arr[~shapely.is_missing(arr)]
    if len(arr) and not all(isinstance(g, shapely.Geometry) for g in arr):
        bad = next(g for g in arr if not isinstance(g, shapely.Geometry))
        raise ValueError(f"`{name}` must hold shapely polygons, but holds a {type(bad).__name__}.")
    while len(arr) and np.isin(shapely.get_type_id(arr), (4, 5, 6, 7)).any():
        arr = shapely.get_parts(arr)
    arr = arr[~shapely.is_empty(arr)]
    types = shapely.get_type_id(arr)
    if (types != 3).any():
        bad = arr[types != 3][0]
        raise ValueError(f"`{name}` must hold polygons (in the tile's zone metres), but holds a {bad.geom_type}.")
    return arr


def _area(geom: object, name: str) -> shapely.Geometry | None:
    """A polygonal restriction (band or valid area) as one geometry; None for no restriction."""
    if geom is None:
        return None
    if not isinstance(geom, shapely.Geometry):
        raise ValueError(f"`{name}` must be a shapely (multi)polygon or None, but got a {type(geom).__name__}.")  # noqa: TRY004
    parts = _polygons(np.array([geom], dtype=object), name)
    return shapely.multipolygons(parts) if len(parts) != 1 else parts[0]


def _to_pixels(geoms: GeomArray, gsd_m: float, origin: tuple[int, int]) -> GeomArray:
    """Geometries in pixel units relative to a whole pixel: ``x / g - origin``.

    ``x / g`` is rounded once and the shift by whole pixels is exact, so a vertex's
    position relative to any pixel is the same whatever the origin.
    """
    shift = np.array(origin, dtype=np.float64)
    return shapely.transform(geoms, lambda c: c / gsd_m - shift)


# --------------------------------------------------------------------------------------
# One window
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Layer:
    """A layer's polygons in pixel units, with what each window needs to pick and burn them."""

    geoms: GeomArray        # polygons in pixel units
    bounds: F64Array        # (n, 4) xmin, ymin, xmax, ymax
    big: BoolArray          # polygons clipped to each window before rasterising
    coords: F64Array        # (n_coords, 2), shapely.to_ragged_array's layout
    ring_offsets: IdArray
    polygon_offsets: IdArray

    @staticmethod
    def of(geoms: GeomArray) -> _Layer:
        if len(geoms):
            _, coords, (ring_offsets, polygon_offsets) = shapely.to_ragged_array(geoms)
        else:
            coords, ring_offsets, polygon_offsets = np.zeros((0, 2)), np.zeros(1, np.int64), np.zeros(1, np.int64)
        return _Layer(geoms, shapely.bounds(geoms).reshape(-1, 4), shapely.get_num_coordinates(geoms) > _CLIP_MIN_COORDS,
                      coords, np.asarray(ring_offsets), np.asarray(polygon_offsets))

    def mappings(self, which: IdArray) -> list[dict]:
        """GeoJSON-like mappings of some polygons (much faster for rasterio than shapely objects)."""
        ro, po, xy = self.ring_offsets, self.polygon_offsets, self.coords
        return [{"type": "Polygon", "coordinates": [xy[ro[r]:ro[r + 1]].tolist() for r in range(po[k], po[k + 1])]}
                for k in which]


def _burn(shapes: list, c0: int, c1: int, r0: int, r1: int) -> BoolArray:
    """GDAL's centre rule over columns [c0, c1) and rows [r0, r1) of pixel units.

    Returns a bool array in raster order: row 0 is the northern row ``r1 - 1``.
    """
    shape = (r1 - r0, c1 - c0)
    if not shapes:
        return np.zeros(shape, dtype=bool)
    out = rasterize(shapes, out_shape=shape, transform=Affine(1.0, 0.0, c0, 0.0, -1.0, r1),
                    fill=0, default_value=1, dtype="uint8", all_touched=False)
    return out.view(bool)


def _layer_mask(layer: _Layer, c0: int, c1: int, r0: int, r1: int) -> BoolArray:
    b = layer.bounds
    hit = (b[:, 0] <= c1) & (b[:, 2] >= c0) & (b[:, 1] <= r1) & (b[:, 3] >= r0)
    shapes = layer.mappings(np.flatnonzero(hit & ~layer.big))
    if (hit & layer.big).any():
        clipped = shapely.clip_by_rect(layer.geoms[hit & layer.big], c0, r0, c1, r1)
        shapes += [p for p in shapely.get_parts(clipped) if p.geom_type == "Polygon" and not p.is_empty]
    return _burn(shapes, c0, c1, r0, r1)


@dataclass(frozen=True, slots=True)
class _RowRuns:
    """Per tile row (pixel units, row 0 the southern), the columns ``[start, stop)`` counted."""

    start: IdArray
    stop: IdArray

    def mask(self, c0: int, c1: int, r0: int, r1: int) -> BoolArray | None:
        """The block's counted centres in raster order (row 0 the northern row ``r1 - 1``);
        None when all are counted."""
        start, stop = self.start[r0:r1][::-1, None], self.stop[r0:r1][::-1, None]
        columns = np.arange(c0, c1)[None, :]
        inside = (columns >= start) & (columns < stop)
        return None if inside.all() else inside


def _restriction(area: shapely.Geometry | _RowRuns | None, c0: int, c1: int, r0: int, r1: int) -> BoolArray | None:
    """Where a band or valid area holds the centres of the block; None when it holds them all."""
    if area is None:
        return None
    if isinstance(area, _RowRuns):
        return area.mask(c0, c1, r0, r1)
    centres = shapely.box(c0 + 0.5, r0 + 0.5, c1 - 0.5, r1 - 0.5)
    if shapely.contains_properly(area, centres):
        return None
    if not shapely.intersects(area, centres):
        return np.zeros((r1 - r0, c1 - c0), dtype=bool)
    # Clipping at pixel edges (whole numbers) never puts an edge through a centre.
    clipped = shapely.clip_by_rect(area, c0, r0, c1, r1)
    shapes = [p for p in shapely.get_parts(clipped) if p.geom_type == "Polygon" and not p.is_empty]
    return _burn(shapes, c0, c1, r0, r1)


def _tile_restriction(area: shapely.Geometry | None, gsd_m: float, origin: tuple[int, int],
                      nx: int, ny: int) -> shapely.Geometry | None:
    """A band or valid area in pixel units, clipped to the tile; None when it holds every centre."""
    if area is None:
        return None
    area = _to_pixels(np.array([area], dtype=object), gsd_m, origin)[0]
    if shapely.contains_properly(area, shapely.box(0.5, 0.5, nx - 0.5, ny - 0.5)):
        return None
    # Clipping at pixel edges (whole numbers) never puts an edge through a centre.
    area = shapely.clip_by_rect(area, 0, 0, nx, ny)
    shapely.prepare(area)
    return area


def _zone_runs(epsg: int, g: float, i0: int, i1: int, j0: int, j1: int) -> _RowRuns | None:
    """The zone band's columns of each tile row, relative to the tile (None: every centre)."""
    where = band_position(epsg, np.array([[i0 * g, j0 * g, i1 * g, j1 * g]]))[0]
    if where == 1:
        return None
    n = j1 - j0
    if where == 0:
        return _RowRuns(np.zeros(n, np.int64), np.zeros(n, np.int64))
    start, stop = band_columns(epsg, g, i0, i1, j0, j1)
    return _RowRuns(start - i0, stop - i0)


def _boundary(mask: BoolArray) -> BoolArray:
    """Seed 001's boundary: ``mask XOR binary_erosion(mask)`` with the 4-neighbour cross."""
    return mask ^ ndimage.binary_erosion(mask, structure=_CROSS)


def _hits(counted: BoolArray, other: BoolArray, tolerance_px: int) -> int:
    """Counted boundary pixels within ``tolerance_px`` of a boundary pixel of ``other``.

    ``other`` is the other layer's boundary over the counted block plus ``tolerance_px``
    pixels on every side: a boundary pixel within the tolerance of a counted pixel lies
    in it, so the distances that decide a hit are exact.
    """
    if not other.any():
        return 0
    distance = ndimage.distance_transform_edt(~other)
    t = tolerance_px
    return int(np.count_nonzero(counted & (distance[t:distance.shape[0] - t, t:distance.shape[1] - t] <= t)))


def _window_counts(ref: _Layer, pred: _Layer, band: shapely.Geometry | _RowRuns | None, valid: shapely.Geometry | None,
                   c0: int, c1: int, r0: int, r1: int, halo: int, tolerance_px: int) -> tuple[int, ...]:
    """The eight counts of the block [c0, c1) x [r0, r1) (pixel units), rasterised with its halo."""
    evaluated = _restriction(band, c0, c1, r0, r1)
    if evaluated is None or evaluated.any():
        inside = _restriction(valid, c0, c1, r0, r1)
        evaluated = inside if evaluated is None else (evaluated if inside is None else evaluated & inside)
    if evaluated is not None and not evaluated.any():
        return (0,) * 8
    n_eval = (r1 - r0) * (c1 - c0) if evaluated is None else int(np.count_nonzero(evaluated))

    def only(mask: BoolArray) -> BoolArray:
        return mask if evaluated is None else mask & evaluated

    box = (c0 - halo, c1 + halo, r0 - halo, r1 + halo)
    ref_mask = _layer_mask(ref, *box)
    pred_mask = _layer_mask(pred, *box)
    core = (slice(halo, halo + r1 - r0), slice(halo, halo + c1 - c0))
    r, p = ref_mask[core], pred_mask[core]
    tp = int(np.count_nonzero(only(r & p)))
    fp = int(np.count_nonzero(only(p))) - tp
    fn = int(np.count_nonzero(only(r))) - tp
    tn = n_eval - tp - fp - fn

    ref_edge = _boundary(ref_mask) if ref_mask.any() else np.zeros_like(ref_mask)
    pred_edge = _boundary(pred_mask) if pred_mask.any() else np.zeros_like(pred_mask)
    ref_counted = only(ref_edge[core])
    pred_counted = only(pred_edge[core])
    n_ref_edge = int(np.count_nonzero(ref_counted))
    n_pred_edge = int(np.count_nonzero(pred_counted))
    # The boundaries within the tolerance of the block; the window's outermost ring, where
    # the erosion sees the window's edge, is one pixel further out and never enters.
    near = (slice(halo - tolerance_px, halo + r1 - r0 + tolerance_px),
            slice(halo - tolerance_px, halo + c1 - c0 + tolerance_px))
    ref_hit = _hits(ref_counted, pred_edge[near], tolerance_px) if n_ref_edge else 0
    pred_hit = _hits(pred_counted, ref_edge[near], tolerance_px) if n_pred_edge else 0
    return tp, fp, fn, tn, n_ref_edge, ref_hit, n_pred_edge, pred_hit


def _blocks(start: int, stop: int, size: int) -> list[tuple[int, int]]:
    return [(a, min(a + size, stop)) for a in range(start, stop, size)]


# --------------------------------------------------------------------------------------
# One tile
# --------------------------------------------------------------------------------------


def tile_pixel_counts(ref_geoms: object, pred_geoms: object, *, epsg: int, tile_x: int, tile_y: int,
                      tile_size_m: float, gsd_m: float, tolerance_px: int,
                      band: shapely.Geometry | str | None = None, valid: shapely.Geometry | None = None,
                      max_window_pixels: int = MAX_WINDOW_PIXELS) -> PixelCounts:
    """Confusion and boundary counts of one reporting tile on its zone's pixel grid.

    See the module's notes for the grid, GDAL's rule on pixel centres, the evaluated
    pixels and seed 001's boundary F1.

    Parameters
    ----------
    ref_geoms, pred_geoms : array_like of shapely Polygon or MultiPolygon
        The reference and predicted polygons in the tile's zone CRS (metres): every
        polygon that may reach the tile or ``tolerance_px + 1`` pixels around it (more
        is fine). None and empty geometries are skipped.
    epsg : int
        The tile's zone (names the tile; the grid depends on metres only).
    tile_x, tile_y : int
        The tile's key: it covers ``[tile_x T, (tile_x+1) T) x [tile_y T, (tile_y+1) T)``.
    tile_size_m : float
        Tile side ``T`` (metres); need not be a multiple of ``gsd_m``.
    gsd_m : float
        Pixel side ``g`` (metres), > 0.
    tolerance_px : int
        Boundary tolerance (pixels), >= 0: a boundary pixel is a hit within this
        Euclidean distance (``<=``) of the other layer's boundary.
    band : ZONE_BAND, or shapely Polygon or MultiPolygon, optional
        :data:`ZONE_BAND`: only pixels whose centre's longitude lies in the zone's 6° band
        count (exactly, by inverse projection of the centres). A polygon (zone metres):
        only pixels whose centre is in it count. None (default): no restriction.
    valid : shapely Polygon or MultiPolygon, optional
        The annotated area in zone metres; only pixels whose centre is in it count.
        None (default): no restriction.
    max_window_pixels : int, optional
        Largest window rasterised at once, halo included (pixels); default
        :data:`MAX_WINDOW_PIXELS`. Memory: :func:`window_bytes`.

    Returns
    -------
    PixelCounts
        With ``gsd_m`` and ``tolerance_px`` set.

    Raises
    ------
    ValueError
        For a bad parameter (named in the message), a geometry that is not polygonal,
        or a window or tile over its bound (:func:`window_bytes`).

    Examples
    --------
    >>> from shapely import box
    >>> c = tile_pixel_counts([box(2, 2, 6, 6)], [box(3, 2, 7, 6)], epsg=32633, tile_x=0, tile_y=0,
    ...                       tile_size_m=10.0, gsd_m=1.0, tolerance_px=0)
    >>> c.tp, c.fp, c.fn, c.tn, c.n_pixels
    (12, 4, 4, 80, 100)
    >>> tile_pixel_counts([], [], epsg=32633, tile_x=0, tile_y=0, tile_size_m=10.0, gsd_m=1.0,
    ...                   tolerance_px=1).tn
    100
    """
    _integer(epsg, "epsg", minimum=1, what="a positive EPSG code")
    g = _positive_m(gsd_m, "gsd_m")
    t = _positive_m(tile_size_m, "tile_size_m")
    tol = _tolerance(tolerance_px)
    halo, core, _ = _window_plan(g, t, tol, max_window_pixels)
    i0, i1, j0, j1 = tile_pixel_bounds(tile_x, tile_y, tile_size_m=t, gsd_m=g)
    ref_parts = _polygons(ref_geoms, "ref_geoms")
    pred_parts = _polygons(pred_geoms, "pred_geoms")
    by_longitude = isinstance(band, str) and band == ZONE_BAND
    band_area = None if by_longitude else _area(band, "band")
    valid_area = _area(valid, "valid")
    if i1 <= i0 or j1 <= j0:
        return PixelCounts(gsd_m=g, tolerance_px=tol)

    origin = (i0, j0)  # pixel units relative to the tile's first pixel
    ref = _Layer.of(_to_pixels(ref_parts, g, origin))
    pred = _Layer.of(_to_pixels(pred_parts, g, origin))
    band_px = _zone_runs(int(epsg), g, i0, i1, j0, j1) if by_longitude else _tile_restriction(band_area, g, origin, i1 - i0, j1 - j0)
    valid_px = _tile_restriction(valid_area, g, origin, i1 - i0, j1 - j0)

    columns = _blocks(0, i1 - i0, core)
    rows = _blocks(0, j1 - j0, core)
    logger.debug("pixel tile (%d, %d, %d): %d x %d pixels in %d windows", epsg, tile_x, tile_y,
                 i1 - i0, j1 - j0, len(columns) * len(rows))
    sums = np.zeros(8, dtype=np.int64)
    for r0, r1 in rows:
        for c0, c1 in columns:
            sums += np.array(_window_counts(ref, pred, band_px, valid_px, c0, c1, r0, r1, halo, tol), dtype=np.int64)
    tp, fp, fn, tn, ref_b, ref_hit, pred_b, pred_hit = (int(v) for v in sums)
    return PixelCounts(tp=tp, fp=fp, fn=fn, tn=tn, ref_boundary=ref_b, ref_boundary_hit=ref_hit,
                       pred_boundary=pred_b, pred_boundary_hit=pred_hit, gsd_m=g, tolerance_px=tol)


# --------------------------------------------------------------------------- the run's tiles

def _non_negative_weight(name: str, value: object) -> float:
    return tversky_weight(value, name)


def _tolerance_option(name: str, value: object) -> int:
    return _tolerance(value)


def _gsd_option(name: str, value: object) -> float | None:
    return None if value is None else _positive_m(value, name)


def _parse_gsd(text: str) -> float | None:
    return None if text.strip().lower() == "none" else float(text)


PIXEL_OPTIONS: tuple[Option, ...] = (
    Option("pixel_gsd_m", None, "rasterise both layers per reporting tile at this ground sample distance, metres: "
           "pixel metrics (default: none)", _gsd_option, parse=_parse_gsd, annotation=float | None),
    Option("pixel_tolerance_px", 2, "boundary F1 tolerance in pixels, a whole number >= 0 (default 2)",
           _tolerance_option, parse=int, annotation=int),
    Option("tversky_alpha", 0.5, "Tversky index weight of the false positives, >= 0 (default 0.5)",
           _non_negative_weight, parse=float, annotation=float),
    Option("tversky_beta", 0.5, "Tversky index weight of the false negatives, >= 0 (default 0.5)",
           _non_negative_weight, parse=float, annotation=float),
)
"""The options of the pixel metrics (declared once; CLI flags and flow parameters follow)."""


def tile_region(epsg: int, tile_x: int, tile_y: int, tile_size_m: float, gsd_m: float, tolerance_px: int) -> shapely.Geometry:
    """The tile's square with the halo its boundary pixels need, in zone metres."""
    halo = (int(tolerance_px) + 2) * float(gsd_m)
    x0, y0 = tile_x * tile_size_m, tile_y * tile_size_m
    return shapely.box(x0 - halo, y0 - halo, x0 + tile_size_m + halo, y0 + tile_size_m + halo)


def count_tiles(
    tile_keys: np.ndarray,
    ref_geoms: np.ndarray,
    ref_crs: object,
    pred_geoms: np.ndarray,
    pred_crs: object,
    options: object,
    annotated: object = None,
) -> dict[tuple[int, int, int], PixelCounts]:
    """Pixel counts of the given reporting tiles from the layers' repaired source geometry.

    Parameters
    ----------
    tile_keys : ndarray of int64, shape (n, 3)
        ``(epsg, tile x, tile y)`` of the tiles to count.
    ref_geoms, pred_geoms : ndarray of shapely geometries
        The layers' repaired polygons in their source CRSs: at least every polygon that
        reaches one of the tiles (reprojected here into each tile's zone, without the
        50 m split, as the distances are, SPEC 2.4).
    ref_crs, pred_crs : pyproj.CRS
    options : EvalOptions
        ``tile_km``, ``pixel_gsd_m``, ``pixel_tolerance_px``.
    annotated : evalcore.levels.AnnotatedArea, optional
        The valid mask (its source polygons, reprojected into each zone).
    """
    side = float(options.tile_km) * 1000.0
    gsd, tol = float(options.pixel_gsd_m), int(options.pixel_tolerance_px)
    out: dict[tuple[int, int, int], PixelCounts] = {}
    for epsg in np.unique(tile_keys[:, 0]) if len(tile_keys) else []:
        keys = tile_keys[tile_keys[:, 0] == epsg]
        regions = [tile_region(int(epsg), int(x), int(y), side, gsd, tol) for _, x, y in keys]
        zone = {}
        for name, geoms, crs in (("ref", ref_geoms, ref_crs), ("pred", pred_geoms, pred_crs)):
            present = np.asarray([g is not None for g in geoms], dtype=bool) if len(geoms) else np.zeros(0, bool)
            g = np.asarray(geoms, dtype=object)[present]
            zone[name] = to_utm(g, crs, np.full(len(g), int(epsg), dtype=np.int64)) if len(g) else np.empty(0, dtype=object)
        valid_zone = None
        if annotated is not None and annotated.geoms_source is not None:
            a = to_utm(annotated.geoms_source, annotated.crs, np.full(len(annotated.geoms_source), int(epsg), dtype=np.int64))
            valid_zone = shapely.union_all(a) if len(a) else shapely.Polygon()
        trees = {name: shapely.STRtree(g) for name, g in zone.items()}
        for (e, x, y), region in zip(keys.tolist(), regions):
            near = {name: zone[name][trees[name].query(region, predicate="intersects")] for name in zone}
            out[(int(e), int(x), int(y))] = tile_pixel_counts(
                near["ref"], near["pred"], epsg=int(e), tile_x=int(x), tile_y=int(y), tile_size_m=side, gsd_m=gsd,
                tolerance_px=tol, band=ZONE_BAND, valid=valid_zone,
            )
    return out

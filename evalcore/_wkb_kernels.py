"""numba kernels reading and writing WKB Polygons and MultiPolygons (2D, little-endian)
straight from and to bytes, without building geometries.

What a GeoParquet file's metadata says of a WKB column, the geometry types and the
bounding box (:func:`_wkb_polygon_extent`): written tables pass their stored WKB through
(:func:`evalcore.writers.write_geoparquet_wkb`); decoding every polygon only to encode it
again and to take its envelope was half of the predictions task's time. Flat rings
(:mod:`evalcore.rings`) read from WKB and written as WKB (:func:`_wkb_rings`,
:func:`_rings_wkb`): the pairs phase measures boundaries on the rings, and the prepare
phase stores its home-zone geometry from them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from evalcore.config import NUMBA_OPTIONS

__all__ = ["_rings_wkb", "_wkb_polygon_extent", "_wkb_rings"]


@njit(**NUMBA_OPTIONS)
def _u32(data: np.ndarray, at: int) -> int:
    """A little-endian unsigned 32-bit integer at byte ``at``."""
    return int(data[at]) | (int(data[at + 1]) << 8) | (int(data[at + 2]) << 16) | (int(data[at + 3]) << 24)


@njit(**NUMBA_OPTIONS)
def _geometry_parts(data: np.ndarray, at: int, stop: int):
    """The type id, part count and first part's byte of the 2D little-endian WKB value
    ``data[at:stop]``: a Polygon is its own one part; (-1, 0, -1) for anything else."""
    if stop - at < 9 or data[at] != 1:
        return -1, 0, -1
    kind = _u32(data, at + 1)
    if kind == 3:
        return 3, 1, at
    if kind == 6:
        return 6, np.int64(_u32(data, at + 5)), at + 9
    return -1, 0, -1


@njit(**NUMBA_OPTIONS)
def _polygon_rings_at(data: np.ndarray, at: int, stop: int):
    """The ring count of the 2D little-endian WKB Polygon at ``at`` and the byte of its first
    ring; (-1, -1) when the bytes are not one."""
    if at + 9 > stop or data[at] != 1 or _u32(data, at + 1) != 3:
        return -1, -1
    return np.int64(_u32(data, at + 5)), at + 9


@njit(**NUMBA_OPTIONS)
def _ring_points_at(data: np.ndarray, at: int, stop: int):
    """The point count of the WKB ring at ``at`` and the byte of its first point; (-1, -1)
    when its points run past ``stop``."""
    if at + 4 > stop:
        return -1, -1
    n_points = np.int64(_u32(data, at))  # signed: numba unifies int64 with uint64 as float64
    if at + 4 + 16 * n_points > stop:
        return -1, -1
    return n_points, at + 4


@njit(**NUMBA_OPTIONS)
def _polygon_end(data: np.ndarray, at: int, stop: int, bounds: np.ndarray) -> int:
    """Read one little-endian 2D WKB Polygon starting at ``at``, widening ``bounds`` by its
    exterior ring; the byte after it, or -1 when the bytes are not such a polygon."""
    n_rings, at = _polygon_rings_at(data, at, stop)
    for ring in range(n_rings):
        n_points, at = _ring_points_at(data, at, stop)
        if n_points < 0:
            return -1
        if ring == 0 and n_points > 0:
            # GEOS's envelope of a polygon is its shell's (a valid polygon's holes lie inside it).
            xy = data[at:at + 16 * n_points].view(np.float64)
            for k in range(n_points):
                x = xy[2 * k]
                y = xy[2 * k + 1]
                if x < bounds[0]:
                    bounds[0] = x
                if y < bounds[1]:
                    bounds[1] = y
                if x > bounds[2]:
                    bounds[2] = x
                if y > bounds[3]:
                    bounds[3] = y
        at += 16 * n_points
    return at


@njit(**NUMBA_OPTIONS)
def _wkb_polygon_extent(data: np.ndarray, offsets: np.ndarray, types: np.ndarray, bounds: np.ndarray) -> bool:
    """The type id of each WKB value and the box of them all, for 2D little-endian
    Polygons and MultiPolygons; False when some value is anything else (the caller then
    decodes them).

    Parameters
    ----------
    data : uint8 (n_bytes,)
        The values' bytes, one after another.
    offsets : int64 (n + 1,)
        Value ``i`` is ``data[offsets[i]:offsets[i + 1]]``; an empty value is a missing geometry.
    types : int64 (n,), filled
        shapely's type id of each value (3 Polygon, 6 MultiPolygon, -1 missing).
    bounds : float64 (4,), filled
        minx, miny, maxx, maxy over every value's polygons' shells; +inf/-inf when there is
        no coordinate.
    """
    bounds[0] = np.inf
    bounds[1] = np.inf
    bounds[2] = -np.inf
    bounds[3] = -np.inf
    for i in range(len(offsets) - 1):
        stop = offsets[i + 1]
        if stop == offsets[i]:
            types[i] = -1
            continue
        kind, n_parts, end = _geometry_parts(data, offsets[i], stop)
        for _ in range(n_parts):
            end = _polygon_end(data, end, stop, bounds)
            if end < 0:
                break
        if kind < 0 or end != stop:
            return False
        types[i] = kind
    return True


@njit(**NUMBA_OPTIONS)
def _polygon_rings(data: np.ndarray, at: int, stop: int, fill: bool, x: np.ndarray, y: np.ndarray,
                   ring_off: np.ndarray, ring_ext: np.ndarray, counts: np.ndarray) -> int:
    """Read one little-endian 2D WKB Polygon at ``at``: count its rings and coordinates in
    ``counts`` (rings, coordinates) and, when ``fill``, copy them to the flat arrays at
    those counts. The byte after it, or -1 when the bytes are not such a polygon or a ring
    is empty (which GEOS never writes)."""
    n_rings, at = _polygon_rings_at(data, at, stop)
    for ring in range(n_rings):
        n_points, at = _ring_points_at(data, at, stop)
        if n_points <= 0:
            return -1
        r = counts[0]
        c = counts[1]
        if fill:
            xy = data[at:at + 16 * n_points].view(np.float64)
            for k in range(n_points):
                x[c + k] = xy[2 * k]
                y[c + k] = xy[2 * k + 1]
            ring_ext[r] = ring == 0
            ring_off[r + 1] = c + n_points
        counts[0] = r + 1
        counts[1] = c + n_points
        at += 16 * n_points
    return at


@njit(**NUMBA_OPTIONS)
def _wkb_rings_pass(data: np.ndarray, offsets: np.ndarray, fill: bool, x: np.ndarray, y: np.ndarray,
                    ring_off: np.ndarray, ring_ext: np.ndarray, geom_off: np.ndarray, counts: np.ndarray) -> bool:
    """One pass of :func:`_wkb_rings`: count (``fill`` False) or copy (True)."""
    counts[0] = 0
    counts[1] = 0
    if fill:
        ring_off[0] = 0
        geom_off[0] = 0
    for i in range(len(offsets) - 1):
        stop = offsets[i + 1]
        if stop > offsets[i]:
            kind, n_parts, end = _geometry_parts(data, offsets[i], stop)
            for _ in range(n_parts):
                end = _polygon_rings(data, end, stop, fill, x, y, ring_off, ring_ext, counts)
                if end < 0:
                    break
            if kind < 0 or end != stop:
                return False
        if fill:
            geom_off[i + 1] = counts[0]
    return True


@njit(**NUMBA_OPTIONS)
def _wkb_rings(data: np.ndarray, offsets: np.ndarray):
    """Flat rings (:mod:`evalcore.rings`) of 2D little-endian WKB Polygons and MultiPolygons.

    Parameters
    ----------
    data, offsets
        The values' bytes and where each starts, as :func:`_wkb_polygon_extent` takes them.

    Returns
    -------
    ok : bool
        False when some value is anything else (the caller then decodes them with GEOS);
        the arrays are then empty.
    x, y, ring_off, ring_ext, geom_off
        As :func:`evalcore.rings.flatten_rings` gives them for the decoded geometries.
    """
    counts = np.zeros(2, dtype=np.int64)
    empty_f = np.empty(0, dtype=np.float64)
    empty_i = np.empty(0, dtype=np.int64)
    empty_b = np.empty(0, dtype=np.bool_)
    if not _wkb_rings_pass(data, offsets, False, empty_f, empty_f, empty_i, empty_b, empty_i, counts):
        return False, empty_f, empty_f, np.zeros(1, dtype=np.int64), empty_b, np.zeros(1, dtype=np.int64)
    x = np.empty(counts[1], dtype=np.float64)
    y = np.empty(counts[1], dtype=np.float64)
    ring_off = np.empty(counts[0] + 1, dtype=np.int64)
    ring_ext = np.empty(counts[0], dtype=np.bool_)
    geom_off = np.empty(len(offsets), dtype=np.int64)
    _wkb_rings_pass(data, offsets, True, x, y, ring_off, ring_ext, geom_off, counts)
    return True, x, y, ring_off, ring_ext, geom_off


@njit(**NUMBA_OPTIONS)
def _put_u32(out: np.ndarray, at: int, value: int) -> int:
    """Write ``value`` as a little-endian unsigned 32-bit integer at byte ``at``; the byte after it."""
    out[at] = value & 0xFF
    out[at + 1] = (value >> 8) & 0xFF
    out[at + 2] = (value >> 16) & 0xFF
    out[at + 3] = (value >> 24) & 0xFF
    return at + 4


@njit(**NUMBA_OPTIONS)
def _rings_wkb(x: np.ndarray, y: np.ndarray, ring_off: np.ndarray, ring_ext: np.ndarray, geom_off: np.ndarray,
               types: np.ndarray):
    """2D little-endian WKB of flat rings' polygons, byte for byte what GEOS writes for them.

    Parameters
    ----------
    x, y, ring_off, ring_ext, geom_off
        Flat rings (:mod:`evalcore.rings`); a part starts at each exterior ring.
    types : int64 (n_geoms,)
        shapely's type id of each geometry: 3 Polygon (one part; no ring: POLYGON EMPTY),
        6 MultiPolygon (any number of parts).

    Returns
    -------
    ok : bool
        False when a geometry's type is neither, or a Polygon has more than one part.
    data : uint8 (n_bytes,)
    offsets : int64 (n_geoms + 1,)
        Geometry ``g``'s WKB is ``data[offsets[g]:offsets[g + 1]]``.
    """
    n = geom_off.shape[0] - 1
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for g in range(n):
        r0 = geom_off[g]
        r1 = geom_off[g + 1]
        parts = 0
        for r in range(r0, r1):
            if ring_ext[r]:
                parts += 1
        kind = types[g]
        size = 9 + 4 * (r1 - r0) + 16 * (ring_off[r1] - ring_off[r0])
        if kind == 6:
            size += 9 * parts  # each part's own byte order, type and ring count
        elif kind != 3 or parts > 1:
            return False, np.empty(0, dtype=np.uint8), offsets
        offsets[g + 1] = offsets[g] + size
    data = np.empty(offsets[n], dtype=np.uint8)
    for g in range(n):
        at = offsets[g]
        r0 = geom_off[g]
        r1 = geom_off[g + 1]
        data[at] = 1
        if types[g] == 6:
            parts = 0
            for r in range(r0, r1):
                if ring_ext[r]:
                    parts += 1
            at = _put_u32(data, at + 1, 6)
            at = _put_u32(data, at, parts)
        r = r0
        while r < r1 or (types[g] == 3 and r == r0):
            # One polygon: its exterior and the holes up to the next exterior.
            stop = r + 1
            while stop < r1 and not ring_ext[stop]:
                stop += 1
            if r >= r1:  # POLYGON EMPTY
                stop = r
            if types[g] == 6:
                data[at] = 1
                at += 1
            else:
                at += 1  # the byte order written above
            at = _put_u32(data, at, 3)
            at = _put_u32(data, at, stop - r)
            for k in range(r, stop):
                c0 = ring_off[k]
                c1 = ring_off[k + 1]
                at = _put_u32(data, at, c1 - c0)
                xy = data[at:at + 16 * (c1 - c0)].view(np.float64)
                for c in range(c0, c1):
                    xy[2 * (c - c0)] = x[c]
                    xy[2 * (c - c0) + 1] = y[c]
                at += 16 * (c1 - c0)
            if stop == r:
                break
            r = stop
    return True, data, offsets

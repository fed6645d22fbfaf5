"""Layout: items packed into rows of cells within each cluster, and clusters placed on the map.

Every field sits inside its own cell and cells leave a gap between fields, so fields
never overlap; clusters sit on a lattice of slots in the US Great Plains, each in the
UTM zone of its centre (see "Reference layer" in :mod:`evalcore.synth`).
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass

import numpy as np
import pyproj

from evalcore._typing import F64Array, IdArray
from evalcore.synth.constants import (
    _FP_OUTSIDE,
    _FP_PARTIAL,
    _MIN_GAP_M,
    _MIN_SLOT_SPACING_KM,
    _OUTSIDE_MAX_M,
    _SLOT_ANCHORS,
    _SLOT_DLAT,
    _SLOT_DLON,
    _SLOT_ORIGIN,
    _SLOT_REGION,
)

# The package's name, as before it was split into sections: log lines keep their source.
logger = logging.getLogger("evalcore.synth")


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where each item sits in its cluster's local frame (metres).

    ``tx, ty`` moves item-local coordinates into the cluster frame. ``rank`` is the
    item's position in spatial order. ``next_in_row`` is the item in the next cell to
    the right (-1: none). ``extent`` is the width and height of each cluster's cells.
    """

    tx: F64Array
    ty: F64Array
    rank: IdArray
    next_in_row: IdArray
    extent: F64Array


def _place_items(
    rng: np.random.Generator,
    item_kind: IdArray,
    item_cluster: IdArray,
    bbox: F64Array,
    fp_host: IdArray,
    n_clusters: int,
) -> _Layout:
    """Pack the cells of each cluster in rows and place every item.

    A cell is its item's bbox plus 6-30 m of padding; the item sits at a random place
    in it, at least _MIN_GAP_M / 2 from the cell's edges, so fields in different
    cells are at least _MIN_GAP_M apart. Bad-row cells are 80 m squares.
    """
    n = item_kind.size
    width, height = bbox[:, 2] - bbox[:, 0], bbox[:, 3] - bbox[:, 1]
    pad = rng.uniform(1.5 * _MIN_GAP_M, 30.0, n)
    cell_w, cell_h = width + pad, height + pad
    packed = (item_kind != _FP_OUTSIDE) & (item_kind != _FP_PARTIAL)
    left, row_y, row_h = np.zeros(n), np.zeros(n), np.zeros(n)
    next_in_row = np.full(n, -1, dtype=np.int64)
    extent = np.zeros((n_clusters, 2))
    for c in range(n_clusters):
        members = np.flatnonzero(packed & (item_cluster == c))
        x0, y0, h, nxt, extent[c] = _pack_rows(cell_w[members], cell_h[members], rng)
        left[members], row_y[members], row_h[members] = x0, y0, h
        next_in_row[members] = np.where(nxt >= 0, members[np.maximum(nxt, 0)], -1)
    # Each item sits at a random place in its cell, at least _MIN_GAP_M / 2 from the edge.
    margin = _MIN_GAP_M / 2
    x_min = left + margin + rng.random(n) * (cell_w - width - 2 * margin)
    y_min = row_y + margin + rng.random(n) * np.maximum(row_h - height - 2 * margin, 0.0)

    # False positives outside a cluster: 30 m - 1.5 km beyond one of its four sides.
    outside = np.flatnonzero(item_kind == _FP_OUTSIDE)
    side = rng.integers(0, 4, outside.size)
    away = rng.uniform(30.0, _OUTSIDE_MAX_M, outside.size)
    along = rng.random(outside.size)
    w_c, h_c = extent[item_cluster[outside]].T
    x_min[outside] = np.select(
        [side == 0, side == 1], [-away - width[outside], w_c + away], along * w_c
    )
    y_min[outside] = np.select(
        [side == 2, side == 3], [-away - height[outside], h_c + away], along * h_c
    )
    row_y[outside] = np.where(side == 2, -np.inf, np.where(side == 3, np.inf, y_min[outside]))

    tx, ty = x_min - bbox[:, 0], y_min - bbox[:, 1]
    # Partial false positives: centred near one edge of their host's bbox, so that
    # they stick out of the host across that edge.
    partial = np.flatnonzero(item_kind == _FP_PARTIAL)
    _place_partial_fps(tx, ty, bbox, partial, fp_host, _partial_fp_reach(rng, partial.size))
    row_y[partial], left[partial] = row_y[fp_host], left[fp_host]

    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((np.arange(n), left, row_y, item_cluster))] = np.arange(n)
    return _Layout(tx=tx, ty=ty, rank=rank, next_in_row=next_in_row, extent=extent)


def _partial_fp_reach(rng: np.random.Generator, n: int) -> F64Array:
    """Where ``n`` partial false positives sit on their hosts: ``(n, 2)`` offsets in host half sizes.

    One coordinate is 0.5-0.9 (towards an edge), the other -0.4-0.4, with a random sign
    and a random choice of which is which.
    """
    reach = np.column_stack([rng.uniform(0.5, 0.9, n), rng.uniform(-0.4, 0.4, n)]) * rng.choice([-1.0, 1.0], (n, 1))
    return np.where(rng.random((n, 1)) < 0.5, reach, reach[:, ::-1])


def _place_partial_fps(
    tx: F64Array, ty: F64Array, bbox: F64Array, partial: IdArray, fp_host: IdArray, reach: F64Array
) -> None:
    """Set ``tx, ty`` of the partial false positives (in place): centred at ``reach`` on their host's bbox."""
    host_box = bbox[fp_host]
    host_centre = (host_box[:, :2] + host_box[:, 2:]) / 2
    host_half_size = (host_box[:, 2:] - host_box[:, :2]) / 2
    tx[partial] = tx[fp_host] + host_centre[:, 0] + reach[:, 0] * host_half_size[:, 0]
    ty[partial] = ty[fp_host] + host_centre[:, 1] + reach[:, 1] * host_half_size[:, 1]


def _pack_rows(
    cell_w: F64Array, cell_h: F64Array, rng: np.random.Generator
) -> tuple[F64Array, F64Array, F64Array, IdArray, tuple[float, float]]:
    """Shelf-pack rectangular cells into rows of a roughly square block.

    Cells are sorted by height and cut into rows of about ``sqrt(total area)``
    width, so a row holds cells of similar height; then the cells of each row and
    the rows themselves are shuffled, and each row is shifted right at random.

    Returns
    -------
    x0, y0 : ndarray of float64, shape (n,)
        Lower-left corner of each cell, metres.
    row_height : ndarray of float64, shape (n,)
        Height of the row of each cell, metres (>= the cell's height).
    next_in_row : ndarray of int64, shape (n,)
        Position of the cell to the right in the same row, -1 for the last one.
    extent : tuple of float
        Width and height of the block, metres.
    """
    n = cell_w.size
    if n == 0:
        empty = np.zeros(0)
        return empty, empty, empty, np.zeros(0, dtype=np.int64), (0.0, 0.0)
    row_width = math.sqrt(float(np.sum(cell_w * cell_h)))
    by_height = np.argsort(-cell_h, kind="stable")
    start = np.cumsum(cell_w[by_height]) - cell_w[by_height]
    row = np.floor(start / row_width).astype(np.int64)
    shuffle = np.lexsort((rng.random(n), row))
    order, row = by_height[shuffle], _dense_rank(row[shuffle])
    w, h = cell_w[order], cell_h[order]
    first = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    offset = np.cumsum(w) - w
    x_in_row = offset - offset[first][row]
    widths, heights = np.add.reduceat(w, first), np.maximum.reduceat(h, first)
    stacking = rng.permutation(first.size)
    y_of_row = np.empty(first.size)
    y_of_row[stacking] = np.cumsum(heights[stacking]) - heights[stacking]
    x_of_row = rng.random(first.size) * (widths.max() - widths)
    x0, y0, row_height = np.empty(n), np.empty(n), np.empty(n)
    x0[order] = x_in_row + x_of_row[row]
    y0[order] = y_of_row[row]
    row_height[order] = heights[row]
    same_row_next = np.r_[row[1:] == row[:-1], False]
    next_in_row = np.full(n, -1, dtype=np.int64)
    next_in_row[order[:-1][same_row_next[:-1]]] = order[1:][same_row_next[:-1]]
    return x0, y0, row_height, next_in_row, (float(widths.max()), float(heights.sum()))


def _dense_rank(sorted_ids: IdArray) -> IdArray:
    """Map a sorted integer array to 0, 1, 2, ... keeping ties: [3, 3, 7] -> [0, 0, 1]."""
    if sorted_ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.r_[0, np.cumsum(sorted_ids[1:] != sorted_ids[:-1])].astype(np.int64)


@dataclass(frozen=True, slots=True)
class _Clusters:
    """Where each cluster's local frame sits in its UTM zone.

    A local point ``p`` goes to ``utm + R(rotation) (p - anchor)``: the anchor lands
    on the cluster's slot and local +y on true north (UTM grid north differs from
    it by up to ~2 degrees at zone edges), so grid-aligned fields face north.
    """

    epsg: IdArray
    anchor_x: F64Array
    anchor_y: F64Array
    utm_x: F64Array
    utm_y: F64Array
    rotation: F64Array  # radians, counter-clockwise


def _place_clusters(
    rng: np.random.Generator,
    layout: _Layout,
    item_cluster: IdArray,
    part_gap_m: F64Array,
    n_clusters: int,
    *,
    slots: tuple[F64Array, F64Array] | None = None,
) -> _Clusters:
    """Put each cluster on a slot of a lon/lat lattice, anchored on a single-part field.

    The lattice nodes are ``2 s`` degrees of longitude and ``1.5 s`` of latitude
    apart, with ``s`` the smallest integer that keeps clusters 10 km apart. The
    first four slots are fixed (two on UTM zone boundaries, one in zone 12, one in
    zone 14); the other slots in the region come in random order, then the rest by
    distance. The single-part field nearest the centre of the cluster is put exactly
    on the slot, so a cluster on a zone boundary has a field that crosses it.

    ``slots`` (lon, lat of each cluster, degrees, from :func:`_lattice_slots` at scale
    1) are used instead of drawn ones; the clusters must then fit the scale-1 lattice,
    which a cluster of :data:`~evalcore.synth.FIELDS_PER_CLUSTER` fields does by far
    (about 60 km across against 143 km).
    """
    max_extent_km = (float(layout.extent.max(initial=0.0)) + 2 * (_OUTSIDE_MAX_M + 1_000.0)) / 1_000.0
    scale = max(1, math.ceil((max_extent_km + 10.0) / _MIN_SLOT_SPACING_KM))
    if slots is None:
        lon, lat = _lattice_slots(rng, n_clusters, scale)
    elif scale == 1 and len(slots[0]) == n_clusters:
        lon, lat = np.asarray(slots[0], dtype=float), np.asarray(slots[1], dtype=float)
    else:  # a caller's bug, not bad input: streamed blocks are far smaller than a slot
        raise AssertionError(f"{n_clusters} clusters of {max_extent_km:.0f} km do not fit {len(slots[0])} slots of the scale-1 lattice")
    epsg = 32600 + np.floor((lon + 180.0) / 6.0).astype(np.int64) + 1
    anchor_x, anchor_y = layout.extent[:, 0] / 2, layout.extent[:, 1] / 2
    utm_x, utm_y, rotation = np.zeros(n_clusters), np.zeros(n_clusters), np.zeros(n_clusters)
    anchorable = np.flatnonzero(part_gap_m == 0)
    for c in range(n_clusters):
        to_utm = _transformer(4326, int(epsg[c]))
        (utm_x[c], north_x), (utm_y[c], north_y) = to_utm.transform([lon[c], lon[c]], [lat[c], lat[c] + 0.01])
        rotation[c] = math.atan2(-(north_x - utm_x[c]), north_y - utm_y[c])
        candidates = anchorable[item_cluster[anchorable] == c]
        if candidates.size:
            distance = np.hypot(layout.tx[candidates] - anchor_x[c], layout.ty[candidates] - anchor_y[c])
            nearest = candidates[np.argmin(distance)]
            anchor_x[c], anchor_y[c] = layout.tx[nearest], layout.ty[nearest]
    logger.debug("cluster centres (lon, lat): %s", list(zip(lon.tolist(), lat.tolist())))
    return _Clusters(epsg, anchor_x, anchor_y, utm_x, utm_y, rotation)


def _lattice_slots(rng: np.random.Generator, n_clusters: int, scale: int) -> tuple[F64Array, F64Array]:
    """Longitude and latitude of the centre of each cluster, degrees."""
    dlon, dlat = _SLOT_DLON * scale, _SLOT_DLAT * scale
    half = math.isqrt(n_clusters) + 4
    k, j = np.meshgrid(np.arange(-half, half + 1), np.arange(-half, half + 1))
    lon = _SLOT_ORIGIN[0] + dlon * k.ravel()
    lat = _SLOT_ORIGIN[1] + dlat * j.ravel()
    keep = (np.abs(lat) < 75.0) & (np.abs(lon) < 180.0)
    lon, lat = lon[keep], lat[keep]
    chosen: list[int] = []
    for a_lon, a_lat in _SLOT_ANCHORS:
        distance = np.hypot(lon - a_lon, lat - a_lat)
        distance[chosen] = np.inf
        chosen.append(int(np.argmin(distance)))
    rest = np.setdiff1d(np.arange(lon.size), chosen)
    lon_min, lat_min, lon_max, lat_max = _SLOT_REGION
    inside = (lon[rest] >= lon_min) & (lon[rest] <= lon_max) & (lat[rest] >= lat_min) & (lat[rest] <= lat_max)
    outside = rest[~inside]
    distance = np.hypot(lon[outside] - (lon_min + lon_max) / 2, lat[outside] - (lat_min + lat_max) / 2)
    far = outside[np.argsort(distance, kind="stable")]
    order = np.concatenate([chosen, rng.permutation(rest[inside]), far])[:n_clusters]
    return lon[order], lat[order]


@functools.lru_cache(maxsize=64)
def _transformer(source: int | str, target: int | str) -> pyproj.Transformer:
    """A lon/lat-order transformer between two CRSs, built once per pair (building one takes ~20 ms)."""
    return pyproj.Transformer.from_crs(source, target, always_xy=True)

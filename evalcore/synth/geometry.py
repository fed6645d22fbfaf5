"""Geometry: shapely geometries from rings and layout, bad rows, repairs, and reprojection.

Each cluster is built in local metres and reprojected from the UTM zone of its centre
to the layer's CRS (:func:`_reproject`).
"""

from __future__ import annotations

import math

import numpy as np
import shapely

from evalcore._typing import BoolArray, F64Array, GeomArray, IdArray
from evalcore.synth.constants import _CHUNK_ITEMS, BAD_ROW_KINDS
from evalcore.synth.layout import _Clusters, _dense_rank, _transformer
from evalcore.synth.shapes import _following_vertex, _Rings


def _item_geoms(
    rings: _Rings,
    keep: BoolArray,
    tx: F64Array,
    ty: F64Array,
    *,
    densify_m: float | None = None,
    jitter_sigma_m: F64Array | None = None,
    rng: np.random.Generator | None = None,
) -> GeomArray:
    """Polygons (multipolygons for two-part items) of the kept items, in item order.

    Parameters
    ----------
    rings : _Rings
        Rings of all shaped items, item-local metres.
    keep : ndarray of bool, shape (n_shaped,)
        Items to build.
    tx, ty : ndarray of float64, shape (n_shaped,)
        Translation of each item into the cluster frame, metres.
    densify_m : float, optional
        Split edges longer than this, metres.
    jitter_sigma_m : ndarray of float64, shape (n_shaped,), optional
        Standard deviation of the radial jitter of each item's vertices, metres.
        A vertex moves along the ray from its ring's centre by at most 1.5 sigma
        and at most 10 % of its distance to the centre, so a star-shaped ring stays
        simple and parts and holes (>= 8 m apart) never touch.
    rng : numpy.random.Generator, optional
        Needed with ``jitter_sigma_m``.

    Returns
    -------
    ndarray of object, shape (keep.sum(),)
        Polygons and multipolygons in the cluster frame, metres.
    """
    out = np.empty(int(keep.sum()), dtype=object)
    n_done = 0
    # Work on slices of _CHUNK_ITEMS items to bound the memory of vertex temporaries.
    for first in range(0, keep.size, _CHUNK_ITEMS):
        last = min(first + _CHUNK_ITEMS, keep.size)
        n_kept = int(np.count_nonzero(keep[first:last]))
        if n_kept == 0:
            continue
        r0, r1 = rings.item_first_ring[first], rings.item_first_ring[last]
        v0, v1 = rings.ring_first_vertex[r0], rings.ring_first_vertex[r1]
        ring_keep = keep[rings.ring_item[r0:r1]]
        vertex_keep = ring_keep[rings.vertex_ring[v0:v1] - r0]
        x, y = rings.x[v0:v1][vertex_keep], rings.y[v0:v1][vertex_keep]
        vertex_ring = rings.vertex_ring[v0:v1][vertex_keep]
        if densify_m is not None:
            x, y, vertex_ring = _densify(x, y, vertex_ring, densify_m)
        item_of_vertex = rings.ring_item[vertex_ring]
        if jitter_sigma_m is not None:
            dx, dy = x - rings.ring_cx[vertex_ring], y - rings.ring_cy[vertex_ring]
            distance = np.hypot(dx, dy)
            sigma = jitter_sigma_m[item_of_vertex]
            limit = np.minimum(1.5 * sigma, 0.1 * distance)
            step = np.clip(rng.normal(0.0, 1.0, x.size) * sigma, -limit, limit) / distance
            x, y = x + dx * step, y + dy * step
        x, y = x + tx[item_of_vertex], y + ty[item_of_vertex]
        p0, p1 = rings.ring_poly[r0], rings.ring_poly[r1 - 1] + 1
        poly_item = rings.poly_item[p0:p1]
        out[n_done : n_done + n_kept] = _assemble(
            x,
            y,
            _dense_rank(vertex_ring),
            _dense_rank(rings.ring_poly[r0:r1][ring_keep]),
            _dense_rank(poly_item[keep[poly_item]]),
            n_kept,
        )
        n_done += n_kept
    return out


def _densify(
    x: F64Array, y: F64Array, vertex_ring: IdArray, max_edge_m: float
) -> tuple[F64Array, F64Array, IdArray]:
    """Split the edges of unclosed rings into equal pieces of at most ``max_edge_m``."""
    following = _following_vertex(vertex_ring)
    dx, dy = x[following] - x, y[following] - y
    n_pieces = np.maximum(1, np.ceil(np.hypot(dx, dy) / max_edge_m)).astype(np.int64)
    source = np.repeat(np.arange(x.size), n_pieces)
    t = (np.arange(source.size) - np.repeat(np.cumsum(n_pieces) - n_pieces, n_pieces)) / n_pieces[source]
    return x[source] + t * dx[source], y[source] + t * dy[source], vertex_ring[source]


def _assemble(
    x: F64Array, y: F64Array, vertex_ring: IdArray, ring_poly: IdArray, poly_item: IdArray, n_items: int
) -> GeomArray:
    """Build geometries from dense, sorted ring, polygon and item indices.

    The first ring of a polygon is its shell, the others its holes; an item with
    more than one polygon becomes a multipolygon.
    """
    out = np.full(n_items, None, dtype=object)
    if x.size == 0:
        return out
    ring_geoms = shapely.linearrings(np.column_stack([x, y]), indices=vertex_ring)
    polys = shapely.polygons(ring_geoms, indices=ring_poly)
    n_parts = np.bincount(poly_item, minlength=n_items)
    single = n_parts[poly_item] == 1
    out[poly_item[single]] = polys[single]
    if not single.all():
        multi_item = poly_item[~single]
        out[np.unique(multi_item)] = shapely.multipolygons(polys[~single], indices=_dense_rank(multi_item))
    return out


def _bad_geoms(tx: F64Array, ty: F64Array, is_bad: BoolArray) -> GeomArray:
    """One geometry of each kind in BAD_ROW_KINDS, centred on the bad items' cells."""
    cells = np.flatnonzero(is_bad)
    out = np.full(cells.size, None, dtype=object)
    for k, cell in enumerate(cells):
        kind = BAD_ROW_KINDS[k]
        x, y = float(tx[cell]), float(ty[cell])
        out[k] = {
            "null": None,
            "empty": shapely.Polygon(),
            "point": shapely.Point(x, y),
            "linestring": shapely.LineString([(x - 30, y - 10), (x + 30, y + 10)]),
            "bowtie": shapely.Polygon([(x - 30, y - 30), (x + 30, y + 30), (x + 30, y - 30), (x - 30, y + 30)]),
            # Back and forth between two points: zero area in any CRS.
            "zero_area": shapely.Polygon([(x - 30, y), (x + 30, y), (x - 30, y), (x + 30, y)]),
        }[kind]
    return out


def _offset(geoms: GeomArray, dx: F64Array, dy: F64Array) -> GeomArray:
    """Move each geometry by its own ``(dx, dy)``; returns new geometries."""
    xy, index = shapely.get_coordinates(geoms, return_index=True)
    xy += np.column_stack([dx[index], dy[index]])
    return shapely.set_coordinates(geoms.copy(), xy)


def _scale_about_centroid(geoms: GeomArray, factor: F64Array) -> GeomArray:
    """Scale each (non-empty) geometry about its centroid by its own factor."""
    centre = shapely.get_coordinates(shapely.centroid(geoms))
    xy, index = shapely.get_coordinates(geoms, return_index=True)
    xy = centre[index] + factor[index, None] * (xy - centre[index])
    return shapely.set_coordinates(geoms.copy(), xy)


def _polygonal(geoms: GeomArray) -> GeomArray:
    """Keep only the polygons of geometry collections (e.g. from an intersection)."""
    type_id = shapely.get_type_id(geoms)
    odd = np.flatnonzero((type_id != 3) & (type_id != 6) & (type_id != -1))
    if odd.size == 0:
        return geoms
    out = geoms.copy()
    for k in odd:  # rare: only where a cut line grazes a vertex
        polys = [p for p in shapely.get_parts(geoms[k]) if p.geom_type == "Polygon"]
        out[k] = polys[0] if len(polys) == 1 else shapely.MultiPolygon(polys)
    return out


def _repair(geoms: GeomArray, where: BoolArray) -> GeomArray:
    """Make the invalid geometries among ``geoms[where]`` valid, keeping their polygons."""
    broken = np.flatnonzero(where & ~shapely.is_valid(geoms) & ~shapely.is_missing(geoms))
    if broken.size == 0:
        return geoms
    out = geoms.copy()
    out[broken] = _polygonal(shapely.make_valid(geoms[broken]))
    return out

def _reproject(geoms: GeomArray, cluster: IdArray, clusters: _Clusters, crs: str) -> GeomArray:
    """Move cluster-local geometries into their UTM zone and transform them to ``crs``."""
    out = geoms.copy()
    for c in np.unique(cluster):
        members = np.flatnonzero(cluster == c)
        transformer = _transformer(int(clusters.epsg[c]), crs)
        cos, sin = math.cos(clusters.rotation[c]), math.sin(clusters.rotation[c])
        anchor = (float(clusters.anchor_x[c]), float(clusters.anchor_y[c]))
        utm = (float(clusters.utm_x[c]), float(clusters.utm_y[c]))

        def to_crs(xy: F64Array, transformer=transformer, cos=cos, sin=sin, anchor=anchor, utm=utm) -> F64Array:
            x, y = xy[:, 0] - anchor[0], xy[:, 1] - anchor[1]
            return np.column_stack(transformer.transform(utm[0] + cos * x - sin * y, utm[1] + sin * x + cos * y))

        out[members] = shapely.transform(geoms[members], to_crs)
    return out

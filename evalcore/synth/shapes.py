"""Items and shapes: the parameters of every item's shape and its rings in item-local metres.

An item is anything that occupies space in a cluster (a field, a false positive, a
bad-row cell). :class:`_Shapes` holds the drawn shape parameters, :class:`_Rings` the
vertex arrays built from them; the layout (:mod:`evalcore.synth.layout`) places the
items and the geometry section (:mod:`evalcore.synth.geometry`) turns rings into
shapely geometries.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from evalcore._typing import F64Array, IdArray
from evalcore.synth.constants import (
    _FIELD_AREA_SIGMA,
    _HA_M2,
    _IRREGULAR,
    _MAX_FIELD_HA,
    _MEDIAN_FIELD_HA,
    _MIN_FIELD_HA,
    _MISS,
    _PIVOT,
    _RECT,
)


@dataclass(frozen=True, slots=True)
class _Shapes:
    """Parameters of item shapes, one entry per item with a shape.

    ``area_m2`` is the net area (outer minus hole). ``aspect`` is length over width
    (x over y before rotation). ``theta`` is the rotation, radians. ``hole_frac`` is
    the hole's share of the outer ring area (0: no hole). ``part_gap_m`` is the width
    of the gap between the two parts of a multipolygon (0: single part).
    """

    kind: IdArray
    area_m2: F64Array
    aspect: F64Array
    theta: F64Array
    hole_frac: F64Array
    part_gap_m: F64Array
    n_vertices: IdArray

    @staticmethod
    def concat(parts: list[_Shapes]) -> _Shapes:
        return _Shapes(*(np.concatenate([getattr(p, f) for p in parts]) for f in _Shapes.__slots__))


@dataclass(frozen=True, slots=True)
class _Rings:
    """Rings of all shaped items, in item-local coordinates (metres, origin at the shape centre).

    Vertices are grouped by ring, rings by polygon and polygons by item, all in
    increasing order. Rings are not closed (the last vertex is not repeated).
    ``ring_cx``, ``ring_cy`` is a point from which the ring is star-shaped.
    ``item_first_ring`` (n_items + 1) and ``ring_first_vertex`` (n_rings + 1) give
    the slices of rings and vertices of each item and ring.
    """

    x: F64Array
    y: F64Array
    vertex_ring: IdArray
    ring_poly: IdArray
    ring_item: IdArray
    ring_cx: F64Array
    ring_cy: F64Array
    poly_item: IdArray
    item_first_ring: IdArray
    ring_first_vertex: IdArray


def _check_count(name: str, value: object, *, minimum: int) -> int:
    """Return ``value`` as an int, or raise if it is not an integer >= ``minimum``."""
    try:
        count = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, but got {value!r}.") from None
    if count < minimum:
        raise ValueError(f"{name} must be >= {minimum}, but got {count}.")
    return count


def _field_clusters(rng: np.random.Generator, n_ref: int, n_clusters: int) -> IdArray:
    """Cluster of each field, sorted; every cluster gets a field while there are enough."""
    n_sure = min(n_ref, n_clusters)
    weights = rng.uniform(0.6, 1.4, n_clusters)
    sizes = np.zeros(n_clusters, dtype=np.int64)
    sizes[:n_sure] = 1
    sizes += rng.multinomial(n_ref - n_sure, weights / weights.sum())
    return np.repeat(np.arange(n_clusters), sizes)


def _partial_fp_hosts(rng: np.random.Generator, outcome: IdArray, n_fp_partial: int) -> IdArray:
    """Distinct fields that the partly overlapping false positives sit on, missed ones first.

    On a missed field the false positive is a poor detection that overlaps no other
    prediction; only when there are too few missed fields do other fields host one.
    """
    missed, other = np.flatnonzero(outcome == _MISS), np.flatnonzero(outcome != _MISS)
    n_missed = min(n_fp_partial, missed.size)
    hosts = np.concatenate(
        [
            rng.choice(missed, n_missed, replace=False),
            rng.choice(other, n_fp_partial - n_missed, replace=False),
        ]
    )
    return np.sort(hosts).astype(np.int64)


def _sample_field_shapes(rng: np.random.Generator, n: int) -> _Shapes:
    """Area, shape kind and shape parameters of ``n`` reference fields."""
    area_ha = np.clip(
        rng.lognormal(math.log(_MEDIAN_FIELD_HA), _FIELD_AREA_SIGMA, n), _MIN_FIELD_HA, _MAX_FIELD_HA
    )
    p_pivot = np.where(area_ha >= 10.0, 0.30, np.where(area_ha >= 3.0, 0.12, 0.03))
    u = rng.random(n)
    kind = np.where(u < p_pivot, _PIVOT, np.where(u < p_pivot + 0.25, _IRREGULAR, _RECT))
    aspect = np.where(
        kind == _RECT, 1.0 + 3.0 * rng.random(n) ** 2, np.where(kind == _IRREGULAR, rng.uniform(1.0, 1.5, n), 1.0)
    )
    # Most rectangles follow the survey grid (0 or 90 degrees, +-2); the rest any angle.
    on_grid = rng.random(n) < 0.65
    theta = np.where(
        on_grid,
        rng.integers(0, 2, n) * (np.pi / 2) + np.deg2rad(rng.uniform(-2.0, 2.0, n)),
        rng.uniform(0.0, np.pi, n),
    )
    theta = np.where(kind == _PIVOT, 0.0, np.where(kind == _IRREGULAR, rng.uniform(0.0, 2 * np.pi, n), theta))
    big = area_ha >= 2.0
    hole = big & (kind != _PIVOT) & (rng.random(n) < 0.06)
    hole_frac = np.where(hole, rng.uniform(0.015, 0.05, n), 0.0)
    multi = big & (kind == _RECT) & ~hole & (rng.random(n) < 0.05)
    part_gap_m = np.where(multi, rng.uniform(8.0, 20.0, n), 0.0)
    n_vertices = np.where(
        kind == _PIVOT, rng.integers(32, 65, n), np.where(kind == _IRREGULAR, rng.integers(6, 13, n), 4)
    )
    return _Shapes(kind, area_ha * _HA_M2, aspect, theta, hole_frac, part_gap_m, n_vertices.astype(np.int64))


def _sample_fp_shapes(rng: np.random.Generator, n: int) -> _Shapes:
    """Shapes of false positives that overlap no field: 0.1-20 ha rectangles or blobs."""
    area_ha = np.clip(rng.lognormal(0.0, 0.8, n), 0.1, 20.0)
    kind = np.where(rng.random(n) < 0.5, _RECT, _IRREGULAR)
    n_vertices = np.where(kind == _RECT, 4, rng.integers(6, 13, n)).astype(np.int64)
    zeros = np.zeros(n)
    return _Shapes(
        kind, area_ha * _HA_M2, rng.uniform(1.0, 2.5, n), rng.uniform(0, np.pi, n), zeros, zeros, n_vertices
    )


def _sample_partial_fp_shapes(rng: np.random.Generator, fields: _Shapes, host: IdArray) -> _Shapes:
    """Shapes of false positives that partly cover a field: rectangles of 10-40 % of its area."""
    n = host.size
    zeros = np.zeros(n)
    return _Shapes(
        np.full(n, _RECT),
        fields.area_m2[host] * rng.uniform(0.1, 0.4, n),
        rng.uniform(1.0, 2.0, n),
        fields.theta[host],
        zeros,
        zeros,
        np.full(n, 4, dtype=np.int64),
    )


def _make_rings(rng: np.random.Generator, shapes: _Shapes) -> _Rings:
    """Vertices of every ring of every shape, vectorised over all rings at once.

    Every ring is a star-shaped polygon around its centre: ``k`` vertices at angles
    ``phase + 2 pi (j + da_j) / k`` and radii ``rho (1 + dr_j)``, scaled by
    ``(sx, sy)`` to its target area and aspect, moved by ``(ox, oy)`` and rotated
    by the shape's ``theta``. A rectangle is a unit square (k=4, rho=sqrt(1/2),
    phase=pi/4); a pivot a regular k-gon; an irregular field has angle and radius
    jitter; a hole is a slightly irregular 12-gon.
    """
    n_items = shapes.kind.size
    has_hole = shapes.hole_frac > 0
    is_multi = shapes.part_gap_m > 0
    n_rings_of_item = 1 + has_hole + is_multi
    ring_item = np.repeat(np.arange(n_items), n_rings_of_item)
    ring_rank = np.arange(ring_item.size) - np.repeat(np.cumsum(n_rings_of_item) - n_rings_of_item, n_rings_of_item)
    second = ring_rank == 1
    is_hole = second & has_hole[ring_item]
    is_part2 = second & is_multi[ring_item]
    n_polys_of_item = 1 + is_multi
    poly_item = np.repeat(np.arange(n_items), n_polys_of_item)
    ring_poly = (np.cumsum(n_polys_of_item) - n_polys_of_item)[ring_item] + is_part2
    n_rings = ring_item.size

    kind = shapes.kind[ring_item]
    area = shapes.area_m2[ring_item]
    aspect = shapes.aspect[ring_item]
    hole_frac = shapes.hole_frac[ring_item]
    gap = shapes.part_gap_m[ring_item]
    outer_area = area / (1.0 - hole_frac)
    is_rect = (kind == _RECT) & ~is_hole
    is_irregular = (kind == _IRREGULAR) & ~is_hole
    multi_ring = is_multi[ring_item]

    n_vertices = np.where(is_hole, 12, shapes.n_vertices[ring_item])
    phase = np.where(is_rect, np.pi / 4, rng.uniform(0.0, 2 * np.pi, n_rings))
    rho = np.where(is_rect, math.sqrt(0.5), 1.0)
    angle_jitter = np.where(is_irregular, 0.3, 0.0)
    radius_jitter = np.where(is_irregular, 0.2, np.where(is_hole, 0.1, 0.0))

    # Target area and aspect of each ring. The parts of a multipolygon are the two
    # halves of a rectangle of height h = sqrt(A / aspect), with a gap between them.
    short_side = np.sqrt(area / aspect)
    target = np.where(is_hole, hole_frac * outer_area, np.where(multi_ring, area / 2, outer_area))
    ring_aspect = np.where(is_hole, 1.0, np.where(multi_ring, aspect / 2, aspect))
    part_sign = np.where(is_part2, 1.0, -1.0)
    ox = np.where(multi_ring, part_sign * (area / short_side / 4 + gap / 2), 0.0)
    # A hole in a rectangle may sit off centre along the long side.
    outer_short = np.sqrt(outer_area / aspect)
    hole_r = np.sqrt(target / np.pi)
    room = np.maximum(0.0, aspect * outer_short / 2 - hole_r - 0.2 * outer_short) * 0.5
    ox = np.where(is_hole & (kind == _RECT), rng.uniform(-1.0, 1.0, n_rings) * room, ox)
    oy = np.zeros(n_rings)

    vertex_ring = np.repeat(np.arange(n_rings), n_vertices)
    j = np.arange(vertex_ring.size) - np.repeat(np.cumsum(n_vertices) - n_vertices, n_vertices)
    da = rng.uniform(-1.0, 1.0, vertex_ring.size) * angle_jitter[vertex_ring]
    dr = rng.uniform(-1.0, 1.0, vertex_ring.size) * radius_jitter[vertex_ring]
    angle = phase[vertex_ring] + 2 * np.pi * (j + da) / n_vertices[vertex_ring]
    radius = rho[vertex_ring] * (1.0 + dr)
    ux, uy = radius * np.cos(angle), radius * np.sin(angle)

    unit_area = _ring_areas(ux, uy, vertex_ring, n_rings)
    sy = np.sqrt(target / (unit_area * ring_aspect))
    sx = ring_aspect * sy
    x = ux * sx[vertex_ring] + ox[vertex_ring]
    y = uy * sy[vertex_ring] + oy[vertex_ring]
    theta = shapes.theta[ring_item]
    cos_t, sin_t = np.cos(theta), np.sin(theta)
    cv, sv = cos_t[vertex_ring], sin_t[vertex_ring]
    return _Rings(
        x=x * cv - y * sv,
        y=x * sv + y * cv,
        vertex_ring=vertex_ring,
        ring_poly=ring_poly,
        ring_item=ring_item,
        ring_cx=ox * cos_t - oy * sin_t,
        ring_cy=ox * sin_t + oy * cos_t,
        poly_item=poly_item,
        item_first_ring=np.r_[0, np.cumsum(n_rings_of_item)],
        ring_first_vertex=np.r_[0, np.cumsum(n_vertices)],
    )


def _ring_areas(x: F64Array, y: F64Array, vertex_ring: IdArray, n_rings: int) -> F64Array:
    """Absolute shoelace area of each unclosed ring, in squared input units."""
    following = _following_vertex(vertex_ring)
    cross = x * y[following] - x[following] * y
    return np.abs(np.bincount(vertex_ring, weights=cross, minlength=n_rings)) / 2


def _following_vertex(vertex_ring: IdArray) -> IdArray:
    """Index of the next vertex of the same (unclosed) ring, wrapping to its first vertex."""
    n = vertex_ring.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    is_first = np.r_[True, vertex_ring[1:] != vertex_ring[:-1]]
    is_last = np.r_[vertex_ring[1:] != vertex_ring[:-1], True]
    first_of_ring = np.maximum.accumulate(np.where(is_first, np.arange(n), 0))
    return np.where(is_last, first_of_ring, np.arange(1, n + 1))


def _item_bounds(rings: _Rings, n_items: int) -> F64Array:
    """``(n_items, 4)`` array of xmin, ymin, xmax, ymax of each item, item-local metres."""
    if n_items == 0:
        return np.zeros((0, 4))
    starts = rings.ring_first_vertex[rings.item_first_ring[:-1]]
    return np.column_stack(
        [
            np.minimum.reduceat(rings.x, starts),
            np.minimum.reduceat(rings.y, starts),
            np.maximum.reduceat(rings.x, starts),
            np.maximum.reduceat(rings.y, starts),
        ]
    )

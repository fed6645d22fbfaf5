"""Flat ring arrays: polygon geometries as coordinates plus offsets, for the numba kernels.

Both kernel families (:mod:`evalcore._kernels` for boundaries,
:mod:`evalcore._area_kernels` for intersection areas) take geometry in this form:
``x, y`` hold every ring, ring after ring, each closed as shapely returns it;
``ring_off[r]:ring_off[r + 1]`` are ring ``r``'s coordinates; ``geom_off[g]:geom_off[g + 1]``
are geometry ``g``'s rings (all rings of all parts, each part's exterior first);
``ring_ext[r]`` says whether ring ``r`` is an exterior.
"""

from __future__ import annotations

import numpy as np
import shapely

from evalcore._typing import F64Array, GeomArray, IdArray

__all__ = ["flatten_rings"]

_POLYGON = int(shapely.GeometryType.POLYGON)


def flatten_rings(geoms: GeomArray) -> tuple[F64Array, F64Array, IdArray, np.ndarray, IdArray]:
    """Ring coordinates of every geometry, with ring and geometry offsets.

    Missing and empty geometries get no ring.

    Returns
    -------
    x, y : float64 (n_coords,)
    ring_off : int64 (n_rings + 1,)
    ring_ext : bool (n_rings,)
        True for the exterior (first) ring of each polygon part.
    geom_off : int64 (len(geoms) + 1,)

    Examples
    --------
    >>> from shapely.geometry import box
    >>> x, y, ring_off, ring_ext, geom_off = flatten_rings(np.array([box(0, 0, 1, 1), None]))
    >>> ring_off.tolist(), ring_ext.tolist(), geom_off.tolist()
    ([0, 5], [True], [0, 1, 1])
    """
    geoms = np.asarray(geoms, dtype=object)
    # get_coordinates walks each geometry part by part, exterior ring first, like
    # get_parts + get_rings, without copying parts and rings; only geometries with more
    # than one ring (holes, multipolygons: a minority) need those copies to count rings.
    coords = shapely.get_coordinates(geoms)
    simple = (shapely.get_type_id(geoms) == _POLYGON) & (shapely.get_num_interior_rings(geoms) == 0)
    simple &= ~shapely.is_empty(geoms)
    rings_per_geom = np.ones(len(geoms), dtype=np.int64)
    per_simple = shapely.get_num_coordinates(geoms).astype(np.int64)
    ext = np.ones(0, dtype=np.bool_)
    counts = np.zeros(0, dtype=np.int64)
    other = np.flatnonzero(~simple)
    if len(other):
        parts, part_geom = shapely.get_parts(geoms[other], return_index=True)
        rings, ring_part = shapely.get_rings(parts, return_index=True)
        rings_per_geom[other] = np.bincount(part_geom[ring_part], minlength=len(other))
        ext = np.ones(len(rings), dtype=np.bool_)
        ext[1:] = ring_part[1:] != ring_part[:-1]
        counts = shapely.get_num_coordinates(rings).astype(np.int64)
    geom_off = np.zeros(len(geoms) + 1, dtype=np.int64)
    np.cumsum(rings_per_geom, out=geom_off[1:])
    of_other = np.repeat(~simple, rings_per_geom)
    per_ring = np.empty(geom_off[-1], dtype=np.int64)
    per_ring[~of_other] = per_simple[simple]
    per_ring[of_other] = counts
    ring_ext = np.ones(geom_off[-1], dtype=np.bool_)
    ring_ext[of_other] = ext
    ring_off = np.zeros(geom_off[-1] + 1, dtype=np.int64)
    np.cumsum(per_ring, out=ring_off[1:])
    x = np.ascontiguousarray(coords[:, 0], dtype=np.float64)
    y = np.ascontiguousarray(coords[:, 1], dtype=np.float64)
    return x, y, ring_off, ring_ext, geom_off

"""Flat ring arrays: polygon geometries as coordinates plus offsets, for the numba kernels.

Both kernel families (:mod:`evalcore._kernels` for boundaries,
:mod:`evalcore._area_kernels` for intersection areas) take geometry in this form:
``x, y`` hold every ring, ring after ring, each closed as shapely returns it;
``ring_off[r]:ring_off[r + 1]`` are ring ``r``'s coordinates; ``geom_off[g]:geom_off[g + 1]``
are geometry ``g``'s rings (all rings of all parts, each part's exterior first);
``ring_ext[r]`` says whether ring ``r`` is an exterior.

:class:`Rings` holds the five arrays as one value: made from shapely geometries
(:func:`flatten_rings`) or straight from their WKB (:meth:`Rings.from_wkb`, without
building a geometry: the pairs phase's boundaries are read that way), taken by rows and
joined as the layers that carry them are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import shapely

from evalcore._typing import F64Array, GeomArray, IdArray

__all__ = ["Rings", "flatten_rings"]

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


@dataclass(frozen=True, slots=True)
class Rings:
    """Polygons as flat rings, one value (the arrays of :func:`flatten_rings`).

    Attributes
    ----------
    x, y : ndarray of float64, shape (n_coords,)
    ring_off : ndarray of int64, shape (n_rings + 1,)
    ring_ext : ndarray of bool, shape (n_rings,)
    geom_off : ndarray of int64, shape (n_geoms + 1,)
        Geometry ``g`` owns rings ``geom_off[g]:geom_off[g + 1]``; a missing or empty
        geometry owns none.

    Examples
    --------
    >>> from shapely.geometry import box
    >>> rings = Rings.of(np.array([box(0, 0, 1, 1), None, box(2, 0, 3, 1)]))
    >>> len(rings), rings.take(np.array([2, 1])).geom_off.tolist()
    (3, [0, 1, 1])
    """

    x: F64Array
    y: F64Array
    ring_off: IdArray
    ring_ext: np.ndarray
    geom_off: IdArray

    def __len__(self) -> int:
        return len(self.geom_off) - 1

    @classmethod
    def of(cls, geoms: GeomArray) -> Rings:
        """The rings of shapely geometries (:func:`flatten_rings`)."""
        return cls(*flatten_rings(geoms))

    @classmethod
    def from_wkb(cls, values: pa.Array | pa.ChunkedArray) -> Rings:
        """The rings of a WKB column, read from its bytes without building geometries.

        Two-dimensional little-endian Polygons and MultiPolygons (what shapely writes for
        prepared rows) are read by a numba kernel (:func:`evalcore._wkb_kernels._wkb_rings`);
        a column with anything else, or with nulls, is decoded by GEOS instead. Either
        way the arrays are those of :meth:`of` on the decoded geometries.
        """
        from evalcore._wkb_kernels import _wkb_rings
        from evalcore.arrays import binary_buffers

        column = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        if column.null_count == 0 and (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
            ok, x, y, ring_off, ring_ext, geom_off = _wkb_rings(*binary_buffers(column))
            if ok:
                return cls(x, y, ring_off, ring_ext, geom_off)
        return cls.of(shapely.from_wkb(column.to_numpy(zero_copy_only=False)))

    def take(self, rows: IdArray) -> Rings:
        """The rings of the given geometries, in the order of ``rows`` (repeats allowed)."""
        from evalcore._kernels import _take_rings

        return Rings(*_take_rings(self.x, self.y, self.ring_off, self.ring_ext, self.geom_off,
                                  np.ascontiguousarray(rows, dtype=np.int64)))

    @staticmethod
    def concat(parts: list[Rings]) -> Rings:
        """The geometries of every part, part after part."""
        if not parts:
            return Rings.of(np.empty(0, dtype=object))
        ring_base = np.cumsum([0] + [len(p.ring_off) - 1 for p in parts])
        coord_base = np.cumsum([0] + [len(p.x) for p in parts])
        return Rings(
            np.concatenate([p.x for p in parts]),
            np.concatenate([p.y for p in parts]),
            np.concatenate([np.zeros(1, dtype=np.int64)] + [p.ring_off[1:] + coord_base[k] for k, p in enumerate(parts)]),
            np.concatenate([p.ring_ext for p in parts]),
            np.concatenate([np.zeros(1, dtype=np.int64)] + [p.geom_off[1:] + ring_base[k] for k, p in enumerate(parts)]),
        )

    def lengths(self) -> F64Array:
        """Boundary length of each geometry (all rings of all parts), in coordinate units:
        the same bits as ``shapely.length`` of the geometries (:func:`evalcore._kernels._geometry_lengths`)."""
        from evalcore._kernels import _geometry_lengths

        return _geometry_lengths(self.x, self.y, self.ring_off, self.ring_ext, self.geom_off)

    def to_wkb(self, types: IdArray) -> pa.BinaryArray | pa.LargeBinaryArray:
        """The geometries as 2D little-endian WKB, byte for byte what ``shapely.to_wkb`` writes.

        Parameters
        ----------
        types : ndarray of int64, shape (len(self),)
            shapely's type id of each geometry (3 Polygon, 6 MultiPolygon): flat rings do
            not tell a one-part MultiPolygon from a Polygon.

        Returns
        -------
        pyarrow.BinaryArray, or LargeBinaryArray past 2 GiB of bytes (a binary array's
        offsets are 32-bit; casting it down would fail).
        """
        from evalcore._wkb_kernels import _rings_wkb

        types = np.ascontiguousarray(types, dtype=np.int64)
        if len(types) != len(self):
            raise ValueError(f"Rings.to_wkb: {len(types)} types for {len(self)} geometries")
        ok, data, offsets = _rings_wkb(self.x, self.y, self.ring_off, self.ring_ext, self.geom_off, types)
        if not ok:
            raise ValueError("Rings.to_wkb: a geometry is neither a Polygon nor a MultiPolygon, or a Polygon has several parts")
        if offsets[-1] > np.iinfo(np.int32).max:  # past a binary array's 32-bit offsets
            return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(self), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        return pa.BinaryArray.from_buffers(pa.binary(), len(self), [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])

"""The prepared layer: the value every phase after preparation reads (SPEC section 2).

A :class:`PreparedLayer` is arrays aligned row by row, with the input position of every
kept row so that every tie-break can be made by position. It is built by
:func:`evalcore.prepare.prepare_layer`; this module holds the type alone so that the
phases that read it (pairs, boundary distances, the engine, storage) need not import the
pipeline that makes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import shapely
from pyproj import CRS

from evalcore._typing import F64Array, GeomArray, IdArray
from evalcore.rings import Rings

__all__ = ["PreparedLayer", "empty_layer", "home_geometries", "utm_rings"]


@dataclass(frozen=True, slots=True)
class PreparedLayer:
    """One layer after preparation; every array has one entry per kept row.

    Attributes
    ----------
    name : str
        ``"reference"`` or ``"predicted"``, used in messages.
    positions : ndarray of int64
        Input row position (0-based, counting dropped rows) of each kept row, increasing.
    labels : pandas.Index
        Input index label of each kept row.
    crs : pyproj.CRS or None
        The layer's source CRS (None only for an empty layer).
    geoms_source : ndarray of shapely geometries
        Repaired polygonal geometry, two-dimensional, in the source CRS.
    geoms_ea : ndarray of shapely geometries
        Geometry in the equal-area CRS (edges split at 50 m before reprojection).
    area_m2 : ndarray of float64
        Area in the equal-area CRS, square metres.
    lon, lat : ndarray of float64
        Centroid (taken in the equal-area CRS) in degrees.
    utm_epsg : ndarray of int64
        EPSG code of the home WGS 84 / UTM zone.
    geoms_utm : ndarray of shapely geometries
        Geometry reprojected from ``geoms_source`` into its home zone, metres.
    perimeter_m : ndarray of float64
        Boundary length (all rings of all parts) in the home zone, metres.
    partition_x, partition_y : ndarray of int64
        Partition tile of the centroid in the home zone's metres (the work).
    tile_x, tile_y : ndarray of int64
        Reporting tile of the centroid in the home zone's metres (SPEC 6.3).
    aoi : ndarray of int64
        Index of the first AOI containing the equal-area centroid (-1: none).
    annotated_fraction : ndarray of float64
        Share of the area inside the annotated area (NaN: not measured).
    score : ndarray of float64
        Confidence score of each row (NaN without a score column).
    n_input, n_dropped, n_repaired : int
        Rows read, rows excluded by SPEC 2 (null, empty, non-polygonal, zero area) and
        rows repaired that SPEC 2 kept.
    equal_area_crs : pyproj.CRS
    partition_size_m : float
    class_value : ndarray of object, optional
        Class of each row as ``str`` (None where null; SPEC 6.10), or None without a
        class column.
    n_outside_study_area : int
        Rows SPEC 2 kept that the study area's rule left out (:mod:`evalcore.study`).
    n_within_training_buffer : int
        Rows the study area kept that lie within the leakage buffer of the training
        area; they are among the rows unless the run excludes them.
    candidate_box : ndarray of float64, shape (n, 4), optional
        Each row's equal-area candidate box, :func:`evalcore.boundary.candidate_boxes`,
        when it was already made (read back with a prepared partition, whose source
        geometry the pairs phase may then leave undecoded); None to make it from the
        geometries when asked.
    rings_utm : Rings, optional
        The home-zone geometry as flat rings, when it was read that way
        (:meth:`evalcore.rings.Rings.from_wkb`: the pairs phase measures boundaries on
        them and builds no shapely geometry); ``geoms_utm`` then holds None. None when
        ``geoms_utm`` holds the geometry (:func:`utm_rings` flattens it when asked).
    rings_ea : Rings, optional
        The equal-area geometry as flat rings besides ``geoms_ea``, when it was read
        that way too (the pairs phase's intersection areas take them; the geometries
        serve GEOS's predicates). None otherwise.
    """

    name: str
    positions: IdArray
    labels: pd.Index
    crs: CRS | None
    geoms_source: GeomArray
    geoms_ea: GeomArray
    area_m2: F64Array
    lon: F64Array
    lat: F64Array
    utm_epsg: IdArray
    geoms_utm: GeomArray
    perimeter_m: F64Array
    partition_x: IdArray
    partition_y: IdArray
    tile_x: IdArray
    tile_y: IdArray
    aoi: IdArray
    annotated_fraction: F64Array
    score: F64Array
    n_input: int
    n_dropped: int
    n_repaired: int
    equal_area_crs: CRS
    partition_size_m: float
    n_outside_study_area: int = 0
    n_within_training_buffer: int = 0
    class_value: np.ndarray | None = None
    candidate_box: F64Array | None = None
    rings_utm: Rings | None = None
    rings_ea: Rings | None = None

    def __len__(self) -> int:
        return len(self.positions)

    def take(self, rows: IdArray) -> PreparedLayer:
        """The layer restricted to the given local rows (counts are kept as they are)."""
        rows = np.asarray(rows, dtype=np.int64)
        fields = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, (np.ndarray, pd.Index)):
                value = value[rows]
            elif isinstance(value, Rings):
                value = value.take(rows)
            fields[name] = value
        return PreparedLayer(**fields)


def empty_layer(
    name: str,
    *,
    equal_area_crs: CRS,
    partition_size_m: float,
    crs: CRS | None = None,
    labels: pd.Index | None = None,
    n_input: int = 0,
) -> PreparedLayer:
    """A prepared layer without rows (``n_input`` rows read, all of them dropped)."""
    labels = pd.Index([]) if labels is None else labels
    empty_f = np.empty(0, dtype=np.float64)
    empty_i = np.empty(0, dtype=np.int64)
    empty_g = np.empty(0, dtype=object)
    return PreparedLayer(
        name=name,
        positions=empty_i,
        labels=labels[:0],
        crs=crs,
        geoms_source=empty_g,
        geoms_ea=empty_g,
        area_m2=empty_f,
        lon=empty_f,
        lat=empty_f,
        utm_epsg=empty_i,
        geoms_utm=empty_g,
        perimeter_m=empty_f,
        partition_x=empty_i,
        partition_y=empty_i,
        tile_x=empty_i,
        tile_y=empty_i,
        aoi=empty_i,
        annotated_fraction=empty_f,
        score=empty_f,
        n_input=n_input,
        n_dropped=n_input,
        n_repaired=0,
        equal_area_crs=equal_area_crs,
        partition_size_m=float(partition_size_m),
        candidate_box=np.empty((0, 4), dtype=np.float64),
    )


def utm_rings(layer: PreparedLayer, rows: IdArray) -> Rings:
    """The home-zone geometry of ``layer``'s rows as flat rings, in the order of ``rows``.

    Taken from ``layer.rings_utm`` when the layer was read as rings, else flattened
    from ``layer.geoms_utm``: the same arrays either way.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if layer.rings_utm is not None:
        return layer.rings_utm.take(rows)
    return Rings.of(home_geometries(layer, rows))


def home_geometries(layer: PreparedLayer, rows: IdArray) -> GeomArray:
    """``layer.geoms_utm[rows]``, refusing rows whose home-zone geometry was not decoded.

    A prepared row always has one; a missing one means the partition was read without
    it (or as rings only), and measuring nothing would silently drop a boundary.
    """
    geoms = layer.geoms_utm[rows]
    missing = shapely.is_missing(geoms)
    if missing.any():
        first = int(layer.positions[np.asarray(rows)[missing][0]])
        how = " (it was read as flat rings)" if layer.rings_utm is not None else ""
        raise ValueError(
            f"the {layer.name} layer's row at input position {first} (and {int(missing.sum()) - 1} more) has no "
            f"home-zone geometry{how}: its partition was read without it"
        )
    return geoms

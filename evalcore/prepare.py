"""Preparation of one evaluated layer (SPEC section 2).

The geometry steps (repair, keep polygonal parts, drop and count unusable rows,
reproject to the equal-area CRS after splitting edges into pieces of at most 50 m, and
the guards) are :func:`evalcore.polygons.equal_area_polygons`; this module adds what an
evaluated layer needs on top: each polygon's home UTM zone and partition tile, its
geometry in that zone, its reporting tile and AOI, its score, and the study area's rule.
The result is a :class:`~evalcore.layer.PreparedLayer`: arrays aligned row by row, with the input
position of every kept row so that every tie-break can be made by position.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import shapely
from pyproj import CRS

from evalcore._typing import F64Array, GeomArray, IdArray
from evalcore.config import DEFAULT_PARTITION_SIZE_M, DEFAULT_TILE_KM
from evalcore.crs import WGS84, to_utm, to_utm_rings, transform_xy, utm_crs, utm_epsg_of
from evalcore.io import SOURCE_ATTR
from evalcore.layer import PreparedLayer, empty_layer
from evalcore.metrics.classes import class_values
from evalcore.metrics.scores import score_values
from evalcore.levels import Sites, locate
from evalcore.polygons import equal_area_polygons, layer_geometries  # noqa: F401 (layer_geometries: api and the runner import it from here)
from evalcore.study import Study, study_area_mask, within_training_buffer
from evalcore.threads import GEOMS_PER_THREAD, map_elements

__all__ = [
    "prepare_layer",
]


def prepare_layer(
    layer: object,
    name: str,
    *,
    equal_area_crs: object = None,
    partition_size_m: float = DEFAULT_PARTITION_SIZE_M,
    sites: Sites | None = None,
    score_column: str | None = None,
    study: Study | None = None,
    class_column: str | None = None,
    utm_as_rings: bool = False,
) -> PreparedLayer:
    """Prepare one polygon layer for evaluation (SPEC section 2).

    Parameters
    ----------
    layer : geopandas.GeoDataFrame or geopandas.GeoSeries
        Polygons in any CRS.
    name : str
        ``"reference"`` or ``"predicted"``; named in error messages.
    equal_area_crs : CRS-like, optional
        Projected CRS in metres for areas and IoU; default EPSG:6933. A WARNING is
        logged when it changes any polygon's area by more than 0.01 % relative to
        EPSG:6933.
    partition_size_m : float
        Side of the square partition tiles in each UTM zone, metres.
    sites : evalcore.levels.Sites, optional
        Reporting tiles (default side 10 km), AOIs and annotated area to locate every
        row in (the annotated fraction is measured for the predicted layer only).
    score_column : str, optional
        Column of confidence scores (finite, in [0, 1]; every row is checked, dropped ones too).
    class_column : str, optional
        Column of classes (SPEC 6.10; compared as strings, null allowed).
    study : evalcore.study.Study, optional
        A study area (rows its rule leaves out are not kept, and counted apart from the
        dropped rows) and a training area (rows within its buffer are counted, and left
        out when the study says so).
    utm_as_rings : bool
        Give the home-zone geometry as flat rings only (``rings_utm``; ``geoms_utm``
        then holds None), what the distributed run stores and measures: the same
        coordinates and perimeters, without building a shapely geometry for each row.
        Ignored with a training area, whose buffer test needs the geometries.

    Returns
    -------
    PreparedLayer

    Raises
    ------
    TypeError
        When ``layer`` is not a GeoDataFrame or GeoSeries.
    CRSError
        When the layer has geometries but no CRS.
    EvalInputError
        When a polygon crosses the antimeridian, has coordinates out of range for its CRS,
        or would split into more than :data:`MAX_SPLIT_VERTICES` vertices (the messages
        name the rows).
    """
    where = _where(layer, name)
    polygons = equal_area_polygons(layer, name, where, equal_area_crs)
    labels, crs, ea_crs, n_input = polygons.labels, polygons.crs, polygons.equal_area_crs, polygons.n_input
    if crs is None:
        return empty_layer(name, equal_area_crs=ea_crs, partition_size_m=partition_size_m, labels=labels, n_input=n_input)
    rows, source, geoms_ea, area = polygons.positions, polygons.geoms_source, polygons.geoms_ea, polygons.area_m2
    halfway = polygons.halfway
    n_prepared, n_repaired = len(rows), int(polygons.repaired[rows].sum())  # what SPEC 2 kept and repaired
    if study is not None and study.study_area is not None:

        inside = study_area_mask(study.study_area, geoms_ea)
        rows, source, geoms_ea, area = rows[inside], source[inside], geoms_ea[inside], area[inside]
        halfway = halfway.take(np.flatnonzero(inside)) if halfway is not None else None

    centroids = map_elements(shapely.centroid, geoms_ea, min_slice=GEOMS_PER_THREAD)
    lon, lat = transform_xy(shapely.get_x(centroids), shapely.get_y(centroids), ea_crs, WGS84)
    epsg = utm_epsg_of(lon, lat)
    rings_utm = None
    if utm_as_rings and (study is None or study.training is None):
        rings_utm = to_utm_rings(source, crs, epsg, halfway)
        geoms_utm = np.full(len(source), None, dtype=object)
        perimeter = rings_utm.lengths()  # shapely.length's bits (evalcore._kernels._geometry_lengths)
    else:
        geoms_utm = to_utm(source, crs, epsg, halfway)
        perimeter = shapely.length(geoms_utm).astype(np.float64)
    zone_x, zone_y = _zone_xy(lon, lat, epsg)
    partition_x, partition_y = _tiles(zone_x, zone_y, partition_size_m)
    tile_x, tile_y = _tiles(zone_x, zone_y, sites.tile_size_m if sites is not None else DEFAULT_TILE_KM * 1000.0)
    aoi, annotated_fraction = locate(geoms_ea, area, sites, annotate=name == "predicted", centroids_ea=centroids)
    score = np.full(len(rows), np.nan)
    if score_column is not None:

        score = score_values(layer, score_column, where)[rows]
    class_value = None
    if class_column is not None:

        class_value = class_values(layer, class_column, where)[rows]
    n_kept = len(rows)
    prepared = PreparedLayer(
        name=name,
        positions=rows.astype(np.int64),
        labels=labels[rows],
        crs=crs,
        geoms_source=source,
        geoms_ea=geoms_ea,
        area_m2=area.astype(np.float64),
        lon=lon,
        lat=lat,
        utm_epsg=epsg.astype(np.int64),
        geoms_utm=geoms_utm,
        perimeter_m=perimeter,
        partition_x=partition_x,
        partition_y=partition_y,
        tile_x=tile_x,
        tile_y=tile_y,
        aoi=aoi,
        annotated_fraction=annotated_fraction,
        score=score,
        n_input=n_input,
        n_dropped=n_input - n_prepared,
        n_repaired=n_repaired,
        equal_area_crs=ea_crs,
        partition_size_m=float(partition_size_m),
        n_outside_study_area=n_prepared - n_kept,
        class_value=class_value,
        rings_utm=rings_utm,
    )
    if study is None or study.training is None:
        return prepared

    near = within_training_buffer(study.training, geoms_ea, geoms_utm, prepared.utm_epsg, lon, lat)
    prepared = replace(prepared, n_within_training_buffer=int(near.sum()))
    return prepared.take(np.flatnonzero(~near)) if study.training.exclude else prepared


def _where(layer: object, name: str) -> str:
    """How messages name the layer: its file when a reader recorded it, else ``"<name> layer"``."""
    attrs = getattr(layer, "attrs", None) or {}
    return str(attrs.get(SOURCE_ATTR) or f"{name} layer")




def _zone_xy(lon: F64Array, lat: F64Array, epsg: IdArray) -> tuple[F64Array, F64Array]:
    """Each centroid in its home zone's metres."""
    x = np.zeros(len(lon))
    y = np.zeros(len(lon))
    for code in np.unique(epsg):
        rows = np.flatnonzero(epsg == code)
        x[rows], y[rows] = transform_xy(lon[rows], lat[rows], WGS84, utm_crs(int(code)))
    return x, y


def _tiles(x: F64Array, y: F64Array, side_m: float) -> tuple[IdArray, IdArray]:
    """Square tile of each centroid: floor of its UTM coordinates / side."""
    return np.floor(x / side_m).astype(np.int64), np.floor(y / side_m).astype(np.int64)

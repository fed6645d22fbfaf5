"""SPEC 2's geometry steps for any polygon layer, and the guards that refuse broken input.

What every polygon layer goes through before it is used, whatever it is for (the
reference and predicted layers of :mod:`evalcore.prepare`, the site layers of
:mod:`evalcore.sites`): drop null and empty geometries, repair invalid ones and keep
polygonal parts, refuse what cannot be evaluated (no CRS, NaN coordinates, longitudes
out of range, edges across the antimeridian, splits too large for memory, failed
reprojections), split edges at 50 m and reproject to the equal-area CRS, and drop what
has no area there (:func:`equal_area_polygons`). Keys, zones, tiles and the features
of a run (scores, study, levels) are not here: :func:`evalcore.prepare.prepare_layer`
adds them to the rows this module keeps, so that a layer that is not evaluated (an AOI,
a study area) is prepared by the same steps with the same numbers and nothing else.

Over 500 lines because each guard is a short check with a long message that names the
rows at fault and the remedy, and the antimeridian test needs its cheap pre-filter;
the guards have no other user, so splitting them off would only add an import.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import geopandas
import numpy as np
import pandas as pd
import shapely
from pyproj import CRS

from evalcore._typing import BoolArray, F64Array, GeomArray, IdArray
from evalcore.config import AREA_WARNING_RTOL, DEFAULT_EQUAL_AREA_CRS
from evalcore.crs import WGS84, Halfway, check_earth_crs, edge_split_length, equal_area_crs_from, reproject_polygons, transform_xy
from evalcore.threads import GEOMS_PER_THREAD, map_elements
from evalcore.errors import CRSError, EvalInputError
from evalcore.io import LINEARIZED_ROWS_ATTR
from evalcore.rings import flatten_rings

__all__ = [
    "EqualAreaPolygons",
    "equal_area_polygons",
    "layer_geometries",
    "repair_polygonal",
    "split_vertex_counts",
    "crosses_antimeridian",
    "MAX_SPLIT_VERTICES",
]

logger = logging.getLogger(__name__)

_POLYGON = int(shapely.GeometryType.POLYGON)
_MULTIPOLYGON = int(shapely.GeometryType.MULTIPOLYGON)
_COLLECTION = int(shapely.GeometryType.GEOMETRYCOLLECTION)

MAX_SPLIT_VERTICES = 200_000_000
"""Most vertices the 50 m edge split (SPEC 2.3) may give one polygon.

The split is what a long boundary costs: :func:`evalcore.crs.reproject_polygons` holds
every piece of it at once. Natural Earth's Canada (about 82,600 km of boundary, in
EPSG:4326) splits into a few million vertices; 200 million (about 15 GiB) is far above
any real polygon and below what exhausts an ordinary machine. The bound is per polygon,
not per layer, so that it does not depend on how a layer is cut into chunks.
"""

SPLIT_BYTES_PER_VERTEX = 80
"""Peak memory per vertex of the split, bytes: 73 B measured (growth of the peak resident
size while :func:`evalcore.crs.reproject_polygons` split polygons into 11 M and 33 M
vertices), rounded up. It holds the split x and y and their trimmed copy, the
reprojected x and y, the stacked coordinates and GEOS's copy at once."""

# Antimeridian pre-filter (_near_antimeridian): boxes whose corners transform to finite
# longitudes at most _AM_MAX_SPREAD_DEG apart are clear. For two vertices of a polygon in
# such a box to be more than 180 degrees apart, the polygon would have to reach more than
# (180 - 45) / 2 = 67.5 degrees of longitude beyond the range of its box's corners.
_AM_GRID = 32  # cells per side of the grid over the layer's bounds
_AM_MAX_SPREAD_DEG = 45.0
# Two vertices this close to ±180 are both on the antimeridian: an edge between them runs
# along it (a polar cap such as Antarctica) and does not cross it. 1e-6 degree is 0.1 m,
# far above what a round trip through a projection moves a point (1e-12 degree).
_AM_SEAM_TOL_DEG = 1e-6


@dataclass(frozen=True, slots=True)
class EqualAreaPolygons:
    """The rows of one layer that SPEC 2's geometry steps keep.

    Attributes
    ----------
    labels : pandas.Index
        Input index label of every input row, kept or not.
    crs : pyproj.CRS or None
        The layer's source CRS (None only when no row has a geometry).
    positions : ndarray of int64, shape (n,)
        Input row position (0-based) of each kept row, increasing.
    geoms_source : ndarray of shapely geometries, shape (n,)
        Repaired polygonal geometry, two-dimensional, in ``crs``.
    geoms_ea : ndarray of shapely geometries, shape (n,)
        The same in the equal-area CRS (edges split at 50 m before reprojection).
    area_m2 : ndarray of float64, shape (n,)
        Area in the equal-area CRS, square metres; all > 0.
    repaired : ndarray of bool, shape (n_input,)
        Input rows the repair, the polygonal-part filter or the reader's linearization
        of curves changed.
    equal_area_crs : pyproj.CRS
    halfway : evalcore.crs.Halfway or None
        The kept rows' source vertices part of the way to their UTM zones, for
        :func:`evalcore.crs.to_utm` (None when the transformations share no step).
    """

    labels: pd.Index
    crs: CRS | None
    positions: IdArray
    geoms_source: GeomArray
    geoms_ea: GeomArray
    area_m2: F64Array
    repaired: BoolArray
    equal_area_crs: CRS
    halfway: Halfway | None = None

    @property
    def n_input(self) -> int:
        return len(self.labels)

    @property
    def n_dropped(self) -> int:
        """Input rows not kept: null, empty, not polygonal or of zero area."""
        return self.n_input - len(self.positions)


def equal_area_polygons(layer: object, name: str, where: str, equal_area_crs: object = None) -> EqualAreaPolygons:
    """SPEC 2's geometry steps for one layer: the rows kept, repaired, in the equal-area CRS.

    Parameters
    ----------
    layer : geopandas.GeoDataFrame or geopandas.GeoSeries
        Polygons in any CRS.
    name : str
        What the layer is (``"reference"``, ``"AOI layer"``); named in the area warning.
    where : str
        How messages name the layer (its file, or ``"<name> layer"``).
    equal_area_crs : CRS-like, optional
        Projected CRS in metres; default EPSG:6933. A WARNING is logged when a given one
        changes any polygon's area by more than 0.01 % relative to EPSG:6933.

    Returns
    -------
    EqualAreaPolygons

    Raises
    ------
    TypeError
        When ``layer`` is not a GeoDataFrame or GeoSeries.
    CRSError
        When the layer has geometries but no CRS, or a CRS not on the Earth.
    EvalInputError
        When a polygon has NaN or infinite coordinates, longitudes out of range for its
        CRS, an edge across the antimeridian, would split into more than
        :data:`MAX_SPLIT_VERTICES` vertices, or cannot be reprojected (the messages name
        the rows).
    """
    user_crs = equal_area_crs is not None
    ea_crs = equal_area_crs_from(equal_area_crs if user_crs else DEFAULT_EQUAL_AREA_CRS)
    raw, labels, crs = layer_geometries(layer, name)
    n_input = len(raw)

    geoms = raw.copy()
    present = ~(shapely.is_missing(geoms))
    present[present] = ~shapely.is_empty(geoms[present])
    if crs is None and present.any():
        raise CRSError(
            f"The {where} has {int(present.sum())} geometries but no CRS. "
            "Set one (e.g. layer.set_crs('EPSG:4326')) or fix the file's metadata."
        )
    geoms[~present] = None
    if present.any():
        # force_2d rebuilds every geometry it is given; only those with a Z or M ordinate
        # change (flat ones would come back with the same coordinates).
        given = np.flatnonzero(present)
        extra = given[shapely.has_z(geoms[given]) | shapely.has_m(geoms[given])]
        if len(extra):
            geoms[extra] = shapely.force_2d(geoms[extra])
        _check_finite(where, labels, geoms, given)
    geoms, repaired = repair_polygonal(geoms)
    kept = ~shapely.is_missing(geoms)
    repaired |= _linearized(layer, n_input) & kept
    rows = np.flatnonzero(kept)

    if crs is None:  # no row has a geometry, so none is kept
        empty = np.empty(0, dtype=object)
        return EqualAreaPolygons(labels, None, rows, empty, empty.copy(), np.empty(0, dtype=np.float64), repaired, ea_crs)

    check_earth_crs(crs, where)
    source = geoms[rows]
    # All before the 50 m split. Longitudes out of range first (PROJ would wrap them into a
    # crossing), then the split's size (absurd coordinates transform to meaningless longitudes).
    bounds = shapely.bounds(source)  # for both the longitude range and the antimeridian pre-filter
    _check_longitude_range(where, labels, rows, bounds, crs)
    split = edge_split_length(crs)
    _check_split_size(where, labels, rows, source, crs, split)
    _check_antimeridian(where, labels, rows, source, bounds, crs)
    geoms_ea, halfway = reproject_polygons(source, crs, ea_crs, split=split, halfway=True)
    _check_reprojected(where, labels, rows, source, geoms_ea, crs, ea_crs)
    ea_invalid = ~map_elements(shapely.is_valid, geoms_ea, min_slice=GEOMS_PER_THREAD)
    if ea_invalid.any():
        fixed, _ = repair_polygonal(geoms_ea[ea_invalid])
        geoms_ea[ea_invalid] = fixed
        repaired[rows[ea_invalid]] = True
    area = np.where(shapely.is_missing(geoms_ea), 0.0, shapely.area(geoms_ea))
    usable = area > 0.0
    rows, source, geoms_ea, area = rows[usable], source[usable], geoms_ea[usable], area[usable]
    if halfway is not None:
        halfway = halfway.take(np.flatnonzero(usable))

    if user_crs and ea_crs != CRS.from_user_input(DEFAULT_EQUAL_AREA_CRS) and len(rows):
        _warn_area_change(name, source, crs, ea_crs, area)
    return EqualAreaPolygons(labels, crs, rows, source, geoms_ea, area, repaired, ea_crs, halfway)


def layer_geometries(layer: object, name: str) -> tuple[GeomArray, pd.Index, CRS | None]:
    """The geometry array, index and CRS of a GeoDataFrame or GeoSeries.

    Raises
    ------
    TypeError
        If ``layer`` is neither a GeoDataFrame nor a GeoSeries.
    """
    if isinstance(layer, geopandas.GeoDataFrame):
        try:
            series = layer.geometry
        except AttributeError:
            raise EvalInputError(f"The {name} layer has no active geometry column.") from None
    elif isinstance(layer, geopandas.GeoSeries):
        series = layer
    else:
        raise TypeError(
            f"The {name} layer must be a geopandas GeoDataFrame or GeoSeries, "
            f"but got {type(layer).__name__}."
        )
    geoms = np.asarray(series.array, dtype=object)
    return geoms, series.index, series.crs


def _polygonal_parts(geoms: GeomArray) -> GeomArray:
    """Keep the polygonal parts of each geometry; None where there are none."""
    out = np.empty(len(geoms), dtype=object)
    if len(geoms) == 0:
        return out
    parts, owner = shapely.get_parts(geoms, return_index=True)
    # A collection can nest multi-geometries: explode until only single parts remain.
    while True:
        kinds = shapely.get_type_id(parts)
        nested = np.isin(kinds, [_MULTIPOLYGON, _COLLECTION, 4, 5])
        if not nested.any():
            break
        sub, sub_owner = shapely.get_parts(parts[nested], return_index=True)
        owner = np.concatenate([owner[~nested], owner[nested][sub_owner]])
        parts = np.concatenate([parts[~nested], sub])
    keep = (shapely.get_type_id(parts) == _POLYGON) & ~shapely.is_empty(parts)
    parts, owner = parts[keep], owner[keep]
    order = np.argsort(owner, kind="stable")
    parts, owner = parts[order], owner[order]
    counts = np.bincount(owner, minlength=len(geoms))
    single = counts == 1
    first = np.searchsorted(owner, np.arange(len(geoms)))
    out[single] = parts[first[single]]
    multi = np.flatnonzero(counts > 1)
    if len(multi):
        in_multi = np.isin(owner, multi)
        rebuilt = shapely.multipolygons(parts[in_multi], indices=np.searchsorted(multi, owner[in_multi]))
        out[multi] = rebuilt
    return out


def repair_polygonal(geoms: GeomArray) -> tuple[GeomArray, BoolArray]:
    """Repair invalid geometries and keep only polygonal parts.

    Invalid geometries go through ``shapely.make_valid(method="structure",
    keep_collapsed=False)``; geometry collections keep their polygonal parts. Where
    the result is still invalid (GEOS 3.14 can return a MultiPolygon whose parts share
    an edge; a collection's polygons may overlap), the same repair is applied to it
    again, at most twice. There is no fallback to another repair method.

    Returns
    -------
    geoms : ndarray of shapely geometries
        None where nothing polygonal is left.
    repaired : ndarray of bool
        True where the geometry was changed by the repair or the part filter.

    Raises
    ------
    ImportError
        When a repair is needed and shapely lacks ``make_valid(method="structure")``.
    """
    geoms = np.asarray(geoms, dtype=object).copy()
    present = ~shapely.is_missing(geoms)
    kinds = np.full(len(geoms), -1, dtype=np.int64)
    kinds[present] = shapely.get_type_id(geoms[present])
    invalid = present & ~map_elements(shapely.is_valid, np.where(present, geoms, None), min_slice=GEOMS_PER_THREAD)
    repaired = invalid.copy()
    if invalid.any():
        fixed = _make_valid(geoms[invalid])
        geoms[invalid] = fixed
        kinds[invalid] = shapely.get_type_id(fixed)
    mixed = present & ~np.isin(kinds, [_POLYGON, _MULTIPOLYGON])
    if mixed.any():
        geoms[mixed] = _polygonal_parts(geoms[mixed])
        repaired |= mixed & (kinds == _COLLECTION)
    # The same repair once more where its output, or the polygonal parts of a collection,
    # is still invalid: GEOS 3.14 returns two parts sharing an edge for a ring that runs
    # along an edge twice, and a collection's polygons may overlap. Not another method.
    changed = np.flatnonzero(invalid | mixed)  # rows valid as given are left alone
    for _ in range(_EXTRA_REPAIR_ROUNDS):
        changed = changed[~shapely.is_missing(geoms[changed])]
        again = changed[~shapely.is_valid(geoms[changed])]
        if len(again) == 0:
            break
        geoms[again] = _polygonal_parts(_make_valid(geoms[again]))
        repaired[again] = True
        changed = again
    return geoms, repaired & ~shapely.is_missing(geoms)


_EXTRA_REPAIR_ROUNDS = 2


def _make_valid(geoms: GeomArray) -> GeomArray:
    """``shapely.make_valid(method="structure", keep_collapsed=False)``; ImportError without it."""
    try:
        return shapely.make_valid(geoms, method="structure", keep_collapsed=False)
    except TypeError as exc:  # shapely < 2.1 has no `method`
        raise ImportError(
            "Repairing invalid geometries needs shapely >= 2.1 (GEOS >= 3.10) for "
            "make_valid(method='structure'); upgrade shapely."
        ) from exc


def _drop_message_rows(name: str, labels: pd.Index, rows: IdArray) -> str:
    def plain(value: object) -> object:  # numpy scalars print as their Python value
        return value.item() if isinstance(value, np.generic) else value

    shown = ", ".join(repr(plain(labels[i])) for i in rows[:5])
    more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    return f"{shown}{more}"


def _linearized(layer: object, n_input: int) -> BoolArray:
    """Rows whose curved geometry the reader linearized (``attrs[LINEARIZED_ROWS_ATTR]``)."""
    out = np.zeros(n_input, dtype=bool)
    attrs = getattr(layer, "attrs", None) or {}
    rows = np.asarray(attrs.get(LINEARIZED_ROWS_ATTR, ()), dtype=np.int64)
    out[rows[(rows >= 0) & (rows < n_input)]] = True
    return out


def _rows_text(labels: pd.Index, rows: IdArray) -> str:
    """``"row 3"`` or ``"rows 3, 7 and 2 more"`` (index labels; for files read by evalcore, 0-based positions)."""
    return ("row " if len(rows) == 1 else "rows ") + _drop_message_rows("", labels, rows)


def _check_finite(where: str, labels: pd.Index, geoms: GeomArray, rows: IdArray) -> None:
    """Refuse geometries with NaN or infinite coordinates, naming the rows."""
    coords, owner = shapely.get_coordinates(geoms[rows], return_index=True)
    bad_vertex = ~np.isfinite(coords).all(axis=1)
    if not bad_vertex.any():
        return
    bad = rows[np.unique(owner[bad_vertex])]
    example = coords[np.flatnonzero(bad_vertex)[0]]
    raise EvalInputError(
        f"The {where} has NaN or infinite coordinates in {_rows_text(labels, bad)} "
        f"(e.g. x={float(example[0])!r}, y={float(example[1])!r}); fix or remove those rows."
    )


def _check_longitude_range(where: str, labels: pd.Index, rows: IdArray, bounds: F64Array, crs: CRS) -> None:
    """Refuse coordinates outside ±180/±90 when the CRS is in degrees (``bounds``: the polygons', shape (n, 4))."""
    if len(bounds) == 0 or not crs.is_geographic:
        return
    b = bounds
    bad = np.flatnonzero((b[:, 0] < -180.0) | (b[:, 2] > 180.0) | (b[:, 1] < -90.0) | (b[:, 3] > 90.0))
    if len(bad):
        x0, y0, x1, y1 = b[bad[0]]
        raise EvalInputError(
            f"The {where} has coordinates outside longitude [-180, 180] / latitude [-90, 90] in "
            f"{_rows_text(labels, rows[bad])} (bounds {x0:g}, {y0:g}, {x1:g}, {y1:g}), but its CRS {crs.name!r} is in degrees. "
            "Normalise longitudes to [-180, 180] (splitting polygons at ±180), or set the CRS the coordinates are really in."
        )


def _check_split_size(where: str, labels: pd.Index, rows: IdArray, source: GeomArray, crs: CRS, split: float) -> None:
    """Refuse polygons whose 50 m edge split would give more than :data:`MAX_SPLIT_VERTICES` vertices.

    A real country passes; what is refused would exhaust memory, and almost always has
    coordinates in other units than the CRS's. The count is first bounded from above
    by ``length / split + vertices`` (each edge gives at most ``length / split + 1``
    pieces), which is cheap; only polygons over the limit by that bound are counted
    exactly.
    """
    if len(source) == 0:
        return
    upper = shapely.length(source) / split + shapely.get_num_coordinates(source)
    over = np.flatnonzero(upper > MAX_SPLIT_VERTICES)
    if len(over) == 0:
        return
    counts = split_vertex_counts(source[over], split)
    too_many = counts > MAX_SPLIT_VERTICES
    over, counts = over[too_many], counts[too_many]
    if len(over) == 0:
        return
    # Row labels are listed worst first, so the polygon whose numbers are quoted comes first.
    order = np.argsort(-counts, kind="stable")
    worst = int(order[0])
    n_worst = float(counts[worst])
    length = float(shapely.length(source[over[worst]]))
    unit = crs.axis_info[0].unit_name if crs.axis_info else "CRS unit"
    gib = 2.0**30
    whose = "its split" if len(over) == 1 else f"the split of the first, {_rows_text(labels, rows[over[worst:worst + 1]])},"
    raise EvalInputError(
        f"The {where} has polygons too long to split into pieces of at most 50 m (docs/contract.md, section 2) in "
        f"{_rows_text(labels, rows[over[order]])} (CRS {crs.name!r}): {whose} would create "
        f"{_count_text(n_worst)} vertices (boundary length {length:.4g} {unit}), about "
        f"{_count_text(n_worst * SPLIT_BYTES_PER_VERTEX / gib)} GiB of memory, where at most "
        f"{MAX_SPLIT_VERTICES:,} vertices (about {MAX_SPLIT_VERTICES * SPLIT_BYTES_PER_VERTEX / gib:.0f} GiB) "
        "are allowed per polygon. A boundary that much longer than a country's means the coordinates "
        "are not in the CRS's units or the CRS is wrong: check both. If the polygons are real, "
        "simplify them (e.g. shapely.simplify) or split them into several rows."
    )


def _count_text(value: float) -> str:
    """``"1,234,567"`` up to a trillion, ``"2.5e+28"`` beyond (broken inputs give absurd counts)."""
    return f"{value:,.0f}" if value < 1e12 else f"{value:.2g}"


def split_vertex_counts(geoms: GeomArray, split: float) -> F64Array:
    """Vertices of each polygon after splitting its edges into pieces of at most ``split``.

    Each edge of length ``L`` gives ``max(ceil(L / split), 1)`` pieces and each closed
    ring one more vertex, as :func:`evalcore._kernels._densify_rings` counts them (its
    output can be a few vertices shorter where inserted points coincide).

    Parameters
    ----------
    geoms : ndarray of shapely Polygons / MultiPolygons, shape (n,), none missing
    split : float
        Largest piece length, in the geometries' units.

    Returns
    -------
    ndarray of float64, shape (n,)
        Float, so that absurd counts (coordinates of 1e30) do not overflow.

    Examples
    --------
    >>> from shapely.geometry import box
    >>> split_vertex_counts(np.array([box(0, 0, 100, 50), box(0, 0, 1, 1)]), 50.0).tolist()
    [7.0, 5.0]
    """
    geoms = np.asarray(geoms, dtype=object)
    if len(geoms) == 0:
        return np.zeros(0, dtype=np.float64)
    x, y, vertex_ring, ring_geom = _flat_rings(geoms)
    edge = np.hypot(np.diff(x), np.diff(y))
    in_ring = vertex_ring[1:] == vertex_ring[:-1]  # not the step from one ring to the next
    pieces = np.maximum(np.ceil(edge[in_ring] / split), 1.0)
    per_ring = np.bincount(vertex_ring[1:][in_ring], weights=pieces, minlength=len(ring_geom)) + 1.0
    return np.bincount(ring_geom, weights=per_ring, minlength=len(geoms))


def _flat_rings(geoms: GeomArray) -> tuple[F64Array, F64Array, IdArray, IdArray]:
    """Every ring's coordinates (:func:`evalcore.rings.flatten_rings`), the ring of each
    vertex and the geometry of each ring."""
    x, y, ring_off, _, geom_off = flatten_rings(geoms)
    vertex_ring = np.repeat(np.arange(len(ring_off) - 1), np.diff(ring_off))
    ring_geom = np.repeat(np.arange(len(geom_off) - 1), np.diff(geom_off))
    return x, y, vertex_ring, ring_geom


def _check_reprojected(
    where: str, labels: pd.Index, rows: IdArray, source: GeomArray, geoms_ea: GeomArray, crs: CRS, ea_crs: CRS
) -> None:
    """Refuse polygons whose reprojection to the equal-area CRS failed (infinite or NaN area)."""
    with np.errstate(invalid="ignore", over="ignore"):
        bad = np.flatnonzero(~np.isfinite(shapely.area(geoms_ea)))
    if len(bad):
        b = shapely.bounds(source[bad[0]])
        raise EvalInputError(
            f"The {where} has polygons that cannot be reprojected from {crs.name!r} to {ea_crs.name!r} in "
            f"{_rows_text(labels, rows[bad])} (bounds {b[0]:g}, {b[1]:g}, {b[2]:g}, {b[3]:g}): the coordinates are "
            "outside what the layer's CRS can represent. Check the CRS and the coordinates."
        )


def _check_antimeridian(where: str, labels: pd.Index, rows: IdArray, source: GeomArray, bounds: F64Array, crs: CRS) -> None:
    """Refuse polygons with an edge across the antimeridian (longitude ±180).

    The decision is made on each polygon's own vertices in longitude and latitude (not on
    its bounding box, whose corners in a pseudo-cylindrical projection such as Equal
    Earth are not longitudes of the polygon); see :func:`crosses_antimeridian`. Only the
    polygons the cheap pre-filter :func:`_near_antimeridian` cannot clear are transformed
    vertex by vertex.
    """
    if len(source) == 0:
        return
    suspects = _near_antimeridian(bounds, crs)
    if len(suspects) == 0:
        return
    crossing = suspects[crosses_antimeridian(source[suspects], crs)]
    if len(crossing):
        raise EvalInputError(
            f"The {where} has polygons crossing the antimeridian (longitude ±180), which "
            f"evalcore does not support: {_rows_text(labels, rows[crossing])}. "
            "Split them at ±180 or evaluate each side separately."
        )


def crosses_antimeridian(geoms: GeomArray, crs: CRS) -> BoolArray:
    """Whether each polygon has an edge that crosses longitude ±180.

    The vertices are transformed to longitude and latitude (EPSG:4326). An edge crosses
    when its ends are more than 180 degrees of longitude apart: it is taken the short
    way, across ±180, as GeoJSON (RFC 7946, 3.1.9) and every tool that splits at the
    antimeridian read it. That is the trace a crossing polygon leaves in a geographic
    CRS (179.9 to -179.9), in a projection centred away from 0 where it is an ordinary
    polygon (EPSG:3832), and in one centred on 0 where, projected vertex by vertex, it
    spans the whole map (EPSG:8857). An edge with both ends on ±180 runs along the
    antimeridian and does not cross it: a polar cap such as Antarctica is accepted, and
    so is a multipolygon split at ±180 into parts on both sides (Fiji, Russia), whose
    edges do not jump. Vertices PROJ cannot transform are ignored here:
    :func:`_check_reprojected` refuses their polygons.

    Parameters
    ----------
    geoms : ndarray of shapely Polygons / MultiPolygons, shape (n,), none missing
    crs : pyproj.CRS
        Their CRS.

    Returns
    -------
    ndarray of bool, shape (n,)

    Examples
    --------
    >>> from shapely.geometry import Polygon, box
    >>> fiji = Polygon([(179.9, -17), (-179.9, -17), (-179.9, -16), (179.9, -16)])
    >>> crosses_antimeridian(np.array([fiji, box(170, -17, 180, -16)]), WGS84).tolist()
    [True, False]
    """
    geoms = np.asarray(geoms, dtype=object)
    out = np.zeros(len(geoms), dtype=bool)
    if len(geoms) == 0:
        return out
    x, y, vertex_ring, ring_geom = _flat_rings(geoms)
    lon, _ = transform_xy(x, y, crs, WGS84)
    lon[~np.isfinite(lon)] = np.nan  # PROJ gives inf where it fails: neither a jump nor the seam
    with np.errstate(invalid="ignore"):
        on_seam = np.abs(lon) >= 180.0 - _AM_SEAM_TOL_DEG
        jump = np.abs(np.diff(lon)) > 180.0
    jump &= vertex_ring[1:] == vertex_ring[:-1]  # consecutive vertices of one ring
    jump &= ~(on_seam[1:] & on_seam[:-1])
    out[ring_geom[vertex_ring[1:][jump]]] = True
    return out


def _near_antimeridian(bounds: F64Array, crs: CRS) -> IdArray:
    """Positions of the polygons a cheap test cannot clear of crossing ±180 (a superset).

    Transforming every vertex to longitude and latitude costs 0.6 s of the 2.2 s it takes
    to prepare 50,000 fields, so a polygon is first cleared by a box around it. A box is
    clear when its four corners transform to finite longitudes at most
    :data:`_AM_MAX_SPREAD_DEG` apart: a polygon inside it would otherwise have to reach
    67.5 degrees of longitude beyond its corners, which no projection does inside its
    domain. The boxes that are not clear are those around a pole (corners in all
    directions), across the antimeridian (corners on both sides), across the edge of the
    map (corners PROJ cannot transform, or wraps to the other side) and boxes too large
    for their corners to say anything.
    The boxes tried are the cells of a grid over the layer's bounds (for the polygons
    inside one cell: nearly every field, for 1,089 corners transformed per layer),
    then each remaining polygon's own bounding box. In a geographic CRS the corners are
    the longitudes, and the test is exact.
    """
    present = np.flatnonzero(~np.isnan(bounds[:, 0]))  # an empty polygon has nothing to cross
    if len(present) == 0:
        return present
    bounds = bounds[present]
    x0, y0 = bounds[:, 0].min(), bounds[:, 1].min()
    x1, y1 = bounds[:, 2].max(), bounds[:, 3].max()
    dx = (x1 - x0) / _AM_GRID or 1.0  # a layer of one point or one line: one cell
    dy = (y1 - y0) / _AM_GRID or 1.0
    edges_x = x0 + dx * np.arange(_AM_GRID + 1)
    edges_y = y0 + dy * np.arange(_AM_GRID + 1)
    gx, gy = np.meshgrid(edges_x, edges_y, indexing="ij")
    lon, _ = transform_xy(gx.ravel(), gy.ravel(), crs, WGS84)
    lon = lon.reshape(gx.shape)
    cell_corners = np.stack([lon[:-1, :-1], lon[1:, :-1], lon[:-1, 1:], lon[1:, 1:]], axis=-1)
    cell_clear = _narrow(cell_corners)
    i0 = np.clip(np.floor((bounds[:, 0] - x0) / dx), 0, _AM_GRID - 1).astype(np.int64)
    i1 = np.clip(np.floor((bounds[:, 2] - x0) / dx), 0, _AM_GRID - 1).astype(np.int64)
    j0 = np.clip(np.floor((bounds[:, 1] - y0) / dy), 0, _AM_GRID - 1).astype(np.int64)
    j1 = np.clip(np.floor((bounds[:, 3] - y0) / dy), 0, _AM_GRID - 1).astype(np.int64)
    clear = (i0 == i1) & (j0 == j1) & cell_clear[i0, j0]
    rest = np.flatnonzero(~clear)
    if len(rest) == 0:
        return present[rest]
    b = bounds[rest]
    corner_x = b[:, [0, 2, 0, 2]].ravel()
    corner_y = b[:, [1, 1, 3, 3]].ravel()
    lon, _ = transform_xy(corner_x, corner_y, crs, WGS84)
    return present[rest[~_narrow(lon.reshape(-1, 4))]]


def _narrow(corner_lon: F64Array) -> BoolArray:
    """True where the corners' longitudes (last axis) are finite and within the allowed spread."""
    with np.errstate(invalid="ignore"):
        spread = corner_lon.max(axis=-1) - corner_lon.min(axis=-1)
        return np.isfinite(corner_lon).all(axis=-1) & (spread <= _AM_MAX_SPREAD_DEG)


def _warn_area_change(name: str, source: GeomArray, crs: CRS, ea_crs: CRS, area: F64Array) -> None:
    """Log a WARNING when ``ea_crs`` changes an area by more than 0.01 % against EPSG:6933."""
    default = CRS.from_user_input(DEFAULT_EQUAL_AREA_CRS)
    reference_area = shapely.area(reproject_polygons(source, crs, default, split=edge_split_length(crs)))
    with np.errstate(divide="ignore", invalid="ignore"):
        change = np.abs(area - reference_area) / reference_area
    worst = float(np.nanmax(change)) if len(change) else 0.0
    if worst > AREA_WARNING_RTOL:
        logger.warning(
            "equal_area_crs %s changes %s polygon areas by up to %.4g %% relative to %s "
            "(more than %.2g %%): it is probably not equal-area for these coordinates.",
            ea_crs.to_string(),
            name,
            100.0 * worst,
            DEFAULT_EQUAL_AREA_CRS,
            100.0 * AREA_WARNING_RTOL,
        )

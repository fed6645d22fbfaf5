"""Levels: reporting tiles and AOIs, their sums, per-unit tables, micro and macro (SPEC 6.3).

A *unit* is a reporting tile (a square of ``tile_km`` in a UTM zone, keyed ``(EPSG,
⌊easting / side⌋, ⌊northing / side⌋)`` of the equal-area centroid in the home zone) or
an AOI (a polygon of an optional layer; a row belongs to the first AOI, by position,
that contains its equal-area centroid). Tiles are a grid for reporting and do not
depend on how the work is partitioned.

A reference field counts in its own tile and AOI; a prediction with a home in its home
reference's, and a prediction without a home (no candidate pair) in the tile and AOI
of its own centroid. A unit is one more grouping of the quantity rows: it carries the
sums of the columns each metric family declares
(:meth:`~evalcore.metrics.base.MetricFamily.unit_columns`) plus the count of
predictions without a home (:data:`UNASSIGNED_COLUMN`), held sparsely
(:class:`UnitSums`: only units that hold a row), which merge by addition across
partitions like every other sum of the engine; each family turns them into its columns
of the per-unit tables (:meth:`~evalcore.metrics.base.MetricFamily.unit_values`).

This module owns:

* the site layers (:class:`Sites`: the tile side, the prepared AOI layer and the
  annotated area of SPEC 6.4) and where each row lies in them (:func:`locate`);
* :class:`UnitSums` and how they are built from quantity rows and homeless predictions
  (whose columns it does not name: they come with the rows);
* the per-unit tables (:func:`unit_table`) and the JSON blocks ``tiles`` and ``aois``
  (:func:`level_summary`), with micro and macro named apart;
* the tile squares: their area inside the zone's 6° band and their polygon in EPSG:4326.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass, fields

import geopandas
import numpy as np
import pandas as pd
import shapely
from pyproj import CRS

from evalcore._typing import F64Array, GeomArray, IdArray
from evalcore.bootstrap import replicate_group_sums
from evalcore.config import BOOTSTRAP_CONFIDENCE_LEVEL
from evalcore.crs import WGS84, transform_xy, utm_crs
from evalcore.errors import EvalInputError, IncompatibleStatsError
from evalcore.rates import F1_HARMONIC_POSITIVE, detection_rates

__all__ = [
    "LayerInput",
    "layer_input",
    "AoiLayer",
    "AnnotatedArea",
    "Sites",
    "prepare_sites",
    "locate",
    "annotated_fractions",
    "UNASSIGNED_COLUMN",
    "UNIT_TABLE_ORDER",
    "UnitSums",
    "unit_rows",
    "unit_sums",
    "unit_table",
    "level_summary",
    "tile_key",
    "tile_band_area_km2",
    "tile_polygons",
    "QUANTILES",
]

QUANTILES: tuple[int, ...] = (10, 25, 50, 75, 90)
"""Percentiles of per-unit F1 and count ratio in the summary (numpy's linear method)."""

UNASSIGNED_COLUMN = "n_pred_unassigned"
"""The one sum of a unit that is no family's: its predictions without a home (1 each)."""

UNIT_TABLE_ORDER: tuple[str, ...] = (
    "count_reference", "count_predicted", "count_tp", "count_fp", "count_fn", "count_fp_unassigned", "precision",
    "recall", "f1", "count_ratio", "count_error", "area_bias_ha", "tile_area_km2", "fp_per_km2",
)
"""SPEC 6.3's per-unit keys, in the order of the per-unit tables; the families' other unit
columns follow in registry order, then ``support`` and ``insufficient_support``."""


# --------------------------------------------------------------------------- site layers


@dataclass(frozen=True, eq=False)
class LayerInput:
    """An in-memory layer given as an option value (compared by identity, shown by size)."""

    frame: object

    def __repr__(self) -> str:
        return f"<in-memory layer of {len(self.frame)} rows>"


def layer_input(name: str, value: object) -> object:
    """Check an option naming a polygon layer: None, a path (str) or a GeoDataFrame/GeoSeries."""
    if value is None or isinstance(value, LayerInput):
        return value
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    if isinstance(value, (geopandas.GeoDataFrame, geopandas.GeoSeries)):
        return LayerInput(value)
    raise ValueError(f"{name} must be a path or a GeoDataFrame, but got {type(value).__name__}.")


def _pack_geometries(value: object) -> object:
    """A geometry array as its WKB (vectorised in GEOS: at national extent the site layers
    hold a million grid pieces, which pickle one object at a time in 12 s, as WKB in 1 s)."""
    if isinstance(value, np.ndarray) and value.dtype == object and len(value) and bool(np.all(shapely.is_geometry(value))):
        return _WkbArray(shapely.to_wkb(value))
    return value


@dataclass(frozen=True, slots=True)
class _WkbArray:
    """A geometry array in transit (pickled to a worker): WKB keeps every coordinate's bits."""

    wkb: np.ndarray

    def geometries(self) -> GeomArray:
        return np.asarray(shapely.from_wkb(self.wkb), dtype=object)


def _rebuild_site_layer(cls: type, values: tuple) -> object:
    return cls(*(v.geometries() if isinstance(v, _WkbArray) else v for v in values))


def _reduce_site_layer(self: object) -> tuple:
    return _rebuild_site_layer, (type(self), tuple(_pack_geometries(getattr(self, f.name)) for f in fields(self)))


@dataclass(frozen=True, slots=True)
class AoiLayer:
    """A prepared AOI layer.

    Attributes
    ----------
    id_column : str
    ids : ndarray of object
        Each AOI's id as read (input order).
    keys : list of str
        ``str(id)``: the AOI's key in the outputs.
    geoms_source : ndarray of shapely geometries
        Repaired polygons in ``crs``.
    geoms_ea : ndarray of shapely geometries
        The polygons in the equal-area CRS (edges split at 50 m before reprojection).
    crs : pyproj.CRS
    source : str
        What the layer is, for messages (``the AOI layer aoi.gpkg``).
    """

    id_column: str
    ids: np.ndarray
    keys: list[str]
    geoms_source: GeomArray
    geoms_ea: GeomArray
    crs: CRS
    source: str
    pieces: GeomArray | None = None
    piece_aoi: IdArray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    __reduce__ = _reduce_site_layer


@dataclass(frozen=True, slots=True)
class AnnotatedArea:
    """The prepared annotated-area polygons (SPEC 6.4), in the equal-area CRS."""

    geoms_ea: GeomArray
    source: str
    geoms_source: GeomArray | None = None
    crs: CRS | None = None
    pieces: GeomArray | None = None

    __reduce__ = _reduce_site_layer


@dataclass(frozen=True, slots=True)
class Sites:
    """Where rows are reported: the tile side and the optional AOI and annotated layers.

    Attributes
    ----------
    tile_size_m : float
        Side of the reporting tiles, metres.
    aois : AoiLayer or None
    annotated : AnnotatedArea or None
    """

    tile_size_m: float
    aois: AoiLayer | None = None
    annotated: AnnotatedArea | None = None


def _read_site_layer(value: object, layer: str | None, what: str) -> tuple[object, str]:
    if isinstance(value, LayerInput):
        return value.frame, f"the {what} (in memory)"
    from evalcore.io import read_layer

    frame = read_layer(value, layer=layer, role=what)
    return frame, f"the {what} {value}" + (f" (layer {layer!r})" if layer else "")


def _prepare_polygons(frame: object, where: str, equal_area_crs: object):
    """Repair, split and reproject a site layer like an input layer (SPEC 2); every row must survive."""
    from evalcore.prepare import prepare_layer

    try:
        layer = prepare_layer(frame, "site", equal_area_crs=equal_area_crs)
    except EvalInputError as exc:
        raise EvalInputError(f"{where}: {exc}") from None
    if layer.crs is None and layer.n_input:
        raise EvalInputError(f"{where} has no CRS; set one or fix the file's metadata.")
    return layer


def prepare_sites(options: object, equal_area_crs: object = None) -> Sites:
    """The site layers of a run from its options (``tile_km``, ``aoi``, ``annotated_area``).

    Raises
    ------
    EvalInputError
        An AOI layer without the id column (listing the columns), with duplicate or
        missing ids, with rows that are not polygons, or a site layer without a CRS; the
        message names the file and the rows.
    """
    tile = float(options.tile_km) * 1000.0
    aois = None
    if options.aoi is not None:
        if options.aoi_id_column is None:
            raise EvalInputError("an AOI layer needs its id column (--aoi-id-column / aoi_id_column).")
        frame, where = _read_site_layer(options.aoi, options.aoi_layer, "AOI layer")
        column = options.aoi_id_column
        if column not in getattr(frame, "columns", []):
            columns = [str(c) for c in frame.columns if c != frame.geometry.name]
            raise EvalInputError(f"{where} has no id column {column!r}; its columns are: {', '.join(map(repr, columns)) or '(none)'}.")
        if column == frame.geometry.name:
            columns = [str(c) for c in frame.columns if c != frame.geometry.name]
            raise EvalInputError(
                f"--aoi-id-column {column!r} is the geometry column of {where}, not an attribute; "
                f"choose one of: {', '.join(map(repr, columns)) or '(none)'}."
            )
        ids = frame[column]
        missing = np.flatnonzero(pd.isna(ids).to_numpy())
        if len(missing):
            raise EvalInputError(f"{where}: the id column {column!r} is missing at row {int(missing[0])}.")
        keys = [str(v) for v in ids.tolist()]
        seen: dict[str, int] = {}
        for row, key in enumerate(keys):
            if key in seen:
                raise EvalInputError(f"{where}: the id {key!r} of column {column!r} appears twice (rows {seen[key]} and {row}).")
            seen[key] = row
        if frame.crs is None and len(frame):
            raise EvalInputError(f"{where} has no CRS; set one or fix the file's metadata.")
        prepared = _prepare_polygons(frame, where, equal_area_crs)
        if prepared.n_dropped:
            dropped = np.setdiff1d(np.arange(prepared.n_input), prepared.positions)
            raise EvalInputError(
                f"{where}: row {int(dropped[0])} (id {keys[int(dropped[0])]!r}) is not a polygon with an area "
                f"({prepared.n_dropped} such rows); every AOI must be a polygon."
            )
        pieces, piece_aoi = [], []
        for k, geom in enumerate(prepared.geoms_ea):
            cut = grid_pieces(np.asarray([geom], dtype=object))
            pieces.append(cut)
            piece_aoi.append(np.full(len(cut), k, dtype=np.int64))
        aois = AoiLayer(column, np.asarray(ids.tolist(), dtype=object), keys, prepared.geoms_source,
                        prepared.geoms_ea, prepared.crs, where,
                        np.concatenate(pieces) if pieces else np.empty(0, dtype=object),
                        np.concatenate(piece_aoi) if piece_aoi else np.empty(0, dtype=np.int64))
    annotated = None
    if options.annotated_area is not None:
        frame, where = _read_site_layer(options.annotated_area, options.annotated_area_layer, "annotated-area layer")
        if frame.crs is None and len(frame):
            raise EvalInputError(f"{where} has no CRS; set one or fix the file's metadata.")
        prepared = _prepare_polygons(frame, where, equal_area_crs)
        annotated = AnnotatedArea(prepared.geoms_ea, where, prepared.geoms_source, prepared.crs, grid_pieces(prepared.geoms_ea))
    return Sites(tile, aois, annotated)


def _first_containing(geoms: GeomArray, points: GeomArray) -> IdArray:
    """Index of the first polygon (by position) containing each point; -1 for none."""
    out = np.full(len(points), -1, dtype=np.int64)
    if len(geoms) == 0 or len(points) == 0:
        return out
    tree = shapely.STRtree(geoms)
    point_idx, geom_idx = tree.query(points, predicate="within")
    return _first_of_each(point_idx, geom_idx, len(points))


def _first_of_each(point_idx: IdArray, geom_idx: IdArray, n: int) -> IdArray:
    """For (point, polygon) pairs, the lowest polygon index of each point (-1: none)."""
    out = np.full(n, -1, dtype=np.int64)
    if len(point_idx):
        order = np.lexsort((geom_idx, point_idx))
        p, g = point_idx[order], geom_idx[order]
        first = np.ones(len(p), dtype=bool)
        first[1:] = p[1:] != p[:-1]
        out[p[first]] = g[first]
    return out


def first_aoi(aois: AoiLayer, points: GeomArray) -> IdArray:
    """Index of the first AOI (by position) containing each point (-1: none).

    Tested against the AOIs' grid pieces (:func:`grid_pieces`), a few hundred vertices
    each, instead of polygons whose 50 m split edges hold millions; a point on a piece's
    edge (a grid line) is decided against its whole AOI, so the answer is the AOI's
    ``contains``.
    """
    if aois.pieces is None:
        return _first_containing(aois.geoms_ea, points)
    out = np.full(len(points), -1, dtype=np.int64)
    if len(aois.pieces) == 0 or len(points) == 0:
        return out
    tree = shapely.STRtree(aois.pieces)
    point_idx, piece_idx = tree.query(points, predicate="intersects")
    if not len(point_idx):
        return out
    aoi_idx = aois.piece_aoi[piece_idx]
    inside = shapely.within(points[point_idx], aois.pieces[piece_idx])
    edge = np.flatnonzero(~inside)
    if len(edge):
        inside[edge] = shapely.within(points[point_idx[edge]], aois.geoms_ea[aoi_idx[edge]])
    return _first_of_each(point_idx[inside], aoi_idx[inside], len(points))


GRID_CELL_M = 2_000.0
"""Side of the grid cells the annotated area and the AOIs are cut into, metres
(equal-area CRS): a prediction or a centroid is then tested against a few small pieces
instead of a polygon hundreds of kilometres long (the pieces partition the union, so
areas and memberships are the same)."""


def grid_pieces(geoms_ea: GeomArray, cell_m: float = GRID_CELL_M) -> GeomArray:
    """The union of some polygons cut into grid cells of ``cell_m`` (non-overlapping pieces):
    the annotated area's, or one AOI's.

    Cells inside the union are whole squares; the cells its boundary crosses are clipped.
    The clipping bisects the cells' range and clips the union to each half before going
    down (the geometry shrinks at every level), so the union's boundary is read about
    log(cells) times instead of once per boundary cell: at national extent (a million
    cells, millions of vertices) preparing the site layers took 24.0 s, now 7.8 s. The pieces are in row-major
    cell order (y, then x), whatever the recursion.
    """
    geoms = np.asarray([g for g in geoms_ea if g is not None and not g.is_empty], dtype=object)
    if len(geoms) == 0:
        return np.empty(0, dtype=object)
    union = shapely.union_all(geoms)
    minx, miny, maxx, maxy = union.bounds
    ix0, iy0 = int(np.floor(minx / cell_m)), int(np.floor(miny / cell_m))
    ix1, iy1 = int(np.ceil(maxx / cell_m)), int(np.ceil(maxy / cell_m))  # exclusive
    shapely.prepare(union)
    found: list[tuple[int, int, object]] = []  # clipped cells: (cell y, cell x, piece)
    whole: list[tuple[int, int, int, int]] = []  # cell ranges inside the union: x0, x1, y0, y1

    def rect(x0: int, x1: int, y0: int, y1: int) -> object:
        return shapely.box(x0 * cell_m, y0 * cell_m, x1 * cell_m, y1 * cell_m)

    def cut(part: object, x0: int, x1: int, y0: int, y1: int) -> None:
        box = rect(x0, x1, y0, y1)
        # Decided against the whole (prepared) union, as a cell was before: the same cells
        # are whole, clipped or absent.
        if not shapely.intersects(union, box):
            return
        if shapely.contains_properly(union, box):
            whole.append((x0, x1, y0, y1))
            return
        if x1 - x0 == 1 and y1 - y0 == 1:
            piece = shapely.clip_by_rect(part, x0 * cell_m, y0 * cell_m, x1 * cell_m, y1 * cell_m)
            if not piece.is_empty:
                found.append((y0, x0, piece))
            return
        if x1 - x0 >= y1 - y0:
            mid = (x0 + x1) // 2
            halves = ((x0, mid, y0, y1), (mid, x1, y0, y1))
        else:
            mid = (y0 + y1) // 2
            halves = ((x0, x1, y0, mid), (x0, x1, mid, y1))
        for a0, a1, b0, b1 in halves:
            sub = shapely.clip_by_rect(part, a0 * cell_m, b0 * cell_m, a1 * cell_m, b1 * cell_m)
            if not sub.is_empty:
                cut(sub, a0, a1, b0, b1)

    cut(union, ix0, max(ix1, ix0 + 1), iy0, max(iy1, iy0 + 1))
    cell_x = [np.array([x for _, x, _ in found], dtype=np.int64)]
    cell_y = [np.array([y for y, _, _ in found], dtype=np.int64)]
    pieces = [np.asarray([piece for _, _, piece in found], dtype=object).reshape(-1)]
    for x0, x1, y0, y1 in whole:
        gx, gy = np.meshgrid(np.arange(x0, x1, dtype=np.int64), np.arange(y0, y1, dtype=np.int64))
        cell_x.append(gx.ravel())
        cell_y.append(gy.ravel())
        pieces.append(shapely.box(gx.ravel() * cell_m, gy.ravel() * cell_m, (gx.ravel() + 1) * cell_m, (gy.ravel() + 1) * cell_m))
    xs, ys = np.concatenate(cell_x), np.concatenate(cell_y)
    return np.asarray(np.concatenate(pieces)[np.lexsort((xs, ys))], dtype=object)


def annotated_fractions(annotated: AnnotatedArea, geoms_ea: GeomArray, area_m2: F64Array) -> F64Array:
    """Share of each polygon's area inside the union of the annotated polygons (equal-area CRS)."""
    out = np.zeros(len(geoms_ea))
    pieces = annotated.pieces if annotated.pieces is not None else grid_pieces(annotated.geoms_ea)
    if len(pieces) == 0 or len(geoms_ea) == 0:
        return out
    tree = shapely.STRtree(pieces)
    row, cand = tree.query(geoms_ea, predicate="intersects")
    if not len(row):
        return out
    inside = np.zeros(len(geoms_ea))
    within = shapely.within(geoms_ea[row], pieces[cand])
    inside_area = np.where(within, area_m2[row], 0.0)
    clip = np.flatnonzero(~within)
    if len(clip):
        inside_area[clip] = shapely.area(shapely.intersection(geoms_ea[row[clip]], pieces[cand[clip]]))
    # The pieces do not overlap, so a polygon's annotated area is the sum over its pieces.
    inside = np.bincount(row, weights=inside_area, minlength=len(geoms_ea))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(area_m2 > 0, inside / area_m2, 0.0)
    return np.clip(out, 0.0, 1.0)


def locate(geoms_ea: GeomArray, area_m2: F64Array, sites: Sites | None, *, annotate: bool) -> tuple[IdArray, F64Array]:
    """Each row's AOI (-1: none) and annotated fraction (NaN without an annotated area).

    Parameters
    ----------
    geoms_ea : ndarray of shapely geometries
        The rows in the equal-area CRS; the AOI is that of the equal-area centroid.
    area_m2 : ndarray of float64
    sites : Sites or None
    annotate : bool
        Measure the annotated fraction (the predictions need it, the reference does not).
    """
    n = len(geoms_ea)
    aoi = np.full(n, -1, dtype=np.int64)
    fraction = np.full(n, np.nan)
    if sites is None:
        return aoi, fraction
    if sites.aois is not None and n:
        aoi = first_aoi(sites.aois, shapely.centroid(geoms_ea))
    if annotate and sites.annotated is not None:
        fraction = annotated_fractions(sites.annotated, geoms_ea, area_m2)
    return aoi, fraction


# --------------------------------------------------------------------------- sums per unit


@dataclass(frozen=True, slots=True)
class UnitSums:
    """Sums of some columns per unit, for the units that hold a row.

    Attributes
    ----------
    keys : ndarray of int64, shape (n_units, width)
        Unit keys, unique, in increasing lexicographic order: ``(epsg, tile x, tile y)``
        for tiles, ``(aoi index,)`` for AOIs.
    values : ndarray of float64, shape (n_units, len(columns))
    replicates : ndarray of float64, shape (n_units, n_replicates, len(replicate_columns)), optional
        Bootstrap replicate sums of ``replicate_columns`` (what the per-unit intervals need).
    columns : tuple of str
        The summed columns: the families' unit columns and :data:`UNASSIGNED_COLUMN`.
    replicate_columns : tuple of str
        The columns of ``replicates``.
    """

    keys: IdArray
    values: F64Array
    replicates: F64Array | None = None
    columns: tuple[str, ...] = ()
    replicate_columns: tuple[str, ...] = ()

    @staticmethod
    def empty(width: int, n_replicates: int | None = None, columns: tuple[str, ...] = (),
              replicate_columns: tuple[str, ...] = ()) -> UnitSums:
        reps = None if n_replicates is None else np.zeros((0, n_replicates, len(replicate_columns)))
        return UnitSums(np.empty((0, width), np.int64), np.empty((0, len(columns))), reps, columns, replicate_columns)

    @staticmethod
    def of_rows(keys: IdArray, values: F64Array, replicates: F64Array | None = None, columns: tuple[str, ...] = (),
                replicate_columns: tuple[str, ...] = ()) -> UnitSums:
        """Add rows per unit, in row order (rows with a key < 0 in column 0 belong to no unit).

        Parameters
        ----------
        keys : ndarray of int64, shape (n, width)
        values : ndarray of float64, shape (n, len(columns))
        replicates : ndarray of float64, shape (n, n_replicates, len(replicate_columns)), optional
            Per-row replicate values (already weighted by the row's draw counts).
        """
        keys = np.asarray(keys, dtype=np.int64)
        if keys.ndim == 1:
            keys = keys[:, None]
        keep = keys[:, 0] >= 0 if keys.shape[1] == 1 else np.ones(len(keys), dtype=bool)
        keys, values = keys[keep], values[keep]
        if replicates is not None:
            replicates = replicates[keep]
        width = keys.shape[1]
        if len(keys) == 0:
            return UnitSums.empty(width, None if replicates is None else replicates.shape[1], columns, replicate_columns)
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        out = np.zeros((len(unique), values.shape[1]))
        for j in range(values.shape[1]):
            # bincount adds each unit's rows in row order.
            out[:, j] = np.bincount(inverse, weights=values[:, j], minlength=len(unique))
        reps = None
        if replicates is not None:
            reps = np.zeros((len(unique),) + replicates.shape[1:])
            np.add.at(reps, inverse, replicates)
        return UnitSums(unique, out, reps, columns, replicate_columns)

    def merge(self, other: UnitSums) -> UnitSums:
        """The sums of both, unit by unit (self's rows first)."""
        return UnitSums.concat([self, other])

    @staticmethod
    def concat(parts: list[UnitSums]) -> UnitSums:
        """The sums of all parts, unit by unit, added in the order of ``parts``."""
        widths = {p.keys.shape[1] for p in parts}
        if len(widths) != 1:
            raise ValueError("unit sums of different kinds cannot merge")
        with_reps = {p.replicates is not None for p in parts}
        if len(with_reps) != 1:
            raise ValueError("unit sums with and without bootstrap replicates cannot merge")
        columns = {(p.columns, p.replicate_columns) for p in parts}
        if len(columns) != 1:
            raise IncompatibleStatsError(f"unit sums of different columns cannot merge: {sorted(columns)}")
        (names, rep_names), = columns
        reps = np.concatenate([p.replicates for p in parts]) if with_reps == {True} else None
        keys = np.concatenate([p.keys for p in parts])
        return UnitSums.of_rows(keys, np.concatenate([p.values for p in parts]), reps, names, rep_names)

    def column(self, name: str) -> F64Array:
        return self.values[:, self.columns.index(name)]


def unit_rows(columns: tuple[str, ...], table_columns: tuple[str, ...], table_values: F64Array,
              unassigned: bool = False) -> F64Array:
    """The unit ``columns`` of some rows: quantity rows, or the rows of predictions without a home.

    Parameters
    ----------
    columns : tuple of str
        The unit columns (the families' and :data:`UNASSIGNED_COLUMN`).
    table_columns : tuple of str
        The columns of ``table_values``; a unit column they lack is 0.
    table_values : ndarray of float64, shape (n, len(table_columns))
    unassigned : bool
        The rows are predictions without a home: :data:`UNASSIGNED_COLUMN` is 1 each.
    """
    col = {name: k for k, name in enumerate(table_columns)}
    out = np.zeros((len(table_values), len(columns)))
    for j, name in enumerate(columns):
        if name == UNASSIGNED_COLUMN:
            out[:, j] = 1.0 if unassigned else 0.0
        elif name in col:
            out[:, j] = table_values[:, col[name]]
    return out


def unit_sums(keys: IdArray, values: F64Array, weights: F64Array | None, columns: tuple[str, ...],
              replicate_columns: tuple[str, ...]) -> UnitSums:
    """Sums per unit of some rows, with bootstrap replicates when drawn.

    Parameters
    ----------
    keys : ndarray of int64, shape (n, width)
        Each row's unit: ``(epsg, tile x, tile y)``, or ``(aoi,)`` with -1 for none
        (those rows belong to no unit).
    values : ndarray of float64, shape (n, len(columns))
        The rows' unit columns (:func:`unit_rows`).
    weights : ndarray of float64, shape (n_replicates, n), optional
        How often each row is drawn in each replicate.
    columns, replicate_columns : tuple of str
        The unit columns, and those the replicates carry (a subset).
    """
    keys = np.asarray(keys, dtype=np.int64)
    keep = keys[:, 0] >= 0 if keys.shape[1] == 1 else np.ones(len(keys), dtype=bool)
    point = UnitSums.of_rows(keys[keep], values[keep], None, columns, replicate_columns)
    if weights is None:
        return point
    replicate_rows = np.ascontiguousarray(values[:, [columns.index(c) for c in replicate_columns]], dtype=np.float64)
    local = np.zeros(len(keys), dtype=np.int64)
    if len(point.keys) and keep.any():
        both = np.concatenate([point.keys, keys[keep]])
        _, inverse = np.unique(both, axis=0, return_inverse=True)
        local[keep] = np.asarray(inverse).ravel()[len(point.keys):]
    groups = np.where(keep, local + 1, -1).astype(np.int64)[:, None]
    # Group 0 of the kernel is every row (unused here); the units are groups 1...
    reps = replicate_group_sums(weights, replicate_rows, groups, len(point.keys) + 1).groups[1:]
    return UnitSums(point.keys, point.values, reps, columns, replicate_columns)


# --------------------------------------------------------------------------- per-unit values


def tile_key(epsg: int, x: int, y: int) -> str:
    """``"32613_7_-41"``: a tile's key in the outputs."""
    return f"{int(epsg)}_{int(x)}_{int(y)}"


def unit_table(sums: UnitSums, kind: str, *, families: tuple, options: object, min_support: int,
               tile_size_m: float | None = None, aois: AoiLayer | None = None) -> pd.DataFrame:
    """One row per unit with the values of SPEC 6.3.

    Parameters
    ----------
    sums : UnitSums
    kind : ``"tiles"`` or ``"aois"``
        Tiles are the units in ``sums``; AOIs are every AOI of ``aois`` (those holding
        nothing have zero counts and null rates).
    families : tuple of MetricFamily
        The run's enabled families: each gives its columns from the units' sums
        (:meth:`~evalcore.metrics.base.MetricFamily.unit_values`).
    options : EvalOptions
    min_support : int
    tile_size_m : float, optional
        For tiles: the side, metres (for ``fp_per_km2``).

    Returns
    -------
    pandas.DataFrame
        Columns ``epsg, tile_x, tile_y`` (tiles) or ``aoi`` (AOIs), then the keys of
        :data:`UNIT_TABLE_ORDER` (``tile_area_km2`` and ``fp_per_km2`` for tiles only),
        the families' other unit columns (the error taxonomy's counts), ``support``,
        ``insufficient_support``, and with replicates ``precision_ci_lower`` ...
        ``f1_ci_upper`` and their ``*_n_undefined`` (the families' unit interval keys).
    """
    if kind == "aois":
        n = len(aois) if aois is not None else 0
        values = np.zeros((n, len(sums.columns)))
        rows = sums.keys[:, 0] if len(sums.keys) else np.empty(0, np.int64)
        values[rows] = sums.values
        reps = None
        if sums.replicates is not None:
            reps = np.zeros((n,) + sums.replicates.shape[1:])
            reps[rows] = sums.replicates
        out = pd.DataFrame({"aoi": pd.array(aois.keys if aois is not None else [], dtype="string")})
    else:
        values = sums.values
        reps = sums.replicates
        out = pd.DataFrame({
            "epsg": sums.keys[:, 0].astype(np.int64),
            "tile_x": sums.keys[:, 1].astype(np.int64),
            "tile_y": sums.keys[:, 2].astype(np.int64),
        })
    v = {name: values[:, j] for j, name in enumerate(sums.columns)}
    columns: dict[str, np.ndarray] = {}
    for family in families:
        columns |= family.unit_values(v, options)
    columns["count_fp_unassigned"] = v[UNASSIGNED_COLUMN].astype(np.int64)
    if kind == "tiles":
        area_km2 = tile_band_area_km2(sums.keys, float(tile_size_m))
        columns["tile_area_km2"] = area_km2
        with np.errstate(divide="ignore", invalid="ignore"):
            columns["fp_per_km2"] = np.where(area_km2 > 0, columns["count_fp"] / area_km2, np.nan)
    order = [k for k in UNIT_TABLE_ORDER if k in columns] + [k for k in columns if k not in UNIT_TABLE_ORDER]
    for name in order:
        out[name] = columns[name]
    out["support"] = columns["count_reference"]
    out["insufficient_support"] = columns["count_reference"] < min_support
    if reps is not None:
        r = {name: reps[:, :, j] for j, name in enumerate(sums.replicate_columns)}
        rates = {}
        for family in families:
            keys = family.unit_interval_keys(options)
            if keys:
                replicated = family.unit_values(r, options)
                rates |= {k: replicated[k] for k in keys}
        alpha = (1.0 - BOOTSTRAP_CONFIDENCE_LEVEL) / 2.0
        for name, value in rates.items():
            # percentile_intervals' rule (quantiles over the replicates where the rate is
            # defined, NaN exactly where it is not), all units at once.
            lower = upper = np.full(len(out), np.nan)
            if value.size:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # units undefined in every replicate
                    lower, upper = np.nanquantile(value, [alpha, 1.0 - alpha], axis=1)
            out[f"{name}_ci_lower"] = np.asarray(lower, dtype=np.float64)
            out[f"{name}_ci_upper"] = np.asarray(upper, dtype=np.float64)
            out[f"{name}_ci_n_undefined"] = np.isnan(value).sum(axis=1).astype(np.int64) if value.size else np.zeros(len(out), np.int64)
    return out


def _null(value: float) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


def _unit_keys(table: pd.DataFrame, kind: str) -> list[str]:
    if kind == "aois":
        return [str(k) for k in table["aoi"].tolist()]
    return [tile_key(e, x, y) for e, x, y in zip(table["epsg"], table["tile_x"], table["tile_y"])]


def level_summary(table: pd.DataFrame, kind: str, *, tile_km: float | None = None,
                  aois: AoiLayer | None = None) -> dict[str, object]:
    """The ``tiles`` or ``aois`` block of the summary from a :func:`unit_table`.

    Micro pools the counts of the units; macro is the mean of the unit values where
    they are defined, with the number of units averaged; quantiles are numpy's linear
    percentiles over the units where the value is defined; ``worst`` is the unit with
    the lowest value among units with sufficient support (ties: the first unit in the
    table's order), null when none has enough.
    """
    from evalcore.summary import WORST_KEYS, worst_group

    tp = float(table["count_tp"].sum())
    fp = float(table["count_fp"].sum())
    n_ref = float(table["count_reference"].sum())
    # The tiles' and AOIs' F1 rule, as for each unit (evalcore.rates.F1_HARMONIC_POSITIVE).
    micro = dict(zip(("precision", "recall", "f1"), detection_rates(np.array([tp]), np.array([fp]), np.array([n_ref - tp]), f1=F1_HARMONIC_POSITIVE)))
    out: dict[str, object] = {}
    name = "tiles" if kind == "tiles" else "aois"
    with_ref = table["count_reference"].to_numpy() > 0
    if kind == "tiles":
        out["tile_km"] = float(tile_km)
        out["count_tiles"] = int(len(table))
        out["count_tiles_with_reference"] = int(with_ref.sum())
        out["count_tiles_without_reference"] = int((~with_ref).sum())
        free = table[~with_ref]
        free_area = float(free["tile_area_km2"].sum())
        out["fp_per_km2_reference_free"] = _null(float(free["count_fp"].sum()) / free_area) if free_area > 0 else None
    else:
        out["id_column"] = aois.id_column if aois is not None else None
        out["count_aois"] = int(len(table))
        out["count_aois_with_reference"] = int(with_ref.sum())
    has_fn = table["count_fn"].to_numpy() > 0
    out[f"fraction_{name}_with_fn"] = _null(float(has_fn[with_ref].mean())) if with_ref.any() else None
    out["micro"] = {k: _null(float(v[0])) for k, v in micro.items()}
    out["macro"] = {}
    for metric in WORST_KEYS:
        values = table[metric].to_numpy(np.float64)
        ok = ~np.isnan(values)
        out["macro"][metric] = {"value": _null(float(values[ok].mean())) if ok.any() else None, "n_units": int(ok.sum())}
    out["quantiles"] = {}
    for metric in ("f1", "count_ratio"):
        values = table[metric].to_numpy(np.float64)
        values = values[~np.isnan(values)]
        if len(values):
            qs = np.percentile(values, QUANTILES)
            out["quantiles"][metric] = {f"p{q}": float(v) for q, v in zip(QUANTILES, qs)}
        else:
            out["quantiles"][metric] = {f"p{q}": None for q in QUANTILES}
    keys = _unit_keys(table, kind)
    entries = {}
    for k, rec in zip(keys, table[list(WORST_KEYS) + ["support", "insufficient_support"]].to_dict("records")):
        entries[k] = {m: rec[m] for m in WORST_KEYS} | {"support": int(rec["support"]), "insufficient_support": bool(rec["insufficient_support"])}
    worst = worst_group(entries)
    if worst is not None:
        worst = {m: (None if w is None else {**w, "value": float(w["value"])}) for m, w in worst.items()}
    out["worst"] = worst
    return out


def aoi_entries(table: pd.DataFrame) -> dict[str, dict]:
    """``per_aoi``: every AOI's values keyed by id (rates null when undefined)."""
    return unit_entries(table, "aois")


def unit_entries(table: pd.DataFrame, kind: str) -> dict[str, dict]:
    """Every unit's values keyed like the outputs (an AOI's id, a tile's ``EPSG_x_y``), rates
    null when undefined and intervals as ``ci: {rate: [lower, upper]}`` (the layout of a group)."""
    out = {}
    keys = _unit_keys(table, kind)
    key_columns = ("aoi",) if kind == "aois" else ("epsg", "tile_x", "tile_y")
    for key, rec in zip(keys, table.drop(columns=[c for c in (*key_columns, "geometry") if c in table.columns]).to_dict("records")):
        entry = {}
        for k, v in rec.items():
            if isinstance(v, (bool, np.bool_)):
                entry[k] = bool(v)
            elif isinstance(v, (int, np.integer)):
                entry[k] = int(v)
            else:
                entry[k] = _null(float(v))
        ci = {m: [entry.pop(f"{m}_ci_lower"), entry.pop(f"{m}_ci_upper")] for m in ("precision", "recall", "f1") if f"{m}_ci_lower" in entry}
        if ci:
            entry["ci"] = ci
            undefined = {m: entry.pop(f"{m}_ci_n_undefined") for m in ci}
            undefined = {m: n for m, n in undefined.items() if n}
            if undefined:
                entry["ci_n_undefined"] = undefined
        out[key] = entry
    return out


# --------------------------------------------------------------------------- tile squares


def _zone_central_meridian(epsg: int) -> float:
    zone = int(epsg) % 100
    return -183.0 + 6.0 * zone


@functools.lru_cache(maxsize=256)
def _zone_band(epsg: int) -> shapely.Geometry:
    """The zone's 6° longitude band (all latitudes, no hemisphere test) in the zone's metres.

    The meridians are sampled every 0.05° of latitude (at most a few centimetres from
    the curved meridian between samples).
    """
    lon0 = _zone_central_meridian(epsg)
    lat = np.linspace(-90.0, 90.0, 3601)
    lon = np.concatenate([np.full(len(lat), lon0 - 3.0), np.full(len(lat), lon0 + 3.0)])
    lats = np.concatenate([lat, lat[::-1]])
    x, y = transform_xy(lon, lats, WGS84, utm_crs(int(epsg)))
    ring = np.column_stack([x, y])
    band = shapely.Polygon(ring)
    if not band.is_valid:
        band = shapely.make_valid(band)
    shapely.prepare(band)
    return band


def _squares(keys: IdArray, side_m: float) -> GeomArray:
    x0 = keys[:, 1].astype(np.float64) * side_m
    y0 = keys[:, 2].astype(np.float64) * side_m
    return shapely.box(x0, y0, x0 + side_m, y0 + side_m)


def _clipped_squares(keys: IdArray, side_m: float) -> GeomArray:
    """Each tile's square intersected with its zone's band, in the zone's metres."""
    out = np.empty(len(keys), dtype=object)
    for epsg in np.unique(keys[:, 0]) if len(keys) else []:
        rows = np.flatnonzero(keys[:, 0] == epsg)
        squares = _squares(keys[rows], side_m)
        band = _zone_band(int(epsg))
        inside = shapely.contains_properly(band, squares)
        clipped = squares.copy()
        edge = ~inside
        if edge.any():
            clipped[edge] = shapely.intersection(squares[edge], band)
        out[rows] = clipped
    return out


def tile_band_area_km2(keys: IdArray, side_m: float) -> F64Array:
    """Area of each tile square inside its zone's 6° band, planar in the zone's CRS, km²."""
    if len(keys) == 0:
        return np.empty(0)
    return shapely.area(_clipped_squares(keys, side_m)) / 1e6


def tile_polygons(keys: IdArray, side_m: float, spacing_m: float = 500.0) -> GeomArray:
    """Each tile's square (inside its zone's band) in EPSG:4326, edges densified at ``spacing_m``."""
    out = np.empty(len(keys), dtype=object)
    clipped = _clipped_squares(keys, side_m)
    for epsg in np.unique(keys[:, 0]) if len(keys) else []:
        rows = np.flatnonzero(keys[:, 0] == epsg)
        dense = shapely.segmentize(clipped[rows], spacing_m)
        out[rows] = shapely.transform(dense, lambda xy, e=int(epsg): np.column_stack(transform_xy(xy[:, 0], xy[:, 1], utm_crs(e), WGS84)))
    return out


def tiles_frame(table: pd.DataFrame, tile_size_m: float) -> geopandas.GeoDataFrame:
    """The per-tile table as a GeoDataFrame in EPSG:4326 (for ``--tiles-out``)."""
    keys = table[["epsg", "tile_x", "tile_y"]].to_numpy(np.int64)
    return geopandas.GeoDataFrame(table.reset_index(drop=True), geometry=tile_polygons(keys, tile_size_m), crs="EPSG:4326")


def aois_frame(table: pd.DataFrame, aois: AoiLayer) -> geopandas.GeoDataFrame:
    """The per-AOI table with every AOI's polygon in the AOI layer's CRS (for ``--aois-out``)."""
    frame = table.rename(columns={"aoi": aois.id_column}).reset_index(drop=True)
    frame[aois.id_column] = aois.ids
    return geopandas.GeoDataFrame(frame, geometry=aois.geoms_source, crs=aois.crs)

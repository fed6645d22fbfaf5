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

* the site layers as levels use them (:class:`Sites`: the tile side, the AOI layer
  and the annotated area of SPEC 6.4, read and prepared by :mod:`evalcore.sites`) and
  where each row lies in them (:func:`locate`);
* :class:`UnitSums` and how they are built from quantity rows and homeless predictions
  (whose columns it does not name: they come with the rows);
* the per-unit tables (:func:`unit_table`; their JSON blocks ``tiles`` and ``aois`` are
  laid out by :func:`evalcore.summary.level_summary`);
* the tile squares: their area inside the zone's 6° band and their polygon in EPSG:4326.

The module stays whole at about 620 lines: the site layers as levels use them, where
rows lie in them, the unit sums and the per-unit tables are the steps of the one idea of
a unit, each short.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd
import shapely
from pyproj import CRS

from evalcore._typing import F64Array, GeomArray, IdArray
from evalcore.bootstrap import WeightBlocks, replicate_unit_sums
from evalcore.config import BOOTSTRAP_CONFIDENCE_LEVEL
from evalcore.crs import WGS84, transform_xy, utm_crs
from evalcore.site_cells import CellPieces, cell_key, cells_near, cut_layer
from evalcore.sites import ANNOTATED_AREA, AOI, GRID_CELL_M, grid_pieces, prepare_site_layer
from evalcore.errors import EvalInputError, IncompatibleStatsError
from evalcore.exact import N_DIGITS, value_of
from evalcore.rates import F1_HARMONIC_POSITIVE, detection_rates
from evalcore.stats import digit_group_sums, exact_group_sums
from evalcore.zone_band import band_area_m2, zone_band

__all__ = [
    "AoiLayer",
    "zone_band",
    "AnnotatedArea",
    "Sites",
    "prepare_sites",
    "locate",
    "annotated_fractions",
    "overlapping_aois",
    "UNASSIGNED_COLUMN",
    "UNIT_TABLE_ORDER",
    "UnitSums",
    "UnitSumsAdder",
    "BlockedReplicates",
    "replicate_rows",
    "unit_rows",
    "unit_sums",
    "unit_table",
    "tile_key",
    "tile_band_area_km2",
    "tile_polygons",
]

UNASSIGNED_COLUMN = "n_pred_unassigned"
"""The one sum of a unit that is no family's: its predictions without a home (1 each)."""

UNIT_TABLE_ORDER: tuple[str, ...] = (
    "count_reference", "count_predicted", "count_tp", "count_fp", "count_fn", "count_fp_unassigned", "precision",
    "recall", "f1", "count_ratio", "count_error", "area_bias_ha", "tile_area_km2", "fp_per_km2",
)
"""SPEC 6.3's per-unit keys, in the order of the per-unit tables; the families' other unit
columns follow in registry order, then ``support`` and ``insufficient_support``."""


# --------------------------------------------------------------------------- site layers


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
        What the layer is, for messages (``AOI layer file 'aoi.gpkg'``).
    pieces, piece_aoi : ndarray, optional
        Every AOI's grid pieces (:func:`evalcore.sites.grid_pieces`, concatenated in AOI
        order) and the AOI of each; None when ``cells`` holds them.
    cells : CellPieces, optional
        The pieces as a cell index and a store of boundary pieces
        (:mod:`evalcore.site_cells`): lookups read the pieces of their rows' extent only.
    overlaps : tuple of (int, int), optional
        :func:`overlapping_aois`, found when the pieces were cut (with ``cells``).
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
    cells: CellPieces | None = None
    overlaps: tuple[tuple[int, int], ...] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    __reduce__ = _reduce_site_layer


@dataclass(frozen=True, slots=True)
class AnnotatedArea:
    """The prepared annotated-area polygons (SPEC 6.4), in the equal-area CRS.

    ``pieces`` are the union's grid pieces, cut into cells of ``cell_m`` metres; or
    ``cells`` holds them (:mod:`evalcore.site_cells`, with its own cell size).
    """

    geoms_ea: GeomArray
    source: str
    geoms_source: GeomArray | None = None
    crs: CRS | None = None
    pieces: GeomArray | None = None
    cells: CellPieces | None = None
    cell_m: float = GRID_CELL_M

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

    def kept_on_client(self) -> Sites:
        """The site layers as a distributed run's client keeps them: the AOIs' ids, keys,
        source polygons (the AOI output layer's) and overlaps, the annotated area's source
        polygons (the pixel tasks' valid mask) and the cell indexes; without the equal-area
        polygons, which only the workers' lookups read (millions of vertices at a country's
        extent: 4.8 million for the 10M benchmark's annotated area).

        Only for layers cut into a cell index (:func:`prepare_sites` with a store): the
        lookups of layers held as pieces fall back on the equal-area polygons.
        """
        if any(layer is not None and layer.cells is None for layer in (self.aois, self.annotated)):
            raise ValueError("only site layers cut into a cell index (prepare_sites with a store) can drop their equal-area polygons")
        aois = replace(self.aois, geoms_ea=None) if self.aois is not None else None
        annotated = replace(self.annotated, geoms_ea=None) if self.annotated is not None else None
        return Sites(self.tile_size_m, aois, annotated)

    @staticmethod
    def joined(aois_part: Sites, annotated_part: Sites) -> Sites:
        """The AOIs of one and the annotated area of the other (:func:`prepare_sites` of one
        kind each, made side by side on two workers)."""
        if aois_part.tile_size_m != annotated_part.tile_size_m:
            raise ValueError("the two parts of the site layers were made for different tile sizes")
        return Sites(aois_part.tile_size_m, aois_part.aois, annotated_part.annotated)


def prepare_sites(options: object, equal_area_crs: object = None, store: str | os.PathLike | None = None,
                  kinds: tuple[str, ...] = ("aoi", "annotated_area")) -> Sites:
    """The site layers of a run from its options (``tile_km``, ``aoi``, ``annotated_area``).

    Each layer is read, checked and prepared by :func:`evalcore.sites.prepare_site_layer`,
    then cut into grid pieces (:func:`evalcore.sites.grid_pieces`) for lookups.

    Parameters
    ----------
    options : EvalOptions
    equal_area_crs : CRS-like, optional
    store : path, optional
        A directory (the distributed run's ``workdir/sites``): the pieces are then kept as
        a cell index with the boundary pieces written there (:mod:`evalcore.site_cells`),
        not held whole, and each lookup reads the pieces of its rows' extent.
    kinds : tuple of str
        The layers to prepare, by option name (``"aoi"``, ``"annotated_area"``); the others
        are None. A cluster run prepares each on its own task (:meth:`Sites.joined`).

    Raises
    ------
    EvalInputError
        An AOI layer without the id column (listing the columns), with duplicate or
        missing ids, with rows that are not polygons, or a site layer without a CRS; the
        message names the file and the rows.
    """
    tile = float(options.tile_km) * 1000.0
    unknown = set(kinds) - {AOI.option, ANNOTATED_AREA.option}
    if unknown:
        raise ValueError(f"unknown site layer kinds {sorted(unknown)}: give 'aoi' and/or 'annotated_area'")
    aoi_layer, annotated_layer = (prepare_site_layer(options, kind, equal_area_crs) if kind.option in kinds else None
                                  for kind in (AOI, ANNOTATED_AREA))
    if store is not None:
        return _stored_sites(aoi_layer, annotated_layer, Path(store), tile)
    aois = annotated = None
    if aoi_layer is not None:
        layer = aoi_layer
        pieces, piece_aoi = [], []
        for k, geom in enumerate(layer.geoms_ea):
            cut = grid_pieces(np.asarray([geom], dtype=object))
            pieces.append(cut)
            piece_aoi.append(np.full(len(cut), k, dtype=np.int64))
        aois = AoiLayer(layer.id_column, layer.ids, layer.keys, layer.geoms_source, layer.geoms_ea, layer.crs, layer.source,
                        np.concatenate(pieces) if pieces else np.empty(0, dtype=object),
                        np.concatenate(piece_aoi) if piece_aoi else np.empty(0, dtype=np.int64))
    if annotated_layer is not None:
        layer = annotated_layer
        annotated = AnnotatedArea(layer.geoms_ea, layer.source, layer.geoms_source, layer.crs, grid_pieces(layer.geoms_ea))
    return Sites(tile, aois, annotated)


def _stored_sites(aoi_layer: object, annotated_layer: object, store: Path, tile: float) -> Sites:
    """:func:`prepare_sites` of prepared layers with the pieces as cell indexes and boundary pieces in ``store``."""
    aois = annotated = None
    if aoi_layer is not None:
        layer = aoi_layer
        cells = cut_layer([np.asarray([g], dtype=object) for g in layer.geoms_ea])
        overlaps = _cell_overlaps(cells)
        aois = AoiLayer(layer.id_column, layer.ids, layer.keys, layer.geoms_source, layer.geoms_ea, layer.crs, layer.source,
                        None, None, cells.without_geometry(store / "aoi"), overlaps)
    if annotated_layer is not None:
        layer = annotated_layer
        cells = cut_layer([layer.geoms_ea])
        annotated = AnnotatedArea(layer.geoms_ea, layer.source, layer.geoms_source, layer.crs, None, cells.without_geometry(store / "annotated"))
    return Sites(tile, aois, annotated)


_OVERLAP_BLOCK = 64
"""Cells per side of the blocks the AOI overlaps are found in (pieces of different cells never overlap)."""


def _cell_overlaps(cells: CellPieces) -> tuple[tuple[int, int], ...]:
    """:func:`overlapping_aois` from a cell index, block of cells by block, only where two AOIs share a cell.

    Two pieces of different cells share at most an edge, so the overlaps are the union
    of each block's; blocks where one AOI holds every cell are skipped.
    """
    x0, x1, y0, y1 = cells.bounds_cells()
    found: set[tuple[int, int]] = set()
    w = cells.whole
    for by in range(y0, y1, _OVERLAP_BLOCK):
        for bx in range(x0, x1, _OVERLAP_BLOCK):
            box = (bx, min(bx + _OVERLAP_BLOCK, x1), by, min(by + _OVERLAP_BLOCK, y1))
            in_box = (cells.x >= box[0]) & (cells.x < box[1]) & (cells.y >= box[2]) & (cells.y < box[3])
            meets = (w[:, 0] < box[1]) & (w[:, 1] > box[0]) & (w[:, 2] < box[3]) & (w[:, 3] > box[2])
            if len(np.unique(np.concatenate([cells.owner[in_box], w[meets, 4]]))) < 2:
                continue
            pieces, owner = cells.pieces_in(box)
            found.update(_overlap_pairs(pieces, owner))
    return tuple(sorted(found))


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
    if aois.cells is not None and len(points):
        # A point strictly inside a whole cell that no other AOI's piece shares is answered
        # by the cell index; the others are tested against the pieces of their extent.
        cell_m = aois.cells.cell_m
        present = ~shapely.is_empty(points)  # an empty point is in no AOI
        xy = np.full((len(points), 2), np.nan)
        xy[present] = shapely.get_coordinates(points[present])
        cx, cy, strict = _strict_cells(xy, cell_m)
        out = np.full(len(points), -1, dtype=np.int64)
        out[strict] = aois.cells.sole_owner(cx[strict], cy[strict])
        rest = np.flatnonzero((out < 0) & present)
        if len(rest):
            pieces, owner = aois.cells.pieces_in(*cells_near(np.concatenate([xy[rest], xy[rest]], axis=1), cell_m))
            out[rest] = first_aoi(replace(aois, pieces=pieces, piece_aoi=owner, cells=None), points[rest])
        return out
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


def _strict_cells(xy: F64Array, cell_m: float) -> tuple[IdArray, IdArray, np.ndarray]:
    """Each point's grid cell, and whether it lies strictly inside it (not on a grid line;
    a NaN coordinate, an empty point's, is inside no cell). The cell's edges are computed
    as :func:`evalcore.sites.cell_boxes` builds the squares.
    """
    finite = np.isfinite(xy).all(axis=1)
    with np.errstate(invalid="ignore"):
        cx = np.where(finite, np.floor(xy[:, 0] / cell_m), 0).astype(np.int64)
        cy = np.where(finite, np.floor(xy[:, 1] / cell_m), 0).astype(np.int64)
    strict = finite & (cx * cell_m < xy[:, 0]) & (xy[:, 0] < (cx + 1) * cell_m) & (cy * cell_m < xy[:, 1]) & (xy[:, 1] < (cy + 1) * cell_m)
    return cx, cy, strict


def overlapping_aois(aois: AoiLayer) -> list[tuple[int, int]]:
    """The pairs of AOIs whose interiors meet (an area in common, not only an edge).

    A row in such an overlap counts in the first of them by position
    (:func:`first_aoi`), so the later one's counts leave it out; the run says so once
    (:func:`evalcore.layer_warnings.aoi_overlap_warning`).

    Parameters
    ----------
    aois : AoiLayer

    Returns
    -------
    list of (int, int)
        ``(i, j)`` with ``i < j`` (positions in the layer), sorted by ``i`` then ``j``.

    Notes
    -----
    Tested on the AOIs' grid pieces when they have them (a few hundred vertices each;
    the pieces of one AOI do not overlap each other), so that AOIs of millions of
    vertices are not intersected whole.
    """
    if aois.overlaps is not None:
        return list(aois.overlaps)
    geoms, owner = (aois.pieces, aois.piece_aoi) if aois.pieces is not None else (aois.geoms_ea, np.arange(len(aois.geoms_ea)))
    return _overlap_pairs(geoms, owner)


def _overlap_pairs(geoms: GeomArray, owner: IdArray) -> list[tuple[int, int]]:
    """The pairs of owners (``i < j``, sorted) of two polygons whose interiors meet."""
    if len(geoms) < 2:
        return []
    a, b = shapely.STRtree(geoms).query(geoms, predicate="intersects")
    keep = owner[a] < owner[b]
    a, b = a[keep], b[keep]
    if not len(a):
        return []
    inner = ~shapely.touches(geoms[a], geoms[b])  # sharing only an edge or a corner is no overlap
    pairs = np.unique(np.stack([owner[a[inner]], owner[b[inner]]], axis=1).reshape(-1, 2), axis=0)
    return [(int(i), int(j)) for i, j in pairs]


def annotated_fractions(annotated: AnnotatedArea, geoms_ea: GeomArray, area_m2: F64Array) -> F64Array:
    """Share of each polygon's area inside the union of the annotated polygons (equal-area CRS).

    A polygon's pieces are summed in piece order (row-major cells), not in the order the
    tree finds them, so that the answer is the same from the pieces of any extent holding
    the polygon (:mod:`evalcore.site_cells`). A polygon whose box lies strictly inside a
    range of cells that are all full squares of the union is wholly annotated: 1 exactly,
    without geometry (its pieces' intersection areas summed were 1 give or take their
    rounding, e.g. 0.9999999999999996, for a prediction across a grid line).
    """
    out = np.zeros(len(geoms_ea))
    if len(geoms_ea) == 0:
        return out
    if annotated.cells is not None:
        # A polygon strictly inside whole cells is wholly annotated: the cell index answers
        # it, without geometry (the pieces below would give the same 1).
        cell_m = annotated.cells.cell_m
        bounds = shapely.bounds(geoms_ea)
        cx, cy, low = _strict_cells(bounds[:, :2], cell_m)
        hx, hy, high = _strict_cells(bounds[:, 2:], cell_m)
        inner = low & high & (area_m2 > 0)
        inner[inner] = annotated.cells.range_state(cx[inner], hx[inner] + 1, cy[inner], hy[inner] + 1) == 1
        out[inner] = 1.0
        rest = np.flatnonzero(~inner & ~shapely.is_empty(geoms_ea))  # an empty polygon has no annotated area
        if len(rest):
            out[rest] = annotated_fractions(replace(annotated, cells=None, pieces=annotated.cells.pieces_in(
                *cells_near(bounds[rest], cell_m))[0], cell_m=cell_m), geoms_ea[rest], area_m2[rest])
        return out
    cell_m = annotated.cell_m
    pieces = annotated.pieces if annotated.pieces is not None else grid_pieces(annotated.geoms_ea, cell_m)
    if len(pieces) == 0:
        return out
    tree = shapely.STRtree(pieces)
    row, cand = tree.query(geoms_ea, predicate="intersects")
    if not len(row):
        return out
    covered = _in_full_cells(geoms_ea, area_m2, pieces[_full_squares(pieces, cell_m)], cell_m)
    keep = ~covered[row]
    row, cand = row[keep], cand[keep]
    order = np.lexsort((cand, row))
    row, cand = row[order], cand[order]
    inside = np.zeros(len(geoms_ea))
    within = shapely.within(geoms_ea[row], pieces[cand])
    inside_area = np.where(within, area_m2[row], 0.0)
    clip = np.flatnonzero(~within)
    if len(clip):
        inside_area[clip] = shapely.area(shapely.intersection(geoms_ea[row[clip]], pieces[cand[clip]]))
    # The pieces do not overlap, so a polygon's annotated area is the sum over its pieces.
    inside = np.bincount(row, weights=inside_area, minlength=len(geoms_ea))
    with np.errstate(divide="ignore", invalid="ignore"):
        measured = np.where(area_m2 > 0, inside / area_m2, 0.0)
    return np.where(covered, 1.0, np.clip(measured, 0.0, 1.0))


def _full_squares(pieces: GeomArray, cell_m: float) -> np.ndarray:
    """Whether each grid piece is its whole cell: a polygon of the four corners of a cell of
    ``cell_m`` and nothing else (a whole cell's square, or a clipped cell the union covers)."""
    pieces = np.asarray(pieces, dtype=object)
    out = np.zeros(len(pieces), dtype=bool)
    candidates = np.flatnonzero((shapely.get_type_id(pieces) == int(shapely.GeometryType.POLYGON))
                                & (shapely.get_num_interior_rings(pieces) == 0) & (shapely.get_num_coordinates(pieces) == 5))
    if not len(candidates):
        return out
    corners = shapely.get_coordinates(pieces[candidates]).reshape(-1, 5, 2)[:, :4]
    b = shapely.bounds(pieces[candidates])
    x0, y0 = np.floor(b[:, 0] / cell_m), np.floor(b[:, 1] / cell_m)
    # The cell's edges as evalcore.sites.cell_boxes computes them.
    cell = np.stack([x0 * cell_m, y0 * cell_m, (x0 + 1) * cell_m, (y0 + 1) * cell_m], axis=1)
    on_x = (corners[:, :, 0] == cell[:, None, 0]) | (corners[:, :, 0] == cell[:, None, 2])
    on_y = (corners[:, :, 1] == cell[:, None, 1]) | (corners[:, :, 1] == cell[:, None, 3])
    # Four corners of the cell, each once: the square (a valid piece cannot be a bow-tie).
    code = (corners[:, :, 0] == cell[:, None, 2]).astype(np.int64) * 2 + (corners[:, :, 1] == cell[:, None, 3])
    distinct = np.sort(code, axis=1) == np.arange(4)
    out[candidates] = (on_x & on_y).all(axis=1) & distinct.all(axis=1)
    return out


def _in_full_cells(geoms_ea: GeomArray, area_m2: F64Array, full: GeomArray, cell_m: float) -> np.ndarray:
    """Whether each polygon's box lies strictly inside a range of cells that are each one of the
    ``full`` squares (pieces that are their whole cell, :func:`_full_squares`).

    Such a polygon lies inside the union, wherever in the range it is (it need not touch
    every cell of its box). Each range's cells are looked up one by one: a field spans a
    few cells, and nothing here depends on the extent of the pieces given.
    """
    bounds = shapely.bounds(geoms_ea)
    cx, cy, low = _strict_cells(bounds[:, :2], cell_m)
    hx, hy, high = _strict_cells(bounds[:, 2:], cell_m)
    out = low & high & (area_m2 > 0)
    if not len(full) or not out.any():
        return np.zeros(len(geoms_ea), dtype=bool)
    fb = shapely.bounds(full)
    known = np.sort(cell_key(np.floor(fb[:, 0] / cell_m).astype(np.int64), np.floor(fb[:, 1] / cell_m).astype(np.int64)))
    rows = np.flatnonzero(out)
    width, height = hx[rows] - cx[rows] + 1, hy[rows] - cy[rows] + 1
    size = width * height
    which = np.repeat(np.arange(len(rows)), size)
    k = np.arange(len(which)) - np.repeat(np.cumsum(size) - size, size)  # each cell's index within its range
    keys = cell_key(cx[rows][which] + k % width[which], cy[rows][which] + k // width[which])
    at = np.minimum(np.searchsorted(known, keys), len(known) - 1)
    missing = np.bincount(which, weights=(known[at] != keys).astype(np.float64), minlength=len(rows))
    out[rows] = missing == 0
    return out


def locate(geoms_ea: GeomArray, area_m2: F64Array, sites: Sites | None, *, annotate: bool,
           centroids_ea: GeomArray | None = None) -> tuple[IdArray, F64Array]:
    """Each row's AOI (-1: none) and annotated fraction (NaN without an annotated area).

    Parameters
    ----------
    geoms_ea : ndarray of shapely geometries
        The rows in the equal-area CRS; the AOI is that of the equal-area centroid.
    area_m2 : ndarray of float64
    sites : Sites or None
    annotate : bool
        Measure the annotated fraction (the predictions need it, the reference does not).
    centroids_ea : ndarray of shapely Points, optional
        ``shapely.centroid(geoms_ea)`` when the caller has it (the preparation does).
    """
    n = len(geoms_ea)
    aoi = np.full(n, -1, dtype=np.int64)
    fraction = np.full(n, np.nan)
    if sites is None:
        return aoi, fraction
    if sites.aois is not None and n:
        aoi = first_aoi(sites.aois, shapely.centroid(geoms_ea) if centroids_ea is None else centroids_ea)
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
    digits : ndarray of float64, shape (n_units, len(columns), N_DIGITS)
        The exact digit sums (:mod:`evalcore.exact`): a unit whose fields lie in several
        partitions gets the same sums whatever the partitioning.
    replicates : ndarray of float64, shape (n_units, n_replicates, len(replicate_columns)), optional
        Bootstrap replicate sums of ``replicate_columns`` (what the per-unit intervals need).
    columns : tuple of str
        The summed columns: the families' unit columns and :data:`UNASSIGNED_COLUMN`.
    replicate_columns : tuple of str
        The columns of ``replicates``.
    """

    keys: IdArray
    digits: F64Array
    replicates: F64Array | None = None
    columns: tuple[str, ...] = ()
    replicate_columns: tuple[str, ...] = ()
    _values: list = field(default_factory=list, init=False, repr=False, compare=False)

    @property
    def values(self) -> F64Array:
        """ndarray of float64, shape (n_units, len(columns)): each sum correctly rounded."""
        if not self._values:
            self._values.append(value_of(self.digits))
        return self._values[0]

    @staticmethod
    def empty(width: int, n_replicates: int | None = None, columns: tuple[str, ...] = (),
              replicate_columns: tuple[str, ...] = ()) -> UnitSums:
        reps = None if n_replicates is None else np.zeros((0, n_replicates, len(replicate_columns)))
        return UnitSums(np.empty((0, width), np.int64), np.empty((0, len(columns), N_DIGITS)), reps, columns, replicate_columns)

    @staticmethod
    def of_rows(keys: IdArray, values: F64Array, replicates: F64Array | None = None, columns: tuple[str, ...] = (),
                replicate_columns: tuple[str, ...] = ()) -> UnitSums:
        """Add rows per unit (rows with a key < 0 in column 0 belong to no unit).

        Parameters
        ----------
        keys : ndarray of int64, shape (n, width)
        values : ndarray of float64, shape (n, len(columns))
        replicates : ndarray of float64, shape (n, n_replicates, len(replicate_columns)), optional
            Per-row replicate values (already weighted by the row's draw counts).
        """
        values = np.asarray(values, dtype=np.float64).reshape(len(keys), len(columns))
        return UnitSums._summed(keys, values, replicates, columns, replicate_columns, exact_group_sums)

    @staticmethod
    def _summed(keys: IdArray, rows: F64Array, replicates: F64Array | None, columns: tuple[str, ...],
                replicate_columns: tuple[str, ...], group_sums_of: object) -> UnitSums:
        """Unit sums of ``rows`` (floats, or digits) by ``group_sums_of(rows, [unit of row], n_units)``."""
        keys = np.asarray(keys, dtype=np.int64)
        if keys.ndim == 1:
            keys = keys[:, None]
        keep = keys[:, 0] >= 0 if keys.shape[1] == 1 else np.ones(len(keys), dtype=bool)
        keys, rows = keys[keep], rows[keep]
        if replicates is not None:
            replicates = replicates[keep]
        width = keys.shape[1]
        if len(keys) == 0:
            return UnitSums.empty(width, None if replicates is None else replicates.shape[1], columns, replicate_columns)
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        out = group_sums_of(rows, [inverse], len(unique))
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
        """The sums of all parts, unit by unit (exact sums: any order gives the same; replicates in the order of ``parts``)."""
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
        return UnitSums._summed(keys, np.concatenate([p.digits for p in parts]), reps, names, rep_names, digit_group_sums)

    def column(self, name: str) -> F64Array:
        return self.values[:, self.columns.index(name)]


class UnitSumsAdder:
    """:class:`UnitSums` added one part after another, each unit's sums held once.

    ``UnitSums.concat(parts)`` holds every part until the end: a country's partitions each
    carry their tiles' bootstrap replicates (units x replicates x columns), and a tile that
    several partitions share is held once per partition. Here the units are known ahead
    (the parts' keys, a few numbers each), one row per unit is made in key order, and each
    part is added into its rows as it arrives and can be let go: what is held is the
    total, not the parts, and the total needs no copy at the end.

    The result is :meth:`UnitSums.concat` of the same parts, to the last bit: a unit's
    replicates are added in the order the parts arrive, starting from zero, as
    ``concat``'s ``np.add.at`` does over the concatenated rows; digit sums are exact in
    any order.

    Parameters
    ----------
    first : UnitSums
        The first part (often :meth:`UnitSums.empty`): it fixes the key width, the
        columns and whether replicates are carried.
    keys : ndarray of int64, shape (n, width)
        Every unit the parts will hold (repeats allowed). A part holding another unit is
        refused; a unit no part held is left out of the total.
    """

    def __init__(self, first: UnitSums, keys: IdArray) -> None:
        width = first.keys.shape[1]
        self._width = width
        self._columns = (first.columns, first.replicate_columns)
        self._with_reps = first.replicates is not None
        keys = np.asarray(keys, dtype=np.int64).reshape(-1, width)
        self._keys = np.unique(keys, axis=0) if len(keys) else keys
        self._row: dict[tuple[int, ...], int] = {key: i for i, key in enumerate(map(tuple, self._keys.tolist()))}
        self._touched = np.zeros(len(self._keys), dtype=bool)
        self._digits = np.zeros((len(self._keys),) + first.digits.shape[1:])
        self._reps = np.zeros((len(self._keys),) + first.replicates.shape[1:]) if self._with_reps else None
        self.add(first)

    def add(self, part: UnitSums) -> None:
        """Add ``part`` (its units are unique, as every :class:`UnitSums`'s)."""
        if part.keys.shape[1] != self._width:
            raise ValueError("unit sums of different kinds cannot merge")
        if (part.replicates is not None) != self._with_reps:
            raise ValueError("unit sums with and without bootstrap replicates cannot merge")
        if (part.columns, part.replicate_columns) != self._columns:
            raise IncompatibleStatsError(
                f"unit sums of different columns cannot merge: {sorted({self._columns, (part.columns, part.replicate_columns)})}"
            )
        rows = np.empty(len(part.keys), dtype=np.int64)
        for i, key in enumerate(map(tuple, part.keys.tolist())):
            if key not in self._row:
                raise ValueError(f"unit {key} is not among the units declared ahead")
            rows[i] = self._row[key]
        self._touched[rows] = True
        # Rows are distinct within a part, so a fancy-indexed += adds each once. It copies
        # the rows it reads: a block of units at a time keeps that copy small when a part
        # holds every unit (the homeless predictions' replicates touch all of a country's tiles).
        for start in range(0, len(rows), UNITS_PER_BLOCK):
            block = rows[start : start + UNITS_PER_BLOCK]
            self._digits[block] += part.digits[start : start + UNITS_PER_BLOCK]
            if self._reps is not None:
                self._reps[block] += part.replicates[start : start + UNITS_PER_BLOCK]

    def total(self) -> UnitSums:
        """The sums of every part added, units in increasing key order."""
        if self._touched.all():
            return UnitSums(self._keys, self._digits, self._reps, *self._columns)
        held = np.flatnonzero(self._touched)
        return UnitSums(self._keys[held], self._digits[held], None if self._reps is None else self._reps[held], *self._columns)


@dataclass(frozen=True)
class BlockedReplicates:
    """Many units' bootstrap replicate sums, made a block of units at a time when read.

    :class:`UnitSumsAdder` holds every unit's replicates at once (units x replicates x
    columns: 83 MB for the 2,606 tiles of a 2M-field run at 1000 replicates, twice that at
    4M) although they are only read a block of units at a time, for the units' intervals.
    This holds what makes them instead: each part's unit keys, a way to read a part's
    replicates again, and the units added after every part; :meth:`blocks` adds them up
    for one block of units at a time, reading only the parts that hold some of its units.

    Each unit's replicates are added as the adder adds them (from zero, the parts in
    their order, then the units added last), so every block equals the adder's rows to
    the last bit.

    Attributes
    ----------
    keys : ndarray of int64, shape (n, width)
        The units, in increasing key order (the adder's total's keys).
    n_replicates : int
    replicate_columns : tuple of str
    parts : tuple of (key, ndarray of int64)
        Each part's own key and its units' keys, in the order the parts are added.
    read_part : callable
        ``read_part(key)``: that part's replicates, shape (its units, n_replicates,
        len(replicate_columns)), rows as its units' keys.
    last : callable
        ``last()``: the units added after every part (the homeless predictions'), as
        :class:`UnitSums` in increasing key order (each unit in one of them).
    """

    keys: IdArray
    n_replicates: int
    replicate_columns: tuple[str, ...]
    parts: tuple[tuple[object, IdArray], ...]
    read_part: Callable[[object], F64Array]
    last: Callable[[], Iterable[UnitSums]]

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (len(self.keys), self.n_replicates, len(self.replicate_columns))

    def blocks(self, size: int | None = None) -> Iterator[F64Array]:
        """The replicates of units ``[0, size)``, ``[size, 2 size)`` ... (default
        :data:`UNITS_PER_BLOCK`); one empty block when there is no unit.

        Raises
        ------
        ValueError
            A part or a last block holds a unit not in :attr:`keys`, or the last blocks'
            units are not in increasing order.
        """
        size = UNITS_PER_BLOCK if size is None else int(size)
        n, width = len(self.keys), self.keys.shape[1]
        if n == 0:
            yield np.zeros((0,) + self.shape[1:])
            return
        row_of = {key: i for i, key in enumerate(map(tuple, self.keys.tolist()))}

        def rows(keys: IdArray, what: str) -> IdArray:
            out = np.empty(len(keys), np.int64)
            for i, key in enumerate(map(tuple, np.asarray(keys, np.int64).reshape(-1, width).tolist())):
                if key not in row_of:
                    raise ValueError(f"unit {key} of {what} is not among the units")
                out[i] = row_of[key]
            return out

        part_rows = [(key, rows(keys, f"part {key}")) for key, keys in self.parts]
        last = iter(self.last())
        pending: tuple[IdArray, F64Array] | None = None  # what is left of the last blocks' current one
        floor = 0
        for start in range(0, n, size):
            stop = min(start + size, n)
            block = np.zeros((stop - start,) + self.shape[1:])
            for key, at in part_rows:
                inside = np.flatnonzero((at >= start) & (at < stop))
                if len(inside):
                    block[at[inside] - start] += self.read_part(key)[inside]
            while True:
                if pending is None:
                    units = next(last, None)
                    if units is None:
                        break
                    at = rows(units.keys, "the units added last")
                    if len(at) and (at[0] < floor or (np.diff(at) <= 0).any()):
                        raise ValueError("the units added last must come in increasing key order, each once")
                    floor = int(at[-1]) + 1 if len(at) else floor
                    pending = (at, units.replicates)
                at, reps = pending
                inside = at < stop
                block[at[inside] - start] += reps[inside]
                if inside.all():
                    pending = None
                    continue
                pending = (at[~inside], reps[~inside])
                break
            yield block


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


def unit_sums(keys: IdArray, values: F64Array, weights: F64Array | WeightBlocks | None, columns: tuple[str, ...],
              replicate_columns: tuple[str, ...]) -> UnitSums:
    """Sums per unit of some rows, with bootstrap replicates when drawn.

    Parameters
    ----------
    keys : ndarray of int64, shape (n, width)
        Each row's unit: ``(epsg, tile x, tile y)``, or ``(aoi,)`` with -1 for none
        (those rows belong to no unit).
    values : ndarray of float64, shape (n, len(columns))
        The rows' unit columns (:func:`unit_rows`).
    weights : ndarray of float64 or of unsigned int counts, shape (n_replicates, n), or WeightBlocks, optional
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
    reps = replicate_unit_sums(weights, replicate_rows, np.where(keep, local, -1), len(point.keys))
    return UnitSums(point.keys, point.digits, reps, columns, replicate_columns)


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
        for name, (lower, upper, n_undefined) in _unit_intervals(reps, sums.replicate_columns, families, options).items():
            out[f"{name}_ci_lower"] = lower
            out[f"{name}_ci_upper"] = upper
            out[f"{name}_ci_n_undefined"] = n_undefined
    return out


UNITS_PER_BLOCK = 256
"""Units whose replicate rates are made at once (bounds the memory: a country has thousands of tiles)."""


def replicate_rows(replicates: F64Array | BlockedReplicates, wanted: Iterable[IdArray],
                   size: int | None = None) -> Iterator[F64Array]:
    """The replicates of some units' rows, one array per array of ``wanted`` rows.

    The rows are positions in the units' keys, increasing within each array and from one
    array to the next, so a :class:`BlockedReplicates` is read once, a block at a time,
    whatever the arrays' lengths (a plain array is indexed).

    Parameters
    ----------
    replicates : ndarray of float64, shape (n, n_replicates, n_columns), or BlockedReplicates
    wanted : iterable of ndarray of int64
    size : int, optional
        Units per block read (:meth:`BlockedReplicates.blocks`' default when not given).

    Yields
    ------
    ndarray of float64, shape (len(rows), n_replicates, n_columns)

    Raises
    ------
    ValueError
        A row is not after the rows before it, or not below ``n``.
    """
    if not isinstance(replicates, BlockedReplicates):
        for rows in wanted:
            yield replicates[np.asarray(rows, np.int64)]
        return
    blocks = replicates.blocks(size)
    block, start = next(blocks), 0  # block holds rows [start, start + len(block))
    floor = 0
    for rows in wanted:
        rows = np.asarray(rows, np.int64)
        if len(rows) and (rows[0] < floor or (np.diff(rows) <= 0).any() or rows[-1] >= len(replicates)):
            raise ValueError(f"the rows wanted must increase, each once, below {len(replicates)}")
        out = np.empty((len(rows),) + replicates.shape[1:])
        done = 0
        while done < len(rows):
            while rows[done] >= start + len(block):
                start += len(block)
                block = next(blocks)
            stop = done + int(np.searchsorted(rows[done:], start + len(block)))
            out[done:stop] = block[rows[done:stop] - start]
            done = stop
        floor = int(rows[-1]) + 1 if len(rows) else floor
        yield out


def _unit_intervals(reps: F64Array | BlockedReplicates, replicate_columns: tuple[str, ...], families: tuple, options: object) -> dict:
    """Each unit's percentile interval of every family's unit interval key, from its replicate sums.

    ``{key: (lower, upper, n_undefined)}``, one value per unit: percentile_intervals' rule
    (quantiles over the replicates where the rate is defined, NaN exactly where it is not).
    Made a block of units at a time; each unit's values are its own, so the blocks do not
    change them.
    """
    n_units = len(reps)
    out: dict[str, tuple[F64Array, F64Array, IdArray]] = {}
    alpha = (1.0 - BOOTSTRAP_CONFIDENCE_LEVEL) / 2.0
    # At least one block, even of no units: the families' interval keys are columns either way.
    if isinstance(reps, BlockedReplicates):
        blocks = reps.blocks(UNITS_PER_BLOCK)
    else:
        blocks = (reps[start : start + UNITS_PER_BLOCK] for start in range(0, max(n_units, 1), UNITS_PER_BLOCK))
    for start, block in zip(range(0, max(n_units, 1), UNITS_PER_BLOCK), blocks, strict=True):
        r = {name: block[:, :, j] for j, name in enumerate(replicate_columns)}
        rates = {}
        for family in families:
            keys = family.unit_interval_keys(options)
            if keys:
                replicated = family.unit_values(r, options)
                rates |= {k: replicated[k] for k in keys}
        for name, value in rates.items():
            if name not in out:
                out[name] = (np.full(n_units, np.nan), np.full(n_units, np.nan), np.zeros(n_units, np.int64))
            lower, upper, n_undefined = out[name]
            if value.size:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # units undefined in every replicate
                    lower[start : start + len(block)], upper[start : start + len(block)] = np.nanquantile(value, [alpha, 1.0 - alpha], axis=1)
                n_undefined[start : start + len(block)] = np.isnan(value).sum(axis=1)
    return out


# --------------------------------------------------------------------------- tile squares


def _square_bounds(keys: IdArray, side_m: float) -> F64Array:
    """Each tile's square as ``xmin, ymin, xmax, ymax`` in its zone's metres, shape (n, 4)."""
    x0 = keys[:, 1].astype(np.float64) * side_m
    y0 = keys[:, 2].astype(np.float64) * side_m
    return np.column_stack([x0, y0, x0 + side_m, y0 + side_m])


def _squares(keys: IdArray, side_m: float) -> GeomArray:
    return shapely.box(*_square_bounds(keys, side_m).T)


def _clipped_squares(keys: IdArray, side_m: float) -> GeomArray:
    """Each tile's square intersected with its zone's band, in the zone's metres."""
    out = np.empty(len(keys), dtype=object)
    for epsg in np.unique(keys[:, 0]) if len(keys) else []:
        rows = np.flatnonzero(keys[:, 0] == epsg)
        squares = _squares(keys[rows], side_m)
        band = zone_band(int(epsg))
        inside = shapely.contains_properly(band, squares)
        clipped = squares.copy()
        edge = ~inside
        if edge.any():
            clipped[edge] = shapely.intersection(squares[edge], band)
        out[rows] = clipped
    return out


def tile_band_area_km2(keys: IdArray, side_m: float) -> F64Array:
    """Area of each tile square inside its zone's 6° band, planar in the zone's CRS, km².

    Exact (:func:`evalcore.zone_band.band_area_m2`: the band's edge is the meridian
    itself, not a sampled polygon).
    """
    out = np.empty(len(keys))
    for epsg in np.unique(keys[:, 0]) if len(keys) else []:
        rows = np.flatnonzero(keys[:, 0] == epsg)
        out[rows] = band_area_m2(int(epsg), _square_bounds(keys[rows], side_m)) / 1e6
    return out


def tile_polygons(keys: IdArray, side_m: float, spacing_m: float = 500.0) -> GeomArray:
    """Each tile's square (inside its zone's band) in EPSG:4326, edges densified at ``spacing_m``.

    For drawing: the band's edge is :func:`evalcore.zone_band.zone_band`'s sampled
    meridian (within centimetres); the area in the tables is exact (:func:`tile_band_area_km2`).
    """
    out = np.empty(len(keys), dtype=object)
    clipped = _clipped_squares(keys, side_m)
    for epsg in np.unique(keys[:, 0]) if len(keys) else []:
        rows = np.flatnonzero(keys[:, 0] == epsg)
        dense = shapely.segmentize(clipped[rows], spacing_m)
        out[rows] = shapely.transform(dense, lambda xy, e=int(epsg): np.column_stack(transform_xy(xy[:, 0], xy[:, 1], utm_crs(e), WGS84)))
    return out


def tiles_frame(table: pd.DataFrame, tile_size_m: float) -> geopandas.GeoDataFrame:
    """The per-tile table as a GeoDataFrame in EPSG:4326 (for ``--tiles-out`` and ``tiles.parquet``).

    Its first column ``tile`` is the tile's key as the summary, ``metrics.json`` and the
    report name it (:func:`tile_key`, ``"32614_57_402"``), so that one tile is found with
    one filter; ``epsg``, ``tile_x`` and ``tile_y`` follow.
    """
    keys = table[["epsg", "tile_x", "tile_y"]].to_numpy(np.int64)
    frame = table.reset_index(drop=True)
    frame.insert(0, "tile", pd.array([tile_key(*k) for k in keys.tolist()], dtype="string"))
    return geopandas.GeoDataFrame(frame, geometry=tile_polygons(keys, tile_size_m), crs="EPSG:4326")


def aois_frame(table: pd.DataFrame, aois: AoiLayer) -> geopandas.GeoDataFrame:
    """The per-AOI table with every AOI's polygon in the AOI layer's CRS (for ``--aois-out``)."""
    frame = table.rename(columns={"aoi": aois.id_column}).reset_index(drop=True)
    frame[aois.id_column] = aois.ids
    return geopandas.GeoDataFrame(frame, geometry=aois.geoms_source, crs=aois.crs)

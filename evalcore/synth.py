"""Synthetic predicted and reference field layers with a realistic error mix, and site layers.

:func:`make_layers` builds a reference layer that looks like a field registry and a
predicted layer that looks like the output of a field-boundary model. Everything is
drawn from one ``numpy.random.default_rng(seed)``, so the same ``(n_ref, seed)``
always gives identical layers. :func:`make_site_layers` lays an AOI layer and an
annotated-area layer over them, drawn from a generator of their own,
``numpy.random.default_rng([seed, 1])``, so adding them changed nothing in the
first two layers. :func:`write_layers` writes all four to disk
(``predicted``, ``reference``, ``aoi`` and ``annotated``, see :data:`LAYER_NAMES`).

Reference layer (``EPSG:4326``, lon/lat)
    * Field areas are lognormal (median 3 ha) clipped to 0.1-200 ha.
    * Shapes: rectangles (most near the cardinal directions, some at any angle),
      centre pivots (regular 32-64-gons, more common among large fields), irregular
      star-shaped jittered polygons, some fields with a hole (pond, farmstead) and
      some multipolygons (a rectangle cut in two by a 8-20 m track).
    * Fields do not overlap, by construction: each cluster is a row packing of
      cells, every field sits inside its own cell, and the cells leave a gap of at
      least 4 m between fields. Clusters sit on a lattice of slots in the US Great
      Plains / Southwest (longitudes -110 to -98 by default) and cover UTM zones 12,
      13 and 14. The first two clusters are centred on the zone boundaries at
      -108 and -102 degrees, with one field centred exactly on the boundary, so some
      fields always cross a zone boundary. Each cluster is built in the UTM zone of
      its centre (``EPSG:326xx``, metres) and then reprojected.
    * Columns: ``field_id`` (unique int64, a permutation of ``0..n-1``, so an id is
      not its row position and id 0 exists), ``stratum`` (a county name, spatially
      coherent, a handful of values, a few missing), ``crop``.

Predicted layer (``EPSG:5070``, NAD83 / Conus Albers, metres)
    Each reference field gives rise to one outcome, with these probabilities
    (:data:`ERROR_MIX`):

    ============  =====  ==============================================================
    outcome       share  prediction
    ============  =====  ==============================================================
    good          0.69   densified copy with vertex jitter (sigma 0.5-2 m) and a shift
                         of 0-3 m per cluster plus 0-2 m per field
    dilate_erode  0.10   buffer by +-2-5 m (mitre joins)
    merge         0.05   one prediction covering two neighbouring fields (the share
                         counts both fields); their union, closed over the gap
    split         0.05   two predictions: the field cut by a line through its centroid
    miss          0.08   no prediction
    bad_shape     0.03   the field shrunk to 30-60 % of its size, or heavily eroded
    ============  =====  ==============================================================

    On top of that come ``round(0.05 * n_ref)`` false positives
    (:data:`FALSE_POSITIVE_RATE`): half overlap no reference field (they sit in empty
    cells between fields, or up to 1.5 km outside a cluster), half partly cover a
    reference field (mostly a missed one). Everything except ``miss`` is shifted.
    Predictions can overlap each other slightly (dilations, shifts) but mostly do not.
    Columns: ``pred_id`` (unique int64, a permutation of ``0..n-1``) and ``score``
    (float64 in [0, 1]; Beta-distributed with a mean of 0.8 for good matches down to
    0.2 for false positives, so it is informative but not separating).

Clustered errors (``error_correlation_km=L``)
    Real errors cluster in space (a hazy scene, a region the model saw little of), so
    neighbouring fields are not independent. With ``error_correlation_km`` a smooth
    random field ``z`` over each cluster (a sum of 256 random Fourier features; mean 0,
    variance 1, correlation ``exp(-(d / L)^2)`` at a distance ``d``, so 1/e at ``L``;
    independent between clusters) sets a weight ``w = 2 Phi(z)`` at each field, uniform
    on [0, 2] with mean 1. A field's chances of ``miss``, ``split`` and ``bad_shape``,
    of starting a ``merge``, and its own 0-2 m shift are multiplied by ``w``;
    ``dilate_erode`` keeps its share and ``good`` takes the rest (so it never drops
    below 0.55). The mean error mix is :data:`ERROR_MIX`; the mix of one landscape
    varies with its field, more so at a long ``L`` (the point). The partly overlapping
    false positives sit on the new missed fields. Everything else, the reference layer
    included, is what ``error_correlation_km=None`` (independent errors) gives with the
    same seed; the extra draws come from ``numpy.random.default_rng([seed, 2])``.

Bad rows
    With ``bad_rows=True`` each layer gets one extra row of each kind in
    :data:`BAD_ROW_KINDS`: a null geometry, an empty polygon, a point, a line string,
    a self-intersecting bow-tie polygon and a zero-area polygon. Each sits in its own
    empty cell at a random place, so a repaired bow-tie overlaps nothing.

Rows of both layers are in spatial order (cluster, then row of cells, then x), like
a registry sorted by parcel number, which keeps GeoParquet row groups compact.

AOI layer (``EPSG:4326``), from :func:`make_site_layers`
    10-17 areas of interest (never fewer than 8 nor more than 20, whatever
    ``n_ref``). The clusters of fields are found from the data. With 4 clusters
    (the default up to 200,000 fields) each cluster is a hub; with more, 4-7
    spread-out clusters are hubs and each other cluster joins the nearest one.

    * Around each hub lies a fan of 2 or more sector AOIs (8-14 in all): irregular
      regions that meet at an apex near the cluster's centre, reach 30-45 km out
      (further for large clusters or groups) and leave an open wedge of 50-100
      degrees (turned away from the other clusters of the hub's group when it
      can be), so the sectors split the cluster between them and 10-30 % of the
      fields lie in no AOI. Each boundary between two sectors is a straight edge
      of typically 12-27 km from the apex out past the cluster, then a bend; the rim
      has a vertex every ~25 degrees. Edges are straight lines in lon/lat (vertices
      are reprojected from the hub's UTM zone, edges are not densified), typically
      10-25 km long, so a consumer must densify them before reprojecting, or a
      field near a boundary lands in the wrong AOI.
    * In each fan at least one (about half of all) shared boundaries is moved by a
      band of 3-8 % of the cluster's radius into the neighbour, so two AOIs overlap
      a little there and fields in the band lie in both (the first AOI by row
      position should win); about a fifth leave a thin gap of 1-3 % instead.
    * 2-3 star-shaped AOIs of 18-35 km radius lie away from every cluster: they
      contain no reference field and touch no prediction.
    * With the default clusters the sector AOIs lie in UTM zones 12, 13 and 14,
      and those of the first two clusters cross a zone boundary.
    * Columns: ``aoi_id`` (unique str ``"A00"``, ``"A01"``, ...; rows are shuffled
      and the ids are a permutation, so an id is not its row position) and
      ``name`` (a unique place-like name). All geometries are valid Polygons.

Annotated-area layer (``EPSG:4326``), from :func:`make_site_layers`
    A few Polygons (one or two per hub, and a piece a bite cut off; 5-10 with the
    default clusters) marking where the reference is complete: a star-shaped
    polygon 15-60 % wider than the hub's clusters, cut at least once into two
    halves that overlap in a band. From each cluster the area beyond one side of
    its reference bbox is cut away (from up to 12 % of its half size inside it; the
    side with the most false positives outside the cluster, which therefore lie
    outside the annotated area), and 1-2 round bites of 35-60 % of its smaller half
    side are taken out at the edge of its reference bbox. So 5-20 % of the
    predictions, some false positives among them, lie mostly outside the annotated
    area. Column ``area_id`` (unique int64, a permutation of ``0..n-1``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import operator
import os
import pathlib
import time
import uuid
from dataclasses import dataclass
from types import MappingProxyType

import geopandas
import numpy as np
import pyproj
import shapely

from evalcore._typing import BoolArray, F64Array, GeomArray, IdArray

logger = logging.getLogger(__name__)

REF_CRS: str = "EPSG:4326"
"""CRS of the reference layer (lon/lat degrees)."""

PRED_CRS: str = "EPSG:5070"
"""CRS of the predicted layer (NAD83 / Conus Albers, metres)."""

ERROR_MIX: MappingProxyType[str, float] = MappingProxyType(
    {
        "good": 0.69,
        "dilate_erode": 0.10,
        "merge": 0.05,
        "split": 0.05,
        "miss": 0.08,
        "bad_shape": 0.03,
    }
)
"""Share of reference fields with each prediction outcome (sums to 1)."""

FALSE_POSITIVE_RATE: float = 0.05
"""Number of false-positive predictions per reference field."""

BAD_ROW_KINDS: tuple[str, ...] = ("null", "empty", "point", "linestring", "bowtie", "zero_area")
"""Kinds of bad rows added to each layer when ``bad_rows=True``, one row each."""

FIELDS_PER_CLUSTER: int = 50_000
"""The default number of clusters is ``max(4, ceil(n_ref / FIELDS_PER_CLUSTER))``."""

FORMATS: MappingProxyType[str, str] = MappingProxyType({"parquet": ".parquet", "gpkg": ".gpkg"})
"""File formats of :func:`write_layers` and their file name extensions."""

LAYER_NAMES: tuple[str, ...] = ("predicted", "reference", "aoi", "annotated")
"""Layers :func:`write_layers` writes, each to ``<name><extension>``."""

__all__ = [
    "BAD_ROW_KINDS",
    "ERROR_MIX",
    "FALSE_POSITIVE_RATE",
    "FIELDS_PER_CLUSTER",
    "FORMATS",
    "LAYER_NAMES",
    "PRED_CRS",
    "REF_CRS",
    "make_layers",
    "make_site_layers",
    "write_layers",
]

# Shape kinds.
_RECT, _PIVOT, _IRREGULAR = 0, 1, 2
# Item kinds: everything that occupies space in a cluster.
_FIELD, _FP_EMPTY, _FP_OUTSIDE, _FP_PARTIAL, _BAD_REF, _BAD_PRED = range(6)
# Prediction outcomes of a field; _MERGE_PARTNER is the second field of a merge.
_GOOD, _DILATE_ERODE, _SPLIT, _MISS, _BAD_SHAPE, _MERGE, _MERGE_PARTNER = range(7)
_OUTCOME_NAMES = ("good", "dilate_erode", "split", "miss", "bad_shape", "merge", "merge_partner")
# Outcomes whose rates a clustered error field modulates (merges too, in _add_merges).
_CLUSTERED_OUTCOMES = [_SPLIT, _MISS, _BAD_SHAPE]
_FIELD_FEATURES = 256  # random Fourier features of the clustered-error field

_HA_M2 = 10_000.0
_MEDIAN_FIELD_HA = 3.0
_FIELD_AREA_SIGMA = 1.1  # of log(area)
_MIN_FIELD_HA, _MAX_FIELD_HA = 0.1, 200.0
_MIN_GAP_M = 4.0  # the least distance between two reference fields
_BAD_CELL_HALF_M = 40.0  # bad-row geometries lie within +-30 m of their cell centre
_OUTSIDE_MAX_M = 1_500.0  # outside false positives lie at most this far from a cluster
_MERGE_MAX_GAP_M = 30.0  # only neighbours closer than this are merged
_DENSIFY_M = 25.0  # good predictions are densified to edges of at most this length
_CHUNK_ITEMS = 32_768  # items built per batch of vertex arrays
_SLOT_DLON, _SLOT_DLAT = 2.0, 1.5  # lattice of cluster centres, degrees
_SLOT_ORIGIN = (-108.0, 38.0)  # a lattice node on the zone 12/13 boundary
_SLOT_ANCHORS = ((-108.0, 38.0), (-102.0, 41.0), (-110.5, 35.0), (-98.5, 36.5))
_SLOT_REGION = (-112.0, 31.5, -96.0, 45.5)  # lon_min, lat_min, lon_max, lat_max
_MIN_SLOT_SPACING_KM = 143.0  # 2 degrees of longitude at 50 N
_COUNTIES = ("Finney", "Haskell", "Kearny", "Scott", "Texas", "Cimarron", "Baca", "Yuma")
_CROPS = ("winter wheat", "corn", "soybeans", "sorghum", "cotton", "alfalfa", "fallow")
_CROP_P_PIVOT = (0.05, 0.45, 0.20, 0.05, 0.0, 0.25, 0.0)
_CROP_P_OTHER = (0.32, 0.18, 0.17, 0.10, 0.08, 0.03, 0.12)


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


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------


def make_layers(
    n_ref: int,
    seed: int = 0,
    *,
    n_clusters: int | None = None,
    bad_rows: bool = True,
    score_decimals: int | None = None,
    error_correlation_km: float | None = None,
) -> tuple[geopandas.GeoDataFrame, geopandas.GeoDataFrame]:
    """Return (predicted, reference) GeoDataFrames.

    See the module docstring for the layout of the fields and the error mix.

    Parameters
    ----------
    n_ref : int
        Number of reference fields (not counting bad rows), >= 0.
    seed : int
        Seed of ``numpy.random.default_rng``; the same ``(n_ref, seed, n_clusters,
        bad_rows)`` always gives identical layers.
    n_clusters : int, optional
        Number of farmland clusters, >= 1. Defaults to
        ``max(4, ceil(n_ref / FIELDS_PER_CLUSTER))``. With fewer than 4 clusters the
        fields may not span three UTM zones.
    bad_rows : bool
        Add one row of each kind in :data:`BAD_ROW_KINDS` to each layer.
    score_decimals : int, optional
        Round the scores to this many decimals, as many detectors emit them (ties in
        score are then common and must be broken by position).
    error_correlation_km : float, optional
        Spatially clustered errors (see "Clustered errors" in the module docstring): a
        smooth random field with this correlation length (km, > 0) raises the rates of
        miss, merge, split and bad_shape and the per-field shift where it is high and
        lowers them where it is low, keeping the mean error mix. The reference layer is
        the one ``error_correlation_km=None`` gives; the predictions differ. Drawn from
        ``numpy.random.default_rng([seed, 2])`` (``seed`` must then be a non-negative
        integer). None (the default): independent errors, as always.

    Returns
    -------
    pred : geopandas.GeoDataFrame
        Predictions in :data:`PRED_CRS` with columns ``pred_id`` (int64, unique) and
        ``score`` (float64 in [0, 1]), and a RangeIndex.
    ref : geopandas.GeoDataFrame
        ``n_ref`` fields (plus bad rows) in :data:`REF_CRS` with columns ``field_id``
        (int64, unique), ``stratum`` (str, a few missing) and ``crop`` (str), and a
        RangeIndex.

    Examples
    --------
    >>> pred, ref = make_layers(100, seed=1, bad_rows=False)
    >>> len(ref), str(ref.crs), str(pred.crs)
    (100, 'EPSG:4326', 'EPSG:5070')
    >>> pred, ref = make_layers(0, bad_rows=False)
    >>> len(pred), len(ref)
    (0, 0)
    """
    n_ref = _check_count("n_ref", n_ref, minimum=0)
    correlation_m = _check_correlation_km(error_correlation_km)
    if n_clusters is None:
        n_clusters = max(4, math.ceil(n_ref / FIELDS_PER_CLUSTER))
    n_clusters = _check_count("n_clusters", n_clusters, minimum=1)
    started = time.perf_counter()
    rng = np.random.default_rng(seed)

    # 1. Items: fields, false positives and bad-row cells, with a cluster each.
    n_fp = round(FALSE_POSITIVE_RATE * n_ref)
    n_fp_partial = n_fp // 2
    n_fp_outside = (n_fp - n_fp_partial) // 3
    n_fp_empty = n_fp - n_fp_partial - n_fp_outside
    n_bad = len(BAD_ROW_KINDS) if bad_rows else 0
    item_kind = np.repeat(
        np.array([_FIELD, _FP_EMPTY, _FP_OUTSIDE, _FP_PARTIAL, _BAD_REF, _BAD_PRED]),
        [n_ref, n_fp_empty, n_fp_outside, n_fp_partial, n_bad, n_bad],
    )
    n_shaped = n_ref + n_fp
    outcome = _sample_outcomes(rng, n_ref)
    fp_host = _partial_fp_hosts(rng, outcome, n_fp_partial)
    field_cluster = _field_clusters(rng, n_ref, n_clusters)
    item_cluster = np.concatenate(
        [
            field_cluster,
            rng.integers(0, n_clusters, n_fp_empty + n_fp_outside),
            field_cluster[fp_host],
            rng.integers(0, n_clusters, 2 * n_bad),
        ]
    )

    # 2. Shapes and their rings in item-local coordinates.
    field_shapes = _sample_field_shapes(rng, n_ref)
    shapes = _Shapes.concat(
        [
            field_shapes,
            _sample_fp_shapes(rng, n_fp_empty + n_fp_outside),
            _sample_partial_fp_shapes(rng, field_shapes, fp_host),
        ]
    )
    rings = _make_rings(rng, shapes)
    bbox = np.tile([-_BAD_CELL_HALF_M, -_BAD_CELL_HALF_M, _BAD_CELL_HALF_M, _BAD_CELL_HALF_M], (item_kind.size, 1))
    bbox[:n_shaped] = _item_bounds(rings, n_shaped)

    # 3. Placement in cluster-local coordinates (metres), then clusters on the map.
    layout = _place_items(rng, item_kind, item_cluster, bbox, fp_host, n_clusters)
    clusters = _place_clusters(rng, layout, item_cluster, field_shapes.part_gap_m, n_clusters)

    # 3b. Clustered errors: outcomes redrawn from a random field over the fields'
    # places, and the partial false positives moved onto the new missed fields. Only
    # a generator of its own is used, so the reference layer stays the same.
    error_weight = None
    if correlation_m is not None:
        err_rng = np.random.default_rng([operator.index(seed), 2])
        centre_x = layout.tx[:n_ref] + (bbox[:n_ref, 0] + bbox[:n_ref, 2]) / 2
        centre_y = layout.ty[:n_ref] + (bbox[:n_ref, 1] + bbox[:n_ref, 3]) / 2
        field = _random_field(err_rng, centre_x, centre_y, field_cluster, n_clusters, correlation_m)
        error_weight = _error_weight(field)
        outcome = _sample_outcomes(err_rng, n_ref, error_weight)
        fp_host = _partial_fp_hosts(err_rng, outcome, n_fp_partial)
        rings, layout = _rehost_partial_fps(err_rng, rings, layout, bbox, item_kind, item_cluster, field_shapes, fp_host)

    # 4. Reference layer.
    is_field = item_kind == _FIELD
    ref_local = _item_geoms(rings, is_field[:n_shaped], layout.tx, layout.ty)
    ref_items = np.concatenate([np.arange(n_ref), np.flatnonzero(item_kind == _BAD_REF)])
    ref_geoms = np.concatenate([ref_local, _bad_geoms(layout.tx, layout.ty, item_kind == _BAD_REF)])
    ref_order = np.argsort(layout.rank[ref_items], kind="stable")
    ref_items, ref_geoms = ref_items[ref_order], ref_geoms[ref_order]
    ref = geopandas.GeoDataFrame(
        {
            "field_id": rng.permutation(ref_items.size).astype(np.int64),
            "stratum": _strata(rng, layout, ref_items, item_cluster),
            "crop": _crops(rng, ref_items, shapes, n_ref),
        },
        geometry=geopandas.GeoSeries(
            _reproject(ref_geoms, item_cluster[ref_items], clusters, REF_CRS), crs=REF_CRS
        ),
    )

    # 5. Predicted layer.
    outcome = _add_merges(rng, outcome, ref_local, layout.next_in_row[:n_ref], fp_host, error_weight)
    pred_local, pred_item, pred_sub, pred_kind = _predict(
        rng, rings, ref_local, outcome, layout, item_kind, item_cluster, error_weight
    )
    del rings, ref_local, ref_geoms  # free memory before the largest step
    pred_geoms = _reproject(pred_local, item_cluster[pred_item], clusters, PRED_CRS)
    del pred_local
    # GEOS mitre buffers are occasionally invalid (a pinched ring); repair those,
    # and drop what an erosion or a cut left empty (that field is then missed).
    pred_geoms = _repair(pred_geoms, pred_kind != _PRED_BAD)
    kept = (pred_kind == _PRED_BAD) | (~shapely.is_missing(pred_geoms) & ~shapely.is_empty(pred_geoms))
    pred_order = np.flatnonzero(kept)[np.lexsort((pred_sub[kept], layout.rank[pred_item[kept]]))]
    pred = geopandas.GeoDataFrame(
        {
            "pred_id": rng.permutation(pred_order.size).astype(np.int64),
            "score": _scores(rng, pred_kind[pred_order], score_decimals),
        },
        geometry=geopandas.GeoSeries(pred_geoms[pred_order], crs=PRED_CRS),
    )

    if logger.isEnabledFor(logging.DEBUG):
        counts = np.bincount(outcome, minlength=len(_OUTCOME_NAMES))
        logger.debug(
            "make_layers(n_ref=%d, seed=%r, error_correlation_km=%r): %d reference rows, %d predicted rows, "
            "%d clusters, outcomes %s, %d false positives, %.2f s",
            n_ref, seed, error_correlation_km, len(ref), len(pred), n_clusters,
            dict(zip(_OUTCOME_NAMES, counts.tolist())), n_fp, time.perf_counter() - started,
        )  # fmt: skip
    return pred, ref


def make_site_layers(
    reference: geopandas.GeoDataFrame,
    predicted: geopandas.GeoDataFrame,
    seed: int = 0,
) -> tuple[geopandas.GeoDataFrame, geopandas.GeoDataFrame]:
    """Return (aoi, annotated) GeoDataFrames laid over the fields of ``reference`` and ``predicted``.

    See "AOI layer" and "Annotated-area layer" in the module docstring. The layers
    are drawn from ``numpy.random.default_rng([seed, 1])``, a generator of their own,
    so they do not change the layers of :func:`make_layers`; the same layers and
    ``seed`` always give identical site layers. The clusters of fields are found
    from the data (groups of geometries more than about 5 km from any other group).

    Parameters
    ----------
    reference, predicted : geopandas.GeoDataFrame
        Layers of :func:`make_layers` (any CRS; a layer without one is taken as
        :data:`REF_CRS`). Missing and empty geometries are ignored.
    seed : int
        Non-negative seed; use the seed of :func:`make_layers`.

    Returns
    -------
    aoi : geopandas.GeoDataFrame
        8-20 AOIs in :data:`REF_CRS` with columns ``aoi_id`` (str, unique, ``"A00"``,
        ``"A01"``, ... in shuffled order, so an id is not its row position) and
        ``name`` (str, unique), and a RangeIndex.
    annotated : geopandas.GeoDataFrame
        A few annotated-area polygons in :data:`REF_CRS` with column ``area_id``
        (int64, a permutation of ``0..n-1``), and a RangeIndex.

    Examples
    --------
    >>> pred, ref = make_layers(300, seed=1)
    >>> aoi, annotated = make_site_layers(ref, pred, seed=1)
    >>> 8 <= len(aoi) <= 20, str(aoi.crs), str(annotated.crs)
    (True, 'EPSG:4326', 'EPSG:4326')
    """
    rng = np.random.default_rng([operator.index(seed), 1])
    sites = _find_sites(reference, predicted)
    n_main = int(rng.integers(_AOI_SECTORS[0], _AOI_SECTORS[1] + 1))
    n_empty = int(rng.integers(_AOI_EMPTY[0], _AOI_EMPTY[1] + 1))
    hubs = _make_hubs(sites, n_main)
    aoi_geoms = _sector_aois(rng, sites, hubs, n_main)
    aoi_geoms = np.concatenate([aoi_geoms, _empty_aois(rng, sites, aoi_geoms, n_empty)])
    n_aoi = aoi_geoms.size
    order = rng.permutation(n_aoi)
    aoi = geopandas.GeoDataFrame(
        {
            "aoi_id": np.array([f"A{k:02d}" for k in rng.permutation(n_aoi)], dtype=object),
            "name": rng.choice(np.array(_AOI_NAMES, dtype=object), n_aoi, replace=False),
        },
        geometry=geopandas.GeoSeries(aoi_geoms[order], crs=REF_CRS),
    )
    area_geoms = _annotated_areas(rng, sites, hubs)
    area_geoms = area_geoms[rng.permutation(area_geoms.size)]
    annotated = geopandas.GeoDataFrame(
        {"area_id": rng.permutation(area_geoms.size).astype(np.int64)},
        geometry=geopandas.GeoSeries(area_geoms, crs=REF_CRS),
    )
    logger.debug(
        "make_site_layers(seed=%r): %d clusters, %d hubs, %d AOIs (%d away from the data), %d annotated polygons",
        seed, sites.n, hubs.site.size, n_aoi, n_empty, len(annotated),
    )  # fmt: skip
    return aoi, annotated


def write_layers(
    out_dir: str | os.PathLike,
    n_ref: int,
    seed: int = 0,
    *,
    fmt: str = "parquet",
    **kwargs,
) -> tuple[pathlib.Path, pathlib.Path]:
    """Write ``predicted``, ``reference``, ``aoi`` and ``annotated`` files into ``out_dir``.

    The files are ``<name><ext>`` for the names in :data:`LAYER_NAMES` and the
    extension of ``fmt`` in :data:`FORMATS` (``predicted.parquet``,
    ``reference.parquet``, ``aoi.parquet``, ``annotated.parquet``); the last two
    come from :func:`make_site_layers` with the same seed. All files are first
    written under temporary names in ``out_dir`` and renamed when all are whole, so
    a reader never sees a partial file (nor, unless the process dies between the
    renames, a new file next to an old one). GeoParquet files carry a bbox covering
    column and row groups of 65,536 rows, so bbox reads can skip row groups; a
    GeoPackage holds one layer named like its file.

    Parameters
    ----------
    out_dir : str or os.PathLike
        Directory to write into; created if missing. Existing files are replaced.
    n_ref : int
        Number of reference fields, see :func:`make_layers`.
    seed : int
        Random seed, see :func:`make_layers`.
    fmt : {"parquet", "gpkg"}
        File format (GeoParquet or GeoPackage).
    **kwargs
        Passed to :func:`make_layers` (``n_clusters``, ``bad_rows``, ``score_decimals``,
        ``error_correlation_km``).

    Returns
    -------
    pred_path, ref_path : pathlib.Path
        Paths of the predicted and reference files. The AOI and annotated-area
        files sit next to them (``pred_path.with_name("aoi" + pred_path.suffix)``).
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {sorted(FORMATS)}, but got {fmt!r}.")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pred, ref = make_layers(n_ref, seed, **kwargs)
    aoi, annotated = make_site_layers(ref, pred, seed)
    layers = dict(zip(LAYER_NAMES, (pred, ref, aoi, annotated)))
    paths = {name: out / f"{name}{FORMATS[fmt]}" for name in layers}
    tmp_paths = {name: out / f".{name}.{uuid.uuid4().hex}.tmp{FORMATS[fmt]}" for name in layers}
    try:
        for name, layer in layers.items():
            if fmt == "parquet":
                layer.to_parquet(tmp_paths[name], index=False, write_covering_bbox=True, row_group_size=65_536)
            else:
                layer.to_file(tmp_paths[name], driver="GPKG", engine="pyogrio", layer=name)
        for name, layer in layers.items():
            os.replace(tmp_paths[name], paths[name])
            logger.info("wrote %d rows to %s", len(layer), paths[name])
    finally:
        for tmp in tmp_paths.values():
            tmp.unlink(missing_ok=True)
    return paths["predicted"], paths["reference"]


# ---------------------------------------------------------------------------
# Items and shapes
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------


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
) -> _Clusters:
    """Put each cluster on a slot of a lon/lat lattice, anchored on a single-part field.

    The lattice nodes are ``2 s`` degrees of longitude and ``1.5 s`` of latitude
    apart, with ``s`` the smallest integer that keeps clusters 10 km apart. The
    first four slots are fixed (two on UTM zone boundaries, one in zone 12, one in
    zone 14); the other slots in the region come in random order, then the rest by
    distance. The single-part field nearest the centre of the cluster is put exactly
    on the slot, so a cluster on a zone boundary has a field that crosses it.
    """
    max_extent_km = (float(layout.extent.max(initial=0.0)) + 2 * (_OUTSIDE_MAX_M + 1_000.0)) / 1_000.0
    scale = max(1, math.ceil((max_extent_km + 10.0) / _MIN_SLOT_SPACING_KM))
    lon, lat = _lattice_slots(rng, n_clusters, scale)
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


# ---------------------------------------------------------------------------
# Geometry
# ---------------------------------------------------------------------------


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


@functools.lru_cache(maxsize=64)
def _transformer(source: int | str, target: int | str) -> pyproj.Transformer:
    """A lon/lat-order transformer between two CRSs, built once per pair (building one takes ~20 ms)."""
    return pyproj.Transformer.from_crs(source, target, always_xy=True)


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


# ---------------------------------------------------------------------------
# Attributes
# ---------------------------------------------------------------------------


def _strata(rng: np.random.Generator, layout: _Layout, ref_items: IdArray, item_cluster: IdArray) -> np.ndarray:
    """County of each reference row: the west or east half of its cluster; a few missing."""
    cluster = item_cluster[ref_items]
    east = layout.tx[ref_items] > layout.extent[cluster, 0] / 2
    strata = np.array(_COUNTIES, dtype=object)[(2 * cluster + east) % len(_COUNTIES)]
    n_missing = min(ref_items.size // 10, max(3, round(0.002 * ref_items.size)))
    strata[rng.choice(ref_items.size, n_missing, replace=False)] = None
    return strata


def _crops(rng: np.random.Generator, ref_items: IdArray, shapes: _Shapes, n_ref: int) -> np.ndarray:
    """Crop of each reference row; pivots grow more corn and alfalfa."""
    is_field = ref_items < n_ref
    is_pivot = np.zeros(ref_items.size, dtype=bool)
    is_pivot[is_field] = shapes.kind[ref_items[is_field]] == _PIVOT
    u = rng.random(ref_items.size)
    crop = np.where(
        is_pivot,
        np.searchsorted(np.cumsum(_CROP_P_PIVOT), u * sum(_CROP_P_PIVOT), side="right"),
        np.searchsorted(np.cumsum(_CROP_P_OTHER), u * sum(_CROP_P_OTHER), side="right"),
    )
    return np.array(_CROPS, dtype=object)[np.minimum(crop, len(_CROPS) - 1)]


# ---------------------------------------------------------------------------
# Predictions
# ---------------------------------------------------------------------------

# Kinds of predictions (for scores): the outcome codes, then these.
_PRED_FP_PARTIAL, _PRED_FP_FREE, _PRED_BAD = 10, 11, 12
_SCORE_BETA = {
    _GOOD: (8.0, 2.0),
    _DILATE_ERODE: (6.0, 3.0),
    _MERGE: (4.0, 4.0),
    _SPLIT: (3.0, 4.0),
    _BAD_SHAPE: (2.0, 5.0),
    _PRED_FP_PARTIAL: (2.0, 5.0),
    _PRED_FP_FREE: (1.5, 6.0),
    _PRED_BAD: (1.0, 1.0),
}
"""(a, b) of the Beta distribution of the scores of each kind of prediction."""


def _sample_outcomes(rng: np.random.Generator, n_ref: int, weight: F64Array | None = None) -> IdArray:
    """Outcome of each field other than a merge (codes _GOOD ... _BAD_SHAPE).

    The shares are those of ERROR_MIX without "merge", scaled up to sum to 1;
    :func:`_add_merges` later turns about ERROR_MIX["merge"] of the fields into merges.
    With ``weight`` (one per field, mean about 1, in [0, 2]) the shares of the
    outcomes in :data:`_CLUSTERED_OUTCOMES` are multiplied by the field's weight
    and "good" takes the rest (it stays >= 0.55).
    """
    names = _OUTCOME_NAMES[: _BAD_SHAPE + 1]
    p = np.array([ERROR_MIX[name] for name in names])
    if weight is None:
        return rng.choice(len(names), size=n_ref, p=p / p.sum()).astype(np.int64)
    shares = np.tile(p / p.sum(), (n_ref, 1))
    shares[:, _CLUSTERED_OUTCOMES] *= weight[:, None]
    shares[:, _GOOD] = 0.0
    shares[:, _GOOD] = 1.0 - shares.sum(axis=1)
    cumulative = np.cumsum(shares, axis=1)
    u = rng.random(n_ref)
    return np.minimum((u[:, None] >= cumulative).sum(axis=1), len(names) - 1).astype(np.int64)


def _check_correlation_km(value: object) -> float | None:
    """``error_correlation_km`` in metres (None stays None), or raise if it is not a positive number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"error_correlation_km must be a number or None, but got {value!r}.")
    km = float(value)
    if not (math.isfinite(km) and km > 0):
        raise ValueError(f"error_correlation_km must be finite and > 0, but got {value!r}.")
    return km * 1_000.0


def _random_field(
    rng: np.random.Generator,
    x: F64Array,
    y: F64Array,
    cluster: IdArray,
    n_clusters: int,
    correlation_m: float,
) -> F64Array:
    """A smooth stationary random field at the points ``(x, y)`` (cluster-local metres), mean 0, variance 1.

    A sum of :data:`_FIELD_FEATURES` random Fourier features, ``sqrt(2 / M) sum_m
    cos(w_m . p + phi_m)`` with ``w_m ~ N(0, 2 / L^2 I)`` and ``phi_m ~ U(0, 2 pi)``,
    whose covariance is ``exp(-(d / L)^2)`` at a distance ``d`` (so the correlation
    is 1/e at ``d = L``). Each cluster has a field of its own (clusters are more than
    100 km apart, so they are independent anyway). Nearly Gaussian (a sum of many
    independent terms) and symmetric about 0.
    """
    m = _FIELD_FEATURES
    omega = rng.normal(0.0, math.sqrt(2.0) / correlation_m, (n_clusters, m, 2))
    phase = rng.uniform(0.0, 2 * math.pi, (n_clusters, m))
    out = np.zeros(x.size)
    for c in range(n_clusters):
        members = np.flatnonzero(cluster == c)
        for first in range(0, members.size, _CHUNK_ITEMS):
            rows = members[first : first + _CHUNK_ITEMS]
            arg = np.outer(x[rows], omega[c, :, 0]) + np.outer(y[rows], omega[c, :, 1]) + phase[c]
            out[rows] = np.cos(arg).sum(axis=1) * math.sqrt(2.0 / m)
    return out


def _error_weight(field: F64Array) -> F64Array:
    """Multiplier of the error rates at each field: ``2 Phi(z)``, uniform on [0, 2] for a Gaussian field (mean 1)."""
    erf = np.frompyfunc(math.erf, 1, 1)
    return 1.0 + erf(field / math.sqrt(2.0)).astype(np.float64)


def _rehost_partial_fps(
    rng: np.random.Generator,
    rings: _Rings,
    layout: _Layout,
    bbox: F64Array,
    item_kind: IdArray,
    item_cluster: IdArray,
    field_shapes: _Shapes,
    fp_host: IdArray,
) -> tuple[_Rings, _Layout]:
    """Move the partial false positives onto new hosts ``fp_host``: new shapes, places and ranks.

    ``item_cluster`` and ``bbox`` are updated in place. A partial false positive is
    the last kind of shaped item, one unclosed 4-vertex ring each, so its vertices
    are the last ones of ``rings``; they are drawn anew (rectangles of 10-40 % of the
    new host's area at its angle) and the item is placed on the new host as
    :func:`_place_items` places it. Fields keep their rank; each partial false
    positive comes right after its host, as there.
    """
    partial = np.flatnonzero(item_kind == _FP_PARTIAL)
    if partial.size == 0:
        return rings, layout
    item_cluster[partial] = item_cluster[fp_host]
    new = _make_rings(rng, _sample_partial_fp_shapes(rng, field_shapes, fp_host))
    n_vertices = 4 * partial.size
    if new.x.size != n_vertices or rings.ring_item[-partial.size :].tolist() != partial.tolist():
        raise AssertionError("partial false positives are not the last single-ring items")
    x, y = rings.x.copy(), rings.y.copy()
    x[-n_vertices:], y[-n_vertices:] = new.x, new.y
    rings = dataclasses.replace(rings, x=x, y=y)
    bbox[partial] = np.column_stack(
        [new.x.reshape(-1, 4).min(axis=1), new.y.reshape(-1, 4).min(axis=1),
         new.x.reshape(-1, 4).max(axis=1), new.y.reshape(-1, 4).max(axis=1)]
    )  # fmt: skip
    tx, ty = layout.tx.copy(), layout.ty.copy()
    _place_partial_fps(tx, ty, bbox, partial, fp_host, _partial_fp_reach(rng, partial.size))
    anchor = np.arange(item_kind.size)
    anchor[partial] = fp_host
    is_partial = item_kind == _FP_PARTIAL
    rank = np.empty(item_kind.size, dtype=np.int64)
    rank[np.lexsort((is_partial, layout.rank[anchor]))] = np.arange(item_kind.size)
    return rings, dataclasses.replace(layout, tx=tx, ty=ty, rank=rank)


def _add_merges(
    rng: np.random.Generator,
    outcome: IdArray,
    ref_local: GeomArray,
    next_in_row: IdArray,
    fp_host: IdArray,
    weight: F64Array | None = None,
) -> IdArray:
    """Copy of ``outcome`` where about ERROR_MIX["merge"] of the fields are merged in pairs.

    A merge joins a field with the next field to its right in the same row, when
    they are at most _MERGE_MAX_GAP_M apart. Merges do not chain, and fields that
    host a partial false positive are not merged. With ``weight`` (one per field,
    mean about 1) a field starts a merge at its weight times the usual rate.
    """
    n = ref_local.size
    outcome = outcome.copy()
    free = np.ones(n, dtype=bool)
    free[fp_host] = False
    has_neighbour = (next_in_row >= 0) & (next_in_row < n) & free
    has_neighbour[has_neighbour] &= free[next_in_row[has_neighbour]]
    # Start a merge at rate merge/2 (two fields each), scaled up for the fields that
    # cannot start one and for the starts dropped below.
    p_start = min(1.0, 1.3 * ERROR_MIX["merge"] / 2 / max(float(has_neighbour.mean()) if n else 1.0, 1e-9))
    start = has_neighbour & (rng.random(n) < (p_start if weight is None else np.minimum(1.0, p_start * weight)))
    is_partner = np.zeros(n, dtype=bool)
    is_partner[next_in_row[start]] = True
    start &= ~is_partner
    i_first = np.flatnonzero(start)
    i_second = next_in_row[i_first]
    close = shapely.distance(ref_local[i_first], ref_local[i_second]) <= _MERGE_MAX_GAP_M
    outcome[i_first[close]] = _MERGE
    outcome[i_second[close]] = _MERGE_PARTNER
    return outcome


def _predict(
    rng: np.random.Generator,
    rings: _Rings,
    ref_local: GeomArray,
    outcome: IdArray,
    layout: _Layout,
    item_kind: IdArray,
    item_cluster: IdArray,
    shift_weight: F64Array | None = None,
) -> tuple[GeomArray, IdArray, IdArray, IdArray]:
    """Predictions in the cluster frame, metres.

    ``shift_weight`` (one per field) multiplies each field's own 0-2 m shift.

    Returns
    -------
    geoms : ndarray of object, shape (n_pred,)
    item : ndarray of int64, shape (n_pred,)
        Item each prediction comes from (a field, or the false positive or bad cell).
    sub : ndarray of int64, shape (n_pred,)
        0, or 1 for the second half of a split.
    kind : ndarray of int64, shape (n_pred,)
        Outcome code, or _PRED_FP_PARTIAL, _PRED_FP_FREE, _PRED_BAD.
    """
    n_ref = ref_local.size
    n_shaped = np.count_nonzero(item_kind <= _FP_PARTIAL)
    n_clusters = layout.extent.shape[0]
    # Registration shift: 0-3 m per cluster plus 0-2 m per field, random directions.
    cluster_angle, cluster_shift = rng.uniform(0, 2 * np.pi, n_clusters), rng.uniform(0, 3, n_clusters)
    field_angle, field_shift = rng.uniform(0, 2 * np.pi, n_ref), rng.uniform(0, 2, n_ref)
    if shift_weight is not None:
        field_shift = field_shift * shift_weight
    cluster = item_cluster[:n_ref]
    shift_x = cluster_shift[cluster] * np.cos(cluster_angle[cluster]) + field_shift * np.cos(field_angle)
    shift_y = cluster_shift[cluster] * np.sin(cluster_angle[cluster]) + field_shift * np.sin(field_angle)
    geoms, items, subs, kinds = [], [], [], []

    def add(g: GeomArray, i: IdArray, kind: int, sub: int = 0) -> None:
        geoms.append(g)
        items.append(i)
        subs.append(np.full(i.size, sub, dtype=np.int64))
        kinds.append(np.full(i.size, kind, dtype=np.int64))

    # Good: densified, vertex jitter, shifted.
    keep = np.zeros(n_shaped, dtype=bool)
    keep[:n_ref] = outcome == _GOOD
    sigma = np.zeros(n_shaped)
    sigma[:n_ref] = rng.uniform(0.5, 2.0, n_ref)
    tx, ty = layout.tx[:n_shaped].copy(), layout.ty[:n_shaped].copy()
    tx[:n_ref] += shift_x
    ty[:n_ref] += shift_y
    good = _item_geoms(rings, keep, tx, ty, densify_m=_DENSIFY_M, jitter_sigma_m=sigma, rng=rng)
    add(good, np.flatnonzero(keep), _GOOD)

    # Dilated or eroded by 2-5 m.
    i = np.flatnonzero(outcome == _DILATE_ERODE)
    distance = rng.uniform(2.0, 5.0, i.size) * rng.choice([-1.0, 1.0], i.size)
    g = shapely.buffer(ref_local[i], distance, join_style="mitre")
    add(_offset(g, shift_x[i], shift_y[i]), i, _DILATE_ERODE)

    # Merged with the right neighbour: the union, closed over the gap, 0.5-2 m larger.
    i = np.flatnonzero(outcome == _MERGE)
    j = layout.next_in_row[i]
    radius = shapely.distance(ref_local[i], ref_local[j]) / 2 + 1.0
    g = shapely.buffer(shapely.union(ref_local[i], ref_local[j]), radius, join_style="mitre")
    g = shapely.buffer(g, -(radius - rng.uniform(0.5, 2.0, i.size)), join_style="mitre")
    add(_offset(g, shift_x[i], shift_y[i]), i, _MERGE)

    # Split by a line through the centroid, the halves 1-3 m apart.
    i = np.flatnonzero(outcome == _SPLIT)
    g = ref_local[i]
    centre = shapely.get_coordinates(shapely.centroid(g))
    bounds = shapely.bounds(g)
    length = (bounds[:, 2] - bounds[:, 0]) + (bounds[:, 3] - bounds[:, 1]) + 100.0
    angle = rng.uniform(0.0, np.pi, i.size)
    along = np.column_stack([np.cos(angle), np.sin(angle)]) * length[:, None]
    across = np.column_stack([-np.sin(angle), np.cos(angle)])
    half_gap = rng.uniform(0.5, 1.5, i.size)[:, None]
    for sub, side in enumerate((1.0, -1.0)):
        base = centre + side * across * half_gap
        far = side * across * length[:, None]
        half_plane = shapely.polygons(np.stack([base - along, base + along, base + along + far, base - along + far], axis=1))
        part = _polygonal(shapely.intersection(g, half_plane))
        add(_offset(part, shift_x[i], shift_y[i]), i, _SPLIT, sub)

    # Bad shape: shrunk to 30-60 % of its linear size, or eroded by 0.2 sqrt(area).
    i = np.flatnonzero(outcome == _BAD_SHAPE)
    g = ref_local[i]
    scaled = _scale_about_centroid(g, rng.uniform(0.3, 0.6, i.size))
    eroded = shapely.buffer(g, -0.2 * np.sqrt(shapely.area(g)), join_style="mitre")
    use_eroded = (rng.random(i.size) < 0.5) & ~shapely.is_empty(eroded)
    g = np.where(use_eroded, eroded, scaled)
    add(_offset(g, shift_x[i], shift_y[i]), i, _BAD_SHAPE)

    # False positives, as shaped and placed.
    is_fp = (item_kind[:n_shaped] >= _FP_EMPTY) & (item_kind[:n_shaped] <= _FP_PARTIAL)
    fp_items = np.flatnonzero(is_fp)
    fp = _item_geoms(rings, is_fp, layout.tx[:n_shaped], layout.ty[:n_shaped])
    partial = item_kind[fp_items] == _FP_PARTIAL
    add(fp[partial], fp_items[partial], _PRED_FP_PARTIAL)
    add(fp[~partial], fp_items[~partial], _PRED_FP_FREE)

    bad_items = np.flatnonzero(item_kind == _BAD_PRED)
    add(_bad_geoms(layout.tx, layout.ty, item_kind == _BAD_PRED), bad_items, _PRED_BAD)
    return np.concatenate(geoms), np.concatenate(items), np.concatenate(subs), np.concatenate(kinds)


def _scores(rng: np.random.Generator, pred_kind: IdArray, decimals: int | None = None) -> F64Array:
    """Score of each prediction, Beta-distributed by kind, float64 in [0, 1] (rounded when asked)."""
    a, b = np.ones(pred_kind.size), np.ones(pred_kind.size)
    for kind, (a_kind, b_kind) in _SCORE_BETA.items():
        a[pred_kind == kind], b[pred_kind == kind] = a_kind, b_kind
    scores = rng.beta(a, b)
    return scores if decimals is None else np.round(scores, decimals)


# ---------------------------------------------------------------------------
# Site layers: AOIs and the annotated area
# ---------------------------------------------------------------------------

_AOI_SECTORS = (8, 14)  # AOIs around the clusters (inclusive range)
_AOI_EMPTY = (2, 3)  # AOIs away from every cluster (inclusive range)
_AOI_NAMES = (
    "Arkansas Valley", "Beaver Creek", "Big Sandy", "Canadian Breaks", "Cimarron Plains",
    "Comanche Grassland", "High Plains North", "High Plains South", "Kiowa Flats", "Llano Estacado",
    "Mesa de Maya", "Ogallala Rim", "Pawnee Buttes", "Purgatoire Mesa", "Raton Basin",
    "Republican Basin", "Rita Blanca", "Sand Hills", "Smoky Hill", "Wildhorse Draw",
)  # fmt: skip
_SITE_CELL_DEG = 0.03  # grid cell that links geometries into clusters (< 3.4 km)
_SITE_MERGE_KM = 5.0  # clusters closer than this are one
_HUB_MIN_RADIUS_M = (30_000.0, 45_000.0)  # the AOIs around a cluster reach at least this far
_FAN_GAP_DEG = (50.0, 100.0)  # the wedge around a cluster that no AOI covers
_MIN_SECTOR_DEG = 15.0
_ARC_STEP_DEG = 25.0  # outer edges of a sector AOI span at most about this angle
_EMPTY_RADIUS_M = (18_000.0, 35_000.0)
_EMPTY_CLEARANCE_DEG = 0.05  # AOIs away from the data keep this far from every cluster's bbox
_EMPTY_TRIES = 400
_KM_PER_DEG_LAT = 110.57
_KM_PER_DEG_LON = 111.32  # at the equator


@dataclass(frozen=True, slots=True)
class _Sites:
    """Clusters of geometries found in the layers, lon/lat degrees.

    ``extent`` (n, 4) is the bbox (lon_min, lat_min, lon_max, lat_max) of all
    geometries of a cluster, ``core`` that of its reference geometries (the extent
    when it has none), ``n_ref`` the number of its reference geometries and
    ``pred_beyond`` (n, 4) the number of its predictions wholly west, east, south
    and north of ``core`` (false positives outside the cluster).
    """

    extent: F64Array
    core: F64Array
    n_ref: IdArray
    pred_beyond: IdArray

    @property
    def n(self) -> int:
        return int(self.extent.shape[0])


@dataclass(frozen=True, slots=True)
class _Hubs:
    """Clusters that AOIs and annotated polygons are built around.

    ``site`` is the cluster of each hub; ``group`` the hub of each cluster (the
    nearest one). With few clusters every cluster is its own hub.
    """

    site: IdArray
    group: IdArray


@functools.lru_cache(maxsize=64)
def _utm_transformers(epsg: int) -> tuple[pyproj.Transformer, pyproj.Transformer]:
    """Transformers lon/lat -> UTM zone ``epsg`` and back."""
    return (
        pyproj.Transformer.from_crs(4326, epsg, always_xy=True),
        pyproj.Transformer.from_crs(epsg, 4326, always_xy=True),
    )


class _Frame:
    """The UTM zone (metres) of a lon/lat point, and the way back to lon/lat.

    Geometries go back vertex by vertex, without densifying, so their edges are
    straight lines in lon/lat.
    """

    def __init__(self, lon: float, lat: float) -> None:
        zone = min(60, max(1, math.floor((lon + 180.0) / 6.0) + 1))
        self.epsg = (32600 if lat >= 0 else 32700) + zone
        self._fwd, self._inv = _utm_transformers(self.epsg)

    def xy(self, lon: F64Array | float, lat: F64Array | float) -> tuple[F64Array, F64Array]:
        x, y = self._fwd.transform(np.asarray(lon, dtype=float), np.asarray(lat, dtype=float))
        return np.asarray(x, dtype=float), np.asarray(y, dtype=float)

    def to_lonlat(self, geom: shapely.Geometry) -> shapely.Geometry:
        return shapely.transform(geom, lambda xy: np.column_stack(self._inv.transform(xy[:, 0], xy[:, 1])))


def _box_points(bbox: F64Array) -> tuple[F64Array, F64Array]:
    """Corners, edge midpoints and centre of each lon/lat bbox in ``bbox`` (n, 4)."""
    bbox = np.atleast_2d(bbox)
    lon = np.stack([bbox[:, 0], (bbox[:, 0] + bbox[:, 2]) / 2, bbox[:, 2]], axis=1)
    lat = np.stack([bbox[:, 1], (bbox[:, 1] + bbox[:, 3]) / 2, bbox[:, 3]], axis=1)
    return np.repeat(lon, 3, axis=1).ravel(), np.tile(lat, (1, 3)).ravel()


def _centre(bbox: F64Array) -> tuple[float, float]:
    return float((bbox[0] + bbox[2]) / 2), float((bbox[1] + bbox[3]) / 2)


def _layer_boxes(layer: geopandas.GeoDataFrame) -> F64Array:
    """``(n, 4)`` lon/lat bboxes of the non-empty geometries of ``layer`` (of their bbox corners)."""
    bounds = layer.geometry.bounds.to_numpy(dtype=float)
    bounds = bounds[np.isfinite(bounds).all(axis=1)]
    if layer.crs is None or pyproj.CRS.from_user_input(layer.crs).equals(REF_CRS) or bounds.size == 0:
        return bounds.reshape(-1, 4)
    x = np.column_stack([bounds[:, 0], bounds[:, 0], bounds[:, 2], bounds[:, 2]])
    y = np.column_stack([bounds[:, 1], bounds[:, 3], bounds[:, 1], bounds[:, 3]])
    x, y = pyproj.Transformer.from_crs(layer.crs, REF_CRS, always_xy=True).transform(x, y)
    boxes = np.column_stack([x.min(axis=1), y.min(axis=1), x.max(axis=1), y.max(axis=1)])
    return boxes[np.isfinite(boxes).all(axis=1)]


def _components(pairs_a: IdArray, pairs_b: IdArray, n: int) -> IdArray:
    """Connected component of each of ``n`` nodes (dense labels), edges given both ways."""
    label = np.arange(n)
    while pairs_a.size:
        new = label.copy()
        np.minimum.at(new, pairs_a, label[pairs_b])
        new = new[new]
        if np.array_equal(new, label):
            break
        label = new
    return np.unique(label, return_inverse=True)[1].astype(np.int64)


def _group_boxes(boxes: F64Array, site: IdArray, n: int) -> F64Array:
    """``(n, 4)`` bbox of the ``boxes`` of each site (inf where a site has none)."""
    out = np.column_stack([np.full(n, np.inf), np.full(n, np.inf), np.full(n, -np.inf), np.full(n, -np.inf)])
    for k in range(4):
        (np.minimum if k < 2 else np.maximum).at(out[:, k], site, boxes[:, k])
    return out


def _find_sites(reference: geopandas.GeoDataFrame, predicted: geopandas.GeoDataFrame) -> _Sites:
    """Group the geometries of both layers into clusters (see :class:`_Sites`)."""
    ref_boxes, pred_boxes = _layer_boxes(reference), _layer_boxes(predicted)
    boxes = np.concatenate([ref_boxes, pred_boxes])
    n_boxes = boxes.shape[0]
    if n_boxes == 0:  # nothing to lay sites over: pretend there are small clusters at the anchors
        anchors = np.array(_SLOT_ANCHORS)
        box = np.column_stack([anchors - 0.01, anchors + 0.01])
        return _Sites(box, box.copy(), np.zeros(len(anchors), dtype=np.int64), np.zeros((len(anchors), 4), dtype=np.int64))
    # Link geometries whose bbox corners fall in neighbouring grid cells.
    x = np.concatenate([boxes[:, 0], boxes[:, 0], boxes[:, 2], boxes[:, 2]])
    y = np.concatenate([boxes[:, 1], boxes[:, 3], boxes[:, 1], boxes[:, 3]])
    ix = np.floor((x - x.min()) / _SITE_CELL_DEG).astype(np.int64)
    iy = np.floor((y - y.min()) / _SITE_CELL_DEG).astype(np.int64)
    stride = int(iy.max()) + 3  # keys of (ix, iy +- 1) never alias another column
    cells, corner_cell = np.unique(ix * stride + iy, return_inverse=True)
    a, b = [], []
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            if dx or dy:
                target = cells + dx * stride + dy
                pos = np.minimum(np.searchsorted(cells, target), cells.size - 1)
                hit = cells[pos] == target
                a.append(np.flatnonzero(hit))
                b.append(pos[hit])
    corner_site = _components(np.concatenate(a), np.concatenate(b), cells.size)[corner_cell.ravel()]
    # Each box goes with its first corner; boxes whose corners fell apart overlap, so
    # the merge below joins their clusters.
    site = np.unique(corner_site[:n_boxes], return_inverse=True)[1].astype(np.int64)
    # Merge clusters whose bboxes are less than _SITE_MERGE_KM apart.
    while True:
        n = int(site.max()) + 1
        extent = _group_boxes(boxes, site, n)
        gap_lon = np.maximum(0.0, np.maximum.outer(extent[:, 0], extent[:, 0]) - np.minimum.outer(extent[:, 2], extent[:, 2]))
        gap_lat = np.maximum(0.0, np.maximum.outer(extent[:, 1], extent[:, 1]) - np.minimum.outer(extent[:, 3], extent[:, 3]))
        mid_lat = np.deg2rad(np.add.outer(extent[:, 1] + extent[:, 3], extent[:, 1] + extent[:, 3]) / 4)
        gap_km = np.hypot(gap_lon * _KM_PER_DEG_LON * np.cos(mid_lat), gap_lat * _KM_PER_DEG_LAT)
        close_a, close_b = np.nonzero((gap_km < _SITE_MERGE_KM) & ~np.eye(n, dtype=bool))
        if close_a.size == 0:
            break
        site = _components(close_a, close_b, n)[site]
    ref_site, pred_site = site[: ref_boxes.shape[0]], site[ref_boxes.shape[0] :]
    n_ref = np.bincount(ref_site, minlength=n).astype(np.int64)
    core = np.where((n_ref > 0)[:, None], _group_boxes(ref_boxes, ref_site, n), extent)
    # Predictions wholly west, east, south or north of their cluster's reference bbox.
    c = core[pred_site]
    beyond = np.column_stack(
        [pred_boxes[:, 2] < c[:, 0], pred_boxes[:, 0] > c[:, 2], pred_boxes[:, 3] < c[:, 1], pred_boxes[:, 1] > c[:, 3]]
    )
    pred_beyond = np.stack([np.bincount(pred_site, weights=beyond[:, k], minlength=n) for k in range(4)], axis=1)
    return _Sites(extent, core, n_ref, pred_beyond.astype(np.int64))


def _make_hubs(sites: _Sites, n_main: int) -> _Hubs:
    """Every cluster when there are few; else spread-out clusters (farthest first) and their neighbours."""
    n_hubs = min(sites.n, max(1, n_main // 2))
    if n_hubs == sites.n:
        return _Hubs(np.arange(sites.n), np.arange(sites.n))
    lon = (sites.core[:, 0] + sites.core[:, 2]) / 2
    lat = (sites.core[:, 1] + sites.core[:, 3]) / 2

    def km_from(k: int) -> F64Array:
        return np.hypot((lon - lon[k]) * _KM_PER_DEG_LON * np.cos(np.deg2rad((lat + lat[k]) / 2)), (lat - lat[k]) * _KM_PER_DEG_LAT)

    chosen = [int(np.argmax(sites.n_ref))]
    nearest = km_from(chosen[0])
    distance = [nearest]
    while len(chosen) < n_hubs:
        chosen.append(int(np.argmax(nearest)))
        distance.append(km_from(chosen[-1]))
        nearest = np.minimum(nearest, distance[-1])
    return _Hubs(np.array(chosen, dtype=np.int64), np.argmin(np.stack(distance), axis=0).astype(np.int64))


def _polygon_only(geom: shapely.Geometry) -> shapely.Geometry:
    """The polygons of ``geom`` (a Polygon, MultiPolygon or empty Polygon)."""
    if geom.geom_type in ("Polygon", "MultiPolygon"):
        return geom
    polys = [p for p in shapely.get_parts(geom) if p.geom_type == "Polygon" and not p.is_empty]
    if not polys:
        return shapely.Polygon()
    return polys[0] if len(polys) == 1 else shapely.MultiPolygon(polys)


def _core_frame(sites: _Sites, site: int) -> tuple[_Frame, float, float, float, float]:
    """UTM frame of a cluster's core, its centre there and its half width and height (>= 50 m)."""
    lon, lat = _centre(sites.core[site])
    frame = _Frame(lon, lat)
    cx, cy = frame.xy(lon, lat)
    px, py = frame.xy(*_box_points(sites.core[site]))
    return frame, float(cx), float(cy), max(float(np.abs(px - cx).max()), 50.0), max(float(np.abs(py - cy).max()), 50.0)


def _sector_aois(rng: np.random.Generator, sites: _Sites, hubs: _Hubs, n_main: int) -> GeomArray:
    """``n_main`` AOIs: a fan of sectors around each hub, lon/lat."""
    n_hubs = hubs.site.size
    weights = np.bincount(hubs.group, weights=sites.n_ref, minlength=n_hubs) + 1.0
    counts = 2 + rng.multinomial(n_main - 2 * n_hubs, weights / weights.sum())
    out = []
    for h, site in enumerate(hubs.site):
        frame, cx, cy, a, b = _core_frame(sites, int(site))
        apex = (cx + rng.uniform(-0.15, 0.15) * a, cy + rng.uniform(-0.15, 0.15) * b)
        ex, ey = frame.xy(*_box_points(sites.extent[hubs.group == h]))
        reach = float(np.hypot(ex - apex[0], ey - apex[1]).max())
        radius = max(1.15 * reach, rng.uniform(*_HUB_MIN_RADIUS_M))
        # Directions (and angular half widths) of the hub's other clusters, which the open wedge avoids.
        others = np.flatnonzero((hubs.group == h) & (np.arange(sites.n) != site))
        ox, oy = frame.xy(*_box_points(sites.extent[others]))
        ox, oy = ox.reshape(-1, 9) - apex[0], oy.reshape(-1, 9) - apex[1]
        dist = np.hypot(ox[:, 4], oy[:, 4])
        half = np.arcsin(np.minimum(1.0, np.hypot(ox - ox[:, 4:5], oy - oy[:, 4:5]).max(axis=1) / np.maximum(dist, 1.0)))
        avoid = np.column_stack([np.arctan2(oy[:, 4], ox[:, 4]), half + math.radians(5.0)])
        out.extend(frame.to_lonlat(g) for g in _fan(rng, apex, radius, math.hypot(a, b), int(counts[h]), avoid))
    geoms = np.array(out, dtype=object)
    if n_hubs >= 2:
        geoms = _clip_to_hub_cells(geoms, np.repeat(np.arange(n_hubs), counts), sites, hubs)
    return geoms


def _fan(
    rng: np.random.Generator, apex: tuple[float, float], radius: float, r_core: float, n: int, avoid: F64Array
) -> list[shapely.Polygon]:
    """``n`` sectors around ``apex`` (metres) that leave a wedge open.

    The open wedge misses the directions ``avoid[:, 0]`` (radians) by at least
    ``avoid[:, 1]`` when one of 16 random orientations allows it, so whole
    clusters of a hub's group are not left out.

    Neighbouring sectors share a boundary: a long straight edge from the apex out
    past the cluster, a bend, and a second edge out to the rim; the rim has a vertex
    every ~25 degrees. One shared boundary in each fan (and about half the others)
    is moved on one side, from a few band widths away from the apex out to the rim,
    by a band of 3-8 % of the cluster's radius into the neighbour, so the two
    sectors overlap there; about a fifth of the others are moved back by 1-3 %,
    which leaves a thin gap. Polygons are built from their vertices (no overlay),
    so they stay simple after a vertex-wise reprojection.
    """
    gap = math.radians(rng.uniform(*_FAN_GAP_DEG))
    min_width = math.radians(_MIN_SECTOR_DEG)
    widths = min_width + (2 * math.pi - gap - n * min_width) * rng.dirichlet(np.full(n, 4.0))
    fan = 2 * math.pi - gap
    starts = rng.uniform(0.0, 2 * math.pi, 16)
    # Angle of each direction to avoid past the start of the open wedge, in [0, 2 pi).
    past_gap_start = np.mod(avoid[None, :, 0] - (starts[:, None] + fan), 2 * math.pi)
    clear = ((past_gap_start > gap + avoid[None, :, 1]) & (past_gap_start < 2 * math.pi - avoid[None, :, 1])).all(axis=1)
    theta = starts[int(np.argmax(clear))] + np.r_[0.0, np.cumsum(widths)]
    kink_r = np.minimum(np.maximum(1.3 * r_core, rng.uniform(0.4, 0.6, n + 1) * radius), 0.75 * radius)
    outer_theta = theta + np.deg2rad(rng.uniform(-5.0, 5.0, n + 1))
    outer_r = radius * rng.uniform(0.95, 1.2, n + 1)
    apex_xy = np.asarray(apex, dtype=float)
    kink = apex_xy + kink_r[:, None] * np.column_stack([np.cos(theta), np.sin(theta)])
    outer = apex_xy + outer_r[:, None] * np.column_stack([np.cos(outer_theta), np.sin(outer_theta)])
    base = [np.stack([kink[j], outer[j]]) for j in range(n + 1)]  # each boundary from the apex outwards
    # Inner boundaries 1 .. n-1: 0 shared, 1 overlap, 2 gap; the sector on one side
    # ("mover") gets the moved copy, the other keeps the base line.
    seen_by = [[b, b] for b in base]  # [as the end of sector j - 1, as the start of sector j]
    if n >= 2:
        mode = rng.choice(3, n - 1, p=[0.3, 0.5, 0.2])
        mode[rng.integers(0, n - 1)] = 1
        band = np.where(
            mode == 1,
            np.clip(rng.uniform(0.03, 0.08, n - 1) * r_core, 30.0, 1_500.0),
            np.clip(rng.uniform(0.01, 0.03, n - 1) * r_core, 15.0, 500.0),
        )
        lower_moves = rng.random(n - 1) < 0.5
        for k in np.flatnonzero(mode):
            j = k + 1  # boundary between sectors j - 1 (lower angles) and j
            start = 3.0 * band[k] / math.sin(min(widths[j - 1], widths[j], math.pi / 2))
            if start >= 0.9 * kink_r[j]:
                continue
            # +1: towards sector j (larger angles). An overlap moves the boundary
            # into the other sector, a gap into the mover's own.
            towards_upper = lower_moves[k] == (mode[k] == 1)
            moved = _offset_line(np.vstack([apex_xy, base[j]]), start, float(band[k]) * (1.0 if towards_upper else -1.0))
            seen_by[j][0 if lower_moves[k] else 1] = moved
    sectors = []
    for i in range(n):
        first, last = seen_by[i][1], seen_by[i + 1][0]
        a0, a1 = outer_theta[i], outer_theta[i + 1]
        m = max(0, math.ceil((a1 - a0) / math.radians(_ARC_STEP_DEG)) - 1)
        t = (np.arange(1, m + 1) + rng.uniform(-0.25, 0.25, m)) / (m + 1)
        r = radius * rng.uniform(0.95, 1.2, m)
        arc = apex_xy + r[:, None] * np.column_stack([np.cos(a0 + t * (a1 - a0)), np.sin(a0 + t * (a1 - a0))])
        sectors.append(shapely.Polygon(np.vstack([apex_xy[None], first, arc, last[::-1]])))
    return sectors


def _offset_line(line: F64Array, start: float, offset: float) -> F64Array:
    """``line`` (apex, kink, outer) without the apex, moved sideways by ``offset`` from ``start`` metres on.

    Positive offsets go to the left of the line (towards larger angles around the
    apex). Returns the vertices after the apex: the point at ``start``, its moved
    copy, the moved kink (mitred) and the moved outer end.
    """
    d1 = (line[1] - line[0]) / np.linalg.norm(line[1] - line[0])
    d2 = (line[2] - line[1]) / np.linalg.norm(line[2] - line[1])
    n1, n2 = np.array([-d1[1], d1[0]]), np.array([-d2[1], d2[0]])
    at = line[0] + start * d1
    mitre = (n1 + n2) / (1.0 + float(n1 @ n2))
    return np.stack([at, at + offset * n1, line[1] + offset * mitre, line[2] + offset * n2])


def _clip_to_hub_cells(geoms: GeomArray, hub_of: IdArray, sites: _Sites, hubs: _Hubs) -> GeomArray:
    """Cut each hub's AOIs to the hub's Voronoi cell (lon scaled by cos(lat)), where they stick out."""
    centres = np.array([_centre(sites.core[s]) for s in hubs.site])
    scale = math.cos(math.radians(float(centres[:, 1].mean())))
    factor = np.array([scale, 1.0])
    points = centres * factor
    lo, hi = points.min(axis=0) - 1_000.0, points.max(axis=0) + 1_000.0
    cells = shapely.get_parts(shapely.voronoi_polygons(shapely.multipoints(points), extend_to=shapely.box(*lo, *hi)))
    cell_of_hub = [cells[np.flatnonzero(shapely.contains_xy(cells, *p))[0]] for p in points]
    out = geoms.copy()
    for k, geom in enumerate(geoms):
        scaled = shapely.transform(geom, lambda xy: xy * factor)
        cell = cell_of_hub[hub_of[k]]
        if not shapely.contains(cell, scaled):
            clipped = _polygon_only(shapely.intersection(scaled, cell))
            out[k] = shapely.transform(clipped, lambda xy: xy / factor)
    return out[~shapely.is_empty(out)]


def _star(
    rng: np.random.Generator,
    centre: tuple[float, float],
    radius: float,
    n_vertices: int,
    *,
    angle_jitter: float,
    radius_jitter: tuple[float, float],
) -> shapely.Polygon:
    """A star-shaped polygon: vertex j at angle ``phase + 2 pi (j + da) / n`` and radius ``radius (1 + dr)``."""
    j = np.arange(n_vertices)
    angle = rng.uniform(0, 2 * math.pi) + 2 * math.pi * (j + rng.uniform(-angle_jitter, angle_jitter, n_vertices)) / n_vertices
    r = radius * (1.0 + rng.uniform(*radius_jitter, n_vertices))
    return shapely.Polygon(np.column_stack([centre[0] + r * np.cos(angle), centre[1] + r * np.sin(angle)]))


def _empty_aois(rng: np.random.Generator, sites: _Sites, taken: GeomArray, n_empty: int) -> GeomArray:
    """``n_empty`` star-shaped AOIs of 18-35 km radius that touch no cluster, lon/lat.

    Centres are drawn within 1 degree of the data; first those that also overlap
    no other AOI are taken, then those that overlap none of each other; if that is
    not enough, the rest go in a row south of the data.
    """
    ext = sites.extent
    c = _EMPTY_CLEARANCE_DEG
    keep_out = shapely.union_all(shapely.box(ext[:, 0] - c, ext[:, 1] - c, ext[:, 2] + c, ext[:, 3] + c))
    lon = rng.uniform(ext[:, 0].min() - 1.0, ext[:, 2].max() + 1.0, _EMPTY_TRIES)
    lat = np.clip(rng.uniform(ext[:, 1].min() - 1.0, ext[:, 3].max() + 1.0, _EMPTY_TRIES), -80.0, 80.0)
    radius = rng.uniform(*_EMPTY_RADIUS_M, _EMPTY_TRIES)
    n_vertices = rng.integers(8, 13, _EMPTY_TRIES)
    shape_seeds = rng.integers(0, 2**63, _EMPTY_TRIES)

    def star_at(k: int, lon_k: float, lat_k: float) -> shapely.Geometry:
        frame = _Frame(lon_k, lat_k)
        x, y = frame.xy(lon_k, lat_k)
        star = _star(np.random.default_rng(int(shape_seeds[k])), (float(x), float(y)), float(radius[k]),
                     int(n_vertices[k]), angle_jitter=0.3, radius_jitter=(-0.2, 0.2))  # fmt: skip
        return frame.to_lonlat(star)

    chosen: list[shapely.Geometry] = []
    used: set[int] = set()
    for avoid_aois in (True, False):
        for k in range(_EMPTY_TRIES):
            if len(chosen) == n_empty:
                break
            if k in used:
                continue
            star = star_at(k, float(lon[k]), float(lat[k]))
            blocked = [keep_out, *chosen, *(taken if avoid_aois else ())]
            if not shapely.intersects(star, np.array(blocked, dtype=object)).any():
                chosen.append(star)
                used.add(k)
    k = 0
    while len(chosen) < n_empty:  # only when the data fill their whole region
        chosen.append(star_at(k, float(ext[:, 0].min()) + 1.0 * len(chosen), float(ext[:, 1].min()) - 1.5))
        k += 1
    return np.array(chosen, dtype=object)


def _annotated_areas(rng: np.random.Generator, sites: _Sites, hubs: _Hubs) -> GeomArray:
    """Annotated Polygons: a star around each hub's clusters (some cut in two overlapping halves), minus bites.

    Each cluster loses the area beyond one side of its reference bbox (from up to
    12 % of its half size inside the bbox) -- the side with the most predictions
    beyond it, so those false positives lie outside -- and 1-2 round bites
    centred on the edge of its reference bbox, of 35-60 % of its smaller half
    side, so the fields and predictions there lie outside the annotated area.
    """
    n_hubs = hubs.site.size
    split = rng.random(n_hubs) < 0.5
    split[rng.integers(0, n_hubs)] = True
    parts = []
    for h, site in enumerate(hubs.site):
        frame, cx, cy, _, _ = _core_frame(sites, int(site))
        qx, qy = frame.xy(*_box_points(sites.core[hubs.group == h]))
        reach = max(float(np.hypot(qx - cx, qy - cy).max()), 200.0)
        radius = reach * rng.uniform(1.15, 1.4)
        star = _star(rng, (cx, cy), radius, int(rng.integers(12, 17)), angle_jitter=0.25, radius_jitter=(0.0, 0.15))
        if split[h]:
            phi = rng.uniform(0.0, math.pi)
            overlap = rng.uniform(0.03, 0.08) * reach
            big = 4.0 * radius
            for side in (1.0, -1.0):
                base = np.array([cx, cy]) - side * overlap * np.array([math.cos(phi), math.sin(phi)])
                along = big * np.array([-math.sin(phi), math.cos(phi)])
                across = side * big * np.array([math.cos(phi), math.sin(phi)])
                half = shapely.Polygon([base - along, base + along, base + along + across, base - along + across])
                parts.append(frame.to_lonlat(_polygon_only(shapely.intersection(star, half))))
        else:
            parts.append(frame.to_lonlat(star))
    bites = []
    for site in range(sites.n):
        frame, cx, cy, a, b = _core_frame(sites, site)
        # Cut the area off along one side of the cluster, the side with the most
        # predictions beyond it (false positives outside the cluster) if any.
        side = int(np.argmax(sites.pred_beyond[site] + rng.random(4)))
        ex, ey = frame.xy(*_box_points(sites.extent[site]))
        # Past the whole star of a cluster that is its own hub; else only near the cluster.
        alone = np.count_nonzero(hubs.group == hubs.group[site]) == 1
        margin = 1.7 * math.hypot(a, b) + 5_000.0 if alone else 5_000.0
        x0, y0, x1, y1 = ex.min() - margin, ey.min() - margin, ex.max() + margin, ey.max() + margin
        inward = rng.uniform(-0.02, 0.12)
        cut = [
            (x0, y0, cx - a * (1.0 - inward), y1),
            (cx + a * (1.0 - inward), y0, x1, y1),
            (x0, y0, x1, cy - b * (1.0 - inward)),
            (x0, cy + b * (1.0 - inward), x1, y1),
        ][side]
        bites.append(frame.to_lonlat(shapely.box(*cut)))
        for _ in range(int(rng.integers(1, 3))):
            side, t = int(rng.integers(0, 4)), rng.uniform(-0.7, 0.7)
            x, y = [(cx - a, cy + t * b), (cx + a, cy + t * b), (cx + t * a, cy - b), (cx + t * a, cy + b)][side]
            r = rng.uniform(0.35, 0.6) * min(a, b)
            bites.append(frame.to_lonlat(_star(rng, (x, y), r, 14, angle_jitter=0.1, radius_jitter=(-0.1, 0.1))))
    bitten = shapely.difference(np.array(parts, dtype=object), shapely.union_all(bites))
    # A bite can cut a polygon in two: each piece becomes a row of its own.
    pieces = shapely.get_parts(np.array([_polygon_only(g) for g in bitten], dtype=object))
    return pieces[~shapely.is_empty(pieces)]

"""The public functions of :mod:`evalcore.synth`: :func:`make_layers`, :func:`make_site_layers`, :func:`write_layers`.

They draw from their generators in a fixed order and call the sections (shapes,
layout, geometry, attributes, predictions, sites) in that order; the same seed always
gives identical layers.
"""

from __future__ import annotations

import logging
import math
import operator
import os
import pathlib
import time
import uuid
from collections.abc import Callable

import geopandas
import numpy as np
import shapely

from evalcore._typing import F64Array
from evalcore.synth.attributes import _crops, _predicted_crops, _strata
from evalcore.synth.constants import (
    _BAD_CELL_HALF_M,
    _BAD_PRED,
    _BAD_REF,
    _FIELD,
    _FP_EMPTY,
    _FP_OUTSIDE,
    _FP_PARTIAL,
    _OUTCOME_NAMES,
    BAD_ROW_KINDS,
    FALSE_POSITIVE_RATE,
    FIELDS_PER_CLUSTER,
    FORMATS,
    LAYER_NAMES,
    PRED_CRS,
    REF_CRS,
)
from evalcore.synth.geometry import _bad_geoms, _item_geoms, _repair, _reproject
from evalcore.synth.layout import _place_clusters, _place_items
from evalcore.synth.predictions import (
    _add_merges,
    _check_correlation_km,
    _error_weight,
    _PRED_BAD,
    _predict,
    _random_field,
    _rehost_partial_fps,
    _sample_outcomes,
    _scores,
)
from evalcore.synth.shapes import (
    _check_count,
    _field_clusters,
    _item_bounds,
    _make_rings,
    _partial_fp_hosts,
    _sample_field_shapes,
    _sample_fp_shapes,
    _sample_partial_fp_shapes,
    _Shapes,
)
from evalcore.synth.sites import (
    _annotated_areas,
    _AOI_EMPTY,
    _AOI_NAMES,
    _AOI_SECTORS,
    _empty_aois,
    _find_sites,
    _make_hubs,
    _Sites,
    _sector_aois,
)

# The package's name, as before it was split into sections: log lines keep their source.
logger = logging.getLogger("evalcore.synth")


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

    See :mod:`evalcore.synth` for the layout of the fields and the error mix.

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
        Spatially clustered errors (see "Clustered errors" in :mod:`evalcore.synth`): a
        smooth random field with this correlation length (km, > 0) raises the rates of
        miss, merge, split and bad_shape and the per-field shift where it is high and
        lowers them where it is low, keeping the mean error mix. The reference layer is
        the one ``error_correlation_km=None`` gives; the predictions differ. Drawn from
        ``numpy.random.default_rng([seed, 2])`` (``seed`` must then be a non-negative
        integer). None (the default): independent errors, as always.

    Returns
    -------
    pred : geopandas.GeoDataFrame
        Predictions in :data:`PRED_CRS` with columns ``pred_id`` (int64, unique),
        ``score`` (float64 in [0, 1]) and ``crop`` (str: its source field's crop, now and
        then a similar crop; drawn from ``numpy.random.default_rng([seed, 3])``), and a
        RangeIndex.
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
    return _build_layers(
        n_ref, seed, lambda k: [operator.index(seed), k], n_clusters=n_clusters, bad_rows=bad_rows,
        score_decimals=score_decimals, correlation_m=correlation_m,
    )


def _build_layers(
    n_ref: int,
    seed: object,
    sub_seed: Callable[[int], object],
    *,
    n_clusters: int,
    bad_rows: bool,
    score_decimals: int | None,
    correlation_m: float | None,
    slots: tuple[F64Array, F64Array] | None = None,
) -> tuple[geopandas.GeoDataFrame, geopandas.GeoDataFrame]:
    """The body of :func:`make_layers`, with its generators' seeds and the clusters' slots given.

    ``seed`` seeds the main generator and ``sub_seed(k)`` the generator of its own of
    section ``k`` (2: clustered errors, 3: predicted crops); :func:`make_layers` passes
    ``seed`` and ``[seed, k]``, a block of :func:`evalcore.synth.stream.iter_blocks`
    its spawned seeds. ``slots`` (lon, lat of each cluster, degrees) puts the clusters
    there instead of drawing lattice slots (a block is one cluster of a larger layer).
    """
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
    clusters = _place_clusters(rng, layout, item_cluster, field_shapes.part_gap_m, n_clusters, slots=slots)

    # 3b. Clustered errors: outcomes redrawn from a random field over the fields'
    # places, and the partial false positives moved onto the new missed fields. Only
    # a generator of its own is used, so the reference layer stays the same.
    error_weight = None
    if correlation_m is not None:
        err_rng = np.random.default_rng(sub_seed(2))
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
    # The predicted crop from a generator of its own, so the layers drawn before it stayed the same.
    crop_of_item = np.full(item_kind.size, None, dtype=object)
    crop_of_item[ref_items] = ref["crop"].to_numpy(dtype=object)
    crop_of_item[ref_items[ref_items >= n_ref]] = None  # bad rows are no source
    pred_crop = _predicted_crops(np.random.default_rng(sub_seed(3)), crop_of_item[pred_item[pred_order]])
    pred = geopandas.GeoDataFrame(
        {
            "pred_id": rng.permutation(pred_order.size).astype(np.int64),
            "score": _scores(rng, pred_kind[pred_order], score_decimals),
            "crop": pred_crop,
        },
        geometry=geopandas.GeoSeries(pred_geoms[pred_order], crs=PRED_CRS),
    )

    if logger.isEnabledFor(logging.DEBUG):
        counts = np.bincount(outcome, minlength=len(_OUTCOME_NAMES))
        logger.debug(
            "make_layers(n_ref=%d, seed=%r, error_correlation_m=%r): %d reference rows, %d predicted rows, "
            "%d clusters, outcomes %s, %d false positives, %.2f s",
            n_ref, seed, correlation_m, len(ref), len(pred), n_clusters,
            dict(zip(_OUTCOME_NAMES, counts.tolist())), n_fp, time.perf_counter() - started,
        )  # fmt: skip
    return pred, ref


def make_site_layers(
    reference: geopandas.GeoDataFrame,
    predicted: geopandas.GeoDataFrame,
    seed: int = 0,
) -> tuple[geopandas.GeoDataFrame, geopandas.GeoDataFrame]:
    """Return (aoi, annotated) GeoDataFrames laid over the fields of ``reference`` and ``predicted``.

    See "AOI layer" and "Annotated-area layer" in :mod:`evalcore.synth`. The layers
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
    return _site_layers(_find_sites(reference, predicted), seed)


def _site_layers(sites: _Sites, seed: int) -> tuple[geopandas.GeoDataFrame, geopandas.GeoDataFrame]:
    """The body of :func:`make_site_layers`, from the clusters already found (a streamed layer finds them block by block)."""
    rng = np.random.default_rng([operator.index(seed), 1])
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

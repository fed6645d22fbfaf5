"""The public single-process entry points: :func:`evaluate`, :func:`evaluate_frame`,
:func:`pixels_per_field`.

A single-process run is the distributed run with every partition in one process: the
same phases (prepare, pairs, resolve, sums) over the same partition keys, so the same
seed draws the same bootstrap replicates either way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import geopandas
import numpy as np
import pandas as pd

from evalcore.engine.pairing import compute_pairs
from evalcore.engine.resolve import resolve_run, route
from evalcore.engine.sums import MergedSums, RefRows, merge_partitions, summarize_partition
from evalcore.engine.tables import field_table, prediction_table
from evalcore.boundary import candidate_boxes
from evalcore.groups import strata_values
from evalcore.layer_warnings import extent_of
from evalcore.metrics.checks import positive
from evalcore.metrics.classes import class_layer_columns
from evalcore.options import EvalOptions, RunPlan, check_options, make_run_plan
from evalcore.levels import Sites, aois_frame, prepare_sites, tiles_frame
from evalcore.arrays import index_of
from evalcore.pixels import count_tiles
from evalcore.layer import PreparedLayer
from evalcore.prepare import layer_geometries, prepare_layer
from evalcore.study import Study, prepare_study
from evalcore.summary import LayerTally, build_summary, level_tables, run_summary

__all__ = [
    "evaluate",
    "evaluate_frame",
    "evaluate_with_frame",
    "evaluate_tables",
    "EvaluationTables",
    "pixels_per_field",
    "EvalOptions",
    "check_options",
    "RunPlan",
    "build_summary",
]


@dataclass(frozen=True, slots=True)
class _Evaluation:
    """Everything one single-process evaluation computed."""

    options: EvalOptions
    plan: RunPlan
    ref: PreparedLayer
    pred: PreparedLayer
    fields: pd.DataFrame  # per reference field, indexed by position
    strata_codes: np.ndarray
    size_codes: np.ndarray
    merged: MergedSums
    strata_column: str | None
    sites: Sites
    preds: pd.DataFrame  # every prediction's matching outcome and sites, indexed by position
    study: Study | None = None


def _partition_of_rows(layer: PreparedLayer) -> tuple[list[tuple[int, int, int]], np.ndarray]:
    """The sorted distinct partition keys (UTM EPSG, tile x, tile y) and each row's index among them."""
    if len(layer) == 0:
        return [], np.empty(0, np.int64)
    arr = np.stack([layer.utm_epsg, layer.partition_x, layer.partition_y], axis=1).astype(np.int64)
    unique, part = np.unique(arr, axis=0, return_inverse=True)
    return [tuple(int(v) for v in row) for row in unique], part.ravel().astype(np.int64)


@dataclass(frozen=True)
class _Prepared:
    """A run up to its pairs: the layers prepared, the plan and every pair (phases 1-2)."""

    options: EvalOptions
    sites: Sites
    ref: PreparedLayer
    pred: PreparedLayer
    plan: RunPlan
    keys: list
    ref_part: np.ndarray
    all_refs: RefRows
    results: object
    strata_column: str | None
    study: Study | None = None


def _prepare_reference(reference: object, strata: object, size_bins: object, options: EvalOptions, sites: Sites,
                       study: Study | None = None):
    study = study if study is not None else prepare_study(options, options.equal_area_crs)
    ref = prepare_layer(reference, "reference", equal_area_crs=options.equal_area_crs, partition_size_m=options.partition_size_m, sites=sites,
                        study=study, class_column=class_layer_columns(options)[0])
    ref_strata = None
    if strata is not None:
        ref_strata = strata_values(reference, strata, ref.n_input)[ref.positions]
    keys, ref_part = _partition_of_rows(ref)
    counts: dict[tuple[int, int, int], dict[str | None, int]] = {}
    if ref_strata is None:  # every key has rows (np.unique made them): one count per key, no loop over rows
        counts = {key: {None: int(n)} for key, n in zip(keys, np.bincount(ref_part, minlength=len(keys)).tolist())}
    else:
        for k, name in zip(ref_part.tolist(), ref_strata.tolist()):
            per_key = counts.setdefault(keys[k], {})
            per_key[name] = per_key.get(name, 0) + 1
    area_range = (float(ref.area_m2.min()), float(ref.area_m2.max())) if len(ref) else ()
    plan = make_run_plan(counts, area_range, stratified=strata is not None, size_bins=size_bins, options=options)
    return ref, plan, keys, ref_part, RefRows.of_layer(ref, ref_strata, plan)


def _prepare_run(predicted: object, reference: object, strata: object, size_bins: object, options: EvalOptions,
                 reference_prepared: tuple | None = None, sites: Sites | None = None, study: Study | None = None) -> _Prepared:
    """Phases 1 and 2 in this process (the reference's preparation, the sites and the study may be given, to share them)."""
    sites = sites if sites is not None else prepare_sites(options, options.equal_area_crs)
    study = study if study is not None else prepare_study(options, options.equal_area_crs)
    ref, plan, keys, ref_part, all_refs = reference_prepared or _prepare_reference(reference, strata, size_bins, options, sites, study)
    pred = prepare_layer(
        predicted, "predicted", equal_area_crs=options.equal_area_crs, partition_size_m=options.partition_size_m, sites=sites,
        score_column=options.score_column, study=study, class_column=class_layer_columns(options)[1],
    )
    # Phase 2 once over everything: per-row results do not depend on the grouping.
    results = compute_pairs(
        ref,
        pred,
        pred_own=pred,
        ref_near=ref,
        iou_threshold=options.iou_threshold,
        boundary_tolerance_m=options.boundary_tolerance_m,
        boundary_sample_spacing_m=options.boundary_sample_spacing_m,
        boundary_iou_width_m=options.boundary_iou_width_m,
        ref_pools=all_refs.pools,
    )
    strata_column = strata if isinstance(strata, str) else None
    return _Prepared(options, sites, ref, pred, plan, keys, ref_part, all_refs, results, strata_column, study)


def _run(predicted: object, reference: object, strata: object, size_bins: object, options: EvalOptions) -> _Evaluation:
    """The phases of the distributed run, in this process: every partition in turn."""
    return _finish_run(_prepare_run(predicted, reference, strata, size_bins, options))


def _finish_run(prepared: _Prepared, resolved: object = None) -> _Evaluation:
    """Phases 3 (unless ``resolved`` is given) and 4 of a prepared run."""
    p = prepared
    options, plan, ref, pred, keys, ref_part, all_refs, results = p.options, p.plan, p.ref, p.pred, p.keys, p.ref_part, p.all_refs, p.results
    sites, strata_column = p.sites, p.strata_column
    if resolved is None:
        resolved = resolve_run(results, options, strata_names=plan.strata_names, sizes=plan.sizes)
    routing = route(ref.positions, ref_part, len(keys), results.pairs.ref_pos, resolved.contributions.ref_pos)

    # Phase 4 per partition key, as a cluster would run it.
    parts, frames = [], []
    for k, key in enumerate(keys):
        rows, pair_rows = routing.ref_rows[k], routing.pair_rows[k]
        summary, fields = summarize_partition(
            key,
            all_refs.take(rows),
            results.restrict(pair_rows, rows),
            {name: values[pair_rows] for name, values in resolved.pair_values.items()},
            resolved.contributions.take(routing.contribution_rows[k]),
            options,
            plan,
            resolved.draws.rows(rows) if resolved.draws is not None else None,
        )
        parts.append(summary)
        frames.append(fields)
    merged = merge_partitions(
        parts, resolved.unassigned, options, plan, resolved.homeless_tiles, resolved.homeless_aois, resolved.global_values,
        resolved.unassigned_replicates, resolved.columns, resolved.draws.n_units if resolved.draws is not None else None,
    )
    if options.pixel_gsd_m is not None:
        pixels = count_tiles(merged.tiles.keys, ref.geoms_source, ref.crs, pred.geoms_source, pred.crs, options, sites.annotated)
        merged = replace(merged, pixels=pixels)
    fields = pd.concat(frames).sort_index() if frames else _empty_fields()
    fields["matched_pred_pos"] = fields["matched_pred_pos"].astype(np.int64)
    fields["max_overlap_pred_pos"] = fields["max_overlap_pred_pos"].astype(np.int64)
    return _Evaluation(options, plan, ref, pred, fields, all_refs.strata_codes, all_refs.size_codes, merged, strata_column,
                       sites, resolved.preds, p.study)


def _empty_fields() -> pd.DataFrame:
    columns = {
        "matched": np.empty(0, bool),
        "matched_pred_pos": np.empty(0, np.int64),
        "iou": np.empty(0),
        "pred_area_m2": np.empty(0),
        "best_iou": np.empty(0),
        "n_overlapping_pred": np.empty(0, np.int64),
        "max_overlap_pred_pos": np.empty(0, np.int64),
        "oversegmentation": np.empty(0),
        "undersegmentation": np.empty(0),
        "n_eligible_pred": np.empty(0, np.int64),
        "area_m2": np.empty(0),
        "perimeter_m": np.empty(0),
        "utm_epsg": np.empty(0, np.int64),
        "hausdorff_m": np.empty(0),
        "boundary_mean_distance_m": np.empty(0),
        "boundary_sample_spacing_m": np.empty(0),
        "boundary_iou": np.empty(0),
        "boundary_within_tolerance_m": np.empty(0),
        "tile_x": np.empty(0, np.int64),
        "tile_y": np.empty(0, np.int64),
        "aoi": np.empty(0, np.int64),
        "error_code": np.empty(0, np.int8),
        "merge": np.empty(0, bool),
        "split": np.empty(0, bool),
    }
    return pd.DataFrame(columns, index=pd.Index(np.empty(0, np.int64), name="ref_pos"))


def _summarize(ev: _Evaluation, options: EvalOptions, tables: tuple | None = None) -> dict[str, object]:
    def tally(layer: PreparedLayer) -> LayerTally:
        return LayerTally(
            layer.n_input, len(layer), layer.n_dropped, layer.n_repaired, layer.n_outside_study_area,
            layer.n_within_training_buffer, tuple(int(c) for c in np.unique(layer.utm_epsg)),
            extent_of(candidate_boxes(layer)) if len(layer) else None,
        )

    return run_summary(
        ev.merged, ev.plan, options, reference=tally(ev.ref), predicted=tally(ev.pred),
        equal_area_crs=ev.ref.equal_area_crs.to_string(), strata_column=ev.strata_column, sites=ev.sites, study=ev.study,
        tables=tables,
    )


def evaluate(
    predicted: object,
    reference: object,
    iou_threshold: float = 0.5,
    *,
    strata: object = None,
    size_bins: object = None,
    client: object = None,
    workdir: str | os.PathLike | None = None,
    **options: object,
) -> dict[str, object]:
    """Compare predicted polygons with reference polygons at the object level.

    Parameters
    ----------
    predicted, reference : geopandas.GeoDataFrame, geopandas.GeoSeries or path
        Polygon layers in any CRS (they may differ), or files any pyogrio driver reads
        (GeoPackage, GeoParquet, FlatGeobuf, ...) or directories of GeoParquet parts.
        Each must carry a CRS unless empty.
    iou_threshold : float, default 0.5
        A pair can match when IoU >= iou_threshold (relative tolerance 1e-9); in (0, 1].
    strata : str, pandas.Series or array-like, optional
        A reference column name or aligned values; metrics also per stratum.
    size_bins : "auto" or sequence of float, optional
        Field-size class edges in hectares; metrics also per class.
    client : distributed.Client, optional
        Run the partitions on this Dask cluster; the result equals the in-process one
        (counts exactly, floats to 1e-9 relative, the same bootstrap draws).
    workdir : path, optional
        Work directory of a distributed run (default: a temporary one, removed after).
    **options
        Every other evaluation option, declared once in :func:`evalcore.options.all_options`
        (docs/metrics.md, "Options"): ``matching`` ("one_to_one", "many_to_one" or "max_weight"),
        ``bootstrap`` (resamples, default 0), ``bootstrap_seed`` (42),
        ``boundary_tolerance_m`` (metres, None), ``equal_area_crs`` (EPSG:6933),
        ``boundary_sample_spacing_m`` (metres, 1.0; None: perimeter / 1000),
        ``partition_size_m`` (partition tile side, metres, 50 000; changes no number),
        ``iou_sweep_thresholds`` (the ten thresholds 0.50 ... 0.95; None: no sweep),
        ``majority_fraction`` (0.5), ``tile_km`` (reporting tiles, 10), ``aoi`` and
        ``aoi_id_column`` (per-AOI metrics), ``annotated_area``, ``bootstrap_unit``
        ("field", "tile" or "aoi"), ``score_column`` (AP, PR curves, calibration),
        ``pixel_gsd_m`` (pixel metrics), ``min_support`` (30), ``study_area`` and
        ``study_area_rule`` ("intersects", "within" or "centroid": which rows of both
        layers are evaluated), ``training_area``, ``leakage_buffer_m`` (metres, 0) and
        ``exclude_training_area`` (the leakage audit; docs/study-area.md).

    Returns
    -------
    dict
        The summary metrics (docs/metrics.md).

    Raises
    ------
    ValueError
        An option outside its range (the message names it and the value).
    TypeError
        An option no metric family declares.
    """
    checked = check_options(iou_threshold=iou_threshold, **options)
    if client is not None:
        from evalcore.distributed.runner import run_distributed

        return run_distributed(predicted, reference, client, checked, strata=strata, size_bins=size_bins, workdir=workdir)
    predicted, reference = _read_if_path(predicted, "predicted"), _read_if_path(reference, "reference")
    ev = _run(predicted, reference, strata, size_bins, checked)
    return _summarize(ev, checked)


def _read_if_path(layer: object, role: str) -> object:
    if isinstance(layer, (str, os.PathLike)):
        from evalcore.io import read_layer

        return read_layer(layer, role=role)
    return layer


def _frame(ev: _Evaluation, reference: object) -> pd.DataFrame:
    return field_table(
        ev.fields,
        ev.ref.labels,
        pd.Series(ev.pred.labels.to_flat_index(), index=ev.pred.positions),
        strata_names=ev.plan.strata_names,
        strata_codes=ev.strata_codes,
        size_keys=ev.plan.sizes.keys if ev.plan.sizes is not None else None,
        size_codes=ev.size_codes,
        tolerance_m=ev.options.boundary_tolerance_m,
        aoi_keys=ev.sites.aois.keys if ev.sites.aois is not None else None,
        boundary_iou=ev.options.boundary_iou_width_m is not None,
        ref_class=ev.ref.class_value[index_of(ev.ref.positions, ev.fields.index.to_numpy(np.int64))] if ev.ref.class_value is not None else None,
    )


def evaluate_frame(
    predicted: object,
    reference: object,
    *,
    strata: object = None,
    size_bins: object = None,
    geometry: bool = False,
    **options: object,
) -> pd.DataFrame:
    """The per-reference-field table the summary of :func:`evaluate` is computed from.

    Takes the options of :func:`evaluate` (those that change no per-field column, such
    as ``bootstrap``, are accepted and ignored). With ``geometry=True`` the table is a
    GeoDataFrame with each field's (repaired) geometry in the reference layer's CRS,
    ready for ``to_file`` or ``to_parquet`` (QGIS, pandas).

    Returns
    -------
    pandas.DataFrame
        One row per evaluated (kept) reference field, indexed like the reference
        layer; columns as listed in docs/metrics.md ("Per-field table"). Areas in
        square metres and hectares, lengths and distances in metres (UTM zone of the
        field).
    """
    checked = check_options(**{**options, "bootstrap": 0})
    predicted, reference = _read_if_path(predicted, "predicted"), _read_if_path(reference, "reference")
    ev = _run(predicted, reference, strata, size_bins, checked)
    if geometry:
        return geopandas.GeoDataFrame(_frame(ev, reference), geometry=ev.ref.geoms_source, crs=ev.ref.crs)
    return _frame(ev, reference)


def evaluate_with_frame(
    predicted: object, reference: object, strata: object = None, size_bins: object = None, **kwargs: object
) -> tuple[dict[str, object], geopandas.GeoDataFrame]:
    """:func:`evaluate` and :func:`evaluate_frame` from one run (used by the CLI).

    The frame carries the repaired reference geometry in the reference CRS, so it
    opens in QGIS when written as GeoParquet.
    """
    options = check_options(**kwargs)
    ev = _run(predicted, reference, strata, size_bins, options)
    frame = geopandas.GeoDataFrame(_frame(ev, reference), geometry=ev.ref.geoms_source, crs=ev.ref.crs)
    return _summarize(ev, options), frame


@dataclass(frozen=True)
class EvaluationTables:
    """Everything one evaluation writes: the summary and its tables.

    Attributes
    ----------
    summary : dict
        What :func:`evaluate` returns.
    fields : geopandas.GeoDataFrame
        Per reference field (:func:`evaluate_frame` with ``geometry=True``).
    tiles : geopandas.GeoDataFrame
        Per reporting tile, EPSG:4326 (docs/metrics.md, "Tiles and AOIs").
    aois : geopandas.GeoDataFrame or None
        Per AOI, every AOI with its polygon in the AOI layer's CRS; None without AOIs.
    predictions : geopandas.GeoDataFrame
        Per kept prediction, indexed like the predicted layer, in its CRS.
    pr_curve : pandas.DataFrame or None
        The exact precision-recall curves (with a score column): ``iou_threshold,
        score, precision, recall, f1, tp, fp`` after every distinct score.
    """

    summary: dict
    fields: geopandas.GeoDataFrame
    tiles: geopandas.GeoDataFrame
    aois: geopandas.GeoDataFrame | None
    predictions: geopandas.GeoDataFrame
    pr_curve: pd.DataFrame | None = None


def _tables(ev: _Evaluation, reference: object) -> EvaluationTables:
    tiles, aois = level_tables(ev.merged, ev.options, ev.sites)  # once, for the summary and the tables
    summary = _summarize(ev, ev.options, (tiles, aois))
    fields = geopandas.GeoDataFrame(_frame(ev, reference), geometry=ev.ref.geoms_source, crs=ev.ref.crs)
    preds = prediction_table(
        ev.preds, aoi_keys=ev.sites.aois.keys if ev.sites.aois is not None else None, annotated=ev.sites.annotated is not None,
        scored=ev.options.score_column is not None, boundary_iou=ev.options.boundary_iou_width_m is not None,
        classed=ev.options.class_column is not None,
    )
    geoms = ev.pred.geoms_source[index_of(ev.pred.positions, ev.preds.index.to_numpy(np.int64))]
    predictions = geopandas.GeoDataFrame(preds, geometry=geoms, crs=ev.pred.crs)
    return EvaluationTables(
        summary=summary,
        fields=fields,
        tiles=tiles_frame(tiles, float(ev.options.tile_km) * 1000.0),
        aois=aois_frame(aois, ev.sites.aois) if aois is not None else None,
        predictions=predictions,
        pr_curve=ev.merged.global_values.get("tables", {}).get("pr_curve"),
    )


def evaluate_tables(
    predicted: object, reference: object, *, strata: object = None, size_bins: object = None, **options: object
) -> EvaluationTables:
    """:func:`evaluate` and every table of the run (per field, tile, AOI and prediction), from one run.

    Takes the arguments of :func:`evaluate` except ``client``. The tables open in QGIS
    and pandas when written as GeoParquet (``to_parquet``).
    """
    checked = check_options(**options)
    predicted, reference = _read_if_path(predicted, "predicted"), _read_if_path(reference, "reference")
    ev = _run(predicted, reference, strata, size_bins, checked)
    return _tables(ev, reference)


def pixels_per_field(reference: object, gsd_m: float, equal_area_crs: object = None) -> pd.Series:
    """Number of ``gsd_m`` x ``gsd_m`` pixels whose total area equals each field's area.

    Parameters
    ----------
    reference : geopandas.GeoDataFrame or geopandas.GeoSeries
    gsd_m : float
        Ground sample distance, metres.
    equal_area_crs : CRS-like, optional

    Returns
    -------
    pandas.Series
        ``area_m2 / gsd_m**2`` for every input row, indexed like ``reference``; NaN
        for rows that evaluation drops (null, empty, non-polygonal, zero area).
    """
    gsd = positive("gsd_m", gsd_m)
    layer = prepare_layer(reference, "reference", equal_area_crs=equal_area_crs)
    _, index, _ = layer_geometries(reference, "reference")
    values = np.full(layer.n_input, np.nan)
    values[layer.positions] = layer.area_m2 / (gsd * gsd)  # type: ignore[operator]
    return pd.Series(values, index=index, name="pixels")

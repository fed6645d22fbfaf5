"""The public single-process entry points: :func:`evaluate`, :func:`evaluate_frame`,
:func:`pixels_per_field`.

A single-process run is the distributed run with every partition in one process: the
same phases (prepare, pairs, resolve, sums) over the same partition keys, so the same
seed draws the same bootstrap replicates either way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import geopandas
import numpy as np
import pandas as pd

from evalcore.bootstrap import ReplicateSums, percentile_intervals
from evalcore.config import (
    BOOTSTRAP_CONFIDENCE_LEVEL,
    BOUNDARY_SAMPLE_SPACING_M,
    DEFAULT_TILE_SIZE_M,
)
from evalcore.engine import (
    MergedSums,
    PairResults,
    RefRows,
    compute_pairs,
    field_table,
    merge_partitions,
    partition_keys,
    prediction_rows,
    summarize_partition,
    unassigned_row,
)
from evalcore.groups import strata_values
from evalcore.matching import resolve
from evalcore.options import EvalOptions, RunPlan, check_options, make_run_plan, positive_number
from evalcore.pairs import PairTable
from evalcore.prepare import PreparedLayer, layer_geometries, prepare_layer
from evalcore.quantities import QUANTITY_COLUMNS
from evalcore.stats import QuantitySums
from evalcore.summaries import INTERVAL_KEYS, TOLERANCE_KEYS, metric_values, point_metrics

__all__ = [
    "evaluate",
    "evaluate_frame",
    "evaluate_with_frame",
    "pixels_per_field",
    "EvalOptions",
    "check_options",
    "RunPlan",
    "build_summary",
]

DISTANCE_CRS = "WGS 84 / UTM zone of each field (EPSG:326xx/327xx)"


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


def _run(predicted: object, reference: object, strata: object, size_bins: object, options: EvalOptions) -> _Evaluation:
    """Run the phases of one evaluation in this process, partition by partition."""
    ref = prepare_layer(reference, "reference", equal_area_crs=options.equal_area_crs, tile_size_m=options.tile_size_m)
    pred = prepare_layer(predicted, "predicted", equal_area_crs=options.equal_area_crs, tile_size_m=options.tile_size_m)
    ref_strata = None
    if strata is not None:
        ref_strata = strata_values(reference, strata, ref.n_input)[ref.positions]
    keys = partition_keys(ref)
    counts: dict[tuple[int, int, int], dict[str | None, int]] = {}
    for key, name in zip(keys, ref_strata.tolist() if ref_strata is not None else [None] * len(keys)):
        per_key = counts.setdefault(key, {})
        per_key[name] = per_key.get(name, 0) + 1
    area_range = (float(ref.area_m2.min()), float(ref.area_m2.max())) if len(ref) else ()
    plan = make_run_plan(counts, area_range, stratified=strata is not None, size_bins=size_bins, options=options)
    strata_codes, size_codes, pools = plan.group_codes(ref.area_m2, ref_strata)
    all_refs = RefRows(ref.positions, ref.area_m2, ref.perimeter_m, ref.utm_epsg, strata_codes, size_codes, pools)

    # Phase 2 once over everything: per-row results do not depend on the grouping.
    results = compute_pairs(
        ref,
        pred,
        pred_own=pred,
        ref_near=ref,
        iou_threshold=options.iou_threshold,
        boundary_tolerance_m=options.boundary_tolerance_m,
        boundary_sample_spacing_m=options.boundary_sample_spacing_m,
    )
    resolution = resolve(results.pairs, options.iou_threshold, options.matching)
    preds = prediction_rows(
        results.pred_pos, results.pred_area_m2, results.pred_perimeter_m, results.pred_within_tol_m, resolution
    )

    # Phase 4 per partition key, as a cluster would run it.
    key_arr = np.asarray(keys, dtype=np.int64).reshape(-1, 3)
    order = np.lexsort((key_arr[:, 2], key_arr[:, 1], key_arr[:, 0]))
    starts = np.flatnonzero(np.r_[True, np.any(key_arr[order][1:] != key_arr[order][:-1], axis=1)]) if len(order) else []
    bounds = list(starts) + [len(order)]
    pair_owner = np.searchsorted(ref.positions, results.pairs.ref_pos)
    home = preds["home_ref_pos"].to_numpy()
    home_row = np.searchsorted(ref.positions, np.where(home >= 0, home, 0))
    parts, frames = [], []
    partition_of_row = np.empty(len(ref), dtype=np.int64)
    for k in range(len(bounds) - 1):
        partition_of_row[order[bounds[k] : bounds[k + 1]]] = k
    pair_part = partition_of_row[pair_owner] if len(pair_owner) else np.empty(0, np.int64)
    pred_part = np.where(home >= 0, partition_of_row[home_row] if len(ref) else -1, -1)
    for k in range(len(bounds) - 1):
        rows = np.sort(order[bounds[k] : bounds[k + 1]])
        pk = np.flatnonzero(pair_part == k)
        part_results = _restrict(results, pk, rows)
        summary, fields = summarize_partition(
            tuple(int(v) for v in key_arr[rows[0]]),
            all_refs.take(rows),
            part_results,
            resolution.is_match[pk],
            resolution.is_eligible[pk],
            preds[pred_part == k],
            options,
            plan,
        )
        parts.append(summary)
        frames.append(fields)
    merged = merge_partitions(
        parts,
        unassigned_row(preds, options.boundary_tolerance_m),
        n_strata=plan.n_strata,
        n_sizes=plan.n_sizes,
        n_replicates=options.bootstrap,
    )
    fields = pd.concat(frames).sort_index() if frames else _empty_fields()
    fields["matched_pred_pos"] = fields["matched_pred_pos"].astype(np.int64)
    fields["max_overlap_pred_pos"] = fields["max_overlap_pred_pos"].astype(np.int64)
    return _Evaluation(options, plan, ref, pred, fields, all_refs.strata_codes, all_refs.size_codes, merged)


def _restrict(results: PairResults, pair_rows: np.ndarray, ref_rows: np.ndarray) -> PairResults:
    """The pairs phase results of some pairs and reference rows (predictions kept whole)."""
    return PairResults(
        pairs=PairTable(
            results.pairs.ref_pos[pair_rows],
            results.pairs.pred_pos[pair_rows],
            results.pairs.inter_m2[pair_rows],
            results.pairs.iou[pair_rows],
        ),
        pred_area_of_pair=results.pred_area_of_pair[pair_rows],
        hausdorff_m=results.hausdorff_m[pair_rows],
        mean_distance_m=results.mean_distance_m[pair_rows],
        spacing_m=results.spacing_m[pair_rows],
        ref_pos=results.ref_pos[ref_rows],
        ref_within_tol_m=results.ref_within_tol_m[ref_rows],
        pred_pos=results.pred_pos,
        pred_area_m2=results.pred_area_m2,
        pred_perimeter_m=results.pred_perimeter_m,
        pred_within_tol_m=results.pred_within_tol_m,
        pred_label_of_pair=results.pred_label_of_pair[pair_rows],
    )


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
        "boundary_within_tolerance_m": np.empty(0),
    }
    return pd.DataFrame(columns, index=pd.Index(np.empty(0, np.int64), name="ref_pos"))


def _nanmedian(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(np.median(values)) if len(values) else float("nan")


def _group_summary(
    sums: QuantitySums,
    medians: pd.DataFrame,
    *,
    with_tolerance: bool,
    both_empty: bool = False,
    empty_group: bool = False,
) -> dict[str, object]:
    """The metrics of one group: counts, sum-based metrics, areas and medians."""
    s = sums.as_dict()
    metrics = point_metrics(s, with_tolerance=with_tolerance, both_empty=both_empty, empty_group=empty_group)
    out: dict[str, object] = {}
    for key in ("precision", "recall", "f1", "iou_mean", "over_segmentation", "under_segmentation", "area_error_mean_m2"):
        out[key] = metrics.pop(key)
    out["count_predicted"] = int(s["n_pred"])
    out["count_reference"] = int(s["n_ref"])
    out["count_tp"] = int(s["tp"])
    out["count_fp"] = int(s["n_pred"] - s["n_pred_matched"])
    out["count_fn"] = int(s["n_ref"] - s["tp"])
    out["best_iou_mean"] = metrics.pop("best_iou_mean")
    for key in ("area_weighted_recall", "area_weighted_precision", "area_weighted_f1"):
        out[key] = metrics.pop(key)
    out["reference_area_ha"] = s["area_ref_m2"] / 1e4
    out["predicted_area_ha"] = s["area_pred_m2"] / 1e4
    out["median_area_ha"] = _nanmedian(medians["area_ha"].to_numpy(np.float64))
    out["area_error_signed_mean_m2"] = metrics.pop("area_error_signed_mean_m2")
    out["oversegmentation_mean"] = metrics.pop("oversegmentation_mean")
    out["undersegmentation_mean"] = metrics.pop("undersegmentation_mean")
    out["hausdorff_mean_m"] = metrics.pop("hausdorff_mean_m")
    out["hausdorff_median_m"] = _nanmedian(medians["hausdorff_m"].to_numpy(np.float64))
    out["boundary_distance_mean_m"] = metrics.pop("boundary_distance_mean_m")
    out["boundary_distance_median_m"] = _nanmedian(medians["boundary_mean_distance_m"].to_numpy(np.float64))
    out["boundary_sample_spacing_max_m"] = sums.spacing_max_m
    out.update(metrics)  # tolerance metrics, when computed
    return out


def build_summary(
    merged: MergedSums,
    plan: RunPlan,
    options: EvalOptions,
    *,
    layer_counts: dict[str, int],
    utm_epsg_codes: list[int],
    equal_area_crs: str,
) -> dict[str, object]:
    """The summary dict of seed 000 from merged partition sums.

    Parameters
    ----------
    merged : MergedSums
    plan : RunPlan
    options : EvalOptions
    layer_counts : dict
        ``count_{predicted,reference}_{dropped,repaired}``.
    utm_epsg_codes : list of int
    equal_area_crs : str
    """
    with_tol = options.boundary_tolerance_m is not None
    overall_sums = merged.overall.as_dict()
    both_empty = overall_sums["n_ref"] == 0 and overall_sums["n_pred"] == 0
    out = _group_summary(merged.overall, merged.medians, with_tolerance=with_tol, both_empty=both_empty)
    tol_metrics = {k: out.pop(k) for k in TOLERANCE_KEYS if k in out}
    spacing_max = out.pop("boundary_sample_spacing_max_m")
    result: dict[str, object] = {}
    for key in ("precision", "recall", "f1", "iou_mean", "over_segmentation", "under_segmentation", "area_error_mean_m2"):
        result[key] = out.pop(key)
    for key in ("count_predicted", "count_reference", "count_tp", "count_fp", "count_fn"):
        result[key] = out.pop(key)
    result["iou_threshold"] = options.iou_threshold
    result.update(out)
    result["boundary_sample_spacing_m"] = options.boundary_sample_spacing_m
    result["boundary_sample_spacing_max_m"] = spacing_max
    result["count_fp_unassigned"] = int(merged.unassigned[QUANTITY_COLUMNS.index("n_pred")])
    for key in ("count_predicted_dropped", "count_reference_dropped", "count_predicted_repaired", "count_reference_repaired"):
        result[key] = int(layer_counts[key])
    result["matching"] = options.matching
    result["equal_area_crs"] = equal_area_crs
    result["distance_crs"] = DISTANCE_CRS
    result["utm_epsg_codes"] = sorted(int(c) for c in utm_epsg_codes)
    if with_tol:
        for key in ("boundary_precision", "boundary_recall", "boundary_f1", "coverage_within_tolerance", "coverage_within_tolerance_area"):
            result[key] = tol_metrics[key]
        result["boundary_tolerance_m"] = options.boundary_tolerance_m

    medians = merged.medians
    strata_codes = medians["strata_code"].to_numpy()
    size_codes = medians["size_code"].to_numpy()
    if plan.strata_names is not None:
        result["per_stratum"] = {
            name: _group_summary(merged.strata[g], medians[strata_codes == g], with_tolerance=with_tol)
            for g, name in enumerate(plan.strata_names)
        }
        result["count_reference_no_stratum"] = int((strata_codes < 0).sum())
    if plan.sizes is not None:
        per_size = {}
        for g, key in enumerate(plan.sizes.keys):
            rows = size_codes == g
            entry: dict[str, object] = {
                "lower_ha": plan.sizes.edges[g],
                "upper_ha": plan.sizes.edges[g + 1],
                "n": int(rows.sum()),
            }
            entry.update(_group_summary(merged.sizes[g], medians[rows], with_tolerance=with_tol, empty_group=not rows.any()))
            per_size[key] = entry
        result["per_size_class"] = per_size
    if options.bootstrap > 0 and merged.replicates is not None:
        _add_intervals(result, merged.replicates, plan, options)
    return result


def _add_intervals(result: dict[str, object], replicates: ReplicateSums, plan: RunPlan, options: EvalOptions) -> None:
    """Percentile intervals for overall, each stratum and each size class."""
    with_tol = options.boundary_tolerance_m is not None
    wanted = INTERVAL_KEYS + (TOLERANCE_KEYS if with_tol else ())

    def intervals(sums: np.ndarray) -> dict[str, object]:
        values = metric_values({name: sums[:, j] for j, name in enumerate(QUANTITY_COLUMNS)}, with_tolerance=with_tol)
        ci, n_undefined = percentile_intervals({k: values[k] for k in wanted})
        return {"ci": ci, "n_undefined": n_undefined}

    block: dict[str, object] = {
        "n_resamples": options.bootstrap,
        "seed": options.bootstrap_seed,
        "confidence_level": BOOTSTRAP_CONFIDENCE_LEVEL,
        "tile_size_m": options.tile_size_m,
    }
    block.update(intervals(replicates.overall))
    result["bootstrap"] = block
    for g, name in enumerate(plan.strata_names or []):
        result["per_stratum"][name]["bootstrap"] = intervals(replicates.strata[g])  # type: ignore[index]
    if plan.sizes is not None:
        for g, key in enumerate(plan.sizes.keys):
            result["per_size_class"][key]["bootstrap"] = intervals(replicates.size_classes[g])  # type: ignore[index]


def _summarize(ev: _Evaluation, options: EvalOptions) -> dict[str, object]:
    counts = {
        "count_predicted_dropped": ev.pred.n_dropped,
        "count_reference_dropped": ev.ref.n_dropped,
        "count_predicted_repaired": ev.pred.n_repaired,
        "count_reference_repaired": ev.ref.n_repaired,
    }
    codes = sorted({int(c) for c in np.concatenate([ev.ref.utm_epsg, ev.pred.utm_epsg])})
    return build_summary(
        ev.merged, ev.plan, options, layer_counts=counts, utm_epsg_codes=codes, equal_area_crs=ev.ref.equal_area_crs.to_string()
    )


def evaluate(
    predicted: object,
    reference: object,
    iou_threshold: float = 0.5,
    *,
    matching: str = "one_to_one",
    strata: object = None,
    size_bins: object = None,
    bootstrap: int = 0,
    bootstrap_seed: int = 42,
    boundary_tolerance_m: float | None = None,
    equal_area_crs: object = None,
    boundary_sample_spacing_m: float | None = BOUNDARY_SAMPLE_SPACING_M,
    tile_size_m: float = DEFAULT_TILE_SIZE_M,
    client: object = None,
    workdir: str | os.PathLike | None = None,
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
    matching : {"one_to_one", "many_to_one"}
    strata : str, pandas.Series or array-like, optional
        A reference column name or aligned values; metrics also per stratum.
    size_bins : "auto" or sequence of float, optional
        Field-size class edges in hectares; metrics also per class.
    bootstrap : int, default 0
        Number of bootstrap resamples for 95 % percentile intervals (0: none).
    bootstrap_seed : int, default 42
    boundary_tolerance_m : float, optional
        Tolerance in metres for the boundary precision/recall and coverage metrics.
    equal_area_crs : CRS-like, optional
        Projected CRS in metres for areas and IoU (default EPSG:6933).
    boundary_sample_spacing_m : float or None, default 1.0
        Spacing of boundary samples in metres; None uses max(1 m, perimeter / 1000).
    tile_size_m : float, default 50 000
        Partition tile side in metres. It changes no point estimate; the bootstrap
        draws depend on it (and on nothing else about the partitioning).
    client : distributed.Client, optional
        Run the partitions on this Dask cluster; the result equals the in-process one
        (counts exactly, floats to 1e-9 relative, the same bootstrap draws).
    workdir : path, optional
        Work directory of a distributed run (default: a temporary one, removed after).

    Returns
    -------
    dict
        The summary metrics of seed 000 (see docs/metrics.md).
    """
    options = check_options(
        iou_threshold=iou_threshold,
        matching=matching,
        bootstrap=bootstrap,
        bootstrap_seed=bootstrap_seed,
        boundary_tolerance_m=boundary_tolerance_m,
        equal_area_crs=equal_area_crs,
        boundary_sample_spacing_m=boundary_sample_spacing_m,
        tile_size_m=tile_size_m,
    )
    if client is not None:
        from evalcore.distributed.runner import run_distributed

        return run_distributed(predicted, reference, client, options, strata=strata, size_bins=size_bins, workdir=workdir)
    predicted, reference = _read_if_path(predicted, "predicted"), _read_if_path(reference, "reference")
    ev = _run(predicted, reference, strata, size_bins, options)
    return _summarize(ev, options)


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
    )


def evaluate_frame(
    predicted: object,
    reference: object,
    *,
    iou_threshold: float = 0.5,
    matching: str = "one_to_one",
    strata: object = None,
    equal_area_crs: object = None,
    boundary_tolerance_m: float | None = None,
    size_bins: object = None,
    boundary_sample_spacing_m: float | None = BOUNDARY_SAMPLE_SPACING_M,
) -> pd.DataFrame:
    """The per-reference-field table the summary of :func:`evaluate` is computed from.

    Returns
    -------
    pandas.DataFrame
        One row per evaluated (kept) reference field, indexed like the reference
        layer; columns as listed in docs/metrics.md ("Per-field table"). Areas in
        square metres and hectares, lengths and distances in metres (UTM zone of the
        field).
    """
    options = check_options(
        iou_threshold=iou_threshold,
        matching=matching,
        boundary_tolerance_m=boundary_tolerance_m,
        equal_area_crs=equal_area_crs,
        boundary_sample_spacing_m=boundary_sample_spacing_m,
    )
    predicted, reference = _read_if_path(predicted, "predicted"), _read_if_path(reference, "reference")
    ev = _run(predicted, reference, strata, size_bins, options)
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
    gsd = positive_number("gsd_m", gsd_m, allow_none=False)
    layer = prepare_layer(reference, "reference", equal_area_crs=equal_area_crs)
    _, index, _ = layer_geometries(reference, "reference")
    values = np.full(layer.n_input, np.nan)
    values[layer.positions] = layer.area_m2 / (gsd * gsd)  # type: ignore[operator]
    return pd.Series(values, index=index, name="pixels")

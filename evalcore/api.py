"""The public single-process entry points: :func:`evaluate`, :func:`evaluate_frame`,
:func:`pixels_per_field`.

A single-process run is the distributed run with every partition in one process: the
same phases (prepare, pairs, resolve, sums) over the same partition keys, so the same
seed draws the same bootstrap replicates either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

import geopandas
import numpy as np
import pandas as pd

try:  # TEMPORARY until the boundary module lands
    from evalcore import boundary
except ImportError:  # pragma: no cover
    boundary = None
from evalcore.bootstrap import (
    ReplicateSums,
    draw_partition_counts,
    partition_replicate_sums,
    percentile_intervals,
    pool_id,
)
from evalcore.config import (
    BOOTSTRAP_CONFIDENCE_LEVEL,
    BOUNDARY_SAMPLE_SPACING_M,
    DEFAULT_TILE_SIZE_M,
)
from evalcore.groups import SizeClasses, encode_strata, size_classes, strata_values
from evalcore.matching import Resolution, check_matching, resolve
from evalcore.pairs import PairTable, candidate_pairs
from evalcore.prepare import PreparedLayer, layer_geometries, prepare_layer
from evalcore.quantities import (
    QUANTITY_COLUMNS,
    QuantityTable,
    prediction_fields,
    quantity_rows,
    reference_fields,
)
from evalcore.stats import QuantitySums, group_sums
from evalcore.summaries import INTERVAL_KEYS, TOLERANCE_KEYS, metric_values, point_metrics

__all__ = ["evaluate", "evaluate_frame", "pixels_per_field", "EvalOptions", "check_options"]

DISTANCE_CRS = "WGS 84 / UTM zone of each field (EPSG:326xx/327xx)"


@dataclass(frozen=True, slots=True)
class EvalOptions:
    """Validated evaluation parameters (see :func:`evaluate`)."""

    iou_threshold: float = 0.5
    matching: str = "one_to_one"
    bootstrap: int = 0
    bootstrap_seed: int = 42
    boundary_tolerance_m: float | None = None
    equal_area_crs: object = None
    boundary_sample_spacing_m: float | None = BOUNDARY_SAMPLE_SPACING_M
    tile_size_m: float = DEFAULT_TILE_SIZE_M


def _positive(name: str, value: object, *, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)) or float(value) <= 0:
        raise ValueError(f"{name} must be a positive finite number{' or None' if allow_none else ''}, but got {value!r}.")
    return float(value)


def check_options(**kwargs: object) -> EvalOptions:
    """Validate evaluation parameters; ValueError names the argument and the value."""
    opts = EvalOptions(**kwargs)  # type: ignore[arg-type]
    thr = opts.iou_threshold
    if isinstance(thr, bool) or not isinstance(thr, Real) or not (0.0 < float(thr) <= 1.0):
        raise ValueError(f"iou_threshold must be in (0, 1], but got {thr!r}.")
    check_matching(opts.matching)
    if isinstance(opts.bootstrap, bool) or not isinstance(opts.bootstrap, Integral) or opts.bootstrap < 0:
        raise ValueError(f"bootstrap must be a non-negative integer (number of resamples), but got {opts.bootstrap!r}.")
    seed = opts.bootstrap_seed
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise ValueError(f"bootstrap_seed must be a non-negative integer, but got {seed!r}.")
    return EvalOptions(
        iou_threshold=float(thr),
        matching=opts.matching,
        bootstrap=int(opts.bootstrap),
        bootstrap_seed=int(seed),
        boundary_tolerance_m=_positive("boundary_tolerance_m", opts.boundary_tolerance_m, allow_none=True),
        equal_area_crs=opts.equal_area_crs,
        boundary_sample_spacing_m=_positive(
            "boundary_sample_spacing_m", opts.boundary_sample_spacing_m, allow_none=True
        ),
        tile_size_m=_positive("tile_size_m", opts.tile_size_m, allow_none=False),  # type: ignore[arg-type]
    )


@dataclass(frozen=True, slots=True)
class _Evaluation:
    """Everything one single-process evaluation computed."""

    options: EvalOptions
    ref: PreparedLayer
    pred: PreparedLayer
    resolution: Resolution
    fields: pd.DataFrame  # per reference field, indexed by position
    table: QuantityTable
    strata_names: list[str] | None
    strata_codes: np.ndarray | None
    sizes: SizeClasses | None
    size_codes: np.ndarray | None


def _lookup(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    return np.searchsorted(sorted_keys, keys)


def _run(predicted: object, reference: object, strata: object, size_bins: object, options: EvalOptions) -> _Evaluation:
    """Run the phases of one evaluation in this process."""
    ref = prepare_layer(reference, "reference", equal_area_crs=options.equal_area_crs, tile_size_m=options.tile_size_m)
    pred = prepare_layer(predicted, "predicted", equal_area_crs=options.equal_area_crs, tile_size_m=options.tile_size_m)
    strata_names = strata_codes = None
    if strata is not None:
        encoded = encode_strata(strata_values(reference, strata, ref.n_input)[ref.positions])
        strata_names, strata_codes = encoded.names, encoded.codes
    sizes = size_codes = None
    if size_bins is not None:
        area_ha = ref.area_m2 / 1e4
        sizes = size_classes(size_bins, area_ha)
        size_codes = sizes.codes(area_ha)

    pairs = candidate_pairs(ref, pred)
    resolution = resolve(pairs, options.iou_threshold, options.matching)
    pred_area_of_pair = pred.area_m2[_lookup(pred.positions, pairs.pred_pos)]
    fields = reference_fields(ref.positions, ref.area_m2, resolution, pred_area_of_pair)
    fields["area_m2"] = ref.area_m2
    fields["perimeter_m"] = ref.perimeter_m
    fields["utm_epsg"] = ref.utm_epsg
    _add_distances(fields, ref, pred, options)

    pred_fields = prediction_fields(pred.positions, resolution)
    pred_fields["area_m2"] = pred.area_m2
    pred_fields["perimeter_m"] = pred.perimeter_m
    if options.boundary_tolerance_m is not None and boundary is None:
        fields["boundary_within_tolerance_m"] = np.nan
        pred_fields["boundary_within_tolerance_m"] = np.nan
    elif options.boundary_tolerance_m is not None:
        fields["boundary_within_tolerance_m"] = boundary.tolerance_lengths(ref, pred, options.boundary_tolerance_m)
        pred_fields["boundary_within_tolerance_m"] = boundary.tolerance_lengths(
            pred, ref, options.boundary_tolerance_m
        )
    table = quantity_rows(fields, pred_fields, tolerance_m=options.boundary_tolerance_m)
    return _Evaluation(options, ref, pred, resolution, fields, table, strata_names, strata_codes, sizes, size_codes)


def _add_distances(fields: pd.DataFrame, ref: PreparedLayer, pred: PreparedLayer, options: EvalOptions) -> None:
    """Boundary distances of the matched pairs, in the reference field's UTM zone."""
    n = len(fields)
    hausdorff = np.full(n, np.nan)
    mean = np.full(n, np.nan)
    spacing = np.full(n, np.nan)
    i_ref = np.flatnonzero(fields["matched"].to_numpy())
    if len(i_ref) and boundary is not None:
        i_pred = _lookup(pred.positions, fields["matched_pred_pos"].to_numpy()[i_ref])
        h, m, s = boundary.matched_pair_distances(ref, pred, i_ref, i_pred, options.boundary_sample_spacing_m)
        hausdorff[i_ref], mean[i_ref], spacing[i_ref] = h, m, s
    fields["hausdorff_m"] = hausdorff
    fields["boundary_mean_distance_m"] = mean
    fields["boundary_sample_spacing_m"] = spacing


def _nanmedian(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(np.median(values)) if len(values) else float("nan")


def _group_summary(
    sums: QuantitySums,
    fields: pd.DataFrame,
    *,
    with_tolerance: bool,
    both_empty: bool = False,
    empty_group: bool = False,
) -> dict[str, object]:
    """The metrics of one group: counts, sum-based metrics, areas and medians."""
    s = sums.as_dict()
    metrics = point_metrics(s, with_tolerance=with_tolerance, both_empty=both_empty, empty_group=empty_group)
    matched = fields["matched"].to_numpy(bool)
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
    out["median_area_ha"] = _nanmedian(fields["area_m2"].to_numpy(np.float64) / 1e4)
    out["area_error_signed_mean_m2"] = metrics.pop("area_error_signed_mean_m2")
    out["oversegmentation_mean"] = metrics.pop("oversegmentation_mean")
    out["undersegmentation_mean"] = metrics.pop("undersegmentation_mean")
    out["hausdorff_mean_m"] = metrics.pop("hausdorff_mean_m")
    out["hausdorff_median_m"] = _nanmedian(fields["hausdorff_m"].to_numpy(np.float64)[matched])
    out["boundary_distance_mean_m"] = metrics.pop("boundary_distance_mean_m")
    out["boundary_distance_median_m"] = _nanmedian(fields["boundary_mean_distance_m"].to_numpy(np.float64)[matched])
    out["boundary_sample_spacing_max_m"] = sums.spacing_max_m
    out.update(metrics)  # tolerance metrics, when computed
    return out


def _summarize(ev: _Evaluation, options: EvalOptions) -> dict[str, object]:
    with_tol = options.boundary_tolerance_m is not None
    table, fields = ev.table, ev.fields
    overall = QuantitySums.from_table(table)
    both_empty = len(ev.ref) == 0 and len(ev.pred) == 0
    out = _group_summary(overall, fields, with_tolerance=with_tol, both_empty=both_empty)
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
    result["count_fp_unassigned"] = int(table.unassigned[QUANTITY_COLUMNS.index("n_pred")])
    result["count_predicted_dropped"] = ev.pred.n_dropped
    result["count_reference_dropped"] = ev.ref.n_dropped
    result["count_predicted_repaired"] = ev.pred.n_repaired
    result["count_reference_repaired"] = ev.ref.n_repaired
    result["matching"] = options.matching
    result["equal_area_crs"] = ev.ref.equal_area_crs.to_string()
    result["distance_crs"] = DISTANCE_CRS
    result["utm_epsg_codes"] = sorted({int(c) for c in np.concatenate([ev.ref.utm_epsg, ev.pred.utm_epsg])})
    if with_tol:
        for key in ("boundary_precision", "boundary_recall", "boundary_f1", "coverage_within_tolerance", "coverage_within_tolerance_area"):
            result[key] = tol_metrics[key]
        result["boundary_tolerance_m"] = options.boundary_tolerance_m

    strata_sums: list[QuantitySums] = []
    if ev.strata_codes is not None:
        strata_sums = group_sums(table, ev.strata_codes, len(ev.strata_names))
        per_stratum = {}
        for g, name in enumerate(ev.strata_names):
            rows = ev.strata_codes == g
            per_stratum[name] = _group_summary(strata_sums[g], fields[rows], with_tolerance=with_tol)
        result["per_stratum"] = per_stratum
        result["count_reference_no_stratum"] = int((ev.strata_codes < 0).sum())
    size_sums: list[QuantitySums] = []
    if ev.size_codes is not None:
        size_sums = group_sums(table, ev.size_codes, len(ev.sizes.keys))
        per_size = {}
        for g, key in enumerate(ev.sizes.keys):
            rows = ev.size_codes == g
            entry: dict[str, object] = {
                "lower_ha": ev.sizes.edges[g],
                "upper_ha": ev.sizes.edges[g + 1],
                "n": int(rows.sum()),
            }
            entry.update(_group_summary(size_sums[g], fields[rows], with_tolerance=with_tol, empty_group=not rows.any()))
            per_size[key] = entry
        result["per_size_class"] = per_size

    if options.bootstrap > 0:
        _add_bootstrap(result, ev, options)
    return result


def _add_bootstrap(result: dict[str, object], ev: _Evaluation, options: EvalOptions) -> None:
    """Percentile intervals for overall, each stratum and each size class."""
    ref, table = ev.ref, ev.table
    stratified = ev.strata_codes is not None
    names = ev.strata_names or []
    if stratified:
        pools = np.array(
            [pool_id(names[c] if c >= 0 else None, True) for c in ev.strata_codes.tolist()], dtype=np.int64
        )
    else:
        pools = np.full(len(ref), pool_id(None, False), dtype=np.int64)
    keys = list(zip(ref.utm_epsg.tolist(), ref.tile_x.tolist(), ref.tile_y.tolist()))
    key_arr = np.array(keys, dtype=np.int64).reshape(-1, 3)
    pool_sizes: dict[int, dict[tuple[int, int, int], int]] = {}
    for pool, key in zip(pools.tolist(), keys):
        sizes = pool_sizes.setdefault(pool, {})
        sizes[key] = sizes.get(key, 0) + 1
    draws = draw_partition_counts(pool_sizes, options.bootstrap, options.bootstrap_seed)

    n_strata = len(names)
    n_sizes = len(ev.sizes.keys) if ev.sizes is not None else 0
    strata_codes = ev.strata_codes if stratified else np.full(len(ref), -1, dtype=np.int64)
    size_codes = ev.size_codes if ev.size_codes is not None else np.full(len(ref), -1, dtype=np.int64)
    c = len(QUANTITY_COLUMNS)
    total = ReplicateSums(
        np.zeros((options.bootstrap, c)), np.zeros((n_strata, options.bootstrap, c)), np.zeros((n_sizes, options.bootstrap, c))
    )
    for key in sorted(set(keys)):
        rows = np.flatnonzero((key_arr == np.array(key)).all(axis=1))
        part = partition_replicate_sums(
            table.values[rows],
            pools[rows],
            key,
            draws,
            n_replicates=options.bootstrap,
            seed=options.bootstrap_seed,
            strata_codes=strata_codes[rows],
            n_strata=n_strata,
            size_codes=size_codes[rows],
            n_size_classes=n_sizes,
        )
        total = total.merge(part)
    overall = total.overall + table.unassigned
    with_tol = options.boundary_tolerance_m is not None
    wanted = INTERVAL_KEYS + (TOLERANCE_KEYS if with_tol else ())

    def intervals(sums: np.ndarray) -> dict[str, object]:
        values = metric_values({name: sums[:, j] for j, name in enumerate(QUANTITY_COLUMNS)}, with_tolerance=with_tol)
        ci, n_undefined = percentile_intervals({k: values[k] for k in wanted})
        return {"ci": ci, "n_undefined": n_undefined}

    block = {
        "n_resamples": options.bootstrap,
        "seed": options.bootstrap_seed,
        "confidence_level": BOOTSTRAP_CONFIDENCE_LEVEL,
        "tile_size_m": options.tile_size_m,
    }
    block.update(intervals(overall))
    result["bootstrap"] = block
    for g, name in enumerate(names):
        result["per_stratum"][name]["bootstrap"] = intervals(total.strata[g])  # type: ignore[index]
    if ev.sizes is not None:
        for g, key in enumerate(ev.sizes.keys):
            result["per_size_class"][key]["bootstrap"] = intervals(total.size_classes[g])  # type: ignore[index]


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
) -> dict[str, object]:
    """Compare predicted polygons with reference polygons at the object level.

    Parameters
    ----------
    predicted, reference : geopandas.GeoDataFrame or geopandas.GeoSeries
        Polygon layers in any CRS (they may differ). Each must carry a CRS unless empty.
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
    ev = _run(predicted, reference, strata, size_bins, options)
    return _summarize(ev, options)


def _labels_at(layer: PreparedLayer, positions: np.ndarray) -> pd.Series:
    """Input labels at the given positions (-1: missing), as a nullable column."""
    found = positions >= 0
    idx = _lookup(layer.positions, positions[found])
    labels = layer.labels[idx]
    if pd.api.types.is_integer_dtype(labels.dtype):
        out = pd.array(np.zeros(len(positions), dtype=np.int64), dtype="Int64")
        out[~found] = pd.NA
        out[found] = labels.to_numpy()
        return pd.Series(out)
    values = np.full(len(positions), None, dtype=object)
    values[found] = labels.to_numpy(dtype=object)
    return pd.Series(values, dtype=object)


def _frame(ev: _Evaluation, reference: object) -> pd.DataFrame:
    f = ev.fields
    options = ev.options
    matched = f["matched"].to_numpy(bool)
    out = pd.DataFrame(index=ev.ref.labels)
    out["area_m2"] = f["area_m2"].to_numpy()
    out["area_ha"] = f["area_m2"].to_numpy() / 1e4
    out["perimeter_m"] = f["perimeter_m"].to_numpy()
    out["utm_epsg"] = f["utm_epsg"].to_numpy()
    out["matched"] = matched
    out["pred_index"] = _labels_at(ev.pred, f["matched_pred_pos"].to_numpy()).array
    out["iou"] = f["iou"].to_numpy()
    out["pred_area_m2"] = f["pred_area_m2"].to_numpy()
    out["best_iou"] = f["best_iou"].to_numpy()
    out["n_overlapping_pred"] = f["n_overlapping_pred"].to_numpy()
    out["max_overlap_pred_index"] = _labels_at(ev.pred, f["max_overlap_pred_pos"].to_numpy()).array
    out["oversegmentation"] = f["oversegmentation"].to_numpy()
    out["undersegmentation"] = f["undersegmentation"].to_numpy()
    out["hausdorff_m"] = f["hausdorff_m"].to_numpy()
    out["boundary_mean_distance_m"] = f["boundary_mean_distance_m"].to_numpy()
    out["boundary_sample_spacing_m"] = f["boundary_sample_spacing_m"].to_numpy()
    if ev.strata_codes is not None:
        names = np.array(ev.strata_names + [None], dtype=object)
        out["stratum"] = names[ev.strata_codes]
    if ev.size_codes is not None:
        keys = np.array(ev.sizes.keys + [None], dtype=object)
        out["size_class"] = keys[ev.size_codes]
    if options.boundary_tolerance_m is not None:
        within = f["boundary_within_tolerance_m"].to_numpy()
        out["boundary_within_tolerance_m"] = within
        with np.errstate(divide="ignore", invalid="ignore"):
            out["boundary_recall"] = np.where(f["perimeter_m"].to_numpy() > 0, within / f["perimeter_m"].to_numpy(), np.nan)
        out["within_tolerance"] = matched & (f["boundary_mean_distance_m"].to_numpy() <= options.boundary_tolerance_m)
    return out


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
    gsd = _positive("gsd_m", gsd_m, allow_none=False)
    layer = prepare_layer(reference, "reference", equal_area_crs=equal_area_crs)
    _, index, _ = layer_geometries(reference, "reference")
    values = np.full(layer.n_input, np.nan)
    values[layer.positions] = layer.area_m2 / (gsd * gsd)  # type: ignore[operator]
    return pd.Series(values, index=index, name="pixels")

"""The phases of one evaluation, as pure functions from frozen inputs to frozen outputs.

ARCHITECTURE.md's four phases, here without any cluster code:

1. prepare and key: :func:`evalcore.prepare.prepare_layer` (per input chunk);
2. pairs: :func:`compute_pairs`, for the reference fields and predictions a partition
   owns, against the other layer's polygons near them (its own and a halo);
3. resolve: :func:`resolve_run` on every pair of the run (:func:`concat_pair_results`):
   the global matching, the families' global per-pair values and what every prediction
   adds to which reference row; then :func:`route` says which partition gets which
   pairs and rows;
4. sums: :func:`summarize_partition` per partition, and :func:`merge_partitions`.

The single-process :func:`evalcore.evaluate` runs the same functions with phase 2 once
over everything; the distributed runner (:mod:`evalcore.distributed.runner`) runs
phases 2 and 4 per partition on Dask workers. Both route with :func:`route` and merge in
partition-key order, so they give the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collections.abc import Iterator

import numpy as np
import pandas as pd

from evalcore import boundary
from evalcore._typing import F64Array, IdArray
from evalcore.arrays import index_of
from evalcore.bootstrap import PartitionKey, ReplicateSums, RowDraws, RunDraws, block_draws, field_draws, pool_id, replicate_group_sums
from evalcore.matching import Resolution, eligible_pairs, resolve
from evalcore.metrics.registry import enabled_families, max_columns, quantity_columns, unit_columns, unit_replicate_columns
from evalcore.metrics.base import GlobalContext, PairContext, PredContext, RefContext
from evalcore.metrics.taxonomy import (
    PREDICTION_CODES,
    REFERENCE_CODES,
    code_labels,
    prediction_codes,
    prediction_flags,
    reference_codes,
    reference_flags,
)
from evalcore.options import EvalOptions, RunPlan, base_threshold
from evalcore.pairs import candidate_pairs
from evalcore.pairtable import PairTable
from evalcore.layer import PreparedLayer
from evalcore.quantities import (
    Contributions,
    prediction_contributions,
    prediction_fields,
    quantity_table,
    reference_fields,
)
from evalcore.levels import UNASSIGNED_COLUMN, UnitSums, unit_rows, unit_sums
from evalcore.stats import GroupSums, group_sums

__all__ = [
    "PairResults",
    "compute_pairs",
    "concat_pair_results",
    "Resolved",
    "resolve_run",
    "Routing",
    "route",
    "RefRows",
    "PartitionSummary",
    "summarize_partition",
    "MergedSums",
    "merge_partitions",
    "partition_keys",
    "field_table",
    "prediction_table",
]


PAIR_ARRAYS: tuple[str, ...] = (
    "pred_area_of_pair", "ref_area_of_pair", "hausdorff_m", "mean_distance_m", "spacing_m", "pred_label_of_pair",
)
"""The :class:`PairResults` arrays with a value per pair."""
REF_ARRAYS: tuple[str, ...] = (
    "ref_pos", "ref_within_tol_m", "ref_label", "ref_utm_epsg", "ref_tile_x", "ref_tile_y", "ref_aoi", "ref_pool",
)
"""The :class:`PairResults` arrays with a value per reference row."""
PRED_ARRAYS: tuple[str, ...] = (
    "pred_pos", "pred_area_m2", "pred_perimeter_m", "pred_within_tol_m", "pred_label", "pred_utm_epsg",
    "pred_tile_x", "pred_tile_y", "pred_aoi", "pred_annotated_fraction", "pred_score",
)
"""The :class:`PairResults` arrays with a value per prediction row."""


def partition_keys(layer: PreparedLayer) -> list[PartitionKey]:
    """(UTM EPSG, tile x, tile y) of every row."""
    return list(zip(layer.utm_epsg.tolist(), layer.partition_x.tolist(), layer.partition_y.tolist()))


@dataclass(frozen=True, slots=True)
class PairResults:
    """What the pairs phase computes for some reference fields and predictions.

    Attributes
    ----------
    pairs : PairTable
        Candidate pairs of the reference fields, sorted by (reference, prediction) position.
    pred_area_of_pair, ref_area_of_pair : ndarray of float64
        Area of each pair's prediction and reference field, m².
    hausdorff_m, mean_distance_m, spacing_m : ndarray of float64
        Boundary distances of each eligible pair (NaN for pairs below the threshold).
    ref_pos, ref_within_tol_m : ndarray
        The reference fields (increasing positions) and their boundary length within
        the tolerance (NaN without a tolerance), metres.
    pred_pos, pred_area_m2, pred_perimeter_m, pred_within_tol_m : ndarray
        The predictions owned by the partition (increasing positions): area (m²),
        perimeter and boundary length within the tolerance (metres, own UTM zone).
    pred_label_of_pair : ndarray of object
        Input label of each pair's prediction (for the per-field table).
    ref_label, pred_label : ndarray of object
        Input label of each reference row and prediction row.
    ref_utm_epsg, ref_tile_x, ref_tile_y, ref_aoi : ndarray of int64
        Home zone, reporting tile and AOI (-1: none) of each reference row.
    pred_utm_epsg, pred_tile_x, pred_tile_y, pred_aoi : ndarray of int64
        The same of each prediction row, from its own centroid.
    pred_annotated_fraction : ndarray of float64
        Share of each prediction's area inside the annotated area (NaN: none given).
    ref_pool : ndarray of int64
        Bootstrap pool of each reference row.
    pred_score : ndarray of float64
        Confidence score of each prediction row (NaN: no score column).
    """

    pairs: PairTable
    pred_area_of_pair: F64Array
    ref_area_of_pair: F64Array
    hausdorff_m: F64Array
    mean_distance_m: F64Array
    spacing_m: F64Array
    ref_pos: IdArray
    ref_within_tol_m: F64Array
    pred_pos: IdArray
    pred_area_m2: F64Array
    pred_perimeter_m: F64Array
    pred_within_tol_m: F64Array
    pred_label_of_pair: np.ndarray
    ref_label: np.ndarray
    ref_utm_epsg: IdArray
    ref_tile_x: IdArray
    ref_tile_y: IdArray
    ref_aoi: IdArray
    ref_pool: IdArray
    pred_label: np.ndarray
    pred_utm_epsg: IdArray
    pred_tile_x: IdArray
    pred_tile_y: IdArray
    pred_aoi: IdArray
    pred_annotated_fraction: F64Array
    pred_score: F64Array

    def restrict(self, pair_rows: IdArray, ref_rows: IdArray, pred_rows: IdArray | None = None) -> PairResults:
        """The results of some pairs, reference rows and (optionally) prediction rows."""
        p = self.pairs
        preds = slice(None) if pred_rows is None else pred_rows
        rows = {**dict.fromkeys(PAIR_ARRAYS, pair_rows), **dict.fromkeys(REF_ARRAYS, ref_rows), **dict.fromkeys(PRED_ARRAYS, preds)}
        return PairResults(
            pairs=PairTable(p.ref_pos[pair_rows], p.pred_pos[pair_rows], p.inter_m2[pair_rows], p.iou[pair_rows]),
            **{name: getattr(self, name)[r] for name, r in rows.items()},
        )

    def pred_labels(self) -> pd.Series:
        """Input label of every prediction in a pair, indexed by prediction position."""
        labels = pd.Series(self.pred_label_of_pair, index=self.pairs.pred_pos)
        return labels[~labels.index.duplicated()].infer_objects()


def compute_pairs(
    ref: PreparedLayer,
    pred_near: PreparedLayer,
    *,
    pred_own: PreparedLayer,
    ref_near: PreparedLayer,
    iou_threshold: float,
    boundary_tolerance_m: float | None,
    boundary_sample_spacing_m: float | None,
    ref_pools: IdArray | None = None,
) -> PairResults:
    """The pairs phase of one partition.

    Parameters
    ----------
    ref : PreparedLayer
        Reference fields the partition owns.
    pred_near : PreparedLayer
        Every prediction that may intersect them or come within the tolerance of
        them (the partition's own and its halo).
    pred_own : PreparedLayer
        Predictions the partition owns (their tolerance lengths are computed here).
    ref_near : PreparedLayer
        Every reference field within the tolerance of ``pred_own``.
    iou_threshold : float
        Pairs at or above it get boundary distances (matching is decided later).
    boundary_tolerance_m, boundary_sample_spacing_m : float or None
    ref_pools : ndarray of int64, optional
        Bootstrap pool of each of ``ref`` (default: the one pool of an unstratified run).
    """
    pairs = candidate_pairs(ref, pred_near)
    i_ref = np.searchsorted(ref.positions, pairs.ref_pos)
    i_pred = np.searchsorted(pred_near.positions, pairs.pred_pos)
    n = len(pairs)
    hausdorff = np.full(n, np.nan)
    mean = np.full(n, np.nan)
    spacing = np.full(n, np.nan)
    ok = np.flatnonzero(eligible_pairs(pairs, iou_threshold))
    if len(ok):
        h, m, s = boundary.matched_pair_distances(ref, pred_near, i_ref[ok], i_pred[ok], boundary_sample_spacing_m)
        hausdorff[ok], mean[ok], spacing[ok] = h, m, s
    if boundary_tolerance_m is None:
        ref_within = np.full(len(ref), np.nan)
        pred_within = np.full(len(pred_own), np.nan)
    else:
        ref_within = boundary.tolerance_lengths(ref, pred_near, boundary_tolerance_m)
        pred_within = boundary.tolerance_lengths(pred_own, ref_near, boundary_tolerance_m)
    return PairResults(
        pairs=pairs,
        pred_area_of_pair=pred_near.area_m2[i_pred],
        ref_area_of_pair=ref.area_m2[i_ref],
        hausdorff_m=hausdorff,
        mean_distance_m=mean,
        spacing_m=spacing,
        ref_pos=ref.positions,
        ref_within_tol_m=ref_within,
        pred_pos=pred_own.positions,
        pred_area_m2=pred_own.area_m2,
        pred_perimeter_m=pred_own.perimeter_m,
        pred_within_tol_m=pred_within,
        pred_label_of_pair=np.asarray(pred_near.labels, dtype=object)[i_pred],
        ref_label=np.asarray(ref.labels, dtype=object),
        ref_utm_epsg=ref.utm_epsg,
        ref_tile_x=ref.tile_x,
        ref_tile_y=ref.tile_y,
        ref_aoi=ref.aoi,
        ref_pool=np.full(len(ref), pool_id(None, False), dtype=np.int64) if ref_pools is None else np.asarray(ref_pools, np.int64),
        pred_label=np.asarray(pred_own.labels, dtype=object),
        pred_utm_epsg=pred_own.utm_epsg,
        pred_tile_x=pred_own.tile_x,
        pred_tile_y=pred_own.tile_y,
        pred_aoi=pred_own.aoi,
        pred_annotated_fraction=pred_own.annotated_fraction,
        pred_score=pred_own.score,
    )


def concat_pair_results(parts: list[PairResults]) -> tuple[PairResults, IdArray]:
    """Every partition's pairs phase output as one, in position order.

    Returns
    -------
    results : PairResults
        Pairs sorted by (reference, prediction) position, reference and prediction rows
        by position. A pair computed twice is an error.
    ref_part : ndarray of int64
        Index in ``parts`` of each reference row's partition.
    """
    if not parts:
        parts = [_empty_pair_results()]
    table, order = PairTable.concat_with_order([p.pairs for p in parts])  # checks duplicates

    def cat(name: str, rows: np.ndarray) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts])[rows]

    ref_rows = np.argsort(np.concatenate([p.ref_pos for p in parts]), kind="stable")
    pred_rows = np.argsort(np.concatenate([p.pred_pos for p in parts]), kind="stable")
    ref_part = np.concatenate([np.full(len(p.ref_pos), i, dtype=np.int64) for i, p in enumerate(parts)])[ref_rows]
    rows = {**dict.fromkeys(PAIR_ARRAYS, order), **dict.fromkeys(REF_ARRAYS, ref_rows), **dict.fromkeys(PRED_ARRAYS, pred_rows)}
    results = PairResults(pairs=table, **{name: cat(name, r) for name, r in rows.items()})
    return results, ref_part


def _empty_pair_results() -> PairResults:
    objects = ("pred_label_of_pair", "ref_label", "pred_label")
    ints = ("ref_pos", "pred_pos", "ref_utm_epsg", "ref_tile_x", "ref_tile_y", "ref_aoi", "ref_pool", "pred_utm_epsg",
            "pred_tile_x", "pred_tile_y", "pred_aoi")
    arrays = {
        name: np.empty(0, dtype=object if name in objects else np.int64 if name in ints else np.float64)
        for name in PAIR_ARRAYS + REF_ARRAYS + PRED_ARRAYS
    }
    return PairResults(pairs=PairTable.empty(), **arrays)


@dataclass(frozen=True, slots=True)
class Resolved:
    """The resolve phase's output: the global decisions every partition's sums need.

    Attributes
    ----------
    resolution : Resolution
        The matching at the main threshold (and the base matching).
    pair_values : dict of str to ndarray
        Per pair of the run (in the order of ``resolution.pairs``): ``is_match``,
        ``is_eligible``, ``base_match`` and every family's global per-pair values.
    preds : pandas.DataFrame
        Every prediction's matching outcome and homes (:class:`PredContext`).
    contributions : Contributions
        What the predictions add to each reference row, summed per field.
    unassigned : dict of str to float
        What the predictions without any candidate pair add (overall only).
    homeless_tiles, homeless_aois : UnitSums
        What those predictions add to the tile and the AOI of their own centroid.
    global_values : dict
        The families' run-level values that are not sums (AP): ``{"keys", "ci",
        "n_undefined", "tables"}``.
    draws : RunDraws or None
        The bootstrap's draws (every partition gets its rows' share, :meth:`RunDraws.rows`).
    columns : tuple of str
        The prediction-side columns (of ``unassigned_replicates``).
    unassigned_replicates : ndarray of float64, shape (n_replicates, len(columns)), optional
        The homeless predictions' sums in each replicate (weighed by their units' draws
        in a block bootstrap; the same in every replicate otherwise).
    """

    resolution: Resolution
    pair_values: dict[str, np.ndarray]
    preds: pd.DataFrame
    contributions: Contributions
    unassigned: dict[str, float]
    homeless_tiles: UnitSums
    homeless_aois: UnitSums
    global_values: dict = field(default_factory=dict)
    draws: RunDraws | None = None
    columns: tuple = ()
    unassigned_replicates: F64Array | None = None


def resolve_run(
    results: PairResults, options: EvalOptions, unit_keys: IdArray | None = None, strata_names: list[str] | None = None
) -> Resolved:
    """Phase 3: match every pair of the run and decide what each prediction adds where.

    Parameters
    ----------
    results : PairResults
        Every pair of the run and every prediction (:func:`concat_pair_results`).
    options : EvalOptions
    unit_keys : ndarray of int64, optional
        The units of a block bootstrap (default: those of this run; a paired comparison
        gives the union of both runs').
    strata_names : list of str, optional
        The run's strata (:attr:`RunPlan.strata_names`): the families' global step gets
        each reference row's stratum (risk-coverage per stratum).
    """
    pairs = results.pairs
    resolution = resolve(pairs, options.iou_threshold, options.matching, base_threshold(options))
    pair_values = {"is_match": resolution.is_match, "is_eligible": resolution.is_eligible, "base_match": resolution.base_match}
    pair_ctx = PairContext(pairs, results.ref_area_of_pair, results.pred_area_of_pair, resolution.base_match, options)
    for family in enabled_families(options):
        pair_values.update(family.pair_values(pair_ctx))

    outcome = prediction_fields(results.pred_pos, resolution)
    n = len(outcome)
    positions = results.pred_pos
    base_home = np.full(n, -1, dtype=np.int64)
    base_iou = np.full(n, np.nan)
    p, r, k = resolution.base_home
    rows = index_of(positions, p)
    base_home[rows], base_iou[rows] = r, pairs.iou[k]
    overlap = np.full(n, -1, dtype=np.int64)
    p, r = resolution.overlap_home
    overlap[index_of(positions, p)] = r
    # Every column is computed from arrays and the frame built once: no phase receives
    # a frame that another one fills in afterwards.
    columns = {name: outcome[name].to_numpy() for name in outcome.columns}
    columns |= {
        "area_m2": results.pred_area_m2,
        "perimeter_m": results.pred_perimeter_m,
        "boundary_within_tolerance_m": results.pred_within_tol_m,
        "base_home_ref_pos": base_home,
        "base_home_iou": base_iou,
        "overlap_ref_pos": overlap,
    }
    columns |= _prediction_sites(columns["home_ref_pos"], results, resolution)
    columns |= _prediction_codes(columns["matched"], overlap, results, resolution, pair_values, options)
    preds = pd.DataFrame(columns, index=outcome.index)
    contributions, unassigned, homeless_rows = prediction_contributions(PredContext(preds, pairs, pair_values, options))
    home = preds["home_ref_pos"].to_numpy(np.int64)
    home_row = np.full(len(home), -1, dtype=np.int64)
    home_row[home >= 0] = index_of(results.ref_pos, home[home >= 0])
    draws, pred_units = run_draws(results, preds, options, unit_keys)
    homeless = np.flatnonzero(home < 0)
    weights = None
    if draws is not None:
        weights = np.ones((options.bootstrap, len(homeless))) if draws.unit == "field" else draws.unit_weights(pred_units[homeless])
    # The homeless predictions' unit rows are the families' own prediction columns.
    ucols, rcols = _unit_columns(options)
    rows = unit_rows(ucols, contributions.columns, homeless_rows, unassigned=True)
    tile_keys = np.stack([results.pred_utm_epsg, results.pred_tile_x, results.pred_tile_y], axis=1)[homeless]
    tiles = unit_sums(tile_keys, rows, weights, ucols, rcols)
    aois = unit_sums(results.pred_aoi[homeless][:, None], rows, weights, ucols, rcols)
    unassigned_replicates = None
    if weights is not None:
        # Group 0 of every replicate: the homeless predictions, each weighed by its unit's draws.
        unassigned_replicates = replicate_group_sums(weights, homeless_rows, np.full((len(homeless), 0), -1, np.int64), 1).groups[0]
    ref_strata = None
    if strata_names is not None:
        name_of_pool = {pool_id(name, True): name for name in strata_names}  # the missing-stratum pool maps to None
        ref_strata = np.array([name_of_pool.get(p) for p in results.ref_pool.tolist()], dtype=object)
    ctx = GlobalContext(preds, pairs, results.ref_pos, home_row, options, _pred_weight_stream(draws, home_row, pred_units), ref_strata)
    global_values: dict = {"keys": {}, "ci": {}, "n_undefined": {}, "tables": {}, "replicates": {}}
    for family in enabled_families(options):
        for part, values in family.global_values(ctx).items():
            global_values[part].update(values)
    return Resolved(resolution, pair_values, preds, contributions, unassigned, tiles, aois, global_values, draws,
                    contributions.columns, unassigned_replicates)


def _unit_columns(options: EvalOptions) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The sums reporting tiles and AOIs carry (the families' unit columns and the homeless
    count), and those their bootstrap replicates carry."""
    return unit_columns(options) + (UNASSIGNED_COLUMN,), unit_replicate_columns(options)


def run_draws(results: PairResults, preds: pd.DataFrame, options: EvalOptions, unit_keys: IdArray | None = None):
    """The run's bootstrap draws (None without a bootstrap) and each prediction's unit (block draws).

    Parameters
    ----------
    unit_keys : ndarray of int64, optional
        The units to draw from (block draws; default: every unit holding a reference field
        or a prediction). A paired comparison passes the union of both runs' units.
    """
    if options.bootstrap <= 0:
        return None, None
    B, seed = options.bootstrap, options.bootstrap_seed
    if options.bootstrap_unit == "field":
        tiles = np.stack([results.ref_utm_epsg, results.ref_tile_x, results.ref_tile_y], axis=1)
        return field_draws(results.ref_pos, results.ref_pool, tiles, B, seed), None
    if options.bootstrap_unit == "tile":
        ref_keys = np.stack([results.ref_utm_epsg, results.ref_tile_x, results.ref_tile_y], axis=1)
        pred_keys = preds[["tile_epsg", "tile_x", "tile_y"]].to_numpy(np.int64)
    else:
        ref_keys = results.ref_aoi[:, None]
        pred_keys = preds["aoi"].to_numpy(np.int64)[:, None]
    if unit_keys is None:
        unit_keys = np.unique(np.concatenate([ref_keys, pred_keys]), axis=0)
    ref_units = _unit_index(unit_keys, ref_keys)
    pred_units = _unit_index(unit_keys, pred_keys)
    return block_draws(options.bootstrap_unit, unit_keys, ref_units, B, seed), pred_units


def _unit_index(unit_keys: IdArray, keys: IdArray) -> IdArray:
    """Row of each key in ``unit_keys`` (sorted, unique rows)."""
    if len(keys) == 0:
        return np.empty(0, np.int64)
    both = np.concatenate([unit_keys, keys])
    _, inverse = np.unique(both, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).ravel()
    # unit_keys are unique and sorted, so their own inverse is 0..n-1.
    return inverse[len(unit_keys):].astype(np.int64)


def _pred_weight_stream(draws, home_row: IdArray, pred_units: IdArray | None):
    """A callable yielding, per replicate, every prediction's weight and the reference count."""
    if draws is None:
        return None

    def stream():
        for b, ref_weights in enumerate(draws.ref_weights()):
            if draws.unit == "field":
                pred_weights = np.where(home_row >= 0, ref_weights[np.maximum(home_row, 0)], 1.0)
            else:
                pred_weights = draws.counts[b, pred_units]
            yield pred_weights, float(ref_weights.sum())

    return stream


def _prediction_sites(home: IdArray, results: PairResults, resolution: Resolution) -> dict[str, np.ndarray]:
    """Each prediction's IoU of its match, best IoU, own zone, and the tile and AOI it counts in.

    A prediction counts in its home reference's tile and AOI, and one without a home in
    those of its own centroid (SPEC 6.3).

    Parameters
    ----------
    home : ndarray of int64
        Each prediction's home reference position (-1: none), in ``results.pred_pos`` order.

    Returns
    -------
    dict of str to ndarray
        New columns of the prediction rows, in their order in :attr:`Resolved.preds`.
    """
    pairs = results.pairs
    n = len(home)
    row = index_of(results.pred_pos, pairs.pred_pos)
    best = np.zeros(n)
    np.maximum.at(best, row, pairs.iou)
    iou = np.full(n, np.nan)
    iou[row[resolution.is_match]] = pairs.iou[resolution.is_match]
    has = home >= 0
    ref_row = index_of(results.ref_pos, home[has])
    home_label = np.full(n, None, dtype=object)
    home_label[has] = np.asarray(results.ref_label, dtype=object)[ref_row]
    out = {
        "iou": iou,
        "best_iou": best,
        "utm_epsg": results.pred_utm_epsg,
        "annotated_fraction": results.pred_annotated_fraction,
        "score": results.pred_score,
        "label": np.asarray(results.pred_label, dtype=object),
        "home_ref_label": home_label,
    }
    for name, own, of_ref in (
        ("tile_epsg", results.pred_utm_epsg, results.ref_utm_epsg),
        ("tile_x", results.pred_tile_x, results.ref_tile_x),
        ("tile_y", results.pred_tile_y, results.ref_tile_y),
        ("aoi", results.pred_aoi, results.ref_aoi),
    ):
        values = own.astype(np.int64).copy()
        values[has] = of_ref[ref_row]
        out[name] = values
    return out


@dataclass(frozen=True, slots=True)
class Routing:
    """Which rows of the run's tables each partition gets (:func:`route`).

    Attributes
    ----------
    ref_rows, pair_rows, contribution_rows : list of ndarray of int64
        Per partition (in the order given to :func:`route`), increasing row indices
        into the reference rows, the pair table and the contributions.
    """

    ref_rows: list[IdArray]
    pair_rows: list[IdArray]
    contribution_rows: list[IdArray]


def _prediction_codes(matched: np.ndarray, overlap_ref_pos: IdArray, results: PairResults, resolution: Resolution,
                      pair_values: dict[str, np.ndarray], options: EvalOptions) -> dict[str, np.ndarray]:
    """Each prediction's primary error code and flags (SPEC 6.8, :mod:`evalcore.metrics.taxonomy`),
    as new columns ``error_code``, ``merge``, ``split`` (and ``boundary_error``)."""
    pairs = results.pairs
    matched_refs = np.unique(pairs.ref_pos[resolution.is_match])
    out = {"error_code": prediction_codes(np.asarray(matched, dtype=bool), overlap_ref_pos, matched_refs)}
    out |= prediction_flags(results.pred_pos, pairs, pair_values, results.pred_area_of_pair, results.mean_distance_m, options)
    return out


def _rows_by_part(part: IdArray, n_parts: int) -> list[IdArray]:
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(n_parts + 1))
    return [order[bounds[k] : bounds[k + 1]] for k in range(n_parts)]


def route(ref_pos: IdArray, ref_part: IdArray, n_parts: int, pair_ref_pos: IdArray, target_ref_pos: IdArray) -> Routing:
    """Send every pair and every prediction contribution to its reference field's partition.

    The one routing of the engine: the single-process run, the distributed runner and
    the tests all call it. A pair belongs to its reference field's partition; a
    prediction's contribution to the partition of the field it is added to.

    Parameters
    ----------
    ref_pos : ndarray of int64, shape (n_ref,)
        Every reference field's position, increasing.
    ref_part : ndarray of int64, shape (n_ref,)
        Its partition, in ``[0, n_parts)``.
    n_parts : int
    pair_ref_pos, target_ref_pos : ndarray of int64
        Reference position of each pair and of each contribution row (all present in ``ref_pos``).
    """
    ref_part = np.asarray(ref_part, dtype=np.int64)
    return Routing(
        ref_rows=_rows_by_part(ref_part, n_parts),
        pair_rows=_rows_by_part(ref_part[index_of(ref_pos, pair_ref_pos)], n_parts),
        contribution_rows=_rows_by_part(ref_part[index_of(ref_pos, target_ref_pos)], n_parts),
    )


@dataclass(frozen=True, slots=True)
class RefRows:
    """The reference fields of one partition, in position order.

    Attributes
    ----------
    positions : ndarray of int64
    area_m2, perimeter_m : ndarray of float64
    utm_epsg : ndarray of int64
    strata_codes, size_codes : ndarray of int64
        Group codes (-1: none).
    pools : ndarray of int64
        Bootstrap pool of each field.
    tile_x, tile_y, aoi : ndarray of int64
        Reporting tile (in zone ``utm_epsg``) and AOI (-1: none) of each field.
    """

    positions: IdArray
    area_m2: F64Array
    perimeter_m: F64Array
    utm_epsg: IdArray
    strata_codes: IdArray
    size_codes: IdArray
    pools: IdArray
    tile_x: IdArray
    tile_y: IdArray
    aoi: IdArray

    def take(self, rows: IdArray) -> RefRows:
        return RefRows(*(getattr(self, name)[rows] for name in self.__slots__))

    @staticmethod
    def of_layer(layer: PreparedLayer, strata: np.ndarray | None, plan: RunPlan) -> RefRows:
        """The rows of a prepared reference layer, with the run plan's group codes and pools."""
        strata_codes, size_codes, pools = plan.group_codes(layer.area_m2, strata)
        return RefRows(layer.positions, layer.area_m2, layer.perimeter_m, layer.utm_epsg, strata_codes, size_codes, pools,
                       layer.tile_x, layer.tile_y, layer.aoi)


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    """The sums phase output of one partition: small, merges by addition.

    Attributes
    ----------
    key : PartitionKey
    n_ref, n_pred : int
        Reference fields of the partition and predictions homed in them.
    sums : GroupSums
        Per group of the flat group axis (overall, strata, size classes).
    replicates : ReplicateSums or None
    gathered : pandas.DataFrame
        Per-field values kept whole (the families' medians), indexed by position, with
        a ``group_<k>`` column per grouping (flat group index, -1: none).
    tiles, aois : UnitSums
        Sums per reporting tile and per AOI of the partition's fields (with their home
        predictions); the AOIs' with bootstrap replicates when drawn.
    """

    key: PartitionKey
    n_ref: int
    n_pred: int
    sums: GroupSums
    replicates: ReplicateSums | None
    gathered: pd.DataFrame = field(repr=False)
    tiles: UnitSums = field(default_factory=lambda: UnitSums.empty(3), repr=False)
    aois: UnitSums = field(default_factory=lambda: UnitSums.empty(1), repr=False)


def summarize_partition(
    key: PartitionKey,
    refs: RefRows,
    results: PairResults,
    pair_values: dict[str, np.ndarray],
    contributions: Contributions,
    options: EvalOptions,
    plan: RunPlan,
    draws: RowDraws | None = None,
) -> tuple[PartitionSummary, pd.DataFrame]:
    """Phase 4 of one partition.

    Parameters
    ----------
    key : PartitionKey
    refs : RefRows
        The partition's reference fields.
    results : PairResults
        Pairs phase output holding exactly the pairs of these fields, in (reference,
        prediction) order, and their tolerance lengths.
    pair_values : dict of str to ndarray
        The resolve phase's per-pair values for those pairs.
    contributions : Contributions
        What the predictions homed in these fields add.
    options : EvalOptions
    plan : RunPlan
        The run's groupings.
    draws : RowDraws, optional
        The bootstrap draws of these fields (:meth:`RunDraws.rows`); required with a bootstrap.

    Returns
    -------
    summary : PartitionSummary
    fields : pandas.DataFrame
        The per-field columns of the partition's reference fields, indexed by position.
    """
    pairs = results.pairs
    row_of_pair = index_of(refs.positions, pairs.ref_pos)  # KeyError for a pair of another partition's field
    for name, values in pair_values.items():
        if len(values) != len(pairs):
            raise ValueError(f"partition {key}: {len(values)} values of {name!r} for {len(pairs)} pairs")
    is_match = pair_values["is_match"]
    resolution = Resolution(
        pairs=pairs,
        is_eligible=pair_values["is_eligible"],
        is_match=is_match,
        home_pred_pos=np.empty(0, np.int64),
        home_ref_pos=np.empty(0, np.int64),
        matching=options.matching,
        iou_threshold=options.iou_threshold,
    )
    fields = reference_fields(refs.positions, refs.area_m2, resolution, results.pred_area_of_pair)
    fields["area_m2"] = refs.area_m2
    fields["perimeter_m"] = refs.perimeter_m
    fields["utm_epsg"] = refs.utm_epsg
    # Distances of the matched pair: the pair the field matched.
    n = len(refs.positions)
    hausdorff = np.full(n, np.nan)
    mean = np.full(n, np.nan)
    spacing = np.full(n, np.nan)
    matched_pairs = np.flatnonzero(is_match)
    rows = row_of_pair[matched_pairs]
    hausdorff[rows] = results.hausdorff_m[matched_pairs]
    mean[rows] = results.mean_distance_m[matched_pairs]
    spacing[rows] = results.spacing_m[matched_pairs]
    fields["hausdorff_m"] = hausdorff
    fields["boundary_mean_distance_m"] = mean
    fields["boundary_sample_spacing_m"] = spacing
    within = np.full(n, np.nan)
    own = np.isin(results.ref_pos, refs.positions)
    within[np.searchsorted(refs.positions, results.ref_pos[own])] = results.ref_within_tol_m[own]
    fields["boundary_within_tolerance_m"] = within

    ctx = RefContext(
        fields=fields,
        pairs=pairs,
        row_of_pair=row_of_pair,
        ref_area_m2=results.ref_area_of_pair,
        pred_area_m2=results.pred_area_of_pair,
        pair_values=pair_values,
        options=options,
    )
    table = quantity_table(ctx, contributions)
    matched = fields["matched"].to_numpy(bool)
    fields["error_code"] = reference_codes(matched, fields["n_overlapping_pred"].to_numpy(np.int64))
    present = set(table.columns)
    flags = reference_flags(
        table.column("merged_reference") if "merged_reference" in present else None,
        table.column("splits") if "splits" in present else None,
        matched, mean, options.boundary_tolerance_m,
    )
    for name, values in flags.items():
        fields[name] = values
    flat_groups = plan.flat_groups(refs.strata_codes, refs.size_codes)
    replicates = weights = None
    if options.bootstrap > 0:
        if draws is None or len(draws.weights_rows()) != n:
            raise ValueError(f"partition {key}: the bootstrap draws of its {n} reference fields are missing")
        weights = draws.weights()
        replicates = replicate_group_sums(weights, table.values, flat_groups, plan.n_groups)
    ucols, rcols = _unit_columns(options)
    units = unit_rows(ucols, table.columns, table.values)
    tiles = unit_sums(np.stack([refs.utm_epsg, refs.tile_x, refs.tile_y], axis=1), units, weights, ucols, rcols)
    aois = unit_sums(refs.aoi[:, None], units, weights, ucols, rcols)
    gathered = pd.DataFrame(index=pd.Index(refs.positions, name="ref_pos"))
    for family in enabled_families(options):
        for name, values in family.gathered(ctx).items():
            gathered[name] = values
    for g in range(flat_groups.shape[1]):
        gathered[f"group_{g}"] = flat_groups[:, g]
    n_pred = int(table.column("n_pred").sum()) if n else 0
    summary = PartitionSummary(
        key=key,
        n_ref=n,
        n_pred=n_pred,
        sums=group_sums(table.values, table.maxima, flat_groups, plan.n_groups, table.columns, table.max_columns),
        replicates=replicates,
        gathered=gathered,
        tiles=tiles,
        aois=aois,
    )
    fields["tile_x"] = refs.tile_x
    fields["tile_y"] = refs.tile_y
    fields["aoi"] = refs.aoi
    return summary, fields


@dataclass(frozen=True, slots=True)
class MergedSums:
    """Every partition's sums added in key order, plus the unassigned predictions.

    Attributes
    ----------
    sums : GroupSums
        Group 0 (overall) includes the unassigned predictions' row.
    replicates : ReplicateSums or None
        The overall group includes the unassigned row in every replicate.
    gathered : pandas.DataFrame
        Concatenated gathered per-field columns, in position order.
    unassigned : dict of str to float
    tiles, aois : UnitSums
        Per reporting tile and per AOI, the homeless predictions included (in every
        replicate of the AOIs' intervals).
    """

    sums: GroupSums
    replicates: ReplicateSums | None
    gathered: pd.DataFrame
    unassigned: dict[str, float]
    tiles: UnitSums = field(default_factory=lambda: UnitSums.empty(3))
    aois: UnitSums = field(default_factory=lambda: UnitSums.empty(1))
    global_values: dict = field(default_factory=dict)
    n_units: int | None = None
    pixels: dict | None = None


def merge_partitions(
    parts: list[PartitionSummary] | Iterator[PartitionSummary],
    unassigned: dict[str, float],
    options: EvalOptions,
    plan: RunPlan,
    homeless_tiles: UnitSums | None = None,
    homeless_aois: UnitSums | None = None,
    global_values: dict | None = None,
    unassigned_replicates: F64Array | None = None,
    unassigned_columns: tuple[str, ...] = (),
    n_units: int | None = None,
) -> MergedSums:
    """Add the partitions' sums in partition-key order (so the bits never depend on arrival order).

    ``parts`` is a list in any order, or an iterator yielding them in key order: then
    each partition is added and let go before the next is read, so the bootstrap's
    replicate sums (groups x replicates x columns per partition) are held for one
    partition at a time, whatever the number of partitions.
    """
    if isinstance(parts, list):
        parts = iter(sorted(parts, key=lambda p: p.key))
    columns, max_cols = quantity_columns(options), max_columns(options)
    sums = GroupSums.empty(columns, max_cols, plan.n_groups)
    replicates = None
    if options.bootstrap > 0:
        replicates = ReplicateSums(np.zeros((plan.n_groups, options.bootstrap, len(columns))))
    previous = None
    gathered_parts, tile_parts, aoi_parts = [], [], []
    for part in parts:
        if previous is not None and part.key <= previous:
            raise ValueError("a partition was summed twice" if part.key == previous else "partitions arrived out of key order")
        previous = part.key
        sums = sums.merge(part.sums)
        if replicates is not None:
            replicates = replicates.merge(part.replicates)
        gathered_parts.append(part.gathered)
        tile_parts.append(part.tiles)
        aoi_parts.append(part.aois)
    row = np.array([unassigned.get(c, 0.0) for c in columns])
    sums = sums.add_to_group(0, row)
    if replicates is not None:
        groups = replicates.groups.copy()
        if unassigned_replicates is None:
            groups[0] = groups[0] + row  # the same homeless predictions in every replicate
        else:
            col = {name: k for k, name in enumerate(columns)}
            for j, name in enumerate(unassigned_columns):
                groups[0][:, col[name]] += unassigned_replicates[:, j]
        replicates = ReplicateSums(groups)
    if gathered_parts:
        gathered = pd.concat(gathered_parts).sort_index()
    else:
        gathered = pd.DataFrame(index=pd.Index(np.empty(0, np.int64), name="ref_pos"))
    n_rep = options.bootstrap if options.bootstrap > 0 else None
    ucols, rcols = _unit_columns(options)
    tiles = UnitSums.concat([UnitSums.empty(3, n_rep, ucols, rcols)] + tile_parts + ([homeless_tiles] if homeless_tiles is not None else []))
    aois = UnitSums.concat([UnitSums.empty(1, n_rep, ucols, rcols)] + aoi_parts + ([homeless_aois] if homeless_aois is not None else []))
    return MergedSums(sums, replicates, gathered, dict(unassigned), tiles, aois, dict(global_values or {}), n_units)


def _labels_at(pred_labels: pd.Series, positions: np.ndarray) -> pd.api.extensions.ExtensionArray | np.ndarray:
    """Prediction labels at the given positions (-1: none), nullable for integer labels."""
    found = positions >= 0
    values = pred_labels.reindex(positions[found]).to_numpy()
    if pd.api.types.is_integer_dtype(pred_labels.dtype):
        out = pd.array(np.zeros(len(positions), dtype=np.int64), dtype="Int64")
        out[found] = values
        out[~found] = pd.NA
        return out
    obj = np.full(len(positions), None, dtype=object)
    obj[found] = values
    return obj


def _label_column(values: np.ndarray) -> pd.api.extensions.ExtensionArray | np.ndarray:
    """Labels (None: none) as a nullable integer column when every label is an integer."""
    present = np.array([v is not None for v in values], dtype=bool)
    if present.any() and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values[present]):
        out = pd.array(np.zeros(len(values), dtype=np.int64), dtype="Int64")
        out[present] = np.asarray(values[present].tolist(), dtype=np.int64)
        out[~present] = pd.NA
        return out
    return values


def _aoi_column(codes: np.ndarray, aoi_keys: list[str] | None) -> pd.api.extensions.ExtensionArray:
    keys = np.array(list(aoi_keys or []) + [None], dtype=object)
    return pd.array(keys[np.where(codes >= 0, codes, len(keys) - 1)], dtype="string")


def prediction_table(preds: pd.DataFrame, *, aoi_keys: list[str] | None, annotated: bool, scored: bool = False) -> pd.DataFrame:
    """The per-prediction table (issue 13) from the resolve phase's prediction rows.

    Parameters
    ----------
    preds : pandas.DataFrame
        :attr:`Resolved.preds` (or some of its rows), indexed by prediction position.
    aoi_keys : list of str, optional
        The AOI keys (None: no AOI layer; the ``aoi`` column is left out).
    annotated : bool
        An annotated area was given (``annotated_fraction`` is written).
    scored : bool
        A score column was given (``score`` is written).

    Returns
    -------
    pandas.DataFrame
        Indexed by the predicted layer's labels: ``area_m2``, ``area_ha``,
        ``home_ref_index`` (the home reference's label, null without a home),
        ``matched``, ``iou`` (of its match, NaN when unmatched), ``best_iou`` (0 without
        a candidate pair), ``utm_epsg`` (its own zone), ``tile_epsg``, ``tile_x``,
        ``tile_y`` and ``aoi`` (the tile and AOI it counts in: its home's, else its own).
    """
    out = pd.DataFrame(index=pd.Index(_label_column(preds["label"].to_numpy(object)), name="pred_index"))
    area = preds["area_m2"].to_numpy(np.float64)
    out["area_m2"] = area
    out["area_ha"] = area / 1e4
    out["home_ref_index"] = _label_column(preds["home_ref_label"].to_numpy(object))
    out["matched"] = preds["matched"].to_numpy(bool)
    out["iou"] = preds["iou"].to_numpy(np.float64)
    out["best_iou"] = preds["best_iou"].to_numpy(np.float64)
    out["utm_epsg"] = preds["utm_epsg"].to_numpy(np.int64)
    out["tile_epsg"] = preds["tile_epsg"].to_numpy(np.int64)
    out["tile_x"] = preds["tile_x"].to_numpy(np.int64)
    out["tile_y"] = preds["tile_y"].to_numpy(np.int64)
    if aoi_keys is not None:
        out["aoi"] = _aoi_column(preds["aoi"].to_numpy(np.int64), aoi_keys)
    if annotated:
        out["annotated_fraction"] = preds["annotated_fraction"].to_numpy(np.float64)
    if scored:
        out["score"] = preds["score"].to_numpy(np.float64)
    _add_code_columns(out, preds, PREDICTION_CODES)
    return out


def _add_code_columns(out: pd.DataFrame, rows: pd.DataFrame, names: tuple[str, ...]) -> None:
    """``error_code`` (string) and the boolean flags of the taxonomy, when computed."""
    if "error_code" not in rows.columns:
        return
    out["error_code"] = code_labels(rows["error_code"].to_numpy(np.int8), names)
    for flag in ("merge", "split", "boundary_error"):
        if flag in rows.columns:
            out[flag] = rows[flag].to_numpy(bool)


def field_table(
    fields: pd.DataFrame,
    ref_labels: pd.Index,
    pred_labels: pd.Series,
    *,
    strata_names: list[str] | None,
    strata_codes: np.ndarray,
    size_keys: list[str] | None,
    size_codes: np.ndarray,
    tolerance_m: float | None,
    aoi_keys: list[str] | None = None,
) -> pd.DataFrame:
    """The per-field table of seed 000 from the per-field columns, with each field's
    reporting tile (``tile_x``, ``tile_y`` in zone ``utm_epsg``) and AOI.

    Parameters
    ----------
    fields : pandas.DataFrame
        :func:`summarize_partition`'s per-field columns, indexed by position.
    ref_labels : pandas.Index
        Input label of each of those fields (same order).
    pred_labels : pandas.Series
        Input label of predictions, indexed by prediction position (at least those
        the fields refer to).
    strata_codes, size_codes : ndarray of int64
        Group codes of the fields (-1: none).
    """
    matched = fields["matched"].to_numpy(bool)
    out = pd.DataFrame(index=ref_labels)
    out["area_m2"] = fields["area_m2"].to_numpy()
    out["area_ha"] = fields["area_m2"].to_numpy() / 1e4
    out["perimeter_m"] = fields["perimeter_m"].to_numpy()
    out["utm_epsg"] = fields["utm_epsg"].to_numpy(np.int64)
    out["matched"] = matched
    out["pred_index"] = _labels_at(pred_labels, fields["matched_pred_pos"].to_numpy(np.int64))
    out["iou"] = fields["iou"].to_numpy()
    out["pred_area_m2"] = fields["pred_area_m2"].to_numpy()
    out["best_iou"] = fields["best_iou"].to_numpy()
    out["n_overlapping_pred"] = fields["n_overlapping_pred"].to_numpy(np.int64)
    out["max_overlap_pred_index"] = _labels_at(pred_labels, fields["max_overlap_pred_pos"].to_numpy(np.int64))
    out["oversegmentation"] = fields["oversegmentation"].to_numpy()
    out["undersegmentation"] = fields["undersegmentation"].to_numpy()
    out["hausdorff_m"] = fields["hausdorff_m"].to_numpy()
    out["boundary_mean_distance_m"] = fields["boundary_mean_distance_m"].to_numpy()
    out["boundary_sample_spacing_m"] = fields["boundary_sample_spacing_m"].to_numpy()
    out["tile_x"] = fields["tile_x"].to_numpy(np.int64)
    out["tile_y"] = fields["tile_y"].to_numpy(np.int64)
    _add_code_columns(out, fields, REFERENCE_CODES)
    if aoi_keys is not None:
        out["aoi"] = _aoi_column(fields["aoi"].to_numpy(np.int64), aoi_keys)
    if strata_names is not None:
        names = np.array(list(strata_names) + [None], dtype=object)
        out["stratum"] = pd.array(names[strata_codes], dtype="string")
    if size_keys is not None:
        keys = np.array(list(size_keys) + [None], dtype=object)
        out["size_class"] = pd.array(keys[size_codes], dtype="string")
    if tolerance_m is not None:
        within = fields["boundary_within_tolerance_m"].to_numpy()
        perimeter = fields["perimeter_m"].to_numpy()
        out["boundary_within_tolerance_m"] = within
        with np.errstate(divide="ignore", invalid="ignore"):
            out["boundary_recall"] = np.where(perimeter > 0, within / perimeter, np.nan)
        out["within_tolerance"] = matched & (fields["boundary_mean_distance_m"].to_numpy() <= tolerance_m)
    return out

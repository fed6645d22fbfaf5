"""The phases of one evaluation, as pure functions a partition can run on its own.

ARCHITECTURE.md's four phases, here without any cluster code:

1. prepare and key: :func:`evalcore.prepare.prepare_layer` (per input chunk);
2. pairs: :func:`compute_pairs`, for the reference fields and predictions a
   partition owns, against the other layer's polygons near them (its own and a halo);
3. resolve: :func:`evalcore.matching.resolve` on all pairs, then
   :func:`prediction_rows` for every prediction's home and matched state;
4. sums: :func:`summarize_partition` per partition, and :func:`merge_partitions`.

The single-process :func:`evalcore.evaluate` runs the same functions, phase 2 once
over everything and phase 4 once per partition key, merging in key order; the
distributed runner calls them per partition on Dask workers. The merge always adds
partitions in key order, so both give the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from evalcore import boundary
from evalcore._typing import F64Array, IdArray
from evalcore.bootstrap import PartitionKey, ReplicateSums, partition_replicate_sums
from evalcore.matching import Resolution, eligible_pairs
from evalcore.options import EvalOptions, RunPlan
from evalcore.pairs import PairTable, candidate_pairs
from evalcore.prepare import PreparedLayer
from evalcore.quantities import QUANTITY_COLUMNS, prediction_fields, quantity_rows, reference_fields
from evalcore.stats import QuantitySums, group_sums

__all__ = [
    "PairResults",
    "compute_pairs",
    "prediction_rows",
    "RefRows",
    "PartitionSummary",
    "summarize_partition",
    "MergedSums",
    "merge_partitions",
    "partition_keys",
    "unassigned_row",
    "field_table",
]


def partition_keys(layer: PreparedLayer) -> list[PartitionKey]:
    """(UTM EPSG, tile x, tile y) of every row."""
    return list(zip(layer.utm_epsg.tolist(), layer.tile_x.tolist(), layer.tile_y.tolist()))


@dataclass(frozen=True, slots=True)
class PairResults:
    """What the pairs phase computes for some reference fields and predictions.

    Attributes
    ----------
    pairs : PairTable
        Candidate pairs of the reference fields.
    pred_area_of_pair : ndarray of float64
        Area of each pair's prediction, m².
    hausdorff_m, mean_distance_m, spacing_m : ndarray of float64
        Boundary distances of each eligible pair (NaN for pairs below the threshold).
    ref_pos, ref_within_tol_m : ndarray
        The reference fields and their boundary length within the tolerance (NaN
        without a tolerance), metres.
    pred_pos, pred_area_m2, pred_perimeter_m, pred_within_tol_m : ndarray
        The predictions owned by the partition: area (m²), perimeter and boundary
        length within the tolerance (metres, in their own UTM zone).
    pred_label_of_pair : ndarray of object
        Input label of each pair's prediction (for the per-field table).
    """

    pairs: PairTable
    pred_area_of_pair: F64Array
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


def compute_pairs(
    ref: PreparedLayer,
    pred_near: PreparedLayer,
    *,
    pred_own: PreparedLayer,
    ref_near: PreparedLayer,
    iou_threshold: float,
    boundary_tolerance_m: float | None,
    boundary_sample_spacing_m: float | None,
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
    )


def prediction_rows(
    pred_pos: IdArray,
    area_m2: F64Array,
    perimeter_m: F64Array,
    within_tol_m: F64Array,
    resolution: Resolution,
) -> pd.DataFrame:
    """Every prediction's quantities and home (-1: none), indexed by position."""
    rows = prediction_fields(pred_pos, resolution)
    rows["area_m2"] = area_m2
    rows["perimeter_m"] = perimeter_m
    rows["boundary_within_tolerance_m"] = within_tol_m
    return rows


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
    """

    positions: IdArray
    area_m2: F64Array
    perimeter_m: F64Array
    utm_epsg: IdArray
    strata_codes: IdArray
    size_codes: IdArray
    pools: IdArray

    def take(self, rows: IdArray) -> RefRows:
        return RefRows(*(getattr(self, name)[rows] for name in self.__slots__))


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    """The sums phase output of one partition: small, merges by addition.

    Attributes
    ----------
    key : PartitionKey
    n_ref, n_pred : int
        Reference fields of the partition and predictions homed in them.
    overall : QuantitySums
    strata, sizes : list of QuantitySums
    replicates : ReplicateSums or None
    medians : pandas.DataFrame
        Per-field columns the medians need: ``area_ha``, ``hausdorff_m``,
        ``boundary_mean_distance_m`` (NaN when unmatched), ``strata_code``, ``size_code``.
    """

    key: PartitionKey
    n_ref: int
    n_pred: int
    overall: QuantitySums
    strata: list[QuantitySums]
    sizes: list[QuantitySums]
    replicates: ReplicateSums | None
    medians: pd.DataFrame = field(repr=False)


def summarize_partition(
    key: PartitionKey,
    refs: RefRows,
    results: PairResults,
    is_match: np.ndarray,
    is_eligible: np.ndarray,
    preds: pd.DataFrame,
    options: EvalOptions,
    plan: RunPlan,
) -> tuple[PartitionSummary, pd.DataFrame]:
    """The sums phase of one partition.

    Parameters
    ----------
    key : PartitionKey
    refs : RefRows
        The partition's reference fields.
    results : PairResults
        Pairs phase output holding (at least) every pair of these fields, and their
        tolerance lengths.
    is_match, is_eligible : ndarray of bool
        The global matching's verdict on each pair of ``results.pairs``.
    preds : pandas.DataFrame
        :func:`prediction_rows` of the predictions whose home is one of ``refs``.
    options : EvalOptions
    plan : RunPlan
        Strata, size classes and the central bootstrap draws of the run.

    Returns
    -------
    summary : PartitionSummary
    fields : pandas.DataFrame
        The per-field columns of the partition's reference fields, indexed by position.
    """
    pairs = results.pairs
    resolution = Resolution(
        pairs=pairs,
        is_eligible=is_eligible,
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
    # Distances of the matched pair: the pair the field matched, looked up by position.
    hausdorff = np.full(len(refs.positions), np.nan)
    mean = np.full(len(refs.positions), np.nan)
    spacing = np.full(len(refs.positions), np.nan)
    matched_pairs = np.flatnonzero(is_match & np.isin(pairs.ref_pos, refs.positions))
    rows = np.searchsorted(refs.positions, pairs.ref_pos[matched_pairs])
    hausdorff[rows] = results.hausdorff_m[matched_pairs]
    mean[rows] = results.mean_distance_m[matched_pairs]
    spacing[rows] = results.spacing_m[matched_pairs]
    fields["hausdorff_m"] = hausdorff
    fields["boundary_mean_distance_m"] = mean
    fields["boundary_sample_spacing_m"] = spacing
    within = np.full(len(refs.positions), np.nan)
    own = np.isin(results.ref_pos, refs.positions)
    within[np.searchsorted(refs.positions, results.ref_pos[own])] = results.ref_within_tol_m[own]
    fields["boundary_within_tolerance_m"] = within

    preds = preds.sort_index()
    table = quantity_rows(fields, preds, tolerance_m=options.boundary_tolerance_m)
    replicates = None
    if options.bootstrap > 0:
        replicates = partition_replicate_sums(
            table.values,
            refs.pools,
            key,
            plan.draws,
            n_replicates=options.bootstrap,
            seed=options.bootstrap_seed,
            strata_codes=refs.strata_codes,
            n_strata=plan.n_strata,
            size_codes=refs.size_codes,
            n_size_classes=plan.n_sizes,
        )
    matched = fields["matched"].to_numpy(bool)
    medians = pd.DataFrame(
        {
            "area_ha": refs.area_m2 / 1e4,
            "hausdorff_m": np.where(matched, hausdorff, np.nan),
            "boundary_mean_distance_m": np.where(matched, mean, np.nan),
            "strata_code": refs.strata_codes,
            "size_code": refs.size_codes,
        },
        index=pd.Index(refs.positions, name="ref_pos"),
    )
    summary = PartitionSummary(
        key=key,
        n_ref=len(refs.positions),
        n_pred=len(preds),
        overall=QuantitySums.from_table(table, with_unassigned=False),
        strata=group_sums(table, refs.strata_codes, plan.n_strata),
        sizes=group_sums(table, refs.size_codes, plan.n_sizes),
        replicates=replicates,
        medians=medians,
    )
    return summary, fields


@dataclass(frozen=True, slots=True)
class MergedSums:
    """Every partition's sums added in key order, plus the unassigned predictions.

    Attributes
    ----------
    overall : QuantitySums
        Including the unassigned predictions' row.
    strata, sizes : list of QuantitySums
    replicates : ReplicateSums or None
        ``overall`` includes the unassigned row in every replicate.
    medians : pandas.DataFrame
        Concatenated per-field median columns, in position order.
    unassigned : ndarray of float64
    """

    overall: QuantitySums
    strata: list[QuantitySums]
    sizes: list[QuantitySums]
    replicates: ReplicateSums | None
    medians: pd.DataFrame
    unassigned: F64Array


def merge_partitions(
    parts: list[PartitionSummary], unassigned: F64Array, *, n_strata: int, n_sizes: int, n_replicates: int
) -> MergedSums:
    """Add the partitions' sums in partition-key order (so the bits never depend on arrival order)."""
    parts = sorted(parts, key=lambda p: p.key)
    keys = [p.key for p in parts]
    if len(set(keys)) != len(keys):
        raise ValueError("a partition was summed twice")
    overall = QuantitySums.empty()
    strata = [QuantitySums.empty() for _ in range(n_strata)]
    sizes = [QuantitySums.empty() for _ in range(n_sizes)]
    c = len(QUANTITY_COLUMNS)
    replicates = None
    if n_replicates > 0:
        replicates = ReplicateSums(
            np.zeros((n_replicates, c)), np.zeros((n_strata, n_replicates, c)), np.zeros((n_sizes, n_replicates, c))
        )
    for part in parts:
        overall = overall.merge(part.overall)
        strata = [a.merge(b) for a, b in zip(strata, part.strata)]
        sizes = [a.merge(b) for a, b in zip(sizes, part.sizes)]
        if replicates is not None:
            replicates = replicates.merge(part.replicates)
    overall = overall.merge(QuantitySums(QUANTITY_COLUMNS, np.asarray(unassigned, dtype=np.float64), float("nan")))
    if replicates is not None:
        replicates = ReplicateSums(replicates.overall + unassigned, replicates.strata, replicates.size_classes)
    medians = pd.concat([p.medians for p in parts]).sort_index() if parts else pd.DataFrame(
        {"area_ha": [], "hausdorff_m": [], "boundary_mean_distance_m": [], "strata_code": [], "size_code": []}
    )
    return MergedSums(overall, strata, sizes, replicates, medians, np.asarray(unassigned, dtype=np.float64))


def unassigned_row(preds: pd.DataFrame, tolerance_m: float | None) -> F64Array:
    """Sum of the quantity rows of the predictions without a home."""
    homeless = preds[preds["home_ref_pos"].to_numpy() < 0]
    empty_refs = pd.DataFrame(
        {
            name: np.empty(0)
            for name in (
                "matched", "iou", "pred_area_m2", "best_iou", "oversegmentation", "undersegmentation",
                "n_overlapping_pred", "n_eligible_pred", "area_m2", "perimeter_m", "hausdorff_m",
                "boundary_mean_distance_m", "boundary_sample_spacing_m", "boundary_within_tolerance_m",
            )
        },
        index=pd.Index(np.empty(0, np.int64)),
    )
    return quantity_rows(empty_refs, homeless, tolerance_m=tolerance_m).unassigned



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
) -> pd.DataFrame:
    """The per-field table of seed 000 from the per-field columns.

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

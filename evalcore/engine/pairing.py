"""Phase 2 of an evaluation, the pairs: what a partition computes for the reference fields
and predictions it owns.

:func:`compute_pairs` finds their candidate pairs against the other layer's polygons near
them (its own and a halo), with each pair's areas and boundary distances and each row's
boundary length within the tolerance (:class:`PairResults`); :func:`concat_pair_results`
joins every partition's results into the run's, in position order, for the resolve phase
(:mod:`evalcore.engine.resolve`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from evalcore import boundary
from evalcore._typing import F64Array, IdArray
from evalcore.bootstrap import PartitionKey, pool_id
from evalcore.layer import PreparedLayer
from evalcore.matching import eligible_pairs
from evalcore.pairs import candidate_pairs
from evalcore.pairtable import PairTable

__all__ = [
    "PAIR_ARRAYS",
    "REF_ARRAYS",
    "PRED_ARRAYS",
    "partition_keys",
    "PairResults",
    "compute_pairs",
    "concat_pair_results",
]


PAIR_ARRAYS: tuple[str, ...] = (
    "pred_area_of_pair", "ref_area_of_pair", "hausdorff_m", "mean_distance_m", "spacing_m", "boundary_iou",
    "pred_label_of_pair",
)
"""The :class:`PairResults` arrays with a value per pair."""
REF_ARRAYS: tuple[str, ...] = (
    "ref_pos", "ref_within_tol_m", "ref_label", "ref_utm_epsg", "ref_tile_x", "ref_tile_y", "ref_aoi", "ref_pool", "ref_class",
)
"""The :class:`PairResults` arrays with a value per reference row."""
PRED_ARRAYS: tuple[str, ...] = (
    "pred_pos", "pred_area_m2", "pred_perimeter_m", "pred_within_tol_m", "pred_label", "pred_utm_epsg",
    "pred_tile_x", "pred_tile_y", "pred_aoi", "pred_annotated_fraction", "pred_score", "pred_class",
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
    boundary_iou : ndarray of float64
        Boundary IoU of each eligible pair (SPEC 6.11; NaN below the threshold and
        without ``boundary_iou_width_m``).
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
    ref_class, pred_class : ndarray of object
        Class (str, None where null or without a class column) of each reference row
        and prediction row (SPEC 6.10).
    """

    pairs: PairTable
    pred_area_of_pair: F64Array
    ref_area_of_pair: F64Array
    hausdorff_m: F64Array
    mean_distance_m: F64Array
    spacing_m: F64Array
    boundary_iou: F64Array
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
    ref_class: np.ndarray
    pred_class: np.ndarray

    def restrict(self, pair_rows: IdArray, ref_rows: IdArray, pred_rows: IdArray | None = None) -> PairResults:
        """The results of some pairs, reference rows and (optionally) prediction rows."""
        preds = slice(None) if pred_rows is None else pred_rows
        rows = {**dict.fromkeys(PAIR_ARRAYS, pair_rows), **dict.fromkeys(REF_ARRAYS, ref_rows), **dict.fromkeys(PRED_ARRAYS, preds)}
        return PairResults(
            pairs=self.pairs.take(pair_rows),
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
    boundary_iou_width_m: float | None = None,
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
    boundary_iou_width_m : float, optional
        Band width of the pairs' boundary IoU, metres (None: not computed).
    """
    pairs = candidate_pairs(ref, pred_near)
    i_ref = np.searchsorted(ref.positions, pairs.ref_pos)
    i_pred = np.searchsorted(pred_near.positions, pairs.pred_pos)
    n = len(pairs)
    hausdorff = np.full(n, np.nan)
    mean = np.full(n, np.nan)
    spacing = np.full(n, np.nan)
    ok = np.flatnonzero(eligible_pairs(pairs, iou_threshold))
    band_iou = np.full(n, np.nan)
    if len(ok):
        hausdorff[ok], mean[ok], spacing[ok] = boundary.matched_pair_distances(
            ref, pred_near, i_ref[ok], i_pred[ok], boundary_sample_spacing_m
        )
        if boundary_iou_width_m is not None:
            band_iou[ok] = boundary.pair_boundary_iou(
                *boundary.pairs_in_reference_zone(ref, pred_near, i_ref[ok], i_pred[ok]), boundary_iou_width_m
            )
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
        boundary_iou=band_iou,
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
        ref_class=_classes(ref),
        pred_class=_classes(pred_own),
    )


def _classes(layer: PreparedLayer) -> np.ndarray:
    """The layer's class of each row (all None without a class column)."""
    if layer.class_value is None:
        return np.full(len(layer), None, dtype=object)
    return np.asarray(layer.class_value, dtype=object)


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
    objects = ("pred_label_of_pair", "ref_label", "pred_label", "ref_class", "pred_class")
    ints = ("ref_pos", "pred_pos", "ref_utm_epsg", "ref_tile_x", "ref_tile_y", "ref_aoi", "ref_pool", "pred_utm_epsg",
            "pred_tile_x", "pred_tile_y", "pred_aoi")
    arrays = {
        name: np.empty(0, dtype=object if name in objects else np.int64 if name in ints else np.float64)
        for name in PAIR_ARRAYS + REF_ARRAYS + PRED_ARRAYS
    }
    return PairResults(pairs=PairTable.empty(), **arrays)

"""Candidate pairs and their overlap (SPEC section 3).

A candidate pair is a (reference, prediction) whose geometries intersect with a
positive intersection area in the equal-area CRS. Pairs are identified by the input
positions of both sides, so tables from different partitions concatenate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import shapely

from evalcore import _area_kernels
from evalcore._typing import F64Array, GeomArray, IdArray
from evalcore.arrays import meeting_boxes
from evalcore.layer import PreparedLayer
from evalcore.pairtable import PairTable
from evalcore.rings import Rings, flatten_rings
from evalcore.threads import GEOMS_PER_THREAD, map_elements

__all__ = ["PairRings", "candidate_pairs", "intersection_areas", "pair_iou"]


def intersection_areas(ref_geoms: GeomArray, pred_geoms: GeomArray, *, rings: PairRings | None = None) -> F64Array:
    """Area of ``ref_geoms[i] ∩ pred_geoms[i]`` for aligned arrays, in CRS units squared.

    ``rings`` gives the same geometries as flat rings when the caller has them (the
    distributed pairs phase reads them from the stored WKB): the area kernel then takes
    them as they are instead of flattening the geometries again.

    Examples
    --------
    >>> from shapely.geometry import box
    >>> intersection_areas(np.array([box(0, 0, 2, 1)]), np.array([box(1, 0, 3, 1)]))
    array([1.])
    """
    if len(ref_geoms) == 0:
        return np.empty(0, dtype=np.float64)
    # When one polygon covers the other the intersection is the smaller one: take its
    # area as it is, so a polygon against itself has IoU exactly 1, and skip the overlay.
    shapely.prepare(ref_geoms)
    shapely.prepare(pred_geoms)
    pred_in_ref = shapely.covers(ref_geoms, pred_geoms)
    ref_in_pred = ~pred_in_ref & shapely.covers(pred_geoms, ref_geoms)
    rest = ~(pred_in_ref | ref_in_pred)
    inter = np.empty(len(ref_geoms), dtype=np.float64)
    inter[pred_in_ref] = shapely.area(pred_geoms[pred_in_ref])
    inter[ref_in_pred] = shapely.area(ref_geoms[ref_in_pred])
    inter[rest] = _overlap_areas(ref_geoms[rest], pred_geoms[rest], rings.rows(rest) if rings is not None else None)
    return inter


@dataclass(frozen=True, slots=True)
class PairRings:
    """Pairs' geometries as rows of two layers' flat rings: pair ``i`` is
    ``ref.take([ref_rows[i]])`` and ``pred.take([pred_rows[i]])``.

    The rings are shared, not copied, until the area kernel takes its slice's rows.
    """

    ref: Rings
    ref_rows: IdArray
    pred: Rings
    pred_rows: IdArray

    def rows(self, pairs: np.ndarray) -> PairRings:
        """Some of the pairs (indices or a mask)."""
        return PairRings(self.ref, self.ref_rows[pairs], self.pred, self.pred_rows[pairs])


_POLYGONAL = (int(shapely.GeometryType.POLYGON), int(shapely.GeometryType.MULTIPOLYGON))


def _overlap_areas(a: GeomArray, b: GeomArray, rings: PairRings | None = None) -> F64Array:
    """Area of ``a[i] ∩ b[i]`` (:func:`_overlap_areas_of`), in slices on this process's threads."""
    if rings is None:
        return map_elements(_overlap_areas_of, a, b, min_slice=GEOMS_PER_THREAD)

    def of(a: GeomArray, b: GeomArray, ref_rows: IdArray, pred_rows: IdArray) -> F64Array:
        return _overlap_areas_of(a, b, PairRings(rings.ref, ref_rows, rings.pred, pred_rows))

    return map_elements(of, a, b, rings.ref_rows, rings.pred_rows, min_slice=GEOMS_PER_THREAD)


def _overlap_areas_of(a: GeomArray, b: GeomArray, rings: PairRings | None = None) -> F64Array:
    """Area of ``a[i] ∩ b[i]`` by the boundary-integral kernel, GEOS for the pairs it declines.

    The kernel (:mod:`evalcore._area_kernels`) is exact on shared vertices and edges and
    declines near-degenerate pairs (a vertex within 1e-6 CRS units of the other
    boundary without lying on it) and very large ones; those go to
    ``shapely.intersection``, as do pairs with a geometry that is not a (multi)polygon.
    Missing and empty geometries give 0. Each pair is computed on its own, so the result
    does not depend on batching.
    """
    out = np.zeros(len(a), dtype=np.float64)
    some = ~(shapely.is_missing(a) | shapely.is_missing(b) | shapely.is_empty(a) | shapely.is_empty(b))
    polygonal = np.isin(shapely.get_type_id(a), _POLYGONAL) & np.isin(shapely.get_type_id(b), _POLYGONAL)
    idx = np.flatnonzero(some & polygonal)
    geos = np.flatnonzero(some & ~polygonal)
    if len(idx):
        if rings is None:
            x, y, ring_off, ring_ext, geom_off = flatten_rings(np.concatenate([a[idx], b[idx]]))
        else:
            both = Rings.concat([rings.ref.take(rings.ref_rows[idx]), rings.pred.take(rings.pred_rows[idx])])
            x, y, ring_off, ring_ext, geom_off = both.x, both.y, both.ring_off, both.ring_ext, both.geom_off
        ga = np.arange(len(idx), dtype=np.int64)
        area, status = _area_kernels._intersection_areas(
            x, y, ring_off, ring_ext, geom_off, ga, ga + len(idx), int(_area_kernels._MAX_WORK)
        )
        out[idx] = area
        geos = np.sort(np.concatenate([geos, idx[status != 0]]))
    if len(geos):
        out[geos] = shapely.area(shapely.intersection(a[geos], b[geos]))
    return out


def pair_iou(inter: F64Array, area_ref: F64Array, area_pred: F64Array) -> F64Array:
    """``inter / (area_ref + area_pred - inter)`` clipped to [0, 1].

    Examples
    --------
    >>> pair_iou(np.array([1.0]), np.array([2.0]), np.array([2.0]))
    array([0.33333333])
    """
    union = area_ref + area_pred - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = np.where(union > 0.0, inter / union, 0.0)
    return np.clip(iou, 0.0, 1.0)


def candidate_pairs(ref: PreparedLayer, pred: PreparedLayer) -> PairTable:
    """Every (reference, prediction) pair with a positive intersection area.

    Parameters
    ----------
    ref, pred : PreparedLayer
        Both in the same equal-area CRS.

    Returns
    -------
    PairTable
        Sorted by reference position, then prediction position.
    """
    if len(ref) == 0 or len(pred) == 0:
        return PairTable.empty()
    # Pairs whose boxes meet, with no intersects predicate: two polygons whose boxes meet
    # but which are disjoint (half a percent of such pairs on fields) have an
    # intersection area of exactly 0 and are dropped below with the touching ones, and
    # GEOS's predicate on every pair cost more than the areas of those few.
    i_ref, i_pred = meeting_boxes(shapely.bounds(ref.geoms_ea), shapely.bounds(pred.geoms_ea))
    rings = PairRings(ref.rings_ea, i_ref, pred.rings_ea, i_pred) if ref.rings_ea is not None and pred.rings_ea is not None else None
    inter = intersection_areas(ref.geoms_ea[i_ref], pred.geoms_ea[i_pred], rings=rings)
    positive = inter > 0.0
    i_ref, i_pred, inter = i_ref[positive], i_pred[positive], inter[positive]
    iou = pair_iou(inter, ref.area_m2[i_ref], pred.area_m2[i_pred])
    ref_pos, pred_pos = ref.positions[i_ref], pred.positions[i_pred]
    order = np.lexsort((pred_pos, ref_pos))
    return PairTable(ref_pos[order], pred_pos[order], inter[order], iou[order])

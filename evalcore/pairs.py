"""Candidate pairs and their overlap (SPEC section 3).

A candidate pair is a (reference, prediction) whose geometries intersect with a
positive intersection area in the equal-area CRS. Pairs are identified by the input
positions of both sides, so tables from different partitions concatenate.
"""

from __future__ import annotations

import numpy as np
import shapely

from evalcore import _area_kernels
from evalcore._typing import F64Array, GeomArray, IdArray
from evalcore.layer import PreparedLayer
from evalcore.pairtable import PairTable
from evalcore.rings import flatten_rings

__all__ = ["candidate_pairs", "intersection_areas", "pair_iou"]


def intersection_areas(ref_geoms: GeomArray, pred_geoms: GeomArray) -> F64Array:
    """Area of ``ref_geoms[i] ∩ pred_geoms[i]`` for aligned arrays, in CRS units squared.

    Examples
    --------
    >>> from shapely.geometry import box
    >>> intersection_areas(np.array([box(0, 0, 2, 1)]), np.array([box(1, 0, 3, 1)]))
    array([1.])
    """
    rows = np.arange(len(ref_geoms), dtype=np.int64)
    return _pair_intersection_areas(np.asarray(ref_geoms, dtype=object), np.asarray(pred_geoms, dtype=object), rows, rows)


def _pair_intersection_areas(a: GeomArray, b: GeomArray, ia: IdArray, ib: IdArray) -> F64Array:
    """Area of ``a[ia[k]] ∩ b[ib[k]]`` for every pair ``k``, in CRS units squared.

    The pairs name their geometries by index, so that a geometry in several pairs is
    flattened for the kernel once (:func:`_overlap_areas`), not once per pair; the areas
    are those :func:`intersection_areas` gives for the aligned arrays ``a[ia]``, ``b[ib]``.
    """
    if len(ia) == 0:
        return np.empty(0, dtype=np.float64)
    # When one polygon covers the other the intersection is the smaller one: take its
    # area as it is, so a polygon against itself has IoU exactly 1, and skip the overlay.
    shapely.prepare(a)
    shapely.prepare(b)
    ga, gb = a[ia], b[ib]
    pred_in_ref = shapely.covers(ga, gb)
    ref_in_pred = ~pred_in_ref & shapely.covers(gb, ga)
    rest = ~(pred_in_ref | ref_in_pred)
    inter = np.empty(len(ia), dtype=np.float64)
    inter[pred_in_ref] = shapely.area(gb[pred_in_ref])
    inter[ref_in_pred] = shapely.area(ga[ref_in_pred])
    inter[rest] = _overlap_areas(a, b, ia[rest], ib[rest])
    return inter


_POLYGONAL = (int(shapely.GeometryType.POLYGON), int(shapely.GeometryType.MULTIPOLYGON))


def _overlap_areas(a: GeomArray, b: GeomArray, ia: IdArray, ib: IdArray) -> F64Array:
    """Area of ``a[ia[k]] ∩ b[ib[k]]`` by the boundary-integral kernel, GEOS for the pairs it declines.

    The kernel (:mod:`evalcore._area_kernels`) is exact on shared vertices and edges and
    declines near-degenerate pairs (a vertex within 1e-6 CRS units of the other
    boundary without lying on it) and very large ones; those go to
    ``shapely.intersection``, as do pairs with a geometry that is not a (multi)polygon.
    Missing and empty geometries give 0. Each pair is computed on its own, so the result
    does not depend on batching; each geometry the kernel reads is flattened once,
    however many pairs it is in.
    """
    out = np.zeros(len(ia), dtype=np.float64)
    if len(ia) == 0:
        return out
    ua, ub = np.unique(ia), np.unique(ib)  # the geometries the pairs use, each once
    present_a = ~(shapely.is_missing(a[ua]) | shapely.is_empty(a[ua]))
    present_b = ~(shapely.is_missing(b[ub]) | shapely.is_empty(b[ub]))
    polygonal_a = np.isin(shapely.get_type_id(a[ua]), _POLYGONAL)
    polygonal_b = np.isin(shapely.get_type_id(b[ub]), _POLYGONAL)
    ka, kb = np.searchsorted(ua, ia), np.searchsorted(ub, ib)  # each pair's geometries among ua, ub
    some = present_a[ka] & present_b[kb]
    polygonal = polygonal_a[ka] & polygonal_b[kb]
    idx = np.flatnonzero(some & polygonal)
    geos = np.flatnonzero(some & ~polygonal)
    if len(idx):
        # Only the geometries of kernel pairs are flattened: A's first, then B's.
        fa, fb = np.unique(ka[idx]), np.unique(kb[idx])
        x, y, ring_off, ring_ext, geom_off = flatten_rings(np.concatenate([a[ua[fa]], b[ub[fb]]]))
        area, status = _area_kernels._intersection_areas(
            x, y, ring_off, ring_ext, geom_off,
            np.searchsorted(fa, ka[idx]).astype(np.int64), (len(fa) + np.searchsorted(fb, kb[idx])).astype(np.int64),
            int(_area_kernels._MAX_WORK),
        )
        out[idx] = area
        geos = np.sort(np.concatenate([geos, idx[status != 0]]))
    if len(geos):
        out[geos] = shapely.area(shapely.intersection(a[ia[geos]], b[ib[geos]]))
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
    tree = shapely.STRtree(pred.geoms_ea)
    i_ref, i_pred = tree.query(ref.geoms_ea, predicate="intersects")
    inter = _pair_intersection_areas(ref.geoms_ea, pred.geoms_ea, i_ref.astype(np.int64), i_pred.astype(np.int64))
    positive = inter > 0.0
    i_ref, i_pred, inter = i_ref[positive], i_pred[positive], inter[positive]
    iou = pair_iou(inter, ref.area_m2[i_ref], pred.area_m2[i_pred])
    ref_pos, pred_pos = ref.positions[i_ref], pred.positions[i_pred]
    order = np.lexsort((pred_pos, ref_pos))
    return PairTable(ref_pos[order], pred_pos[order], inter[order], iou[order])

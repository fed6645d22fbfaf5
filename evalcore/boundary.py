"""Boundary metrics: distances of matched pairs and boundary lengths within a tolerance.

This module prepares flat coordinate arrays with shapely's vectorised functions and
calls the numba kernels of :mod:`evalcore._kernels` once per batch; it never loops over
vertices in Python. The algorithms and their error bounds are described in
``docs/boundary.md``; the definitions are SPEC sections 2.4 and 4.

Public functions
----------------
pair_boundary_distances
    Hausdorff and symmetric mean distance of geometry pairs in one metric CRS.
matched_pair_distances
    The same for rows of two :class:`~evalcore.layer.PreparedLayer`, measured in the
    reference field's UTM zone.
pair_boundary_iou
    Boundary IoU (Cheng et al. 2021) of geometry pairs in one metric CRS.
pairs_in_reference_zone
    The geometries of pairs of rows of two prepared layers, in the reference field's UTM zone.
boundary_within_tolerance
    Exact boundary length of each geometry within a tolerance of other boundaries.
tolerance_lengths
    The same for every row of a prepared layer, in the row's home UTM zone.
tolerance_reach
    How far candidate selection for tolerance lengths reaches (for halos).
boundary_spacing
    The sample spacing of each boundary.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import shapely
from pyproj import CRS

from evalcore import _kernels
from evalcore._typing import F64Array, GeomArray, IdArray
from evalcore.arrays import meeting_boxes
from evalcore.config import BOUNDARY_MAX_SAMPLES, BOUNDARY_SAMPLE_SPACING_M
from evalcore.crs import WGS84, max_scale, to_utm, transform_xy, utm_crs
from evalcore.layer import PreparedLayer, home_geometries, utm_rings
from evalcore.rings import Rings, flatten_rings
from evalcore.threads import map_slices

__all__ = [
    "candidate_boxes",
    "pair_boundary_distances",
    "matched_pair_distances",
    "inner_band",
    "pair_boundary_iou",
    "pairs_in_reference_zone",
    "boundary_within_tolerance",
    "tolerance_lengths",
    "tolerance_reach",
    "boundary_spacing",
]

_POLYGONAL = (int(shapely.GeometryType.POLYGON), int(shapely.GeometryType.MULTIPOLYGON))

SAMPLES_PER_CHUNK = 16
"""Consecutive samples that share one candidate list in the distance kernel (tuned)."""

PAIRS_PER_BATCH = 16_384
"""Pairs flattened and sent to the distance kernel at once (bounds the memory used)."""

PAIRS_PER_THREAD = 2_048
"""Fewer pairs than this are not given a thread of their own (:func:`evalcore.threads.map_slices`)."""

GRID_CELL_CAP_M = 256.0
"""Upper bound of the segment-length part of the grid cell side, metres (tuned on fields)."""

_CANDIDATE_SCALE_SAFETY = 2.0
"""Factor on the equal-area CRS's largest local scale when selecting tolerance candidates."""

_CANDIDATE_SIZE_MARGIN = 0.02
"""Extra candidate margin per metre of polygon size (covers straight edges in the source
CRS becoming chords in UTM but curves in the equal-area CRS)."""

_CANDIDATE_MARGIN_M = 1.0
"""Fixed extra candidate margin, metres."""


# ---------------------------------------------------------------------------
# Flat coordinate arrays
# ---------------------------------------------------------------------------


def _as_geoms(geoms: object, argument: str) -> GeomArray:
    """A 1-D object array of geometries; raise when one is not (Multi)Polygon."""
    arr = np.asarray(geoms, dtype=object)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"`{argument}` must be a 1-D array of geometries, but got shape {arr.shape}.")
    present = ~shapely.is_missing(arr)
    if present.any():
        kinds = shapely.get_type_id(arr[present])
        bad = ~np.isin(kinds, _POLYGONAL)
        if bad.any():
            row = int(np.flatnonzero(present)[np.argmax(bad)])
            raise ValueError(
                f"`{argument}` must hold Polygons or MultiPolygons, but position {row} is a "
                f"{arr[row].geom_type}; keep only polygonal parts "
                "(evalcore.polygons.repair_polygonal)."
            )
    return arr


def _flatten(geoms: GeomArray) -> tuple[F64Array, F64Array, IdArray, IdArray]:
    """Ring coordinates of every geometry, with ring and geometry offsets (:func:`evalcore.rings.flatten_rings`).

    Missing and empty geometries get no ring.

    Returns
    -------
    x, y : float64 (n_coords,)
    ring_off : int64 (n_rings + 1,)
    geom_off : int64 (len(geoms) + 1,)
    """
    x, y, ring_off, _, geom_off = flatten_rings(geoms)
    return x, y, ring_off, geom_off


def _check_spacing(spacing_m: float | None) -> None:
    if spacing_m is None:
        return
    if not (isinstance(spacing_m, (int, float, np.floating, np.integer)) and math.isfinite(spacing_m) and spacing_m > 0):
        raise ValueError(
            f"Expected argument `spacing_m` to be a finite number of metres > 0 or None, but got {spacing_m!r}."
        )


def _check_tolerance(tolerance_m: float) -> None:
    if not (
        isinstance(tolerance_m, (int, float, np.floating, np.integer))
        and math.isfinite(tolerance_m)
        and tolerance_m >= 0
    ):
        raise ValueError(f"Expected argument `tolerance_m` to be a finite number of metres >= 0, but got {tolerance_m!r}.")


def boundary_spacing(perimeter_m: F64Array, spacing_m: float | None) -> F64Array:
    """Sample spacing of each boundary, metres.

    ``spacing_m`` itself, or with ``None`` ``max(1 m, perimeter / 1000)``
    (:data:`~evalcore.config.BOUNDARY_SAMPLE_SPACING_M`,
    :data:`~evalcore.config.BOUNDARY_MAX_SAMPLES`).

    Examples
    --------
    >>> boundary_spacing(np.array([400.0, 4000.0]), None).tolist()
    [1.0, 4.0]
    >>> boundary_spacing(np.array([400.0]), 0.5).tolist()
    [0.5]
    """
    perimeter_m = np.asarray(perimeter_m, dtype=np.float64)
    if spacing_m is None:
        return np.maximum(BOUNDARY_SAMPLE_SPACING_M, perimeter_m / BOUNDARY_MAX_SAMPLES)
    return np.full(perimeter_m.shape, float(spacing_m), dtype=np.float64)


# ---------------------------------------------------------------------------
# Distances of matched pairs
# ---------------------------------------------------------------------------


def pair_boundary_distances(
    ref_geoms: GeomArray, pred_geoms: GeomArray, spacing_m: float | None
) -> tuple[F64Array, F64Array, F64Array]:
    """Boundary distances of matched pairs, in one metric CRS.

    Each boundary (every ring of every part) is sampled as ``shapely.segmentize`` would
    densify it at spacing Δ, with trapezoidal weights along each ring. The exact
    distance from each sample to the other boundary gives a directed integral ``I`` and
    a directed maximum ``M`` per side (SPEC section 4).

    Parameters
    ----------
    ref_geoms, pred_geoms : ndarray of shapely (Multi)Polygons, shape (n,)
        ``ref_geoms[i]`` and ``pred_geoms[i]`` form pair ``i``; both in the same
        projected CRS in metres (the reference field's UTM zone).
    spacing_m : float or None
        Sample spacing Δ in metres; ``None`` gives ``max(1 m, perimeter / 1000)`` per
        boundary, the perimeter being that polygon's total boundary length.

    Returns
    -------
    hausdorff_m : float64 (n,)
        ``max(M_ref, M_pred)``, metres; underestimates the exact value by at most Δ/2.
    mean_distance_m : float64 (n,)
        ``(I_ref + I_pred) / (|∂ref| + |∂pred|)``, metres; within Δ/4 of the exact value.
    spacing_used_m : float64 (n,)
        The larger of the two boundaries' spacings, metres.

    All three are NaN where either geometry is missing or empty.

    Examples
    --------
    >>> from shapely import box
    >>> [v.tolist() for v in pair_boundary_distances(np.array([box(0, 0, 10, 10)]), np.array([box(2, 0, 12, 10)]), 1.0)]
    [[2.0], [1.0], [1.0]]
    >>> [v.tolist() for v in pair_boundary_distances(np.array([None]), np.array([box(0, 0, 1, 1)]), 1.0)]
    [[nan], [nan], [nan]]
    """
    ref = _as_geoms(ref_geoms, "ref_geoms")
    pred = _as_geoms(pred_geoms, "pred_geoms")
    if len(ref) != len(pred):
        raise ValueError(
            f"`ref_geoms` and `pred_geoms` must have the same length, but got {len(ref)} and {len(pred)}."
        )
    _check_spacing(spacing_m)
    n = len(ref)
    hausdorff = np.full(n, np.nan)
    mean = np.full(n, np.nan)
    spacing_used = np.full(n, np.nan)
    return _pair_distances_of_rings(Rings.of(ref), Rings.of(pred), shapely.length(ref), shapely.length(pred), spacing_m)


def _pair_distances_of_rings(
    ref: Rings, pred: Rings, ref_length_m: F64Array, pred_length_m: F64Array, spacing_m: float | None
) -> tuple[F64Array, F64Array, F64Array]:
    """:func:`pair_boundary_distances` of pairs given as flat rings and their boundary lengths.

    ``ref_length_m`` and ``pred_length_m`` (GEOS's length of each geometry, metres) set
    the spacing when ``spacing_m`` is None and are not read otherwise. A pair with a
    geometry without rings (missing or empty) gets NaN.
    """
    n = len(ref)
    hausdorff = np.full(n, np.nan)
    mean = np.full(n, np.nan)
    spacing_used = np.full(n, np.nan)
    rows = np.flatnonzero((np.diff(ref.geom_off) > 0) & (np.diff(pred.geom_off) > 0))

    def measure(first: int, stop: int) -> None:
        # Each pair's distances are its own: slices on threads give the same bits as one loop.
        for start in range(first, stop, PAIRS_PER_BATCH):
            batch = rows[start : min(start + PAIRS_PER_BATCH, stop)]
            hausdorff[batch], mean[batch], spacing_used[batch] = _pair_distances_batch(
                ref.take(batch), pred.take(batch), ref_length_m[batch], pred_length_m[batch], spacing_m
            )

    map_slices(measure, len(rows), PAIRS_PER_THREAD)
    return hausdorff, mean, spacing_used


def _pair_distances_batch(
    ref: Rings, pred: Rings, ref_length_m: F64Array, pred_length_m: F64Array, spacing_m: float | None, *,
    chunk: int = SAMPLES_PER_CHUNK, prune: bool = True,
) -> tuple[F64Array, F64Array, F64Array]:
    """One kernel call for pairs of nonempty geometries (flat rings, lengths in metres)."""
    n = len(ref)
    rings = Rings.concat([ref, pred])
    spacing = boundary_spacing(np.concatenate([ref_length_m, pred_length_m]), spacing_m)
    geom_a = np.arange(n, dtype=np.int64)
    geom_b = geom_a + n
    hausdorff, integral_a, length_a, integral_b, length_b = _kernels._pair_distances(
        rings.x, rings.y, rings.ring_off, rings.geom_off, spacing, geom_a, geom_b, int(chunk), bool(prune)
    )
    mean = (integral_a + integral_b) / (length_a + length_b)
    return hausdorff, mean, np.maximum(spacing[:n], spacing[n:])


def matched_pair_distances(
    ref: PreparedLayer, pred: PreparedLayer, i_ref: IdArray, i_pred: IdArray, spacing_m: float | None
) -> tuple[F64Array, F64Array, F64Array]:
    """Boundary distances of matched pairs given as rows of two prepared layers.

    Each pair is measured in the reference field's home UTM zone: ``ref.geoms_utm[i_ref]``
    against ``pred.geoms_source[i_pred]`` reprojected from ``pred.crs`` into
    ``ref.utm_epsg[i_ref]`` (SPEC section 2.4).

    Parameters
    ----------
    ref, pred : PreparedLayer
    i_ref, i_pred : int64 (n,)
        Local row indices of the pairs.
    spacing_m : float or None
        As in :func:`pair_boundary_distances`.

    Returns
    -------
    hausdorff_m, mean_distance_m, spacing_used_m : float64 (n,)
        As in :func:`pair_boundary_distances`, metres.
    """
    i_ref = np.asarray(i_ref, dtype=np.int64)
    i_pred = np.asarray(i_pred, dtype=np.int64)
    if i_ref.shape != i_pred.shape or i_ref.ndim != 1:
        raise ValueError(
            f"`i_ref` and `i_pred` must be 1-D and of the same length, but got shapes {i_ref.shape} and {i_pred.shape}."
        )
    _check_spacing(spacing_m)
    if len(i_ref) == 0:
        empty = np.empty(0, dtype=np.float64)
        return empty, empty.copy(), empty.copy()
    zone = ref.utm_epsg[i_ref]
    ref_rings = utm_rings(ref, i_ref)
    ref_length = ref.perimeter_m[i_ref]  # GEOS's length of ref.geoms_utm, made when preparing
    # A prediction whose home zone is the reference's is already there (pred.geoms_utm is
    # pred.geoms_source reprojected into that zone by the same transformer); the others'
    # source coordinates are reprojected, flat, as to_utm would reproject them.
    at_home = pred.utm_epsg[i_pred] == zone
    pred_length = pred.perimeter_m[i_pred].copy()
    if at_home.all():
        pred_rings = utm_rings(pred, i_pred)
    else:
        home, foreign = np.flatnonzero(at_home), np.flatnonzero(~at_home)
        parts, order = [utm_rings(pred, i_pred[home])], [home]
        for code in np.unique(zone[foreign]):
            rows = foreign[zone[foreign] == code]
            moved = _source_rings_in_zone(pred, i_pred[rows], int(code))
            parts.append(moved)
            order.append(rows)
            # The spacing follows the boundary's length in the reference's zone (the bits
            # shapely.length gives, Rings.lengths).
            pred_length[rows] = moved.lengths()
        where = np.empty(len(i_pred), dtype=np.int64)
        where[np.concatenate(order)] = np.arange(len(i_pred))
        pred_rings = Rings.concat(parts).take(where)
    return _pair_distances_of_rings(ref_rings, pred_rings, ref_length, pred_length, spacing_m)


def pairs_in_reference_zone(ref: PreparedLayer, pred: PreparedLayer, i_ref: IdArray, i_pred: IdArray) -> tuple[GeomArray, GeomArray]:
    """The pairs' geometries in each reference field's home UTM zone (SPEC section 2.4).

    ``ref.geoms_utm[i_ref]`` and ``pred.geoms_source[i_pred]`` reprojected into
    ``ref.utm_epsg[i_ref]``: what :func:`matched_pair_distances` measures, and what the
    pairs phase hands to both :func:`pair_boundary_distances` and :func:`pair_boundary_iou`.
    """
    ref_geoms = home_geometries(ref, i_ref)
    zone = ref.utm_epsg[i_ref]
    # A prediction whose home zone is the reference's is already there: pred.geoms_utm
    # is pred.geoms_source reprojected into that zone by the same transformer.
    at_home = pred.utm_epsg[i_pred] == zone
    pred_geoms = np.empty(len(i_pred), dtype=object)
    pred_geoms[at_home] = home_geometries(pred, i_pred[at_home])
    foreign = np.flatnonzero(~at_home)
    if len(foreign):
        pred_geoms[foreign] = to_utm(_source_geoms(pred, i_pred[foreign]), pred.crs, zone[foreign])
    return ref_geoms, pred_geoms


def _source_geoms(layer: PreparedLayer, rows: IdArray) -> GeomArray:
    """``layer.geoms_source[rows]``, refusing rows whose source geometry was not decoded.

    A prepared row always has a geometry; a missing one means the partition was read
    without its source column (:func:`evalcore.distributed.storage.read_partition`), and
    reprojecting nothing would silently drop a boundary from the measure.
    """
    geoms = layer.geoms_source[rows]
    missing = shapely.is_missing(geoms)
    if missing.any():
        first = int(layer.positions[np.asarray(rows)[missing][0]])
        raise ValueError(
            f"the {layer.name} layer's row at input position {first} (and {int(missing.sum()) - 1} more) must be "
            "reprojected from its source geometry, which was not read with its partition"
        )
    return geoms


# ---------------------------------------------------------------------------
# Boundary IoU (SPEC 6.11)
# ---------------------------------------------------------------------------

BAND_QUAD_SEGS = 16
"""Segments per quarter circle of the round joins of the inner band's negative buffer (SPEC 6.11)."""


def inner_band(geoms: GeomArray, width_m: float) -> GeomArray:
    """The inner band of each polygon: ``X`` minus ``buffer(X, -width_m)`` (round joins, 16 segments a quarter).

    Parameters
    ----------
    geoms : ndarray of shapely (Multi)Polygons, shape (n,)
        In a projected CRS in metres.
    width_m : float
        Band width d, metres (positive).

    Returns
    -------
    ndarray of shapely geometries, shape (n,)
        The band; the whole polygon where it is nowhere wider than ``2 d``; None where
        the input is missing.

    Examples
    --------
    >>> from shapely import box
    >>> shapely.area(inner_band(np.array([box(0, 0, 10, 10), None]), 1.0)).tolist()
    [36.0, nan]
    """
    geoms = _as_geoms(geoms, "geoms")
    core = shapely.buffer(geoms, -float(width_m), quad_segs=BAND_QUAD_SEGS, join_style="round")
    return shapely.difference(geoms, core)


def pair_boundary_iou(ref_geoms: GeomArray, pred_geoms: GeomArray, width_m: float) -> F64Array:
    """Boundary IoU of geometry pairs: ``|band(p) ∩ band(r)| / |band(p) ∪ band(r)|``.

    The union's area is ``|band(p)| + |band(r)| - |band(p) ∩ band(r)|``, as section 3
    takes IoU's; the ratio is clipped to [0, 1].

    Parameters
    ----------
    ref_geoms, pred_geoms : ndarray of shapely (Multi)Polygons, shape (n,)
        ``ref_geoms[i]`` and ``pred_geoms[i]`` form pair ``i``; both in the same
        projected CRS in metres (the reference field's UTM zone).
    width_m : float
        Band width d, metres (positive, finite).

    Returns
    -------
    ndarray of float64, shape (n,)
        Dimensionless; NaN where a geometry is missing or both bands are empty.

    Examples
    --------
    >>> from shapely import box
    >>> pair_boundary_iou(np.array([box(0, 0, 10, 10)]), np.array([box(2, 0, 12, 10)]), 1.0).tolist()  # 16 / 56
    [0.2857142857142857]
    >>> pair_boundary_iou(np.array([None]), np.array([box(0, 0, 1, 1)]), 1.0).tolist()
    [nan]
    """
    ref = _as_geoms(ref_geoms, "ref_geoms")
    pred = _as_geoms(pred_geoms, "pred_geoms")
    if len(ref) != len(pred):
        raise ValueError(
            f"`ref_geoms` and `pred_geoms` must have the same length, but got {len(ref)} and {len(pred)}."
        )
    width = float(width_m)
    if not math.isfinite(width) or width <= 0.0:
        raise ValueError(f"`width_m` must be a positive finite number of metres, but got {width_m!r}.")
    band_ref = inner_band(ref, width)
    band_pred = inner_band(pred, width)
    inter = shapely.area(shapely.intersection(band_ref, band_pred))
    union = shapely.area(band_ref) + shapely.area(band_pred) - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = np.where(union > 0.0, inter / np.where(union > 0.0, union, 1.0), np.nan)
    return np.clip(iou, 0.0, 1.0)


# ---------------------------------------------------------------------------
# Boundary length within a tolerance
# ---------------------------------------------------------------------------


def _grid_cell(
    x: F64Array, y: F64Array, ring_off: IdArray, ox: F64Array, oy: F64Array, o_ring_off: IdArray, tolerance_m: float
) -> float:
    """Cell side of the kernel's uniform grid, metres (affects speed only, never results).

    ``max(4 tol, min(2 (mean query + mean other segment length), GRID_CELL_CAP_M))``:
    cells a few segments wide, so that registering segments and looking cells up stay
    cheap while a cell still holds few segments. Never so small that cell keys overflow.
    """
    seg = _kernels._mean_segment_length(x, y, ring_off) + _kernels._mean_segment_length(ox, oy, o_ring_off)
    extent = max(float(np.ptp(x)), float(np.ptp(y)), 1.0) + 4 * tolerance_m
    cell = max(4.0 * tolerance_m, min(2.0 * seg, GRID_CELL_CAP_M), extent / 2.0**26, 1e-6)
    return float(cell)


def boundary_within_tolerance(geoms: GeomArray, other_geoms: GeomArray, tolerance_m: float) -> F64Array:
    """Exact length of each boundary lying within a tolerance of the other boundaries.

    For each ``geoms[i]``: the length of its boundary (all rings, all parts) within
    ``tolerance_m`` of the union of the boundaries of all ``other_geoms``, i.e. inside
    the union of the capsules (segments swept by a disc of radius ``tolerance_m``). It is
    computed in closed form per pair of segments, with no polygonal buffer and no
    sampling (SPEC section 4).

    Parameters
    ----------
    geoms : ndarray of shapely (Multi)Polygons, shape (n,)
    other_geoms : ndarray of shapely (Multi)Polygons, shape (m,)
        Missing entries are ignored.
    tolerance_m : float
        Tolerance, metres (>= 0). Everything is in the same projected CRS in metres.

    Returns
    -------
    float64 (n,)
        Metres; NaN where ``geoms[i]`` is missing, 0.0 where it is empty.

    Examples
    --------
    >>> from shapely import box
    >>> boundary_within_tolerance(np.array([box(0, 0, 10, 10), None]), np.array([box(10, 0, 20, 10)]), 1.0)
    array([12., nan])
    """
    arr = _as_geoms(geoms, "geoms")
    other = _as_geoms(other_geoms, "other_geoms")
    _check_tolerance(tolerance_m)
    other = other[~shapely.is_missing(other)]
    ox, oy, o_ring_off, _ = _flatten(other)
    out = np.full(len(arr), np.nan)
    present = np.flatnonzero(~shapely.is_missing(arr))
    out[present] = _within_tolerance_flat(Rings.of(arr[present]), ox, oy, o_ring_off, float(tolerance_m))
    return out


def _within_tolerance_flat(
    rings: Rings, ox: F64Array, oy: F64Array, o_ring_off: IdArray, tolerance_m: float
) -> F64Array:
    """:func:`boundary_within_tolerance` of flat rings (0.0 for a geometry without rings)
    against other boundaries already flat."""
    out = np.zeros(len(rings), dtype=np.float64)
    if len(rings) == 0 or len(ox) == 0 or len(rings.x) == 0:
        return out
    qx, qy, q_ring_off, q_geom_off = rings.x, rings.y, rings.ring_off, rings.geom_off
    cell = _grid_cell(qx, qy, q_ring_off, ox, oy, o_ring_off, tolerance_m)
    out[:] = _kernels._boundary_within_tolerance(
        qx, qy, q_ring_off, q_geom_off, ox, oy, o_ring_off, tolerance_m, cell
    )
    return out


def _tolerance_candidates(layer: PreparedLayer, other: PreparedLayer, tolerance_m: float) -> tuple[IdArray, IdArray]:
    """Conservative candidate pairs ``(i_layer, i_other)`` whose boundaries may come within the tolerance.

    Boxes of the equal-area geometries are grown by ``2 * s * tol`` (``s``: the largest
    local scale of the equal-area CRS, so the tolerance is never shrunk) plus a margin of
    1 m + 2 % of the polygon's size (straight source edges are chords in UTM but curves in
    the equal-area CRS), and pairs of intersecting boxes are kept.
    """
    scale = max_scale(layer.equal_area_crs, layer.lon, layer.lat)
    bounds = candidate_boxes(layer)
    size = np.hypot(bounds[:, 2] - bounds[:, 0], bounds[:, 3] - bounds[:, 1])
    grow = _CANDIDATE_SCALE_SAFETY * scale * tolerance_m + _CANDIDATE_SIZE_MARGIN * size + _CANDIDATE_MARGIN_M
    o_bounds = candidate_boxes(other)
    o_size = np.hypot(o_bounds[:, 2] - o_bounds[:, 0], o_bounds[:, 3] - o_bounds[:, 1])
    o_grow = _CANDIDATE_SIZE_MARGIN * o_size
    return meeting_boxes(bounds - grow[:, None] * _BOX_SIGNS, o_bounds - o_grow[:, None] * _BOX_SIGNS)


_BOX_SIGNS = np.array([1.0, 1.0, -1.0, -1.0])
"""``box - grow * _BOX_SIGNS`` grows a (minx, miny, maxx, maxy) box by ``grow`` on every side."""


def tolerance_lengths(layer: PreparedLayer, other: PreparedLayer, tolerance_m: float) -> F64Array:
    """Boundary length of each row of ``layer`` within the tolerance of ``other``'s boundaries.

    Each row is measured in its home UTM zone (``layer.geoms_utm``) against the
    boundaries of the polygons of ``other`` that may come within the tolerance,
    reprojected from ``other.geoms_source`` into that zone (SPEC section 2.4). Work is
    grouped by zone; candidates are selected conservatively on the equal-area geometry
    (see ``docs/boundary.md``) and only they are reprojected.

    Parameters
    ----------
    layer, other : PreparedLayer
    tolerance_m : float
        Tolerance, metres (>= 0).

    Returns
    -------
    float64 (len(layer),)
        Metres. Sum over ``layer.perimeter_m`` of these, divided by the total perimeter,
        is boundary recall (``layer`` = reference) or precision (``layer`` = predicted).
    """
    _check_tolerance(tolerance_m)
    out = np.zeros(len(layer), dtype=np.float64)
    if len(layer) == 0 or len(other) == 0:
        return out
    i_layer, i_other = _tolerance_candidates(layer, other, float(tolerance_m))
    zone_of_pair = layer.utm_epsg[i_layer]
    for code in np.unique(layer.utm_epsg):
        rows = np.flatnonzero(layer.utm_epsg == code)
        cand = np.unique(i_other[zone_of_pair == code])
        if len(cand) == 0:
            continue
        ox, oy, o_ring_off = _other_in_zone(other, cand, int(code))
        within = _within_tolerance_flat(utm_rings(layer, rows), ox, oy, o_ring_off, float(tolerance_m))
        # The kernel sums segment by segment, GEOS sums the perimeter its own way: a fully
        # covered boundary can come out an ulp longer than its perimeter.
        out[rows] = np.minimum(within, layer.perimeter_m[rows])
    return out


def _other_in_zone(other: PreparedLayer, rows: IdArray, code: int) -> tuple[F64Array, F64Array, IdArray]:
    """Flat ring coordinates of ``other``'s rows in UTM zone ``code``.

    Rows whose home zone is ``code`` are taken from ``other.geoms_utm`` (the source
    geometry reprojected into that zone by the same transformer, so the same numbers);
    the others' source coordinates are reprojected, flat, without building geometries.
    """
    home = other.utm_epsg[rows] == code
    rings = utm_rings(other, rows[home])
    if not home.all():
        rings = Rings.concat([rings, _source_rings_in_zone(other, rows[~home], code)])
    return rings.x, rings.y, rings.ring_off


def _source_rings_in_zone(layer: PreparedLayer, rows: IdArray, code: int) -> Rings:
    """The source geometry of ``layer``'s rows reprojected into UTM zone ``code``, as flat
    rings: the coordinates :func:`evalcore.crs.to_utm` would give, without its geometries."""
    source = Rings.of(_source_geoms(layer, rows))
    x, y = transform_xy(source.x, source.y, layer.crs, utm_crs(int(code)))
    return replace(source, x=x, y=y)


def tolerance_reach(layer: PreparedLayer, tolerance_m: float) -> F64Array:
    """How far (equal-area CRS units) each row's box grows when selecting tolerance candidates.

    The growth of :func:`_tolerance_candidates` on the query side plus the other side's
    size margin, so that a row whose box, grown by its own reach, meets another row's
    box grown by that row's reach is a candidate pair whichever layer is the query.
    """
    scale = max_scale(layer.equal_area_crs, layer.lon, layer.lat)
    bounds = candidate_boxes(layer)
    size = np.hypot(bounds[:, 2] - bounds[:, 0], bounds[:, 3] - bounds[:, 1])
    return _CANDIDATE_SCALE_SAFETY * scale * tolerance_m + 2.0 * _CANDIDATE_SIZE_MARGIN * size + _CANDIDATE_MARGIN_M


def candidate_boxes(layer: PreparedLayer) -> F64Array:
    """Equal-area boxes that hold each row's measured boundary, shape (n, 4).

    The union of the equal-area geometry's bounds and the equal-area image of the
    source geometry's box corners: the repair after reprojection can drop a collapsed
    sliver that the UTM geometry (which is what gets measured) still has. A layer that
    carries them (``layer.candidate_box``, read back with a prepared partition) gives
    those, made by this function when the partition was prepared.
    """
    if layer.candidate_box is not None:
        return layer.candidate_box
    bounds = shapely.bounds(layer.geoms_ea)
    if len(layer) == 0 or layer.crs is None:
        return bounds
    src = shapely.bounds(layer.geoms_source)
    x, y = transform_xy(src[:, [0, 2, 0, 2]].ravel(), src[:, [1, 1, 3, 3]].ravel(), layer.crs, layer.equal_area_crs)
    x, y = x.reshape(-1, 4), y.reshape(-1, 4)
    ok = np.isfinite(x).all(axis=1) & np.isfinite(y).all(axis=1)
    out = bounds.copy()
    out[ok, 0] = np.minimum(bounds[ok, 0], x[ok].min(axis=1))
    out[ok, 1] = np.minimum(bounds[ok, 1], y[ok].min(axis=1))
    out[ok, 2] = np.maximum(bounds[ok, 2], x[ok].max(axis=1))
    out[ok, 3] = np.maximum(bounds[ok, 3], y[ok].max(axis=1))
    return out

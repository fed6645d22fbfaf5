"""Predictions: each field's outcome, merges, the predicted geometries and their scores.

The outcomes follow :data:`~evalcore.synth.constants.ERROR_MIX`, independent or
modulated by a smooth random field ("Clustered errors" in :mod:`evalcore.synth`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import shapely

from evalcore._typing import F64Array, GeomArray, IdArray
from evalcore.synth.constants import (
    _BAD_PRED,
    _BAD_SHAPE,
    _CHUNK_ITEMS,
    _CLUSTERED_OUTCOMES,
    _DENSIFY_M,
    _DILATE_ERODE,
    _FIELD_FEATURES,
    _FP_EMPTY,
    _FP_PARTIAL,
    _GOOD,
    _MERGE,
    _MERGE_MAX_GAP_M,
    _MERGE_PARTNER,
    _OUTCOME_NAMES,
    _SPLIT,
    ERROR_MIX,
)
from evalcore.synth.geometry import _bad_geoms, _item_geoms, _offset, _polygonal, _scale_about_centroid
from evalcore.synth.layout import _Layout, _partial_fp_reach, _place_partial_fps
from evalcore.synth.shapes import _make_rings, _Rings, _sample_partial_fp_shapes, _Shapes


# Kinds of predictions (for scores): the outcome codes, then these.
_PRED_FP_PARTIAL, _PRED_FP_FREE, _PRED_BAD = 10, 11, 12
_SCORE_BETA = {
    _GOOD: (8.0, 2.0),
    _DILATE_ERODE: (6.0, 3.0),
    _MERGE: (4.0, 4.0),
    _SPLIT: (3.0, 4.0),
    _BAD_SHAPE: (2.0, 5.0),
    _PRED_FP_PARTIAL: (2.0, 5.0),
    _PRED_FP_FREE: (1.5, 6.0),
    _PRED_BAD: (1.0, 1.0),
}
"""(a, b) of the Beta distribution of the scores of each kind of prediction."""


def _sample_outcomes(rng: np.random.Generator, n_ref: int, weight: F64Array | None = None) -> IdArray:
    """Outcome of each field other than a merge (codes _GOOD ... _BAD_SHAPE).

    The shares are those of ERROR_MIX without "merge", scaled up to sum to 1;
    :func:`_add_merges` later turns about ERROR_MIX["merge"] of the fields into merges.
    With ``weight`` (one per field, mean about 1, in [0, 2]) the shares of the
    outcomes in :data:`_CLUSTERED_OUTCOMES` are multiplied by the field's weight
    and "good" takes the rest (it stays >= 0.55).
    """
    names = _OUTCOME_NAMES[: _BAD_SHAPE + 1]
    p = np.array([ERROR_MIX[name] for name in names])
    if weight is None:
        return rng.choice(len(names), size=n_ref, p=p / p.sum()).astype(np.int64)
    shares = np.tile(p / p.sum(), (n_ref, 1))
    shares[:, _CLUSTERED_OUTCOMES] *= weight[:, None]
    shares[:, _GOOD] = 0.0
    shares[:, _GOOD] = 1.0 - shares.sum(axis=1)
    cumulative = np.cumsum(shares, axis=1)
    u = rng.random(n_ref)
    return np.minimum((u[:, None] >= cumulative).sum(axis=1), len(names) - 1).astype(np.int64)


def _check_correlation_km(value: object) -> float | None:
    """``error_correlation_km`` in metres (None stays None), or raise if it is not a positive number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"error_correlation_km must be a number or None, but got {value!r}.")
    km = float(value)
    if not (math.isfinite(km) and km > 0):
        raise ValueError(f"error_correlation_km must be finite and > 0, but got {value!r}.")
    return km * 1_000.0


def _random_field(
    rng: np.random.Generator,
    x: F64Array,
    y: F64Array,
    cluster: IdArray,
    n_clusters: int,
    correlation_m: float,
) -> F64Array:
    """A smooth stationary random field at the points ``(x, y)`` (cluster-local metres), mean 0, variance 1.

    A sum of :data:`_FIELD_FEATURES` random Fourier features, ``sqrt(2 / M) sum_m
    cos(w_m . p + phi_m)`` with ``w_m ~ N(0, 2 / L^2 I)`` and ``phi_m ~ U(0, 2 pi)``,
    whose covariance is ``exp(-(d / L)^2)`` at a distance ``d`` (so the correlation
    is 1/e at ``d = L``). Each cluster has a field of its own (clusters are more than
    100 km apart, so they are independent anyway). Nearly Gaussian (a sum of many
    independent terms) and symmetric about 0.
    """
    m = _FIELD_FEATURES
    omega = rng.normal(0.0, math.sqrt(2.0) / correlation_m, (n_clusters, m, 2))
    phase = rng.uniform(0.0, 2 * math.pi, (n_clusters, m))
    out = np.zeros(x.size)
    for c in range(n_clusters):
        members = np.flatnonzero(cluster == c)
        for first in range(0, members.size, _CHUNK_ITEMS):
            rows = members[first : first + _CHUNK_ITEMS]
            arg = np.outer(x[rows], omega[c, :, 0]) + np.outer(y[rows], omega[c, :, 1]) + phase[c]
            out[rows] = np.cos(arg).sum(axis=1) * math.sqrt(2.0 / m)
    return out


def _error_weight(field: F64Array) -> F64Array:
    """Multiplier of the error rates at each field: ``2 Phi(z)``, uniform on [0, 2] for a Gaussian field (mean 1)."""
    erf = np.frompyfunc(math.erf, 1, 1)
    return 1.0 + erf(field / math.sqrt(2.0)).astype(np.float64)


def _rehost_partial_fps(
    rng: np.random.Generator,
    rings: _Rings,
    layout: _Layout,
    bbox: F64Array,
    item_kind: IdArray,
    item_cluster: IdArray,
    field_shapes: _Shapes,
    fp_host: IdArray,
) -> tuple[_Rings, _Layout]:
    """Move the partial false positives onto new hosts ``fp_host``: new shapes, places and ranks.

    ``item_cluster`` and ``bbox`` are updated in place. A partial false positive is
    the last kind of shaped item, one unclosed 4-vertex ring each, so its vertices
    are the last ones of ``rings``; they are drawn anew (rectangles of 10-40 % of the
    new host's area at its angle) and the item is placed on the new host as
    :func:`_place_items` places it. Fields keep their rank; each partial false
    positive comes right after its host, as there.
    """
    partial = np.flatnonzero(item_kind == _FP_PARTIAL)
    if partial.size == 0:
        return rings, layout
    item_cluster[partial] = item_cluster[fp_host]
    new = _make_rings(rng, _sample_partial_fp_shapes(rng, field_shapes, fp_host))
    n_vertices = 4 * partial.size
    if new.x.size != n_vertices or rings.ring_item[-partial.size :].tolist() != partial.tolist():
        raise AssertionError("partial false positives are not the last single-ring items")
    x, y = rings.x.copy(), rings.y.copy()
    x[-n_vertices:], y[-n_vertices:] = new.x, new.y
    rings = dataclasses.replace(rings, x=x, y=y)
    bbox[partial] = np.column_stack(
        [new.x.reshape(-1, 4).min(axis=1), new.y.reshape(-1, 4).min(axis=1),
         new.x.reshape(-1, 4).max(axis=1), new.y.reshape(-1, 4).max(axis=1)]
    )  # fmt: skip
    tx, ty = layout.tx.copy(), layout.ty.copy()
    _place_partial_fps(tx, ty, bbox, partial, fp_host, _partial_fp_reach(rng, partial.size))
    anchor = np.arange(item_kind.size)
    anchor[partial] = fp_host
    is_partial = item_kind == _FP_PARTIAL
    rank = np.empty(item_kind.size, dtype=np.int64)
    rank[np.lexsort((is_partial, layout.rank[anchor]))] = np.arange(item_kind.size)
    return rings, dataclasses.replace(layout, tx=tx, ty=ty, rank=rank)


def _add_merges(
    rng: np.random.Generator,
    outcome: IdArray,
    ref_local: GeomArray,
    next_in_row: IdArray,
    fp_host: IdArray,
    weight: F64Array | None = None,
) -> IdArray:
    """Copy of ``outcome`` where about ERROR_MIX["merge"] of the fields are merged in pairs.

    A merge joins a field with the next field to its right in the same row, when
    they are at most _MERGE_MAX_GAP_M apart. Merges do not chain, and fields that
    host a partial false positive are not merged. With ``weight`` (one per field,
    mean about 1) a field starts a merge at its weight times the usual rate.
    """
    n = ref_local.size
    outcome = outcome.copy()
    free = np.ones(n, dtype=bool)
    free[fp_host] = False
    has_neighbour = (next_in_row >= 0) & (next_in_row < n) & free
    has_neighbour[has_neighbour] &= free[next_in_row[has_neighbour]]
    # Start a merge at rate merge/2 (two fields each), scaled up for the fields that
    # cannot start one and for the starts dropped below.
    p_start = min(1.0, 1.3 * ERROR_MIX["merge"] / 2 / max(float(has_neighbour.mean()) if n else 1.0, 1e-9))
    start = has_neighbour & (rng.random(n) < (p_start if weight is None else np.minimum(1.0, p_start * weight)))
    is_partner = np.zeros(n, dtype=bool)
    is_partner[next_in_row[start]] = True
    start &= ~is_partner
    i_first = np.flatnonzero(start)
    i_second = next_in_row[i_first]
    close = shapely.distance(ref_local[i_first], ref_local[i_second]) <= _MERGE_MAX_GAP_M
    outcome[i_first[close]] = _MERGE
    outcome[i_second[close]] = _MERGE_PARTNER
    return outcome


def _predict(
    rng: np.random.Generator,
    rings: _Rings,
    ref_local: GeomArray,
    outcome: IdArray,
    layout: _Layout,
    item_kind: IdArray,
    item_cluster: IdArray,
    shift_weight: F64Array | None = None,
) -> tuple[GeomArray, IdArray, IdArray, IdArray]:
    """Predictions in the cluster frame, metres.

    ``shift_weight`` (one per field) multiplies each field's own 0-2 m shift.

    Returns
    -------
    geoms : ndarray of object, shape (n_pred,)
    item : ndarray of int64, shape (n_pred,)
        Item each prediction comes from (a field, or the false positive or bad cell).
    sub : ndarray of int64, shape (n_pred,)
        0, or 1 for the second half of a split.
    kind : ndarray of int64, shape (n_pred,)
        Outcome code, or _PRED_FP_PARTIAL, _PRED_FP_FREE, _PRED_BAD.
    """
    n_ref = ref_local.size
    n_shaped = np.count_nonzero(item_kind <= _FP_PARTIAL)
    n_clusters = layout.extent.shape[0]
    # Registration shift: 0-3 m per cluster plus 0-2 m per field, random directions.
    cluster_angle, cluster_shift = rng.uniform(0, 2 * np.pi, n_clusters), rng.uniform(0, 3, n_clusters)
    field_angle, field_shift = rng.uniform(0, 2 * np.pi, n_ref), rng.uniform(0, 2, n_ref)
    if shift_weight is not None:
        field_shift = field_shift * shift_weight
    cluster = item_cluster[:n_ref]
    shift_x = cluster_shift[cluster] * np.cos(cluster_angle[cluster]) + field_shift * np.cos(field_angle)
    shift_y = cluster_shift[cluster] * np.sin(cluster_angle[cluster]) + field_shift * np.sin(field_angle)
    geoms, items, subs, kinds = [], [], [], []

    def add(g: GeomArray, i: IdArray, kind: int, sub: int = 0) -> None:
        geoms.append(g)
        items.append(i)
        subs.append(np.full(i.size, sub, dtype=np.int64))
        kinds.append(np.full(i.size, kind, dtype=np.int64))

    # Good: densified, vertex jitter, shifted.
    keep = np.zeros(n_shaped, dtype=bool)
    keep[:n_ref] = outcome == _GOOD
    sigma = np.zeros(n_shaped)
    sigma[:n_ref] = rng.uniform(0.5, 2.0, n_ref)
    tx, ty = layout.tx[:n_shaped].copy(), layout.ty[:n_shaped].copy()
    tx[:n_ref] += shift_x
    ty[:n_ref] += shift_y
    good = _item_geoms(rings, keep, tx, ty, densify_m=_DENSIFY_M, jitter_sigma_m=sigma, rng=rng)
    add(good, np.flatnonzero(keep), _GOOD)

    # Dilated or eroded by 2-5 m.
    i = np.flatnonzero(outcome == _DILATE_ERODE)
    distance = rng.uniform(2.0, 5.0, i.size) * rng.choice([-1.0, 1.0], i.size)
    g = shapely.buffer(ref_local[i], distance, join_style="mitre")
    add(_offset(g, shift_x[i], shift_y[i]), i, _DILATE_ERODE)

    # Merged with the right neighbour: the union, closed over the gap, 0.5-2 m larger.
    i = np.flatnonzero(outcome == _MERGE)
    j = layout.next_in_row[i]
    radius = shapely.distance(ref_local[i], ref_local[j]) / 2 + 1.0
    g = shapely.buffer(shapely.union(ref_local[i], ref_local[j]), radius, join_style="mitre")
    g = shapely.buffer(g, -(radius - rng.uniform(0.5, 2.0, i.size)), join_style="mitre")
    add(_offset(g, shift_x[i], shift_y[i]), i, _MERGE)

    # Split by a line through the centroid, the halves 1-3 m apart.
    i = np.flatnonzero(outcome == _SPLIT)
    g = ref_local[i]
    centre = shapely.get_coordinates(shapely.centroid(g))
    bounds = shapely.bounds(g)
    length = (bounds[:, 2] - bounds[:, 0]) + (bounds[:, 3] - bounds[:, 1]) + 100.0
    angle = rng.uniform(0.0, np.pi, i.size)
    along = np.column_stack([np.cos(angle), np.sin(angle)]) * length[:, None]
    across = np.column_stack([-np.sin(angle), np.cos(angle)])
    half_gap = rng.uniform(0.5, 1.5, i.size)[:, None]
    for sub, side in enumerate((1.0, -1.0)):
        base = centre + side * across * half_gap
        far = side * across * length[:, None]
        half_plane = shapely.polygons(np.stack([base - along, base + along, base + along + far, base - along + far], axis=1))
        part = _polygonal(shapely.intersection(g, half_plane))
        add(_offset(part, shift_x[i], shift_y[i]), i, _SPLIT, sub)

    # Bad shape: shrunk to 30-60 % of its linear size, or eroded by 0.2 sqrt(area).
    i = np.flatnonzero(outcome == _BAD_SHAPE)
    g = ref_local[i]
    scaled = _scale_about_centroid(g, rng.uniform(0.3, 0.6, i.size))
    eroded = shapely.buffer(g, -0.2 * np.sqrt(shapely.area(g)), join_style="mitre")
    use_eroded = (rng.random(i.size) < 0.5) & ~shapely.is_empty(eroded)
    g = np.where(use_eroded, eroded, scaled)
    add(_offset(g, shift_x[i], shift_y[i]), i, _BAD_SHAPE)

    # False positives, as shaped and placed.
    is_fp = (item_kind[:n_shaped] >= _FP_EMPTY) & (item_kind[:n_shaped] <= _FP_PARTIAL)
    fp_items = np.flatnonzero(is_fp)
    fp = _item_geoms(rings, is_fp, layout.tx[:n_shaped], layout.ty[:n_shaped])
    partial = item_kind[fp_items] == _FP_PARTIAL
    add(fp[partial], fp_items[partial], _PRED_FP_PARTIAL)
    add(fp[~partial], fp_items[~partial], _PRED_FP_FREE)

    bad_items = np.flatnonzero(item_kind == _BAD_PRED)
    add(_bad_geoms(layout.tx, layout.ty, item_kind == _BAD_PRED), bad_items, _PRED_BAD)
    return np.concatenate(geoms), np.concatenate(items), np.concatenate(subs), np.concatenate(kinds)


def _scores(rng: np.random.Generator, pred_kind: IdArray, decimals: int | None = None) -> F64Array:
    """Score of each prediction, Beta-distributed by kind, float64 in [0, 1] (rounded when asked)."""
    a, b = np.ones(pred_kind.size), np.ones(pred_kind.size)
    for kind, (a_kind, b_kind) in _SCORE_BETA.items():
        a[pred_kind == kind], b[pred_kind == kind] = a_kind, b_kind
    scores = rng.beta(a, b)
    return scores if decimals is None else np.round(scores, decimals)

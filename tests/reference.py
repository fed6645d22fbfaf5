"""Slow reference implementations whose correctness is obvious (one per kernel family).

Each ``naive_*`` function uses shapely geometry per point or per sample, no pruning and
no closed forms, so that the numba kernels of :mod:`evalcore._kernels` (reached through
:mod:`evalcore.boundary`) can be checked against it.
"""

from __future__ import annotations

import numpy as np
import shapely

from evalcore.config import BOUNDARY_MAX_SAMPLES, BOUNDARY_SAMPLE_SPACING_M


def naive_spacing(geom, spacing_m):
    """Δ of one boundary: ``spacing_m``, or ``max(1 m, perimeter / 1000)`` with None."""
    if spacing_m is None:
        return max(BOUNDARY_SAMPLE_SPACING_M, shapely.length(geom) / BOUNDARY_MAX_SAMPLES)
    return float(spacing_m)


def naive_samples(geom, spacing_m):
    """Samples of every ring of ``shapely.segmentize(geom, Δ)`` with trapezoidal weights.

    Returns
    -------
    xy : float64 (n, 2)
        Every densified vertex, the closing vertex of each ring not repeated.
    weight : float64 (n,)
        Half the length of each adjacent piece of its ring.
    """
    dense = shapely.segmentize(geom, naive_spacing(geom, spacing_m))
    xy_all, w_all = [], []
    for part in shapely.get_parts(dense):
        for ring in shapely.get_rings(part):
            xy = shapely.get_coordinates(ring)[:-1]
            nxt = np.roll(xy, -1, axis=0)
            piece = np.sqrt(((nxt - xy) ** 2).sum(axis=1))
            xy_all.append(xy)
            w_all.append(0.5 * (piece + np.roll(piece, 1)))
    return np.concatenate(xy_all), np.concatenate(w_all)


def naive_sample_distances(geom, other, spacing_m):
    """Samples of ``geom``'s boundary, weights, and ``shapely.distance`` of each to ``other``'s boundary."""
    xy, weight = naive_samples(geom, spacing_m)
    dist = shapely.distance(shapely.points(xy), shapely.boundary(other))
    return xy, weight, dist


def naive_boundary_distances(ref, pred, spacing_m):
    """Hausdorff, symmetric mean distance and Δ of one pair, from per-sample shapely distances."""
    _, w_r, d_r = naive_sample_distances(ref, pred, spacing_m)
    _, w_p, d_p = naive_sample_distances(pred, ref, spacing_m)
    hausdorff = max(d_r.max(), d_p.max())
    mean = ((w_r * d_r).sum() + (w_p * d_p).sum()) / (w_r.sum() + w_p.sum())
    return hausdorff, mean, max(naive_spacing(ref, spacing_m), naive_spacing(pred, spacing_m))


def naive_fine_distances(ref, pred, spacing_m, factor=100):
    """The same at a spacing ``factor`` times finer that keeps every sample at Δ.

    Each boundary is segmentized at Δ and the result again at Δ / factor, so the coarse
    samples are among the fine ones.
    """

    def fine(geom):
        step = naive_spacing(geom, spacing_m)
        return shapely.segmentize(shapely.segmentize(geom, step), step / factor)

    def directed(geom, other):
        _, w, d = naive_sample_distances(fine(geom), other, 1e300)  # already dense: no more points
        return w, d

    w_r, d_r = directed(ref, pred)
    w_p, d_p = directed(pred, ref)
    hausdorff = max(d_r.max(), d_p.max())
    mean = ((w_r * d_r).sum() + (w_p * d_p).sum()) / (w_r.sum() + w_p.sum())
    return hausdorff, mean


def naive_length_within(geom, other_geoms, tolerance_m, step_m):
    """Length of ``geom``'s boundary within the tolerance of the other boundaries, by sampling.

    Every segment of every ring is cut into pieces of at most ``step_m``; a piece counts
    whole when its midpoint is within ``tolerance_m`` (``shapely.dwithin``) of the union
    of the other boundaries.

    Returns
    -------
    length : float
        Metres.
    error_bound : float
        A bound of the sampling error: each change of state between neighbouring pieces
        (and each segment end) can misplace at most one piece.
    """
    others = [g for g in other_geoms if g is not None and not g.is_empty]
    if not others:
        return 0.0, 0.0
    target = shapely.union_all(shapely.boundary(np.array(others, dtype=object)))
    shapely.prepare(target)
    length = 0.0
    bound = 0.0
    for part in shapely.get_parts(geom):
        for ring in shapely.get_rings(part):
            xy = shapely.get_coordinates(ring)
            for (x0, y0), (x1, y1) in zip(xy[:-1], xy[1:]):
                seg_len = float(np.hypot(x1 - x0, y1 - y0))
                if seg_len == 0.0:
                    continue
                n = max(int(np.ceil(seg_len / step_m)), 1)
                t = (np.arange(n) + 0.5) / n
                inside = shapely.dwithin(shapely.points(x0 + t * (x1 - x0), y0 + t * (y1 - y0)), target, tolerance_m)
                length += seg_len * inside.sum() / n
                changes = np.count_nonzero(inside[1:] != inside[:-1]) + 2
                bound += changes * seg_len / n
    return length, bound


def naive_union_length(lo, hi):
    """Length of the union of closed intervals, by walking them in sorted order."""
    total, end = 0.0, -np.inf
    for a, b in sorted(zip(lo, hi)):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def naive_capsule_interval(p, q, u, v, tolerance_m, n=20_001):
    """Interval of t in [0, 1] with ``P + t (Q - P)`` within the tolerance of [U, V], on a fine grid."""
    t = np.linspace(0.0, 1.0, n)
    pts = shapely.points(p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1]))
    inside = shapely.distance(pts, shapely.LineString([u, v])) <= tolerance_m
    if not inside.any():
        return 1.0, 0.0
    return t[inside].min(), t[inside].max()


def naive_topology(pred_geoms, ref_geoms, fraction=0.5):
    """Merges, splits and the count ratio of SPEC 6.2 by a plain loop over every pair.

    The geometries must already be in the equal-area CRS (the tests use EPSG:6933), so
    ``shapely.area`` gives the areas of the contract. ``p`` covers ``r`` when
    ``|r ∩ p| > fraction |r|``; ``r`` holds ``p`` when ``|r ∩ p| > fraction |p|``.

    Returns
    -------
    dict
        ``count_merges`` (predictions covering two or more reference fields),
        ``count_merged_reference`` (distinct reference fields covered by a merging
        prediction), ``count_splits`` (reference fields holding two or more
        predictions), ``count_split_predictions`` (distinct predictions held by a split
        reference field) and ``count_ratio`` (predictions / reference fields, NaN
        without reference fields); and two diagnostics for the tests:
        ``n_near_ties`` (pairs whose intersection is within 1e-9 relative of one of
        the two majority bounds, where a rounding error could flip a strict
        comparison) and ``n_predictions_held_by_several_splits`` (where counting a
        prediction once per split reference would give another
        ``count_split_predictions``).
    """
    preds = list(pred_geoms)
    refs = list(ref_geoms)
    covers = [[False] * len(refs) for _ in preds]
    holds = [[False] * len(refs) for _ in preds]
    near_ties = 0
    for i, p in enumerate(preds):
        a_p = shapely.area(p)
        for j, r in enumerate(refs):
            inter = shapely.area(shapely.intersection(p, r))
            if inter <= 0.0:
                continue
            a_r = shapely.area(r)
            covers[i][j] = inter > fraction * a_r
            holds[i][j] = inter > fraction * a_p
            for bound, scale in ((fraction * a_r, a_r), (fraction * a_p, a_p)):
                if abs(inter - bound) <= 1e-9 * scale:
                    near_ties += 1
    merging = [i for i in range(len(preds)) if sum(covers[i]) >= 2]
    merged_refs = {j for i in merging for j in range(len(refs)) if covers[i][j]}
    split_refs = [j for j in range(len(refs)) if sum(holds[i][j] for i in range(len(preds))) >= 2]
    held = [sum(holds[i][j] for j in split_refs) for i in range(len(preds))]
    return {
        "count_merges": len(merging),
        "count_merged_reference": len(merged_refs),
        "count_splits": len(split_refs),
        "count_split_predictions": sum(1 for n in held if n >= 1),
        "count_ratio": len(preds) / len(refs) if refs else float("nan"),
        "n_near_ties": near_ties,
        "n_predictions_held_by_several_splits": sum(1 for n in held if n >= 2),
    }

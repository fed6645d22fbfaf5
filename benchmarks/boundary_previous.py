"""The matched pairs' distance kernel as it was before issue 29's rewrite (frozen; not part of the library).

Kept so that the benchmark can time the previous and the current kernel in one process
(``python -m benchmarks.bench_boundary --compare-previous``) and so that a hypothesis
property (tests/unit/test_boundary_kernel_previous.py) can hold the current kernel to
identical numbers, bit for bit, on random polygons. It chunks 16 samples under the bound
``d(s0) + max|s - s0|`` and takes the nearest candidate on squared distances; the shared
helpers (sampling, weights, boxes, point-segment formulas) are imported from the
frozen copy in :mod:`benchmarks.boundary_pass1`, so that changes to
:mod:`evalcore._kernels` do not change this kernel's time.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from benchmarks.boundary_pass1 import (
    _BLOCK,
    _INF,
    _SLACK,
    _SUPER,
    _box_gap2,
    _build_blocks,
    _fill_ring_samples,
    _max_ring_samples,
    _max_segments,
    _n_boxes,
    _nearest_full_pass1,
    _point_segment_d2,
    _point_segment_distance,
    _trapezoid_weights,
)


@njit(cache=True, nogil=True)
def _load_segments_previous(x, y, ring_off, r0: int, r1: int, ax, ay, bx, by, ex, ey, l2, il2, sminx, sminy, smaxx, smaxy) -> int:
    """Copy the segments of rings ``r0:r1`` into flat arrays with their boxes; returns the count.

    ``ex, ey`` is B - A, ``l2`` its squared length and ``il2`` the inverse (0 for a
    zero-length segment).
    """
    m = 0
    for r in range(r0, r1):
        for c in range(ring_off[r], ring_off[r + 1] - 1):
            x0 = x[c]
            y0 = y[c]
            x1 = x[c + 1]
            y1 = y[c + 1]
            ax[m] = x0
            ay[m] = y0
            bx[m] = x1
            by[m] = y1
            dx = x1 - x0
            dy = y1 - y0
            ex[m] = dx
            ey[m] = dy
            q = dx * dx + dy * dy
            l2[m] = q
            il2[m] = 1.0 / q if q > 0.0 else 0.0
            sminx[m] = min(x0, x1)
            sminy[m] = min(y0, y1)
            smaxx[m] = max(x0, x1)
            smaxy[m] = max(y0, y1)
            m += 1
    return m


@njit(cache=True, nogil=True)
def _nearest_full_previous(px, py, m, n_blocks, ax, ay, bx, by, ex, ey, l2, il2, kminx, kminy, kmaxx, kmaxy) -> float:
    """Distance from P to the nearest of ``m`` segments, skipping blocks farther than the best so far."""
    best = _nearest_full_pass1(px, py, m, n_blocks, ax, ay, ex, ey, l2, il2, kminx, kminy, kmaxx, kmaxy)
    return _point_segment_distance(px, py, ax[best], ay[best], bx[best], by[best])


@njit(cache=True, nogil=True)
def _sample_distances_into_previous(
    sx,
    sy,
    n: int,
    dist,
    m: int,
    n_blocks: int,
    ax,
    ay,
    bx,
    by,
    ex,
    ey,
    l2,
    il2,
    sminx,
    sminy,
    smaxx,
    smaxy,
    kminx,
    kminy,
    kmaxx,
    kmaxy,
    cand,
    chunk: int,
    prune: bool,
) -> None:
    """Exact distance of each of ``n`` consecutive samples to the nearest of ``m`` segments.

    Pruning (``prune=True``): samples are taken in chunks of ``chunk`` consecutive ones.
    The distance ``d`` to a closed set is 1-Lipschitz, so every sample ``s`` of a chunk
    starting at the already measured sample ``s0`` has ``d(s) <= U = d(s0) + max|s - s0|``.
    The segment nearest to ``s`` is at most ``U`` away from ``s``, hence its box is at most
    ``U`` away from the chunk's box: only those segments (found block by block) are
    candidates, and the minimum over them is the exact minimum. ``prune=False`` computes
    every sample against every segment (for measurements).

    The nearest segment is found on cheap squared distances (first one in segment
    order on ties); the distance returned is then GEOS's distance to that segment.
    """
    if n == 0:
        return
    if not prune:
        for k in range(n):
            xk = sx[k]
            yk = sy[k]
            best2 = _INF
            best = 0
            for s in range(m):
                d2 = _point_segment_d2(xk, yk, ax[s], ay[s], ex[s], ey[s], l2[s], il2[s])
                if d2 < best2:
                    best2 = d2
                    best = s
            dist[k] = _point_segment_distance(xk, yk, ax[best], ay[best], bx[best], by[best])
        return
    n_super = (n_blocks + _SUPER - 1) // _SUPER
    dist[0] = _nearest_full_previous(sx[0], sy[0], m, n_blocks, ax, ay, bx, by, ex, ey, l2, il2, kminx, kminy, kmaxx, kmaxy)
    k0 = 0
    while k0 < n - 1:
        k1 = min(k0 + chunk, n - 1)
        x0 = sx[k0]
        y0 = sy[k0]
        cminx = x0
        cminy = y0
        cmaxx = x0
        cmaxy = y0
        reach2 = 0.0
        for k in range(k0 + 1, k1 + 1):
            xk = sx[k]
            yk = sy[k]
            cminx = min(cminx, xk)
            cminy = min(cminy, yk)
            cmaxx = max(cmaxx, xk)
            cmaxy = max(cmaxy, yk)
            dx = xk - x0
            dy = yk - y0
            reach2 = max(reach2, dx * dx + dy * dy)
        bound = (dist[k0] + np.sqrt(reach2)) * (1.0 + _SLACK) + _SLACK * (
            abs(cmaxx - cminx) + abs(cmaxy - cminy) + 1e-300
        )
        bound2 = bound * bound
        n_cand = 0
        for u in range(n_super):
            i = n_blocks + u
            if _box_gap2(cminx, cminy, cmaxx, cmaxy, kminx[i], kminy[i], kmaxx[i], kmaxy[i]) > bound2:
                continue
            for b in range(u * _SUPER, min((u + 1) * _SUPER, n_blocks)):
                if _box_gap2(cminx, cminy, cmaxx, cmaxy, kminx[b], kminy[b], kmaxx[b], kmaxy[b]) > bound2:
                    continue
                for s in range(b * _BLOCK, min((b + 1) * _BLOCK, m)):
                    if _box_gap2(cminx, cminy, cmaxx, cmaxy, sminx[s], sminy[s], smaxx[s], smaxy[s]) <= bound2:
                        cand[n_cand] = s
                        n_cand += 1
        for k in range(k0 + 1, k1 + 1):
            xk = sx[k]
            yk = sy[k]
            best2 = _INF
            best = cand[0]
            for i in range(n_cand):
                s = cand[i]
                d2 = _point_segment_d2(xk, yk, ax[s], ay[s], ex[s], ey[s], l2[s], il2[s])
                if d2 < best2:
                    best2 = d2
                    best = s
            dist[k] = _point_segment_distance(xk, yk, ax[best], ay[best], bx[best], by[best])
        k0 = k1


@njit(cache=True, nogil=True)
def _pair_distances_previous(x, y, ring_off, geom_off, spacing, geom_a, geom_b, chunk: int, prune: bool):
    """Hausdorff distance and symmetric mean distance of the boundaries of geometry pairs.

    Parameters
    ----------
    x, y : float64 (n_coords,)
        Ring coordinates, metres.
    ring_off : int64 (n_rings + 1,)
    geom_off : int64 (n_geoms + 1,)
    spacing : float64 (n_geoms,)
        Sample spacing of each geometry's boundary, metres (> 0).
    geom_a, geom_b : int64 (n_pairs,)
        The two geometries of each pair (reference first). Both must have at least one
        segment.
    chunk : int
        Samples per pruning chunk.
    prune : bool
        False computes every sample against every segment.

    Returns
    -------
    hausdorff, integral_a, length_a, integral_b, length_b : float64 (n_pairs,)
        Hausdorff distance (max of the two directed maxima over samples, metres), and per
        side the trapezoidal integral of the sample distances (m^2) and the boundary
        length as the sum of the weights (m).
    """
    n_pairs = geom_a.size
    hausdorff = np.empty(n_pairs, dtype=np.float64)
    integral_a = np.empty(n_pairs, dtype=np.float64)
    length_a = np.empty(n_pairs, dtype=np.float64)
    integral_b = np.empty(n_pairs, dtype=np.float64)
    length_b = np.empty(n_pairs, dtype=np.float64)
    if n_pairs == 0:
        return hausdorff, integral_a, length_a, integral_b, length_b
    cap_samples = max(
        _max_ring_samples(x, y, ring_off, geom_off, spacing, geom_a),
        _max_ring_samples(x, y, ring_off, geom_off, spacing, geom_b),
    )
    cap_segments = max(_max_segments(ring_off, geom_off, geom_a), _max_segments(ring_off, geom_off, geom_b))
    cap_blocks = _n_boxes(cap_segments)
    sx = np.empty(cap_samples, dtype=np.float64)
    sy = np.empty(cap_samples, dtype=np.float64)
    dist = np.empty(cap_samples, dtype=np.float64)
    weight = np.empty(cap_samples, dtype=np.float64)
    ax = np.empty(cap_segments, dtype=np.float64)
    ay = np.empty(cap_segments, dtype=np.float64)
    bx = np.empty(cap_segments, dtype=np.float64)
    by = np.empty(cap_segments, dtype=np.float64)
    ex = np.empty(cap_segments, dtype=np.float64)
    ey = np.empty(cap_segments, dtype=np.float64)
    l2 = np.empty(cap_segments, dtype=np.float64)
    il2 = np.empty(cap_segments, dtype=np.float64)
    sminx = np.empty(cap_segments, dtype=np.float64)
    sminy = np.empty(cap_segments, dtype=np.float64)
    smaxx = np.empty(cap_segments, dtype=np.float64)
    smaxy = np.empty(cap_segments, dtype=np.float64)
    kminx = np.empty(cap_blocks, dtype=np.float64)
    kminy = np.empty(cap_blocks, dtype=np.float64)
    kmaxx = np.empty(cap_blocks, dtype=np.float64)
    kmaxy = np.empty(cap_blocks, dtype=np.float64)
    cand = np.empty(cap_segments, dtype=np.int64)
    for p in range(n_pairs):
        h = 0.0
        for side in range(2):
            g_from = geom_a[p] if side == 0 else geom_b[p]
            g_to = geom_b[p] if side == 0 else geom_a[p]
            m = _load_segments_previous(
                x, y, ring_off, geom_off[g_to], geom_off[g_to + 1], ax, ay, bx, by, ex, ey, l2, il2, sminx, sminy, smaxx, smaxy
            )
            n_blocks = _build_blocks(m, sminx, sminy, smaxx, smaxy, kminx, kminy, kmaxx, kmaxy)
            integral = 0.0
            length = 0.0
            for r in range(geom_off[g_from], geom_off[g_from + 1]):
                n = _fill_ring_samples(x, y, ring_off[r], ring_off[r + 1], spacing[g_from], sx, sy)
                _sample_distances_into_previous(
                    sx, sy, n, dist, m, n_blocks, ax, ay, bx, by, ex, ey, l2, il2, sminx, sminy, smaxx, smaxy,
                    kminx, kminy, kmaxx, kmaxy, cand, chunk, prune,
                )  # fmt: skip
                _trapezoid_weights(sx, sy, n, weight)
                for k in range(n):
                    integral += weight[k] * dist[k]
                    length += weight[k]
                    if dist[k] > h:
                        h = dist[k]
            if side == 0:
                integral_a[p] = integral
                length_a[p] = length
            else:
                integral_b[p] = integral
                length_b[p] = length
        hausdorff[p] = h
    return hausdorff, integral_a, length_a, integral_b, length_b

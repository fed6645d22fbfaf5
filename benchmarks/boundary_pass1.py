"""The matched pairs' distance kernel as the first pass of issue 29 left it (frozen; not part of the library).

The second pass (2026-12-02 afternoon) rewrote the kernel's candidate handling; this is
the kernel of commit 09d1447, kept so that ``python -m benchmarks.bench_boundary
--compare-previous`` can time the kernel before issue 29
(:mod:`benchmarks.boundary_previous`), after its first pass (this module) and now in one
process, and so that tests/unit/test_boundary_kernel_previous.py can hold the current
kernel to its numbers, bit for bit. The helpers it uses (sampling, weights, boxes,
point-segment formulas) are copied here too, as they were, so that later changes to
:mod:`evalcore._kernels` (its compiler flags, for one) do not change this kernel's time.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_INF = np.inf
_BLOCK = 8
_SUPER = 8
_SLACK = 1e-9


@njit(cache=True, nogil=True)
def _segment_distance(
    px: float, py: float, ax: float, ay: float, bx: float, by: float, ex: float, ey: float, len2: float, length: float
) -> float:
    """Euclidean distance from P to [A, B], given ``E = B - A``, ``len2 = |E|^2`` and ``length = |E|``.

    GEOS's ``Distance::pointToSegment``: the same operations in the same order
    (``ex, ey, len2, length`` are exactly the numbers GEOS computes on the fly, see
    :func:`_load_segments`), so it agrees with ``shapely.distance`` to the last bits;
    the kernel stores the segment's numbers once instead of per sample.
    """
    dx = px - ax
    dy = py - ay
    if ax == bx and ay == by:
        return np.sqrt(dx * dx + dy * dy)
    r = (dx * ex + dy * ey) / len2
    if r <= 0.0:
        return np.sqrt(dx * dx + dy * dy)
    if r >= 1.0:
        fx = px - bx
        fy = py - by
        return np.sqrt(fx * fx + fy * fy)
    q = ((ay - py) * ex - (ax - px) * ey) / len2
    return abs(q) * length


@njit(cache=True, nogil=True)
def _point_segment_distance(px: float, py: float, ax: float, ay: float, bx: float, by: float) -> float:
    """:func:`_segment_distance` from point P to segment [A, B], computing the segment's numbers.

    The previous kernel in benchmarks/ uses this form.
    """
    ex = bx - ax
    ey = by - ay
    len2 = ex * ex + ey * ey
    return _segment_distance(px, py, ax, ay, bx, by, ex, ey, len2, np.sqrt(len2))


@njit(cache=True, nogil=True)
def _point_segment_d2(px: float, py: float, ax: float, ay: float, ex: float, ey: float, len2: float, inv_len2: float) -> float:
    """Squared distance from P to the segment from A along E (``len2 = |E|^2``, ``inv_len2 = 1/len2``).

    Cheap (no division, no square root): used to find the nearest segment, whose
    distance is then taken with :func:`_segment_distance` (GEOS's formula).
    """
    dx = px - ax
    dy = py - ay
    t = dx * ex + dy * ey
    if t <= 0.0:
        return dx * dx + dy * dy
    if t >= len2:
        fx = dx - ex
        fy = dy - ey
        return fx * fx + fy * fy
    c = dx * ey - dy * ex
    return c * c * inv_len2


@njit(cache=True, nogil=True)
def _box_gap2(
    aminx: float, aminy: float, amaxx: float, amaxy: float, bminx: float, bminy: float, bmaxx: float, bmaxy: float
) -> float:
    """Squared distance between two axis-aligned boxes (0 when they overlap)."""
    dx = 0.0
    if bminx > amaxx:
        dx = bminx - amaxx
    elif aminx > bmaxx:
        dx = aminx - bmaxx
    dy = 0.0
    if bminy > amaxy:
        dy = bminy - amaxy
    elif aminy > bmaxy:
        dy = aminy - bmaxy
    return dx * dx + dy * dy


@njit(cache=True, nogil=True)
def _count_ring_samples(x, y, c0: int, c1: int, spacing: float) -> int:
    """Upper bound of the number of samples of the closed ring ``x[c0:c1]`` at ``spacing``."""
    n = 0
    for c in range(c0, c1 - 1):
        dx = x[c + 1] - x[c]
        dy = y[c + 1] - y[c]
        length = np.sqrt(dx * dx + dy * dy)
        pieces = np.ceil(length / spacing)
        n += max(int(pieces), 1)
    return n + 1


@njit(cache=True, nogil=True)
def _fill_ring_samples(x, y, c0: int, c1: int, spacing: float, sx, sy) -> int:
    """Samples of the closed ring ``x[c0:c1]``, written to ``sx, sy``; returns their number.

    Reproduces GEOS ``Densifier::densifyPoints`` (what ``shapely.segmentize`` runs): a
    segment of length ``L > spacing`` is cut into ``ceil(L / spacing)`` equal pieces, the
    inserted points are ``P + ((j * (L / n)) / L) * (Q - P)``, and a point equal to the
    previous one is not repeated. The closing coordinate (equal to the first) is not
    returned: a closed ring's first and last vertex are one sample.
    """
    n = 0
    if c1 - c0 <= 0:
        return 0
    for c in range(c0, c1 - 1):
        p0x = x[c]
        p0y = y[c]
        p1x = x[c + 1]
        p1y = y[c + 1]
        if n == 0 or sx[n - 1] != p0x or sy[n - 1] != p0y:
            sx[n] = p0x
            sy[n] = p0y
            n += 1
        dx = p0x - p1x
        dy = p0y - p1y
        length = np.sqrt(dx * dx + dy * dy)
        pieces = int(np.ceil(length / spacing))
        if pieces > 1:
            piece_len = length / pieces
            for j in range(1, pieces):
                frac = (j * piece_len) / length
                qx = p0x + frac * (p1x - p0x)
                qy = p0y + frac * (p1y - p0y)
                if sx[n - 1] != qx or sy[n - 1] != qy:
                    sx[n] = qx
                    sy[n] = qy
                    n += 1
    # The closing coordinate repeats the first vertex, which is already the first sample
    # (GEOS appends it last); a vertex equal to the first just before closing is dropped too.
    if n > 1 and sx[n - 1] == sx[0] and sy[n - 1] == sy[0]:
        n -= 1
    return n


@njit(cache=True, nogil=True)
def _trapezoid_weights(sx, sy, n: int, weight) -> None:
    """Trapezoidal weight of each of the ``n`` cyclic samples of a closed ring."""
    if n == 0:
        return
    # weight[k] = (|s_k - s_{k-1}| + |s_{k+1} - s_k|) / 2, indices cyclic.
    dx = sx[0] - sx[n - 1]
    dy = sy[0] - sy[n - 1]
    prev = np.sqrt(dx * dx + dy * dy)
    for k in range(n):
        kn = k + 1 if k + 1 < n else 0
        dx = sx[kn] - sx[k]
        dy = sy[kn] - sy[k]
        nxt = np.sqrt(dx * dx + dy * dy)
        weight[k] = 0.5 * (prev + nxt)
        prev = nxt


@njit(cache=True, nogil=True)
def _n_boxes(m: int) -> int:
    """Number of block and super-block boxes of ``m`` segments."""
    n_blocks = (m + _BLOCK - 1) // _BLOCK
    return n_blocks + (n_blocks + _SUPER - 1) // _SUPER


@njit(cache=True, nogil=True)
def _build_blocks(m: int, sminx, sminy, smaxx, smaxy, kminx, kminy, kmaxx, kmaxy) -> int:
    """Boxes of each run of ``_BLOCK`` consecutive segments, then of each run of ``_SUPER`` blocks.

    Block ``b`` is at index ``b`` and super-block ``u`` at ``n_blocks + u``; returns
    ``n_blocks``.
    """
    n_blocks = (m + _BLOCK - 1) // _BLOCK
    for b in range(n_blocks):
        s0 = b * _BLOCK
        s1 = min(s0 + _BLOCK, m)
        mnx = _INF
        mny = _INF
        mxx = -_INF
        mxy = -_INF
        for s in range(s0, s1):
            mnx = min(mnx, sminx[s])
            mny = min(mny, sminy[s])
            mxx = max(mxx, smaxx[s])
            mxy = max(mxy, smaxy[s])
        kminx[b] = mnx
        kminy[b] = mny
        kmaxx[b] = mxx
        kmaxy[b] = mxy
    n_super = (n_blocks + _SUPER - 1) // _SUPER
    for u in range(n_super):
        mnx = _INF
        mny = _INF
        mxx = -_INF
        mxy = -_INF
        for b in range(u * _SUPER, min((u + 1) * _SUPER, n_blocks)):
            mnx = min(mnx, kminx[b])
            mny = min(mny, kminy[b])
            mxx = max(mxx, kmaxx[b])
            mxy = max(mxy, kmaxy[b])
        kminx[n_blocks + u] = mnx
        kminy[n_blocks + u] = mny
        kmaxx[n_blocks + u] = mxx
        kmaxy[n_blocks + u] = mxy
    return n_blocks


@njit(cache=True, nogil=True)
def _max_ring_samples(x, y, ring_off, geom_off, spacing, geoms) -> int:
    """Largest sample count of any ring of the listed geometries."""
    best = 1
    for i in range(geoms.size):
        g = geoms[i]
        for r in range(geom_off[g], geom_off[g + 1]):
            best = max(best, _count_ring_samples(x, y, ring_off[r], ring_off[r + 1], spacing[g]))
    return best


@njit(cache=True, nogil=True)
def _max_segments(ring_off, geom_off, geoms) -> int:
    """Largest segment count of any of the listed geometries."""
    best = 1
    for i in range(geoms.size):
        g = geoms[i]
        m = 0
        for r in range(geom_off[g], geom_off[g + 1]):
            m += max(ring_off[r + 1] - ring_off[r] - 1, 0)
        best = max(best, m)
    return best




@njit(cache=True, nogil=True)
def _load_segments_pass1(
    x, y, ring_off, r0: int, r1: int, ax, ay, bx, by, ex, ey, l2, il2, sl, sminx, sminy, smaxx, smaxy
) -> int:
    """Copy the segments of rings ``r0:r1`` into flat arrays with their boxes; returns the count.

    ``ex, ey`` is B - A, ``l2`` its squared length, ``il2`` the inverse (0 for a
    zero-length segment) and ``sl`` its length ``sqrt(l2)`` (the same number as GEOS's
    ``sqrt(len2)``: the same operations, and the square root is correctly rounded).
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
            sl[m] = np.sqrt(q)
            sminx[m] = min(x0, x1)
            sminy[m] = min(y0, y1)
            smaxx[m] = max(x0, x1)
            smaxy[m] = max(y0, y1)
            m += 1
    return m


@njit(cache=True, nogil=True)
def _nearest_full_pass1(px, py, m, n_blocks, ax, ay, ex, ey, l2, il2, kminx, kminy, kmaxx, kmaxy) -> int:
    """The nearest of ``m`` segments to P on squared distances (first in order on ties), skipping far blocks."""
    best2 = _INF
    best = -1
    n_super = (n_blocks + _SUPER - 1) // _SUPER
    for u in range(n_super):
        i = n_blocks + u
        if best >= 0 and _box_gap2(px, py, px, py, kminx[i], kminy[i], kmaxx[i], kmaxy[i]) > best2 * (1.0 + _SLACK):
            continue
        for b in range(u * _SUPER, min((u + 1) * _SUPER, n_blocks)):
            if best >= 0 and _box_gap2(px, py, px, py, kminx[b], kminy[b], kmaxx[b], kmaxy[b]) > best2 * (
                1.0 + _SLACK
            ):
                continue
            for s in range(b * _BLOCK, min((b + 1) * _BLOCK, m)):
                d2 = _point_segment_d2(px, py, ax[s], ay[s], ex[s], ey[s], l2[s], il2[s])
                if d2 < best2:
                    best2 = d2
                    best = s
    return best


@njit(cache=True, nogil=True)
def _sample_distances_into_pass1(
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
    sl,
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

    Pruning (``prune=True``): samples are taken in chunks of ``chunk`` consecutive ones,
    after the already measured sample ``s0`` whose nearest segment is ``e0``. Every
    sample ``s`` of the chunk has ``d(s) <= |s - e0|``, so ``U = max |s - e0|`` over the
    chunk bounds them all, and the segment nearest to ``s`` is at most ``U`` away from
    ``s``: its box is at most ``U`` away from the chunk's box. Only those segments (found
    block by block) are candidates, and the minimum over them is the exact minimum.
    The distances to ``e0`` are taken first with GEOS's formula (they give ``U``) and
    kept for the samples whose nearest segment is ``e0``. Along near-parallel boundaries
    ``U`` is about the distance itself, so a chunk usually has one candidate, ``e0``,
    and needs nothing more. ``prune=False`` computes every sample against every
    segment (the reference).

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
            dist[k] = _segment_distance(
                xk, yk, ax[best], ay[best], bx[best], by[best], ex[best], ey[best], l2[best], sl[best]
            )
        return
    n_super = (n_blocks + _SUPER - 1) // _SUPER
    near = _nearest_full_pass1(sx[0], sy[0], m, n_blocks, ax, ay, ex, ey, l2, il2, kminx, kminy, kmaxx, kmaxy)
    dist[0] = _segment_distance(
        sx[0], sy[0], ax[near], ay[near], bx[near], by[near], ex[near], ey[near], l2[near], sl[near]
    )
    k0 = 0
    while k0 < n - 1:
        k1 = min(k0 + chunk, n - 1)
        # Every sample's distance to e0 (its exact distance if e0 is its nearest segment),
        # their maximum U and the chunk's box.
        nax = ax[near]
        nay = ay[near]
        nbx = bx[near]
        nby = by[near]
        nex = ex[near]
        ney = ey[near]
        nl2 = l2[near]
        nsl = sl[near]
        cminx = sx[k0 + 1]
        cminy = sy[k0 + 1]
        cmaxx = cminx
        cmaxy = cminy
        u = 0.0
        for k in range(k0 + 1, k1 + 1):
            xk = sx[k]
            yk = sy[k]
            cminx = min(cminx, xk)
            cminy = min(cminy, yk)
            cmaxx = max(cmaxx, xk)
            cmaxy = max(cmaxy, yk)
            dk = _segment_distance(xk, yk, nax, nay, nbx, nby, nex, ney, nl2, nsl)
            dist[k] = dk
            u = max(u, dk)
        # Slack: rounding is relative to the distance and to the lengths involved (the
        # segment's, the chunk's, the coordinates'), never to zero alone, so a sample
        # lying on the other boundary (U = 0) keeps its touching segments.
        bound = u * (1.0 + _SLACK) + _SLACK * (
            (cmaxx - cminx) + (cmaxy - cminy) + nsl + abs(cminx) + abs(cminy) + 1e-300
        )
        bound2 = bound * bound
        n_cand = 0
        for w in range(n_super):
            i = n_blocks + w
            if _box_gap2(cminx, cminy, cmaxx, cmaxy, kminx[i], kminy[i], kmaxx[i], kmaxy[i]) > bound2:
                continue
            for b in range(w * _SUPER, min((w + 1) * _SUPER, n_blocks)):
                if _box_gap2(cminx, cminy, cmaxx, cmaxy, kminx[b], kminy[b], kmaxx[b], kmaxy[b]) > bound2:
                    continue
                for s in range(b * _BLOCK, min((b + 1) * _BLOCK, m)):
                    gx = max(max(sminx[s] - cmaxx, cminx - smaxx[s]), 0.0)
                    gy = max(max(sminy[s] - cmaxy, cminy - smaxy[s]), 0.0)
                    cand[n_cand] = s
                    n_cand += gx * gx + gy * gy <= bound2
        if n_cand == 0:
            # Cannot happen (e0 is within the bound, whose slack covers rounding); should an
            # unforeseen rounding case drop every candidate, it costs time, not a wrong number.
            for s in range(m):
                cand[s] = s
            n_cand = m
        if n_cand > 1 or cand[0] != near:
            e0 = near
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
                if best != e0:
                    dist[k] = _segment_distance(
                        xk, yk, ax[best], ay[best], bx[best], by[best], ex[best], ey[best], l2[best], sl[best]
                    )
                near = best
        k0 = k1


@njit(cache=True, nogil=True)
def _pair_distances_pass1(x, y, ring_off, geom_off, spacing, geom_a, geom_b, chunk: int, prune: bool):
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
    sl = np.empty(cap_segments, dtype=np.float64)
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
            m = _load_segments_pass1(
                x, y, ring_off, geom_off[g_to], geom_off[g_to + 1], ax, ay, bx, by, ex, ey, l2, il2, sl, sminx, sminy, smaxx, smaxy
            )
            n_blocks = _build_blocks(m, sminx, sminy, smaxx, smaxy, kminx, kminy, kmaxx, kmaxy)
            integral = 0.0
            length = 0.0
            for r in range(geom_off[g_from], geom_off[g_from + 1]):
                n = _fill_ring_samples(x, y, ring_off[r], ring_off[r + 1], spacing[g_from], sx, sy)
                _sample_distances_into_pass1(
                    sx, sy, n, dist, m, n_blocks, ax, ay, bx, by, ex, ey, l2, il2, sl, sminx, sminy, smaxx, smaxy,
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

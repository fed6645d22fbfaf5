"""Numba kernels of the boundary metrics (numba only; the Python side is :mod:`evalcore.boundary`).

Every public kernel takes contiguous float64 coordinate arrays, int64 offset arrays and
scalars, and nothing else. Geometry is passed flat:

``x, y``
    Coordinates of every ring, ring after ring; each ring is closed (its last
    coordinate repeats its first), exactly as ``shapely.get_coordinates`` returns it.
``ring_off``
    int64 of shape ``(n_rings + 1,)``: ring ``r`` is ``x[ring_off[r]:ring_off[r + 1]]``.
``geom_off``
    int64 of shape ``(n_geoms + 1,)``: geometry ``g`` owns rings
    ``geom_off[g]:geom_off[g + 1]`` (all rings of all its parts; a boundary is the
    union of its rings, so parts need no level of their own).

Compiled with ``cache=True, nogil=True`` and no ``fastmath`` (reassociation would make
results depend on the compiler), and no ``parallel`` (results must be bit-for-bit
deterministic; parallelism comes from Dask, and in one process from slices of the pairs on
threads, :mod:`evalcore.threads`, which ``nogil`` allows). The error model is numpy's: a float
division by zero gives inf or nan instead of a Python exception, so divisions carry no
test and loops with them vectorize; every division here has a nonzero divisor or is
guarded, so the numbers are the same. Hot loops index with unsigned integers where they
should vectorize (numba adds a negative-index correction to signed indices, which turns
vector loads into gathers). See ``docs/boundary.md`` for the
algorithms and their error bounds.

The module stays whole at about 1,100 lines: numba kernels only, all reading the one
flat geometry layout above and sharing its ring and segment helpers (the ring
densification is also :mod:`evalcore.crs`'s), compiled, cached and loaded together.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__: list[str] = []  # private module: nothing is re-exported

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
"""Options of every kernel here: :data:`evalcore.config.NUMBA_OPTIONS`'s, plus numpy's error model."""
_INF = np.inf
_BLOCK = 8
"""Consecutive segments of the target boundary grouped under one bounding box."""
_SUPER = 8
"""Consecutive blocks grouped under one bounding box (a two-level hierarchy)."""
_SLACK = 1e-9
"""Relative slack added to pruning radii so that rounding never drops a candidate."""
_REGION_REACH = 2.0
"""How far, in chunk extents plus bounds, a candidate region reaches beyond the chunk that made it (speed only)."""


# ---------------------------------------------------------------------------
# Small geometric primitives
# ---------------------------------------------------------------------------


@njit(**_JIT)
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


@njit(**_JIT)
def _point_segment_distance(px: float, py: float, ax: float, ay: float, bx: float, by: float) -> float:
    """:func:`_segment_distance` from point P to segment [A, B], computing the segment's numbers.

    The previous kernel in benchmarks/ uses this form.
    """
    ex = bx - ax
    ey = by - ay
    len2 = ex * ex + ey * ey
    return _segment_distance(px, py, ax, ay, bx, by, ex, ey, len2, np.sqrt(len2))


@njit(**_JIT)
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


@njit(**_JIT)
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


# ---------------------------------------------------------------------------
# Boundary sampling (GEOS Densifier, reproduced)
# ---------------------------------------------------------------------------


@njit(**_JIT)
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


@njit(**_JIT)
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
            # The inserted points are written first, in a loop that vectorizes (unsigned
            # indices, no branch), then checked for repeats of the previous point, which
            # are rare (only where rounding makes two coincide) and then squeezed out.
            base = np.uint64(n - 1)
            for j in range(np.uint64(1), np.uint64(pieces)):
                frac = (j * piece_len) / length
                sx[base + j] = p0x + frac * (p1x - p0x)
                sy[base + j] = p0y + frac * (p1y - p0y)
            un = np.uint64(n)
            end = un + np.uint64(pieces - 1)
            repeats = False
            for i in range(un, end):
                repeats |= sx[i - np.uint64(1)] == sx[i] and sy[i - np.uint64(1)] == sy[i]
            if not repeats:
                n += pieces - 1
            else:
                for i in range(un, end):
                    qx = sx[i]
                    qy = sy[i]
                    if sx[n - 1] != qx or sy[n - 1] != qy:
                        sx[n] = qx
                        sy[n] = qy
                        n += 1
    # The closing coordinate repeats the first vertex, which is already the first sample
    # (GEOS appends it last); a vertex equal to the first just before closing is dropped too.
    if n > 1 and sx[n - 1] == sx[0] and sy[n - 1] == sy[0]:
        n -= 1
    return n


@njit(**_JIT)
def _densify_rings(x, y, ring_off, spacing: float):
    """Every ring with its edges split into pieces of at most ``spacing``, closed again.

    The points of ``shapely.segmentize`` (GEOS ``Densifier``, see
    :func:`_fill_ring_samples`) with the closing coordinate appended; GEOS's check of the
    densified polygon's validity is not reproduced (points added on an edge, up to
    rounding, do not make a valid ring invalid, and evalcore checks and repairs after
    reprojection anyway).

    Returns
    -------
    out_x, out_y : float64 (n_out,)
    out_off : int64 (n_rings + 1,)
    """
    n_rings = ring_off.size - 1
    cap = 0
    for r in range(n_rings):
        cap += _count_ring_samples(x, y, ring_off[r], ring_off[r + 1], spacing) + 1
    out_x = np.empty(cap, dtype=np.float64)
    out_y = np.empty(cap, dtype=np.float64)
    out_off = np.zeros(n_rings + 1, dtype=np.int64)
    at = 0
    for r in range(n_rings):
        n = _fill_ring_samples(x, y, ring_off[r], ring_off[r + 1], spacing, out_x[at:], out_y[at:])
        if n > 0:
            out_x[at + n] = out_x[at]
            out_y[at + n] = out_y[at]
            n += 1
        at += n
        out_off[r + 1] = at
    return out_x[:at].copy(), out_y[:at].copy(), out_off


@njit(**_JIT)
def _original_positions(x, y, ring_off, out_x, out_y, out_off):
    """Where each coordinate of the rings ``x, y`` is among their densified samples
    (:func:`_densify_rings`' output ``out_x, out_y, out_off``): the index of a sample equal
    to it, or -1 when there is none.

    The densifier keeps every vertex in order, except one equal to the sample before it
    (and the closing vertex, which its closing sample repeats), so a forward scan of
    each ring's samples finds them all.
    """
    at = np.full(x.size, -1, dtype=np.int64)
    for r in range(ring_off.size - 1):
        k = out_off[r]
        stop = out_off[r + 1]
        for c in range(ring_off[r], ring_off[r + 1]):
            while k < stop and (out_x[k] != x[c] or out_y[k] != y[c]):
                k += 1
            if k == stop:
                break
            at[c] = k
    return at


@njit(**_JIT)
def _ring_samples(x, y, ring_off, ring: int, spacing: float):
    """Samples of one ring and their trapezoidal weights (test and debugging entry point).

    Returns
    -------
    sx, sy : float64 (n,)
        Sample coordinates in ring order, the closing vertex not repeated.
    weight : float64 (n,)
        Half the length of each adjacent sub-segment (cyclic).
    """
    c0 = ring_off[ring]
    c1 = ring_off[ring + 1]
    cap = _count_ring_samples(x, y, c0, c1, spacing)
    sx = np.empty(cap, dtype=np.float64)
    sy = np.empty(cap, dtype=np.float64)
    n = _fill_ring_samples(x, y, c0, c1, spacing, sx, sy)
    weight = np.empty(n, dtype=np.float64)
    _trapezoid_weights(sx, sy, n, weight)
    return sx[:n].copy(), sy[:n].copy(), weight


@njit(**_JIT)
def _trapezoid_weights(sx, sy, n: int, weight) -> None:
    """Trapezoidal weight of each of the ``n`` cyclic samples of a closed ring."""
    if n == 0:
        return
    # weight[k] = (|s_k - s_{k-1}| + |s_{k+1} - s_k|) / 2, indices cyclic: the piece
    # lengths first (weight[k] = |s_{k+1} - s_k|), then each weight from two of them,
    # from the end so that weight[k - 1] is still a length. Unsigned indices and no
    # carried value, so both loops vectorize; the same operations as one cyclic pass.
    last = np.uint64(n - 1)
    for k in range(last):
        dx = sx[k + np.uint64(1)] - sx[k]
        dy = sy[k + np.uint64(1)] - sy[k]
        weight[k] = np.sqrt(dx * dx + dy * dy)
    dx = sx[0] - sx[last]
    dy = sy[0] - sy[last]
    closing = np.sqrt(dx * dx + dy * dy)
    weight[last] = closing
    for i in range(last):
        k = last - i
        weight[k] = 0.5 * (weight[k - np.uint64(1)] + weight[k])
    weight[0] = 0.5 * (closing + weight[0])


@njit(**_JIT)
def _load_segments(
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


@njit(**_JIT)
def _n_boxes(m: int) -> int:
    """Number of block and super-block boxes of ``m`` segments."""
    n_blocks = (m + _BLOCK - 1) // _BLOCK
    return n_blocks + (n_blocks + _SUPER - 1) // _SUPER


@njit(**_JIT)
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


@njit(**_JIT)
def _nearest_full(px, py, m, n_blocks, ax, ay, ex, ey, l2, il2, kminx, kminy, kmaxx, kmaxy) -> int:
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


@njit(**_JIT)
def _sample_distances_into(
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
    best2,
    best,
    region,
    flag,
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
    Candidates are taken from the segments meeting a region around an earlier chunk,
    kept while the chunk grown by its bound stays inside it (the same candidates as a
    search over all segments); the loops over a chunk's samples are written to vectorize
    (docs/boundary.md, "Loops that vectorize").

    ``best2``, ``best`` and ``flag`` are scratch buffers of at least ``chunk`` entries
    (float64, int64, int64), ``region`` one of at least ``m`` (int64).
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
    near = _nearest_full(sx[0], sy[0], m, n_blocks, ax, ay, ex, ey, l2, il2, kminx, kminy, kmaxx, kmaxy)
    dist[0] = _segment_distance(
        sx[0], sy[0], ax[near], ay[near], bx[near], by[near], ex[near], ey[near], l2[near], sl[near]
    )
    n_super = (n_blocks + _SUPER - 1) // _SUPER
    rminx = _INF  # an empty region: the first chunk finds its own
    rminy = _INF
    rmaxx = -_INF
    rmaxy = -_INF
    n_region = 0
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
        # GEOS's distance for a sample whose projection falls strictly inside e0 is
        # |((A.y - P.y) E.x - (A.x - P.x) E.y) / |E|^2| |E|. Where the projection's numerator
        # t = (P - A).E lies safely inside (0, |E|^2), GEOS's ratio r = t / |E|^2 is
        # certainly in (0, 1) after rounding (no underflow to 0, no rounding up to 1), so
        # that formula is what GEOS takes: written without branches, so the compiler can
        # vectorize the division (unsigned indices: no negative-index wraparound, hence no
        # gathers). The other samples ("outside", flag 1) are bounded by their squared
        # distance to e0's nearer end, and get GEOS's full formula only once their nearest
        # segment is known.
        safe = nl2 >= 1e-50
        t_lo = nl2 * 1e-250
        t_hi = nl2 * (1.0 - 2.0**-50)
        ua = np.uint64(k0 + 1)
        ub = np.uint64(k1 + 1)
        for k in range(ua, ub):
            xk = sx[k]
            yk = sy[k]
            dx = xk - nax
            dy = yk - nay
            t = dx * nex + dy * ney
            q = ((nay - yk) * nex - (nax - xk) * ney) / nl2
            fx = xk - nbx
            fy = yk - nby
            inside = safe and t > t_lo and t < t_hi
            dist[k] = abs(q) * nsl
            best2[k - ua] = 0.0 if inside else min(dx * dx + dy * dy, fx * fx + fy * fy)
            flag[k - ua] = not inside
        cminx = sx[k0 + 1]
        cminy = sy[k0 + 1]
        cmaxx = cminx
        cmaxy = cminy
        u = 0.0
        u2 = 0.0
        n_outside = 0
        for k in range(ua, ub):
            xk = sx[k]
            yk = sy[k]
            cminx = min(cminx, xk)
            cminy = min(cminy, yk)
            cmaxx = max(cmaxx, xk)
            cmaxy = max(cmaxy, yk)
            out = flag[k - ua]
            u = max(u, 0.0 if out else dist[k])
            u2 = max(u2, best2[k - ua])
            n_outside += out
        u = max(u, np.sqrt(u2))
        # Slack: rounding is relative to the distance and to the lengths involved (the
        # segment's, the chunk's, the coordinates'), never to zero alone, so a sample
        # lying on the other boundary (U = 0) keeps its touching segments.
        # (The sums are grouped in pairs to shorten the chain of dependent additions: the
        # bound only selects candidates, and its slack dwarfs any rounding.)
        low_abs = abs(cminx) + abs(cminy)
        bound = u * (1.0 + _SLACK) + _SLACK * (
            ((cmaxx - cminx) + (cmaxy - cminy)) + ((nsl + 1e-300) + low_abs)
        )
        bound2 = bound * bound
        # The candidates are the segments whose box is within the bound of the chunk's box.
        # They are picked from the segments meeting a region R around an earlier chunk,
        # found once for several chunks: R holds every segment that can pass the test as
        # long as the chunk's box grown by the bound (and a margin far above rounding)
        # stays inside R. The list is the same as from all segments, in the same order.
        margin = bound + _SLACK * (bound + (low_abs + (abs(cmaxx) + abs(cmaxy))))
        if cminx - margin < rminx or cminy - margin < rminy or cmaxx + margin > rmaxx or cmaxy + margin > rmaxy:
            reach = margin + _REGION_REACH * ((cmaxx - cminx) + (cmaxy - cminy) + bound)
            rminx = cminx - reach
            rminy = cminy - reach
            rmaxx = cmaxx + reach
            rmaxy = cmaxy + reach
            # The segments whose box meets R, in ascending order; blocks and super-blocks
            # whose box misses R are skipped (exact comparisons, no arithmetic).
            n_region = 0
            for w in range(n_super):
                i = n_blocks + w
                if kminx[i] > rmaxx or kmaxx[i] < rminx or kminy[i] > rmaxy or kmaxy[i] < rminy:
                    continue
                for b in range(w * _SUPER, min((w + 1) * _SUPER, n_blocks)):
                    if kminx[b] > rmaxx or kmaxx[b] < rminx or kminy[b] > rmaxy or kmaxy[b] < rminy:
                        continue
                    for s in range(b * _BLOCK, min((b + 1) * _BLOCK, m)):
                        region[n_region] = s
                        n_region += not (sminx[s] > rmaxx or smaxx[s] < rminx or sminy[s] > rmaxy or smaxy[s] < rminy)
        n_cand = 0
        for i in range(n_region):
            s = region[i]
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
            # Nearest candidate of each sample on squared distances, first in order on ties
            # (the candidates come in ascending order; only a smaller value replaces the
            # best). Candidate by candidate over the chunk's samples, with the squared
            # distance and the update written as selects, not branches: the same
            # operations as _point_segment_d2, hence the same numbers, without the
            # mispredicted comparisons. Written inline: a call taking arrays would cost
            # reference counting per chunk.
            cnt = np.uint64(k1 - k0)
            kb = np.uint64(k0 + 1)
            for j in range(cnt):
                best2[j] = _INF
                best[j] = cand[0]
            for i in range(n_cand):
                s = cand[i]
                sax = ax[s]
                say = ay[s]
                sex = ex[s]
                sey = ey[s]
                sl2 = l2[s]
                sil2 = il2[s]
                for j in range(cnt):
                    dx = sx[kb + j] - sax
                    dy = sy[kb + j] - say
                    t = dx * sex + dy * sey
                    fx = dx - sex
                    fy = dy - sey
                    c = dx * sey - dy * sex
                    d_a = dx * dx + dy * dy
                    d_b = fx * fx + fy * fy
                    d_i = c * c * sil2
                    d2 = d_a if t <= 0.0 else (d_b if t >= sl2 else d_i)
                    better = d2 < best2[j]
                    best2[j] = d2 if better else best2[j]
                    best[j] = s if better else best[j]
            # GEOS's distance to each sample's nearest segment, unless it is e0 and the
            # distance to e0 is already there.
            for j in range(cnt):
                bs = best[j]
                if bs != near or flag[j]:
                    dist[kb + j] = _segment_distance(
                        sx[kb + j], sy[kb + j], ax[bs], ay[bs], bx[bs], by[bs], ex[bs], ey[bs], l2[bs], sl[bs]
                    )
            near = best[cnt - np.uint64(1)]
        elif n_outside > 0:
            # e0 is every sample's nearest segment: GEOS's full formula where it was not taken.
            for k in range(ua, ub):
                if flag[k - ua]:
                    dist[k] = _segment_distance(sx[k], sy[k], nax, nay, nbx, nby, nex, ney, nl2, nsl)
        k0 = k1


@njit(**_JIT)
def _max_ring_samples(x, y, ring_off, geom_off, spacing, geoms) -> int:
    """Largest sample count of any ring of the listed geometries."""
    best = 1
    for i in range(geoms.size):
        g = geoms[i]
        for r in range(geom_off[g], geom_off[g + 1]):
            best = max(best, _count_ring_samples(x, y, ring_off[r], ring_off[r + 1], spacing[g]))
    return best


@njit(**_JIT)
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


@njit(**_JIT)
def _pair_distances(x, y, ring_off, geom_off, spacing, geom_a, geom_b, chunk: int, prune: bool):
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
    best2 = np.empty(max(chunk, 1), dtype=np.float64)
    best = np.empty(max(chunk, 1), dtype=np.int64)
    region = np.empty(cap_segments, dtype=np.int64)
    flag = np.empty(max(chunk, 1), dtype=np.int64)
    for p in range(n_pairs):
        h = 0.0
        for side in range(2):
            g_from = geom_a[p] if side == 0 else geom_b[p]
            g_to = geom_b[p] if side == 0 else geom_a[p]
            m = _load_segments(
                x, y, ring_off, geom_off[g_to], geom_off[g_to + 1], ax, ay, bx, by, ex, ey, l2, il2, sl, sminx, sminy, smaxx, smaxy
            )
            n_blocks = _build_blocks(m, sminx, sminy, smaxx, smaxy, kminx, kminy, kmaxx, kmaxy)
            integral = 0.0
            length = 0.0
            for r in range(geom_off[g_from], geom_off[g_from + 1]):
                n = _fill_ring_samples(x, y, ring_off[r], ring_off[r + 1], spacing[g_from], sx, sy)
                _sample_distances_into(
                    sx, sy, n, dist, m, n_blocks, ax, ay, bx, by, ex, ey, l2, il2, sl, sminx, sminy, smaxx, smaxy,
                    kminx, kminy, kmaxx, kmaxy, cand, chunk, prune, best2, best, region, flag,
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


@njit(**_JIT)
def _directed_sample_distances(x, y, ring_off, geom_off, spacing, g_from: int, g_to: int, chunk: int, prune: bool):
    """Every sample of ``g_from``'s boundary with its weight and distance to ``g_to``'s boundary.

    The same code path as :func:`_pair_distances`, unreduced (for tests).

    Returns
    -------
    sx, sy, weight, dist : float64 (n_samples,)
    """
    geoms = np.empty(1, dtype=np.int64)
    geoms[0] = g_from
    cap_samples = _max_ring_samples(x, y, ring_off, geom_off, spacing, geoms)
    total = 0
    for r in range(geom_off[g_from], geom_off[g_from + 1]):
        total += _count_ring_samples(x, y, ring_off[r], ring_off[r + 1], spacing[g_from])
    geoms[0] = g_to
    cap_segments = _max_segments(ring_off, geom_off, geoms)
    cap_blocks = _n_boxes(cap_segments)
    out_x = np.empty(total, dtype=np.float64)
    out_y = np.empty(total, dtype=np.float64)
    out_w = np.empty(total, dtype=np.float64)
    out_d = np.empty(total, dtype=np.float64)
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
    best2 = np.empty(max(chunk, 1), dtype=np.float64)
    best = np.empty(max(chunk, 1), dtype=np.int64)
    region = np.empty(cap_segments, dtype=np.int64)
    flag = np.empty(max(chunk, 1), dtype=np.int64)
    m = _load_segments(x, y, ring_off, geom_off[g_to], geom_off[g_to + 1], ax, ay, bx, by, ex, ey, l2, il2, sl, sminx, sminy, smaxx, smaxy)
    n_blocks = _build_blocks(m, sminx, sminy, smaxx, smaxy, kminx, kminy, kmaxx, kmaxy)
    t = 0
    for r in range(geom_off[g_from], geom_off[g_from + 1]):
        n = _fill_ring_samples(x, y, ring_off[r], ring_off[r + 1], spacing[g_from], sx, sy)
        _sample_distances_into(
            sx, sy, n, dist, m, n_blocks, ax, ay, bx, by, ex, ey, l2, il2, sl, sminx, sminy, smaxx, smaxy,
            kminx, kminy, kmaxx, kmaxy, cand, chunk, prune, best2, best, region, flag,
        )  # fmt: skip
        _trapezoid_weights(sx, sy, n, weight)
        for k in range(n):
            out_x[t] = sx[k]
            out_y[t] = sy[k]
            out_w[t] = weight[k]
            out_d[t] = dist[k]
            t += 1
    return out_x[:t].copy(), out_y[:t].copy(), out_w[:t].copy(), out_d[:t].copy()


# ---------------------------------------------------------------------------
# Length within a tolerance: capsule intervals, interval union, uniform grid
# ---------------------------------------------------------------------------


@njit(**_JIT)
def _clip_linear(alpha: float, beta: float, low: float, high: float, t0: float, t1: float):
    """Intersect ``[t0, t1]`` with ``{t : low <= alpha + beta * t <= high}``."""
    if beta == 0.0:
        if alpha < low or alpha > high:
            return 1.0, 0.0
        return t0, t1
    ta = (low - alpha) / beta
    tb = (high - alpha) / beta
    if beta < 0.0:
        ta, tb = tb, ta
    return max(t0, ta), min(t1, tb)


@njit(**_JIT)
def _disc_interval(fx: float, fy: float, dx: float, dy: float, a: float, tol: float, lo: float, hi: float):
    """Widen ``[lo, hi]`` by ``{t : |F + t D| <= tol}`` (F = P - centre), a quadratic in t."""
    b = dx * fx + dy * fy
    c = fx * fx + fy * fy - tol * tol
    disc = b * b - a * c
    if disc < 0.0:
        return lo, hi
    root = np.sqrt(disc)
    # Stable roots of a t^2 + 2 b t + c = 0: q = -(b + sign(b) root), t = q / a and c / q.
    q = -(b + root) if b >= 0.0 else root - b
    if q == 0.0:  # b == 0 and disc == 0, hence c == 0: the double root t = 0
        t_a = 0.0
        t_b = 0.0
    else:
        t_a = q / a
        t_b = c / q
    return min(lo, t_a, t_b), max(hi, t_a, t_b)


@njit(**_JIT)
def _capsule_interval(
    px: float, py: float, qx: float, qy: float, ux: float, uy: float, vx: float, vy: float, tol: float
):
    """Parameters ``t`` in [0, 1] of the points ``P + t (Q - P)`` within ``tol`` of segment [U, V].

    The distance from a point moving on a line to a convex set is convex in ``t``, so the
    set is one interval: the union of the interval inside the rectangle swept by the
    segment's normal (two pairs of linear constraints) and the intervals inside the two
    end discs (quadratics), i.e. their hull. ``P != Q`` is required.

    Returns
    -------
    lo, hi : float
        The interval, clipped to [0, 1]; ``lo > hi`` when empty.
    """
    dx = qx - px
    dy = qy - py
    a = dx * dx + dy * dy
    lo = _INF
    hi = -_INF
    lo, hi = _disc_interval(px - ux, py - uy, dx, dy, a, tol, lo, hi)
    lo, hi = _disc_interval(px - vx, py - vy, dx, dy, a, tol, lo, hi)
    ex = vx - ux
    ey = vy - uy
    e2 = ex * ex + ey * ey
    if e2 > 0.0:
        fx = px - ux
        fy = py - uy
        half_width = tol * np.sqrt(e2)
        # Along the segment: 0 <= (A(t) - U).E <= |E|^2; across: |E x (A(t) - U)| <= tol |E|.
        t0, t1 = _clip_linear(fx * ex + fy * ey, dx * ex + dy * ey, 0.0, e2, -_INF, _INF)
        if t0 <= t1:
            t0, t1 = _clip_linear(ex * fy - ey * fx, ex * dy - ey * dx, -half_width, half_width, t0, t1)
            if t0 <= t1:
                lo = min(lo, t0)
                hi = max(hi, t1)
    return max(lo, 0.0), min(hi, 1.0)


@njit(**_JIT)
def _union_length(lo, hi, n: int, order) -> float:
    """Total length of the union of the intervals ``[lo[i], hi[i]]``, ``i < n`` (all nonempty)."""
    if n == 0:
        return 0.0
    if n <= 32:
        # Insertion sort of the indices by (lo, hi): usually only a few capsules reach a segment.
        for i in range(n):
            order[i] = i
        for i in range(1, n):
            j = i
            v = order[i]
            while j > 0 and (lo[order[j - 1]] > lo[v] or (lo[order[j - 1]] == lo[v] and hi[order[j - 1]] > hi[v])):
                order[j] = order[j - 1]
                j -= 1
            order[j] = v
    else:
        # Sorted by lo only: among equal lo the merge below gives the same result in any order.
        order[:n] = np.argsort(lo[:n], kind="mergesort")
    total = 0.0
    cur_lo = lo[order[0]]
    cur_hi = hi[order[0]]
    for i in range(1, n):
        k = order[i]
        if lo[k] <= cur_hi:
            if hi[k] > cur_hi:
                cur_hi = hi[k]
        else:
            total += cur_hi - cur_lo
            cur_lo = lo[k]
            cur_hi = hi[k]
    total += cur_hi - cur_lo
    return total


@njit(**_JIT)
def _segment_length_within(px, py, qx, qy, ox, oy, seg_start, cand, n_cand, tol, lo, hi, order) -> float:
    """Length of [P, Q] within ``tol`` of the union of the candidate segments (metres)."""
    dx = qx - px
    dy = qy - py
    length = np.sqrt(dx * dx + dy * dy)
    if length == 0.0:
        return 0.0
    n = 0
    minx = min(px, qx) - tol
    maxx = max(px, qx) + tol
    miny = min(py, qy) - tol
    maxy = max(py, qy) + tol
    for i in range(n_cand):
        c = seg_start[cand[i]]
        ux = ox[c]
        uy = oy[c]
        vx = ox[c + 1]
        vy = oy[c + 1]
        # Boxes farther apart than tol: nothing within tol (a cheap, exact rejection).
        if max(ux, vx) < minx or min(ux, vx) > maxx or max(uy, vy) < miny or min(uy, vy) > maxy:
            continue
        a, b = _capsule_interval(px, py, qx, qy, ux, uy, vx, vy, tol)
        if a <= b:
            if a == 0.0 and b == 1.0:
                return length
            lo[n] = a
            hi[n] = b
            n += 1
    return length * _union_length(lo, hi, n, order)


@njit(**_JIT)
def _mean_segment_length(x, y, ring_off) -> float:
    """Mean length of the segments of flat rings (0.0 without segments): the grid's scale only.

    Each ring's segments join consecutive coordinates; no segment spans two rings.
    """
    total = 0.0
    n_seg = 0
    for r in range(ring_off.shape[0] - 1):
        for i in range(ring_off[r] + 1, ring_off[r + 1]):
            dx = x[i] - x[i - 1]
            dy = y[i] - y[i - 1]
            total += np.sqrt(dx * dx + dy * dy)
        n_seg += max(ring_off[r + 1] - ring_off[r] - 1, 0)
    return total / n_seg if n_seg > 0 else 0.0


@njit(**_JIT)
def _radix_argsort(keys):
    """Stable argsort of non-negative int64 keys (LSD radix sort, 16-bit digits)."""
    n = keys.size
    order = np.arange(n).astype(np.int64)
    if n <= 1:
        return order
    top = 0
    for i in range(n):
        if keys[i] > top:
            top = keys[i]
    cur = keys.copy()
    tmp_keys = np.empty(n, dtype=np.int64)
    tmp_order = np.empty(n, dtype=np.int64)
    count = np.empty(65536, dtype=np.int64)
    shift = 0
    while (top >> shift) > 0:
        count[:] = 0
        for i in range(n):
            count[(cur[i] >> shift) & 0xFFFF] += 1
        start = 0
        for d in range(65536):
            c = count[d]
            count[d] = start
            start += c
        for i in range(n):
            d = (cur[i] >> shift) & 0xFFFF
            j = count[d]
            count[d] = j + 1
            tmp_keys[j] = cur[i]
            tmp_order[j] = order[i]
        cur, tmp_keys = tmp_keys, cur
        order, tmp_order = tmp_order, order
        shift += 16
        if shift >= 63:
            break
    return order


@njit(**_JIT)
def _hash_slot(key: int, mask: int) -> int:
    """Slot of a cell key (0 <= key < 2**56) in an open-addressing table of ``mask + 1`` slots.

    Multiplicative hashing of the two 28-bit halves; every product stays below 2**60,
    so nothing overflows (also when run as plain Python).
    """
    h = ((key & 0xFFFFFFF) * 0x9E3779B1) ^ ((key >> 28) * 0x85EBCA77)
    return (h ^ (h >> 29)) & mask


@njit(**_JIT)
def _build_cell_table(cell_keys):
    """Open-addressing hash table from cell key to its position in ``cell_keys`` (distinct, >= 0)."""
    size = 16
    while size < 2 * cell_keys.size:
        size *= 2
    mask = size - 1
    table_keys = np.full(size, -1, dtype=np.int64)
    table_cell = np.empty(size, dtype=np.int64)
    for i in range(cell_keys.size):
        slot = _hash_slot(cell_keys[i], mask)
        while table_keys[slot] != -1:
            slot = (slot + 1) & mask
        table_keys[slot] = cell_keys[i]
        table_cell[slot] = i
    return table_keys, table_cell, mask


@njit(**_JIT)
def _find_cell(table_keys, table_cell, mask: int, key: int) -> int:
    """Position of ``key`` in the cell list, or -1."""
    slot = _hash_slot(key, mask)
    while True:
        k = table_keys[slot]
        if k == key:
            return table_cell[slot]
        if k == -1:
            return -1
        slot = (slot + 1) & mask


@njit(**_JIT)
def _cell_range(lo: float, hi: float, origin: float, cell: float, n_cells: int):
    """Indices of the first and last grid cells meeting ``[lo, hi]`` along one axis."""
    i0 = int(np.floor((lo - origin) / cell))
    i1 = int(np.floor((hi - origin) / cell))
    return max(i0, 0), min(i1, n_cells - 1)


@njit(**_JIT)
def _boundary_within_tolerance(qx, qy, q_ring_off, q_geom_off, ox, oy, o_ring_off, tol: float, cell: float):
    """Length of each query boundary within ``tol`` of the union of all other segments.

    Parameters
    ----------
    qx, qy : float64 (n_q_coords,)
        Query ring coordinates, metres.
    q_ring_off : int64 (n_q_rings + 1,)
    q_geom_off : int64 (n_q_geoms + 1,)
    ox, oy : float64 (n_o_coords,)
        Coordinates of the other boundaries' rings, metres.
    o_ring_off : int64 (n_o_rings + 1,)
    tol : float
        Tolerance, metres (>= 0).
    cell : float
        Side of the uniform grid's square cells, metres (> 0).

    Returns
    -------
    float64 (n_q_geoms,)
        Per query geometry: sum over its segments of the length inside the union of the
        capsules of radius ``tol`` around the other segments, metres.

    Notes
    -----
    Candidate pairs come from a uniform grid: each other segment, cut into pieces no
    longer than ``cell``, is registered in every cell its piece's box grown by ``tol``
    meets; each query segment (also cut into pieces) collects the segments registered in
    the cells its pieces' boxes meet. Any point within ``tol`` of a segment lies in the
    grown box of one of its pieces, so no pair within ``tol`` is missed. The (cell key,
    segment) registrations are sorted by a radix sort, and cells are found by binary
    search, so memory is proportional to the registrations, not to the extent.
    """
    n_q = q_geom_off.size - 1
    out = np.zeros(n_q, dtype=np.float64)
    n_o_rings = o_ring_off.size - 1
    n_o_seg = 0
    for r in range(n_o_rings):
        n_o_seg += max(o_ring_off[r + 1] - o_ring_off[r] - 1, 0)
    if n_q == 0 or n_o_seg == 0 or qx.size == 0:
        return out
    seg_start = np.empty(n_o_seg, dtype=np.int64)
    s = 0
    for r in range(n_o_rings):
        for c in range(o_ring_off[r], o_ring_off[r + 1] - 1):
            seg_start[s] = c
            s += 1
    # Grid over the query coordinates grown by the tolerance: other segments outside it
    # can never be within tol of a query point.
    minx = _INF
    miny = _INF
    maxx = -_INF
    maxy = -_INF
    for i in range(qx.size):
        minx = min(minx, qx[i])
        miny = min(miny, qy[i])
        maxx = max(maxx, qx[i])
        maxy = max(maxy, qy[i])
    grow = tol * (1.0 + _SLACK) + cell * _SLACK
    origin_x = minx - grow
    origin_y = miny - grow
    ncx = int(np.floor((maxx + grow - origin_x) / cell)) + 1
    ncy = int(np.floor((maxy + grow - origin_y) / cell)) + 1
    # Registrations: count, then fill.
    n_reg = 0
    for pass_ in range(2):
        if pass_ == 1:
            keys = np.empty(n_reg, dtype=np.int64)
            ids = np.empty(n_reg, dtype=np.int64)
            n_reg = 0
        else:
            keys = np.empty(0, dtype=np.int64)
            ids = np.empty(0, dtype=np.int64)
        for j in range(n_o_seg):
            c = seg_start[j]
            x0 = ox[c]
            y0 = oy[c]
            x1 = ox[c + 1]
            y1 = oy[c + 1]
            if max(x0, x1) < origin_x - grow or min(x0, x1) > maxx + 2 * grow:
                continue
            if max(y0, y1) < origin_y - grow or min(y0, y1) > maxy + 2 * grow:
                continue
            dx = x1 - x0
            dy = y1 - y0
            pieces = max(int(np.ceil(np.sqrt(dx * dx + dy * dy) / cell)), 1)
            for k in range(pieces):
                ta = k / pieces
                tb = (k + 1) / pieces
                xa = x0 + ta * dx
                ya = y0 + ta * dy
                xb = x1 if k == pieces - 1 else x0 + tb * dx
                yb = y1 if k == pieces - 1 else y0 + tb * dy
                i0, i1 = _cell_range(min(xa, xb) - grow, max(xa, xb) + grow, origin_x, cell, ncx)
                k0, k1 = _cell_range(min(ya, yb) - grow, max(ya, yb) + grow, origin_y, cell, ncy)
                for ci in range(i0, i1 + 1):
                    for ck in range(k0, k1 + 1):
                        if pass_ == 1:
                            keys[n_reg] = ci * ncy + ck
                            ids[n_reg] = j
                        n_reg += 1
    order = _radix_argsort(keys)
    sorted_ids = np.empty(n_reg, dtype=np.int64)
    n_cells = 0
    cell_keys = np.empty(n_reg, dtype=np.int64)
    cell_start = np.empty(n_reg + 1, dtype=np.int64)
    for i in range(n_reg):
        kk = keys[order[i]]
        sorted_ids[i] = ids[order[i]]
        if n_cells == 0 or cell_keys[n_cells - 1] != kk:
            cell_keys[n_cells] = kk
            cell_start[n_cells] = i
            n_cells += 1
    cell_start[n_cells] = n_reg
    cell_keys = cell_keys[:n_cells]
    table_keys, table_cell, mask = _build_cell_table(cell_keys)
    # Queries.
    stamp = np.full(n_o_seg, -1, dtype=np.int64)
    cand = np.empty(n_o_seg, dtype=np.int64)
    lo = np.empty(n_o_seg, dtype=np.float64)
    hi = np.empty(n_o_seg, dtype=np.float64)
    order_buf = np.empty(n_o_seg, dtype=np.int64)
    q_seg = 0
    for g in range(n_q):
        total = 0.0
        for r in range(q_geom_off[g], q_geom_off[g + 1]):
            for c in range(q_ring_off[r], q_ring_off[r + 1] - 1):
                px = qx[c]
                py = qy[c]
                ex = qx[c + 1]
                ey = qy[c + 1]
                dx = ex - px
                dy = ey - py
                pieces = max(int(np.ceil(np.sqrt(dx * dx + dy * dy) / cell)), 1)
                n_cand = 0
                for k in range(pieces):
                    ta = k / pieces
                    tb = (k + 1) / pieces
                    xa = px + ta * dx
                    ya = py + ta * dy
                    xb = ex if k == pieces - 1 else px + tb * dx
                    yb = ey if k == pieces - 1 else py + tb * dy
                    i0, i1 = _cell_range(min(xa, xb), max(xa, xb), origin_x, cell, ncx)
                    k0, k1 = _cell_range(min(ya, yb), max(ya, yb), origin_y, cell, ncy)
                    for ci in range(i0, i1 + 1):
                        for ck in range(k0, k1 + 1):
                            key = ci * ncy + ck
                            h = _find_cell(table_keys, table_cell, mask, key)
                            if h < 0:
                                continue
                            for e in range(cell_start[h], cell_start[h + 1]):
                                j = sorted_ids[e]
                                if stamp[j] != q_seg:
                                    stamp[j] = q_seg
                                    cand[n_cand] = j
                                    n_cand += 1
                total += _segment_length_within(
                    px, py, ex, ey, ox, oy, seg_start, cand, n_cand, tol, lo, hi, order_buf
                )
                q_seg += 1
        out[g] = total
    return out


# ---------------------------------------------------------------------------
# Taking geometries of flat rings
# ---------------------------------------------------------------------------


@njit(**_JIT)
def _take_rings(x, y, ring_off, ring_ext, geom_off, rows):
    """The flat rings of geometries ``rows`` (in that order, repeats allowed): what
    flattening ``geoms[rows]`` would give (:class:`evalcore.rings.Rings`)."""
    n_rings = 0
    n_coords = 0
    for g in rows:
        n_rings += geom_off[g + 1] - geom_off[g]
        n_coords += ring_off[geom_off[g + 1]] - ring_off[geom_off[g]]
    out_x = np.empty(n_coords, dtype=np.float64)
    out_y = np.empty(n_coords, dtype=np.float64)
    out_ring_off = np.empty(n_rings + 1, dtype=np.int64)
    out_ring_ext = np.empty(n_rings, dtype=np.bool_)
    out_geom_off = np.empty(rows.shape[0] + 1, dtype=np.int64)
    out_ring_off[0] = 0
    out_geom_off[0] = 0
    r_out = 0
    c_out = 0
    for k in range(rows.shape[0]):
        g = rows[k]
        for r in range(geom_off[g], geom_off[g + 1]):
            for c in range(ring_off[r], ring_off[r + 1]):
                out_x[c_out] = x[c]
                out_y[c_out] = y[c]
                c_out += 1
            out_ring_ext[r_out] = ring_ext[r]
            r_out += 1
            out_ring_off[r_out] = c_out
        out_geom_off[k + 1] = r_out
    return out_x, out_y, out_ring_off, out_ring_ext, out_geom_off


@njit(**_JIT)
def _geometry_lengths(x, y, ring_off, ring_ext, geom_off):
    """Boundary length of each geometry of flat rings, added as GEOS adds it (the same bits
    as ``shapely.length``): a ring's segments in order from 0.0, a polygon's shell then its
    holes, a multipolygon's polygons in order."""
    n = geom_off.shape[0] - 1
    out = np.zeros(n, dtype=np.float64)
    for g in range(n):
        total = 0.0
        part = 0.0
        for r in range(geom_off[g], geom_off[g + 1]):
            if ring_ext[r] and r > geom_off[g]:
                total += part
                part = 0.0
            length = 0.0
            c0 = ring_off[r]
            for c in range(c0 + 1, ring_off[r + 1]):
                dx = x[c] - x[c - 1]
                dy = y[c] - y[c - 1]
                length += np.sqrt(dx * dx + dy * dy)
            part += length
        if geom_off[g + 1] > geom_off[g]:
            total += part
        out[g] = total
    return out


# ---------------------------------------------------------------------------
# Box joins
# ---------------------------------------------------------------------------


@njit(**_JIT)
def _meeting_boxes(a_lo_x, a_lo_y, a_hi_x, a_hi_y, b_lo_x, b_lo_y, b_hi_x, b_hi_y, origin_x: float, origin_y: float,
                   cell: float, ncx: int, ncy: int):
    """Every pair of closed boxes ``(i, j)`` that meet (touching counts), each pair once.

    A uniform grid of ``ncx`` x ``ncy`` square cells of side ``cell`` from
    ``(origin_x, origin_y)`` (cells beyond the edges are clamped to the edge ones): every
    ``b`` box is registered in the cells it covers, and every ``a`` box tests the ``b``
    boxes of the cells it covers. A pair is reported by one cell only, the cell of the low
    corner of the two boxes' intersection (which both cover), so no pair comes twice
    and no sort is needed. The grid affects speed only. The boxes must be finite.

    Returns
    -------
    i, j : int64 (n_pairs,)
        Indices into the ``a`` and ``b`` lists, in the order of ``a``, then of the cells.
    """
    n = a_lo_x.shape[0]
    m = b_lo_x.shape[0]
    count, ids = _cell_lists(b_lo_x, b_lo_y, b_hi_x, b_hi_y, origin_x, origin_y, cell, ncx, ncy)
    cap = 4 * (n + m) + 16
    out_i = np.empty(cap, dtype=np.int64)
    out_j = np.empty(cap, dtype=np.int64)
    k = 0
    for i in range(n):
        i0, i1 = _cell_range(a_lo_x[i], a_hi_x[i], origin_x, cell, ncx)
        k0, k1 = _cell_range(a_lo_y[i], a_hi_y[i], origin_y, cell, ncy)
        for ci in range(i0, i1 + 1):
            for ck in range(k0, k1 + 1):
                c = ci * ncy + ck
                for f in range(count[c], count[c + 1]):
                    e = ids[f]
                    if b_lo_x[e] > a_hi_x[i] or a_lo_x[i] > b_hi_x[e] or b_lo_y[e] > a_hi_y[i] or a_lo_y[i] > b_hi_y[e]:
                        continue
                    # Report the pair in the cell of the intersection's low corner only.
                    cx, _ = _cell_range(max(a_lo_x[i], b_lo_x[e]), max(a_lo_x[i], b_lo_x[e]), origin_x, cell, ncx)
                    cy, _ = _cell_range(max(a_lo_y[i], b_lo_y[e]), max(a_lo_y[i], b_lo_y[e]), origin_y, cell, ncy)
                    if cx != ci or cy != ck:
                        continue
                    if k == cap:
                        cap *= 2
                        out_i = _grown(out_i, cap)
                        out_j = _grown(out_j, cap)
                    out_i[k] = i
                    out_j[k] = e
                    k += 1
    return out_i[:k].copy(), out_j[:k].copy()


@njit(**_JIT)
def _cell_lists(lo_x, lo_y, hi_x, hi_y, origin_x: float, origin_y: float, cell: float, ncx: int, ncy: int):
    """Every box registered in each grid cell it covers (as :func:`_meeting_boxes` lays the grid).

    Returns
    -------
    start : int64 (ncx * ncy + 1,)
        Cell ``c``'s boxes are ``ids[start[c]:start[c + 1]]``, in box order.
    ids : int64
    """
    n_cells = ncx * ncy
    start = np.zeros(n_cells + 1, dtype=np.int64)
    fill = start[:-1]
    ids = np.empty(0, dtype=np.int64)
    for pass_ in range(2):  # count, then fill
        if pass_ == 1:
            for c in range(n_cells):
                start[c + 1] += start[c]
            fill = start[:-1].copy()
            ids = np.empty(start[n_cells], dtype=np.int64)
        for e in range(lo_x.shape[0]):
            i0, i1 = _cell_range(lo_x[e], hi_x[e], origin_x, cell, ncx)
            k0, k1 = _cell_range(lo_y[e], hi_y[e], origin_y, cell, ncy)
            for ci in range(i0, i1 + 1):
                for ck in range(k0, k1 + 1):
                    c = ci * ncy + ck
                    if pass_ == 0:
                        start[c + 1] += 1
                    else:
                        ids[fill[c]] = e
                        fill[c] += 1
    return start, ids


@njit(**_JIT)
def _grown(values, cap: int):
    """``values`` copied into a new array of ``cap`` entries (the rest unset)."""
    out = np.empty(cap, dtype=values.dtype)
    out[: values.shape[0]] = values
    return out

"""Benchmark of the boundary step: evalcore's kernels against a straightforward shapely baseline.

Run ``.venv/bin/python -m benchmarks.bench_boundary [--n 50000] [--baseline-n 2000]``.

Data: ``evalcore.synth.make_layers`` (reference in EPSG:4326, predictions in
EPSG:5070, fields in UTM zones 12-14), or, when that module is missing, jittered
rectangles generated here in EPSG:32613. Matched pairs: IoU >= 0.5 in the equal-area
CRS, greedy one-to-one; the first ``--n`` pairs are kept.

Steps (each compiled by a warm-up call before it is timed):

``distances`` (Δ = 1 m and Δ = None)
    evalcore: :func:`evalcore.boundary.pair_boundary_distances` on the pairs (the
    prediction already in the reference's zone). Baseline: ``shapely.segmentize``, the
    vertices as ``shapely.points``, ``shapely.distance`` to the other boundary
    (vectorised over all samples), trapezoidal weights in numpy. Same samples, so the
    results must agree to 1e-9 relative.
``tolerance`` (recall: reference boundaries vs predicted; precision: the reverse)
    evalcore: :func:`evalcore.boundary.tolerance_lengths` (candidate search,
    reprojection and kernel). Baseline: the same candidates reprojected, then per row
    ``length(intersection(boundary, buffer(lines of the others within tol, tol, quad_segs=64)))``
    (vectorised over rows). They agree within the buffer's polygonal error.

The baseline is timed on the first ``--baseline-n`` pairs (rows) and scaled linearly
to the full size; the output says so. Nothing here is part of the library.

``--compare-previous`` times only the distance kernel, the current one against the
frozen ones from before issue 29 (:mod:`benchmarks.boundary_previous`) and after its
first pass (:mod:`benchmarks.boundary_pass1`), in this one process: CPU time
(``time.process_time``, the machine is shared) of each kernel call, interleaved,
``--runs`` times at Δ = 1 m and at Δ = None, the medians and the ratios; it also checks
that all return the same numbers, bit for bit. Then (unless ``--no-anchor``) the
anchor's default run with the current and with the first pass's kernel, and the GEOS
floor, interleaved ``--anchor-runs`` times (:func:`compare_anchor`).
"""

from __future__ import annotations

import argparse
import math
import time

import geopandas
import numpy as np
import shapely

from benchmarks.boundary_pass1 import _pair_distances_pass1
from benchmarks.boundary_previous import _pair_distances_previous
from evalcore import _kernels
from evalcore.boundary import (
    _flatten,
    _tolerance_candidates,
    boundary_spacing,
    pair_boundary_distances,
    tolerance_lengths,
)
from evalcore.crs import to_utm, transform_geoms, utm_crs
from evalcore.layer import PreparedLayer
from evalcore.prepare import prepare_layer

PAIRS_PER_REF = 0.8  # share of reference fields that end up matched in make_layers
REPEAT = 2  # evalcore steps: best of REPEAT runs (the baseline runs once)


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


def _fallback_layers(n_ref: int, seed: int) -> tuple[geopandas.GeoDataFrame, geopandas.GeoDataFrame]:
    """Jittered rectangles on a grid in EPSG:32613 (used only without evalcore.synth)."""
    rng = np.random.default_rng(seed)
    side = int(math.ceil(math.sqrt(n_ref)))
    i = np.arange(n_ref)
    x0 = 400_000.0 + (i % side) * 400.0
    y0 = 4_200_000.0 + (i // side) * 400.0
    w = rng.uniform(100, 350, n_ref)
    h = rng.uniform(100, 350, n_ref)
    ref = shapely.box(x0, y0, x0 + w, y0 + h)
    dense = shapely.segmentize(ref, 25.0)
    pred = shapely.transform(dense, lambda c: c + rng.normal(0.0, 1.0, c.shape) + rng.normal(0, 2, 2))
    pred = shapely.make_valid(pred)
    crs = "EPSG:32613"
    return geopandas.GeoDataFrame(geometry=pred, crs=crs), geopandas.GeoDataFrame(geometry=ref, crs=crs)


def make_data(n_pairs: int, seed: int) -> tuple[PreparedLayer, PreparedLayer, np.ndarray, np.ndarray, str]:
    """Prepared layers and the matched pairs (at most ``n_pairs``)."""
    n_ref = int(math.ceil(n_pairs / PAIRS_PER_REF)) + 50
    try:
        from evalcore.synth import make_layers

        pred_gdf, ref_gdf = make_layers(n_ref, seed)
        source = f"evalcore.synth.make_layers({n_ref}, seed={seed})"
    except ImportError:
        pred_gdf, ref_gdf = _fallback_layers(n_ref, seed)
        source = f"jittered rectangles generated in the benchmark ({n_ref}, seed={seed}; evalcore.synth missing)"
    ref = prepare_layer(ref_gdf, "reference")
    pred = prepare_layer(pred_gdf, "predicted")
    tree = shapely.STRtree(pred.geoms_ea)
    i_ref, i_pred = tree.query(ref.geoms_ea, predicate="intersects")
    inter = shapely.area(shapely.intersection(ref.geoms_ea[i_ref], pred.geoms_ea[i_pred]))
    iou = inter / (ref.area_m2[i_ref] + pred.area_m2[i_pred] - inter)
    order = np.lexsort((i_pred, i_ref, -iou))
    taken_r = np.zeros(len(ref), bool)
    taken_p = np.zeros(len(pred), bool)
    pairs = []
    for k in order:
        if iou[k] < 0.5:
            break
        r, p = i_ref[k], i_pred[k]
        if not taken_r[r] and not taken_p[p]:
            taken_r[r] = taken_p[p] = True
            pairs.append((r, p))
    pairs = np.array(sorted(pairs), dtype=np.int64)[:n_pairs]
    return ref, pred, pairs[:, 0], pairs[:, 1], source


# ---------------------------------------------------------------------------
# Baselines
# ---------------------------------------------------------------------------


def baseline_distances(ref_geoms, pred_geoms, spacing_m, batch=500):
    """Per-sample ``shapely.distance`` at the samples of ``shapely.segmentize``."""
    n = len(ref_geoms)
    out_h = np.empty(n)
    out_mean = np.empty(n)
    for start in range(0, n, batch):
        r = ref_geoms[start : start + batch]
        p = pred_geoms[start : start + batch]
        m = len(r)
        geoms = np.concatenate([r, p])
        dense = shapely.segmentize(geoms, boundary_spacing(shapely.length(geoms), spacing_m))
        parts, part_geom = shapely.get_parts(dense, return_index=True)
        rings, ring_part = shapely.get_rings(parts, return_index=True)
        ring_geom = part_geom[ring_part]
        coords, coord_ring = shapely.get_coordinates(rings, return_index=True)
        last = np.cumsum(shapely.get_num_coordinates(rings)) - 1
        piece = np.hypot(np.diff(coords[:, 0]), np.diff(coords[:, 1]))  # coord k -> k + 1
        is_sample = np.ones(len(coords), bool)
        is_sample[last] = False
        first = np.r_[0, last[:-1] + 1]
        before = np.empty(len(coords))  # length of the piece ending at each coord
        before[1:] = piece
        before[first] = piece[last - 1]  # a ring's first sample follows its closing piece
        after = np.r_[piece, 0.0]
        weight = (0.5 * (before + after))[is_sample]
        sample_geom = ring_geom[coord_ring[is_sample]]
        other = np.where(sample_geom < m, sample_geom + m, sample_geom - m)
        bnd = shapely.boundary(geoms)
        dist = shapely.distance(shapely.points(coords[is_sample]), bnd[other])
        integral = np.bincount(sample_geom, weight * dist, minlength=2 * m)
        length = np.bincount(sample_geom, weight, minlength=2 * m)
        starts = np.flatnonzero(np.r_[True, sample_geom[1:] != sample_geom[:-1]])
        dmax = np.maximum.reduceat(dist, starts)
        out_h[start : start + m] = np.maximum(dmax[:m], dmax[m:])
        out_mean[start : start + m] = (integral[:m] + integral[m:]) / (length[:m] + length[m:])
    return out_h, out_mean


def baseline_tolerance(layer: PreparedLayer, other: PreparedLayer, tolerance_m: float, rows) -> np.ndarray:
    """``length(intersection(boundary, buffer(nearby boundaries, tol, quad_segs=64)))`` per row."""
    sub = layer.take(rows)
    out = np.zeros(len(sub))
    i_layer, i_other = _tolerance_candidates(sub, other, tolerance_m)
    for code in np.unique(sub.utm_epsg):
        zone_rows = np.flatnonzero(sub.utm_epsg == code)
        cand = np.unique(i_other[sub.utm_epsg[i_layer] == code])
        if len(cand) == 0:
            continue
        # Like evalcore: candidates already in this zone are used as they are, the
        # others reprojected from their source geometry.
        other_utm = other.geoms_utm[cand].copy()
        foreign = other.utm_epsg[cand] != code
        if foreign.any():
            other_utm[foreign] = transform_geoms(other.geoms_source[cand[foreign]], other.crs, utm_crs(int(code)))
        geoms = sub.geoms_utm[zone_rows]
        q, o = shapely.STRtree(other_utm).query(geoms, predicate="dwithin", distance=tolerance_m)
        if len(q) == 0:
            continue
        lines, owner = shapely.get_parts(shapely.boundary(other_utm[o]), return_index=True)
        has, compact = np.unique(q[owner], return_inverse=True)
        nearby = shapely.multilinestrings(lines, indices=compact)
        zone = shapely.buffer(nearby, tolerance_m, quad_segs=64)
        out[zone_rows[has]] = shapely.length(shapely.intersection(shapely.boundary(geoms[has]), zone))
    return out


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


def timed(func, *args, repeat=1, **kwargs):
    """Best wall time of ``repeat`` calls (the machine is shared) and the last result."""
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = func(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
    return best, result


def rel_diff(a, b) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = np.maximum(np.abs(a), np.abs(b))
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.where(scale > 0, np.abs(a - b) / scale, 0.0)
    return float(np.nanmax(d)) if d.size else 0.0


def compare_previous(ref_geoms, pred_geoms, runs: int) -> None:
    """CPU time of the current distance kernel and the two frozen ones on the same pairs, interleaved."""
    n = len(ref_geoms)
    geoms = np.concatenate([ref_geoms, pred_geoms])
    x, y, ring_off, geom_off = _flatten(geoms)
    a = np.arange(n, dtype=np.int64)
    perimeter = shapely.length(geoms)
    kernels = (
        ("before 29", _pair_distances_previous),
        ("first pass", _pair_distances_pass1),
        ("current", _kernels._pair_distances),
    )
    header = f"{'kernel CPU time, s':34s} " + " ".join(f"{name:>10s}" for name, _ in kernels)
    print(f"{header}  ratios to current  identical  (median of {runs} runs)")
    for spacing in (1.0, None):
        step = boundary_spacing(perimeter, spacing)
        args = (x, y, ring_off, geom_off, step, a, a + n, 16, True)
        for _, kernel in kernels:
            kernel(*args[:5], a[:2], a[:2] + n, 16, True)  # compile or load from cache
        times: dict[str, list[float]] = {name: [] for name, _ in kernels}
        results = {}
        for _ in range(runs):
            for name, kernel in kernels:
                t0 = time.process_time()
                results[name] = kernel(*args)
                times[name].append(time.process_time() - t0)
        same = all(
            np.array_equal(p, c) for name, _ in kernels[:-1] for p, c in zip(results[name], results["current"])
        )
        med = {name: float(np.median(t)) for name, t in times.items()}
        n_samples = float(np.sum(perimeter / step))
        label = f"distances Δ={'1 m' if spacing else 'None'} (~{n_samples / 1e6:.0f}M samples)"
        ratios = " ".join(f"{med[name] / med['current']:.2f}" for name, _ in kernels[:-1])
        print(f"{label:34s} " + " ".join(f"{med[name]:10.3f}" for name, _ in kernels) + f"  {ratios:>17s}  {same}")


def compare_anchor(runs: int) -> None:
    """The anchor's default run with the current and the first pass's kernel, and the GEOS floor, interleaved.

    ``evalcore.evaluate`` on the ``make bench`` anchor data (one process), once with the
    current distance kernel and once with the first pass's (swapped in for the run), and
    ``benchmarks.baseline.geos_floor``, each ``runs`` times in turn: CPU and wall time
    medians, the CPU time of the distance step (``_pair_distances_batch``) and the ratios
    to the floor; the two runs' metrics must be identical.
    """
    import evalcore
    from benchmarks.__main__ import anchor_layers
    from benchmarks.baseline import geos_floor
    from evalcore import boundary

    current = _kernels._pair_distances
    spent = [0.0]
    batch = boundary._pair_distances_batch

    def timed_batch(*args, **kwargs):
        t0 = time.process_time()
        out = batch(*args, **kwargs)
        spent[0] += time.process_time() - t0
        return out

    pred, ref = anchor_layers()
    variants = (("current", current), ("first pass", _pair_distances_pass1))
    boundary._pair_distances_batch = timed_batch
    try:
        for _, kernel in variants:
            _kernels._pair_distances = kernel
            evalcore.evaluate(pred.iloc[:500], ref.iloc[:500])  # compile or load from cache
        cpu: dict[str, list[float]] = {"current": [], "first pass": [], "GEOS floor": []}
        wall: dict[str, list[float]] = {name: [] for name in cpu}
        step: dict[str, list[float]] = {name: [] for name, _ in variants}
        metrics = {}
        for _ in range(runs):
            for name, kernel in variants:
                _kernels._pair_distances = kernel
                spent[0] = 0.0
                c0, w0 = time.process_time(), time.perf_counter()
                metrics[name] = evalcore.evaluate(pred, ref)
                cpu[name].append(time.process_time() - c0)
                wall[name].append(time.perf_counter() - w0)
                step[name].append(spent[0])
            c0, w0 = time.process_time(), time.perf_counter()
            geos_floor(pred, ref)
            cpu["GEOS floor"].append(time.process_time() - c0)
            wall["GEOS floor"].append(time.perf_counter() - w0)
    finally:
        _kernels._pair_distances = current
        boundary._pair_distances_batch = batch
    same = metrics["current"] == metrics["first pass"]
    floor_cpu = float(np.median(cpu["GEOS floor"]))
    floor_wall = float(np.median(wall["GEOS floor"]))
    print(f"\nanchor ({len(ref)} reference, {len(pred)} predicted fields), default options, one process, median of {runs}:")
    print(f"{'run':34s} {'CPU s':>8s} {'wall s':>8s} {'distance step CPU s':>20s} {'CPU / floor':>12s} {'wall / floor':>13s}")
    for name in cpu:
        c = float(np.median(cpu[name]))
        w = float(np.median(wall[name]))
        d = f"{np.median(step[name]):20.3f}" if name in step else f"{'':20s}"
        label = f"default, {name} kernel" if name in step else name
        print(f"{label:34s} {c:8.2f} {w:8.2f} {d} {c / floor_cpu:12.2f} {w / floor_wall:13.2f}")
    print(f"metrics identical: {same}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000, help="matched pairs (default 50000)")
    parser.add_argument("--baseline-n", type=int, default=2_000, help="pairs/rows the baseline is timed on")
    parser.add_argument("--tolerance", type=float, default=10.0, help="tolerance, metres")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compare-previous", action="store_true", help="time only the current against the previous distance kernel"
    )
    parser.add_argument("--runs", type=int, default=7, help="runs of each kernel with --compare-previous (default 7)")
    parser.add_argument(
        "--anchor-runs", type=int, default=5, help="runs of the anchor comparison with --compare-previous (default 5)"
    )
    parser.add_argument(
        "--no-anchor", action="store_true", help="with --compare-previous: skip the anchor's default run against the floor"
    )
    args = parser.parse_args(argv)

    t_data, (ref, pred, i_ref, i_pred, source) = timed(make_data, args.n, args.seed)
    n = len(i_ref)
    nb = min(args.baseline_n, n)
    print(f"data: {source}; {len(ref)} reference and {len(pred)} predicted fields, {n} matched pairs ({t_data:.1f} s)")

    # The pairs in the reference's zone (what matched_pair_distances does before the kernel).
    t_proj, pred_in_ref_zone = timed(to_utm, pred.geoms_source[i_pred], pred.crs, ref.utm_epsg[i_ref])
    n_foreign = int(np.count_nonzero(pred.utm_epsg[i_pred] != ref.utm_epsg[i_ref]))
    ref_geoms = ref.geoms_utm[i_ref]
    if args.compare_previous:
        compare_previous(ref_geoms, pred_in_ref_zone, args.runs)
        if not args.no_anchor:
            compare_anchor(args.anchor_runs)
        return
    n_coords = shapely.get_num_coordinates(np.concatenate([ref_geoms, pred_in_ref_zone]))
    print(
        f"vertices per boundary: mean {n_coords.mean():.1f}, max {n_coords.max()}; "
        f"perimeter mean {shapely.length(ref_geoms).mean():.0f} m; {n_foreign} pairs straddle two zones; "
        f"reprojecting all predictions into their reference's zone takes {t_proj:.2f} s "
        "(matched_pair_distances reprojects only the straddling ones)"
    )
    print(
        f"baseline timed once on the first {nb} pairs/rows and scaled per pair/row to the full size; "
        f"evalcore: best of {REPEAT} runs on all of them, after a warm-up call that compiles numba"
    )

    rows = []
    # Warm-up: compile (or load from cache) every kernel.
    pair_boundary_distances(ref_geoms[:3], pred_in_ref_zone[:3], 1.0)
    tolerance_lengths(ref.take(np.arange(min(3, len(ref)))), pred, args.tolerance)

    for spacing in (1.0, None):
        t_ec, (h, mean, used) = timed(pair_boundary_distances, ref_geoms, pred_in_ref_zone, spacing, repeat=REPEAT)
        t_bl, (bh, bmean) = timed(baseline_distances, ref_geoms[:nb], pred_in_ref_zone[:nb], spacing)
        t_bl_full = t_bl * n / nb
        diff = max(rel_diff(h[:nb], bh), rel_diff(mean[:nb], bmean))
        n_samples = float(np.sum(shapely.length(np.concatenate([ref_geoms, pred_in_ref_zone])) / boundary_spacing(
            shapely.length(np.concatenate([ref_geoms, pred_in_ref_zone])), spacing)))
        label = f"distances Δ={'1 m' if spacing else 'None'}"
        rows.append((label, t_ec, t_bl_full, diff, f"~{n_samples / 1e6:.0f}M samples, {1e9 * t_ec / n_samples:.0f} ns/sample"))

    # Brute force (every sample against every segment), to show what the pruning buys.
    geoms = np.concatenate([ref_geoms, pred_in_ref_zone])
    x, y, ring_off, geom_off = _flatten(geoms)
    spacing_arr = boundary_spacing(shapely.length(geoms), 1.0)
    a = np.arange(n, dtype=np.int64)
    t_pr, pruned = timed(_kernels._pair_distances, x, y, ring_off, geom_off, spacing_arr, a, a + n, 16, True, repeat=REPEAT)
    t_bf, brute = timed(_kernels._pair_distances, x, y, ring_off, geom_off, spacing_arr, a, a + n, 1, False)
    same = all(np.array_equal(p, b) for p, b in zip(pruned, brute))
    rows.append(("distances Δ=1 m, kernel only", t_pr, t_bf, 0.0 if same else float("nan"), "baseline column: brute-force kernel"))

    for name, layer, other in (("tolerance recall", ref, pred), ("tolerance precision", pred, ref)):
        t_ec, got = timed(tolerance_lengths, layer, other, args.tolerance, repeat=REPEAT)
        sub = np.arange(min(nb, len(layer)))
        t_bl, expected = timed(baseline_tolerance, layer, other, args.tolerance, sub)
        t_bl_full = t_bl * len(layer) / len(sub)
        abs_diff = np.abs(got[sub] - expected)
        diff = float(np.max(abs_diff / layer.perimeter_m[sub]))
        rows.append(
            (
                f"{name} {args.tolerance:g} m",
                t_ec,
                t_bl_full,
                diff,
                f"{len(layer)} rows; max |diff| {abs_diff.max():.3g} m (diff column: / perimeter)",
            )
        )

    print()
    header = f"{'step':34s} {'evalcore s':>11s} {'baseline s':>11s} {'ratio':>7s} {'max rel diff':>13s}  notes"
    print(header)
    print("-" * len(header))
    for label, t_ec, t_bl, diff, note in rows:
        print(f"{label:34s} {t_ec:11.3f} {t_bl:11.2f} {t_bl / t_ec:7.1f} {diff:13.2e}  {note}")


if __name__ == "__main__":
    main()

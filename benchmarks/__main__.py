"""``make bench``: every comparison is a ratio measured in the same run, on the same data.

Sections (``--sections``, default all):

* ``anchor``: ~50,600 reference fields vs ~35,000 predictions (the size of the largest
  published run of this kind of evaluation). evalcore in one process with default and
  with full options (its threads, :mod:`evalcore.threads`; the default also on one thread,
  ``EVALCORE_THREADS=1``), against the straightforward geopandas + shapely baseline
  (timed on a slice of the pairs and scaled, as said in the output) and the GEOS floor
  (repair, reprojection, STRtree, intersection areas; one thread).
* ``families``: the anchor data in one process with full options, once with only round 1's
  metric families (detection, area, segmentation, distance, tolerance) and once with every
  family on by default or cheap (IoU sweep, topology, error taxonomy, AOIs and annotated
  area, scores with AP, risk-coverage and calibration; not pixels).
* ``workers``: the anchor data through the distributed runner with 1 and 2 worker
  processes, and the machine's own two-process ceiling (``bench_cpu_ceiling``) in the same run.
* ``cli``: what a user types, ``evalcore evaluate`` on the anchor files: in this process,
  ``--cluster local --workers 2 --in-process-below 0`` (cluster start included) and plain
  ``--cluster local`` (which chooses this process below ``--in-process-below``).
* ``peer``: agribound 1.0.1, the tool evalcore is a drop-in for, and evalcore with default
  options on the same 50,000 generated fields (:mod:`benchmarks.agribound_peer`; agribound in
  its own virtual environment, made on first use), with every value agribound writes
  compared.
* ``scale``: 250k generated reference fields (``--scale-sizes`` for more), :mod:`benchmarks.scale`:
  ``evalcore synth`` then ``evalcore run`` with full options, scores and AOIs against a
  ``dask scheduler`` and 2 one-thread ``dask worker`` processes: wall time, time per phase,
  peak memory of synth, the client and each worker sampled from ``/proc``, per-partition
  costs from the task stream (and its picture), the targets PASS / FAIL and a projection.

Results print as tables and go to ``benchmarks/results/<date>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FULL = dict(strata="stratum", size_bins=[0, 0.5, 1, 2, 5, 10, float("inf")], bootstrap=1000, boundary_tolerance_m=10.0)
ANCHOR_REF, ANCHOR_PRED = 50_600, 35_000


def _timed(fn, repeat: int = 1) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def anchor_layers(seed: int = 1):
    import numpy as np

    from evalcore.synth import make_layers

    pred, ref = make_layers(ANCHOR_REF, seed)
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(len(pred), size=min(ANCHOR_PRED, len(pred)), replace=False))
    return pred.iloc[keep], ref


def section_anchor(repeat: int) -> dict:
    import evalcore
    from benchmarks.agribound_peer import one_thread_only
    from benchmarks.baseline import geos_floor, straightforward
    from evalcore.threads import n_threads

    pred, ref = anchor_layers()
    evalcore.evaluate(pred.iloc[:500], ref.iloc[:500])  # compile numba once
    t_default, m_default = _timed(lambda: evalcore.evaluate(pred, ref), repeat)
    with one_thread_only():
        t_default_1, m_default_1 = _timed(lambda: evalcore.evaluate(pred, ref), repeat)
    if json.dumps(m_default_1, sort_keys=True, default=str) != json.dumps(m_default, sort_keys=True, default=str):
        raise AssertionError("the default run on one thread gave other numbers than on the process's threads")
    t_full, _ = _timed(lambda: evalcore.evaluate(pred, ref, **FULL), repeat)
    t_floor, n_pairs = _timed(lambda: geos_floor(pred, ref), repeat)
    # The baseline's per-pair loops are timed on a slice and scaled by the pair count.
    slice_pairs = 3_000
    t_base_slice, base = _timed(lambda: straightforward(pred, ref, max_pairs=slice_pairs))
    t_base_tol_slice, _ = _timed(lambda: straightforward(pred, ref, max_pairs=slice_pairs, tolerance_m=10.0))
    scale = n_pairs / slice_pairs
    t_base = t_base_slice * scale
    t_base_full = t_base_tol_slice * scale
    return {
        "n_ref": len(ref),
        "n_pred": len(pred),
        "n_candidate_pairs": n_pairs,
        "evalcore_default_s": t_default,
        "evalcore_full_s": t_full,
        "geos_floor_s": t_floor,
        "baseline_default_s_scaled": t_base,
        "baseline_full_s_scaled": t_base_full,
        "baseline_slice_pairs": slice_pairs,
        "default_vs_floor": t_default / t_floor,
        "evalcore_default_one_thread_s": t_default_1,
        "default_one_thread_vs_floor": t_default_1 / t_floor,
        "threads": n_threads(),
        "baseline_vs_default": t_base / t_default,
        "baseline_full_vs_full": t_base_full / t_full,
        "f1": m_default["f1"],
    }


def _metric_options(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if k not in ("strata", "size_bins")}


ALWAYS_ON_ROUND2 = ("topology", "taxonomy")
"""Round-2 families with no option that switches them off; the families section switches
them off by hand (the others are off without their options: no sweep thresholds, no
score column, no annotated area)."""


def section_families(repeat: int) -> dict:
    """Full options with round 1's families only, then with every default or cheap family on."""
    import evalcore
    from evalcore.metrics.registry import FAMILIES
    from evalcore.options import check_options
    from evalcore.synth import make_site_layers

    pred, ref = anchor_layers()
    aoi, annotated = make_site_layers(ref, pred, seed=1)
    with tempfile.TemporaryDirectory(prefix="evalcore-families-") as tmp:
        aoi.to_parquet(f"{tmp}/aoi.parquet")
        annotated.to_parquet(f"{tmp}/annotated.parquet")
        every = dict(FULL, score_column="score", aoi=f"{tmp}/aoi.parquet", aoi_id_column="aoi_id",
                     annotated_area=f"{tmp}/annotated.parquet")
        evalcore.evaluate(pred.iloc[:500], ref.iloc[:500], **every)  # compile numba once
        switched = [f for f in FAMILIES if f.name in ALWAYS_ON_ROUND2]
        try:
            for family in switched:
                family.enabled = lambda options: False  # an instance attribute, removed below
            round1 = dict(FULL, iou_sweep_thresholds=None)
            t_round1, m_round1 = _timed(lambda: evalcore.evaluate(pred, ref, **round1), repeat)
            families_round1 = [f.name for f in FAMILIES if f.enabled(check_options(**_metric_options(round1)))]
        finally:
            for family in switched:
                del family.enabled
        t_every, m_every = _timed(lambda: evalcore.evaluate(pred, ref, **every), repeat)
        families_every = [f.name for f in FAMILIES if f.enabled(check_options(**_metric_options(every)))]
    return {
        "families_round1": families_round1,
        "families_every": families_every,
        "full_round1_s": t_round1,
        "full_every_family_s": t_every,
        "ratio": t_every / t_round1,
        "keys_round1": len(m_round1),
        "keys_every_family": len(m_every),
    }


def _cpu_ceiling() -> dict:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_cpu_ceiling", "--json"], check=True, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def section_cli(repeat: int) -> dict:
    """``evalcore evaluate`` from the command line on the anchor files, each run a fresh process."""
    from evalcore.synth import write_layers

    modes = {
        "in_process": [],
        "cluster_local_forced": ["--cluster", "local", "--workers", "2", "--in-process-below", "0"],
        "cluster_local_default": ["--cluster", "local", "--workers", "2"],
    }
    runs: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="evalcore-cli-") as tmp:
        pred, ref = write_layers(tmp, 50_000, seed=1)
        base = [sys.executable, "-m", "evalcore.cli", "evaluate", "-p", str(pred), "-r", str(ref), "-q"]
        subprocess.run(base + ["-o", f"{tmp}/warm.json"], check=True)  # numba caches of this checkout
        for _ in range(repeat):
            for mode, extra in modes.items():  # interleaved, so drifting load hits every mode alike
                started = time.perf_counter()
                subprocess.run(base + extra + ["-o", f"{tmp}/{mode}.json"], check=True, stderr=subprocess.DEVNULL)
                runs[mode].append(time.perf_counter() - started)
        same = len({Path(f"{tmp}/{mode}.json").read_text() for mode in modes}) == 1
    medians = {m: statistics.median(v) for m, v in runs.items()}
    return {
        "n_ref": 50_000, "runs_s": runs, "median_s": medians, "metrics_identical": same,
        "forced_cluster_vs_in_process": medians["cluster_local_forced"] / medians["in_process"],
        "default_cluster_vs_in_process": medians["cluster_local_default"] / medians["in_process"],
    }


def section_workers(workers: list[int], repeat: int) -> dict:
    """The anchor data from GeoParquet files (as a national run reads them) through the
    distributed runner, on a fresh ``LocalCluster`` per worker count; median of ``repeat``."""
    from distributed import Client

    import evalcore
    from evalcore.distributed.cluster import local_cluster

    pred, ref = anchor_layers()
    rows, phases = {}, {}
    with tempfile.TemporaryDirectory(prefix="evalcore-workers-") as tmp:
        paths = {}
        for name, layer in (("predicted", pred), ("reference", ref)):
            paths[name] = f"{tmp}/{name}.parquet"
            layer.to_parquet(paths[name], row_group_size=50_000)
        for n in workers:
            with local_cluster(n) as cluster, Client(cluster) as client:
                client.run(lambda: __import__("evalcore.boundary"))
                evalcore.evaluate(pred.iloc[:300], ref.iloc[:300], client=client)  # workers compile / load caches
                times = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    evalcore.evaluate(paths["predicted"], paths["reference"], client=client, partition_size_m=25_000.0)
                    times.append(time.perf_counter() - started)
            rows[n] = statistics.median(times)
            phases[n] = times
    out = {"partition_size_m": 25_000.0, "input": "GeoParquet files, 50,000-row groups", "wall_s": rows, "runs_s": phases}
    if len(workers) >= 2:
        out["speedup"] = rows[workers[0]] / rows[workers[-1]]
        out["cpu_ceiling"] = _cpu_ceiling()
        out["speedup_vs_ceiling"] = out["speedup"] / out["cpu_ceiling"]["ratio"]
    return out


def section_scale(sizes: list[int]) -> dict:
    """The scale benchmark (:mod:`benchmarks.scale`): its record, also written to its own file."""
    from benchmarks.scale import run_sizes

    return run_sizes(sizes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="anchor,families,workers,cli,peer,scale",
                        help="comma-separated: anchor, families, workers, cli, peer, scale (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per anchor timing (median reported)")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--scale-sizes", default="250000",
                        help="comma-separated reference field counts of the scale section (default 250000; "
                        "250000,1000000,2000000,4000000 for the study of the national targets; 'python -m benchmarks.scale' runs it alone)")
    args = parser.parse_args(argv)
    sections = args.sections.split(",")
    record: dict = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    }
    if "anchor" in sections:
        a = record["anchor"] = section_anchor(args.repeat)
        print(f"\nanchor: {a['n_ref']} reference fields, {a['n_pred']} predictions, {a['n_candidate_pairs']} candidate pairs (median of {args.repeat})")
        print(f"  {'evalcore, default options':<40} {a['evalcore_default_s']:>8.2f} s   ({a['threads']} threads)")
        print(f"  {'evalcore, default options, one thread':<40} {a['evalcore_default_one_thread_s']:>8.2f} s")
        print(f"  {'evalcore, full options':<40} {a['evalcore_full_s']:>8.2f} s")
        print(f"  {'GEOS floor (one thread)':<40} {a['geos_floor_s']:>8.2f} s   evalcore default / floor = {a['default_vs_floor']:.2f}x; "
              f"on one thread {a['default_one_thread_vs_floor']:.2f}x")
        print(f"  {'baseline, default (scaled from slice)':<40} {a['baseline_default_s_scaled']:>8.2f} s   baseline / evalcore = {a['baseline_vs_default']:.1f}x")
        print(f"  {'baseline, + 10 m tolerance (scaled)':<40} {a['baseline_full_s_scaled']:>8.2f} s   baseline / evalcore full = {a['baseline_full_vs_full']:.1f}x")
    if "families" in sections:
        f = record["families"] = section_families(args.repeat)
        print(f"\nfamilies (anchor data, one process, full options, median of {args.repeat})")
        print(f"  {'round 1 families only':<40} {f['full_round1_s']:>8.2f} s")
        print(f"  {'every default or cheap family':<40} {f['full_every_family_s']:>8.2f} s   ratio = {f['ratio']:.2f}x")
    if "workers" in sections:
        w = record["workers"] = section_workers([int(n) for n in args.workers.split(",")], args.repeat)
        print(f"\nworkers (anchor data from GeoParquet, distributed runner, 25 km tiles, median of {args.repeat})")
        for n, t in w["wall_s"].items():
            print(f"  {n} worker(s) {t:>8.2f} s")
        if "speedup" in w:
            c = w["cpu_ceiling"]
            print(f"  speed-up: {w['speedup']:.2f}x; this machine's two-process ceiling {c['ratio']:.2f}x; "
                  f"speed-up / ceiling = {w['speedup_vs_ceiling']:.2f}")
    if "cli" in sections:
        c = record["cli"] = section_cli(args.repeat)
        print(f"\ncli (evalcore evaluate on 50,000 generated fields, fresh process each, median of {args.repeat})")
        for mode, t in c["median_s"].items():
            print(f"  {mode:<40} {t:>8.2f} s")
        print(f"  forced cluster / in process = {c['forced_cluster_vs_in_process']:.2f}x; "
              f"default --cluster local / in process = {c['default_cluster_vs_in_process']:.2f}x; "
              f"identical metrics.json: {c['metrics_identical']}")
    if "peer" in sections:
        from benchmarks.agribound_peer import print_peer, section_peer

        record["peer"] = section_peer(50_000, args.repeat)
        print_peer(record["peer"])
    if "scale" in sections:
        from benchmarks.scale import print_rows

        record["scale"] = section_scale([int(n) for n in args.scale_sizes.split(",")])
        print_rows(record["scale"]["rows"])
        print(f"  (also in {record['scale']['path']})")
    out = Path(__file__).parent / "results" / f"{dt.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():  # a run of some sections updates the day's file, it does not erase the others
        previous = json.loads(out.read_text())
        previous.update(record)
        record = previous
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nresults written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Distributed runs with 1 and 2 worker processes: wall time, time per phase, peak memory.

    .venv/bin/python -m benchmarks.bench_distributed --n-ref 250000 [--full] [--workers 1,2]

Generates the dataset with ``evalcore synth`` in a separate process (so its memory does
not count as the client's), then runs the distributed evaluation from the GeoParquet
files on a fresh ``LocalCluster`` for each worker count. Peak RSS is ``ru_maxrss`` of
each worker process and of this (client) process. Prints a table and the ratio of the
1-worker to the 2-worker wall time; appends the results to
``benchmarks/results/<date>-distributed.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_once(data: Path, n_workers: int, full: bool, partition_km: float) -> dict:
    from distributed import Client

    from evalcore.distributed.cluster import local_cluster

    from evalcore.api import check_options
    from evalcore.distributed.runner import run_phases
    from evalcore.distributed.staging import start_run
    from evalcore.distributed.sources import LayerSource

    options = check_options(
        bootstrap=1000 if full else 0,
        boundary_tolerance_m=10.0 if full else None,
        partition_size_m=partition_km * 1000.0,
    )
    with tempfile.TemporaryDirectory(prefix="evalcore-bench-") as work, local_cluster(n_workers, memory_limit=0) as cluster, Client(cluster) as client:
        setup = start_run(
            LayerSource(str(data / "predicted.parquet"), None, "predicted"),
            LayerSource(str(data / "reference.parquet"), None, "reference"),
            options,
            Path(work),
            strata_column="stratum" if full else None,
            size_bins=[0, 0.5, 1, 2, 5, 10, float("inf")] if full else None,
            frame_dir=Path(work) / "fields",
        )
        started = time.perf_counter()
        run = run_phases(client, setup)
        result = run.metrics
        wall = time.perf_counter() - started
        worker_rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    return {
        "workers": n_workers,
        "wall_s": wall,
        "phases_s": run.timings,
        "partitions": len(run.index.layers["reference"]["partitions"]),
        "worker_peak_rss_mib": sorted(worker_rss.values()),
        "client_peak_rss_mib": _peak_rss_mib(),
        "f1": result["f1"],
        "count_reference": result["count_reference"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-ref", type=int, default=250_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--partition-km", type=float, default=50.0)
    parser.add_argument("--full", action="store_true", help="strata, size bins, bootstrap 1000, tolerance 10 m")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="evalcore-data-") as tmp:
        data = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "evalcore.cli", "synth", "--n-ref", str(args.n_ref), "--seed", str(args.seed), "--out", str(data)],
            check=True, stdout=subprocess.DEVNULL,
        )
        rows = [run_once(data, int(n), args.full, args.partition_km) for n in args.workers.split(",")]
    print(f"{'workers':>7}  {'wall s':>8}  {'prepare':>8}  {'pairs':>8}  {'resolve':>8}  {'sums':>8}  {'merge':>8}  {'worker peak MiB':>18}  {'client peak MiB':>15}")
    for r in rows:
        p = r["phases_s"]
        print(
            f"{r['workers']:>7}  {r['wall_s']:>8.1f}  {p['prepare']:>8.1f}  {p['pairs']:>8.1f}  {p['resolve']:>8.1f}  "
            f"{p['sums']:>8.1f}  {p['merge']:>8.1f}  {max(r['worker_peak_rss_mib']):>18.0f}  {r['client_peak_rss_mib']:>15.0f}"
        )
    if len(rows) >= 2:
        print(f"speed-up {rows[0]['workers']} -> {rows[-1]['workers']} workers: {rows[0]['wall_s'] / rows[-1]['wall_s']:.2f}x")
    record = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "n_ref": args.n_ref,
        "full": args.full,
        "partition_km": args.partition_km,
        "runs": rows,
    }
    out = Path(__file__).parent / "results" / f"{dt.date.today().isoformat()}-distributed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    existing = json.loads(out.read_text()) if out.exists() else []
    out.write_text(json.dumps(existing + [record], indent=2) + "\n")
    print(f"results appended to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

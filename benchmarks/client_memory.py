"""The client's memory phase by phase in a distributed run (issue 19; the scale section's
"client MiB" broken down).

    python -m benchmarks.client_memory DATA_DIR [--workers 2] [--families]

``DATA_DIR`` is an ``evalcore synth`` output. The run uses the scale section's full
options (strata, size classes, 1000 resamples, 10 m tolerance); ``--families`` adds the
score column (AP, calibration, risk-coverage) and the AOIs and annotated area. Prints, after
each phase, the client process's resident memory and its peak so far (``ru_maxrss``:
this process also holds the scheduler and the nannies), and the bytes of the largest values
the phases hand on (the resolved run's pair values, predictions and routing).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path


def _rss_mib() -> tuple[float, float]:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    current = pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    return current, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _nbytes(value: object) -> int:
    import numpy as np
    import pandas as pd

    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(deep=True).sum())
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if hasattr(value, "__dataclass_fields__"):
        return sum(_nbytes(getattr(value, name)) for name in value.__dataclass_fields__)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.client_memory", description=__doc__.splitlines()[0])
    parser.add_argument("data_dir")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--families", action="store_true", help="add scores, AOIs and the annotated area")
    parser.add_argument("--workdir", help="keep the work directory here (a rerun reuses its prepared partitions and pairs)")
    parser.add_argument("--profile", help="write a pyinstrument profile of the resolve and sums phases to this HTML file")
    args = parser.parse_args(argv)
    data = Path(args.data_dir).resolve()

    from distributed import Client

    from evalcore.distributed.cluster import local_cluster
    from evalcore.distributed import runner, staging
    from evalcore.distributed.sources import LayerSource
    from evalcore.options import check_options

    extra = {}
    if args.families:
        extra = dict(score_column="score", aoi=str(data / "aoi.parquet"), aoi_id_column="aoi_id", annotated_area=str(data / "annotated.parquet"))
    options = check_options(bootstrap=1000, boundary_tolerance_m=10.0, **extra)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="evalcore-memory-"))
    print(f"{'after':<10} {'phase s':>8} {'RSS MiB':>8} {'peak MiB':>9}")
    print(f"{'start':<10} {'':>8} {_rss_mib()[0]:>8.0f} {_rss_mib()[1]:>9.0f}")
    try:
        with local_cluster(args.workers, memory_limit=0) as cluster, Client(cluster) as client:
            setup = staging.start_run(
                LayerSource(str(data / "predicted.parquet"), None, "predicted"),
                LayerSource(str(data / "reference.parquet"), None, "reference"),
                options, work, strata_column="stratum", size_bins=[0, 0.5, 1, 2, 5, 10, float("inf")],
            )

            def step(name, fn):
                started = time.perf_counter()
                value = fn()
                current, peak = _rss_mib()
                print(f"{name:<10} {time.perf_counter() - started:>8.2f} {current:>8.0f} {peak:>9.0f}", flush=True)
                return value

            index = step("prepare", lambda: runner.prepare_phase(client, setup))
            plan = step("plan", lambda: runner.plan_phase(setup, index))
            pairs = step("pairs", lambda: runner.pairs_phase(client, setup, index))
            profiler = None
            if args.profile:
                from pyinstrument import Profiler

                profiler = Profiler()
                profiler.start()
            resolved = step("resolve", lambda: runner.resolve_phase(setup, index, pairs, plan))
            sums = step("sums", lambda: runner.sums_phase(client, setup, index, plan, resolved))
            if profiler is not None:
                profiler.stop()
                Path(args.profile).write_text(profiler.output_html())
                print(profiler.output_text(unicode=True, color=False, show_all=False)[:6000])
            step("merge", lambda: runner.merge_phase(setup, index, plan, resolved, sums, client))
            r = resolved.resolved
            print(
                f"held by the resolved run: pair values {_nbytes(r.pair_values) / 2**20:.0f} MiB, predictions "
                f"{_nbytes(r.preds) / 2**20:.0f} MiB, contributions {_nbytes(r.contributions) / 2**20:.0f} MiB, "
                f"routing {_nbytes(resolved.routing) / 2**20:.0f} MiB; {pairs.n_pairs:,} pairs"
            )
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

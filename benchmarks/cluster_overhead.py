"""Where a small ``--cluster local`` run loses to the in-process run (issue 19; not part of
``make bench``).

    python -m benchmarks.cluster_overhead DATA_DIR [--workers 2]

``DATA_DIR`` holds ``predicted.parquet`` and ``reference.parquet`` (``evalcore synth``).
Prints, for one run on an embedded ``LocalCluster``: the client's imports, the cluster's
start, each phase's wall time (``RunOutcome.timings``), the cluster's close, and the
seconds each worker spends importing the engine on its first task (measured with
``client.run`` on a second, fresh cluster). On 2026-12-01 (2 vCPUs, the 50k anchor):
imports 2.0 s, cluster start 1.6 s, prepare 7.6 s, pairs 4.2 s, resolve 0.55 s, sums
0.9 s, merge 0.2 s, close 1.2 s; first-task imports 1.4 s and 1.9 s.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def _import_seconds() -> float:
    started = time.perf_counter()
    import evalcore.boundary  # noqa: F401
    import evalcore.distributed.runner  # noqa: F401
    import evalcore.engine.resolve  # noqa: F401
    import evalcore.engine.sums  # noqa: F401
    import evalcore.engine.tables  # noqa: F401
    import evalcore.pairs  # noqa: F401

    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster_overhead", description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", help="directory with predicted.parquet and reference.parquet")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args(argv)
    data = Path(args.data_dir)

    started = time.perf_counter()
    from distributed import Client

    from evalcore.distributed.cluster import local_cluster
    from evalcore.distributed.runner import run_phases
    from evalcore.distributed.staging import start_run
    from evalcore.distributed.sources import LayerSource
    from evalcore.options import check_options

    imported = time.perf_counter()
    cluster = local_cluster(args.workers)
    client = Client(cluster)
    up = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="evalcore-overhead-"))
    try:
        setup = start_run(
            LayerSource(str(data / "predicted.parquet"), None, "predicted"),
            LayerSource(str(data / "reference.parquet"), None, "reference"),
            check_options(), work,
        )
        outcome = run_phases(client, setup)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    done = time.perf_counter()
    client.close()
    cluster.close()
    closed = time.perf_counter()
    phases = ", ".join(f"{name} {seconds:.2f}" for name, seconds in outcome.timings.items())
    print(f"client imports {imported - started:.2f} s; cluster start {up - imported:.2f} s; phases ({phases}) "
          f"{done - up:.2f} s; close {closed - done:.2f} s; total {closed - started:.2f} s")
    with local_cluster(args.workers) as fresh, Client(fresh) as c:
        firsts = c.run(_import_seconds)
    print("first-task engine imports per worker (s): " + ", ".join(f"{v:.2f}" for v in firsts.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

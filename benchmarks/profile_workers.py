"""Where a distributed run's time goes on 1 and on 2 workers: phases and CPU per process.

    .venv/bin/python -m benchmarks.profile_workers [--n-workers 1,2] [--partition-km 25]

The anchor data (see ``benchmarks/__main__.py``) is written to GeoParquet once, then run
through the phase functions of :mod:`evalcore.distributed.runner` on a fresh embedded cluster
per worker count. Prints the wall time of each phase, the compute time the task stream
recorded per worker, and the CPU time (user + system, from psutil) of each worker process
and of this process, which holds the client and the scheduler (docs/performance.md).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path


def profile(n_workers: int, data: Path, partition_km: float) -> None:
    import psutil
    from distributed import Client, get_task_stream

    import evalcore
    from evalcore.distributed.cluster import local_cluster
    from evalcore.distributed.runner import run_phases
    from evalcore.distributed.staging import start_run
    from evalcore.distributed.sources import LayerSource
    from evalcore.options import check_options

    with local_cluster(n_workers) as cluster, Client(cluster) as client, tempfile.TemporaryDirectory() as work:
        evalcore.evaluate(str(data / "predicted.parquet"), str(data / "reference.parquet"), client=client)  # warm up
        me = psutil.Process()
        children = me.children(recursive=True)
        cpu_before = {c.pid: sum(c.cpu_times()[:2]) for c in children}
        own_before = resource.getrusage(resource.RUSAGE_SELF)
        with get_task_stream(client) as stream:
            started = time.perf_counter()
            setup = start_run(
                LayerSource(str(data / "predicted.parquet"), None, "predicted"),
                LayerSource(str(data / "reference.parquet"), None, "reference"),
                check_options(partition_size_m=partition_km * 1000.0),
                Path(work),
            )
            run = run_phases(client, setup)
            wall = time.perf_counter() - started
        own_after = resource.getrusage(resource.RUSAGE_SELF)
        spent = {c.pid: sum(c.cpu_times()[:2]) - cpu_before[c.pid] for c in children}
        worker_cpu = [v for v in spent.values() if v > 0.05]  # the nannies and helpers barely run
        busy: dict[str, float] = {}
        for task in stream.data:
            for span in task["startstops"]:
                if span["action"] == "compute":
                    busy[task["worker"]] = busy.get(task["worker"], 0.0) + span["stop"] - span["start"]
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in run.timings.items())
    print(f"{n_workers} worker(s): wall {wall:.2f} s ({phases})")
    print(f"  task compute time per worker: {', '.join(f'{v:.2f} s' for v in busy.values())}")
    print(f"  CPU of worker processes: {', '.join(f'{v:.2f} s' for v in worker_cpu)}")
    own = (own_after.ru_utime - own_before.ru_utime) + (own_after.ru_stime - own_before.ru_stime)
    print(f"  CPU of the client + scheduler process: {own:.2f} s")


def main() -> None:
    from benchmarks.__main__ import anchor_layers

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-workers", default="1,2")
    parser.add_argument("--partition-km", type=float, default=25.0)
    args = parser.parse_args()
    pred, ref = anchor_layers()
    with tempfile.TemporaryDirectory(prefix="evalcore-profile-") as tmp:
        data = Path(tmp)
        pred.to_parquet(data / "predicted.parquet", row_group_size=50_000)
        ref.to_parquet(data / "reference.parquet", row_group_size=50_000)
        for n in (int(v) for v in args.n_workers.split(",")):
            profile(n, data, args.partition_km)


if __name__ == "__main__":
    main()

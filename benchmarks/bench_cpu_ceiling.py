"""How much two processes gain over one on this machine, for pure CPU work.

    .venv/bin/python -m benchmarks.bench_cpu_ceiling

Runs the same GEOS + numpy job (buffers, pairwise intersections, a sort) once alone and
then twice at the same time in two processes, and prints the throughput ratio. It is the
ceiling a 2-worker evaluation can hope for against one worker (docs/performance.md).
"""

from __future__ import annotations

import multiprocessing
import time

import numpy as np
import shapely


def job(_: int) -> float:
    rng = np.random.default_rng(0)
    points = shapely.points(rng.uniform(0, 1000, (200_000, 2)))
    started = time.perf_counter()
    for _ in range(3):
        disks = shapely.buffer(points[:60_000], 5.0)
        shapely.area(shapely.intersection(disks[:-1], disks[1:]))
        np.sort(rng.random(3_000_000))
    return time.perf_counter() - started


def measure() -> dict:
    """The job once alone in this process, then twice at once in two processes (seconds), and the throughput ratio."""
    context = multiprocessing.get_context("spawn")
    alone = job(0)
    with context.Pool(2) as pool:
        pool.map(job, [0, 0])  # warm both processes
        started = time.perf_counter()
        each = pool.map(job, [0, 0])
        both = time.perf_counter() - started
    return {"alone_s": alone, "both_s": both, "each_s": each, "ratio": 2 * alone / both}


def main() -> None:
    import json
    import sys

    found = measure()
    if "--json" in sys.argv[1:]:
        print(json.dumps(found))
        return
    each = found["each_s"]
    print(f"one job alone {found['alone_s']:.2f} s; two at once {found['both_s']:.2f} s (each {each[0]:.2f}, {each[1]:.2f} s); "
          f"throughput ratio {found['ratio']:.2f}x")


if __name__ == "__main__":
    main()

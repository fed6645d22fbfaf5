"""CPU time of the default run (``evalcore.evaluate(pred, ref)``), two source trees interleaved.

Run ``.venv/bin/python -m benchmarks.default_cpu --trees OLD NEW [--n-ref 50000] [--runs 5]``,
where ``OLD`` and ``NEW`` are checkouts of evalcore (e.g. ``/work/main`` and a worktree).
The layers are ``evalcore synth --n-ref N --seed 1`` (written once to a temporary
directory, or read from ``--data DIR``), the same that the ``peer`` section gives to
agribound. Every run is a fresh child process with ``PYTHONPATH`` set to its tree; it
reads both layers, makes the warm-up call that :mod:`benchmarks.agribound_peer` makes
(200 rows: the numba caches loaded), then times one ``evaluate`` with the default options
by ``time.process_time`` (CPU time of the process: the machine is shared, so wall time
says more about the other sessions than about evalcore), and by wall time. The trees
alternate run by run, so that a change of load falls on both. It prints every run, the
medians, their ratio, the load average before and after, and whether both trees gave
the same metrics (compared as their JSON text: bit for bit). Not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, sys, time, warnings
import geopandas
warnings.simplefilter("ignore")
import evalcore
pred = geopandas.read_parquet(sys.argv[1]); ref = geopandas.read_parquet(sys.argv[2])
evalcore.evaluate(pred.iloc[:200], ref.iloc[:200])
cpu, wall = time.process_time(), time.perf_counter()
metrics = evalcore.evaluate(pred, ref)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "metrics": json.dumps(metrics, sort_keys=True, default=repr)}))
"""


def run_once(tree: Path, pred: Path, ref: Path) -> dict:
    """One timed default run in a child process whose ``evalcore`` is the one in ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(pred), str(ref)], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.default_cpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", nargs=2, type=Path, required=True, metavar=("OLD", "NEW"))
    parser.add_argument("--n-ref", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--data", type=Path, help="a directory with predicted.parquet and reference.parquet")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="evalcore-default-cpu-") as tmp:
        if args.data is not None:
            pred, ref = args.data / "predicted.parquet", args.data / "reference.parquet"
        else:
            from evalcore.synth import write_layers

            pred, ref = write_layers(tmp, args.n_ref, seed=1)
        load_before = os.getloadavg()[0]
        results: dict[Path, list[dict]] = {tree: [] for tree in args.trees}
        for k in range(args.runs):
            for tree in args.trees:
                r = run_once(tree, pred, ref)
                results[tree].append(r)
                print(f"run {k + 1} {str(tree):<32} cpu {r['cpu_s']:6.2f} s   wall {r['wall_s']:6.2f} s", flush=True)
        load_after = os.getloadavg()[0]
    old, new = args.trees
    med = {tree: statistics.median(r["cpu_s"] for r in results[tree]) for tree in args.trees}
    wall = {tree: statistics.median(r["wall_s"] for r in results[tree]) for tree in args.trees}
    same = len({r["metrics"] for rs in results.values() for r in rs}) == 1
    print(f"median CPU: {old} {med[old]:.2f} s, {new} {med[new]:.2f} s; ratio {med[old] / med[new]:.2f}x "
          f"(median wall {wall[old]:.2f} s and {wall[new]:.2f} s); load average {load_before:.1f} before, {load_after:.1f} after")
    print(f"metrics identical across every run of both trees: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""agribound 1.0.1, the peer evalcore is a drop-in for, timed on the same layers.

agribound declares Python >= 3.12 and pulls in its delineation stack (torch, earth-engine
clients); its ``evaluate`` module needs only the geospatial libraries. So it runs in its
own virtual environment (``benchmarks/.venv-agribound``, made on first use from the
package registry): agribound installed with ``--no-deps --ignore-requires-python`` beside
the light dependencies its package ``__init__`` imports. It is timed in a child process
of that environment; evalcore in this one. Both read the same GeoParquet files, both use
their default options, and the keys agribound writes are compared value by value.

Run alone: ``python -m benchmarks.agribound_peer [--n-ref 50000] [--repeat 3]``; in
``make bench`` as the ``peer`` section.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

AGRIBOUND = "agribound==1.0.1"
LIGHT_DEPENDENCIES = ("numpy", "pandas", "shapely", "geopandas", "pyproj", "pyarrow", "pyyaml", "rasterio", "tqdm")
VENV = Path(__file__).parent / ".venv-agribound"

_CHILD = r"""
import json, sys, time, warnings
import geopandas
warnings.simplefilter("ignore")
import agribound
evaluate = sys.modules["agribound.evaluate"].evaluate
pred = geopandas.read_parquet(sys.argv[1])
ref = geopandas.read_parquet(sys.argv[2])
evaluate(pred.iloc[:200], ref.iloc[:200])  # first-call imports, as evalcore's warm-up
started = time.perf_counter()
metrics = evaluate(pred, ref)
elapsed = time.perf_counter() - started
print(json.dumps({"version": agribound.__version__, "seconds": elapsed, "metrics": metrics}, default=float))
"""


@contextlib.contextmanager
def one_thread_only() -> Iterator[None]:
    """``EVALCORE_THREADS=1`` inside the block (:mod:`evalcore.threads`), as it was after."""
    was = os.environ.get("EVALCORE_THREADS")
    os.environ["EVALCORE_THREADS"] = "1"
    try:
        yield
    finally:
        if was is None:
            del os.environ["EVALCORE_THREADS"]
        else:
            os.environ["EVALCORE_THREADS"] = was


def agribound_python() -> Path:
    """The interpreter of the agribound environment, made when missing (a few minutes, once)."""
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run(pip + list(LIGHT_DEPENDENCIES), check=True)
        subprocess.run(pip + ["--no-deps", "--ignore-requires-python", AGRIBOUND], check=True)
    return python


TOLERANCE = 1e-9
"""Relative difference below which two values count as the same number. evalcore computes
intersection areas with its own exact kernel and sums exactly; agribound with GEOS and numpy
sums: the two agree to about 1e-13 relative, not to the last bit."""


def compare(theirs: object, ours: object, path: str = "") -> list[tuple[str, object, object, float]]:
    """``(key, agribound's value, evalcore's, relative difference)`` for every value of agribound's
    output that evalcore does not give identically (NaN equals NaN; inf where not comparable)."""
    if isinstance(theirs, dict):
        if not isinstance(ours, dict):
            return [(path, theirs, ours, math.inf)]
        out = []
        for key, value in theirs.items():
            out += [(f"{path}.{key}", value, None, math.inf)] if key not in ours else compare(value, ours[key], f"{path}.{key}")
        return out
    if isinstance(theirs, list):
        if not isinstance(ours, list) or len(ours) != len(theirs):
            return [(path, theirs, ours, math.inf)]
        return [d for i, (a, b) in enumerate(zip(theirs, ours)) for d in compare(a, b, f"{path}[{i}]")]
    if isinstance(theirs, float) and isinstance(ours, (int, float)) and not isinstance(ours, bool):
        ours = float(ours)
        if (math.isnan(theirs) and math.isnan(ours)) or theirs == ours:
            return []
        return [(path, theirs, ours, abs(theirs - ours) / max(abs(theirs), abs(ours)))]
    return [] if theirs == ours else [(path, theirs, ours, math.inf)]


def section_peer(n_ref: int = 50_000, repeat: int = 3) -> dict:
    """agribound and evalcore with default options on ``evalcore synth`` layers of ``n_ref`` fields."""
    import geopandas

    import evalcore
    from evalcore.synth import write_layers
    from evalcore.threads import n_threads

    python = agribound_python()
    with tempfile.TemporaryDirectory(prefix="evalcore-peer-") as tmp:
        pred_path, ref_path = write_layers(tmp, n_ref, seed=1)
        proc = subprocess.run([str(python), "-c", _CHILD, str(pred_path), str(ref_path)], check=True,
                              capture_output=True, text=True)
        theirs = json.loads(proc.stdout.strip().splitlines()[-1])
        pred, ref = geopandas.read_parquet(pred_path), geopandas.read_parquet(ref_path)
        evalcore.evaluate(pred.iloc[:200], ref.iloc[:200])  # numba caches loaded, as agribound's warm-up
        times, one_thread, ours = [], [], None
        for _ in range(repeat):  # the process's threads (evalcore.threads) and one thread, alternating
            started = time.perf_counter()
            ours = evalcore.evaluate(pred, ref)
            times.append(time.perf_counter() - started)
            with one_thread_only():
                started = time.perf_counter()
                evalcore.evaluate(pred, ref)
                one_thread.append(time.perf_counter() - started)
    differing = compare(theirs["metrics"], ours)
    evalcore_s = statistics.median(times)
    return {
        "n_ref": len(ref), "n_pred": len(pred), "agribound_version": theirs["version"],
        "agribound_s": theirs["seconds"], "evalcore_default_s": evalcore_s, "evalcore_runs_s": times,
        "ratio": theirs["seconds"] / evalcore_s, "threads": n_threads(),
        "evalcore_one_thread_s": statistics.median(one_thread), "evalcore_one_thread_runs_s": one_thread,
        "ratio_one_thread": theirs["seconds"] / statistics.median(one_thread), "keys_compared": _count_leaves(theirs["metrics"]),
        "keys_not_identical": len(differing),
        "max_relative_difference": max((d[3] for d in differing), default=0.0),
        "keys_differing": [f"{k}: agribound {a!r}, evalcore {b!r}" for k, a, b, rel in differing if rel > TOLERANCE],
    }


def _count_leaves(value: object) -> int:
    if isinstance(value, dict):
        return sum(_count_leaves(v) for v in value.values())
    if isinstance(value, list):
        return sum(_count_leaves(v) for v in value)
    return 1


def print_peer(p: dict) -> None:
    print(f"\npeer: agribound {p['agribound_version']} and evalcore, default options, {p['n_ref']} reference fields, "
          f"{p['n_pred']} predictions (agribound once, evalcore median of {len(p['evalcore_runs_s'])})")
    print(f"  {'agribound':<40} {p['agribound_s']:>8.2f} s")
    print(f"  {'evalcore, default options':<40} {p['evalcore_default_s']:>8.2f} s   agribound / evalcore = {p['ratio']:.1f}x "
          f"({p['threads']} threads)")
    print(f"  {'evalcore, default options, one thread':<40} {p['evalcore_one_thread_s']:>8.2f} s   agribound / evalcore = "
          f"{p['ratio_one_thread']:.1f}x")
    print(f"  agribound's {p['keys_compared']} values: {p['keys_compared'] - p['keys_not_identical']} identical, "
          f"largest relative difference {p['max_relative_difference']:.1e}; {len(p['keys_differing'])} differ by more than {TOLERANCE:g}")
    for line in p["keys_differing"][:20]:
        print(f"    {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agribound_peer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-ref", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    p = section_peer(args.n_ref, args.repeat)
    print_peer(p)
    return 1 if p["keys_differing"] else 0


if __name__ == "__main__":
    sys.exit(main())

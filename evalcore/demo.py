"""``make demo``: generate a multi-zone dataset and evaluate it with the Prefect flow.

Runs ``evaluate-layers`` on an embedded Dask ``LocalCluster`` with 2 worker processes
and Prefect in its ephemeral mode: strata, size classes, 1000 bootstrap resamples and a
10 m boundary tolerance. The generated layers and the run directory (metrics.json,
report.md, manifest.json, fields/) go under ``demo-output/`` or the directory given
as the first argument.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

# No network here and no need for it: keep Prefect's ephemeral server from phoning home.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evalcore.cli import main as cli_main

N_REF = 30_000
SEED = 7


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0] if argv else "demo-output")
    data = out / "data"
    started = time.perf_counter()
    print(f"[1/2] generating {N_REF} reference fields in 3 UTM zones (seed {SEED}) in {data}/", flush=True)
    status = cli_main(["synth", "--n-ref", str(N_REF), "--seed", str(SEED), "--out", str(data)])
    if status:
        return status
    print(
        "[2/2] flow evaluate-layers on a local Dask cluster (2 workers): strata, size classes, "
        "1000 bootstrap resamples, 10 m boundary tolerance; the dashboard link follows",
        flush=True,
    )
    status = cli_main(
        [
            "run",
            "-p", str(data / "predicted.parquet"),
            "-r", str(data / "reference.parquet"),
            "--strata-column", "stratum",
            "--size-bins", "0,0.5,1,2,5,10,inf",
            "--bootstrap", "1000",
            "--boundary-tolerance-m", "10",
            "--workers", "2",
            "-o", str(out / "run"),
        ]
    )
    print(f"demo finished in {time.perf_counter() - started:.1f} s; open {out / 'run' / 'report.md'} for the report")
    return status


if __name__ == "__main__":
    sys.exit(main())

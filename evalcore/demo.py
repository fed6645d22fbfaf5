"""``make demo``: generate a multi-zone dataset and evaluate it with the Prefect flow.

Runs ``evaluate-layers`` on an embedded Dask ``LocalCluster`` with 2 worker processes
and Prefect in its ephemeral mode: strata, size classes, 1000 bootstrap resamples and a
10 m boundary tolerance, the generated AOI and annotated-area layers, the scores and the
crop classes (``--class-column crop``: confusion matrix, kappa, per-class and macro metrics). The
generated layers and the run directory (metrics.json, report.md, manifest.json, fields/,
predictions/, tiles.parquet, aois.parquet, pr_curve.parquet, logs/run.log) go under ``demo-output/`` or the
directory given as the first argument. ``EVALCORE_DEMO_N_REF`` sets the number of
reference fields (default 30000).

Each step's exit status is checked: if one fails, the demo prints one line saying
which step failed and why, and exits with that step's status; it points to a report
only when the report was written.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from evalcore.cli import run as run_command  # Prefect's settings: flows/__init__.py

N_REF_ENV = "EVALCORE_DEMO_N_REF"
N_REF = 30_000
SEED = 7


def _failed(step: str, status: int, why: str | None) -> int:
    """Print the demo's one-line verdict for a failed step; return the exit status to use."""
    reason = why or f"exit status {status}"
    if len(reason) > 300:  # a server's captured output can be long; the line above has it all
        reason = reason[:300] + " …"
    print(f"demo failed at step {step}: {reason}", file=sys.stderr, flush=True)
    return status or 1


def _n_ref() -> int:
    """The number of reference fields: ``EVALCORE_DEMO_N_REF`` or :data:`N_REF`."""
    text = os.environ.get(N_REF_ENV, "").strip()
    if not text:
        return N_REF
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise ValueError(f"{N_REF_ENV} must be a positive whole number of fields, but got {text!r}.")
    return n


def main(argv: list[str] | None = None) -> int:
    """Run the demo; return the exit status (0 only when the report was written)."""
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0] if argv else "demo-output")
    data = out / "data"
    run = out / "run"
    started = time.perf_counter()
    try:
        n_ref = _n_ref()
    except ValueError as exc:
        return _failed("0/2 (settings)", 2, str(exc))
    try:  # the CLI creates its output directories but not their missing parents
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return _failed("0/2 (settings)", 2, f"cannot create the output directory {str(out)!r}: {exc}")
    print(f"[1/2] generating {n_ref} reference fields in 3 UTM zones (seed {SEED}) in {data}/", flush=True)
    # --force: a rerun of the demo replaces the data it generated before.
    status, why = run_command(["synth", "--n-ref", str(n_ref), "--seed", str(SEED), "--out", str(data), "--force"])
    if status:
        return _failed("1/2 (generating the data)", status, why)
    print(
        "[2/2] flow evaluate-layers on a local Dask cluster (2 workers): strata, size classes, AOIs, the annotated "
        "area, scores (AP, calibration), crop classes, 1000 bootstrap resamples, 10 m boundary tolerance; the dashboard link follows",
        flush=True,
    )
    status, why = run_command(
        [
            "run",
            "-p", str(data / "predicted.parquet"),
            "-r", str(data / "reference.parquet"),
            "--strata-column", "stratum",
            "--size-bins", "0,0.5,1,2,5,10,inf",
            "--bootstrap", "1000",
            "--boundary-tolerance-m", "10",
            "--aoi", str(data / "aoi.parquet"),
            "--aoi-id-column", "aoi_id",
            "--annotated-area", str(data / "annotated.parquet"),
            "--score-column", "score",
            "--class-column", "crop",
            "--workers", "2",
            "-o", str(run),
        ]
    )
    if status:
        return _failed("2/2 (flow evaluate-layers)", status, why)
    report = run / "report.html"
    if not report.is_file():  # a zero status without the report is still a failure
        return _failed("2/2 (flow evaluate-layers)", 1, f"the flow ended without writing {report}")
    print(f"demo finished in {time.perf_counter() - started:.1f} s; open {report} for the report", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

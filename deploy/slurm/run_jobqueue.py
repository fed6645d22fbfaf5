"""Run ``evaluate-layers`` on Dask workers submitted as SLURM jobs by dask-jobqueue.

Usage (on a login node or in a small batch job, from the repository root)::

    DASK_CONFIG=deploy/slurm python deploy/slurm/run_jobqueue.py params.json --jobs 4

``params.json`` holds :class:`flows.params.EvaluateParams` fields (``cluster`` is set
here). The profile is ``jobqueue.slurm`` from ``deploy/slurm/jobqueue.yaml`` (loaded
explicitly when DASK_CONFIG does not point at it). The scheduler runs in this
process; the dashboard link is printed and recorded as a Prefect artifact.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("params", type=Path, help="JSON file of EvaluateParams fields")
    parser.add_argument("--jobs", type=int, default=2, help="SLURM worker jobs to submit (default 2)")
    parser.add_argument("--profile", type=Path, default=HERE / "jobqueue.yaml", help="dask-jobqueue profile")
    parser.add_argument("--print-job-script", action="store_true", help="print the worker job script and exit")
    args = parser.parse_args(argv)

    import dask.config
    import yaml
    from dask_jobqueue import SLURMCluster

    with args.profile.open() as f:
        dask.config.update(dask.config.config, yaml.safe_load(f))

    # Flow imports after the profile: nothing in them reads the jobqueue settings.
    from flows.evaluate import evaluate_layers
    from flows.params import EvaluateParams

    with SLURMCluster() as cluster:
        if args.print_job_script:
            print(cluster.job_script())
            return 0
        params = EvaluateParams(**{**json.loads(args.params.read_text()), "cluster": cluster.scheduler_address})
        cluster.scale(jobs=args.jobs)
        print(f"scheduler {cluster.scheduler_address}, dashboard {cluster.dashboard_link}", file=sys.stderr)
        metrics = evaluate_layers(params)
    print(json.dumps({k: metrics.get(k) for k in ("precision", "recall", "f1", "count_reference", "count_predicted")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Flow ``evaluate-layers``: one evaluation on a Dask cluster, published to a run directory.

A handful of coarse Prefect tasks, one per phase; inside each, the per-partition work is
submitted to Dask by :class:`evalcore.distributed.runner.DistributedRun`, with task keys
named after the partition. Outputs in ``params.output_dir``:

* ``metrics.json``: the summary (same as ``evalcore.evaluate``), NaN as null;
* ``fields/part-<zone>_<tx>_<ty>.parquet``: the per-field table (GeoParquet);
* ``report.md``: the readable summary with intervals, per stratum and size class;
* ``manifest.json``: parameters, input checksums and rows, versions, partitions,
  outputs with checksums, and the run's status;
* ``status.json``: ``running``, ``succeeded`` or ``failed`` (with the error).

A failed run writes no ``metrics.json``; its ``status.json`` and manifest say it failed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import shutil
import traceback
from collections.abc import Iterator
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from evalcore.distributed.runner import DistributedRun
from evalcore.distributed.sources import LayerSource
from evalcore.errors import EvalInputError
from evalcore.io import atomic_path, write_json
from evalcore.report import package_versions, render_report, sha256_path
from flows.params import EvaluateParams

__all__ = ["evaluate_layers", "dask_client"]


@contextlib.contextmanager
def dask_client(address: str | None, n_workers: int) -> Iterator[object]:
    """A ``distributed.Client`` on ``address``, or on an embedded ``LocalCluster``."""
    from distributed import Client

    from evalcore.distributed.cluster import local_cluster

    if address:
        with Client(address, timeout="30s") as client:
            yield client
        return
    with local_cluster(n_workers) as cluster:
        with Client(cluster) as client:
            yield client


def _retry_unless_bad_input(task: object, task_run: object, state: object) -> bool:
    """Retry a phase after a transient failure, never after an input error (it would fail again)."""
    try:
        state.result()
    except EvalInputError:
        return False
    except Exception:
        return True
    return True


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


@task(name="prepare", retries=2, retry_condition_fn=_retry_unless_bad_input, cache_policy=NO_CACHE)
def prepare(run: DistributedRun) -> dict:
    """Read, repair, reproject and key both layers; write them partitioned."""
    index = run.prepare()
    run.make_plan()
    get_run_logger().info(
        "prepared %d reference fields and %d predictions into %d partitions",
        index["reference"]["n_kept"],
        index["predicted"]["n_kept"],
        len(set(index["reference"]["partitions"]) | set(index["predicted"]["partitions"])),
    )
    return {role: {k: v for k, v in entry.items() if k != "partitions"} for role, entry in index.items()}


@task(name="pairs", retries=2, retry_condition_fn=_retry_unless_bad_input, cache_policy=NO_CACHE)
def pairs(run: DistributedRun) -> int:
    """Candidate pairs, IoU, boundary distances and tolerance lengths per partition."""
    results = run.pairs()
    return sum(len(r.pairs) for r in results.values())


@task(name="resolve", retries=1, cache_policy=NO_CACHE)
def resolve(run: DistributedRun) -> None:
    """The global matching and every prediction's home reference."""
    run.resolve()


@task(name="sums", retries=2, retry_condition_fn=_retry_unless_bad_input, cache_policy=NO_CACHE)
def sums(run: DistributedRun) -> int:
    """Per-partition field tables and partial sums."""
    return len(run.sums())


@task(name="merge", retries=1, cache_policy=NO_CACHE)
def merge(run: DistributedRun) -> dict:
    """Check every partition is there and add the partial sums."""
    return run.merge()


@task(name="publish", retries=2, cache_policy=NO_CACHE)
def publish(run: DistributedRun, metrics: dict, params: EvaluateParams, started: str, dashboard: str) -> dict:
    """Write metrics.json, report.md and manifest.json; publish the Prefect artifacts."""
    out = Path(params.output_dir)
    inputs = _inputs(run, params)
    metrics_path = write_json(out / "metrics.json", metrics)
    report = render_report(metrics, title="evalcore evaluation", inputs=inputs)
    report_path = atomic_path(out / "report.md", lambda tmp: tmp.write_text(report, encoding="utf-8"))
    outputs = [metrics_path, report_path] + sorted((out / "fields").glob("*.parquet"))
    manifest = _manifest(run, params, inputs, "succeeded", started, dashboard)
    manifest["outputs"] = [{"path": str(p.relative_to(out)), "sha256": sha256_path(p), "bytes": p.stat().st_size} for p in outputs]
    write_json(out / "manifest.json", manifest)
    write_json(out / "status.json", {"status": "succeeded", "finished": _now()})
    create_markdown_artifact(report, key=artifact_key("evalcore-report", params), description="Evaluation summary")
    if metrics.get("per_stratum"):
        create_table_artifact(
            [
                {"stratum": name, "n": g["count_reference"], "precision": g["precision"], "recall": g["recall"], "f1": g["f1"], "iou_mean": g["iou_mean"]}
                for name, g in metrics["per_stratum"].items()
            ],
            key=artifact_key("evalcore-per-stratum", params),
            description="Metrics per stratum",
        )
    return manifest


def artifact_key(prefix: str, params: EvaluateParams) -> str:
    """``<prefix>-<run directory name>``, reduced to what Prefect keys allow (a-z, 0-9, dashes)."""
    name = re.sub(r"[^a-z0-9]+", "-", Path(params.output_dir).resolve().name.lower()).strip("-")
    return f"{prefix}-{name}"[:100].rstrip("-") if name else prefix


def _inputs(run: DistributedRun, params: EvaluateParams) -> dict:
    out = {}
    for role, source in (("reference", run.reference), ("predicted", run.predicted)):
        entry = run.index.get(role, {})
        out[role] = {
            "path": source.path,
            "layer": source.layer,
            "sha256": run.input_sha256.get(role) or sha256_path(source.path),
            "rows": entry.get("n_input"),
            "kept": entry.get("n_kept"),
            "dropped": entry.get("n_dropped"),
            "repaired": entry.get("n_repaired"),
        }
    return out


def _manifest(run: DistributedRun, params: EvaluateParams, inputs: dict, status: str, started: str, dashboard: str) -> dict:
    partitions = []
    ref_parts = run.index.get("reference", {}).get("partitions", {})
    pred_parts = run.index.get("predicted", {}).get("partitions", {})
    for key in sorted(set(ref_parts) | set(pred_parts)):
        done = run.sums_info.get(key)
        partitions.append(
            {
                "key": "_".join(map(str, key)),
                "reference_rows": ref_parts.get(key, {}).get("n", 0),
                "predicted_rows": pred_parts.get(key, {}).get("n", 0),
                "home_predictions": done["n_pred"] if done else None,
                "status": "done" if done or key not in ref_parts else "not done",
            }
        )
    return {
        "status": status,
        "started": started,
        "finished": _now(),
        "parameters": params.model_dump(mode="json"),
        "inputs": inputs,
        "versions": package_versions(),
        "tile_size_m": params.tile_size_m,
        "dask_dashboard": dashboard,
        "timings_s": run.timings,
        "partitions": partitions,
    }


@flow(name="evaluate-layers")
def evaluate_layers(params: EvaluateParams) -> dict:
    """Evaluate a predicted layer against a reference layer on a Dask cluster.

    Returns the metrics dict (the same as ``evalcore.evaluate`` with the same
    ``tile_size_m``) and writes the run directory described in this module.
    """
    logger = get_run_logger()
    options = params.options()
    out = Path(params.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    # A rerun must not leave an earlier result looking current while it runs or if it fails.
    for stale in ("metrics.json", "report.md", "manifest.json"):
        (out / stale).unlink(missing_ok=True)
    started = _now()
    write_json(out / "status.json", {"status": "running", "started": started})
    workdir = Path(params.workdir) if params.workdir else out / "work"
    run = None
    dashboard = ""
    try:
        with dask_client(params.cluster, params.n_workers) as client:
            dashboard = client.dashboard_link or ""
            logger.info("Dask dashboard: %s", dashboard)
            if dashboard:
                create_link_artifact(
                    dashboard, link_text="Dask dashboard", key=artifact_key("evalcore-dask-dashboard", params),
                    description="Live task stream of this run",
                )
            run = DistributedRun(
                client=client,
                predicted=LayerSource(params.predicted, params.pred_layer, "predicted"),
                reference=LayerSource(params.reference, params.ref_layer, "reference"),
                options=options,
                workdir=workdir,
                strata_column=params.strata_column,
                size_bins=params.size_bins,
                frame_dir=out / "fields",
                chunk_rows=params.chunk_rows,
                log=logger.info,
            )
            prepare(run)
            pairs(run)
            resolve(run)
            sums(run)
            metrics = merge(run)
            publish(run, metrics, params, started, dashboard)
    except BaseException as exc:
        for partial in ("metrics.json", "report.md"):
            (out / partial).unlink(missing_ok=True)
        failure = {"status": "failed", "finished": _now(), "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=5)}
        write_json(out / "status.json", failure)
        if run is not None:
            with contextlib.suppress(Exception):
                manifest = _manifest(run, params, {}, "failed", started, dashboard)
                manifest["error"] = failure["error"]
                write_json(out / "manifest.json", manifest)
        raise
    if not params.keep_workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    logger.info("run finished: precision %.3f, recall %.3f, F1 %.3f; outputs in %s", metrics["precision"], metrics["recall"], metrics["f1"], out)
    return metrics

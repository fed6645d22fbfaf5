"""Flow ``evaluate-layers``: one evaluation on a Dask cluster, published to a run directory.

A handful of coarse Prefect tasks, one per phase; inside each, the per-partition work is
submitted to Dask by the phase functions of :mod:`evalcore.distributed.runner`, with
task keys named after the partition; the tasks pass the phases' frozen outputs along. Outputs in ``params.output_dir``:

* ``metrics.json``: the summary (same as ``evalcore.evaluate``), NaN as null;
* ``fields/part-<zone>_<tx>_<ty>.parquet``: the per-field table (GeoParquet);
* ``predictions/part-<zone>_<tx>_<ty>.parquet``: the per-prediction table (GeoParquet);
* ``tiles.parquet``: the per-tile table (GeoParquet, tile squares in EPSG:4326);
* ``aois.parquet``: the per-AOI table with every AOI's polygon (with an AOI layer);
* ``pr_curve.parquet``: the exact precision-recall curves (with a score column);
* ``report.md``: the readable summary with intervals, per stratum and size class;
* ``report.html`` and ``figures/``: the self-contained page (:mod:`evalcore.html_report`,
  docs/report.md), also published as Prefect artifacts;
* ``manifest.json``: parameters, input checksums and rows, versions, partitions,
  outputs with checksums, and the run's status;
* ``status.json``: ``running``, ``succeeded`` or ``failed`` (with the error), written last;
* the evidence bundle of SPEC 6.8 (:mod:`evalcore.evidence`, docs/evidence.md):
  ``evaluation-contract.json``, ``input-manifest.json``, the per-family metrics files,
  ``latency-and-reliability.json``, ``error-taxonomy.json``, ``acceptance-gates.json``
  and, written last, ``evidence-manifest.json`` (the SHA-256 of every other file);
* ``logs/run.log``: the whole log of the run, appended to by a rerun: DEBUG lines, a
  line per partition and phase, Prefect's lines and Dask's warnings (the Prefect run
  log and the terminal get one line per phase).

A failed run writes no ``metrics.json``; its ``status.json`` and manifest say it failed.
A run whose acceptance gates do not pass keeps every output, and its ``status.json``
says ``failed`` with ``"failure": "gates"``, as the flow's state and the exit status do.
The run directory is claimed by one run at a time; ``fields/`` and ``predictions/`` are
written aside and swapped in whole; the work directory loses only what the run wrote
there (:mod:`evalcore.outputs`, docs/reliability.md "Files").
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import shutil
import tempfile
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.utilities.annotations import quote

from evalcore.distributed.cluster import DASHBOARD_ADDRESS
from evalcore.distributed.runner import (
    merge_phase,
    pairs_phase,
    phase_timings,
    plan_phase,
    prepare_phase,
    release_mirrors,
    resolve_phase,
    sums_phase,
)
from evalcore import remote
from evalcore.distributed import workdir as wd
from evalcore.distributed.sources import LayerSource
from evalcore.distributed.staging import SITE_OPTIONS, start_run
from evalcore.distributed.values import PairsDone, ResolvedRun, RunIndex, RunSetup, SumsDone
from evalcore.distributed.reliability import peak_rss_mib, run_reliability, start_recording
from evalcore.errors import EvalInputError
from evalcore.evidence import BUNDLE_FILES
from evalcore.writers import atomic_path, write_json
from evalcore.logs import PhaseProgress, library_level, run_log, terminal_line
from evalcore.options import EvalOptions, RunPlan
from evalcore.outputs import (
    OutputSet,
    RunDirectoryLock,
    check_replaceable_directory,
    check_remote_run_directory,
    check_run_directory,
    claim_workdir,
    put_run_directory,
    release_workdir,
    remove_parts_directory,
)
from evalcore.report import package_versions, render_report, sha256_path
from flows.params import EvaluateParams

__all__ = ["evaluate_layers", "dask_client", "RUN_LOG"]

#: The run's whole log, relative to the run directory.
RUN_LOG = Path("logs") / "run.log"

_log = logging.getLogger(__name__)  # lines for the run log only (DEBUG), not the Prefect API


@contextlib.contextmanager
def dask_client(address: str | None, n_workers: int, dashboard_address: str = DASHBOARD_ADDRESS) -> Iterator[object]:
    """A ``distributed.Client`` on ``address``, or on an embedded ``LocalCluster`` whose
    dashboard listens on ``dashboard_address`` (default: loopback only)."""
    from distributed import Client

    from evalcore.distributed.cluster import local_cluster

    if address:
        with Client(address, timeout="30s") as client:
            yield client
        return
    # A task's error reaches the flow as an exception (and the run log, the terminal's one
    # line): the workers' own "Compute Failed" logs, one per retry, would only repeat it.
    with local_cluster(n_workers, dashboard_address=dashboard_address, silence_logs=library_level(quiet=logging.CRITICAL)) as cluster:
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
def prepare(client: object, setup: RunSetup) -> tuple[RunIndex, RunPlan]:
    """Read, repair, reproject and key both layers; write them partitioned; plan the groups."""
    index = prepare_phase(client, setup)
    return index, plan_phase(setup, index)


@task(name="pairs", retries=2, retry_condition_fn=_retry_unless_bad_input, cache_policy=NO_CACHE)
def pairs(client: object, setup: RunSetup, index: RunIndex) -> PairsDone:
    """Candidate pairs, IoU, boundary distances and tolerance lengths per partition."""
    return pairs_phase(client, setup, index)


@task(name="resolve", retries=1, cache_policy=NO_CACHE)
def resolve(client: object, setup: RunSetup, index: RunIndex, done: PairsDone, plan: RunPlan) -> ResolvedRun:
    """The matching, every prediction's home reference, and the score-ordered values (AP): on the
    workers by connected components where :func:`resolves_on_workers` allows, else on the client."""
    return resolve_phase(setup, index, done, plan, client=client)


@task(name="sums", retries=2, retry_condition_fn=_retry_unless_bad_input, cache_policy=NO_CACHE)
def sums(client: object, setup: RunSetup, index: RunIndex, plan: RunPlan, resolved: ResolvedRun) -> SumsDone:
    """Per-partition field tables and partial sums."""
    return sums_phase(client, setup, index, plan, resolved)


@task(name="merge", retries=1, cache_policy=NO_CACHE)
def merge(client: object, setup: RunSetup, index: RunIndex, plan: RunPlan, resolved: ResolvedRun, done: SumsDone) -> dict:
    """Check every partition is there and add the partial sums (and count the tiles' pixels on the workers)."""
    return merge_phase(setup, index, plan, resolved, done, client)


@dataclass(frozen=True)
class RunRecord:
    """What the manifest says of a run: its setup and the phase outputs that exist."""

    setup: RunSetup
    index: RunIndex | None = None
    sums: SumsDone | None = None
    timings: dict = field(default_factory=dict)


@task(name="publish", retries=2, cache_policy=NO_CACHE)
def publish(record: RunRecord, metrics: dict, params: EvaluateParams, started: str, dashboard: str) -> dict:
    """Write metrics.json, report.md and manifest.json; publish the Prefect artifacts."""
    out = Path(params.output_dir)
    inputs = _inputs(record, params)
    metrics_path = write_json(out / "metrics.json", metrics)
    report = render_report(metrics, title="evalcore evaluation", inputs=inputs)
    report_path = atomic_path(out / "report.md", lambda tmp: tmp.write_text(report, encoding="utf-8"))
    outputs = [metrics_path, report_path] + [p for p in (out / "tiles.parquet", out / "aois.parquet", out / "pr_curve.parquet") if p.exists()]
    outputs += sorted((out / "fields").glob("*.parquet")) + sorted((out / "predictions").glob("*.parquet"))
    manifest = _manifest(record, params, inputs, "succeeded", started, dashboard)
    manifest["outputs"] = [{"path": str(p.relative_to(out)), "sha256": sha256_path(p), "bytes": p.stat().st_size} for p in outputs]
    write_json(out / "manifest.json", manifest)
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
    if metrics.get("aois"):
        create_table_artifact(
            [{"aoi": key, **{k: g[k] for k in ("count_reference", "precision", "recall", "f1", "support", "insufficient_support")}}
             for key, g in metrics["aois"]["per_aoi"].items()],
            key=artifact_key("evalcore-per-aoi", params),
            description="Metrics per AOI",
        )
    return manifest


def artifact_key(prefix: str, params: EvaluateParams) -> str:
    """``<prefix>-<run directory name>``, reduced to what Prefect keys allow (a-z, 0-9, dashes)."""
    from flows.report_artifacts import artifact_key as reduced_key

    return reduced_key(prefix, Path(params.output_dir).resolve().name)


def _inputs(record: RunRecord, params: EvaluateParams) -> dict:
    out = {}
    setup = record.setup
    for role, source in (("reference", setup.reference), ("predicted", setup.predicted)):
        entry = record.index.layers.get(role, {}) if record.index is not None else {}
        out[role] = {
            "path": source.path,
            "layer": source.layer,
            "sha256": setup.input_sha256.get(role) or sha256_path(source.path),
            "rows": entry.get("n_input"),
            "kept": entry.get("n_kept"),
            "dropped": entry.get("n_dropped"),
            "repaired": entry.get("n_repaired"),
        }
    return out


def _manifest(record: RunRecord, params: EvaluateParams, inputs: dict, status: str, started: str, dashboard: str) -> dict:
    partitions = []
    layers = record.index.layers if record.index is not None else {}
    ref_parts = layers.get("reference", {}).get("partitions", {})
    pred_parts = layers.get("predicted", {}).get("partitions", {})
    summed = record.sums.partitions if record.sums is not None else {}
    for key in sorted(set(ref_parts) | set(pred_parts)):
        done = summed.get(key)
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
        "parameters": shown_parameters(params),
        "inputs": inputs,
        "versions": package_versions(),
        "partition_size_m": params.partition_size_m,
        "dask_dashboard": dashboard,
        "timings_s": record.timings,
        "partitions": partitions,
    }


@flow(name="evaluate-layers")
def evaluate_layers(params: EvaluateParams) -> dict:
    """Evaluate a predicted layer against a reference layer on a Dask cluster.

    Returns the metrics dict (the same as ``evalcore.evaluate`` with the same
    ``partition_size_m``) and writes the run directory described in this module.
    """
    options = params.options()  # bad options fail here, before the run directory exists
    if remote.is_url(params.output_dir) and remote.is_url(remote.normalise(params.output_dir)):
        return _evaluate_to_store(params, options)
    out = Path(params.output_dir)
    check_run_directory(out)
    for name in ("fields", "predictions"):
        check_replaceable_directory(out / name, f"{name}/ of the run directory")
    out.mkdir(parents=True, exist_ok=True)
    # One run at a time in a run directory; the lock dies with this process however it ends.
    with RunDirectoryLock(out), run_log(out / RUN_LOG):
        return _evaluate(params, options, out)


def _evaluate_to_store(params: EvaluateParams, options: EvalOptions) -> dict:
    """:func:`evaluate_layers` with the run directory on an object store.

    The run directory is written in a local staging directory and put object by object
    when whole, ``status.json`` (the run's completion marker) last; the work directory is
    on the store too (``RUN_DIR/work`` unless given), so the workers need no file system
    shared with this client. A failed run puts only its ``status.json`` and ``manifest.json``.
    """
    url = remote.normalise(params.output_dir)
    check_remote_run_directory(url)
    local = Path(tempfile.mkdtemp(prefix="evalcore-run-"))
    staged = params.model_copy(update={"output_dir": str(local), "workdir": params.workdir or remote.join(url, "work")})
    _SHOWN[str(local)] = url
    try:
        with run_log(local / RUN_LOG):
            try:
                metrics = _evaluate(staged, options, local)
            except BaseException:
                for name in ("manifest.json", "status.json"):
                    if (local / name).is_file():
                        remote.put_file(local / name, remote.join(url, name))
                raise
        put_run_directory(local, url)
        return metrics
    except GatesNotPassed:
        put_run_directory(local, url)
        raise
    finally:
        _SHOWN.pop(str(local), None)
        shutil.rmtree(local, ignore_errors=True)


_SHOWN: dict[str, str] = {}
"""Local staging directories of run directories on a store, and their URLs: what the
manifests and the evidence record as the run directory is the URL the user gave."""


def shown_parameters(params: EvaluateParams) -> dict:
    """The run's parameters as recorded, with a store run directory's URL (not its local staging directory)."""
    dumped = params.model_dump(mode="json")
    if dumped.get("output_dir") in _SHOWN:
        dumped["output_dir"] = _SHOWN[dumped["output_dir"]]
    return dumped


def _evaluate(params: EvaluateParams, options: EvalOptions, out: Path) -> dict:
    """The body of :func:`evaluate_layers`, inside its run log."""
    logger = get_run_logger()
    _log.debug("run %s: predicted %s, reference %s", out, params.predicted, params.reference)
    # A rerun must not leave an earlier result looking current while it runs or if it fails.
    for stale in ("metrics.json", "report.md", "report.html", "manifest.json", "tiles.parquet", "aois.parquet", "pr_curve.parquet", *BUNDLE_FILES):
        (out / stale).unlink(missing_ok=True)
    previous_amendments = ("acceptance-gates.v*.json", "evidence-manifest.v*.json", "comparison.json", "comparison.md", "paired.json", "paired.md")
    for amendment in [p for pattern in previous_amendments for p in out.glob(pattern)]:
        amendment.unlink()  # the previous run's amendments (evidence.AMENDABLE): not evidence of this one
    shutil.rmtree(out / "figures", ignore_errors=True)
    for name in ("fields", "predictions"):  # parts of the previous run only (checked before the lock)
        remove_parts_directory(out / name)
    started = _now()
    write_json(out / "status.json", {"status": "running", "started": started})
    workdir = claim_workdir(params.workdir if params.workdir and remote.is_url(params.workdir) else
                            Path(params.workdir) if params.workdir else out / "work")
    on_store = remote.is_url(str(workdir))
    staged = OutputSet()  # fields/ and predictions/ are written aside and swapped in whole
    setup = index = done_pairs = resolved = done_sums = merge_seconds = gate_result = None
    dashboard = ""
    client_peaks: dict[str, float] = {}  # this process's peak memory after each phase, MiB

    def record() -> RunRecord | None:
        """What the manifest can say of the run so far (the phases that finished)."""
        if setup is None:
            return None
        timings = phase_timings(prepare=index, pairs=done_pairs, resolve=resolved, sums=done_sums)
        if merge_seconds is not None:
            timings["merge"] = merge_seconds
        return RunRecord(setup, index, done_sums, timings)

    try:
        with dask_client(params.cluster, params.n_workers, params.dashboard_address) as client:
            dashboard = client.dashboard_link or ""
            logger.info("Dask dashboard: %s", dashboard)
            if dashboard:
                terminal_line(f"Dask dashboard: {dashboard}")  # the terminal's copy; Prefect's line shows from -v on
            if dashboard:
                create_link_artifact(
                    dashboard, link_text="Dask dashboard", key=artifact_key("evalcore-dask-dashboard", params),
                    description="Live task stream of this run",
                )
            setup = start_run(
                LayerSource(params.predicted, params.pred_layer, "predicted"),
                LayerSource(params.reference, params.ref_layer, "reference"),
                options,
                wd.root(workdir),
                strata_column=params.strata_column,
                size_bins=params.size_bins,
                # A work directory on the store: the workers write the tables' parts there,
                # and this client fetches them into the staged run directory after the merge.
                frame_dir=wd.root(workdir) / "outputs" / "fields" if on_store else staged.directory(out / "fields"),
                chunk_rows=params.chunk_rows,
                log=logger.info,
                progress=PhaseProgress(),  # the terminal's line per phase (evalcore.logs)
                tiles_out=out / "tiles.parquet",
                aois_out=out / "aois.parquet" if options.aoi is not None else None,
                predictions_dir=(wd.root(workdir) / "outputs" / "predictions") if on_store else staged.directory(out / "predictions"),
                pr_curve_out=out / "pr_curve.parquet" if options.score_column is not None else None,
            )
            recording_since = start_recording(client)
            # The phases' values go to the tasks quoted: Prefect would walk every item of each
            # (a country's index, resolve and metrics) to look for futures in it, resolving a
            # task's arguments and creating its run (1.25 s and 0.8 s of the client's serial
            # time at 2M fields, py-spy, 2026-12-06); nothing in them is one.
            index, plan = prepare(client, quote(setup))
            client_peaks["prepare"] = peak_rss_mib()
            logger.info(
                "prepared %d reference fields and %d predictions into %d partitions",
                index.layers["reference"]["n_kept"], index.layers["predicted"]["n_kept"], len(index.keys()),
            )
            done_pairs = pairs(client, quote(setup), quote(index))
            client_peaks["pairs"] = peak_rss_mib()
            resolved = resolve(client, quote(setup), quote(index), quote(done_pairs), quote(plan))
            client_peaks["resolve"] = peak_rss_mib()
            done_sums = sums(client, quote(setup), quote(index), quote(plan), quote(resolved))
            client_peaks["sums"] = peak_rss_mib()
            merge_started = time.perf_counter()
            metrics = merge(client, quote(setup), quote(index), quote(plan), quote(resolved), quote(done_sums))
            merge_seconds = time.perf_counter() - merge_started
            client_peaks["merge"] = peak_rss_mib()
            if on_store:
                _fetch_parts(setup.frame_dir, staged.directory(out / "fields"))
                if setup.predictions_dir is not None:
                    _fetch_parts(setup.predictions_dir, staged.directory(out / "predictions"))
            staged.commit()
            publish(quote(record()), quote(metrics), params, started, dashboard)
            gate_result = check_gates(params) if params.gates else None
            reliability = run_reliability(client, recording_since, record().timings, client_peaks, embedded=not params.cluster)
            release_mirrors(client, workdir)  # the workers' copies of a store work directory
        evidence(params, quote(setup), quote(metrics), quote(reliability), started)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalcore-release") as releasing:
            # Only what this run wrote in the work directory goes, and the directory only if
            # evalcore made it (evalcore.outputs); on a thread while the report is drawn (at
            # 2M fields, 3.0 s of unlinking), and before the seal, which accounts for every
            # file left in the run directory (a kept work directory is sealed with the rest).
            released = None if params.keep_workdir else releasing.submit(release_workdir, workdir)
            html_report(params)  # after the gates and the bundle: the decision and the identity are on the page
            if released is not None:
                released.result()
        seal_evidence(params)
        # The final state is written last, so "succeeded" is never seen without every output;
        # gates that do not pass end the run Failed, here as in Prefect and in the exit status.
        final = {"status": "succeeded", "finished": _now()}
        if gate_result is not None and gate_result["decision"] != "pass":
            final = {"status": "failed", "finished": final["finished"], "failure": "gates", "gates_decision": gate_result["decision"],
                     "error": str(GatesNotPassed(gate_result)), "outputs_complete": True}
        write_json(out / "status.json", final)
    except BaseException as exc:
        _log.debug("run %s failed", out, exc_info=True)  # the whole traceback, in the run log only
        for partial in ("metrics.json", "report.md"):
            (out / partial).unlink(missing_ok=True)
        failure = {"status": "failed", "finished": _now(), "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=5)}
        write_json(out / "status.json", failure)
        so_far = record()
        if so_far is not None:
            with contextlib.suppress(Exception):
                manifest = _manifest(so_far, params, {}, "failed", started, dashboard)
                manifest["error"] = failure["error"]
                write_json(out / "manifest.json", manifest)
        staged.abort()
        raise
    finally:
        wd.discard(workdir)  # this client's copy of a store work directory (the store keeps it)
    logger.info("run finished: precision %.3f, recall %.3f, F1 %.3f; outputs in %s", metrics["precision"], metrics["recall"], metrics["f1"], out)
    if gate_result is not None and gate_result["decision"] != "pass":
        # After everything is written: the run ends Failed, so an automation can alert.
        raise GatesNotPassed(gate_result, metrics)
    return metrics


def _fetch_parts(directory: Path, target: Path) -> None:
    """Copy the ``part-*.parquet`` objects the workers put in a store work directory's ``outputs/`` into a staged local directory."""
    for part in wd.files(directory, "part-*.parquet"):
        shutil.copyfile(wd.fetch(part), target / part.name)


class GatesNotPassed(RuntimeError):
    """The run's acceptance gates did not all pass (``decision``: fail or not_evaluable)."""

    expected_outcome = True  # a decision, not a crash: no traceback on the terminal

    def __init__(self, result: dict, metrics: dict | None = None) -> None:
        self.result = result
        self.metrics = metrics  # for the caller's summary: the run itself is complete
        from evalcore.gates import counts_text

        super().__init__(f"acceptance gates: {result['decision']} ({counts_text(result)}); see acceptance-gates.json")


@task(name="html-report", retries=1, cache_policy=NO_CACHE)
def html_report(params: EvaluateParams) -> str | None:
    """Build report.html and figures/ from the run directory; publish the figures and tables as artifacts.

    A plotting failure is logged, not raised: the metrics are written and must not be
    thrown away for a figure (``evalcore report RUN_DIR`` rebuilds the page later).
    """
    from evalcore.html_report import build_report
    from flows.report_artifacts import publish_report_artifacts

    out = Path(params.output_dir)
    logger = get_run_logger()
    try:
        path = build_report(out)
    except Exception as exc:
        logger.warning("report.html could not be built (%s: %s); rebuild it with: evalcore report %s", type(exc).__name__, exc, out)
        _log.debug("report.html failed", exc_info=True)
        return None
    publish_report_artifacts(out, out.resolve().name)
    logger.info("report: %s", path)
    return str(path)


@task(name="evidence", retries=0, cache_policy=NO_CACHE)
def evidence(params: EvaluateParams, setup: RunSetup, metrics: dict, reliability: dict, started: str) -> None:
    """Write the evidence bundle's files (SPEC 6.8); :func:`seal_evidence` adds the manifest."""
    from prefect.runtime import flow_run

    from evalcore.evidence import BundleInputs, InputLayer, write_bundle

    layers = [
        InputLayer("reference", params.reference, params.ref_layer),
        InputLayer("predicted", params.predicted, params.pred_layer),
    ]
    for role in SITE_OPTIONS:
        value = getattr(params, role, None)
        if isinstance(value, str):
            layers.append(InputLayer(role, value, getattr(params, f"{role}_layer", None)))
    if params.gates:
        layers.append(InputLayer("gates", params.gates))
    given = BundleInputs(
        inputs=layers,
        parameters=shown_parameters(params),
        metric_parameters=params.metric_parameters(),
        labels=dict(params.labels),
        reliability=reliability,
        run_id=str(flow_run.id) if flow_run.id else None,
        started=started,
        expected_sha256=dict(setup.input_sha256),
    )
    write_bundle(params.output_dir, metrics, given, seal=False)  # sealed by seal_evidence, after the report


@task(name="seal-evidence", retries=0, cache_policy=NO_CACHE)
def seal_evidence(params: EvaluateParams) -> str:
    """Write evidence-manifest.json last: the SHA-256 of every other file of the run directory."""
    from evalcore.evidence import write_evidence_manifest

    manifest = write_evidence_manifest(params.output_dir)
    get_run_logger().info("evidence bundle written; %s hashes every file of the run directory", manifest.name)
    return str(manifest)


@task(name="gates", retries=0, cache_policy=NO_CACHE)
def check_gates(params: EvaluateParams) -> dict:
    """Check the run's metrics against the gates file; write acceptance-gates.json; publish the gate table."""
    import json

    from evalcore.evidence import gate_metrics
    from evalcore.gates import evaluate_gates, load_gates

    out = Path(params.output_dir)
    metrics_path = out / "metrics.json"
    result = evaluate_gates(
        gate_metrics(out, json.loads(metrics_path.read_text(encoding="utf-8"))), load_gates(params.gates),
        evidence_file="metrics.json", evidence_sha256=sha256_path(metrics_path),
    )
    result["gates_file"] = {"path": str(Path(params.gates).resolve()), "sha256": sha256_path(params.gates)}
    write_json(out / "acceptance-gates.json", result)
    create_table_artifact(
        [{k: r.get(k) for k in ("id", "group", "metric", "observed", "op", "expected", "support", "state", "reason", "blocks")} for r in result["rules"]],
        key=artifact_key("evalcore-gates", params),
        description=f"Acceptance gates: {result['decision']}",
    )
    get_run_logger().info("acceptance gates: %s (%s)", result["decision"], ", ".join(f"{k} {v}" for k, v in result["counts"].items()))
    return result

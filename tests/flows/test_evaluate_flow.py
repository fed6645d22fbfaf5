"""The ``evaluate-layers`` flow end to end: a real LocalCluster, a real (temporary) Prefect server.

One run on 1,200 generated fields (module fixture), then checks of what it left behind:
metrics identical to the single-process engine, a manifest whose checksums match the
files, the status, the report and the Prefect artifacts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

import evalcore
from evalcore.writers import to_jsonable
from evalcore.synth import write_layers
from flows.evaluate import evaluate_layers
from flows.params import EvaluateParams

# Keys carry the run directory's name ("run") so runs of different products do not overwrite each other.
ARTIFACT_KEYS = ("evalcore-report-run", "evalcore-per-stratum-run", "evalcore-dask-dashboard-run")


def naive_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, without the project's helper."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evaluate-flow")
    pred, ref = write_layers(tmp / "data", 1200, seed=4)
    params = EvaluateParams(
        predicted=str(pred),
        reference=str(ref),
        output_dir=str(tmp / "run"),
        strata_column="stratum",
        size_bins="auto",
        bootstrap=30,
        boundary_tolerance_m=10,
        partition_size_m=10_000,
        n_workers=2,
    )
    state = evaluate_layers(params, return_state=True)
    assert state.is_completed(), state.message
    return SimpleNamespace(
        pred=pred, ref=ref, out=tmp / "run", params=params, metrics=state.result(), flow_run_id=state.state_details.flow_run_id
    )


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_metrics_equal_single_process(run):
    expected = to_jsonable(
        evalcore.evaluate(
            str(run.pred), str(run.ref), strata="stratum", size_bins="auto", bootstrap=30, boundary_tolerance_m=10.0, partition_size_m=10_000.0
        )
    )
    assert _json(run.out / "metrics.json") == expected  # exact: same partitions, same summation order
    assert to_jsonable(run.metrics) == expected  # the flow's return value too
    assert expected["bootstrap"]["ci"]["f1"] is not None and expected["per_stratum"]


def test_manifest_checksums_match_files(run):
    manifest = _json(run.out / "manifest.json")
    listed = {entry["path"] for entry in manifest["outputs"]}
    parts = list((run.out / "fields").glob("*.parquet")) + list((run.out / "predictions").glob("*.parquet"))
    on_disk = {"metrics.json", "report.md", "tiles.parquet"} | {str(p.relative_to(run.out)) for p in parts}
    assert listed == on_disk and len(on_disk) > 2
    for entry in manifest["outputs"]:
        path = run.out / entry["path"]
        assert naive_sha256(path) == entry["sha256"], entry["path"]
        assert path.stat().st_size == entry["bytes"], entry["path"]
    assert manifest["inputs"]["predicted"]["sha256"] == naive_sha256(run.pred)
    assert manifest["inputs"]["reference"]["sha256"] == naive_sha256(run.ref)
    assert manifest["status"] == "succeeded"
    assert manifest["parameters"] == run.params.model_dump(mode="json")
    assert manifest["partitions"] and all(p["status"] == "done" for p in manifest["partitions"])


def test_status_succeeded(run):
    assert _json(run.out / "status.json")["status"] == "succeeded"


def test_report_has_per_stratum_table(run):
    report = (run.out / "report.md").read_text(encoding="utf-8")
    assert "## Per stratum" in report
    assert "| stratum | reference fields |" in report
    for name, group in run.metrics["per_stratum"].items():
        assert f"| {name} | {group['count_reference']} |" in report
    assert "## Per field-size class (ha)" in report


def test_artifacts_published(run):
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=list(ARTIFACT_KEYS)),
                flow_run_id=ArtifactFilterFlowRunId(any_=[run.flow_run_id]),
            )
        )
    by_key = {a.key: a for a in artifacts}
    assert set(by_key) == set(ARTIFACT_KEYS)
    assert by_key["evalcore-report-run"].type == "markdown"
    assert by_key["evalcore-report-run"].data == (run.out / "report.md").read_text(encoding="utf-8")
    # Prefect 3 stores a link artifact as Markdown: "[link text](url)".
    dashboard = _json(run.out / "manifest.json")["dask_dashboard"]
    assert by_key["evalcore-dask-dashboard-run"].data == f"[Dask dashboard]({dashboard})"
    table = by_key["evalcore-per-stratum-run"]
    assert table.type == "table"
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert {row["stratum"] for row in rows} == set(run.metrics["per_stratum"])

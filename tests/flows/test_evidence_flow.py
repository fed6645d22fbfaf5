"""The evidence bundle and the gates through the ``evaluate-layers`` flow (real LocalCluster,
temporary Prefect server), and the same run directory from ``evalcore run``.

One flow run on 800 generated fields with AOIs, labels and a gates file whose rules
pass, fail and are not evaluable: the run writes everything, then ends Failed.
"""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from evalcore.cli import main
from evalcore.evidence import BUNDLE_FILES, verify
from evalcore.synth import write_layers
from flows.evaluate import evaluate_layers
from flows.params import EvaluateParams
from tests.common import naive_sha256, strict_json

GATES = """\
gates:
  - id: G-F1
    metric: f1
    op: ">="
    threshold: 0.5
  - id: G-PRECISION-HIGH
    metric: precision
    op: ">="
    threshold: 0.999
  - id: G-AOI-RECALL
    metric: aois.per_aoi.*.recall
    op: ">="
    threshold: 0.5
    min_support: 1000000
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evidence-flow")
    pred, ref = write_layers(tmp / "data", 800, seed=5)
    gates = tmp / "gates.yaml"
    gates.write_text(GATES, encoding="utf-8")
    common = dict(predicted=str(pred), reference=str(ref), aoi=str(tmp / "data" / "aoi.parquet"), aoi_id_column="aoi_id",
                  strata_column="stratum", partition_size_m=20_000, n_workers=2)
    params = EvaluateParams(**common, output_dir=str(tmp / "run"), gates=str(gates), labels={"model": "m-1"})
    state = evaluate_layers(params, return_state=True)
    return SimpleNamespace(tmp=tmp, out=tmp / "run", state=state, pred=pred, ref=ref, gates=gates, params=params)


def test_the_run_ends_failed_after_writing_everything(run):
    assert run.state.is_failed()
    assert "acceptance gates: fail" in run.state.message
    # The flow's state and status.json agree: failed, by the gates, with every output written.
    status = strict_json(run.out / "status.json")
    assert status["status"] == "failed" and status["failure"] == "gates" and status["outputs_complete"] is True
    for name in BUNDLE_FILES:
        assert isinstance(strict_json(run.out / name), dict), name
    assert verify(run.out).ok


def test_the_three_states(run):
    gates = strict_json(run.out / "acceptance-gates.json")
    states = {(r["id"], r["state"]) for r in gates["rules"]}
    assert ("G-F1", "pass") in states and ("G-PRECISION-HIGH", "fail") in states
    assert {s for i, s in states if i == "G-AOI-RECALL"} == {"not_evaluable"}
    assert gates["decision"] == "fail"
    assert gates["counts"]["pass"] == 1 and gates["counts"]["fail"] == 1 and gates["counts"]["not_evaluable"] >= 2


def test_evidence_manifest_matches_every_file(run):
    manifest = strict_json(run.out / "evidence-manifest.json")
    listed = {e["path"]: e["sha256"] for e in manifest["files"]}
    on_disk = {p.relative_to(run.out).as_posix() for p in run.out.rglob("*")
               if p.is_file() and p.relative_to(run.out).parts[0] not in ("logs", "work")}
    # The manifest itself, and the run's state (written after it) and lock: not evidence.
    on_disk -= {"evidence-manifest.json", "status.json", ".evalcore-run.lock"}
    assert set(listed) == on_disk
    assert all(naive_sha256(run.out / path) == sha for path, sha in listed.items())


def test_inputs_and_identity(run):
    inputs = {e["role"]: e for e in strict_json(run.out / "input-manifest.json")["inputs"]}
    assert set(inputs) == {"reference", "predicted", "aoi", "gates"}
    assert inputs["reference"]["sha256"] == naive_sha256(run.ref)
    assert inputs["predicted"]["rows"] == len(pd.read_parquet(run.pred))
    contract = strict_json(run.out / "evaluation-contract.json")
    assert contract["labels"] == {"model": "m-1"}
    assert contract["input_manifest_sha256"] == naive_sha256(run.out / "input-manifest.json")
    assert contract["run_id"] == str(run.state.state_details.flow_run_id)
    assert contract["parameters"]["gates"] == str(run.gates)


def test_taxonomy_counts_equal_the_tables(run):
    fields = pd.concat([pd.read_parquet(p, columns=["error_code", "split"]) for p in sorted((run.out / "fields").glob("*.parquet"))])
    preds = pd.concat([pd.read_parquet(p, columns=["error_code", "merge"]) for p in sorted((run.out / "predictions").glob("*.parquet"))])
    overall = strict_json(run.out / "error-taxonomy.json")["overall"]
    f, p = fields["error_code"].value_counts(), preds["error_code"].value_counts()
    assert overall["TP"] == f.get("TP", 0) == p.get("TP", 0)
    for code in ("M-FN-MISSED", "M-FN-LOCALISATION"):
        assert overall[code] == f.get(code, 0), code
    for code in ("M-FP-BACKGROUND", "M-FP-DUPLICATE", "M-FP-LOCALISATION"):
        assert overall[code] == p.get(code, 0), code
    assert overall["split"] == int(fields["split"].sum()) and overall["merge"] == int(preds["merge"].sum())
    assert overall["M-BOUNDARY"] is None  # no tolerance asked for
    tiles = strict_json(run.out / "error-taxonomy.json")["per_tile"]
    assert sum(t["M-FP-BACKGROUND"] for t in tiles.values()) == overall["M-FP-BACKGROUND"]


def test_reliability_per_phase(run):
    rel = strict_json(run.out / "latency-and-reliability.json")
    assert rel["state"] == "computed" and rel["workers"] == 2 and rel["lost_workers"] == 0
    assert {"prepare", "pairs", "resolve", "sums", "merge"} <= set(rel["phases"])
    assert rel["phases"]["pairs"]["tasks"] > 0 and rel["phases"]["pairs"]["wall_s"] > 0
    assert rel["peak_rss_mib"]["client"] > 0 and len(rel["peak_rss_mib"]["workers"]) == 2


async def _gate_artifacts() -> list:
    async with get_client() as client:
        return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["evalcore-gates-run"])))


def test_the_gate_table_is_an_artifact(run):
    import asyncio

    artifacts = asyncio.run(_gate_artifacts())
    assert artifacts and artifacts[0].type == "table"


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_the_cli_writes_the_same_run_directory(run, capsys):
    out = run.tmp / "cli-run"
    status = main([
        "run", "-p", str(run.pred), "-r", str(run.ref), "--aoi", run.params.aoi, "--aoi-id-column", "aoi_id",
        "--strata-column", "stratum", "--partition-km", "20", "--gates", str(run.gates), "--label", "model=m-1",
        "-o", str(out),
    ])
    assert status == 1  # a gate fails
    names = lambda d: sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file() and p.relative_to(d).parts[0] != "logs")
    assert names(out) == names(run.out)
    assert strict_json(out / "metrics.json") == strict_json(run.out / "metrics.json")
    for name in ("error-taxonomy.json", "object-metrics.json", "stratified-metrics.json", "tile-metrics.json", "aoi-metrics.json"):
        assert strict_json(out / name) == strict_json(run.out / name), name
    first, second = strict_json(run.out / "acceptance-gates.json"), strict_json(out / "acceptance-gates.json")
    assert [r["state"] for r in first["rules"]] == [r["state"] for r in second["rules"]]
    c1, c2 = strict_json(run.out / "evaluation-contract.json"), strict_json(out / "evaluation-contract.json")
    assert c1["parameters_sha256"] == c2["parameters_sha256"] and c1["labels"] == c2["labels"]
    assert c1["run_id"] != c2["run_id"]

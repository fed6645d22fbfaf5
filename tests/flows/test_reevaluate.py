"""``reevaluate-new-imagery``: only new layers are evaluated, every run is registered and compared.

The scenario (module fixture) on one generated reference (400 fields) and three
prediction layers cut from one predicted layer (different rows dropped): a GeoParquet
file, a GeoPackage, and later a directory of GeoParquet parts. Its evaluations run on
the session's real 2-worker LocalCluster (``cluster``: the path of a running scheduler);
the flow's own LocalCluster (``n_workers``) is started by the failed-evaluation test.

1. local directory: the first two layers are evaluated;
2. again: nothing new;
3. the third layer is added: only it is evaluated, and compared with the second run;
4. the same directory as a ``file://`` URL: nothing new (identity is content, not path);
5. a ``memory://`` copy of it, staged locally and hashed: nothing new;
6. (``make slow``) the ``memory://`` copy with another ``bootstrap`` (a metric option):
   all three again; ``test_registry_lifecycle`` checks the same identity rule alone.

Pure helpers (registry, comparison, listing, staging, parameters) are tested alone.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from types import SimpleNamespace

import fsspec
import geopandas
import numpy as np
import pytest
import sqlalchemy as sa
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from evalcore.report import sha256_path
from evalcore.synth import write_layers
from flows.params import METRIC_PARAMETERS, EvaluateParams, ReevaluateParams
from flows.reevaluate import artifact_key, expand_braces, list_layers, product_name, reevaluate_new_imagery, stage_layer
from flows.registry import RunRecord, compare_summaries, default_registry_url, open_registry, run_summary

PRODUCT = "fields-ml"
OPTIONS = dict(bootstrap=20, boundary_tolerance_m=10, partition_size_m=10_000, strata_column="stratum", n_workers=2)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _run(params: ReevaluateParams) -> tuple[list[dict], list[str]]:
    """Run the flow; return its result and its log messages."""
    handler = _Collect()
    logger = logging.getLogger("prefect.flow_runs")
    logger.addHandler(handler)
    try:
        return reevaluate_new_imagery(params), handler.messages
    finally:
        logger.removeHandler(handler)


def _subset(frame: geopandas.GeoDataFrame, rng: np.random.Generator, share: float) -> geopandas.GeoDataFrame:
    keep = np.sort(rng.choice(len(frame), int(share * len(frame)), replace=False))
    return frame.iloc[keep]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, local_clients):
    tmp = tmp_path_factory.mktemp("reevaluate")
    pred, ref = write_layers(tmp / "data", 400, seed=11)
    frame = geopandas.read_parquet(pred)
    rng = np.random.default_rng(5)
    preds = tmp / PRODUCT
    preds.mkdir()
    _subset(frame, rng, 0.95).to_parquet(preds / "2024-05-01.parquet")
    _subset(frame, rng, 0.85).to_file(preds / "2024-06-01.gpkg", driver="GPKG")
    (preds / "notes.txt").write_text("not a layer")
    (preds / "empty-dir").mkdir()
    out = tmp / "out"
    cluster = local_clients.get(2).scheduler.address
    params = ReevaluateParams(reference=str(ref), predictions=str(preds), output_root=str(out), cluster=cluster, **OPTIONS)
    s = SimpleNamespace(tmp=tmp, ref=ref, preds=preds, out=out, params=params, registry_url=default_registry_url(out))

    s.first, _ = _run(params)
    s.second, s.second_log = _run(params)
    with open_registry(s.registry_url) as registry:
        s.runs_after_second = registry.runs()

    parts = preds / "2024-07-01"
    parts.mkdir()
    third = _subset(frame, rng, 0.75)
    third.iloc[: len(third) // 2].to_parquet(parts / "part-0.parquet")
    third.iloc[len(third) // 2 :].to_parquet(parts / "part-1.parquet")
    s.third, _ = _run(params)
    with open_registry(s.registry_url) as registry:
        s.runs_after_third = registry.runs()

    s.file_url, _ = _run(params.model_copy(update={"predictions": preds.as_uri()}))

    mem_root = f"memory://evalcore-test-{uuid.uuid4().hex[:8]}/{PRODUCT}"
    mem = fsspec.filesystem("memory")
    mem.put(str(preds), mem_root, recursive=True)
    remote = params.model_copy(update={"predictions": mem_root, "product": PRODUCT})
    s.memory, s.memory_log = _run(remote)
    with open_registry(s.registry_url) as registry:
        s.runs_at_end = registry.runs()
    s.remote, s.mem_root = remote, mem_root
    yield s
    mem.rm(mem_root.split("/" + PRODUCT)[0], recursive=True)


@pytest.fixture(scope="module")
def rebootstrapped(scenario):
    """Step 6: the ``memory://`` copy with another ``bootstrap``: three more evaluations
    (``make slow``: the option's part of a run's identity is also tested alone, below)."""
    again, _ = _run(ReevaluateParams(**{**scenario.remote.model_dump(), "bootstrap": 10}))
    with open_registry(scenario.registry_url) as registry:
        return SimpleNamespace(runs=again, registry=registry.runs())


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_first_run_evaluates_both_layers(scenario):
    first = scenario.first
    assert [r["layer"] for r in first] == ["2024-05-01.parquet", "2024-06-01.gpkg"]
    assert all(r["status"] == "succeeded" and r["product"] == PRODUCT for r in first)
    for r in first:
        out = Path(r["output_dir"])
        assert out.parent == scenario.out / PRODUCT
        assert out.name.startswith(Path(r["layer"]).stem + "-" + r["pred_sha256"][:12])
        assert json.loads((out / "status.json").read_text())["status"] == "succeeded"
        assert (out / "metrics.json").exists() and (out / "comparison.json").exists()
        assert r["pred_sha256"] == sha256_path(scenario.preds / r["layer"])
    assert first[0]["comparison"]["previous"] is None
    assert first[1]["comparison"]["previous"]["run_id"] == first[0]["run_id"]
    assert not (scenario.out / ".work").exists() or not any((scenario.out / ".work").rglob("*.parquet"))


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_second_run_evaluates_nothing(scenario):
    assert scenario.second == []
    assert any(m.startswith("nothing new") for m in scenario.second_log)
    assert len(scenario.runs_after_second) == 2


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_new_layer_alone_is_evaluated_and_compared(scenario):
    (third,) = scenario.third
    assert third["layer"] == "2024-07-01" and third["status"] == "succeeded"
    out = Path(third["output_dir"])
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison == json.loads(json.dumps(third["comparison"]))
    assert comparison["product"] == PRODUCT
    assert comparison["current"]["run_id"] == third["run_id"]
    assert comparison["previous"]["run_id"] == scenario.first[1]["run_id"]
    assert comparison["same_reference"] is True and comparison["same_parameters"] is True
    for key in ("precision", "recall", "f1", "iou_mean", "area_weighted_f1", "boundary_f1"):
        row = comparison["metrics"][key]
        assert isinstance(row["intervals_overlap"], bool), key
        assert row["difference"] == pytest.approx(row["current"] - row["previous"], abs=1e-15)
        assert len(row["current_ci"]) == 2 and len(row["previous_ci"]) == 2
        assert row["intervals_overlap"] == (row["previous_ci"][0] <= row["current_ci"][1] and row["current_ci"][0] <= row["previous_ci"][1])
    markdown = (out / "comparison.md").read_text()
    assert "| Recall |" in markdown and "intervals overlap" in markdown


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_registry_holds_three_runs(scenario):
    runs = scenario.runs_after_third
    assert len(runs) == 3 and all(isinstance(r, RunRecord) for r in runs)
    assert [r.status for r in runs] == ["succeeded"] * 3
    assert len({r.ref_sha256 for r in runs}) == 1 and len({r.params_hash for r in runs}) == 1
    assert len({r.pred_sha256 for r in runs}) == 3
    for r in runs:
        assert r.product == PRODUCT and r.started <= r.finished and r.finished.endswith("+00:00")
        assert r.parameters["bootstrap"] == 20 and r.evalcore_version and r.flow_run_id
        assert {"precision", "recall", "f1", "iou_mean", "area_weighted_precision", "boundary_f1"} <= set(r.summary["metrics"])
        assert r.summary["ci"]["f1"][0] <= r.summary["metrics"]["f1"] <= r.summary["ci"]["f1"][1]
        metrics = json.loads((Path(r.output_dir) / "metrics.json").read_text())
        assert r.summary == json.loads(json.dumps(run_summary(metrics)))


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_comparison_artifact_published(scenario):
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[artifact_key(PRODUCT)])))
    assert len(artifacts) == len(scenario.runs_at_end)
    (third,) = scenario.third
    assert (Path(third["output_dir"]) / "comparison.md").read_text() in {a.data for a in artifacts}


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_file_and_memory_urls_find_nothing_new(scenario):
    assert scenario.file_url == []
    assert scenario.memory == []
    assert any(m.startswith("nothing new: all 3 layers") for m in scenario.memory_log)
    staged = sorted(p.name for p in (scenario.out / ".staging").glob("*/*") if p.name != "source.json")
    assert staged == ["2024-05-01.parquet", "2024-06-01.gpkg", "2024-07-01"]  # the reference is local: used in place


@pytest.mark.slow
def test_changed_metric_option_evaluates_all_again(scenario, rebootstrapped):
    again = rebootstrapped.runs
    assert [r["layer"] for r in again] == ["2024-05-01.parquet", "2024-06-01.gpkg", "2024-07-01"]
    assert all(r["status"] == "succeeded" and r["pred_path"].startswith("memory://") for r in again)
    assert {r["pred_sha256"] for r in again} == {r.pred_sha256 for r in scenario.runs_after_third}
    first = again[0]["comparison"]
    assert first["previous"]["run_id"] == scenario.third[0]["run_id"] and first["same_parameters"] is False
    assert again[1]["comparison"]["same_parameters"] is True
    runs = rebootstrapped.registry
    assert len(runs) == 6 and len({r.params_hash for r in runs}) == 2
    assert len({r.output_dir for r in runs}) == 6  # a re-evaluation never overwrites an earlier run


# --------------------------------------------------------------------------- helpers alone
def _record(registry, **overrides) -> int:
    fields = dict(
        product="p", pred_path="a.parquet", pred_sha256="a" * 64, ref_path="r.parquet", ref_sha256="r" * 64,
        params_hash="h" * 64, parameters={"bootstrap": 0}, output_dir="/o", evalcore_version="0",
    )
    return registry.record(**{**fields, **overrides})


def test_registry_lifecycle(tmp_path):
    url = default_registry_url(tmp_path / "sub")
    with open_registry(url) as registry:
        first = _record(registry)
        assert not registry.has_run("a" * 64, "r" * 64, "h" * 64)  # running does not count
        registry.finish(first, status="failed", error="boom")
        assert not registry.has_run("a" * 64, "r" * 64, "h" * 64)
        second = _record(registry)
        done = registry.finish(second, status="succeeded", summary={"metrics": {"f1": 0.5}})
        assert done.summary == {"metrics": {"f1": 0.5}} and done.finished is not None
        assert registry.has_run("a" * 64, "r" * 64, "h" * 64)
        assert not registry.has_run("a" * 64, "s" * 64, "h" * 64)  # another reference
        assert not registry.has_run("a" * 64, "r" * 64, "g" * 64)  # other metric options
        third = _record(registry, status="succeeded", pred_sha256="b" * 64)
        assert registry.previous("p", third).id == second
        assert registry.previous("p", second) is None  # the failed one does not count
        assert registry.previous("q", third + 1) is None
        assert [r.id for r in registry.runs("p")] == [first, second, third]
        assert [r.id for r in registry.runs(status="failed")] == [first]
        with pytest.raises(ValueError, match="status must be one of"):
            _record(registry, status="done")
        with pytest.raises(KeyError):
            registry.finish(999, status="failed")
    with open_registry(url) as registry:  # reopening keeps the table and its rows
        assert len(registry.runs()) == 3
        columns = {c["name"] for c in sa.inspect(registry.engine).get_columns("runs")}
    assert columns == {
        "id", "product", "pred_path", "pred_sha256", "ref_path", "ref_sha256", "params_hash", "parameters", "summary",
        "output_dir", "status", "error", "started", "finished", "evalcore_version", "flow_run_id",
    }


def _run_record(run_id: int, summary: dict, ref: str = "r", params_hash: str = "h") -> RunRecord:
    return RunRecord(
        id=run_id, product="p", pred_path=f"{run_id}.parquet", pred_sha256=str(run_id) * 64, ref_path="r", ref_sha256=ref * 64,
        params_hash=params_hash * 64, parameters={}, summary=summary, output_dir="/o", status="succeeded", error=None,
        started="2025-01-01T00:00:00+00:00", finished="2025-01-01T00:01:00+00:00", evalcore_version="0", flow_run_id=None,
    )


def test_compare_summaries_overlap_flags():
    prev = _run_record(1, run_summary({"precision": 0.8, "recall": 0.7, "f1": float("nan"),
                                       "bootstrap": {"ci": {"precision": [0.75, 0.85], "recall": [0.65, 0.75]}}}))
    cur = _run_record(2, run_summary({"precision": 0.9, "recall": 0.72, "f1": 0.5,
                                      "bootstrap": {"ci": {"precision": [0.86, 0.94], "recall": [0.70, 0.74], "f1": [0.4, 0.6]}}}), ref="s")
    out = compare_summaries(cur, prev)
    assert out["metrics"]["precision"]["intervals_overlap"] is False
    assert out["metrics"]["precision"]["difference"] == pytest.approx(0.1)
    assert out["metrics"]["recall"]["intervals_overlap"] is True
    assert out["metrics"]["f1"] == {"previous": None, "current": 0.5, "difference": None, "previous_ci": None, "current_ci": [0.4, 0.6], "intervals_overlap": None}
    assert out["metrics"]["boundary_f1"]["current"] is None  # no tolerance: present, null
    assert out["same_reference"] is False and out["same_parameters"] is True
    alone = compare_summaries(cur, None)
    assert alone["previous"] is None and alone["metrics"]["precision"]["intervals_overlap"] is None


def test_list_layers_and_patterns(tmp_path):
    for name in ("b.gpkg", "a.parquet", "c.FGB", "d.geojson", "notes.txt", ".hidden.parquet", "ref.parquet"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "parts" / "x").mkdir(parents=True)
    (tmp_path / "parts" / "x" / "p0.parquet").write_bytes(b"x")
    (tmp_path / "no-parts").mkdir()
    (tmp_path / "no-parts" / "readme.md").write_bytes(b"x")
    names = [layer["name"] for layer in list_layers(str(tmp_path), "*.{parquet,gpkg,fgb,geojson}", exclude=(str(tmp_path / "ref.parquet"),))]
    assert names == ["a.parquet", "b.gpkg", "c.FGB", "d.geojson", "parts"]
    assert [layer["name"] for layer in list_layers(tmp_path.as_uri(), "*.gpkg", None)] == ["b.gpkg"]
    assert list_layers(tmp_path.as_uri(), "*.gpkg")[0]["url"] == str(tmp_path / "b.gpkg")  # file:// is local
    with pytest.raises(FileNotFoundError, match="not a directory"):
        list_layers(str(tmp_path / "missing"), "*")
    assert expand_braces("x-{a,b}-{1,2}") == ["x-a-1", "x-a-2", "x-b-1", "x-b-2"]


def test_stage_layer_memory_reuses_unchanged_copy(tmp_path):
    fs = fsspec.filesystem("memory")
    root = f"/stage-{uuid.uuid4().hex[:8]}"
    fs.pipe(f"{root}/one.parquet", b"first")
    fs.pipe(f"{root}/parts/a/p0.parquet", b"p0")
    fs.pipe(f"{root}/parts/p1.parquet", b"p1")
    try:
        staged = stage_layer(f"memory://{root}/one.parquet", tmp_path)
        assert staged.read_bytes() == b"first" and staged.name == "one.parquet"
        staged.write_bytes(b"local edit")  # a reused copy is not fetched again...
        assert stage_layer(f"memory://{root}/one.parquet", tmp_path).read_bytes() == b"local edit"
        fs.pipe(f"{root}/one.parquet", b"second, longer")  # ...until the source changes
        assert stage_layer(f"memory://{root}/one.parquet", tmp_path).read_bytes() == b"second, longer"
        parts = stage_layer(f"memory://{root}/parts", tmp_path)
        assert sorted(str(p.relative_to(parts)) for p in parts.rglob("*") if p.is_file()) == ["a/p0.parquet", "p1.parquet"]
        assert stage_layer(str(tmp_path), tmp_path) == tmp_path  # local: used in place
        with pytest.raises(FileNotFoundError):
            stage_layer(f"memory://{root}/missing.parquet", tmp_path)
    finally:
        fs.rm(root, recursive=True)


def test_names_and_keys():
    assert artifact_key("Fields_ML v3.1") == "evalcore-comparison-fields-ml-v3-1"
    assert artifact_key("___") == "evalcore-comparison"
    assert product_name("memory://bucket/fields-ml/") == "fields-ml"
    assert product_name("/data/x/fields") == "fields"


def test_params_match_evaluate_params_and_hash():
    shared = set(METRIC_PARAMETERS) | {"cluster", "n_workers"}
    for name in shared:  # same defaults as a single evaluation
        assert ReevaluateParams.model_fields[name].default == EvaluateParams.model_fields[name].default, name
    base = ReevaluateParams(reference="r", predictions="p", output_root="o")
    assert base.params_hash() == base.model_copy(update={"n_workers": 7, "cluster": "tcp://x:1"}).params_hash()
    assert base.params_hash() != ReevaluateParams(reference="r", predictions="p", output_root="o", bootstrap=5).params_hash()
    assert ReevaluateParams(reference="r", predictions="p", output_root="o", boundary_tolerance_m=10).params_hash() == ReevaluateParams(
        reference="r", predictions="p", output_root="o", boundary_tolerance_m=10.0
    ).params_hash()
    evaluation = base.evaluate_params(predicted="x", reference="y", output_dir="z", cluster="tcp://h:1")
    assert evaluation.cluster == "tcp://h:1" and evaluation.n_workers == base.n_workers
    with pytest.raises(ValueError, match="extra"):
        ReevaluateParams(reference="r", predictions="p", output_root="o", predicted="x")
    with pytest.raises(ValueError, match="strictly increasing"):
        ReevaluateParams(reference="r", predictions="p", output_root="o", size_bins=[5, 1])


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The scenario's reference alone (the failed-evaluation test needs no scenario run)."""
    _, ref = write_layers(tmp_path_factory.mktemp("reevaluate-reference"), 400, seed=11)
    return ref


def test_failed_evaluation_is_recorded_and_retried(reference, local_clients, tmp_path):
    preds = tmp_path / "broken"
    preds.mkdir()
    (preds / "2024-08-01.parquet").write_bytes(b"not parquet at all")
    params = ReevaluateParams(reference=str(reference), predictions=str(preds), output_root=str(tmp_path / "out"), n_workers=1)
    state = reevaluate_new_imagery(params, return_state=True)
    assert state.is_failed() and "1 of 1 evaluations failed (2024-08-01.parquet)" in state.message
    with open_registry(default_registry_url(tmp_path / "out")) as registry:
        (run,) = registry.runs()
        assert run.status == "failed" and run.summary is None and run.error and run.finished
        assert not registry.has_run(run.pred_sha256, run.ref_sha256, run.params_hash)
    status = json.loads((Path(run.output_dir) / "status.json").read_text())
    assert status["status"] == "failed"
    assert not (Path(run.output_dir) / "comparison.json").exists()
    # A failed layer is tried again. On the session's cluster: the flow's own LocalCluster was
    # tested above, and the cluster is not among the parameters that identify a run.
    again = params.model_copy(update={"cluster": local_clients.get(2).scheduler.address})
    assert again.params_hash() == params.params_hash()
    assert reevaluate_new_imagery(again, return_state=True).is_failed()
    with open_registry(default_registry_url(tmp_path / "out")) as registry:
        assert [r.status for r in registry.runs()] == ["failed", "failed"]

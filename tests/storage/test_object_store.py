"""Object storage end to end (issue 30, SPEC 6.13): ``evalcore`` subprocesses against a real
S3-compatible server on 127.0.0.1 (moto's server mode, tests/storage/conftest.py).

The subprocesses find the store through the standard variables only (AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION). Each test checks what a
user sees: the numbers equal a local run's exactly (the local baselines, and the URLs
refused before anything is read, run in this process); a failure is exit status 2 with one
line that names the URL and never the secret; nothing is left behind, on the store or
on the local disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import geopandas
import pandas as pd
import pytest

from evalcore.synth import write_layers
from tests.common import cli_in_process
from tests.dask_processes import dask_processes, free_port

pytestmark = [pytest.mark.timeout(900), pytest.mark.cli]  # the tests run the evalcore command in a subprocess

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
N_REF = 300
LAYERS = ("predicted.parquet", "reference.gpkg", "aoi.parquet", "annotated.parquet")


@pytest.fixture(scope="module")
def layers(tmp_path_factory: pytest.TempPathFactory, s3_store) -> Path:
    """A small generated dataset, the reference as GeoPackage (read through GDAL's /vsis3/), the
    rest GeoParquet (read by row group); uploaded to ``s3://BUCKET/in/``."""
    folder = tmp_path_factory.mktemp("layers")
    write_layers(folder, N_REF, seed=5)
    geopandas.read_parquet(folder / "reference.parquet").to_file(folder / "reference.gpkg", driver="GPKG", layer="reference")
    fs = s3_store.fs()
    for name in LAYERS:
        fs.put_file(str(folder / name), f"{s3_store.bucket}/in/{name}")
    return folder


def _evalcore(args: list[str], env: dict[str, str], tmp: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m evalcore.cli ARGS`` with its own temporary directory (``tmp``, to find anything left behind)."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = dict(env, TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "evalcore.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=str(tmp))


def _evalcore_here(args: list[str]) -> subprocess.CompletedProcess:
    """``evalcore ARGS`` in this process (:func:`tests.common.cli_in_process`): for the local
    baselines and the checks made before any file is touched. What reads or writes the store
    runs in a subprocess (:func:`_evalcore`), which finds it through its environment only."""
    return cli_in_process(*args)


def _one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("evalcore: error:")]
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-3000:])
    assert len(lines) == 1, result.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _evaluate_args(inputs: dict[str, str], outputs: dict[str, str]) -> list[str]:
    return [
        "evaluate", "-p", inputs["predicted.parquet"], "-r", inputs["reference.gpkg"], "--aoi", inputs["aoi.parquet"],
        "--aoi-id-column", "aoi_id", "--annotated-area", inputs["annotated.parquet"], "--score-column", "score",
        "--strata-column", "stratum", "--bootstrap", "20", "-q",
        "--study-area", inputs["aoi.parquet"], "--study-area-rule", "centroid", "--training-area", inputs["annotated.parquet"],
        "-o", outputs["metrics"], "--frame-out", outputs["fields"], "--tiles-out", outputs["tiles"], "--aois-out", outputs["aois"],
        "--predictions-out", outputs["predictions"], "--pr-curve-out", outputs["pr"],
    ]


OUTPUT_NAMES = {"metrics": "metrics.json", "fields": "fields.parquet", "tiles": "tiles.parquet", "aois": "aois.gpkg",
                "predictions": "predictions/", "pr": "pr.parquet"}


def _read_table(fs: object, url_or_path: str) -> pd.DataFrame:
    if url_or_path.startswith("s3://"):
        key = url_or_path[len("s3://"):].rstrip("/")
        if fs.isdir(key):
            parts = sorted(fs.find(key))
            return pd.concat([_read_object(fs, p) for p in parts], ignore_index=True)
        return _read_object(fs, key)
    p = Path(url_or_path)
    if p.is_dir():
        return pd.concat([pd.read_parquet(q) for q in sorted(p.glob("part-*.parquet"))], ignore_index=True)
    return geopandas.read_file(p) if p.suffix == ".gpkg" else pd.read_parquet(p)


def _read_object(fs: object, key: str) -> pd.DataFrame:
    import io
    import tempfile

    data = fs.cat_file(key)
    if key.endswith(".gpkg"):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(key).name
            path.write_bytes(data)
            return geopandas.read_file(path)
    return pd.read_parquet(io.BytesIO(data))


def test_evaluate_with_every_input_and_output_on_the_store_equals_the_local_run(tmp_path: Path, layers: Path, s3_store) -> None:
    local_out = tmp_path / "local"
    local_out.mkdir()
    local = _evalcore_here(_evaluate_args({n: str(layers / n) for n in LAYERS}, {k: f"{local_out}/{v}" for k, v in OUTPUT_NAMES.items()}))
    assert local.returncode == 0, local.stderr[-3000:]
    remote_out = {k: s3_store.url("out-evaluate", v) for k, v in OUTPUT_NAMES.items()}
    remote = _evalcore(_evaluate_args({n: s3_store.url("in", n) for n in LAYERS}, remote_out), s3_store.env(), tmp_path / "tmp-remote")
    assert remote.returncode == 0, remote.stderr[-3000:]
    fs = s3_store.fs()
    assert json.loads(fs.cat_file(f"{s3_store.bucket}/out-evaluate/metrics.json")) == json.loads((local_out / "metrics.json").read_text())
    for key in ("fields", "tiles", "aois", "predictions", "pr"):
        a, b = _read_table(fs, remote_out[key]), _read_table(fs, f"{local_out}/{OUTPUT_NAMES[key]}")
        pd.testing.assert_frame_equal(a, b, check_exact=True, obj=key)
    # Nothing left behind: no staging on the local disk, no probe object on the store.
    assert list((tmp_path / "tmp-remote").iterdir()) == []
    assert [k for k in s3_store.listing() if "/out-evaluate/" in k] == sorted(
        f"{s3_store.bucket}/out-evaluate/{n}" for n in ("metrics.json", "fields.parquet", "tiles.parquet", "aois.gpkg",
                                                        "predictions/part-0.parquet", "pr.parquet"))


@pytest.mark.cluster
def test_evaluate_on_a_local_cluster_reads_and_writes_the_store(tmp_path: Path, layers: Path, s3_store) -> None:
    """The workers read the layers' row groups from the store; the parts of a directory output are put one by one."""
    inputs = ["-p", s3_store.url("in", "predicted.parquet"), "-r", s3_store.url("in", "reference.gpkg"), "--strata-column", "stratum",
              "--bootstrap", "20", "--partition-km", "5", "-q"]
    single = _evalcore(["evaluate", *inputs, "-o", str(tmp_path / "single.json")], s3_store.env(), tmp_path / "tmp-single")
    assert single.returncode == 0, single.stderr[-3000:]
    out = s3_store.url("out-cluster")
    result = _evalcore(["evaluate", *inputs, "--cluster", "local", "--workers", "1", "--in-process-below", "0",
                        "-o", f"{out}/metrics.json", "--frame-out", f"{out}/fields/"], s3_store.env(), tmp_path / "tmp-cluster")
    assert result.returncode == 0, result.stderr[-3000:]
    from tests.distributed.test_differential import differences

    fs = s3_store.fs()
    on_cluster = json.loads(fs.cat_file(f"{s3_store.bucket}/out-cluster/metrics.json"))
    assert differences(on_cluster, json.loads((tmp_path / "single.json").read_text())) == []
    parts = [k for k in s3_store.listing() if k.startswith(f"{s3_store.bucket}/out-cluster/fields/")]
    assert len(parts) > 1 and all(Path(k).name.startswith("part-") for k in parts)
    assert len(_read_table(fs, f"{out}/fields/")) == on_cluster["count_reference"]
    # The staged parts are gone from the client's disk (Dask's own scratch space is Dask's).
    assert [p.name for p in (tmp_path / "tmp-cluster").iterdir() if p.name != "dask-scratch-space"] == []


def test_compare_reads_models_from_the_store_and_writes_its_output_there(tmp_path: Path, layers: Path, s3_store) -> None:
    args = ["compare", "-p", "A=" + s3_store.url("in", "predicted.parquet"), "-p", "B=" + s3_store.url("in", "predicted.parquet"),
            "-r", s3_store.url("in", "reference.gpkg"), "--bootstrap", "20", "-q", "-o", s3_store.url("out-compare", "delta.json")]
    result = _evalcore(args, s3_store.env(), tmp_path / "tmp")
    assert result.returncode == 0, result.stderr[-3000:]
    local = _evalcore_here(["compare", "-p", f"A={layers / 'predicted.parquet'}", "-p", f"B={layers / 'predicted.parquet'}",
                            "-r", str(layers / "reference.gpkg"), "--bootstrap", "20", "-q", "-o", str(tmp_path / "delta.json")])
    assert local.returncode == 0, local.stderr[-3000:]
    remote = json.loads(s3_store.fs().cat_file(f"{s3_store.bucket}/out-compare/delta.json"))
    expected = json.loads((tmp_path / "delta.json").read_text())
    for named in ("reference", "models"):  # where the layers were read from: their paths, which differ
        remote.pop(named), expected.pop(named)
    assert remote == expected


def test_an_output_that_is_an_input_is_refused_by_normalised_url(tmp_path: Path, layers: Path, s3_store) -> None:
    before = s3_store.listing()
    result = _evalcore(["evaluate", "-p", s3_store.url("in", "predicted.parquet"), "-r", s3_store.url("in", "reference.gpkg"), "-q",
                        "-o", s3_store.url("out", "m.json"), "--frame-out", "s3a://" + s3_store.bucket + "//in/predicted.parquet"],
                       s3_store.env(), tmp_path / "tmp")
    _one_line_error(result, "--frame-out", "input layer of -p/--predicted")
    assert s3_store.listing() == before


# make slow (CI time): the missing bucket and the unreachable endpoint, refused by the same one-line path as the others.
@pytest.mark.parametrize("case", ["wrong key", pytest.param("missing bucket", marks=pytest.mark.slow), "missing object",
                                  pytest.param("unreachable endpoint", marks=pytest.mark.slow), "read-only output"])
def test_store_failures_end_with_one_line_naming_the_url_and_leave_nothing(tmp_path: Path, layers: Path, s3_store, case: str) -> None:
    env = s3_store.env()
    ref, pred = s3_store.url("in", "reference.gpkg"), s3_store.url("in", "predicted.parquet")
    out = s3_store.url("out-failures", case.replace(" ", "-"), "metrics.json")
    named = pred
    if case == "wrong key":  # found by the output's probe, the first request made
        env["AWS_SECRET_ACCESS_KEY"] = "wrong-secret-0123456789abcdef"
        named = out
    elif case == "missing bucket":
        pred = named = "s3://no-such-bucket-here/predicted.parquet"
    elif case == "missing object":
        pred = named = s3_store.url("in", "no-such-layer.parquet")
    elif case == "unreachable endpoint":
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        named = out
    else:  # a user who may read the inputs but not write the output: found by the probe, before any work
        env.update(AWS_ACCESS_KEY_ID=s3_store.reader_key_id, AWS_SECRET_ACCESS_KEY=s3_store.reader_secret)
        named = out
    before = s3_store.listing()
    result = _evalcore(["evaluate", "-p", pred, "-r", ref, "-o", out, "-q"], env, tmp_path / "tmp")
    line = _one_line_error(result, named)
    for secret in (s3_store.secret, s3_store.reader_secret, "wrong-secret-0123456789abcdef"):
        assert secret not in result.stderr + result.stdout
    expected = {"wrong key": "refused the credentials", "missing bucket": "bucket 'no-such-bucket-here' does not exist",
                "missing object": "does not exist", "unreachable endpoint": "cannot reach the store", "read-only output": "access denied"}
    assert expected[case] in line
    if named == out:
        assert "before any work" in line
    assert s3_store.listing() == before
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("url", [
    "s3://AKIAEXAMPLEKEY:SECRETsentinel42@evalcore-data/in/predicted.parquet",
    "s3://evalcore-data/in/predicted.parquet?X-Amz-Credential=AKIA&X-Amz-Signature=SECRETsentinel42",
    "az://container/predicted.parquet?sv=2024&sig=SECRETsentinel42",
])
def test_a_url_with_an_embedded_credential_is_refused_without_repeating_it(tmp_path: Path, url: str) -> None:
    result = _evalcore_here(["evaluate", "-p", url, "-r", "x.parquet", "-o", str(tmp_path / "m.json")])
    line = _one_line_error(result, "-p/--predicted", "credential" if "@" in url else "token")
    assert "SECRETsentinel42" not in result.stderr + result.stdout and "AKIAEXAMPLEKEY" not in line
    assert not (tmp_path / "m.json").exists()


@pytest.fixture(scope="module")
def dask_on_store(tmp_path_factory: pytest.TempPathFactory, s3_store):
    """A ``dask scheduler`` and a ``dask worker`` in working directories of their own, whose
    credentials for the store come from their own environment."""
    env = s3_store.env(DASK_DISTRIBUTED__WORKER__DAEMON="False", PYTHONPATH=str(ROOT))
    with dask_processes(tmp_path_factory.mktemp("dask"), 1, lambda name, cwd: env) as (address, _):
        yield address


def _run_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file())


@pytest.mark.prefect
@pytest.mark.cluster
@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_run_with_layers_on_the_store_equals_the_local_run_and_writes_no_secret(
    tmp_path: Path, layers: Path, s3_store, dask_on_store: str, prefect_server: str,
) -> None:
    env = s3_store.env(PREFECT_API_URL=prefect_server)
    common = ["--aoi-id-column", "aoi_id", "--score-column", "score", "--strata-column", "stratum", "--cluster", dask_on_store]
    runs = {}
    for where, source in (("local", lambda n: str(layers / n)), ("store", lambda n: s3_store.url("in", n))):
        out = tmp_path / where
        result = _evalcore(["run", "-p", source("predicted.parquet"), "-r", source("reference.gpkg"), "--aoi", source("aoi.parquet"),
                            "--annotated-area", source("annotated.parquet"), *common, "--workdir", str(tmp_path / f"work-{where}"),
                            "-o", str(out)], env, tmp_path / f"tmp-{where}")
        assert result.returncode == 0, result.stderr[-4000:]
        runs[where] = (out, result)
    metrics = {where: json.loads((out / "metrics.json").read_text()) for where, (out, _) in runs.items()}
    assert metrics["store"] == metrics["local"]
    out, result = runs["store"]
    manifest = json.loads((out / "input-manifest.json").read_text())
    entries = {entry["role"]: entry for entry in manifest["inputs"]}
    assert entries["reference"]["path"] == s3_store.url("in", "reference.gpkg")
    import hashlib

    assert entries["reference"]["sha256"] == hashlib.sha256((layers / "reference.gpkg").read_bytes()).hexdigest()
    assert entries["reference"]["parts"][0]["etag"]  # the store's version tag beside the hash
    # No secret anywhere: not in a log line, an artifact, the contract, the manifests, run.json or the report.
    for secret in (s3_store.secret, s3_store.key_id):
        assert secret not in result.stdout + result.stderr
        for path in _run_files(out) + _run_files(tmp_path / "work-store"):
            assert secret.encode() not in path.read_bytes(), path
    # Nor in what Prefect keeps: the artifacts, the flow runs' parameters, the log lines.
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        kept = [f"{a.data} {a.description}" for a in client.read_artifacts()]
        kept += [json.dumps(run.parameters, default=str) for run in client.read_flow_runs()]
        kept += [log.message for log in client.read_logs()]
    assert kept and not [text for text in kept for secret in (s3_store.secret, s3_store.key_id) if secret in text]
    # The run directory uploaded to the store verifies there, inputs rechecked on the store.
    fs = s3_store.fs()
    for path in _run_files(out):
        if path.name != ".evalcore-run.lock":
            fs.put_file(str(path), f"{s3_store.bucket}/runs/a/{path.relative_to(out).as_posix()}")
    verified = _evalcore(["verify", s3_store.url("runs", "a")], s3_store.env(), tmp_path / "tmp-verify")
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    assert "intact" in verified.stdout and "inputs rechecked" in verified.stdout
    # gate and report on a run directory in the store: what they add is put back, whole.
    gated = _evalcore(["gate", s3_store.url("runs", "a"), str(ROOT / "deploy" / "gates.example.yaml")], s3_store.env(), tmp_path / "tmp-gate")
    assert gated.returncode in (0, 1, 3), gated.stderr[-3000:]
    assert f"wrote {s3_store.url('runs', 'a', 'acceptance-gates.v2.json')}" in gated.stdout
    again = _evalcore(["verify", s3_store.url("runs", "a")], s3_store.env(), tmp_path / "tmp-verify")
    assert again.returncode == 0 and "intact" in again.stdout, again.stdout[-3000:]  # the amendment is sealed too
    before = fs.info(f"{s3_store.bucket}/runs/a/report.html")["ETag"]
    reported = _evalcore(["report", s3_store.url("runs", "a")], s3_store.env(), tmp_path / "tmp-report")
    assert reported.returncode == 0 and s3_store.url("runs", "a", "report.html") in reported.stdout, reported.stderr[-3000:]
    assert fs.cat_file(f"{s3_store.bucket}/runs/a/report.html").startswith(b"<!") and before
    for scratch in ("tmp-verify", "tmp-gate", "tmp-report"):
        assert list((tmp_path / scratch).iterdir()) == []  # the fetched copies are gone
    fs.pipe_file(f"{s3_store.bucket}/runs/a/metrics.json", b"{}")  # tampered on the store
    tampered = _evalcore(["verify", s3_store.url("runs", "a")], s3_store.env(), tmp_path / "tmp-verify")
    assert tampered.returncode == 1 and "changed: metrics.json" in tampered.stdout


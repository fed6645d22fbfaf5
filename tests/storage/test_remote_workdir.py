"""A work directory on the store (issue 30, SPEC 6.13): no file system shared by the client and the workers.

A ``dask scheduler`` and two ``dask worker`` processes run in working directories and
temporary directories of their own (each process's mirror of the store's work
directory is under its own temporary directory, :mod:`evalcore.distributed.workdir`),
and the ``evalcore`` client in a third: everything a worker reads that another process
wrote comes from the store (moto's server on 127.0.0.1, tests/storage/conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.dask_processes import dask_processes, free_port
from tests.storage.test_object_store import BIN, LAYERS, ROOT, _evalcore, _one_line_error, layers  # noqa: F401

pytestmark = [pytest.mark.timeout(900), pytest.mark.cli, pytest.mark.cluster]


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory, s3_store):
    """A scheduler and two workers, each with its own working and temporary directory; credentials from their environment."""
    base = tmp_path_factory.mktemp("dask2")

    def env_of(name: str, cwd: Path) -> dict:
        (cwd / "tmp").mkdir(exist_ok=True)
        return s3_store.env(DASK_DISTRIBUTED__WORKER__DAEMON="False", PYTHONPATH=str(ROOT), TMPDIR=str(cwd / "tmp"))

    with dask_processes(base, 2, env_of) as (address, _):
        yield address, base


def _inputs(s3_store) -> list[str]:
    return ["-p", s3_store.url("in", "predicted.parquet"), "-r", s3_store.url("in", "reference.gpkg"),
            "--aoi", s3_store.url("in", "aoi.parquet"), "--aoi-id-column", "aoi_id", "--score-column", "score",
            "--strata-column", "stratum", "--partition-km", "2"]


@pytest.fixture(scope="module")
def single_metrics(tmp_path_factory: pytest.TempPathFactory, layers: Path, s3_store) -> dict:
    """The single-process ``evaluate`` of :func:`_inputs` (an ``evalcore`` subprocess), run once for the
    module: the result every cluster run here must equal."""
    tmp = tmp_path_factory.mktemp("single")
    single = _evalcore(["evaluate", *_inputs(s3_store), "-o", str(tmp / "single.json"), "-q"], s3_store.env(), tmp / "tmp-single")
    assert single.returncode == 0, single.stderr[-3000:]
    return json.loads((tmp / "single.json").read_text())


def _written(fs: object, prefix: str) -> dict[str, tuple]:
    """ETag and time of every prepared, pairs and sums object under a store work directory."""
    return {k: (v["ETag"], v["LastModified"]) for k, v in fs.find(prefix, detail=True).items()
            if any(f"/{entry}/" in k for entry in ("prepared", "pairs", "sums"))}


def _mirrors(base: Path) -> list[Path]:
    """The workers' mirrors of store work directories (under their own temporary directories)."""
    return sorted(base.glob("w*/tmp/evalcore-store-*/*"))


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_evaluate_with_the_workdir_on_the_store_equals_the_single_process_and_resumes(
    tmp_path: Path, layers: Path, s3_store, two_workers, single_metrics: dict,
) -> None:
    address, base = two_workers
    expected = single_metrics
    work = s3_store.url("work-evaluate")
    args = ["evaluate", *_inputs(s3_store), "--cluster", address, "--workdir", work, "-o", s3_store.url("out-wd", "metrics.json")]
    first = _evalcore(args, s3_store.env(), tmp_path / "tmp-a")
    assert first.returncode == 0, first.stderr[-4000:]
    fs = s3_store.fs()
    from tests.distributed.test_differential import differences

    assert differences(json.loads(fs.cat_file(f"{s3_store.bucket}/out-wd/metrics.json")), expected) == []
    kept = [k for k in s3_store.listing() if "/work-evaluate/" in k]
    for entry in ("prepared/index.json", "prepared/done.json", ".evalcore-workdir.json", "run.json"):
        assert f"{s3_store.bucket}/work-evaluate/{entry}" in kept, entry
    assert any("/work-evaluate/pairs/" in k for k in kept) and any("/work-evaluate/sums/" in k for k in kept)
    # The workers kept their copies of the store's objects in their own temporary
    # directories, and dropped them when the run ended (the store keeps everything).
    assert _mirrors(base) == []
    assert not list((tmp_path / "tmp-a").glob("evalcore-store-*"))  # nor is the client's copy left
    # Records name their files relative to themselves, with the store's version tags.
    record = json.loads(fs.cat_file(f"{s3_store.bucket}/work-evaluate/prepared/done.json"))
    assert record["base"] == "." and set(record["etags"]) == set(record["files"])
    assert not [k for k in record["files"] if k.startswith("/") or "evalcore-store-" in k]
    # A second run in a fresh client process reuses every verified partition from the store:
    # no prepared chunk, pairs or sums object is written again.
    before = _written(fs, f"{s3_store.bucket}/work-evaluate")
    again = _evalcore([*args[:-1], s3_store.url("out-wd", "metrics-2.json")], s3_store.env(), tmp_path / "tmp-b")
    assert again.returncode == 0, again.stderr[-4000:]
    after = _written(fs, f"{s3_store.bucket}/work-evaluate")
    assert before and after == before
    assert differences(json.loads(fs.cat_file(f"{s3_store.bucket}/out-wd/metrics-2.json")), expected) == []


@pytest.mark.slow  # 44 s on 2 cores (make slow); a resume from the store is also tested above, by evaluate
def test_a_run_killed_after_the_pairs_phase_resumes_from_the_store(
    tmp_path: Path, layers: Path, s3_store, two_workers, single_metrics: dict,
) -> None:
    address, _ = two_workers
    work = s3_store.url("work-killed")
    args = ["evaluate", *_inputs(s3_store), "--cluster", address, "--workdir", work, "-o", str(tmp_path / "m.json")]
    tmp = tmp_path / "tmp-killed"
    tmp.mkdir()
    env = dict(s3_store.env(), TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "evalcore.cli", *args], env=env, cwd=str(tmp), stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        for line in proc.stderr:  # the phase lines: kill as soon as the pairs phase has finished
            seen.append(line)
            if line.startswith("pairs ") and " partitions in " in line:
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.wait(timeout=120)
    assert proc.returncode != 0, "".join(seen)[-3000:]
    fs = s3_store.fs()
    fs.invalidate_cache()
    pairs_before = _written(fs, f"{s3_store.bucket}/work-killed/pairs")
    assert pairs_before, "".join(seen)[-3000:]
    resumed = _evalcore(args, s3_store.env(), tmp_path / "tmp-resumed")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert _written(fs, f"{s3_store.bucket}/work-killed/pairs") == pairs_before  # the pairs were reused, not recomputed
    from tests.distributed.test_differential import differences

    assert differences(json.loads((tmp_path / "m.json").read_text()), single_metrics) == []


# make slow (CI time): the missing bucket and the unreachable endpoint, refused by the same one-line path.
@pytest.mark.parametrize("case", ["wrong key", pytest.param("missing bucket", marks=pytest.mark.slow),
                                  pytest.param("unreachable endpoint", marks=pytest.mark.slow)])
def test_a_workdir_the_store_refuses_ends_with_one_line_naming_it(tmp_path: Path, layers: Path, s3_store, case: str) -> None:
    env = s3_store.env()
    work = s3_store.url("work-refused")
    if case == "wrong key":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret-1234"
    elif case == "missing bucket":
        work = "s3://no-such-bucket-evalcore/work"
    else:
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"
    args = ["evaluate", "-p", str(layers / "predicted.parquet"), "-r", str(layers / "reference.gpkg"), "--cluster", "local",
            "--workers", "1", "--workdir", work, "-o", str(tmp_path / "m.json"), "-q"]
    result = _evalcore(args, env, tmp_path / "tmp")
    line = _one_line_error(result, "--workdir", work)
    assert "not-the-secret" not in line and s3_store.secret not in line
    assert not (tmp_path / "m.json").exists()
    assert not [k for k in s3_store.listing() if "work-refused" in k or "write-probe" in k]


@pytest.mark.prefect
@pytest.mark.slow  # 88 s on 2 cores (make slow); layers on the store through evalcore run: test_object_store
def test_run_with_its_run_and_work_directories_on_the_store_equals_the_local_run_and_verifies(
    tmp_path: Path, layers: Path, s3_store, two_workers, prefect_server: str,
) -> None:
    address, base = two_workers
    env = s3_store.env(PREFECT_API_URL=prefect_server)
    common = [*_inputs(s3_store), "--cluster", address]
    local = _evalcore(["run", *common, "-o", str(tmp_path / "local-run")], env, tmp_path / "tmp-local")
    assert local.returncode == 0, local.stderr[-4000:]
    run_url = s3_store.url("runs", "on-store")
    stored = _evalcore(["run", *common, "-o", run_url], env, tmp_path / "tmp-store")
    assert stored.returncode == 0, stored.stderr[-4000:]
    assert f"run directory {run_url}: metrics.json" in stored.stdout, stored.stdout[-2000:]
    fs = s3_store.fs()
    on_store = json.loads(fs.cat_file(f"{s3_store.bucket}/runs/on-store/metrics.json"))
    assert on_store == json.loads((tmp_path / "local-run" / "metrics.json").read_text())
    held = [k.split("/runs/on-store/", 1)[1] for k in s3_store.listing() if "/runs/on-store/" in k]
    assert "status.json" in held and "evidence-manifest.json" in held and any(k.startswith("fields/part-") for k in held)
    assert not [k for k in held if k.startswith("work/")]  # the work directory was released after success
    assert json.loads(fs.cat_file(f"{s3_store.bucket}/runs/on-store/status.json"))["status"] == "succeeded"
    manifest = json.loads(fs.cat_file(f"{s3_store.bucket}/runs/on-store/manifest.json"))
    assert manifest["parameters"]["output_dir"] == run_url  # the URL, not the local staging directory
    assert list((tmp_path / "tmp-store").glob("evalcore-run-*")) == []  # the staging directory is gone
    verified = _evalcore(["verify", run_url], s3_store.env(), tmp_path / "tmp-verify")
    assert verified.returncode == 0 and "intact" in verified.stdout, verified.stdout[-3000:] + verified.stderr[-3000:]


def test_a_copy_is_read_only_while_it_is_the_objects_current_version(monkeypatch, tmp_path: Path, s3_store) -> None:
    """A worker outlives runs: an object a later run writes anew under the same name is fetched again, not read from the old copy."""
    from evalcore import remote
    from evalcore.distributed import workdir as wd

    for key, value in s3_store.env().items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("EVALCORE_SCRATCH", str(tmp_path))
    remote._filesystem.cache_clear()
    try:
        fs = s3_store.fs()
        url = s3_store.url("work-versions", "sums", "1_2_3.arrays")
        fs.pipe_file(url[5:], b"first run")
        assert wd.fetch(url).read_bytes() == b"first run"
        fs.pipe_file(url[5:], b"second run")  # another process, another run
        assert wd.fetch(wd.local(url)).read_bytes() == b"second run"
        fs.rm_file(url[5:])
        assert not wd.fetch(url).exists()  # gone from the store: no stale copy is read
        wd.discard(s3_store.url("work-versions"))
        assert not (tmp_path / f"evalcore-store-{os.getpid()}").exists()
    finally:
        remote._filesystem.cache_clear()

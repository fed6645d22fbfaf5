"""End to end: the real ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1,
driven by the ``evalcore evaluate --cluster tcp://...`` command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import evalcore

from tests.dask_processes import dask_processes as start_dask

from .seams import seam_layers
from .test_differential import differences

BIN = Path(sys.executable).parent

pytestmark = pytest.mark.cluster  # dask scheduler and worker processes, or the session's LocalCluster


@pytest.fixture(scope="module")
def dask_processes(tmp_path_factory):
    """One scheduler and two workers for the module's command-line runs (each run has its
    own work directory and task keys); stopped, and checked gone, after the last one."""
    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False")
    with start_dask(tmp_path_factory.mktemp("dask-processes"), 2, lambda name, cwd: env) as (address, dashboard):
        yield address, dashboard


@pytest.mark.cli  # it starts `evalcore run` as a process (EVALCORE_CHECK_MARKERS asks for the marker)
def test_cli_against_real_scheduler_and_workers(dask_processes, tmp_path):
    address, dashboard = dask_processes
    predicted, reference = seam_layers(seed=11)
    pred_path, ref_path = tmp_path / "pred.gpkg", tmp_path / "ref.parquet"
    predicted.to_file(pred_path, layer="predictions")
    reference.to_parquet(ref_path)
    out = tmp_path / "metrics.json"
    proc = subprocess.run(
        [
            str(BIN / "evalcore"), "evaluate", "-p", str(pred_path), "--pred-layer", "predictions", "-r", str(ref_path),
            "--strata-column", "stratum", "--size-bins", "0,1,2,5,inf", "--bootstrap", "30",
            "--boundary-tolerance-m", "5", "--partition-km", "2", "--cluster", address,
            "--frame-out", str(tmp_path / "fields"), "-o", str(out),
        ],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Dask dashboard" in proc.stderr and "pairs" in proc.stderr
    with urllib.request.urlopen(f"{dashboard}/status", timeout=10) as response:
        assert response.status == 200
    result = json.loads(out.read_text())
    expected = evalcore.evaluate(
        str(pred_path), str(ref_path), strata="stratum", size_bins=[0, 1, 2, 5, float("inf")],
        bootstrap=30, boundary_tolerance_m=5.0, partition_size_m=2_000.0,
    )
    from evalcore.writers import to_jsonable

    assert differences(result, to_jsonable(expected)) == []
    import geopandas

    parts = sorted((tmp_path / "fields").glob("part-*.parquet"))
    frame = geopandas.read_parquet(tmp_path / "fields")
    assert len(parts) >= 8 and len(frame) == result["count_reference"]
    assert frame.crs.to_epsg() == 32613 and frame["matched"].sum() == result["count_tp"]


def test_relative_paths_from_another_directory_reach_the_workers(dask_processes, tmp_path):
    """The workers run in another working directory than the client: local paths given
    relative to the client's directory must be made absolute before anything is submitted."""
    address, _ = dask_processes
    data = tmp_path / "data"
    data.mkdir()
    predicted, reference = seam_layers(seed=5)
    predicted.to_parquet(data / "predicted.parquet")
    reference.to_parquet(data / "reference.parquet")
    (data / "out").mkdir()
    proc = subprocess.run(
        [
            str(BIN / "evalcore"), "evaluate", "-p", "predicted.parquet", "-r", "reference.parquet", "--partition-km", "5",
            "--cluster", address, "--workdir", "work", "--frame-out", "fields/", "-o", "out/metrics.json", "-q",
        ],
        capture_output=True, text=True, timeout=300, cwd=data,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((data / "out" / "metrics.json").read_text())
    from evalcore.writers import to_jsonable

    expected = evalcore.evaluate(str(data / "predicted.parquet"), str(data / "reference.parquet"), partition_size_m=5_000.0)
    assert differences(result, to_jsonable(expected)) == []
    assert sorted((data / "fields").glob("part-*.parquet"))


def test_a_path_the_workers_cannot_see_is_named_before_any_work(local_clients):
    from evalcore.distributed.staging import check_workers_see
    from evalcore.errors import EvalInputError

    client = local_clients.get(1)  # a real LocalCluster of 1 worker process (the session's, tests/conftest.py)
    check_workers_see(client, {"reference layer": Path(__file__)})  # visible: no error
    with pytest.raises(EvalInputError, match=r"cannot see the work directory '/nonexistent/shared/work'.*same path"):
        check_workers_see(client, {"work directory": Path("/nonexistent/shared/work")})

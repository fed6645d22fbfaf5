"""Fail closed: worker loss, transient and permanent faults, interruption and resume.

Every run here goes through a real LocalCluster of worker processes, and every
successful run must give the metrics of an undisturbed run exactly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

import evalcore
from evalcore.api import check_options
from evalcore.distributed.runner import FAULT_ENV, DistributedRun, PartitionMissingError
from evalcore.distributed.sources import LayerSource
from evalcore.io import to_jsonable
from evalcore.synth import write_layers

OPTIONS = dict(strata="stratum", size_bins="auto", bootstrap=20, boundary_tolerance_m=10.0, tile_size_m=10_000.0)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    pred, ref = write_layers(out, 2_500, seed=8)
    return pred, ref


@pytest.fixture(scope="module")
def expected(data):
    pred, ref = data
    return to_jsonable(evalcore.evaluate(str(pred), str(ref), **OPTIONS))


def _run(client, data, work: Path, **kwargs) -> DistributedRun:
    pred, ref = data
    options = check_options(bootstrap=OPTIONS["bootstrap"], boundary_tolerance_m=10.0, tile_size_m=OPTIONS["tile_size_m"])
    return DistributedRun(
        client=client,
        predicted=LayerSource(str(pred), None, "predicted"),
        reference=LayerSource(str(ref), None, "reference"),
        options=options,
        workdir=work,
        strata_column="stratum",
        size_bins="auto",
        **kwargs,
    )


@pytest.fixture()
def cluster_client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, Client(cluster) as client:
        yield client


def _set_fault(client, **spec) -> None:
    """Ask every worker process to raise in one phase and partition (read at task time)."""
    text = json.dumps(spec)
    client.run(lambda: os.environ.__setitem__(FAULT_ENV, text))


def _worker_pids(client) -> list[int]:
    return list(client.run(os.getpid).values())


@pytest.mark.parametrize("phase", ["pairs", "sums"])
def test_worker_killed_mid_phase_gives_identical_metrics(cluster_client, data, expected, tmp_path, phase):
    run = _run(cluster_client, data, tmp_path / "work")
    run.prepare()
    run.make_plan()
    victim = _worker_pids(cluster_client)[0]
    killed = threading.Event()

    def kill_soon() -> None:
        time.sleep(0.3)
        os.kill(victim, signal.SIGKILL)
        killed.set()

    if phase == "pairs":
        threading.Thread(target=kill_soon, daemon=True).start()
    run.pairs()
    run.resolve()
    if phase == "sums":
        threading.Thread(target=kill_soon, daemon=True).start()
    run.sums()
    assert killed.wait(10)
    assert to_jsonable(run.merge()) == expected


def test_worker_killed_during_merge_changes_nothing(cluster_client, data, expected, tmp_path):
    run = _run(cluster_client, data, tmp_path / "work")
    run.prepare()
    run.make_plan()
    run.pairs()
    run.resolve()
    run.sums()
    os.kill(_worker_pids(cluster_client)[1], signal.SIGKILL)  # the merge reads only the work directory
    assert to_jsonable(run.merge()) == expected


def test_transient_fault_is_retried(cluster_client, data, expected, tmp_path):
    run = _run(cluster_client, data, tmp_path / "work")
    run.prepare()
    run.make_plan()
    first = sorted(run.index["reference"]["partitions"])[0]
    marker = tmp_path / "fault-marker"
    _set_fault(cluster_client, phase="pairs", partition="_".join(map(str, first)), mode="once", marker=str(marker))
    run.pairs()
    assert marker.exists()  # the fault really happened once, and the retry succeeded
    run.resolve()
    run.sums()
    assert to_jsonable(run.merge()) == expected


def test_permanent_fault_names_the_partition(cluster_client, data, tmp_path):
    run = _run(cluster_client, data, tmp_path / "work")
    run.prepare()
    run.make_plan()
    victim = sorted(run.index["reference"]["partitions"])[1]
    name = "_".join(map(str, victim))
    _set_fault(cluster_client, phase="sums", partition=name, mode="always", marker=str(tmp_path / "m"))
    run.pairs()
    run.resolve()
    with pytest.raises(RuntimeError, match=rf"sums failed for partition {name}: InjectedFault"):
        run.sums()
    with pytest.raises(PartitionMissingError, match=name):
        run.merge()


def test_resume_reuses_verified_partitions_and_changed_inputs_invalidate(cluster_client, data, expected, tmp_path):
    work = tmp_path / "work"
    first = _run(cluster_client, data, work)
    first.prepare()
    first.make_plan()
    first.pairs()
    # "Interrupted" here: no sums. A rerun reuses prepare and pairs, computes sums.
    second = _run(cluster_client, data, work)
    assert to_jsonable(second.run()) == expected
    assert second.reused["prepare"] is True and second.reused["pairs"] == len(second.results)
    # Tamper with one finished partition: it must be recomputed, not trusted.
    npz = sorted((work / "sums").glob("*.npz"))[0]
    npz.write_bytes(npz.read_bytes()[:-10] + b"0123456789")
    third = _run(cluster_client, data, work)
    assert to_jsonable(third.run()) == expected
    assert third.reused["sums"] == len(third.sums_info) - 1
    # Changed parameters: nothing is reused.
    changed = _run(cluster_client, data, work)
    changed.options = check_options(bootstrap=20, boundary_tolerance_m=5.0, tile_size_m=OPTIONS["tile_size_m"])
    changed.run()
    assert changed.reused.get("prepare") is None and changed.reused["pairs"] == 0


def test_killed_client_leaves_nothing_complete_looking_and_rerun_is_identical(data, expected, tmp_path):
    """Kill the process running the flow mid-run, then rerun with the same work directory."""
    pred, ref = data
    out = tmp_path / "run"
    script = f"""
import os
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
from prefect.testing.utilities import prefect_test_harness
from flows.evaluate import evaluate_layers
from flows.params import EvaluateParams
with prefect_test_harness():
    evaluate_layers(EvaluateParams(predicted={str(pred)!r}, reference={str(ref)!r}, output_dir={str(out)!r},
        strata_column="stratum", size_bins="auto", bootstrap=20, boundary_tolerance_m=10.0,
        tile_size_m=10000.0, n_workers=2))
"""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parents[2], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pairs_dir = out / "work" / "pairs"
    deadline = time.time() + 240
    while time.time() < deadline and not list(pairs_dir.glob("*.done.json")):
        time.sleep(0.2)
    assert list(pairs_dir.glob("*.done.json")), "the flow never reached the pairs phase"
    os.killpg(proc.pid, signal.SIGKILL)  # the flow process and the cluster it started
    proc.wait(30)
    assert not (out / "metrics.json").exists()
    assert json.loads((out / "status.json").read_text())["status"] == "running"
    assert not (out / "manifest.json").exists() and not (out / "report.md").exists()
    from prefect.testing.utilities import prefect_test_harness

    from flows.evaluate import evaluate_layers
    from flows.params import EvaluateParams

    with prefect_test_harness():
        metrics = evaluate_layers(
            EvaluateParams(predicted=str(pred), reference=str(ref), output_dir=str(out), strata_column="stratum",
                           size_bins="auto", bootstrap=20, boundary_tolerance_m=10.0, tile_size_m=10_000.0, n_workers=2)
        )
    assert to_jsonable(metrics) == expected
    assert json.loads((out / "metrics.json").read_text()) == expected
    assert json.loads((out / "status.json").read_text())["status"] == "succeeded"

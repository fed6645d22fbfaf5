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
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from distributed import Client, LocalCluster

import evalcore
from evalcore.api import check_options
from evalcore.distributed.reliability import FAULT_ENV, PartitionMissingError
from evalcore.distributed.runner import (
    merge_phase,
    pairs_phase,
    plan_phase,
    prepare_phase,
    resolve_phase,
    sums_phase,
)
from evalcore.distributed.sources import LayerSource
from evalcore.distributed.staging import start_run
from evalcore.distributed.values import PairsDone, RunIndex, RunSetup, SumsDone
from evalcore.writers import to_jsonable
from evalcore.synth import write_layers

OPTIONS = dict(strata="stratum", size_bins="auto", bootstrap=20, boundary_tolerance_m=10.0, partition_size_m=10_000.0)

pytestmark = pytest.mark.cluster  # a LocalCluster of the module's, or one the flow starts


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    pred, ref = write_layers(out, 2_500, seed=8)
    return pred, ref


@pytest.fixture(scope="module")
def expected(data):
    pred, ref = data
    return to_jsonable(evalcore.evaluate(str(pred), str(ref), **OPTIONS))


def _setup(data, work: Path, **option_changes) -> RunSetup:
    pred, ref = data
    options = check_options(
        **{"bootstrap": OPTIONS["bootstrap"], "boundary_tolerance_m": 10.0, "partition_size_m": OPTIONS["partition_size_m"], **option_changes}
    )
    return start_run(
        LayerSource(str(pred), None, "predicted"),
        LayerSource(str(ref), None, "reference"),
        options,
        work,
        strata_column="stratum",
        size_bins="auto",
    )


def _all_phases(client, setup: RunSetup) -> tuple[dict, RunIndex, PairsDone, SumsDone]:
    index = prepare_phase(client, setup)
    plan = plan_phase(setup, index)
    pairs = pairs_phase(client, setup, index)
    resolved = resolve_phase(setup, index, pairs)
    sums = sums_phase(client, setup, index, plan, resolved)
    return merge_phase(setup, index, plan, resolved, sums), index, pairs, sums


class _ModuleCluster:
    """The module's own LocalCluster of 2 worker processes (its tests kill workers and set
    their environment, so it is not the session's shared one), renewed when a killed worker
    does not come back."""

    def __init__(self) -> None:
        self.cluster: LocalCluster | None = None
        self.client: Client | None = None
        self.start()

    def start(self) -> None:
        self.cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
        self.client = Client(self.cluster)

    def close(self) -> None:
        for part in (self.client, self.cluster):
            try:
                part.close()
            except Exception:  # a cluster whose nanny failed may not close cleanly; a new one follows
                pass

    def two_live_workers_without_faults(self) -> Client:
        """The client of a cluster with exactly 2 live workers, none with a fault variable.

        A killed worker is replaced by its nanny (a new process, without the fault variable)
        and the variable is removed from the workers that lived. A nanny may fail to restart
        its worker on a slow machine (distributed logs "Failed to restart worker"): after
        60 s the whole cluster is replaced, once, so one lost worker does not fail the
        tests that follow.
        """
        for attempt in range(2):
            answers = _wait_for_two_workers(self.client, timeout=60.0)
            if answers is None:
                return self.client
            if attempt == 0:
                self.close()
                self.start()
        pytest.fail(f"the module's cluster did not get 2 live workers back, even renewed: {answers}")


@pytest.fixture(scope="module")
def _module_cluster():
    cluster = _ModuleCluster()
    yield cluster
    cluster.close()


@pytest.fixture()
def cluster_client(_module_cluster):
    """The module's cluster with 2 live workers and no injected fault, before and after each test."""
    yield _module_cluster.two_live_workers_without_faults()
    _module_cluster.two_live_workers_without_faults()


def _clear_fault() -> int:
    os.environ.pop(FAULT_ENV, None)
    return os.getpid()


def _wait_for_two_workers(client, timeout: float) -> dict | None:
    """None once exactly 2 workers answer (a killed one is dropped by the scheduler and its
    replacement registers), clearing the fault variable in each; the last answers if they
    did not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        answers = client.run(_clear_fault, on_error="return")
        if len(answers) == 2 and all(isinstance(pid, int) for pid in answers.values()):
            return None
        if time.monotonic() > deadline:
            return answers
        time.sleep(0.2)


def _set_fault(client, **spec) -> None:
    """Ask every worker process to raise in one phase and partition (read at task time)."""
    text = json.dumps(spec)
    client.run(lambda: os.environ.__setitem__(FAULT_ENV, text))


def _worker_pids(client) -> list[int]:
    return list(client.run(os.getpid).values())


# make test loses a worker in the pairs phase; the sums phase in make slow (the same mechanism, a retried task).
@pytest.mark.parametrize("phase", ["pairs", pytest.param("sums", marks=pytest.mark.slow)])
def test_worker_killed_mid_phase_gives_identical_metrics(cluster_client, data, expected, tmp_path, phase):
    setup = _setup(data, tmp_path / "work")
    index = prepare_phase(cluster_client, setup)
    plan = plan_phase(setup, index)
    victim = _worker_pids(cluster_client)[0]
    killed = threading.Event()

    def kill_soon() -> None:
        time.sleep(0.3)
        os.kill(victim, signal.SIGKILL)
        killed.set()

    if phase == "pairs":
        threading.Thread(target=kill_soon, daemon=True).start()
    pairs = pairs_phase(cluster_client, setup, index)
    resolved = resolve_phase(setup, index, pairs)
    if phase == "sums":
        threading.Thread(target=kill_soon, daemon=True).start()
    sums = sums_phase(cluster_client, setup, index, plan, resolved)
    assert killed.wait(10)
    assert to_jsonable(merge_phase(setup, index, plan, resolved, sums)) == expected


@pytest.mark.slow  # make slow (CI time): a worker killed while the merge's selection runs is in make test
def test_worker_killed_during_merge_changes_nothing(cluster_client, data, expected, tmp_path):
    setup = _setup(data, tmp_path / "work")
    index = prepare_phase(cluster_client, setup)
    plan = plan_phase(setup, index)
    pairs = pairs_phase(cluster_client, setup, index)
    resolved = resolve_phase(setup, index, pairs)
    sums = sums_phase(cluster_client, setup, index, plan, resolved)
    os.kill(_worker_pids(cluster_client)[1], signal.SIGKILL)  # the merge reads only the work directory
    assert to_jsonable(merge_phase(setup, index, plan, resolved, sums)) == expected


def test_transient_fault_is_retried(cluster_client, data, expected, tmp_path):
    setup = _setup(data, tmp_path / "work")
    index = prepare_phase(cluster_client, setup)
    plan = plan_phase(setup, index)
    first = sorted(index.layers["reference"]["partitions"])[0]
    marker = tmp_path / "fault-marker"
    _set_fault(cluster_client, phase="pairs", partition="_".join(map(str, first)), mode="once", marker=str(marker))
    pairs = pairs_phase(cluster_client, setup, index)
    assert marker.exists()  # the fault really happened once, and the retry succeeded
    resolved = resolve_phase(setup, index, pairs)
    sums = sums_phase(cluster_client, setup, index, plan, resolved)
    assert to_jsonable(merge_phase(setup, index, plan, resolved, sums)) == expected


def test_permanent_fault_names_the_partition(cluster_client, data, tmp_path):
    setup = _setup(data, tmp_path / "work")
    index = prepare_phase(cluster_client, setup)
    plan = plan_phase(setup, index)
    victim = sorted(index.layers["reference"]["partitions"])[1]
    name = "_".join(map(str, victim))
    _set_fault(cluster_client, phase="sums", partition=name, mode="always", marker=str(tmp_path / "m"))
    pairs = pairs_phase(cluster_client, setup, index)
    resolved = resolve_phase(setup, index, pairs)
    with pytest.raises(RuntimeError, match=rf"sums failed for partition {name}: InjectedFault"):
        sums_phase(cluster_client, setup, index, plan, resolved)
    with pytest.raises(PartitionMissingError, match=name):
        merge_phase(setup, index, plan, resolved, SumsDone({}))


def _through_sums(client, setup: RunSetup):
    index = prepare_phase(client, setup)
    plan = plan_phase(setup, index)
    resolved = resolve_phase(setup, index, pairs_phase(client, setup, index))
    return index, plan, resolved, sums_phase(client, setup, index, plan, resolved)


def test_selection_rounds_survive_a_transient_fault_and_a_killed_worker(cluster_client, data, expected, tmp_path):
    """The merge's median rounds run as tasks (select_task): a fault in one partition's
    round is retried, a worker killed while they run is replaced; the numbers are identical."""
    setup = _setup(data, tmp_path / "work")
    index, plan, resolved, sums = _through_sums(cluster_client, setup)
    first = sorted(index.layers["reference"]["partitions"])[0]
    marker = tmp_path / "fault-marker"
    _set_fault(cluster_client, phase="select", partition="_".join(map(str, first)), mode="once", marker=str(marker))
    assert to_jsonable(merge_phase(setup, index, plan, resolved, sums, cluster_client)) == expected
    assert marker.exists()
    victim = _worker_pids(cluster_client)[0]
    threading.Timer(0.05, lambda: os.kill(victim, signal.SIGKILL)).start()
    assert to_jsonable(merge_phase(setup, index, plan, resolved, sums, cluster_client)) == expected


def test_selection_in_batches_of_any_size(cluster_client, data, expected, tmp_path, monkeypatch):
    """One select task answers several partitions (order.SELECT_BATCH): batches of one, of
    five (the last one short) and of every partition give the single process's numbers."""
    from evalcore.distributed import order

    setup = _setup(data, tmp_path / "work")
    index, plan, resolved, sums = _through_sums(cluster_client, setup)
    n = len(index.layers["reference"]["partitions"])
    assert n > 5 and n % 5 != 0
    for batch in (1, 5, n + 5):
        monkeypatch.setattr(order, "SELECT_BATCH", batch)
        assert to_jsonable(merge_phase(setup, index, plan, resolved, sums, cluster_client)) == expected, batch


def test_permanent_selection_fault_names_the_partition(cluster_client, data, tmp_path):
    setup = _setup(data, tmp_path / "work")
    index, plan, resolved, sums = _through_sums(cluster_client, setup)
    name = "_".join(map(str, sorted(index.layers["reference"]["partitions"])[1]))
    _set_fault(cluster_client, phase="select", partition=name, mode="always", marker=str(tmp_path / "m"))
    with pytest.raises(RuntimeError, match=rf"select failed for partition {name}: InjectedFault"):
        merge_phase(setup, index, plan, resolved, sums, cluster_client)


def test_resume_reuses_verified_partitions_and_changed_inputs_invalidate(cluster_client, data, expected, tmp_path):
    work = tmp_path / "work"
    first = _setup(data, work)
    index = prepare_phase(cluster_client, first)
    pairs_phase(cluster_client, first, index)
    # "Interrupted" here: no sums. A rerun reuses prepare and pairs, computes sums.
    metrics, index, pairs, sums = _all_phases(cluster_client, _setup(data, work))
    assert to_jsonable(metrics) == expected
    assert index.reused is True and pairs.reused == len(pairs.keys) and sums.reused == 0
    # Tamper with one finished partition: it must be recomputed, not trusted.
    npz = sorted((work / "sums").glob("*.arrays"))[0]
    npz.write_bytes(npz.read_bytes()[:-10] + b"0123456789")
    metrics, _, _, sums = _all_phases(cluster_client, _setup(data, work))
    assert to_jsonable(metrics) == expected
    assert sums.reused == len(sums.partitions) - 1
    # Changed parameters: nothing is reused.
    _, index, pairs, _ = _all_phases(cluster_client, _setup(data, work, boundary_tolerance_m=5.0, bootstrap=20))
    assert index.reused is False and pairs.reused == 0


# --------------------------------------------------------------------------- the resolve on the workers

WORKER_RESOLVE = dict(bootstrap=0)
"""No bootstrap and no run-level family: the resolve runs on the workers (resolves_on_workers)."""


@pytest.fixture(scope="module")
def expected_worker_resolve(data):
    pred, ref = data
    return to_jsonable(evalcore.evaluate(str(pred), str(ref), **{**OPTIONS, **WORKER_RESOLVE}))


def _worker_resolve_phases(client, setup: RunSetup):
    index = prepare_phase(client, setup)
    plan = plan_phase(setup, index)
    pairs = pairs_phase(client, setup, index)
    resolved = resolve_phase(setup, index, pairs, plan, client=client)
    assert resolved.shares is not None  # the worker path
    return index, plan, pairs, resolved


def _seam_owner(work: Path) -> tuple[str, str]:
    """A partition that resolved a seam component (it wrote a share for another partition), and that one."""
    for listing in sorted(work.glob("resolve/by-*/listing.json")):
        owner = listing.parent.name[len("by-"):]
        others = [k for k in json.loads(listing.read_text())["shares"] if k != owner]
        if others:
            return owner, others[0]
    raise AssertionError("no seam component crosses partitions in this data")


def _lose_a_seam_owners_worker(cluster_client, data, tmp_path, phase: str, **options):
    """Run the phases with a worker dying in ``phase`` of a partition owning a seam component.

    An undisturbed run first names such a partition (:func:`_seam_owner`); in the second
    run its worker process dies in that task, which runs again elsewhere. Returns the
    resolved run and the merged metrics.
    """
    _worker_resolve_phases(cluster_client, _setup(data, tmp_path / "first", **options))
    owner, _ = _seam_owner(tmp_path / "first")
    setup = _setup(data, tmp_path / "work", **options)
    marker = tmp_path / "died"
    _set_fault(cluster_client, phase=phase, partition=owner, mode="die", marker=str(marker))
    index, plan, pairs, resolved = _worker_resolve_phases(cluster_client, setup)
    assert marker.exists()  # the worker really died there
    sums = sums_phase(cluster_client, setup, index, plan, resolved)
    return resolved, to_jsonable(merge_phase(setup, index, plan, resolved, sums))


def test_worker_lost_while_it_resolves_a_seam_component_gives_identical_metrics(cluster_client, data, expected_worker_resolve, tmp_path):
    _, metrics = _lose_a_seam_owners_worker(cluster_client, data, tmp_path, "resolve", **WORKER_RESOLVE)
    assert metrics == expected_worker_resolve


def test_missing_resolve_output_fails_the_run_naming_the_partition(cluster_client, data, tmp_path):
    work = tmp_path / "work"
    setup = _setup(data, work, **WORKER_RESOLVE)
    index, plan, pairs, resolved = _worker_resolve_phases(cluster_client, setup)
    owner, other = _seam_owner(work)
    (work / "resolve" / f"by-{owner}" / f"to-{other}.arrays").unlink()
    # Every partition the owner wrote a share for fails (the first to fail stops the phase), naming the owner.
    with pytest.raises(RuntimeError, match=rf"sums failed for partition \S+: PartitionMissingError: partition {owner}: its resolve output"):
        sums_phase(cluster_client, setup, index, plan, resolved)


def test_missing_homeless_unit_sums_fail_the_merge_naming_the_file(cluster_client, data, tmp_path):
    # The homeless task writes the homeless predictions' tile and AOI sums for the merge to
    # read last; without them the merge would miss those predictions' units: it must refuse.
    import re

    work = tmp_path / "work"
    setup = _setup(data, work, **WORKER_RESOLVE)
    index, plan, pairs, resolved = _worker_resolve_phases(cluster_client, setup)
    path = work / "resolve" / "homeless-units.arrays"
    assert resolved.homeless_units == str(path) and path.exists()
    sums = sums_phase(cluster_client, setup, index, plan, resolved)
    path.unlink()
    with pytest.raises(PartitionMissingError, match=rf"the homeless predictions' tile and AOI sums \({re.escape(str(path))}\) are missing"):
        merge_phase(setup, index, plan, resolved, sums)


@pytest.mark.slow  # make slow (CI time): the resume of verified partitions is in make test
def test_resume_reuses_finished_resolves(cluster_client, data, expected_worker_resolve, tmp_path):
    work = tmp_path / "work"
    index, plan, pairs, _ = _worker_resolve_phases(cluster_client, _setup(data, work, **WORKER_RESOLVE))
    records = sorted(work.glob("resolve/by-*.done.json"))
    stamps = [r.stat().st_mtime_ns for r in records]
    lines: list[str] = []
    setup = replace(_setup(data, work, **WORKER_RESOLVE), log=lines.append)
    resolved = resolve_phase(setup, index, pairs, plan, client=cluster_client)
    assert f"resolve: reusing {len(records)} finished partitions (checksums verified)" in lines
    assert [r.stat().st_mtime_ns for r in records] == stamps
    sums = sums_phase(cluster_client, setup, index, plan, resolved)
    assert to_jsonable(merge_phase(setup, index, plan, resolved, sums)) == expected_worker_resolve


# --------------------------------------------------------------------------- the field bootstrap on the workers
# OPTIONS' bootstrap draws fields (the default unit): the resolve runs on the workers too,
# each sums task ranking its fields among the positions of the partitions sharing its
# (pool, reporting tile) groups. Partitions of 5 km cut the 10 km reporting tiles: groups
# span partitions.

FIELD_SPLIT = dict(partition_size_m=5_000.0)


@pytest.fixture(scope="module")
def expected_field_split(data):
    pred, ref = data
    return to_jsonable(evalcore.evaluate(str(pred), str(ref), **{**OPTIONS, **FIELD_SPLIT}))


# make slow (CI time): make test keeps the seam owner's loss without a bootstrap and the group-draws loss with a field bootstrap.
@pytest.mark.parametrize("phase", [pytest.param("components", marks=pytest.mark.slow), pytest.param("resolve", marks=pytest.mark.slow)])
def test_worker_lost_in_the_resolve_with_a_field_bootstrap_gives_identical_metrics(cluster_client, data, expected_field_split,
                                                                                   tmp_path, phase):
    resolved, metrics = _lose_a_seam_owners_worker(cluster_client, data, tmp_path, phase, **FIELD_SPLIT)
    assert any(others for _, others in resolved.field_groups.values())  # groups shared by partitions
    assert metrics == expected_field_split


@pytest.mark.slow  # make slow (CI time): a missing work file is refused as in the resolve case make test keeps
def test_missing_positions_of_a_field_bootstrap_fail_the_run_naming_the_partition(cluster_client, data, tmp_path):
    from evalcore.distributed import storage

    work = tmp_path / "work"
    setup = _setup(data, work, **FIELD_SPLIT)
    index, plan, pairs, resolved = _worker_resolve_phases(cluster_client, setup)
    # A partition whose positions another partition's sums task reads (a group they share).
    shared = sorted({other for _, others in resolved.field_groups.values() for other in others})
    assert shared, "no (pool, reporting tile) group spans partitions in this data"
    victim = storage.key_name(shared[0])
    (work / "resolve" / "positions" / f"{victim}.arrays").unlink()
    with pytest.raises(RuntimeError, match=rf"sums failed for partition \S+: PartitionMissingError: partition {victim}: its reference positions"):
        sums_phase(cluster_client, setup, index, plan, resolved)


def _largest_pool(data) -> int:
    """The bootstrap pool of the data's most common stratum (it has a ``group-draws`` task)."""
    import pyarrow.parquet as pq

    from evalcore.bootstrap import pool_id

    strata = pd.Series(pq.read_table(str(data[1]), columns=["stratum"]).column("stratum").to_pylist())
    return pool_id(strata.value_counts(dropna=False).index[0], True)


def test_worker_lost_in_a_group_draws_task_gives_identical_metrics(cluster_client, data, expected_field_split, tmp_path):
    """A worker dies while it draws a pool's counts: the task runs again elsewhere, the
    pool's file is whole and the metrics are the single process's."""
    pool = _largest_pool(data)
    work = tmp_path / "work"
    setup = _setup(data, work, **FIELD_SPLIT)
    marker = tmp_path / "died"
    _set_fault(cluster_client, phase="group-draws", partition=str(pool), mode="die", marker=str(marker))
    index, plan, pairs, resolved = _worker_resolve_phases(cluster_client, setup)
    assert marker.exists()  # the worker really died there
    assert (work / "resolve" / "groups" / str(pool) / "index.done.json").exists()
    # The sums tasks get sizes and keys only: each group's counts are read from its pool's file.
    assert all(all(isinstance(n, int) for n in sizes.values()) for sizes, _ in resolved.field_groups.values())
    sums = sums_phase(cluster_client, setup, index, plan, resolved)
    assert to_jsonable(merge_phase(setup, index, plan, resolved, sums)) == expected_field_split


@pytest.mark.slow  # make slow (CI time): a missing work file is refused as in the resolve case make test keeps
def test_missing_pool_counts_of_a_field_bootstrap_fail_the_run_naming_the_file(cluster_client, data, tmp_path):
    import re

    work = tmp_path / "work"
    setup = _setup(data, work, **FIELD_SPLIT)
    index, plan, pairs, resolved = _worker_resolve_phases(cluster_client, setup)
    pool = _largest_pool(data)
    path = work / "resolve" / "groups" / str(pool)
    (path / "index.arrays").unlink()
    with pytest.raises(PartitionMissingError, match=rf"sums failed for partition \S+: PartitionMissingError: partition \S+: "
                                                    rf"the field bootstrap counts of pool {pool} \({re.escape(str(path))}\) are missing"):
        sums_phase(cluster_client, setup, index, plan, resolved)


@pytest.mark.prefect  # the evaluate_layers flow, in a subprocess
@pytest.mark.slow  # 100 s: a client killed mid-run, then a rerun (make slow); worker kills are tested in make test
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
with prefect_test_harness(server_startup_timeout=300):
    evaluate_layers(EvaluateParams(predicted={str(pred)!r}, reference={str(ref)!r}, output_dir={str(out)!r},
        strata_column="stratum", size_bins="auto", bootstrap=20, boundary_tolerance_m=10.0,
        partition_size_m=10000.0, n_workers=2))
"""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parents[2], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pairs_dir = out / "work" / "pairs"
    deadline = time.time() + 420  # the ephemeral server may take up to its 300 s start timeout on a busy machine
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

    with prefect_test_harness(server_startup_timeout=300):
        metrics = evaluate_layers(
            EvaluateParams(predicted=str(pred), reference=str(ref), output_dir=str(out), strata_column="stratum",
                           size_bins="auto", bootstrap=20, boundary_tolerance_m=10.0, partition_size_m=10_000.0, n_workers=2)
        )
    assert to_jsonable(metrics) == expected
    assert json.loads((out / "metrics.json").read_text()) == expected
    assert json.loads((out / "status.json").read_text())["status"] == "succeeded"


# --------------------------------------------------------------------------- the score tasks on the workers
# The scores' run-level values (AP, PR curves, risk-coverage) without a bootstrap are computed
# by score ranges on the workers (runner._scores_on_workers): score-split per resolve,
# score-range and score-values per range (range-0 ...). A worker lost in any of them changes
# nothing; a permanent fault names the range; a missing PR-curve part leaves no curve file.

SCORES = dict(bootstrap=0, score_column="score")
"""The scores without a bootstrap: their run-level values are computed on the workers."""


@pytest.fixture(scope="module")
def expected_scores(data):
    """The single process's metrics and exact PR curve."""
    pred, ref = data
    tables = evalcore.evaluate_tables(str(pred), str(ref), **{**OPTIONS, **SCORES})
    return to_jsonable(tables.summary), tables.pr_curve.reset_index(drop=True)


def _score_setup(data, work: Path) -> RunSetup:
    pred, ref = data
    options = check_options(boundary_tolerance_m=10.0, partition_size_m=OPTIONS["partition_size_m"], **SCORES)
    return start_run(LayerSource(str(pred), None, "predicted"), LayerSource(str(ref), None, "reference"), options, work,
                     strata_column="stratum", size_bins="auto", pr_curve_out=work.parent / "out" / "pr_curve.parquet")


def _score_phases(client, setup: RunSetup, fault: dict | None = None, marker: Path | None = None) -> dict:
    """Every phase, the score tasks on the workers; ``fault`` (``phase``, and ``partition``
    or None for the first resolving partition) set on the workers just before the resolve."""
    index = prepare_phase(client, setup)
    plan = plan_phase(setup, index)
    pairs = pairs_phase(client, setup, index)
    if fault is not None:
        partition = fault.get("partition") or "_".join(map(str, sorted(pairs.keys)[0]))
        _set_fault(client, phase=fault["phase"], partition=partition, mode=fault["mode"], marker=str(marker))
    resolved = resolve_phase(setup, index, pairs, plan, client=client)
    # Two score ranges or more (their PR curve parts; the ranges' own files are removed once read).
    assert resolved.shares is not None and len(list((setup.workdir / "resolve" / "scores").glob("pr-0-*.parquet"))) >= 2
    sums = sums_phase(client, setup, index, plan, resolved)
    return to_jsonable(merge_phase(setup, index, plan, resolved, sums))


# make slow (CI time): the same retry of a lost task as the score-weights case below, which make test keeps;
# tests/unit/test_score_tasks.py covers their refusals of missing or short files.
@pytest.mark.parametrize("phase, partition", [pytest.param("score-split", None, marks=pytest.mark.slow),
                                              pytest.param("score-range", "range-0", marks=pytest.mark.slow),
                                              pytest.param("score-values", "range-1", marks=pytest.mark.slow)])
def test_worker_lost_in_a_score_task_gives_identical_scores_and_pr_curve(cluster_client, data, expected_scores, tmp_path, phase,
                                                                          partition):
    setup = _score_setup(data, tmp_path / "work")
    marker = tmp_path / "died"
    metrics = _score_phases(cluster_client, setup, {"phase": phase, "partition": partition, "mode": "die"}, marker)
    assert marker.exists()  # the worker process really died in that task
    expected_metrics, expected_curve = expected_scores
    assert metrics == expected_metrics
    assert metrics["ap50"] == expected_metrics["ap50"] and metrics["pr_curve"]  # the scores were computed
    pd.testing.assert_frame_equal(pd.read_parquet(setup.pr_curve_out), expected_curve, check_exact=True)


@pytest.mark.slow  # make slow (CI time): a permanent fault naming its partition is in make test
def test_permanent_score_range_fault_names_the_range(cluster_client, data, tmp_path):
    setup = _score_setup(data, tmp_path / "work")
    with pytest.raises(RuntimeError, match=r"score-range failed for score range 1: InjectedFault: injected always fault in "
                                           r"score-range of partition range-1"):
        _score_phases(cluster_client, setup, {"phase": "score-range", "partition": "range-1", "mode": "always"}, tmp_path / "m")
    assert not setup.pr_curve_out.exists()


@pytest.mark.slow  # make slow (CI time): a missing resolve output naming its partition is in make test
def test_missing_pr_curve_part_leaves_no_curve_file_and_names_the_part(cluster_client, data, tmp_path):
    setup = _score_setup(data, tmp_path / "work")
    index = prepare_phase(cluster_client, setup)
    plan = plan_phase(setup, index)
    resolved = resolve_phase(setup, index, pairs_phase(cluster_client, setup, index), plan, client=cluster_client)
    parts = resolved.resolved.global_values["tables"]["pr_curve"]
    n_ranges = len(parts.paths) // 2
    lost = parts.paths[n_ranges + 1]  # score range 1's rows at IoU 0.75
    Path(lost).unlink()
    # The curve is copied from its parts while the sums phase runs: the phase fails.
    with pytest.raises(PartitionMissingError, match=rf"PR curve of score range 1 at IoU 0.75: its table part {lost} is missing"):
        sums_phase(cluster_client, setup, index, plan, resolved)
    out = setup.pr_curve_out.parent
    assert not out.exists() or not list(out.iterdir())  # neither the curve nor a temporary file


SCORES_BOOTSTRAP = dict(bootstrap=20, score_column="score")
"""The scores with a bootstrap: the replicates' AP and aurc by score ranges too (score-weights, score-replicates)."""


def test_worker_lost_in_a_score_weights_task_gives_identical_intervals(cluster_client, data, tmp_path):
    """A reference partition's replicate weights for the score ranges, its worker lost: the
    task runs again elsewhere (its files are written whole or not at all); AP and aurc with
    their intervals equal the single process's."""
    pred, ref = data
    expected = to_jsonable(evalcore.evaluate_tables(str(pred), str(ref), **{**OPTIONS, **SCORES_BOOTSTRAP}).summary)
    work = tmp_path / "work"
    options = check_options(boundary_tolerance_m=10.0, partition_size_m=OPTIONS["partition_size_m"], **SCORES_BOOTSTRAP)
    setup = start_run(LayerSource(str(pred), None, "predicted"), LayerSource(str(ref), None, "reference"), options, work,
                      strata_column="stratum", size_bins="auto")
    marker = tmp_path / "died"
    metrics = _score_phases(cluster_client, setup, {"phase": "score-weights", "mode": "die"}, marker)
    assert marker.exists()
    # The ranges carried the replicates (their files removed once read; no weight file is left either).
    assert metrics["bootstrap"]["ci"]["ap50"][0] < metrics["bootstrap"]["ci"]["ap50"][1]
    assert not list((work / "resolve" / "scores").glob("weights-*.arrays"))
    for key in ("ap50", "ap50_95", "aurc", "risk_coverage", "ap_interval"):
        assert metrics.get(key) == expected.get(key), key
    for key in ("ap50", "ap75", "ap50_95", "aurc"):
        assert metrics["bootstrap"]["ci"][key] == expected["bootstrap"]["ci"][key], key


def test_permanent_predictions_fault_fails_the_merge_naming_the_partition(cluster_client, data, tmp_path):
    """The per-prediction table's tasks run while the client merges (submitted with the sums):
    the merge phase, as the flow calls it, still waits for every one of them, so a part
    that cannot be written fails the run, named, and never leaves a short table behind a
    finished merge."""
    pred, ref = data
    options = check_options(boundary_tolerance_m=10.0, partition_size_m=OPTIONS["partition_size_m"])
    setup = start_run(LayerSource(str(pred), None, "predicted"), LayerSource(str(ref), None, "reference"), options,
                      tmp_path / "work", strata_column="stratum", size_bins="auto", predictions_dir=tmp_path / "predictions")
    index = prepare_phase(cluster_client, setup)
    plan = plan_phase(setup, index)
    victim = sorted(index.layers["predicted"]["partitions"])[-1]
    name = "_".join(map(str, victim))
    _set_fault(cluster_client, phase="predictions", partition=name, mode="always", marker=str(tmp_path / "m"))
    resolved = resolve_phase(setup, index, pairs_phase(cluster_client, setup, index), plan, client=cluster_client)
    sums = sums_phase(cluster_client, setup, index, plan, resolved)
    assert sums.predictions is not None  # submitted with the sums, not gathered by them
    with pytest.raises(RuntimeError, match=rf"predictions failed for partition {name}: InjectedFault"):
        merge_phase(setup, index, plan, resolved, sums, cluster_client)

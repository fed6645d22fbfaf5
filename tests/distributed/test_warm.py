"""The embedded cluster's workers import the engine and load its kernels as they start
(:mod:`evalcore.distributed.warm`), so no first task pays for it; ``preload=[]`` turns it off."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cluster  # each test starts an embedded LocalCluster


def _engine_state() -> dict:
    import sys

    state = {name: name in sys.modules for name in ("evalcore.engine", "evalcore.distributed.tasks")}
    if "evalcore._area_kernels" in sys.modules:
        from numba.core.registry import CPUDispatcher

        kernels = sys.modules["evalcore._area_kernels"]
        loaded = [v for v in vars(kernels).values() if isinstance(v, CPUDispatcher) and v.signatures]
        state["area kernels loaded"] = len(loaded)
    return state


def test_workers_start_with_the_engine_loaded():
    from distributed import Client

    from evalcore.distributed.cluster import local_cluster

    with local_cluster(1, memory_limit=0) as cluster, Client(cluster) as client:
        (state,) = client.run(_engine_state).values()
    assert state["evalcore.engine"] and state["evalcore.distributed.tasks"]
    assert state["area kernels loaded"] > 0  # the warm-up evaluation ran the intersection-area kernels

    with local_cluster(1, memory_limit=0, preload=[]) as cluster, Client(cluster) as client:
        (cold,) = client.run(_engine_state).values()
    assert not cold["evalcore.engine"]


def test_a_failing_warm_up_does_not_stop_the_worker(monkeypatch, caplog):
    import logging

    import evalcore
    from evalcore.distributed import warm

    def broken(*args, **kwargs):
        raise RuntimeError("no kernels today")

    monkeypatch.setattr(evalcore, "evaluate", broken)
    with caplog.at_level(logging.DEBUG, logger="evalcore.distributed.warm"):
        warm.warm_engine()  # returns instead of raising
    assert "evalcore warm-up failed: no kernels today" in caplog.text


@pytest.mark.slow
def test_compiled_kernels_leave_a_full_cluster_run_nothing_to_compile(tmp_path):
    """After ``python -m evalcore.distributed.warm``, a run on the embedded cluster with the
    scale benchmark's full options (and pixel metrics) loads every kernel from numba's
    cache: no index of the cache is written again, none is added. (Without classes: with
    them the scores' replicates are not made by score ranges, whose kernel only a
    cluster's tasks call; without boundary IoU, which has no kernel of its own and makes
    the pairs phase read shapely geometries instead of the rings whose WKB reader only a
    cluster's tasks call.)"""
    import os
    import subprocess
    import sys

    from benchmarks.scale import FULL_OPTIONS

    cache = tmp_path / "numba-cache"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))  # a cache of its own: everything compiled afresh
    subprocess.run([sys.executable, "-m", "evalcore.distributed.warm"], env=env, check=True, stdout=subprocess.DEVNULL)
    compiled = {str(p): p.stat().st_mtime_ns for p in cache.rglob("*.nbi")}
    assert len(compiled) > 20

    data = tmp_path / "data"
    evalcore = [sys.executable, "-m", "evalcore.cli"]
    subprocess.run([*evalcore, "synth", "--n-ref", "3000", "--seed", "5", "--out", str(data)], env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(
        [*evalcore, "run", "-p", str(data / "predicted.parquet"), "-r", str(data / "reference.parquet"), *FULL_OPTIONS,
         "--aoi", str(data / "aoi.parquet"), "--annotated-area", str(data / "annotated.parquet"),
         "--pixel-gsd-m", "10", "--workers", "1",
         "--partition-km", "5", "-o", str(tmp_path / "run")],
        env=env, check=True, stdout=subprocess.DEVNULL,
    )
    after = {str(p): p.stat().st_mtime_ns for p in cache.rglob("*.nbi")}
    assert sorted(set(after) - set(compiled)) == []  # no kernel compiled for a signature the warm-up did not give
    assert {p for p in compiled if after[p] != compiled[p]} == set()

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

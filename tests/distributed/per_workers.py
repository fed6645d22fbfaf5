"""Runs on a cluster of 1, 2 or 3 workers, each compared with the single process at the
partition side of its number of workers (the scores and classes distributed tests).

Usage in a test module (``client``: a module fixture over :data:`WORKERS` taking
``local_clients.get(request.param)``, tests/conftest.py)::

    expected = single_process_runs(predicted, reference, OPTIONS)
    result, partition = cluster_run(client, predicted, reference, OPTIONS, tmp_path / "work")
    single = expected[partition]
"""

from __future__ import annotations

from pathlib import Path

import pytest

import evalcore

PARTITION_FOR_WORKERS = {1: 5_000.0, 2: 20_000.0, 3: 50_000.0}
"""workers -> partition side (m): each run compared with the single process at that side."""
WORKERS = sorted(PARTITION_FOR_WORKERS)

TWO_WORKERS_UNLESS_SLOW = [
    pytest.param(1, id="1workers", marks=pytest.mark.slow),
    pytest.param(2, id="2workers"),
    pytest.param(3, id="3workers", marks=pytest.mark.slow),
]
"""For ``@pytest.mark.parametrize("client", TWO_WORKERS_UNLESS_SLOW, indirect=True)``: a case
that adds a mechanism to the differential matrix (which runs on 1, 2 and 3 workers in make
test) runs on 2 workers in make test and on 1 and 3 as well in make slow (CI time)."""


def single_process_runs(predicted: object, reference: object, options: dict) -> dict[float, dict]:
    """``evalcore.evaluate`` in one process at each partition side of :data:`PARTITION_FOR_WORKERS`."""
    return {p: evalcore.evaluate(predicted, reference, partition_size_m=p, **options) for p in PARTITION_FOR_WORKERS.values()}


def cluster_run(client: object, predicted: object, reference: object, options: dict, workdir: Path) -> tuple[dict, float]:
    """The run on the client's cluster at the partition side of its number of workers, and that side."""
    partition = PARTITION_FOR_WORKERS[len(client.scheduler_info()["workers"])]
    result = evalcore.evaluate(predicted, reference, partition_size_m=partition, client=client, workdir=workdir, **options)
    return result, partition

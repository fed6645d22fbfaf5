"""The embedded cluster: a ``distributed.LocalCluster`` set up the way evalcore's tasks want it.

Every evalcore task is coarse (a whole partition, 0.05–5 s) and has no Dask
dependencies, so the scheduler treats them as root tasks and queues them. With the
default ``distributed.scheduler.worker-saturation`` of 1.1 a one-thread worker is sent
``ceil(1.1) = 2`` tasks at a time, and the second one waits behind the first even when
another worker is idle (work stealing moves it only after a delay). A saturation of 1.0
gives each thread one task at a time and the next one when it is free, which keeps
two workers evenly busy to the last task (docs/performance.md). Set the same value on an
external scheduler (``DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION=1.0``).
"""

from __future__ import annotations

__all__ = ["WORKER_SATURATION", "local_cluster"]

WORKER_SATURATION = 1.0


def local_cluster(n_workers: int, **kwargs: object) -> object:
    """A ``LocalCluster`` of ``n_workers`` one-thread worker processes.

    Parameters
    ----------
    n_workers : int
    **kwargs
        Passed to ``distributed.LocalCluster`` (e.g. ``dashboard_address``,
        ``memory_limit``, ``silence_logs``).
    """
    import dask
    from distributed import LocalCluster

    options = {"threads_per_worker": 1, "processes": True, "dashboard_address": ":0", **kwargs}
    with dask.config.set({"distributed.scheduler.worker-saturation": WORKER_SATURATION}):
        return LocalCluster(n_workers=n_workers, **options)

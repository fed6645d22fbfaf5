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

import logging

__all__ = ["WORKER_SATURATION", "WARM_PRELOAD", "local_cluster"]

WORKER_SATURATION = 1.0

WARM_PRELOAD = "evalcore.distributed.warm"
"""The workers' preload module: the engine imported and its kernels loaded at start."""


def local_cluster(n_workers: int, **kwargs: object) -> object:
    """A ``LocalCluster`` of ``n_workers`` one-thread worker processes.

    Without ``silence_logs`` it prints no INFO lines: the scheduler and nannies in
    this process and the worker processes log at :func:`evalcore.logs.library_level`
    (WARNING unless ``-vv`` or EVALCORE_DEBUG). ``LocalCluster``'s own
    ``silence_logs`` reaches only the stream handlers distributed attaches to its
    logger, and it attaches none in a process whose root logger already has handlers
    (the CLI's, Prefect's, and a worker whose main module imports Prefect): there the
    INFO lines would go through the root logger's handlers.

    Parameters
    ----------
    n_workers : int
    **kwargs
        Passed to ``distributed.LocalCluster`` (e.g. ``dashboard_address``,
        ``memory_limit``, ``silence_logs``). An explicit ``silence_logs`` is passed
        on unchanged and the logging of every process is left to distributed. The
        default ``preload`` is :data:`WARM_PRELOAD` (``preload=[]``: none).
    """
    import dask
    from distributed import LocalCluster

    from evalcore.logs import library_level

    options = {"threads_per_worker": 1, "processes": True, "dashboard_address": ":0", "preload": [WARM_PRELOAD], **kwargs}
    config: dict[str, object] = {"distributed.scheduler.worker-saturation": WORKER_SATURATION}
    if "silence_logs" not in kwargs:
        level = library_level()
        options["silence_logs"] = level
        # After the import above, which set distributed's loggers to INFO in this process.
        logging.getLogger("distributed").setLevel(level)
        # A worker process sets its loggers when it imports distributed, from dask's
        # config, which it reads from the environment the nanny spawns it with.
        config["distributed.nanny.pre-spawn-environ.DASK_LOGGING__DISTRIBUTED"] = logging.getLevelName(level).lower()
    with dask.config.set(config):
        return LocalCluster(n_workers=n_workers, **options)

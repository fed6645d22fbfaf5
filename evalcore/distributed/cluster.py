"""The embedded cluster: a ``distributed.LocalCluster`` set up the way evalcore's tasks want it.

Every evalcore task is coarse (a whole partition, 0.05–5 s) and has no Dask
dependencies, so the scheduler treats them as root tasks and queues them. With the
default ``distributed.scheduler.worker-saturation`` of 1.1 a one-thread worker is sent
``ceil(1.1) = 2`` tasks at a time, and the second one waits behind the first even when
another worker is idle (work stealing moves it only after a delay). A saturation of 1.0
gives each thread one task at a time and the next one when it is free, which keeps
two workers evenly busy to the last task (docs/performance.md). Set the same value on an
external scheduler (``DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION=1.0``).

The dashboard listens on loopback only (:data:`DASHBOARD_ADDRESS`): it shows the run's
tasks, logs and worker addresses to anyone who reaches it and has no login, so another
machine reaches it only when the user asks (``--dashboard-address 0.0.0.0:8787`` or
``:8787``). The scheduler and the workers already listen on 127.0.0.1
(``LocalCluster``'s default host).

Closing: ``LocalCluster`` gives each worker process 4 s (``Nanny.close``'s default 5 s
times 0.8) to stop before it kills it and logs ``Worker process still alive after 4.0
seconds, killing``; on a loaded machine an idle worker that has held a run's
partitions can take longer than that to exit (3 of 5 runs on a shared 2-core machine,
issue 33). The cluster :func:`local_cluster` returns asks its workers to close with
:data:`WORKER_CLOSE_SECONDS` instead, so a finished run ends without that warning, and a
worker that really hangs is still killed.
"""

from __future__ import annotations

import functools
import logging
import re

__all__ = ["DASHBOARD_ADDRESS", "WORKER_CLOSE_SECONDS", "WORKER_SATURATION", "WARM_PRELOAD", "check_dashboard_address", "local_cluster"]

DASHBOARD_ADDRESS = "127.0.0.1:0"
"""Where the embedded cluster's dashboard listens by default: loopback, a free port."""

WORKER_SATURATION = 1.0

WARM_PRELOAD = "evalcore.distributed.warm"
"""The workers' preload module: the engine imported and its kernels loaded at start."""

WORKER_CLOSE_SECONDS = 30.0
"""Seconds a closing cluster gives each worker to stop before killing it (distributed's own is 5)."""

@functools.cache
def _patient_cluster_class() -> type:
    """``LocalCluster`` whose close lets its workers take :data:`WORKER_CLOSE_SECONDS` to stop.

    Made on first use, so that importing this module does not import distributed.
    """
    import asyncio

    from distributed import LocalCluster

    class _PatientLocalCluster(LocalCluster):
        async def _close(self) -> None:
            # The workers first, each with the longer timeout; SpecCluster's own close
            # then finds them closed (Nanny.close returns at once) and stops the rest.
            workers = [w for w in list(self.workers.values()) if hasattr(w, "close")]
            await asyncio.gather(*(w.close(timeout=WORKER_CLOSE_SECONDS, reason="evalcore-cluster-close") for w in workers),
                                 return_exceptions=True)
            await super()._close()

    return _PatientLocalCluster


_HOST_PORT = re.compile(r"(?P<host>|[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})")


def check_dashboard_address(text: str) -> str:
    """``text`` if it is a dashboard address ``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT``.

    Port 0 takes a free port. An empty host, ``0.0.0.0`` or ``[::]`` listen on every
    interface: other machines reach the dashboard.

    Raises
    ------
    ValueError
        For anything else, naming what was given.
    """
    found = _HOST_PORT.fullmatch(text.strip())
    if found is None or int(found["port"]) > 65535:
        raise ValueError(
            f"expected HOST:PORT such as 127.0.0.1:8787 (0.0.0.0:8787 or :8787 open it to other machines), got {text[:80]!r}"
        )
    return text.strip()


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
        ``memory_limit``, ``silence_logs``). The default ``dashboard_address`` is
        :data:`DASHBOARD_ADDRESS` (loopback only). An explicit ``silence_logs`` is passed
        on unchanged and the logging of every process is left to distributed. The
        default ``preload`` is :data:`WARM_PRELOAD` (``preload=[]``: none).
    """
    import dask

    from evalcore.logs import library_level

    options = {"threads_per_worker": 1, "processes": True, "dashboard_address": DASHBOARD_ADDRESS, "preload": [WARM_PRELOAD], **kwargs}
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
        return _patient_cluster_class()(n_workers=n_workers, **options)

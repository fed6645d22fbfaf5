"""Worker preload: import the engine and load its compiled kernels when a worker starts.

A worker process that imports the engine on its first task spends 2-3 s there (the
imports, then numba loading each cached kernel from ``__pycache__``), and every first
task of the prepare phase waits for it. Named as a ``preload`` of the embedded cluster's
workers (:func:`evalcore.distributed.cluster.local_cluster`), this module does that work
while the worker starts, which the command line overlaps with its own start-up
(docs/performance.md, "Starting a cluster"). On an external cluster, start the workers
with ``dask worker --preload evalcore.distributed.warm``.
"""

from __future__ import annotations

import logging

__all__ = ["warm_engine", "dask_setup"]

logger = logging.getLogger(__name__)


def warm_engine() -> None:
    """Import the engine and run one evaluation of two 100 m squares (loads the default kernels).

    Never raises: a worker that cannot warm up still works, it only pays the cost on its
    first task.
    """
    try:
        import geopandas
        import shapely

        import evalcore
        import evalcore.distributed.tasks  # noqa: F401  (the task functions' module)

        # Two squares in UTM 13N, 10 m apart: reprojection, pairs, areas, matching and
        # boundary distances each run once, so their numba kernels are loaded.
        ref = geopandas.GeoDataFrame(geometry=[shapely.box(500_000, 5_000_000, 500_100, 5_000_100)], crs=32613)
        pred = geopandas.GeoDataFrame(geometry=[shapely.box(500_010, 5_000_000, 500_110, 5_000_100)], crs=32613)
        evalcore.evaluate(pred, ref)
    except Exception as exc:  # noqa: BLE001  (a warm-up failure must not stop the worker)
        logger.debug("evalcore warm-up failed: %s", exc)


def dask_setup(worker: object) -> None:
    """The ``preload`` hook distributed calls in each worker before it registers."""
    warm_engine()

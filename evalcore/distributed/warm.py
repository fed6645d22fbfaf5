"""Worker preload: import the engine and load its compiled kernels when a worker starts.

A worker process that imports the engine on its first task spends 2-3 s there (the
imports, then numba loading each cached kernel from ``__pycache__``), and every first
task of the prepare phase waits for it. Named as a ``preload`` of the embedded cluster's
workers (:func:`evalcore.distributed.cluster.local_cluster`), this module does that work
while the worker starts, which the command line overlaps with its own start-up
(docs/performance.md, "Starting a cluster"). On an external cluster, start the workers
with ``dask worker --preload evalcore.distributed.warm``.

Loading needs the kernels compiled once into numba's cache; a worker that finds the
cache empty compiles each kernel on its first use, about a minute per worker process
(docs/performance.md, "Compiling the kernels once"). ``python -m evalcore.distributed.warm``
compiles them all ahead (:func:`compile_kernels`): ``make`` runs it, and an image should
run it when it is built.
"""

from __future__ import annotations

import logging

__all__ = ["warm_engine", "dask_setup", "compile_kernels", "main"]

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
        _touch_cluster_kernels()
    except Exception as exc:  # noqa: BLE001  (a warm-up failure must not stop the worker)
        logger.debug("evalcore warm-up failed: %s", exc)


def dask_setup(worker: object) -> None:
    """The ``preload`` hook distributed calls in each worker before it registers."""
    warm_engine()


def compile_kernels(n_ref: int = 400) -> float:
    """Compile every numba kernel of the engine into its cache (``__pycache__``); seconds taken.

    Runs one in-process evaluation of a small synthetic layer pair with every family that
    has kernels of its own switched on (strata, size classes, field bootstrap, boundary
    tolerance and boundary IoU, scores, AOIs, annotated area, classes, pixel metrics), so
    each kernel is compiled with the argument types a run gives it. numba keeps the
    compiled code in ``__pycache__`` beside the modules, keyed by the source file, so a
    worker that starts later loads it instead of compiling it (about a minute per
    worker process, measured in docs/performance.md). Raises if the evaluation fails.
    """
    import time

    import evalcore
    from evalcore.synth.layers import make_layers, make_site_layers

    started = time.perf_counter()
    predicted, reference = make_layers(n_ref, seed=1)
    aoi, annotated = make_site_layers(reference, predicted, seed=1)
    evalcore.evaluate(
        predicted, reference, strata="stratum", size_bins=[0, 0.5, 1, 2, 5, 10, float("inf")], bootstrap=20,
        boundary_tolerance_m=10, boundary_iou_width_m=2, score_column="score", aoi=aoi, aoi_id_column="aoi_id",
        annotated_area=annotated, class_column="crop", pred_class_column="crop", pixel_gsd_m=10,
    )
    _touch_cluster_kernels()
    return time.perf_counter() - started


def _touch_cluster_kernels() -> None:
    """Run the kernels only the distributed run uses once, or on arrays of other types: the
    WKB readers of its outputs' writer and of the pairs phase's rings, the prepare phase's
    rings (their lengths and WKB), the field draws on
    the workers' count layouts, and the score ranges' transposition (the in-process
    evaluation runs none of them)."""
    import numpy as np
    import pyarrow as pa
    import shapely

    from evalcore._wkb_kernels import _wkb_polygon_extent
    from evalcore.arrays import binary_buffers
    from evalcore.rings import Rings

    # The bytes as the runs give them (binary_buffers: a writable array; np.frombuffer of
    # Python bytes is read-only, which numba compiles apart).
    column = pa.array([shapely.to_wkb(shapely.box(0, 0, 1, 1))], type=pa.binary())
    _wkb_polygon_extent(*binary_buffers(column), np.empty(1, np.int64), np.empty(4))
    rings = Rings.from_wkb(column).take(np.zeros(1, np.int64))
    rings.lengths()  # the prepare phase's perimeters and stored WKB, from its rings
    rings.to_wkb(np.array([3]))
    from evalcore._draw_kernels import _place_draws

    # The field bootstrap's draws on each layout a partition's counts can take (float64 or
    # uint8; replicates by rows, the transposed view of rows by replicates whole, or a
    # chunk of its replicates).
    draws, ranks, first = np.ones((1, 2), np.int64), np.zeros(2, np.int64), np.zeros(1, np.int64)
    for counts in (np.float64, np.uint8):
        for out in (np.zeros((2, 3), counts), np.zeros((3, 2), counts).T, np.zeros((3, 4), counts).T[:2]):
            _place_draws(draws, ranks, np.zeros(1, np.int64), first, out)
    from evalcore._score_kernels import _transposed

    for counts in (np.uint8, np.uint16):  # blocks of the score ranges' weights (only the distributed run stores them by row)
        _transposed(np.zeros((3, 4), counts)[:, :2])  # some replicates of a range
        _transposed(np.zeros((3, 4), counts))  # all of them, one block: a contiguous array, compiled apart


def main(argv: list[str] | None = None) -> int:
    """``python -m evalcore.distributed.warm``: compile the kernels into numba's cache."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m evalcore.distributed.warm", description=main.__doc__.split(": ", 1)[1])
    parser.parse_args(argv)
    seconds = compile_kernels()
    print(f"evalcore kernels compiled or loaded from numba's cache in {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

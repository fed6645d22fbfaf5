"""The site layers' memory in a distributed run: the client and each worker, with the grid
pieces held whole (as before issue 29, item 3) or as a cell index and boundary pieces in the
work directory (:mod:`evalcore.site_cells`).

    python -m benchmarks.site_memory DATA_DIR [--workers 2] [--whole-pieces] [--no-cluster] [--layers study]

``DATA_DIR`` is an ``evalcore synth`` output (its ``aoi.parquet`` and ``annotated.parquet``
are used: with ``--layers sites`` as the AOIs and the annotated area; with ``--layers
study`` the annotated area as the study area, rule ``within``, and the AOIs as the training
area, buffer 100 m). Runs the prepare phase (where every prepare chunk looks its rows up in
the layers) on a fresh local cluster and prints:

* what the site layers cost the client: resident memory before and after
  ``prepare_sites`` or ``prepare_study`` (``/proc/self/statm``) and the bytes of the pickled
  ``Sites`` or ``Study`` that are broadcast to every worker;
* after the phase, the peak resident memory (``VmHWM`` from ``/proc/<pid>/status``) of the
  client process (which also holds the scheduler and the nannies) and of each worker;
* the phase's wall time.

``--no-cluster`` skips the cluster run: one worker process (spawned) receives the pickled
``Sites`` (or ``Study``) and prepares the predictions' first chunk of 50,000 rows, as a prepare task does,
and prints its peak and what it held before the site layers arrived (at the 1M fields'
extent the cluster run's prepare phase takes minutes; this takes seconds).

``--whole-pieces`` makes the runner hold every piece (the code before the cell index; for
the study layers, the study area's union and every piece of both, as ``prepare_study`` made
them before), for the comparison. Not a timed test: a command whose output goes into docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import tempfile
import time
from pathlib import Path


def _statm_mib() -> float:
    """This process's resident memory now, MiB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mib() -> float:
    """This process's peak resident memory (``VmHWM``), MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _whole_study(options: object, equal_area_crs: object = None, store: object = None) -> object:
    """The study and training areas as ``prepare_study`` made them before the cell index: the
    union and every grid piece held (the lookups' pieces path is that code)."""
    import shapely

    from evalcore.config import DEFAULT_EQUAL_AREA_CRS
    from evalcore.crs import equal_area_crs_from
    from evalcore.sites import STUDY_AREA, TRAINING_AREA, grid_pieces, prepare_site_layer
    from evalcore.study import Study, StudyArea, TrainingArea

    layer = prepare_site_layer(options, STUDY_AREA, equal_area_crs)
    union = shapely.union_all(layer.geoms_ea)
    study_area = StudyArea(options.study_area_rule, union, grid_pieces(layer.geoms_ea), float(shapely.area(union)) / 1e6,
                           layer.n_input, layer.source)
    layer = prepare_site_layer(options, TRAINING_AREA, equal_area_crs)
    ea_crs = equal_area_crs_from(equal_area_crs if equal_area_crs is not None else DEFAULT_EQUAL_AREA_CRS)
    training = TrainingArea(grid_pieces(layer.geoms_ea), float(options.leakage_buffer_m), bool(options.exclude_training_area),
                            float(shapely.area(shapely.union_all(layer.geoms_ea))) / 1e6, layer.n_input, ea_crs, layer.source)
    return Study(study_area, training)


def _study_pieces(study: object) -> dict[str, int]:
    """Pieces of the study area and the training area (whole cells and boundary pieces)."""
    return {
        "study area": study.study_area.cells.n_pieces if study.study_area.cells is not None else len(study.study_area.pieces),
        "training area": study.training.cells.n_pieces if study.training.cells is not None else len(study.training.pieces),
    }


def _worker_probe(sites_path: str, data: str, queue: object) -> None:
    """In a fresh process: what a worker holds for the site (or study) layers while it prepares one chunk."""
    import pickle as pkl

    from evalcore.distributed.sources import LayerSource, plan_chunks, read_chunk
    from evalcore.prepare import prepare_layer

    source = LayerSource(str(Path(data) / "predicted.parquet"), None, "predicted")
    gdf = read_chunk(source, plan_chunks(source, 50_000)[0])
    base = _statm_mib()
    layers = pkl.loads(Path(sites_path).read_bytes())
    unpickled = _statm_mib() - base
    started = time.perf_counter()
    if hasattr(layers, "study_area"):
        prepare_layer(gdf, "predicted", study=layers)
    else:
        prepare_layer(gdf, "predicted", sites=layers)
    queue.put((base, unpickled, _statm_mib() - base, _peak_mib(), time.perf_counter() - started, len(gdf)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.site_memory", description=__doc__.splitlines()[0])
    parser.add_argument("data_dir")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-cluster", action="store_true", help="one spawned worker process prepares one chunk instead of the cluster's prepare phase")
    parser.add_argument("--whole-pieces", action="store_true", help="hold every grid piece on the client and the workers (before the cell index)")
    parser.add_argument("--layers", choices=("sites", "study"), default="sites",
                        help="the AOIs and annotated area (sites), or the study and training areas made of them (study)")
    args = parser.parse_args(argv)
    data = Path(args.data_dir).resolve()

    from distributed import Client

    from evalcore import levels
    from evalcore.distributed import runner
    from evalcore.distributed.cluster import local_cluster
    from evalcore.distributed.sources import LayerSource
    from evalcore import study as study_module
    from evalcore.options import check_options

    study = args.layers == "study"
    if study:
        options = check_options(study_area=str(data / "annotated.parquet"), study_area_rule="within",
                                training_area=str(data / "aoi.parquet"), leakage_buffer_m=100.0)
    else:
        options = check_options(aoi=str(data / "aoi.parquet"), aoi_id_column="aoi_id", annotated_area=str(data / "annotated.parquet"))
    work = Path(tempfile.mkdtemp(prefix="evalcore-sites-"))
    mode = "whole pieces" if args.whole_pieces else "cell index"
    try:
        before = _statm_mib()
        started = time.perf_counter()
        store = None if args.whole_pieces else work / "sites-probe"
        if study:
            sites = _whole_study(options, options.equal_area_crs) if args.whole_pieces else study_module.prepare_study(options, options.equal_area_crs, store)
        else:
            sites = levels.prepare_sites(options, options.equal_area_crs, store)
        prepared_s = time.perf_counter() - started
        held = _statm_mib() - before
        sent = len(pickle.dumps(sites, protocol=5))
        if study:
            n_pieces = _study_pieces(sites)
        else:
            n_pieces = {
                "AOI": sites.aois.cells.n_pieces if sites.aois.cells is not None else len(sites.aois.pieces),
                "annotated-area": sites.annotated.cells.n_pieces if sites.annotated.cells is not None else len(sites.annotated.pieces),
            }
        pieces_text = ", ".join(f"{n:,} {name} pieces" for name, n in n_pieces.items())
        what = "study layers" if study else "site layers"
        preparing = "prepare_study" if study else "prepare_sites"
        if args.no_cluster:
            import multiprocessing

            sites_path = work / "sites.pickle"
            sites_path.write_bytes(pickle.dumps(sites, protocol=5))
            del sites
            context = multiprocessing.get_context("spawn")
            queue = context.Queue()
            probe = context.Process(target=_worker_probe, args=(str(sites_path), str(data), queue))
            probe.start()
            base, unpickled, held_w, peak, chunk_s, n = queue.get()
            probe.join()
            print(f"{what} ({mode}): {pieces_text}")
            print(f"  {preparing} on the client: {prepared_s:.1f} s, {held:.0f} MiB held after it, {sent / 2**20:.1f} MiB pickled; "
                  f"client peak {_peak_mib():.0f} MiB")
            print(f"  a worker preparing {n:,} predictions: {base:.0f} MiB before the {what}, +{unpickled:.0f} MiB unpickling them, "
                  f"+{held_w:.0f} MiB after the chunk ({chunk_s:.1f} s), peak {peak:.0f} MiB")
            return 0
        del sites
        if args.whole_pieces and study:  # the runner as it was: the union and every piece prepared here and broadcast
            runner.prepare_study = _whole_study
        elif args.whole_pieces:
            runner.prepare_sites = lambda opts, crs, store=None: levels.prepare_sites(opts, crs)
        with local_cluster(args.workers, memory_limit=0) as cluster, Client(cluster) as client:
            setup = runner.start_run(
                LayerSource(str(data / "predicted.parquet"), None, "predicted"),
                LayerSource(str(data / "reference.parquet"), None, "reference"),
                options, work, strata_column="stratum",
            )
            started = time.perf_counter()
            runner.prepare_phase(client, setup)
            phase_s = time.perf_counter() - started
            workers = client.run(_peak_mib)
        print(f"{what} ({mode}): {pieces_text}")
        print(f"  {preparing} on the client: {prepared_s:.1f} s, {held:.0f} MiB held after it, {sent / 2**20:.1f} MiB pickled (sent to every worker)")
        print(f"  prepare phase: {phase_s:.1f} s; peak RSS: client {_peak_mib():.0f} MiB (with scheduler and nannies), "
              + ", ".join(f"worker {i} {mib:.0f} MiB" for i, mib in enumerate(sorted(workers.values()))))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

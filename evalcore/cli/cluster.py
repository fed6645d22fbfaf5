"""Starting or reaching the Dask cluster of ``evaluate --cluster`` and ``compare --cluster``.

``--cluster local`` starts a LocalCluster that lives as long as the command (its
dashboard on loopback unless ``--dashboard-address`` says otherwise);
``--cluster tcp://HOST:PORT`` connects to a running scheduler. A small
``evaluate --cluster local`` stays in this process instead (``--in-process-below``):
the numbers are the same, only the time differs.
"""

from __future__ import annotations

import argparse
import logging
import sys

from evalcore.cli.parser import metric_options
from evalcore.errors import EvalInputError
from evalcore.logs import PhaseProgress, library_level
from evalcore.outputs import OutputSet, claim_workdir

__all__ = ["compare_on_cluster", "dashboard_address", "evaluate_on_cluster", "small_enough_in_process"]


def dashboard_address(args: argparse.Namespace) -> str:
    """``--dashboard-address`` of a command that can start an embedded cluster, else the default (loopback).

    Raises
    ------
    EvalInputError
        When it is given but no embedded cluster is started: ``evaluate``/``compare``
        without ``--cluster local``, ``run`` with ``--cluster ADDRESS``.
    """
    from evalcore.distributed.cluster import DASHBOARD_ADDRESS

    given = getattr(args, "dashboard_address", None)
    if given is None:
        return DASHBOARD_ADDRESS
    embedded = args.cluster is None if args.command == "run" else args.cluster == "local"
    if not embedded:
        where = "--cluster local" if args.command != "run" else "no --cluster"
        raise EvalInputError(
            f"--dashboard-address is the dashboard of the cluster evalcore starts ({where}); "
            "an external scheduler's is set where it starts (dask scheduler --dashboard-address)."
        )
    return given


def small_enough_in_process(args: argparse.Namespace) -> bool:
    """Whether a ``--cluster local`` run goes in this process (``--in-process-below``); says so on standard error.

    Never for a scheduler address (the user chose that cluster), with ``--workdir`` (a
    work directory exists only on a cluster) or with ``--in-process-below 0``. The
    numbers are the same either way; only the time differs (docs/performance.md).
    """
    if args.cluster != "local" or args.workdir is not None or not args.in_process_below:
        return False
    from evalcore.distributed.sources import LayerSource, plan_chunks

    rows = sum(
        chunk.n_rows
        for path, layer, role in ((args.predicted, args.pred_layer, "predicted"), (args.reference, args.ref_layer, "reference"))
        for chunk in plan_chunks(LayerSource(path, layer, role))
    )
    if rows >= args.in_process_below:
        return False
    if not args.quiet:
        print(
            f"evaluating in this process: the layers hold {rows:,} rows, fewer than --in-process-below {args.in_process_below:,}, "
            "where one process is faster than starting a cluster (the numbers are the same); "
            "--in-process-below 0 starts the cluster anyway",
            file=sys.stderr,
            flush=True,
        )
    return True


def evaluate_on_cluster(args: argparse.Namespace, outputs: OutputSet) -> dict[str, object]:
    """Evaluate on the cluster of ``--cluster``; every output is written to its staged name in ``outputs``."""
    from concurrent.futures import ThreadPoolExecutor

    from distributed import Client

    from evalcore.distributed.cluster import local_cluster

    # Importing distributed sets its loggers to INFO again.
    logging.getLogger("distributed").setLevel(library_level())
    workers = 2 if args.workers is None else args.workers
    starting = None
    if args.cluster == "local":
        # The worker processes start (and import the engine, evalcore.distributed.warm)
        # while this process imports it: their start-up overlaps instead of adding up.
        # Task errors reach this process as exceptions, reported in one line: the
        # workers' own "Compute Failed" logs (with tracebacks) stay silent.
        pool = ThreadPoolExecutor(1, thread_name_prefix="evalcore-cluster-start")
        starting = pool.submit(local_cluster, workers, silence_logs=library_level(quiet=logging.CRITICAL),
                               dashboard_address=dashboard_address(args))
        pool.shutdown(wait=False)
    cluster = None
    try:
        from evalcore.api import check_options
        from evalcore.distributed.runner import run_distributed

        options = check_options(**metric_options(args))
        if starting is not None:
            cluster = starting.result()
            client = Client(cluster)
        elif args.cluster.startswith(("tcp://", "tls://")):
            try:
                client = Client(args.cluster, timeout="20s")
            except OSError as exc:
                raise EvalInputError(f"--cluster {args.cluster!r}: cannot reach the scheduler ({exc}).") from None
        else:
            raise EvalInputError(f"--cluster {args.cluster!r} must be 'local' or a scheduler address like tcp://127.0.0.1:8786.")
        if args.workdir is not None:
            claim_workdir(args.workdir)  # kept afterwards, for a resume: the user chose it
        staged = {
            dest: (outputs.directory(path, flag) if dest in ("frame_out", "predictions_out") else outputs.file(path)) if path is not None else None
            for dest, flag, path in (
                ("frame_out", "--frame-out", args.frame_out), ("predictions_out", "--predictions-out", args.predictions_out),
                ("tiles_out", "--tiles-out", args.tiles_out), ("aois_out", "--aois-out", args.aois_out),
                ("pr_curve_out", "--pr-curve-out", args.pr_curve_out),
            )
        }
        with client:
            print(f"Dask dashboard: {client.dashboard_link}", file=sys.stderr, flush=True)
            return run_distributed(
                args.predicted,
                args.reference,
                client,
                options,
                strata=args.strata_column,
                size_bins=args.size_bins,
                workdir=args.workdir,
                frame_dir=staged["frame_out"],
                pred_layer=args.pred_layer,
                ref_layer=args.ref_layer,
                progress=None if args.quiet else PhaseProgress(),  # a line per phase (evalcore.logs)
                ref_id_column=args.ref_id_column,
                pred_id_column=args.pred_id_column,
                tiles_out=staged["tiles_out"],
                aois_out=staged["aois_out"],
                predictions_dir=staged["predictions_out"],
                pr_curve_out=staged["pr_curve_out"],
            )
    finally:
        if cluster is None and starting is not None:
            try:  # a failure before the cluster was needed: close it once it is up
                cluster = starting.result()
            except Exception:  # noqa: BLE001  (the first error is the one to report)
                cluster = None
        if cluster is not None:
            cluster.close()


def compare_on_cluster(args: argparse.Namespace, options: dict, models: list[tuple[str, str]], baseline: str,
                       layers: dict[str, str | None], pair: bool) -> dict:
    """Compare the models on the cluster of ``--cluster``: the two-model form when ``pair``, else every model against ``baseline``."""
    from distributed import Client

    from evalcore.compare import compare_models_on_cluster, compare_on_cluster as compare_pair_on_cluster
    from evalcore.distributed.cluster import local_cluster

    logging.getLogger("distributed").setLevel(library_level())
    cluster = None
    try:
        if args.cluster == "local":
            cluster = local_cluster(args.workers, silence_logs=library_level(quiet=logging.CRITICAL), dashboard_address=dashboard_address(args))
            client = Client(cluster)
        elif args.cluster.startswith(("tcp://", "tls://")):
            client = Client(args.cluster, timeout="20s")
        else:
            raise EvalInputError(f"--cluster {args.cluster!r} must be 'local' or a scheduler address like tcp://127.0.0.1:8786.")
        with client:
            layers = {**layers, "reference": args.ref_layer}
            if pair:
                return compare_pair_on_cluster(models[0][1], models[1][1], args.reference, client, strata=args.strata_column,
                                               size_bins=args.size_bins, layers=layers, **options)
            return compare_models_on_cluster(dict(models), args.reference, client, baseline=baseline, strata=args.strata_column,
                                             size_bins=args.size_bins, layers=layers, **options)
    finally:
        if cluster is not None:
            cluster.close()

"""``evalcore evaluate``: one predicted layer against a reference, in this process or on a cluster.

Every check that needs no evaluation runs first (:mod:`evalcore.cli.checks`); every
output is staged and put in place only when all are whole (:class:`evalcore.outputs.OutputSet`).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from evalcore.cli.checks import (
    check_columns_up_front,
    check_evaluate_arguments,
    check_id_columns_up_front,
    check_read_columns,
    describe_layer,
    with_id_column,
)
from evalcore.cli.cluster import dashboard_address, evaluate_on_cluster, small_enough_in_process
from evalcore.cli.parser import metric_options
from evalcore.cli.text import format_summary
from evalcore.outputs import OutputSet

__all__ = ["evaluate_command"]


def evaluate_command(args: argparse.Namespace) -> int:
    """``evalcore evaluate``: write metrics.json and the tables asked for; print the summary unless ``-q``."""
    from evalcore.api import evaluate_tables
    from evalcore.engine.tables import output_table
    from evalcore.io import read_layer
    from evalcore.writers import write_table

    started = time.perf_counter()
    check_evaluate_arguments(args)  # before any file is read
    dashboard_address(args)
    if args.cluster:
        check_columns_up_front(args)
        check_id_columns_up_front(args)
    if args.cluster and not small_enough_in_process(args):
        with OutputSet() as outputs:
            metrics = evaluate_on_cluster(args, outputs)
            _finish(args, metrics, started, outputs)
        return 0
    reference = read_layer(args.reference, layer=args.ref_layer, role="reference")
    predicted = read_layer(args.predicted, layer=args.pred_layer, role="predicted")
    check_read_columns(args, reference, predicted)
    reference = with_id_column(reference, args.ref_id_column, "--ref-id-column", describe_layer(args.reference, args.ref_layer, "reference"))
    predicted = with_id_column(predicted, args.pred_id_column, "--pred-id-column", describe_layer(args.predicted, args.pred_layer, "predicted"))
    tables = evaluate_tables(
        predicted,
        reference,
        strata=args.strata_column,
        size_bins=args.size_bins,
        **metric_options(args),
    )
    # Every output is staged and renamed into place only when all are whole: a failure
    # (a full disk, say) leaves the earlier outputs as they were (evalcore.outputs).
    with OutputSet() as outputs:
        for path, frame, flag, kind in (
            (args.frame_out, tables.fields, "--frame-out", "fields"),
            (args.predictions_out, tables.predictions, "--predictions-out", "predictions"),
        ):
            if path is None:
                continue
            # The layer's id as a named column users can join on, the other layer's ids named for what they are.
            table = output_table(frame, kind, ref_id_column=args.ref_id_column, pred_id_column=args.pred_id_column)
            is_dir = path.endswith(("/", os.sep)) or Path(path).is_dir()
            target = outputs.directory(path, flag) / "part-0.parquet" if is_dir else outputs.file(path)
            write_table(target, table, flag)
        if args.tiles_out is not None:
            write_table(outputs.file(args.tiles_out), tables.tiles, "--tiles-out")
        if args.aois_out is not None:
            write_table(outputs.file(args.aois_out), tables.aois, "--aois-out")
        if args.pr_curve_out is not None:
            from evalcore.writers import atomic_path

            atomic_path(outputs.file(args.pr_curve_out), lambda tmp: tables.pr_curve.to_parquet(tmp, index=False))
        _finish(args, tables.summary, started, outputs)
    return 0


def _finish(args: argparse.Namespace, metrics: dict[str, object], started: float, outputs: OutputSet) -> None:
    """Write metrics.json beside the staged outputs, put them all in place, print the summary."""
    from evalcore.writers import write_json

    write_json(outputs.file(args.output), metrics)
    outputs.commit()
    if not args.quiet:
        print(format_summary(metrics))
        outputs = [args.output] + [p for p in (args.frame_out, args.tiles_out, args.aois_out, args.predictions_out, args.pr_curve_out) if p]
        shown = ", ".join(outputs[:-1]) + " and " + outputs[-1] if len(outputs) > 1 else outputs[0]
        print(f"wrote {shown} in {time.perf_counter() - started:.1f} s")

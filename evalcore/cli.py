"""The ``evalcore`` command line.

``evalcore evaluate`` compares two layer files and writes the metrics as JSON;
``evalcore synth`` writes a generated dataset. Every user error (a bad argument, a
missing, unreadable or corrupt file, a bad column, an output path that cannot be
written) ends with exit status 2 and one line on standard error naming the path,
argument, row or column; no output file is left behind. Anything else that goes wrong
ends with exit status 1 and one line (``EVALCORE_DEBUG=1`` shows the traceback).
Arguments, columns and output locations are checked before any evaluation starts
(docs/reliability.md).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from evalcore.errors import EvalInputError
from evalcore.logs import DEBUG_ENV, configure_logging, debug_enabled, library_level
from evalcore.metrics.registry import FAMILIES
from evalcore.metrics.base import Option
from evalcore.options import all_options
from evalcore.present import LOWER, better_of, interval_text, number
from evalcore.outputs import OutputSet, check_new_directory, check_not_inputs, check_replaceable_directory, claim_workdir

__all__ = ["main", "run", "format_summary", "unassigned_note", "metric_options", "check_output_dir", "check_columns_up_front", "check_site_layers", "level_lines"]

EXIT_USAGE = 2
EXIT_FAILURE = 1

class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        # main() prefixes "evalcore: error:"; the subcommand is named once, after it.
        command = self.prog.removeprefix("evalcore").strip()
        raise _UsageError(f"{command + ': ' if command else ''}{message}")


def _size_bins(text: str) -> object:
    """``auto`` or at least two strictly increasing, non-negative edges in hectares (checked before any file is read)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        edges = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 'auto' or comma-separated hectares like 0,0.5,1,inf") from None
    if len(edges) < 2 or any(math.isnan(e) for e in edges) or edges[0] < 0 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected at least two strictly increasing edges in hectares, from 0 or more (e.g. 0,0.5,1,2,5,10,inf)"
        )
    return edges


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"a label is KEY=VALUE, got {text!r}")
    return key.strip(), value


def _option_type(option: Option) -> Callable[[str], object]:
    def parse(text: str) -> object:
        try:
            return option.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = option.name  # argparse names the type in its message
    return parse


def _add_option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per evaluation option (:func:`evalcore.options.all_options`), help and default from it."""
    for option in all_options():
        default = option.cli_default if option.cli_default is not None else option.default
        if option.annotation is bool:  # a switch: the flag alone turns it on
            parser.add_argument(option.cli_flag, dest=option.name, action="store_true", default=default, help=option.help.replace("%", "%%"))
            continue
        parser.add_argument(
            option.cli_flag,
            dest=option.name,
            type=_option_type(option),
            default=default,
            choices=option.choices,
            metavar=None if option.choices else option.cli_flag.lstrip("-").upper().replace("-", "_"),
            help=option.help.replace("%", "%%"),
        )


def metric_options(args: argparse.Namespace) -> dict[str, object]:
    """The evaluation options given on the command line, as keyword arguments of :func:`check_options`."""
    out = {}
    for option in all_options():
        value = getattr(args, option.name)
        out[option.name] = option.to_option(value) if option.to_option is not None else value
    return out


IN_PROCESS_BELOW_ROWS = 200_000
"""Default of ``--in-process-below``: below this many rows (both layers) a ``--cluster local``
run of 2 workers on 2 cores was slower than one process (measured, docs/performance.md)."""


def _row_count(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of rows, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _dashboard_address(text: str) -> str:
    from evalcore.distributed.cluster import check_dashboard_address

    try:
        return check_dashboard_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_dashboard_argument(parser: argparse.ArgumentParser, *, default: str | None) -> None:
    """``--dashboard-address`` of the commands that start an embedded cluster."""
    parser.add_argument(
        "--dashboard-address", type=_dashboard_address, default=default, metavar="HOST:PORT",
        help="where the embedded cluster's Dask dashboard listens; 0.0.0.0:8787 or :8787 open it to every machine that "
        "reaches this one (it has no login) (default 127.0.0.1:0: this machine only, a free port)",
    )


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


def _add_layer_arguments(parser: argparse.ArgumentParser) -> None:
    """The inputs, shared by ``evaluate`` and ``run``."""
    parser.add_argument("-p", "--predicted", required=True, help="predicted layer: any file pyogrio reads (GeoPackage, GeoParquet, FlatGeobuf, Shapefile, GeoJSON) or a directory of GeoParquet parts")
    parser.add_argument("-r", "--reference", required=True, help="reference layer, as for --predicted")
    parser.add_argument("--pred-layer", help="layer name inside the predicted file (default: its only layer)")
    parser.add_argument("--ref-layer", help="layer name inside the reference file (default: its only layer)")
    parser.add_argument("--strata-column", help="reference column holding the stratum of each field (default: no strata)")
    parser.add_argument("--size-bins", type=_size_bins, help="field-size classes: 'auto' or edges in hectares, e.g. 0,0.5,1,2,5,10,inf (default: none)")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="evalcore", description="Object-level evaluation of predicted polygons against a reference layer.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ev = sub.add_parser("evaluate", help="evaluate a predicted layer against a reference layer")
    _add_layer_arguments(ev)
    ev.add_argument("--ref-id-column", help="reference column of field ids, kept as the per-field table's id column (default: the layer's index, as column ref_index)")
    ev.add_argument("--pred-id-column", help="predicted column of ids, used for the matched prediction columns of the per-field table (default: the layer's index)")
    _add_option_flags(ev)
    ev.add_argument(
        "--frame-out",
        help="write the per-field table: the suffix names the format (.parquet GeoParquet, .gpkg GeoPackage, .fgb FlatGeobuf); "
        "a path ending with / is a directory of GeoParquet parts (the only form with --cluster) (default: not written)",
    )
    ev.add_argument("--pr-curve-out", help="write the exact precision-recall curves as Parquet (needs --score-column) (default: not written)")
    ev.add_argument("--tiles-out", help="write the per-tile table (GeoParquet .parquet, .gpkg or .fgb; tile squares in EPSG:4326) (default: not written)")
    ev.add_argument("--aois-out", help="write the per-AOI table with every AOI's polygon (needs --aoi; format by suffix) (default: not written)")
    ev.add_argument(
        "--predictions-out",
        help="write the per-prediction table (format by suffix; a path ending with / is a directory of GeoParquet parts, "
        "the only form with --cluster) (default: not written)",
    )
    ev.add_argument(
        "--cluster",
        help="run on Dask: 'local' starts a LocalCluster, tcp://HOST:PORT connects to a running scheduler (default: in this process)",
    )
    ev.add_argument("--workers", type=int, help="worker processes of --cluster local (default 2)")
    _add_dashboard_argument(ev, default=None)
    ev.add_argument(
        "--in-process-below",
        type=_row_count,
        default=IN_PROCESS_BELOW_ROWS,
        metavar="ROWS",
        help="with --cluster local, evaluate in this process instead when the two layers hold fewer rows together "
        "(the same numbers, faster: a cluster's start costs more than it saves on small layers, docs/performance.md); "
        f"0 always starts the cluster (default {IN_PROCESS_BELOW_ROWS:,})",
    )
    ev.add_argument("--workdir", help="work directory of a --cluster run; keep it to resume an interrupted run (default: a temporary one)")
    ev.add_argument("-o", "--output", required=True, help="metrics JSON file to write (its directory must exist)")
    ev.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    ev.add_argument("-v", "--verbose", action="count", default=0, help="more log lines (-v: evalcore's progress, -vv: also Dask's)")

    rn = sub.add_parser("run", help="run the Prefect flow evaluate-layers (Dask cluster, run directory with report and manifest)")
    _add_layer_arguments(rn)
    _add_option_flags(rn)
    rn.add_argument("--cluster", help="Dask scheduler address tcp://HOST:PORT (default: an embedded LocalCluster)")
    rn.add_argument("--workers", type=int, default=2, help="worker processes of the embedded LocalCluster (default 2)")
    _add_dashboard_argument(rn, default=None)
    rn.add_argument("--workdir", help="work directory; keep it to resume an interrupted run (default: RUN_DIR/work, removed after success)")
    rn.add_argument("-o", "--output-dir", required=True, help="run directory: metrics.json, report.md, manifest.json, fields/ (its parent must exist)")
    rn.add_argument("-v", "--verbose", action="count", default=0, help="more log lines (-v: every partition, -vv: also Prefect's and Dask's); the run directory keeps the whole log")
    rn.add_argument(
        "--label", action="append", type=_label, default=[], metavar="KEY=VALUE",
        help="a label of the run written into evaluation-contract.json (model hash, imagery source ...); repeatable (default: none)",
    )
    rn.add_argument("--gates", help="acceptance gates file (YAML): acceptance-gates.json in the run directory; exit 1 when a gate fails, 3 when one is not evaluable (default: none)")

    cp = sub.add_parser(
        "compare", help="compare prediction layers (models) against one reference on the same resamples: a table and paired deltas"
    )
    cp.add_argument(
        "-p", "--predicted", "--candidate", dest="predicted", action="append", required=True, type=_named_layer, metavar="NAME=PATH",
        help="a model's prediction layer, named (repeat for every model: -p A=a.parquet -p B=b.gpkg); a bare PATH is named "
        "by itself; with -i, the one candidate",
    )
    cp.add_argument(
        "-i", "--incumbent",
        help="the two-model form -p CANDIDATE -i INCUMBENT: the candidate − incumbent delta layout (default: the NAME=PATH form)",
    )
    cp.add_argument("--baseline", metavar="NAME", help="the model every other one is compared with (default: the first -p)")
    cp.add_argument("-r", "--reference", required=True, help="reference layer (read and prepared once)")
    cp.add_argument(
        "--pred-layer", action="append", default=[], type=_named_layer, metavar="NAME=LAYER",
        help="layer name inside a model's file, repeatable (default: its only layer)",
    )
    cp.add_argument("--candidate-layer", help="with -i: layer name inside the candidate file (default: its only layer)")
    cp.add_argument("--incumbent-layer", help="with -i: layer name inside the incumbent file (default: its only layer)")
    cp.add_argument("--ref-layer", help="layer name inside the reference file (default: its only layer)")
    cp.add_argument("--strata-column", help="reference column holding the stratum of each field (default: no strata)")
    cp.add_argument("--size-bins", type=_size_bins, help="field-size classes: 'auto' or edges in hectares (default: none)")
    _add_option_flags(cp)
    cp.add_argument("--cluster", help="run on Dask: 'local' starts a LocalCluster, tcp://HOST:PORT connects to a running scheduler (default: in this process)")
    cp.add_argument("--workers", type=int, default=2, help="worker processes of --cluster local (default 2)")
    _add_dashboard_argument(cp, default=None)
    cp.add_argument("-o", "--output", required=True, help="delta JSON file to write (its directory must exist)")
    cp.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    cp.add_argument("-v", "--verbose", action="count", default=0, help="more log lines")

    gt = sub.add_parser("gate", help="check a run directory's metrics against acceptance gates (exit 0 pass, 1 fail, 3 not evaluable)")
    gt.add_argument("run_dir", help="a run directory (holding metrics.json)")
    gt.add_argument("gates", help="the gates file (YAML, deploy/gates.example.yaml)")
    gt.add_argument("-q", "--quiet", action="store_true", help="do not print the gate table")
    gt.add_argument("-v", "--verbose", action="count", default=0, help="more log lines")

    rp = sub.add_parser("report", help="rebuild report.html (and figures/) of a run directory from its files alone")
    rp.add_argument("run_dir", help="a run directory (holding metrics.json)")
    rp.add_argument("-v", "--verbose", action="count", default=0, help="more log lines")

    vf = sub.add_parser("verify", help="account for every file of a run directory with its evidence manifests and recheck its inputs (exit 0 intact, 1 not intact)")
    vf.add_argument("run_dir", help="a run directory (holding evidence-manifest.json)")
    vf.add_argument("--skip-inputs", action="store_true", help="do not rehash the input layers (default: rehash those still at their path)")
    vf.add_argument("--expect-sha256", metavar="SHA256", help="the SHA-256 of evidence-manifest.json you stored when the run was sealed (verify prints it): another one is a failure")
    vf.add_argument("-v", "--verbose", action="count", default=0, help="more log lines")

    sy = sub.add_parser("synth", help="write a generated multi-zone dataset")
    sy.add_argument("--n-ref", type=int, required=True, help="number of reference fields")
    sy.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sy.add_argument("--out", required=True, help="output directory, new or empty (its parent must exist)")
    sy.add_argument("--force", action="store_true", help="write into a non-empty --out, replacing the layer files synth writes (other files are left alone)")
    sy.add_argument("--format", choices=("parquet", "gpkg"), default="parquet", help="file format (default parquet)")
    sy.add_argument("--score-decimals", type=int, help="round the predictions' scores to this many decimals, as detectors often do (default: not rounded)")
    return parser


def _fmt(value: object, digits: int = 3) -> str:
    return number(value, digits)


def format_summary(metrics: dict[str, object]) -> str:
    """A short readable summary of a metrics dict (a few lines of text).

    Every registered family's lines come first (:meth:`MetricFamily.summary_lines`, in
    registry order), then the run's own lines: dropped rows, groups, pixels, levels.
    """
    lines = [line for family in FAMILIES for line in family.summary_lines(metrics)]
    lines.append(
        f"dropped: reference {metrics['count_reference_dropped']}, predicted {metrics['count_predicted_dropped']};  "
        f"repaired: reference {metrics['count_reference_repaired']}, predicted {metrics['count_predicted_repaired']};  "
        f"UTM zones {', '.join(str(c) for c in metrics['utm_epsg_codes'])}"
    )
    for group_key, title in (("per_stratum", "stratum"), ("per_size_class", "size class (ha)")):
        groups = metrics.get(group_key)
        if not groups:
            continue
        width = max(len(title), *(len(str(k)) for k in groups))
        lines.append(f"{title:<{width}}  {'n':>7}  {'precision':>9}  {'recall':>7}  {'F1':>6}  {'mean IoU':>8}")
        for name, g in groups.items():
            iou = _fmt(g["iou_mean"]) if g["count_tp"] else "n/a"
            lines.append(
                f"{name:<{width}}  {g['count_reference']:>7}  {_fmt(g['precision']):>9}  {_fmt(g['recall']):>7}  "
                f"{_fmt(g['f1']):>6}  {iou:>8}"
            )
    px = metrics.get("pixel")
    if px:
        micro, bf = px["micro"], px["boundary_f1"]
        lines.append(
            f"pixels at {px['gsd_m']:g} m: {px['count_pixels']} evaluated;  F1 (Dice) {_fmt(micro['f1'])}  IoU {_fmt(micro['iou'])}  "
            f"MCC {_fmt(micro['mcc'])};  boundary F1 within {bf['tolerance_px']} px {_fmt(bf['f1'])}"
        )
    lines.extend(level_lines(metrics))
    lines.extend(study_lines(metrics))
    note = unassigned_note(metrics)
    if note:
        lines.append(note)
    lines.extend(f"warning: {w['message']}" for w in metrics.get("warnings") or ())
    return "\n".join(lines)


def study_lines(metrics: dict[str, object]) -> list[str]:
    """The study area's and the leakage audit's line, when they were asked for."""
    lines = []
    study = metrics.get("study_area")
    if study:
        lines.append(
            f"study area ({study['rule']}, {_fmt(study['area_km2'], 1)} km²): left out {metrics.get('count_reference_outside_study_area')} "
            f"reference fields and {metrics.get('count_predicted_outside_study_area')} predictions"
        )
    leak = metrics.get("leakage")
    if leak:
        lines.append(
            f"training area within {leak['buffer_m']:g} m: {leak['count_reference_within_buffer']} reference fields "
            f"({_fmt(leak['fraction'])} of those audited) and {leak['count_predicted_within_buffer']} predictions"
            + ("; excluded from the evaluation" if leak.get("excluded") else "")
        )
    return lines


def _worst_text(worst: dict | None) -> str:
    if not worst or worst.get("f1") is None:
        return "none with enough support"
    w = worst["f1"]
    return f"{w['group']} (F1 {_fmt(w['value'])}, {w['support']} fields)"


def level_lines(metrics: dict[str, object]) -> list[str]:
    """The tile and AOI summary and the worst groups, a line each."""
    lines = []
    tiles = metrics.get("tiles")
    if tiles:
        macro = tiles["macro"]["f1"]
        lines.append(
            f"tiles of {tiles['tile_km']:g} km: {tiles['count_tiles']} ({tiles['count_tiles_without_reference']} without reference fields);  "
            f"F1 micro {_fmt(tiles['micro']['f1'])}, macro {_fmt(macro['value'])} over {macro['n_units']} tiles, "
            f"p10 {_fmt(tiles['quantiles']['f1']['p10'])};  worst tile {_worst_text(tiles['worst'])}"
        )
    aois = metrics.get("aois")
    if aois:
        macro = aois["macro"]["f1"]
        lines.append(
            f"AOIs: {aois['count_aois']} ({aois['count_aois_with_reference']} with reference fields);  F1 micro {_fmt(aois['micro']['f1'])}, "
            f"macro {_fmt(macro['value'])} over {macro['n_units']};  worst AOI {_worst_text(aois['worst'])}"
        )
    for grouping, worst in (metrics.get("worst") or {}).items():
        name = "stratum" if grouping == "per_stratum" else "size class"
        lines.append(f"worst {name}: {_worst_text(worst)}")
    return lines


def unassigned_note(metrics: dict[str, object]) -> str | None:
    """The sentence that explains a group precision above the overall one, where it can happen."""
    n = metrics.get("count_fp_unassigned", 0)
    if not n or not (metrics.get("per_stratum") or metrics.get("per_size_class")):
        return None
    return (
        f"note: {n} false positives overlap no reference field, so they belong to no stratum or size class: they lower "
        "the overall precision but no group's, and a group's precision can be above the overall one."
    )


def _frame_out_kind(args: argparse.Namespace) -> str | None:
    """``"dir"`` (a directory of parts), ``"file"`` (one table in the format of its suffix) or None.

    With ``--cluster`` a path without a suffix names a directory of parts too.
    """
    path = args.frame_out
    if path is not None and args.cluster and not Path(path).suffix and not path.endswith(("/", os.sep)):
        return "dir"
    return _table_out_kind(args, "frame_out", "--frame-out", "per-field")


def _check_evaluate_arguments(args: argparse.Namespace) -> str | None:
    """Every check of ``evaluate`` that needs no data: options, silent no-ops, outputs. Returns the frame-out kind."""
    from evalcore.options import check_options

    check_options(**metric_options(args))
    if not args.cluster:
        given = [flag for flag, value in (("--workers", args.workers), ("--workdir", args.workdir)) if value is not None]
        if given:
            raise EvalInputError(
                f"{' and '.join(given)} {'applies' if len(given) == 1 else 'apply'} only to a Dask run: add --cluster local (or --cluster tcp://HOST:PORT), "
                "or leave them out to evaluate in this process."
            )
    if args.workers is not None and args.workers < 1:
        raise EvalInputError(f"--workers must be at least 1, but got {args.workers}.")
    kind = _frame_out_kind(args)
    pred_kind = _table_out_kind(args, "predictions_out", "--predictions-out", "per-prediction")
    _check_output_file(args.output, "-o/--output")
    if kind == "dir":
        check_output_dir(args.frame_out, "--frame-out")
        check_replaceable_directory(args.frame_out, "--frame-out")
    elif kind == "file":
        _check_output_file(args.frame_out, "--frame-out")
    if pred_kind == "dir":
        check_output_dir(args.predictions_out, "--predictions-out")
        check_replaceable_directory(args.predictions_out, "--predictions-out")
    elif pred_kind == "file":
        _check_output_file(args.predictions_out, "--predictions-out")
    if args.pr_curve_out is not None and args.score_column is None:
        raise EvalInputError("--pr-curve-out needs scores: add --score-column C.")
    if args.pr_curve_out is not None:
        _check_output_file(args.pr_curve_out, "--pr-curve-out")
    if args.aois_out is not None and args.aoi is None:
        raise EvalInputError("--aois-out needs an AOI layer: add --aoi PATH --aoi-id-column C.")
    for flag, path in (("--tiles-out", args.tiles_out), ("--aois-out", args.aois_out)):
        if path is not None:
            from evalcore.io import table_format

            table_format(path, flag)
            _check_output_file(path, flag)
    if args.workdir:
        check_output_dir(args.workdir, "--workdir")
    check_not_inputs(
        {"-p/--predicted": args.predicted, "-r/--reference": args.reference, "--aoi": args.aoi, "--annotated-area": args.annotated_area,
         "--study-area": getattr(args, "study_area", None), "--training-area": getattr(args, "training_area", None)},
        {"-o/--output": args.output, "--frame-out": args.frame_out, "--workdir": args.workdir, "--tiles-out": args.tiles_out,
         "--aois-out": args.aois_out, "--predictions-out": args.predictions_out, "--pr-curve-out": args.pr_curve_out},
        directories={"--workdir"} | ({"--frame-out"} if kind == "dir" else set()) | ({"--predictions-out"} if pred_kind == "dir" else set()),
    )
    check_site_layers(args)
    return kind


def check_site_layers(args: argparse.Namespace) -> None:
    """Read and prepare the AOI, annotated-area, study-area and training-area layers now, so that a bad one fails before any work."""
    from evalcore.sites import SITE_LAYERS, check_site_layers as check_layers

    if all(getattr(args, kind.option, None) is None for kind in SITE_LAYERS):
        return
    from evalcore.options import check_options

    options = check_options(**metric_options(args))
    check_layers(options, options.equal_area_crs)


def _table_out_kind(args: argparse.Namespace, dest: str, flag: str, what: str) -> str | None:
    """``"dir"``, ``"file"`` or None for a table output that may be a directory of parts."""
    path = getattr(args, dest)
    if path is None:
        return None
    from evalcore.io import table_format

    is_dir = path.endswith(("/", os.sep)) or Path(path).is_dir()
    if args.cluster and not is_dir:
        raise EvalInputError(
            f"{flag} {path!r}: with --cluster the {what} table is written as a directory of GeoParquet parts, "
            f"one per partition; give a directory, e.g. {str(Path(path).with_suffix('')) + '/'!r}."
        )
    if is_dir:
        return "dir"
    table_format(path, flag)
    return "file"


def _with_id_column(frame: object, column: str | None, option: str, where: str) -> object:
    """The layer indexed by its id column (checked by :func:`evalcore.sites.layer_ids`)."""
    if column is None:
        return frame
    from evalcore.sites import layer_ids

    layer_ids(frame, column, option, where)
    return frame.set_index(column, drop=False)


def _check_id_columns_up_front(args: argparse.Namespace) -> None:
    """For runs that read layers on workers: the id columns exist and hold unique ids (reads only those columns)."""
    from evalcore.io import geometry_column_names, layer_columns, read_columns
    from evalcore.sites import check_id_column, check_ids

    for option, column, path, layer, role in (
        ("--ref-id-column", args.ref_id_column, args.reference, args.ref_layer, "reference"),
        ("--pred-id-column", args.pred_id_column, args.predicted, args.pred_layer, "predicted"),
    ):
        if column is None:
            continue
        where = _where(path, layer, role)
        columns = list(layer_columns(path, layer=layer, role=role))
        geometry = geometry_column_names(path, layer=layer, role=role) if column not in columns else ()
        check_id_column(column, columns, option, where, geometry)
        check_ids(read_columns(path, [column], layer=layer, role=role)[column], column, option, where)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from evalcore.api import evaluate_tables
    from evalcore.io import read_layer, write_table

    started = time.perf_counter()
    kind = _check_evaluate_arguments(args)  # before any file is read
    dashboard_address(args)
    if args.cluster:
        check_columns_up_front(args)
        _check_id_columns_up_front(args)
    if args.cluster and not _small_enough_in_process(args):
        with OutputSet() as outputs:
            metrics = _evaluate_on_cluster(args, outputs)
            _finish(args, metrics, started, outputs)
        return 0
    reference = read_layer(args.reference, layer=args.ref_layer, role="reference")
    predicted = read_layer(args.predicted, layer=args.pred_layer, role="predicted")
    if args.strata_column is not None and args.strata_column == reference.geometry.name:
        _refuse_geometry_column("--strata-column", args.strata_column, _where(args.reference, args.ref_layer, "reference"),
                                [str(c) for c in reference.columns if c != reference.geometry.name])
    if args.strata_column is not None and args.strata_column not in reference.columns:
        columns = ", ".join(repr(c) for c in reference.columns if c != reference.geometry.name)
        raise EvalInputError(
            f"--strata-column {args.strata_column!r} is not a column of the reference file "
            f"{args.reference!r}; its columns are: {columns or '(none)'}."
        )
    if args.score_column is not None:
        where = _where(args.predicted, args.pred_layer, "predicted")
        columns = [str(c) for c in predicted.columns if c != predicted.geometry.name]
        _check_score_column(predicted[args.score_column] if args.score_column in columns else None, args.score_column, where, columns)
    reference = _with_id_column(reference, args.ref_id_column, "--ref-id-column", _where(args.reference, args.ref_layer, "reference"))
    predicted = _with_id_column(predicted, args.pred_id_column, "--pred-id-column", _where(args.predicted, args.pred_layer, "predicted"))
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
        for path, frame, flag, id_name in (
            (args.frame_out, tables.fields, "--frame-out", args.ref_id_column or "ref_index"),
            (args.predictions_out, tables.predictions, "--predictions-out", args.pred_id_column or "pred_index"),
        ):
            if path is None:
                continue
            # The layer's id as a named column users can join on (the index has no name in a file).
            table = frame.drop(columns=[id_name], errors="ignore").rename_axis(id_name).reset_index()
            is_dir = path.endswith(("/", os.sep)) or Path(path).is_dir()
            target = outputs.directory(path, flag) / "part-0.parquet" if is_dir else outputs.file(path)
            write_table(target, table, flag)
        if args.tiles_out is not None:
            write_table(outputs.file(args.tiles_out), tables.tiles, "--tiles-out")
        if args.aois_out is not None:
            write_table(outputs.file(args.aois_out), tables.aois, "--aois-out")
        if args.pr_curve_out is not None:
            from evalcore.io import atomic_path

            atomic_path(outputs.file(args.pr_curve_out), lambda tmp: tables.pr_curve.to_parquet(tmp, index=False))
        _finish(args, tables.summary, started, outputs)
    return 0


# --------------------------------------------------------------------------- checks made before any work


def _where(path: str, layer: str | None, role: str) -> str:
    from evalcore.io import describe_source

    return describe_source(path, layer, role)


def _writable(directory: Path) -> bool:
    """Whether this process can create a file in ``directory`` (a seam for tests).

    Tried for real: ``os.access`` says yes to root in ``/proc``, where creating fails.
    """
    if not os.access(directory, os.W_OK | os.X_OK):
        return False
    try:
        fd, probe = tempfile.mkstemp(prefix=".evalcore-write-probe-", dir=directory)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


def _check_directory_writable(directory: Path, path: str, option: str) -> None:
    if not directory.exists():
        raise EvalInputError(
            f"{option} {path!r}: the directory {str(directory)!r} does not exist; create it first (evalcore does not create "
            "missing parent directories)."
        )
    if not directory.is_dir():
        raise EvalInputError(f"{option} {path!r}: {str(directory)!r} is a file, not a directory; choose another path.")
    if not _writable(directory):
        raise EvalInputError(
            f"{option} {path!r}: the directory {str(directory)!r} is not writable by this user; "
            "choose another location or fix its permissions."
        )


def _check_output_file(path: str, option: str) -> None:
    """An output file path: not a directory, in an existing directory this process can write in."""
    p = Path(path)
    if p.is_dir() or path.endswith(("/", os.sep)):
        raise EvalInputError(f"{option} {path!r} is a directory; give a file name, e.g. {str(p / 'metrics.json')!r}.")
    _check_directory_writable(p.parent if str(p.parent) else Path("."), path, option)


def check_output_dir(path: str, option: str) -> None:
    """An output directory: not a file; writable, or creatable in an existing writable directory."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise EvalInputError(f"{option} {path!r} is a file, not a directory; give a directory.")
    _check_directory_writable(p if p.is_dir() else p.parent, path, option)


def _check_score_column(values: object, column: str, where: str, columns: list[str]) -> None:
    """Scores must exist and be finite numbers in [0, 1] (:func:`evalcore.metrics.scores.score_values`)."""
    import pandas as pd

    from evalcore.metrics.scores import score_values

    if values is None:  # only the header was read: the column names, not their types
        shown = ", ".join(repr(c) for c in columns) or "(none)"
        raise EvalInputError(f"--score-column {column!r} is not a column of the {where}; its columns are: {shown}.")
    score_values(pd.DataFrame({column: values}), column, where, label="--score-column")


def _refuse_geometry_column(flag: str, column: str, where: str, columns: list[str]) -> None:
    """A flag that names the geometry column: its WKT would become the group keys."""
    shown = ", ".join(repr(c) for c in columns) or "(none)"
    raise EvalInputError(f"{flag} {column!r} is the geometry column of the {where}, not an attribute; choose one of: {shown}.")


def _plain(value: object) -> object:
    """A numpy scalar as the Python value it holds (so messages show ``1.5``, not ``np.float64(1.5)``)."""
    return value.item() if hasattr(value, "item") else value


def check_columns_up_front(args: argparse.Namespace) -> None:
    """For runs that read layers on workers: check the files' headers, strata and score columns first.

    Reads only the headers, and the score column's values when one is named.
    """
    from evalcore.io import layer_columns, read_columns

    ref_columns = layer_columns(args.reference, layer=args.ref_layer, role="reference")
    pred_columns = layer_columns(args.predicted, layer=args.pred_layer, role="predicted")
    if args.strata_column is not None and args.strata_column not in ref_columns:
        from evalcore.io import geometry_column_names

        if args.strata_column in geometry_column_names(args.reference, layer=args.ref_layer, role="reference"):
            _refuse_geometry_column("--strata-column", args.strata_column, _where(args.reference, args.ref_layer, "reference"), list(ref_columns))
        shown = ", ".join(repr(c) for c in ref_columns) or "(none)"
        raise EvalInputError(
            f"--strata-column {args.strata_column!r} is not a column of the reference file {args.reference!r}; "
            f"its columns are: {shown}."
        )
    if args.score_column is not None:
        where = _where(args.predicted, args.pred_layer, "predicted")
        values = None
        if args.score_column in pred_columns:
            values = read_columns(args.predicted, [args.score_column], layer=args.pred_layer, role="predicted")[args.score_column]
        _check_score_column(values, args.score_column, where, list(pred_columns))


def _finish(args: argparse.Namespace, metrics: dict[str, object], started: float, outputs: OutputSet) -> None:
    """Write metrics.json beside the staged outputs, put them all in place, print the summary."""
    from evalcore.io import write_json

    write_json(outputs.file(args.output), metrics)
    outputs.commit()
    if not args.quiet:
        print(format_summary(metrics))
        outputs = [args.output] + [p for p in (args.frame_out, args.tiles_out, args.aois_out, args.predictions_out, args.pr_curve_out) if p]
        shown = ", ".join(outputs[:-1]) + " and " + outputs[-1] if len(outputs) > 1 else outputs[0]
        print(f"wrote {shown} in {time.perf_counter() - started:.1f} s")


def _progress_bar(phase: str, done: int, total: int) -> None:
    """A progress bar over partitions on standard error (a line per 10 % when not a terminal)."""
    width = 30
    filled = width * done // total if total else width
    text = f"{phase:<8} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} partitions"
    if sys.stderr.isatty():
        print("\r" + text, end="\n" if done == total else "", file=sys.stderr, flush=True)
    elif done == total or (total and (10 * done // total) != (10 * (done - 1) // total)):
        print(text, file=sys.stderr, flush=True)


def _small_enough_in_process(args: argparse.Namespace) -> bool:
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


def _evaluate_on_cluster(args: argparse.Namespace, outputs: OutputSet) -> dict[str, object]:
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
                progress=None if args.quiet else _progress_bar,
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


def _cmd_run(args: argparse.Namespace) -> int:
    """``evalcore run``: the Prefect flow, found through the ``evalcore.commands`` entry point.

    The flows package builds on the engine, never the other way round: the engine finds
    the command the flows package registers (pyproject.toml) instead of importing it.
    """
    from importlib.metadata import entry_points

    found = entry_points(group="evalcore.commands", name="run")
    if not found:
        raise EvalInputError("evalcore run needs the flows package installed (pip install evalcore, which registers it).")
    command = next(iter(found)).load()
    return command(args)


def _named_layer(text: str) -> tuple[str, str]:
    """``NAME=PATH`` -> (NAME, PATH); a bare path (or an existing file whose name holds '=') is named by itself."""
    name, sep, value = text.partition("=")
    if sep and name and all(c.isalnum() or c in "_.+-" for c in name) and not Path(text).exists():
        if not value:
            raise argparse.ArgumentTypeError(f"{text!r} names no path after '='; give NAME=PATH")
        return name, value
    return text, text


def _compare_models_arguments(args: argparse.Namespace) -> tuple[list[tuple[str, str]], str, dict[str, str]]:
    """The NAME=PATH form: the models, the baseline and the layer names, checked."""
    models = list(args.predicted)
    names = [name for name, _ in models]
    for k, name in enumerate(names):
        if name in names[:k]:
            raise EvalInputError(f"-p/--predicted: two models are named {name!r}; give each model its own NAME (-p NAME=PATH).")
    if len(models) < 2:
        raise EvalInputError(
            "-p/--predicted: evalcore compare needs two or more models (-p A=PATH -p B=PATH), or the two-model form -p CANDIDATE -i INCUMBENT."
        )
    baseline = args.baseline if args.baseline is not None else names[0]
    if baseline not in names:
        raise EvalInputError(f"--baseline {baseline!r} is not a model name; the models are: {', '.join(map(repr, names))}.")
    layers: dict[str, str] = {}
    for name, layer in args.pred_layer:
        if name not in names or name in layers:
            raise EvalInputError(f"--pred-layer {name}={layer}: {name!r} is {'given twice' if name in layers else 'not a model name'}; the models are: {', '.join(map(repr, names))}.")
        layers[name] = layer
    if args.candidate_layer is not None or args.incumbent_layer is not None:
        raise EvalInputError("--candidate-layer and --incumbent-layer belong to the form -p CANDIDATE -i INCUMBENT; use --pred-layer NAME=LAYER.")
    return models, baseline, layers


def _cmd_compare(args: argparse.Namespace) -> int:
    """``evalcore compare``: several named models (:func:`evalcore.compare.compare_models`), or the
    two-model form ``-p CANDIDATE -i INCUMBENT`` (:func:`evalcore.compare.compare`)."""
    from evalcore.compare import compare, compare_models
    from evalcore.io import read_layer, write_json
    from evalcore.options import check_options

    started = time.perf_counter()
    pair = args.incumbent is not None
    if pair:
        if len(args.predicted) != 1:
            raise EvalInputError("-i/--incumbent is the two-model form -p CANDIDATE -i INCUMBENT: give one -p with it, or name every model (-p A=PATH -p B=PATH) without -i.")
        if args.baseline is not None or args.pred_layer:
            raise EvalInputError("--baseline and --pred-layer belong to the form -p NAME=PATH; with -i the incumbent is the baseline.")
        models = [("candidate", args.predicted[0][1]), ("incumbent", args.incumbent)]
        baseline, layers = "incumbent", {"candidate": args.candidate_layer, "incumbent": args.incumbent_layer}
    else:
        models, baseline, layers = _compare_models_arguments(args)
    options = metric_options(args)
    checked = check_options(**options)
    if checked.bootstrap <= 0:
        raise EvalInputError("evalcore compare needs resamples for the deltas' intervals: add --bootstrap N (1000 is usual).")
    _check_output_file(args.output, "-o/--output")
    flags = {"candidate": "-p/--candidate", "incumbent": "-i/--incumbent"} if pair else {name: f"-p {name}" for name, _ in models}
    check_not_inputs(
        {**{flags[name]: path for name, path in models}, "-r/--reference": args.reference, "--aoi": args.aoi},
        {"-o/--output": args.output},
        directories=set(),
    )
    check_site_layers(args)
    dashboard_address(args)
    if args.cluster:
        result = _compare_on_cluster(args, options, models, baseline, layers, pair)
    else:
        reference = read_layer(args.reference, layer=args.ref_layer, role="reference")
        if args.strata_column is not None and args.strata_column == reference.geometry.name:
            _refuse_geometry_column("--strata-column", args.strata_column, _where(args.reference, args.ref_layer, "reference"),
                                    [str(c) for c in reference.columns if c != reference.geometry.name])
        if args.strata_column is not None and args.strata_column not in reference.columns:
            columns = ", ".join(repr(c) for c in reference.columns if c != reference.geometry.name)
            raise EvalInputError(f"--strata-column {args.strata_column!r} is not a column of the reference file {args.reference!r}; its columns are: {columns or '(none)'}.")
        read = {name: read_layer(path, layer=layers.get(name), role=name if pair else f"model {name!r}") for name, path in models}
        if pair:
            result = compare(read["candidate"], read["incumbent"], reference, strata=args.strata_column, size_bins=args.size_bins, **options)
        else:
            result = compare_models(read, reference, baseline=baseline, strata=args.strata_column, size_bins=args.size_bins, **options)
    write_json(args.output, result)
    if not args.quiet:
        print(format_comparison(result))
        print(f"wrote {args.output} in {time.perf_counter() - started:.1f} s")
    return 0


def _compare_on_cluster(args: argparse.Namespace, options: dict, models: list[tuple[str, str]], baseline: str,
                        layers: dict[str, str | None], pair: bool) -> dict:
    from distributed import Client

    from evalcore.compare import compare_models_on_cluster, compare_on_cluster
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
                return compare_on_cluster(models[0][1], models[1][1], args.reference, client, strata=args.strata_column,
                                          size_bins=args.size_bins, layers=layers, **options)
            return compare_models_on_cluster(dict(models), args.reference, client, baseline=baseline, strata=args.strata_column,
                                             size_bins=args.size_bins, layers=layers, **options)
    finally:
        if cluster is not None:
            cluster.close()


def format_comparison(result: dict) -> str:
    """A few lines: the overall deltas with their paired intervals and the units where a model is worse."""
    if "table" in result:
        return _format_models(result)
    b = result["bootstrap"]
    lines = [f"{result['candidate']} against {result['incumbent']}: {b['n_resamples']} paired resamples of {b['n_units']} {b['unit']} units"]
    for metric, e in result["overall"].items():
        lines.append(f"  {metric:<10} {_fmt(e['candidate'])} vs {_fmt(e['incumbent'])}: delta {_delta_text(metric, e['delta'], e)}")
    lines.append(_worse_line(result["worse_units"], "the candidate"))
    return "\n".join(lines)


def _delta_text(metric: str, value: object, entry: dict) -> str:
    """``value [lower, upper]`` of a paired entry, marked where the family declares lower better."""
    text = _fmt(value) + interval_text(entry.get("ci") or [None, None])
    return text + " (lower is better)" if better_of(FAMILIES, metric) == LOWER else text


def _worse_line(worse: list[dict], who: str) -> str:
    if not worse:
        return f"no stratum, size class, tile or AOI where {who} is significantly worse"
    shown = ", ".join(f"{w['level'][4:]} {w['unit']} ({w['metric']} {_fmt(w['delta'])})" for w in worse[:8])
    return f"worse with the interval below zero: {len(worse)} (unit, metric) pairs: {shown}{' …' if len(worse) > 8 else ''}"


def _format_models(result: dict) -> str:
    """The table (a row per model, the metrics with their intervals) and each model's deltas against the baseline."""
    b = result["bootstrap"]
    metrics = result["metrics"]
    lines = [f"{len(result['table'])} models against one reference, baseline {result['baseline']}: "
             f"{b['n_resamples']} paired resamples of {b['n_units']} {b['unit']} units"]
    width = max(len(name) for name in result["table"])
    for name, row in result["table"].items():
        cells = []
        for m in metrics:
            e = row[m]
            cells.append(f"{m} {_fmt(e['value'])}{interval_text(e.get('ci') or [None, None])}")
        worst = (row.get("worst_f1") or {}).get("per_stratum")
        if worst:
            cells.append(f"worst stratum {worst['group']} (F1 {_fmt(worst['value'])})")
        lines.append(f"  {name:<{width}}  " + "  ".join(cells))
    for name, deltas in result["deltas"].items():
        parts = []
        for m in metrics:
            e = deltas["overall"].get(m)
            if e is not None:
                parts.append(f"{m} {_delta_text(m, e['delta'], e)}")
        lines.append(f"{name} − {result['baseline']}: " + "  ".join(parts))
        lines.append("  " + _worse_line(deltas["worse_units"], name))
    return "\n".join(lines)


def _cmd_gate(args: argparse.Namespace) -> int:
    """``evalcore gate RUN_DIR gates.yaml``: write the gates' outcome beside the metrics.

    A first check writes ``acceptance-gates.json``; a later one adds
    ``acceptance-gates.vN.json`` linking its predecessor (never overwrites).
    """
    import json

    from evalcore.evidence import check_amendment, gate_metrics, latest_manifest, write_evidence_manifest
    from evalcore.gates import evaluate_gates, exit_status, load_gates
    from evalcore.io import write_json
    from evalcore.report import sha256_path

    run_dir = Path(args.run_dir)
    metrics_path = run_dir / "metrics.json"
    if not run_dir.is_dir() or not metrics_path.is_file():
        raise EvalInputError(f"{args.run_dir!r} is not a run directory: it holds no metrics.json.")
    gates = load_gates(args.gates)
    try:
        metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise EvalInputError(f"{str(metrics_path)!r} is not valid JSON: {exc}") from None
    result = evaluate_gates(gate_metrics(run_dir, metrics), gates, evidence_file="metrics.json", evidence_sha256=sha256_path(metrics_path))
    result["gates_file"] = {"path": str(Path(args.gates).resolve()), "sha256": sha256_path(args.gates)}
    target = run_dir / "acceptance-gates.json"
    version = 1
    while target.exists():
        previous = target
        version += 1
        target = run_dir / f"acceptance-gates.v{version}.json"
    if version > 1:
        result["amends"] = {"file": previous.name, "sha256": sha256_path(previous)}
    sealed = latest_manifest(run_dir) is not None
    if sealed:
        check_amendment(run_dir, [target.name])  # refused before anything is written
    write_json(target, result)
    amended = write_evidence_manifest(run_dir, reason=f"gates amendment: {target.name}", adds=[target.name]) if sealed else None
    if not args.quiet:
        for rule in result["rules"]:
            group = f"[{rule['group']}]" if rule.get("group") is not None else ""
            observed = rule["observed"]
            shown = str(int(observed)) if isinstance(observed, (int, float)) and not isinstance(observed, bool) and float(observed).is_integer() else _fmt(observed)
            print(f"{rule['state']:<14} {rule['id']}{group}: {rule['metric']} {shown} {rule['op']} {rule['expected']}"
                  + (f" ({rule['reason']})" if rule.get("reason") else ""))
        print(f"decision: {result['decision']} ({result['counts']['pass']} pass, {result['counts']['fail']} fail, "
              f"{result['counts']['not_evaluable']} not evaluable); wrote {target}" + (f" and {amended.name}" if amended else ""))
    return exit_status(result)


def _cmd_report(args: argparse.Namespace) -> int:
    """``evalcore report RUN_DIR``: the self-contained HTML page of a run, rebuilt from its files."""
    from evalcore.html_report import build_report

    started = time.perf_counter()
    path = build_report(args.run_dir)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - started:.1f} s)")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    """``evalcore verify RUN_DIR``: account for every file of the run with its evidence (0: intact, 1: not)."""
    from evalcore.evidence import EVIDENCE_MANIFEST, verify

    found = verify(args.run_dir, check_inputs=not args.skip_inputs, expect_sha256=args.expect_sha256)
    for label, items in (("chain", found.chain), ("changed", found.changed), ("missing", found.missing),
                         ("not accounted for", found.unlisted), ("input changed", found.inputs_changed),
                         ("input not found", found.inputs_missing)):
        for item in items:
            print(f"{label}: {item}")
    if found.expected_differs:
        print(f"expected: {EVIDENCE_MANIFEST} should have SHA-256 {found.expected_sha256}, "
              + (f"it has {found.first_sha256}" if found.first_sha256 else "it is gone"))
    elif found.first_sha256:
        print(f"{EVIDENCE_MANIFEST} SHA-256 {found.first_sha256}"
              + (" (as expected)" if found.expected_sha256 else " (store it; check it later with --expect-sha256)"))
    verdict = "intact" if found.ok else "NOT intact"
    against = EVIDENCE_MANIFEST if found.manifest == EVIDENCE_MANIFEST else f"{EVIDENCE_MANIFEST} to {found.manifest}"
    print(f"{args.run_dir}: {verdict} ({found.checked} files checked against {against}"
          + ("" if args.skip_inputs else "; inputs rechecked") + ")")
    return 0 if found.ok else 1


def _cmd_synth(args: argparse.Namespace) -> int:
    from evalcore.synth import write_layers

    if args.n_ref <= 0:
        raise EvalInputError(f"--n-ref must be positive, but got {args.n_ref}.")
    check_output_dir(args.out, "--out")
    check_new_directory(args.out, "--out", force=args.force)
    if args.score_decimals is not None and args.score_decimals < 0:
        raise EvalInputError(f"--score-decimals must be 0 or more, but got {args.score_decimals}.")
    created = not Path(args.out).exists()
    try:
        pred_path, ref_path = write_layers(args.out, args.n_ref, args.seed, fmt=args.format, score_decimals=args.score_decimals)
    except BaseException:
        if created:  # the directory this command made, left empty by the failed write (its temporary files are gone)
            with contextlib.suppress(OSError):
                Path(args.out).rmdir()
        raise
    print(f"wrote {ref_path}, {pred_path} and the AOI and annotated-area layers beside them")
    return 0


def _one_line_warning(message: object, category: type, filename: str, lineno: int, file: object = None, line: object = None) -> None:
    """Print a Python warning as one line on standard error (no source line, no traceback)."""
    text = str(message).strip().replace("\n", " ")
    print(f"evalcore: warning: {category.__name__}: {text}", file=sys.stderr)


def _input_error_in_chain(exc: BaseException) -> EvalInputError | None:
    """The first :class:`EvalInputError` in ``exc``'s chain of causes and contexts.

    A bad input found inside a Dask task can make the code that collects the task's
    result fail in turn; the user must still see the input error, which names the file.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, EvalInputError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    0: success. 2: a user error (bad argument, file, layer, row, column or output
    location), one line on standard error. 1: any other failure, one line on standard
    error (the traceback only with ``EVALCORE_DEBUG=1``). 130: interrupted.
    """
    return run(argv)[0]


def run(argv: Sequence[str] | None = None) -> tuple[int, str | None]:
    """:func:`main`, also returning the reason of a failure (the error line, without its
    ``evalcore: error:`` prefix), for callers that report it again (the demo)."""

    def fail(status: int, message: str) -> tuple[int, str]:
        print(f"evalcore: error: {message}", file=sys.stderr)
        return status, message

    # Once before parsing (warnings while parsing), again with the -v of the command.
    configure_logging(0)
    parser = _build_parser()
    debug = debug_enabled()
    with warnings.catch_warnings():
        warnings.showwarning = _one_line_warning
        try:
            args = parser.parse_args(argv)
            configure_logging(getattr(args, "verbose", 0))
            handler = {"evaluate": _cmd_evaluate, "run": _cmd_run, "synth": _cmd_synth, "compare": _cmd_compare, "gate": _cmd_gate, "verify": _cmd_verify, "report": _cmd_report}[args.command]
            return handler(args), None
        except (_UsageError, EvalInputError, ValueError, TypeError, ImportError, OSError) as exc:
            if debug:
                raise
            exc = _input_error_in_chain(exc) or exc
            return fail(EXIT_USAGE, str(exc).strip().replace("\n", " ") or type(exc).__name__)
        except KeyboardInterrupt:
            print("evalcore: interrupted", file=sys.stderr)
            return 130, "interrupted"
        except Exception as exc:  # never a traceback on the terminal: one line, exit status 1
            if debug:
                raise
            cause = _input_error_in_chain(exc)
            if cause is not None:  # a bad input that made something else fail: report the input
                return fail(EXIT_USAGE, str(cause).strip().replace("\n", " "))
            message = str(exc).strip().replace("\n", " ") or "(no message)"
            return fail(EXIT_FAILURE, f"{type(exc).__name__}: {message} (set {DEBUG_ENV}=1 for the traceback)")


if __name__ == "__main__":
    sys.exit(main())

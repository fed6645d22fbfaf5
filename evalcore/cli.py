"""The ``evalcore`` command line.

``evalcore evaluate`` compares two layer files and writes the metrics as JSON;
``evalcore synth`` writes a generated dataset. Every user error (a bad argument, a
missing, unreadable or corrupt file, a bad column) ends with exit status 2 and one
line on standard error naming the path, argument or column; no output file is left
behind.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from collections.abc import Sequence

from evalcore.config import MATCHING_METHODS
from evalcore.errors import EvalInputError

__all__ = ["main", "format_summary"]

EXIT_USAGE = 2


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise _UsageError(f"{self.prog}: {message}")


def _size_bins(text: str) -> object:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--size-bins {text!r}: expected 'auto' or comma-separated hectares like 0,0.5,1,inf") from None


def _spacing(text: str) -> float | None:
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--boundary-sample-spacing-m {text!r}: expected metres or 'none'") from None


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="evalcore", description="Object-level evaluation of predicted polygons against a reference layer.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ev = sub.add_parser("evaluate", help="evaluate a predicted layer against a reference layer")
    ev.add_argument("-p", "--predicted", required=True, help="predicted layer file (GeoPackage, GeoParquet, ...)")
    ev.add_argument("-r", "--reference", required=True, help="reference layer file")
    ev.add_argument("--pred-layer", help="layer name inside the predicted file")
    ev.add_argument("--ref-layer", help="layer name inside the reference file")
    ev.add_argument("--iou-threshold", type=float, default=0.5)
    ev.add_argument("--matching", choices=MATCHING_METHODS, default="one_to_one")
    ev.add_argument("--strata-column", help="reference column holding the stratum of each field")
    ev.add_argument("--size-bins", type=_size_bins, help="'auto' or edges in hectares, e.g. 0,0.5,1,2,5,10,inf")
    ev.add_argument("--bootstrap", type=int, default=0, help="number of bootstrap resamples (0: none)")
    ev.add_argument("--bootstrap-seed", type=int, default=42)
    ev.add_argument("--boundary-tolerance-m", type=float, help="boundary tolerance in metres")
    ev.add_argument("--equal-area-crs", help="equal-area CRS for areas and IoU (default EPSG:6933)")
    ev.add_argument("--boundary-sample-spacing-m", type=_spacing, default=1.0, help="metres, or 'none'")
    ev.add_argument("--tile-km", type=float, default=50.0, help="partition tile side in kilometres")
    ev.add_argument("--frame-out", help="write the per-field table here as GeoParquet (a directory of parts with --cluster)")
    ev.add_argument(
        "--cluster",
        help="run on Dask: 'local' starts a LocalCluster, tcp://HOST:PORT connects to a running scheduler",
    )
    ev.add_argument("--workers", type=int, default=2, help="worker processes of a local cluster")
    ev.add_argument("--workdir", help="work directory of a distributed run (default: a temporary one)")
    ev.add_argument("-o", "--output", required=True, help="metrics JSON file to write")
    ev.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")

    rn = sub.add_parser("run", help="run the Prefect flow evaluate-layers (Dask cluster, run directory with report and manifest)")
    rn.add_argument("-p", "--predicted", required=True)
    rn.add_argument("-r", "--reference", required=True)
    rn.add_argument("--pred-layer")
    rn.add_argument("--ref-layer")
    rn.add_argument("--iou-threshold", type=float, default=0.5)
    rn.add_argument("--matching", choices=MATCHING_METHODS, default="one_to_one")
    rn.add_argument("--strata-column")
    rn.add_argument("--size-bins", type=_size_bins)
    rn.add_argument("--bootstrap", type=int, default=0)
    rn.add_argument("--bootstrap-seed", type=int, default=42)
    rn.add_argument("--boundary-tolerance-m", type=float)
    rn.add_argument("--equal-area-crs")
    rn.add_argument("--boundary-sample-spacing-m", type=_spacing, default=1.0)
    rn.add_argument("--tile-km", type=float, default=50.0)
    rn.add_argument("--cluster", help="scheduler address tcp://HOST:PORT (default: an embedded LocalCluster)")
    rn.add_argument("--workers", type=int, default=2, help="worker processes of the embedded cluster")
    rn.add_argument("--workdir")
    rn.add_argument("-o", "--output-dir", required=True, help="run directory")

    sy = sub.add_parser("synth", help="write a generated multi-zone dataset")
    sy.add_argument("--n-ref", type=int, required=True, help="number of reference fields")
    sy.add_argument("--seed", type=int, default=0)
    sy.add_argument("--out", required=True, help="output directory")
    sy.add_argument("--format", choices=("parquet", "gpkg"), default="parquet")
    return parser


def _fmt(value: object, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_summary(metrics: dict[str, object]) -> str:
    """A short readable summary of a metrics dict (a few lines of text)."""

    def with_ci(key: str) -> str:
        text = _fmt(metrics.get(key))
        ci = metrics.get("bootstrap", {}).get("ci", {}).get(key) if isinstance(metrics.get("bootstrap"), dict) else None
        if ci is not None:
            text += f" [{_fmt(ci[0])}, {_fmt(ci[1])}]"
        return text

    lines = [
        f"reference fields {metrics['count_reference']}  predictions {metrics['count_predicted']}  "
        f"TP {metrics['count_tp']}  FP {metrics['count_fp']} ({metrics['count_fp_unassigned']} overlap nothing)  FN {metrics['count_fn']}",
        f"precision {with_ci('precision')}  recall {with_ci('recall')}  F1 {with_ci('f1')}  mean IoU {with_ci('iou_mean')}",
        f"area-weighted precision {with_ci('area_weighted_precision')}  recall {with_ci('area_weighted_recall')}  "
        f"over-/under-segmentation {_fmt(metrics.get('oversegmentation_mean'))} / {_fmt(metrics.get('undersegmentation_mean'))}",
        f"Hausdorff mean {_fmt(metrics.get('hausdorff_mean_m'), 2)} m, median {_fmt(metrics.get('hausdorff_median_m'), 2)} m;  "
        f"boundary distance mean {_fmt(metrics.get('boundary_distance_mean_m'), 2)} m",
    ]
    if "boundary_tolerance_m" in metrics:
        lines.append(
            f"within {metrics['boundary_tolerance_m']:g} m: boundary precision {with_ci('boundary_precision')}  "
            f"recall {with_ci('boundary_recall')}  F1 {with_ci('boundary_f1')}  coverage {with_ci('coverage_within_tolerance')}"
        )
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
            lines.append(
                f"{name:<{width}}  {g['count_reference']:>7}  {_fmt(g['precision']):>9}  {_fmt(g['recall']):>7}  "
                f"{_fmt(g['f1']):>6}  {_fmt(g['iou_mean']):>8}"
            )
    return "\n".join(lines)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from evalcore.api import evaluate_with_frame
    from evalcore.io import read_layer, write_geoparquet

    started = time.perf_counter()
    if args.cluster:
        metrics = _evaluate_on_cluster(args)
        _finish(args, metrics, started)
        return 0
    reference = read_layer(args.reference, layer=args.ref_layer, role="reference")
    predicted = read_layer(args.predicted, layer=args.pred_layer, role="predicted")
    if args.strata_column is not None and args.strata_column not in reference.columns:
        columns = ", ".join(repr(c) for c in reference.columns if c != reference.geometry.name)
        raise EvalInputError(
            f"--strata-column {args.strata_column!r} is not a column of the reference file "
            f"{args.reference!r}; its columns are: {columns or '(none)'}."
        )
    metrics, frame = evaluate_with_frame(
        predicted,
        reference,
        strata=args.strata_column,
        size_bins=args.size_bins,
        iou_threshold=args.iou_threshold,
        matching=args.matching,
        bootstrap=args.bootstrap,
        bootstrap_seed=args.bootstrap_seed,
        boundary_tolerance_m=args.boundary_tolerance_m,
        equal_area_crs=args.equal_area_crs,
        boundary_sample_spacing_m=args.boundary_sample_spacing_m,
        tile_size_m=args.tile_km * 1000.0,
    )
    if args.frame_out:
        write_geoparquet(args.frame_out, frame)
    _finish(args, metrics, started)
    return 0


def _finish(args: argparse.Namespace, metrics: dict[str, object], started: float) -> None:
    from evalcore.io import write_json

    write_json(args.output, metrics)
    if not args.quiet:
        print(format_summary(metrics))
        print(f"wrote {args.output}" + (f" and {args.frame_out}" if args.frame_out else "") + f" in {time.perf_counter() - started:.1f} s")


def _progress_bar(phase: str, done: int, total: int) -> None:
    """A progress bar over partitions on standard error (a line per 10 % when not a terminal)."""
    width = 30
    filled = width * done // total if total else width
    text = f"{phase:<8} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} partitions"
    if sys.stderr.isatty():
        print("\r" + text, end="\n" if done == total else "", file=sys.stderr, flush=True)
    elif done == total or (total and (10 * done // total) != (10 * (done - 1) // total)):
        print(text, file=sys.stderr, flush=True)


def _evaluate_on_cluster(args: argparse.Namespace) -> dict[str, object]:
    from distributed import Client, LocalCluster

    from evalcore.api import check_options
    from evalcore.distributed.runner import run_distributed

    options = check_options(
        iou_threshold=args.iou_threshold,
        matching=args.matching,
        bootstrap=args.bootstrap,
        bootstrap_seed=args.bootstrap_seed,
        boundary_tolerance_m=args.boundary_tolerance_m,
        equal_area_crs=args.equal_area_crs,
        boundary_sample_spacing_m=args.boundary_sample_spacing_m,
        tile_size_m=args.tile_km * 1000.0,
    )
    if args.workers < 1:
        raise EvalInputError(f"--workers must be at least 1, but got {args.workers}.")
    cluster = None
    try:
        if args.cluster == "local":
            cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0")
            client = Client(cluster)
        elif args.cluster.startswith(("tcp://", "tls://")):
            try:
                client = Client(args.cluster, timeout="20s")
            except OSError as exc:
                raise EvalInputError(f"--cluster {args.cluster!r}: cannot reach the scheduler ({exc}).") from None
        else:
            raise EvalInputError(f"--cluster {args.cluster!r} must be 'local' or a scheduler address like tcp://127.0.0.1:8786.")
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
                frame_dir=args.frame_out,
                pred_layer=args.pred_layer,
                ref_layer=args.ref_layer,
                progress=None if args.quiet else _progress_bar,
            )
    finally:
        if cluster is not None:
            cluster.close()


def _cmd_run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from flows.evaluate import evaluate_layers
    from flows.params import EvaluateParams

    try:
        params = EvaluateParams(
            predicted=args.predicted,
            reference=args.reference,
            pred_layer=args.pred_layer,
            ref_layer=args.ref_layer,
            output_dir=args.output_dir,
            iou_threshold=args.iou_threshold,
            matching=args.matching,
            strata_column=args.strata_column,
            size_bins=args.size_bins,
            bootstrap=args.bootstrap,
            bootstrap_seed=args.bootstrap_seed,
            boundary_tolerance_m=args.boundary_tolerance_m,
            equal_area_crs=args.equal_area_crs,
            boundary_sample_spacing_m=args.boundary_sample_spacing_m,
            tile_size_m=args.tile_km * 1000.0,
            cluster=args.cluster,
            n_workers=args.workers,
            workdir=args.workdir,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise EvalInputError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None
    started = time.perf_counter()
    metrics = evaluate_layers(params)
    print(format_summary(metrics))
    print(f"run directory {args.output_dir}: metrics.json, report.md, manifest.json, fields/ ({time.perf_counter() - started:.1f} s)")
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from evalcore.synth import write_layers

    if args.n_ref <= 0:
        raise EvalInputError(f"--n-ref must be positive, but got {args.n_ref}.")
    pred_path, ref_path = write_layers(args.out, args.n_ref, args.seed, fmt=args.format)
    print(f"wrote {ref_path} and {pred_path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("distributed", "bokeh", "tornado"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        handler = {"evaluate": _cmd_evaluate, "run": _cmd_run, "synth": _cmd_synth}[args.command]
        return handler(args)
    except (_UsageError, EvalInputError, ValueError, TypeError, ImportError, OSError) as exc:
        message = str(exc).strip().replace("\n", " ") or type(exc).__name__
        print(f"evalcore: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("evalcore: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The ``evalcore`` argument tree: every command, its arguments and their types.

The evaluation options' flags are not written here: :func:`_add_option_flags` makes one
per option the families declare (:func:`evalcore.options.all_options`), so a family's
option reaches ``evaluate``, ``run`` and ``compare`` with no line of this module
changed. Argument types check what needs no file (size bins, labels, row counts, the
dashboard address), so a bad one fails before anything is read.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from evalcore._version import __version__
from evalcore.metrics.base import Option
from evalcore.options import all_options

__all__ = ["IN_PROCESS_BELOW_ROWS", "UsageError", "build_parser", "metric_options"]


class UsageError(Exception):
    """A bad command line, found by argparse: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        # main() prefixes "evalcore: error:"; the subcommand is named once, after it.
        command = self.prog.removeprefix("evalcore").strip()
        raise UsageError(f"{command + ': ' if command else ''}{message}")

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


def _option_type(option: Option, parser: _Parser) -> Callable[[str], object]:
    def parse(text: str) -> object:
        try:
            value = option.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if option.to_option is None:
            # The option's own check, naming the flag the user typed (the library's message
            # names the keyword argument), reported as it is: argparse would put
            # "argument --flag:" before a message that names the flag already. A value in
            # another unit than the library's (--partition-km) is checked after conversion.
            try:
                option.check(option.cli_flag, value)
            except ValueError as exc:
                parser.error(str(exc))
        return value

    parse.__name__ = option.name  # argparse names the type in its message
    return parse


def _add_option_flags(parser: _Parser) -> None:
    """One flag per evaluation option (:func:`evalcore.options.all_options`), help and default from it."""
    for option in all_options():
        default = option.cli_default if option.cli_default is not None else option.default
        if option.annotation is bool:  # a switch: the flag alone turns it on
            parser.add_argument(option.cli_flag, dest=option.name, action="store_true", default=default, help=option.help.replace("%", "%%"))
            continue
        parser.add_argument(
            option.cli_flag,
            dest=option.name,
            type=_option_type(option, parser),
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


def _add_layer_arguments(parser: argparse.ArgumentParser) -> None:
    """The inputs, shared by ``evaluate`` and ``run``."""
    parser.add_argument("-p", "--predicted", required=True, help="predicted layer: any file pyogrio reads (GeoPackage, GeoParquet, FlatGeobuf, Shapefile, GeoJSON) or a directory of GeoParquet parts")
    parser.add_argument("-r", "--reference", required=True, help="reference layer, as for --predicted")
    parser.add_argument("--pred-layer", help="layer name inside the predicted file (default: its only layer)")
    parser.add_argument("--ref-layer", help="layer name inside the reference file (default: its only layer)")
    parser.add_argument("--strata-column", help="reference column holding the stratum of each field (default: no strata)")
    parser.add_argument("--size-bins", type=_size_bins, help="field-size classes: 'auto' or edges in hectares, e.g. 0,0.5,1,2,5,10,inf (default: none)")


def _whole_number(minimum: int) -> Callable[[str], int]:
    """An argument type: a whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        return value

    return parse


_positive_int = _whole_number(1)
_seed = _whole_number(0)


def _named_layer(text: str) -> tuple[str, str]:
    """``NAME=PATH`` -> (NAME, PATH); a bare path (or an existing file whose name holds '=') is named by itself."""
    name, sep, value = text.partition("=")
    if sep and name and all(c.isalnum() or c in "_.+-" for c in name) and not Path(text).exists():
        if not value:
            raise argparse.ArgumentTypeError(f"{text!r} names no path after '='; give NAME=PATH")
        return name, value
    return text, text


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (``run`` is parsed here too; the flows package runs it)."""
    parser = _Parser(
        prog="evalcore",
        description=f"evalcore {__version__}: object-level evaluation of predicted polygons against a reference layer.",
        epilog="Each command has its own help: evalcore COMMAND -h. Definitions of every number: docs/metrics.md.",
    )
    parser.add_argument("--version", action="version", version=f"evalcore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

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
    ev.add_argument("-v", "--verbose", action="count", default=0, help="more log lines (-v: a line per partition, -vv: also Dask's); without it, a line per phase")

    rn = sub.add_parser("run", help="run the Prefect flow evaluate-layers (Dask cluster, run directory with report and manifest)")
    _add_layer_arguments(rn)
    _add_option_flags(rn)
    rn.add_argument("--cluster", help="Dask scheduler address tcp://HOST:PORT (default: an embedded LocalCluster)")
    rn.add_argument("--workers", type=int, default=2, help="worker processes of the embedded LocalCluster (default 2)")
    _add_dashboard_argument(rn, default=None)
    rn.add_argument("--workdir", help="work directory; keep it to resume an interrupted run (default: RUN_DIR/work, removed after success)")
    rn.add_argument("-o", "--output-dir", required=True, help="run directory: metrics.json, report.md, manifest.json, fields/ (its parent must exist)")
    rn.add_argument("-v", "--verbose", action="count", default=0, help="more log lines (-v: Prefect's flow-run lines, the partition keys and a line per partition, -vv: also Prefect's and Dask's INFO lines); without it, a line per phase; the run directory keeps the whole log")
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

    rv = sub.add_parser("review", help="human review of a sample of a run's objects: draw the sample and its page, import decisions (docs/review.md)")
    rv_sub = rv.add_subparsers(dest="review_command", metavar="STEP", required=True, parser_class=_Parser)
    rs = rv_sub.add_parser("sample", help="draw the stratified sample: RUN_DIR/review/sample.parquet and the review page review/index.html")
    rs.add_argument("run_dir", help="a run directory (holding metrics.json, fields/ and predictions/)")
    rs.add_argument("--size", type=_positive_int, required=True, help="items to draw, shared equally over the cells (code × stratum)")
    rs.add_argument("--seed", type=_seed, default=0, help="seed of the draw; the same seed and size give the same sample (default 0)")
    rs.add_argument("--force", action="store_true", help="start a new sample (review/vN/) although the current one, drawn with another size or seed, has decisions")
    rs.add_argument("-v", "--verbose", action="count", default=0, help="more log lines")
    ri = rv_sub.add_parser("import", help="check and store reviewers' decisions (decisions-<reviewer>.csv) and write review/review.json")
    ri.add_argument("run_dir", help="a run directory with a review sample")
    ri.add_argument("decisions", nargs="*", help="decisions files exported by the review page; nothing is imported if one row is bad")
    ri.add_argument("--adjudicate", metavar="FILE.csv", help="record final codes instead (columns item_id, final_code, adjudicator, comment)")
    ri.add_argument("-v", "--verbose", action="count", default=0, help="more log lines")

    sy = sub.add_parser("synth", help="write a generated multi-zone dataset")
    sy.add_argument("--n-ref", type=int, required=True, help="number of reference fields")
    sy.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sy.add_argument("--out", required=True, help="output directory, new or empty (its parent must exist)")
    sy.add_argument("--force", action="store_true", help="write into a non-empty --out, replacing the layer files synth writes (other files are left alone)")
    sy.add_argument("--format", choices=("parquet", "gpkg"), default="parquet", help="file format (default parquet)")
    sy.add_argument("--score-decimals", type=int, help="round the predictions' scores to this many decimals, as detectors often do (default: not rounded)")
    sy.add_argument("--part-rows", type=int, metavar="N",
                    help="write predicted.parquet/ and reference.parquet/ as directories of GeoParquet parts of N rows, made block by block "
                    "in bounded memory (the default above 200,000 fields, with N = 200,000; N >= 1,000); the same fields whatever N")
    return parser


"""Checks made before any work: arguments, output locations, columns, ids, site layers.

Every user error a command can find without evaluating is found here, first, so a run
never stops after hours on a typo (docs/reliability.md): an output that cannot be
written, a column that is not in the file, ids that are not unique, a site layer that
cannot be prepared. Each raises :class:`~evalcore.errors.EvalInputError` naming the
argument, the path and the way out.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from evalcore.cli.parser import metric_options
from evalcore.remote import check_input_urls, check_local_only
from evalcore.errors import EvalInputError
from evalcore.outputs import check_not_inputs, check_replaceable_directory

__all__ = [
    "check_run_arguments",
    "check_columns_up_front",
    "check_evaluate_arguments",
    "check_id_columns_up_front",
    "check_input_urls",
    "check_local_only",
    "check_output_dir",
    "check_output_file",
    "check_read_columns",
    "check_site_layers",
    "describe_layer",
        "with_id_column",
]


def describe_layer(path: str, layer: str | None, role: str) -> str:
    """How messages name a layer: its path, and its layer name when one is given."""
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


def _remote_output(path: str, option: str) -> str | None:
    """The normalised URL of an output bound for an object store (None for a local path); a probe
    object is written and deleted beside it now, so a bucket that cannot be written is found before any work."""
    from evalcore import remote

    if not remote.is_url(path):
        return None
    url = remote.check_url(path, option)
    if not remote.is_url(url):
        return None  # file:// is a local path
    remote.check_writable(remote.join(url, "probe") if path.endswith("/") else url, option)
    return url


def check_output_file(path: str, option: str) -> None:
    """An output file path: not a directory, in an existing directory this process can write in (or a writable store URL)."""
    if path.endswith("/") and _remote_output(path.rstrip("/"), option):
        raise EvalInputError(f"{option} {path!r} is a directory; give a file name, e.g. {path + 'metrics.json'!r}.")
    if _remote_output(path, option) is not None:
        return
    from evalcore import remote

    path = remote.normalise(path)
    p = Path(path)
    if p.is_dir() or path.endswith(("/", os.sep)):
        raise EvalInputError(f"{option} {path!r} is a directory; give a file name, e.g. {str(p / 'metrics.json')!r}.")
    _check_directory_writable(p.parent if str(p.parent) else Path("."), path, option)


def check_output_dir(path: str, option: str, *, create_parents: bool = False) -> None:
    """An output directory: not a file; writable, or creatable in an existing writable directory.

    With ``create_parents`` its missing parents may be created too (``evalcore run -o``):
    the nearest existing ancestor must then be a writable directory. A store URL (a
    prefix) must be writable (a probe object is written and deleted).
    """
    from evalcore import remote

    if remote.is_url(path) and _remote_output(path.rstrip("/") + "/", option) is not None:
        return
    path = remote.normalise(path)
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise EvalInputError(f"{option} {path!r} is a file, not a directory; give a directory.")
    if p.is_dir():
        _check_directory_writable(p, path, option)
        return
    parent = p.parent if str(p.parent) else Path(".")
    if create_parents:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    _check_directory_writable(parent, path, option)


def check_run_arguments(args: object) -> None:
    """``evalcore run``: every check that needs no data, made before the flows package is imported.

    The run directory (missing parents are created) and the work directory must be
    writable, must not be, hold or lie in an input, and the run directory must be new,
    empty or an earlier run's, not claimed by a run in progress (:mod:`evalcore.outputs`).
    """
    from evalcore import remote
    from evalcore.outputs import RunDirectoryLock, check_not_inputs, check_run_directory

    check_input_urls({"-p/--predicted": args.predicted, "-r/--reference": args.reference, "--aoi": args.aoi,
                      "--annotated-area": args.annotated_area, "--study-area": getattr(args, "study_area", None),
                      "--training-area": getattr(args, "training_area", None)})
    check_output_dir(args.output_dir, "-o/--output-dir", create_parents=True)
    if args.workdir:
        check_output_dir(args.workdir, "--workdir", create_parents=True)
    # The flow's parameters check the same rule, naming parameters; here it names the flags.
    check_not_inputs(
        {"-p/--predicted": args.predicted, "-r/--reference": args.reference, "--aoi": args.aoi, "--annotated-area": args.annotated_area,
         "--study-area": getattr(args, "study_area", None), "--training-area": getattr(args, "training_area", None), "--gates": args.gates},
        {"-o/--output-dir": args.output_dir, "--workdir": args.workdir},
        directories={"-o/--output-dir", "--workdir"},
    )
    if remote.is_url(args.output_dir) and remote.is_url(remote.normalise(args.output_dir)):
        from evalcore.outputs import check_remote_run_directory

        check_remote_run_directory(remote.normalise(args.output_dir))
        return
    check_run_directory(args.output_dir)
    if Path(args.output_dir).is_dir():
        RunDirectoryLock(args.output_dir).acquire().release()  # another run holds it: refused now, not after the set-up


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


def _class_flags(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """``(role, flag, column)`` of the class columns the run reads (SPEC 6.10)."""
    column = getattr(args, "class_column", None)
    if column is None:
        return []
    pred_column = getattr(args, "pred_class_column", None)
    return [("reference", "--class-column", column),
            ("predicted", "--pred-class-column" if pred_column is not None else "--class-column", pred_column or column)]


def _check_class_column(values: object, flag: str, column: str, where: str, columns: list[str]) -> None:
    """A class column must exist and hold at least one class (:func:`evalcore.metrics.classes.class_values`)."""
    import pandas as pd

    from evalcore.metrics.classes import check_only_nulls, class_values

    if values is None:
        shown = ", ".join(repr(c) for c in columns) or "(none)"
        raise EvalInputError(f"{flag} {column!r} is not a column of the {where}; its columns are: {shown}.")
    check_only_nulls(class_values(pd.DataFrame({column: values}), column, where, label=flag), column, where, label=flag)


def check_read_columns(args: argparse.Namespace, reference: object, predicted: object = None) -> None:
    """For runs in this process, once the layers are read: the strata column and, given the predictions, the score column."""
    if args.strata_column is not None and args.strata_column == reference.geometry.name:
        _refuse_geometry_column("--strata-column", args.strata_column, describe_layer(args.reference, args.ref_layer, "reference"),
                                [str(c) for c in reference.columns if c != reference.geometry.name])
    if args.strata_column is not None and args.strata_column not in reference.columns:
        columns = ", ".join(repr(c) for c in reference.columns if c != reference.geometry.name)
        raise EvalInputError(
            f"--strata-column {args.strata_column!r} is not a column of the reference file "
            f"{args.reference!r}; its columns are: {columns or '(none)'}."
        )
    if predicted is not None and args.score_column is not None:
        where = describe_layer(args.predicted, args.pred_layer, "predicted")
        columns = [str(c) for c in predicted.columns if c != predicted.geometry.name]
        _check_score_column(predicted[args.score_column] if args.score_column in columns else None, args.score_column, where, columns)
    for role, flag, column in _class_flags(args):
        frame = reference if role == "reference" else predicted
        if frame is None:
            continue
        path, name = (args.reference, args.ref_layer) if role == "reference" else (args.predicted, args.pred_layer)
        columns = [str(c) for c in frame.columns if c != frame.geometry.name]
        _check_class_column(frame[column] if column in columns else None, flag, column, describe_layer(path, name, role), columns)


def check_columns_up_front(args: argparse.Namespace) -> None:
    """For runs that read layers on workers: check the files' headers, strata and score columns first.

    Reads only the headers, and the score and class columns' values when they are named,
    a chunk at a time (:func:`evalcore.io.iter_column_chunks`).
    """
    from evalcore.io import iter_column_chunks, layer_columns
    from evalcore.metrics.classes import class_values, only_nulls_error
    from evalcore.metrics.scores import ScoreCheck

    ref_columns = layer_columns(args.reference, layer=args.ref_layer, role="reference")
    pred_columns = layer_columns(args.predicted, layer=args.pred_layer, role="predicted")
    if args.strata_column is not None and args.strata_column not in ref_columns:
        from evalcore.io import geometry_column_names

        if args.strata_column in geometry_column_names(args.reference, layer=args.ref_layer, role="reference"):
            _refuse_geometry_column("--strata-column", args.strata_column, describe_layer(args.reference, args.ref_layer, "reference"), list(ref_columns))
        shown = ", ".join(repr(c) for c in ref_columns) or "(none)"
        raise EvalInputError(
            f"--strata-column {args.strata_column!r} is not a column of the reference file {args.reference!r}; "
            f"its columns are: {shown}."
        )
    # The client holds one chunk of a country's scores or classes, not the column.
    if args.score_column is not None:
        where = describe_layer(args.predicted, args.pred_layer, "predicted")
        if args.score_column not in pred_columns:
            _check_score_column(None, args.score_column, where, list(pred_columns))
        check = ScoreCheck(args.score_column, where, label="--score-column")
        for chunk in iter_column_chunks(args.predicted, [args.score_column], layer=args.pred_layer, role="predicted"):
            check.add(chunk)
        check.finish()
    for role, flag, column in _class_flags(args):
        path, name, columns = (
            (args.reference, args.ref_layer, ref_columns) if role == "reference" else (args.predicted, args.pred_layer, pred_columns)
        )
        where = describe_layer(path, name, role)
        if column not in columns:
            _check_class_column(None, flag, column, where, list(columns))
        n_rows, has_class = 0, False
        for chunk in iter_column_chunks(path, [column], layer=name, role=role):
            values = class_values(chunk, column, where, label=flag)
            n_rows += len(values)
            has_class = has_class or any(isinstance(v, str) for v in values)
        if n_rows and not has_class:
            raise only_nulls_error(n_rows, column, where, label=flag)


def check_id_columns_up_front(args: argparse.Namespace) -> None:
    """For runs that read layers on workers: the id columns exist and hold unique ids (reads only those columns)."""
    from evalcore.io import geometry_column_names, layer_columns, read_columns
    from evalcore.sites import check_id_column, check_ids

    for option, column, path, layer, role in (
        ("--ref-id-column", args.ref_id_column, args.reference, args.ref_layer, "reference"),
        ("--pred-id-column", args.pred_id_column, args.predicted, args.pred_layer, "predicted"),
    ):
        if column is None:
            continue
        where = describe_layer(path, layer, role)
        columns = list(layer_columns(path, layer=layer, role=role))
        geometry = geometry_column_names(path, layer=layer, role=role) if column not in columns else ()
        check_id_column(column, columns, option, where, geometry)
        check_ids(read_columns(path, [column], layer=layer, role=role)[column], column, option, where)


def with_id_column(frame: object, column: str | None, option: str, where: str) -> object:
    """The layer indexed by its id column (checked by :func:`evalcore.sites.layer_ids`)."""
    if column is None:
        return frame
    from evalcore.sites import layer_ids

    layer_ids(frame, column, option, where)
    return frame.set_index(column, drop=False)


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
    from evalcore.writers import table_format

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


def _frame_out_kind(args: argparse.Namespace) -> str | None:
    """``"dir"`` (a directory of parts), ``"file"`` (one table in the format of its suffix) or None.

    With ``--cluster`` a path without a suffix names a directory of parts too.
    """
    path = args.frame_out
    if path is not None and args.cluster and not Path(path).suffix and not path.endswith(("/", os.sep)):
        return "dir"
    return _table_out_kind(args, "frame_out", "--frame-out", "per-field")


def check_evaluate_arguments(args: argparse.Namespace) -> str | None:
    """Every check of ``evaluate`` that needs no data: options, silent no-ops, outputs. Returns the frame-out kind."""
    from evalcore.options import check_options

    check_input_urls({"-p/--predicted": args.predicted, "-r/--reference": args.reference, "--aoi": args.aoi,
                      "--annotated-area": args.annotated_area, "--study-area": getattr(args, "study_area", None),
                      "--training-area": getattr(args, "training_area", None)})
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
    check_output_file(args.output, "-o/--output")
    if kind == "dir":
        check_output_dir(args.frame_out, "--frame-out")
        check_replaceable_directory(args.frame_out, "--frame-out")
    elif kind == "file":
        check_output_file(args.frame_out, "--frame-out")
    if pred_kind == "dir":
        check_output_dir(args.predictions_out, "--predictions-out")
        check_replaceable_directory(args.predictions_out, "--predictions-out")
    elif pred_kind == "file":
        check_output_file(args.predictions_out, "--predictions-out")
    if args.pr_curve_out is not None and args.score_column is None:
        raise EvalInputError("--pr-curve-out needs scores: add --score-column C.")
    if args.pr_curve_out is not None:
        check_output_file(args.pr_curve_out, "--pr-curve-out")
    if args.aois_out is not None and args.aoi is None:
        raise EvalInputError("--aois-out needs an AOI layer: add --aoi PATH --aoi-id-column C.")
    for flag, path in (("--tiles-out", args.tiles_out), ("--aois-out", args.aois_out)):
        if path is not None:
            from evalcore.writers import table_format

            table_format(path, flag)
            check_output_file(path, flag)
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

"""Shared geometries, layers and helpers of the test suite.

Expected values in the tests are computed by hand from SPEC.md and seed 000. The
helpers here only build inputs and compute areas independently of evalcore (with
pyproj and shapely directly), so a test never takes its expected value from the code
under test.

Places
------
* UTM zone 13N (EPSG:32613) around easting 500 000, northing 4 400 000 (Colorado).
* EPSG:4326 around lon -105, lat 40.
* EPSG:6933 (the default equal-area CRS) around the same place: geometries given in
  EPSG:6933 itself are not reprojected for areas and IoU, so ratios of boxes with
  integer coordinates are exact there (IoU exactly 0.5, areas exactly 10 000 m²).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd
import shapely
from pyproj import CRS, Transformer
from shapely.geometry import box

__all__ = [
    "UTM",
    "WGS84",
    "EA",
    "X0",
    "Y0",
    "LON0",
    "LAT0",
    "EA_X0",
    "EA_Y0",
    "square",
    "rect",
    "strip",
    "strips",
    "layer",
    "empty_layer",
    "ea_area",
    "ea_areas",
    "SUMMARY_KEYS",
    "TOLERANCE_SUMMARY_KEYS",
    "FAMILY_KEYS",
    "STUDY_AREA_KEYS",
    "LEAKAGE_KEYS",
    "GROUP_KEYS",
    "run_cli",
    "cli_in_process",
    "INTERVAL_BLOCKS",
    "BOUNDARY_VALUE_KEYS",
    "FRAME_COLUMNS",
    "scenario_a",
    "grid_layers",
    "assert_metrics_equal",
    "naive_sha256",
    "strict_json",
    "without_partition_size",
]

_ROOT = Path(__file__).resolve().parents[1]

UTM = "EPSG:32613"
WGS84 = "EPSG:4326"
EA = "EPSG:6933"

X0, Y0 = 500_000.0, 4_400_000.0  # UTM 13N: lon -105, lat ~39.75
LON0, LAT0 = -105.0, 40.0
EA_X0, EA_Y0 = -10_131_000.0, 4_707_000.0  # EPSG:6933 near lon -105, lat 40

# Width of one "unit" of a strip layer, per CRS (x direction), and its height.
_UNIT = {UTM: (100.0, 100.0), EA: (100.0, 100.0), WGS84: (0.001, 0.001)}
_ORIGIN = {UTM: (X0, Y0), EA: (EA_X0, EA_Y0), WGS84: (LON0, LAT0)}


def square(x0: float, y0: float, side: float) -> shapely.Polygon:
    """Axis-aligned square with its lower-left corner at (x0, y0)."""
    return box(x0, y0, x0 + side, y0 + side)


def rect(x0: float, y0: float, x1: float, y1: float) -> shapely.Polygon:
    return box(x0, y0, x1, y1)


def strip(a: float, b: float, crs: str = UTM, row: float = 0.0) -> shapely.Polygon:
    """The box [a, b] x [row, row + 1] in units of the CRS's grid (100 m, or 0.001 deg).

    All strips of one row share the same y (or latitude) extent, so their areas are
    proportional to ``b - a`` in every CRS used here: exactly in UTM and EPSG:6933, and
    in EPSG:4326 because EPSG:6933 is cylindrical (a lon/lat box maps to a box).
    """
    (ux, uy), (ox, oy) = _UNIT[crs], _ORIGIN[crs]
    return box(ox + a * ux, oy + row * uy, ox + b * ux, oy + (row + 1) * uy)


def strips(intervals: Sequence[tuple[float, float]], crs: str = UTM, row: float = 0.0) -> list[shapely.Polygon]:
    return [strip(a, b, crs, row) for a, b in intervals]


def layer(geoms: Sequence[object], crs: str | None = UTM, index: Sequence[object] | None = None, **columns: object) -> geopandas.GeoDataFrame:
    """A GeoDataFrame of ``geoms`` with optional index labels and attribute columns."""
    data = dict(columns)
    return geopandas.GeoDataFrame(data, geometry=list(geoms), crs=crs, index=None if index is None else pd.Index(index))


def empty_layer(crs: str | None = UTM) -> geopandas.GeoDataFrame:
    return geopandas.GeoDataFrame(geometry=geopandas.GeoSeries([], crs=crs), crs=crs)


def ea_area(geom: shapely.Geometry, crs: str) -> float:
    """Area (m²) of ``geom`` in EPSG:6933, computed here with pyproj directly.

    Edges are split finely (1 m, or 1e-5 degree) before reprojection, which is how
    SPEC section 2.3 defines the area up to a negligible difference.
    """
    src = CRS.from_user_input(crs)
    if src == CRS.from_user_input(EA):
        return float(shapely.area(geom))
    step = 1e-5 if src.is_geographic else 1.0
    transformer = Transformer.from_crs(src, EA, always_xy=True)

    def _apply(coords: np.ndarray) -> np.ndarray:
        x, y = transformer.transform(coords[:, 0], coords[:, 1])
        return np.column_stack([x, y])

    return float(shapely.area(shapely.transform(shapely.segmentize(geom, step), _apply)))


def ea_areas(geoms: Sequence[shapely.Geometry], crs: str) -> np.ndarray:
    return np.array([ea_area(g, crs) for g in geoms])


# Seed 000, "Summary metrics" (kept from 0.1.x and added in 1.0), in no particular order.
SUMMARY_KEYS = frozenset(
    {
        "precision", "recall", "f1", "iou_mean", "over_segmentation", "under_segmentation",
        "area_error_mean_m2", "count_predicted", "count_reference", "count_tp", "count_fp",
        "count_fn", "iou_threshold", "best_iou_mean", "area_weighted_recall",
        "area_weighted_precision", "area_weighted_f1", "reference_area_ha", "predicted_area_ha",
        "median_area_ha", "area_error_signed_mean_m2", "oversegmentation_mean",
        "undersegmentation_mean", "hausdorff_mean_m", "hausdorff_median_m",
        "boundary_distance_mean_m", "boundary_distance_median_m", "boundary_sample_spacing_m",
        "boundary_sample_spacing_max_m", "count_fp_unassigned", "count_predicted_dropped",
        "count_reference_dropped", "count_predicted_repaired", "count_reference_repaired",
        "matching", "equal_area_crs", "distance_crs", "utm_epsg_codes",
        "warnings",  # ours: the run's warnings about its inputs (evalcore/layer_warnings.py), [] when none
    }
)
# The seed-000 keys every group entry carries: the summary keys that are values of the
# group's fields, not settings or facts of the whole run.
RUN_LEVEL_KEYS = frozenset(
    {
        "iou_threshold", "boundary_sample_spacing_m", "count_fp_unassigned", "count_predicted_dropped",
        "count_reference_dropped", "count_predicted_repaired", "count_reference_repaired", "matching",
        "equal_area_crs", "distance_crs", "utm_epsg_codes", "warnings",
    }
)
GROUP_KEYS = SUMMARY_KEYS - RUN_LEVEL_KEYS
# Keys of the round-2 families that are on by default (SPEC 6.1, 6.2).
FAMILY_KEYS = frozenset(
    {
        "iou_sweep", "count_merges", "count_merged_reference", "count_splits",
        "count_split_predictions", "count_ratio", "majority_fraction", "precision_touching", "tiles",
        "count_fp_background", "count_fp_duplicate", "count_fp_localisation", "count_fn_missed", "count_fn_localisation",
        # geometry quality (SPEC 6.11); boundary IoU only with boundary_iou_width_m
        "pq", "sq", "rq", "iou_distribution", "dice_mean", "area_bias", "matched_area_bias",
    }
)
# Run-level keys with a study area (SPEC 6.9, docs/study-area.md), and with a training area.
STUDY_AREA_KEYS = frozenset({"study_area", "count_reference_outside_study_area", "count_predicted_outside_study_area"})
LEAKAGE_KEYS = frozenset({"leakage"})
# Keys that hold bootstrap intervals (the top-level block, and every group's and sweep entry's).
INTERVAL_BLOCKS = frozenset({"bootstrap", "ci", "ci_n_undefined"})
# Seed 000, "With boundary_tolerance_m".
TOLERANCE_SUMMARY_KEYS = frozenset(
    {
        "boundary_recall", "boundary_precision", "boundary_f1", "coverage_within_tolerance",
        "coverage_within_tolerance_area", "boundary_tolerance_m", "count_boundary_errors",
    }
)
# Keys whose values come from evalcore/boundary.py; the tests here only check they exist.
BOUNDARY_VALUE_KEYS = frozenset(
    {
        "hausdorff_mean_m", "hausdorff_median_m", "boundary_distance_mean_m",
        "boundary_distance_median_m", "boundary_sample_spacing_max_m",
    }
) | TOLERANCE_SUMMARY_KEYS

# Seed 000, "Per-field table", in the listed order.
FRAME_COLUMNS = [
    "area_m2", "area_ha", "perimeter_m", "utm_epsg", "matched", "pred_index", "iou", "pred_area_m2",
    "best_iou", "n_overlapping_pred", "max_overlap_pred_index", "oversegmentation",
    "undersegmentation", "hausdorff_m", "boundary_mean_distance_m", "boundary_sample_spacing_m", "tile_x", "tile_y",
    "error_code", "merge", "split",
]

# Scenario A, in units of the strip grid (all strips in one row, y extent [0, 1]):
#   R0 = [0, 1]  R1 = [2, 3]  R2 = [4, 6]  R3 = [8, 9]
#   P0 = [0, 0.9]      inside R0:  IoU 0.9
#   P1 = [2.5, 3.5]    half of R1: IoU 0.5 / 1.5 = 1/3
#   P2 = [4, 5.2]      inside R2:  IoU 1.2 / 2 = 0.6
#   P3 = [5.2, 6]      inside R2:  IoU 0.8 / 2 = 0.4
#   P4 = [10, 11]      overlaps nothing
SCENARIO_A_REF = [(0.0, 1.0), (2.0, 3.0), (4.0, 6.0), (8.0, 9.0)]
SCENARIO_A_PRED = [(0.0, 0.9), (2.5, 3.5), (4.0, 5.2), (5.2, 6.0), (10.0, 11.0)]
SCENARIO_A_REF_INDEX = [10, 11, 12, 13]
SCENARIO_A_PRED_INDEX = [100, 101, 102, 103, 104]


def scenario_a(crs: str = UTM, **ref_columns: object) -> tuple[geopandas.GeoDataFrame, geopandas.GeoDataFrame]:
    """(predicted, reference) of scenario A in ``crs`` (UTM, EPSG:4326 or EPSG:6933)."""
    ref = layer(strips(SCENARIO_A_REF, crs), crs, index=SCENARIO_A_REF_INDEX, **ref_columns)
    pred = layer(strips(SCENARIO_A_PRED, crs), crs, index=SCENARIO_A_PRED_INDEX)
    return pred, ref


def grid_layers(
    n: int,
    *,
    shifts: Sequence[float] = (0.0, 0.15, 0.3, 0.45, 0.6),
    spacing_m: float = 300.0,
    side_m: float = 100.0,
    n_cols: int = 20,
    extra_fp: int = 0,
    crs: str = UTM,
) -> tuple[geopandas.GeoDataFrame, geopandas.GeoDataFrame]:
    """(predicted, reference): ``n`` squares on a grid, each with a prediction shifted by
    ``shifts[i % len(shifts)] * side`` along x (IoU (1 - s) / (1 + s)), plus ``extra_fp``
    predictions far from every reference field."""
    refs, preds = [], []
    for i in range(n):
        x = X0 + (i % n_cols) * spacing_m
        y = Y0 + (i // n_cols) * spacing_m
        refs.append(square(x, y, side_m))
        s = shifts[i % len(shifts)] * side_m
        preds.append(square(x + s, y, side_m))
    for j in range(extra_fp):
        preds.append(square(X0 - 5_000.0 - j * spacing_m, Y0, side_m))
    return layer(preds, crs), layer(refs, crs)


def _same(a: object, b: object, rel: float) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=rel * 1e-3)
    return a == b


def assert_metrics_equal(a: dict, b: dict, *, rel: float = 1e-9, skip: frozenset | set = frozenset()) -> None:
    """Every key of two summary dicts equal (floats to ``rel``, NaN == NaN), recursively."""
    assert set(a) - set(skip) == set(b) - set(skip)
    for key in sorted(set(a) - set(skip)):
        va, vb = a[key], b[key]
        if isinstance(va, dict):
            assert_metrics_equal(va, vb, rel=rel, skip=skip)
        elif isinstance(va, list) and va and isinstance(va[0], dict):
            assert len(va) == len(vb), (key, len(va), len(vb))
            for x, y in zip(va, vb):
                assert_metrics_equal(x, y, rel=rel, skip=skip)
        elif isinstance(va, list) and va and isinstance(va[0], float):
            assert len(va) == len(vb) and all(_same(x, y, rel) for x, y in zip(va, vb)), (key, va, vb)
        else:
            assert _same(va, vb, rel), (key, va, vb)


def run_cli(*args: str, cwd: str | Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m evalcore.cli ARGS`` in a subprocess, output captured (what a user sees)."""
    return subprocess.run(
        [sys.executable, "-m", "evalcore.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd or _ROOT
    )


def cli_in_process(*args: str | bytes | Path, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """``evalcore ARGS`` in this process: :func:`evalcore.cli.main`'s exit status and what it printed.

    No 1-2 s of imports per call, as :func:`run_cli` pays (much more on loaded cores).
    Standard output and error are captured, and the records that the command's own
    terminal handler would print go to the captured standard error too: under pytest
    the root logger has pytest's handlers, so :func:`evalcore.logs.configure_logging`
    adds none. A bytes argument becomes what Python makes of it in ``sys.argv``
    (:func:`os.fsdecode`: undecodable bytes as surrogate escapes); ``cwd``, the working
    directory during the call; ``--help`` (argparse's ``SystemExit``) gives its exit status.
    """
    import io
    import logging

    from evalcore.cli import main
    from evalcore.logs import TerminalHandler

    argv = [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    handler = TerminalHandler(0)  # writes to whatever sys.stderr is: ``err`` below
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.chdir(cwd or os.getcwd()):
            status = main(argv)
    except SystemExit as exc:  # what the interpreter would make of it
        status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        root.removeHandler(handler)
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def naive_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, without the project's helper."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def strict_json(path: str | Path) -> object:
    """A JSON file read refusing NaN and infinity (Python's reader accepts them by default)."""
    def refuse(name: str) -> None:
        raise ValueError(f"{path}: {name} in JSON")

    return json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=refuse)


def without_partition_size(metrics: dict) -> dict:
    """A summary without the bootstrap block's ``partition_size_m`` (the one key that names
    the partitioning, for comparing runs partitioned differently)."""
    out = dict(metrics)
    if "bootstrap" in out:
        out["bootstrap"] = {k: v for k, v in out["bootstrap"].items() if k != "partition_size_m"}
    return out


#: The file that fills a :func:`full_disk`.
FILLER = ".filler"


@contextlib.contextmanager
def full_disk(path: Path):
    """A full disk at ``path``: a 1 MiB tmpfs mounted there and filled by :data:`FILLER`.

    Mounting needs root; the test is skipped where it cannot be done.
    """
    import pytest

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a full disk) needs root")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        fd = os.open(path / FILLER, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 65_536)
        except OSError:  # ENOSPC: the disk is full
            pass
        finally:
            os.close(fd)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)

"""Bad input, round 3 (issue 27, items 13 and 14): through the real command line.

Item 13, errors: each case runs the command line (:func:`evalcore.cli.main` in this
process, standard output and error captured; ``python -m evalcore.cli`` in a subprocess
for one refusal and for the cases of ``evalcore run``) and checks exit status 2,
exactly one error line on standard error naming the file or flag at fault, no
traceback, and no output written. Cases: duplicate column names (also on a
cluster), a local engineering CRS, a file name that is not UTF-8, a partition size
of 1e-20 km, the geometry column given as --strata-column or --aoi-id-column, a FIFO
given as a layer, a full disk (a 1 MiB tmpfs filled up), and an input error found on
a worker during ``evalcore run``.

Item 14, warnings: classic mistakes that pass every check (degrees labelled as a
projected CRS, swapped axes that stay in range, a layer of LineStrings, two places
that do not meet) still exit 0, but ``metrics.json`` carries a ``warnings`` list of
``{"code", "message"}`` and the terminal summary prints each message; the list is the
same in process and on a cluster.

Expected values are worked out by hand from the layers built here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import geopandas
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import shapely
from pyproj import CRS
from shapely.geometry import LineString, box

from tests.common import FILLER, UTM, WGS84, X0, Y0, cli_in_process
from tests.common import full_disk as common_full_disk

# A run's line per phase (evalcore.logs.PhaseProgress), printed before a later phase fails.
PHASE_LINE = re.compile(r"(prepare|pairs|sums|predictions) +\d+ (chunks|partitions) in \d+\.\d s")

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ["--cluster", "local", "--workers", "1", "--in-process-below", "0"]


# --------------------------------------------------------------------------------------
# Inputs and the command line
# --------------------------------------------------------------------------------------


def squares(n: int, dx: float = 0.0, dy: float = 0.0) -> list:
    """``n`` 100 m squares 200 m apart in UTM 13N, shifted by ``(dx, dy)`` metres."""
    return [box(X0 + 200 * i + dx, Y0 + dy, X0 + 200 * i + 100 + dx, Y0 + 100 + dy) for i in range(n)]


def frame(geoms: list, crs: object = UTM, **columns: object) -> geopandas.GeoDataFrame:
    return geopandas.GeoDataFrame(columns, geometry=geopandas.GeoSeries(geoms, crs=crs), crs=crs)


@pytest.fixture
def ref(tmp_path: Path) -> Path:
    """Three squares with a stratum column, in a GeoPackage (geometry column 'geom')."""
    path = tmp_path / "in" / "reference.gpkg"
    path.parent.mkdir(parents=True, exist_ok=True)
    frame(squares(3), county=["a", "b", "c"]).to_file(path, layer="fields")
    return path


@pytest.fixture
def pred(tmp_path: Path) -> Path:
    """The reference squares shifted by 10 m (IoU 90/110 each: three matches)."""
    path = tmp_path / "in" / "predicted.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    frame(squares(3, 10.0), score=[0.9, 0.5, 0.2]).to_parquet(path)
    return path


def cli(*args: str | bytes | Path) -> subprocess.CompletedProcess:
    """``evalcore ARGS`` in this process (:func:`tests.common.cli_in_process`).

    A subprocess pays 1-2 s of imports per case (far more on loaded cores);
    :func:`cli_subprocess` keeps one refusal and the ``run`` cases on the real command.
    """
    return cli_in_process(*args)


def cli_subprocess(*args: str | bytes | Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m evalcore.cli ARGS`` in a subprocess: the real exit status and streams."""
    return subprocess.run([sys.executable, "-m", "evalcore.cli", *map(_arg, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def _arg(value: str | bytes | Path) -> str | bytes:
    return value if isinstance(value, bytes) else str(value)


def files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_fifo()}


def error_line(proc: subprocess.CompletedProcess, status: int = 2) -> str:
    """The one line a failure prints (besides the run's progress lines and the dashboard link)."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = [line for line in proc.stderr.splitlines()
             if not line.startswith(("INFO prefect.flow_runs:", "Dask dashboard")) and not PHASE_LINE.fullmatch(line)]
    assert proc.returncode == status, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("evalcore: error: "), proc.stderr
    return lines[0]


def refused(tmp_path: Path, *args: str | bytes | Path, needles: tuple[str, ...], command: str = "evaluate",
            run: Callable[..., subprocess.CompletedProcess] = cli) -> str:
    """Run a command that must be refused (``run``: :func:`cli` or :func:`cli_subprocess`):
    exit 2, one line with every needle, nothing written."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    before = files(tmp_path)
    tail = ["-q", *args, "-o", out / "metrics.json"] if command == "evaluate" else [*args]
    line = error_line(run(command, *tail))
    for needle in needles:
        assert needle in line, (needle, line)
    assert files(tmp_path) == before, "an output was left behind"
    return line


# --------------------------------------------------------------------------------------
# Item 13: one line, exit 2
# --------------------------------------------------------------------------------------


def _duplicate_columns(path: Path) -> Path:
    """A GeoParquet file with two columns named 'score' (pyarrow allows it; pandas cannot write it)."""
    good = pq.read_table(_write(frame(squares(3, 10.0), score=[0.9, 0.5, 0.2]), path.with_suffix(".tmp.parquet")))
    table = pa.Table.from_arrays([good["score"], good["score"], good["geometry"]], names=["score", "score", "geometry"])
    pq.write_table(table.replace_schema_metadata(good.schema.metadata), path)
    path.with_suffix(".tmp.parquet").unlink()
    return path


def _write(gdf: geopandas.GeoDataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    gdf.to_parquet(path)
    return path


def test_duplicate_column_names(tmp_path: Path, ref: Path):
    dup = _duplicate_columns(tmp_path / "in" / "dup.parquet")
    refused(tmp_path, "-p", dup, "-r", ref, needles=(str(dup), "two columns named 'score'"))


@pytest.mark.cli
def test_a_refusal_through_the_real_command(tmp_path: Path, ref: Path):
    """The cases here call :func:`main` in this process; once through ``python -m evalcore.cli``:
    the process's own exit status 2 and its standard error, the same line as in process."""
    dup = _duplicate_columns(tmp_path / "in" / "dup.parquet")
    in_process = refused(tmp_path, "-p", dup, "-r", ref, needles=(str(dup), "two columns named 'score'"))
    assert refused(tmp_path, "-p", dup, "-r", ref, needles=(str(dup),), run=cli_subprocess) == in_process


@pytest.mark.cluster
def test_duplicate_column_names_on_a_cluster(tmp_path: Path, ref: Path):
    dup = _duplicate_columns(tmp_path / "in" / "dup.parquet")
    in_process = refused(tmp_path, "-p", dup, "-r", ref, needles=(str(dup),))
    on_cluster = refused(tmp_path, "-p", dup, "-r", ref, "--strata-column", "county", *CLUSTER, needles=(str(dup),))
    assert on_cluster == in_process


def test_local_engineering_crs(tmp_path: Path, ref: Path):
    engineering = CRS.from_wkt(
        'ENGCRS["site grid",EDATUM["site"],CS[Cartesian,2],AXIS["x",east,ORDER[1],LENGTHUNIT["metre",1]],'
        'AXIS["y",north,ORDER[2],LENGTHUNIT["metre",1]]]'
    )
    path = _write(frame([box(0, 0, 100, 100), box(200, 0, 300, 100)], crs=engineering), tmp_path / "in" / "site.parquet")
    refused(tmp_path, "-p", path, "-r", ref, needles=(str(path), "engineering CRS", "'site grid'", "no known relation to the Earth"))


def test_file_name_that_is_not_utf8(tmp_path: Path, ref: Path, pred: Path):
    name = os.fsencode(tmp_path / "in") + b"/pred\xff.parquet"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, pred.read_bytes())
    os.close(fd)
    line = refused(tmp_path, "-p", name, "-r", ref, needles=("pred\\xff.parquet", "not valid UTF-8", "byte 0xff"))
    assert "corrupt" not in line and "truncated" not in line


@pytest.mark.parametrize("km", ["1e-20", "inf", "0.00001"])
def test_partition_km_out_of_bounds(tmp_path: Path, ref: Path, pred: Path, km: str):
    refused(tmp_path, "-p", pred, "-r", ref, "--partition-km", km, needles=("--partition-km", "at least 50 m"))


def test_geometry_column_as_strata_column(tmp_path: Path, ref: Path, pred: Path):
    # 'geometry' is the column's name in the frame; 'geom' is its name in the GeoPackage.
    refused(tmp_path, "-p", pred, "-r", ref, "--strata-column", "geometry",
            needles=("--strata-column 'geometry'", "geometry column", str(ref), "'county'"))


@pytest.mark.cluster
def test_geometry_column_as_strata_column_on_a_cluster(tmp_path: Path, ref: Path, pred: Path):
    refused(tmp_path, "-p", pred, "-r", ref, "--strata-column", "geom", *CLUSTER,
            needles=("--strata-column 'geom'", "geometry column", str(ref)))


def test_geometry_column_as_aoi_id_column(tmp_path: Path, ref: Path, pred: Path):
    aoi = tmp_path / "in" / "aoi.gpkg"
    frame([box(X0 - 1_000, Y0 - 1_000, X0 + 2_000, Y0 + 1_000)], name=["north"]).to_file(aoi)
    refused(tmp_path, "-p", pred, "-r", ref, "--aoi", aoi, "--aoi-id-column", "geometry",
            needles=("--aoi-id-column 'geometry'", "geometry column", str(aoi), "'name'"))


@pytest.mark.timeout(120)  # opening the FIFO would block: a hang fails
@pytest.mark.parametrize("role", ["-p", "-r"])
def test_fifo_is_refused_without_being_opened(tmp_path: Path, ref: Path, pred: Path, role: str):
    fifo = tmp_path / "in" / "layer.parquet"
    os.mkfifo(fifo)
    args = ("-p", fifo, "-r", ref) if role == "-p" else ("-p", pred, "-r", fifo)
    refused(tmp_path, *args, needles=(str(fifo), "not a regular file or directory", "FIFO"))


# ---- a full disk: a 1 MiB tmpfs, filled


@pytest.fixture
def full_disk(tmp_path: Path):
    with common_full_disk(tmp_path / "full") as mount:
        yield mount


@pytest.mark.parametrize("target", ["-o", "--frame-out"])
def test_full_disk(tmp_path: Path, ref: Path, pred: Path, full_disk: Path, target: str):
    out = tmp_path / "out"
    out.mkdir()
    path = full_disk / ("metrics.json" if target == "-o" else "fields.gpkg")
    args = ["-o", path] if target == "-o" else ["-o", out / "metrics.json", "--frame-out", path]
    line = error_line(cli("evaluate", "-q", "-p", pred, "-r", ref, *args))
    assert f"cannot write {str(path)!r}" in line and "the disk is full" in line, line
    assert files(full_disk) == {full_disk / FILLER} and files(out) == set()


@pytest.mark.cli
@pytest.mark.cluster  # evalcore run: a flow on a LocalCluster, in a subprocess
def test_full_disk_in_run(tmp_path: Path, ref: Path, pred: Path, full_disk: Path, prefect_server: str):
    run_dir = full_disk / "run"
    env = dict(os.environ, PREFECT_API_URL=prefect_server, PREFECT_SERVER_ANALYTICS_ENABLED="false")
    line = error_line(cli_subprocess("run", "-p", pred, "-r", ref, "-o", run_dir, "--workers", "1", env=env, timeout=300))
    assert f"cannot write '{run_dir}" in line and "the disk is full" in line, line
    assert not (run_dir / "metrics.json").exists() and not (run_dir / "manifest.json").exists()


@pytest.mark.cli
@pytest.mark.cluster  # evalcore run: a flow on a LocalCluster, in a subprocess
@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_worker_side_bad_input_in_run(tmp_path: Path, ref: Path, prefect_server: str):
    """NaN coordinates are found only when a worker prepares the layer, after every check of `run`."""
    import struct

    coords = np.array([(X0 + 200, Y0), (np.nan, Y0), (X0 + 300, Y0 + 100), (X0 + 200, Y0 + 100), (X0 + 200, Y0)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        nan_square = shapely.from_wkb(struct.pack("<BIII", 1, 3, 1, len(coords)) + coords.astype("<f8").tobytes())
    bad = _write(frame([squares(1, 10.0)[0], nan_square]), tmp_path / "in" / "nan.parquet")
    run_dir = tmp_path / "run"
    env = dict(os.environ, PREFECT_API_URL=prefect_server, PREFECT_SERVER_ANALYTICS_ENABLED="false")
    line = error_line(cli_subprocess("run", "-p", bad, "-r", ref, "-o", run_dir, "--workers", "1", env=env, timeout=300))
    assert str(bad) in line and "NaN or infinite coordinates in row 1" in line, line
    assert not (run_dir / "metrics.json").exists()
    assert "Traceback" in (run_dir / "logs" / "run.log").read_text()  # the whole story stays in the run's log


# --------------------------------------------------------------------------------------
# Item 14: exit 0, with warnings
# --------------------------------------------------------------------------------------


def evaluate_with_warnings(tmp_path: Path, pred: Path, ref: Path, *extra: str) -> tuple[dict, str]:
    out = tmp_path / "out" / ("cluster.json" if extra else "metrics.json")
    out.parent.mkdir(exist_ok=True)
    proc = cli("evaluate", "-p", pred, "-r", ref, "-o", out, *extra)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(out.read_text()), proc.stdout


def codes(metrics: dict) -> list[str]:
    return [w["code"] for w in metrics["warnings"]]


def test_degrees_labelled_as_a_projected_crs(tmp_path: Path, ref: Path):
    # Longitude/latitude values (around -105, 39.7) labelled UTM 13N: a few metres from
    # (0, 0) of the zone's grid, thousands of kilometres from the reference.
    degrees = [box(-105.0 + 0.002 * i, 39.72, -105.0 + 0.002 * i + 0.001, 39.721) for i in range(3)]
    path = _write(frame(degrees), tmp_path / "in" / "degrees.parquet")
    metrics, stdout = evaluate_with_warnings(tmp_path, path, ref)
    assert (metrics["count_tp"], metrics["count_fp"], metrics["count_fn"]) == (0, 3, 3)
    assert codes(metrics) == ["disjoint_extents"]
    message = metrics["warnings"][0]["message"]
    assert "CRS label" in message and "x and y are not swapped" in message and "right two files" in message
    assert f"warning: {message}" in stdout.splitlines()


def test_swapped_axes_that_stay_in_range(tmp_path: Path):
    # Reference squares of 0.001 degree at (lon 40 + 0.01 k, lat 40 + 0.005 k), k = 1..4;
    # the predictions are the same squares with x and y swapped. The extents overlap
    # (both span 40.005-40.041 by 40.005-40.041 about), but square k of one layer and
    # square j of the other would need 0.01 k = 0.005 j and 0.005 k = 0.01 j: none meet.
    def cells(swap: bool) -> list:
        out = []
        for k in range(1, 5):
            x, y = 40.0 + 0.01 * k, 40.0 + 0.005 * k
            x, y = (y, x) if swap else (x, y)
            out.append(box(x, y, x + 0.001, y + 0.001))
        return out

    ref = _write(frame(cells(False), crs=WGS84), tmp_path / "in" / "ref.parquet")
    pred = _write(frame(cells(True), crs=WGS84), tmp_path / "in" / "swapped.parquet")
    metrics, stdout = evaluate_with_warnings(tmp_path, pred, ref)
    assert (metrics["count_tp"], metrics["f1"]) == (0, 0.0)
    assert codes(metrics) == ["no_overlap"]
    message = metrics["warnings"][0]["message"]
    assert "4 predictions, 4 reference fields" in message and "x and y are not swapped" in message
    assert f"warning: {message}" in stdout.splitlines()


def test_layer_whose_every_row_is_dropped(tmp_path: Path, ref: Path):
    lines = tmp_path / "in" / "lines.gpkg"
    frame([LineString([(X0, Y0 + 10 * i), (X0 + 100, Y0 + 10 * i)]) for i in range(3)]).to_file(lines, layer="fields")
    metrics, stdout = evaluate_with_warnings(tmp_path, lines, ref)
    assert (metrics["count_predicted"], metrics["count_predicted_dropped"]) == (0, 3)
    assert codes(metrics) == ["most_rows_dropped"]
    message = metrics["warnings"][0]["message"]
    assert message.startswith("3 of the 3 rows of the predicted layer were dropped") and "not lines or points" in message
    assert f"warning: {message}" in stdout.splitlines()


def test_half_the_rows_dropped_is_no_warning(tmp_path: Path, ref: Path):
    # 2 of 4 rows dropped is not "more than half"; the two squares match.
    geoms = [*squares(2, 10.0), LineString([(X0, Y0), (X0 + 100, Y0)]), None]
    path = _write(frame(geoms), tmp_path / "in" / "half.parquet")
    metrics, stdout = evaluate_with_warnings(tmp_path, path, ref)
    assert (metrics["count_predicted_dropped"], metrics["count_tp"], metrics["warnings"]) == (2, 2, [])
    assert "warning:" not in stdout


def test_layers_whose_extents_do_not_intersect(tmp_path: Path, ref: Path):
    far = _write(frame(squares(3, dy=100_000.0)), tmp_path / "in" / "far.parquet")  # 100 km north
    metrics, _ = evaluate_with_warnings(tmp_path, far, ref)
    assert codes(metrics) == ["disjoint_extents"]


def test_a_good_run_has_no_warnings(tmp_path: Path, ref: Path, pred: Path):
    metrics, stdout = evaluate_with_warnings(tmp_path, pred, ref)
    assert metrics["count_tp"] == 3 and metrics["warnings"] == []
    assert "warning:" not in stdout


@pytest.mark.cluster
def test_warnings_are_the_same_on_a_cluster(tmp_path: Path, ref: Path):
    # Four rows, three of them lines (3 of 4 dropped), the one polygon 100 km north.
    geoms = [squares(1, dy=100_000.0)[0], *[LineString([(X0, Y0 + i), (X0 + 100, Y0 + i)]) for i in range(3)]]
    path = _write(frame(geoms), tmp_path / "in" / "mixed.parquet")
    single, _ = evaluate_with_warnings(tmp_path, path, ref)
    spread, stdout = evaluate_with_warnings(tmp_path, path, ref, *CLUSTER)
    assert codes(single) == ["most_rows_dropped", "disjoint_extents"]
    assert single["warnings"][0]["message"].startswith("3 of the 4 rows of the predicted layer")
    assert spread["warnings"] == single["warnings"]
    assert all(f"warning: {w['message']}" in stdout.splitlines() for w in spread["warnings"])

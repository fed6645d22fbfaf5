"""A newcomer's first hour, through the command line (``main(argv)`` in this process,
streams captured: :func:`tests.common.cli_in_process`; the umask case in a real
subprocess, as the process's umask is what it tests): outputs
that never destroy an input, outputs checked before any work and readable by colleagues,
formats that follow the file name, no silent no-ops, help that helps, early argument
checks, joinable tables and a summary that reads right."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import geopandas
import pyogrio
import pytest

from evalcore.synth import write_layers
from tests.common import cli_in_process

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    pred, ref = write_layers(out, 300, seed=2)
    return Path(pred), Path(ref)


cli = cli_in_process


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("evalcore: error: "), proc.stderr
    return lines[0]


def files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


# 1. -o never destroys an input, and two outputs never share a path


@pytest.mark.parametrize("target", ["reference", "predicted"])
def test_an_output_that_is_an_input_is_refused_before_any_work(data, tmp_path, target):
    pred, ref = data
    victim = ref if target == "reference" else pred
    before = victim.read_bytes()
    line = one_error_line(cli("evaluate", "-p", str(pred), "-r", str(ref), "-o", str(victim)))
    assert "input layer" in line and str(victim) in line
    assert victim.read_bytes() == before


def test_an_output_given_twice_and_an_input_reached_by_another_spelling_are_refused(data, tmp_path):
    pred, ref = data
    same = tmp_path / "same.parquet"
    line = one_error_line(cli("evaluate", "-p", str(pred), "-r", str(ref), "--frame-out", str(same), "-o", str(same)))
    assert "is also -o/--output" in line and not same.exists()
    # A relative spelling of the input from another directory is the same file.
    line = one_error_line(cli("evaluate", "-p", str(pred), "-r", str(ref), "-o", f"../{ref.parent.name}/{ref.name}", cwd=tmp_path.parent / ref.parent.name))
    assert "input layer of -r/--reference" in line


# 4. Unwritable or missing output locations are found first, named as the user gave them


@pytest.fixture()
def unreadable(tmp_path) -> Path:
    """A layer file that fails as soon as it is read: an argument refused with it as the
    input was checked before any data was read."""
    path = tmp_path / "corrupt.parquet"
    path.write_bytes(b"PAR1" + b"\x00garbage" * 50 + b"PAR1")
    return path


def test_an_unwritable_output_is_found_before_any_work_and_named(data, unreadable, tmp_path):
    pred, ref = data
    line = one_error_line(cli("evaluate", "-p", str(unreadable), "-r", str(ref), "-o", "/proc/x.json"))
    assert "'/proc/x.json'" in line and "not writable" in line and ".tmp" not in line
    # The control: with a writable output, the same input is what fails.
    line = one_error_line(cli("evaluate", "-p", str(unreadable), "-r", str(ref), "-o", str(tmp_path / "m.json")))
    assert "Cannot read" in line and "corrupt.parquet" in line


def test_a_missing_parent_directory_is_refused_not_created(data, tmp_path):
    pred, ref = data
    target = tmp_path / "nonexistent" / "dir" / "x.json"
    line = one_error_line(cli("evaluate", "-p", str(pred), "-r", str(ref), "-o", str(target)))
    assert "does not exist" in line and "create it first" in line
    assert not (tmp_path / "nonexistent").exists()


# 5. Outputs are readable by colleagues: the umask's permissions, not mkstemp's 0600


def test_outputs_get_the_permissions_the_umask_implies(data, tmp_path):
    pred, ref = data
    out = tmp_path / "m.json"
    frame = tmp_path / "f.parquet"
    proc = subprocess.run(
        ["sh", "-c", f"umask 022 && exec {sys.executable} -m evalcore.cli evaluate -p {pred} -r {ref} -o {out} --frame-out {frame} -q"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    for path in (out, frame):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, (path, oct(path.stat().st_mode))


# 6. The output format follows the file name


@pytest.mark.parametrize(("name", "driver"), [("f.parquet", None), ("f.gpkg", "GPKG"), ("f.fgb", "FlatGeobuf")])
def test_frame_out_writes_what_its_extension_says(data, tmp_path, name, driver):
    pred, ref = data
    target = tmp_path / name
    proc = cli("evaluate", "-p", str(pred), "-r", str(ref), "-o", str(tmp_path / "m.json"), "--frame-out", str(target), "-q")
    assert proc.returncode == 0, proc.stderr
    if driver is None:
        frame = geopandas.read_parquet(target)
    else:
        assert pyogrio.read_info(target)["driver"] == driver
        frame = geopandas.read_file(target)
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert len(frame) == metrics["count_reference"] and frame.crs is not None
    assert "ref_index" in frame.columns and "__index_level_0__" not in frame.columns


def test_frame_out_with_a_trailing_slash_is_a_directory_of_parts(data, tmp_path):
    pred, ref = data
    proc = cli("evaluate", "-p", str(pred), "-r", str(ref), "-o", str(tmp_path / "m.json"), "--frame-out", f"{tmp_path / 'parts'}/", "-q")
    assert proc.returncode == 0, proc.stderr
    parts = sorted((tmp_path / "parts").glob("*.parquet"))
    assert parts and (tmp_path / "parts").is_dir()
    assert len(geopandas.read_parquet(tmp_path / "parts")) == json.loads((tmp_path / "m.json").read_text())["count_reference"]


def test_an_unknown_table_format_is_refused(data, tmp_path):
    pred, ref = data
    line = one_error_line(cli("evaluate", "-p", str(pred), "-r", str(ref), "-o", str(tmp_path / "m.json"), "--frame-out", str(tmp_path / "f.csv")))
    assert ".gpkg" in line and "f.csv" in line
    assert not list(tmp_path.iterdir())


# 8. No silent no-ops


@pytest.mark.parametrize("extra", [["--workers", "2"], ["--workdir", "work"]])
def test_cluster_only_options_without_cluster_are_refused(data, tmp_path, extra):
    pred, ref = data
    line = one_error_line(cli("evaluate", "-p", str(pred), "-r", str(ref), "-o", str(tmp_path / "m.json"), *extra))
    assert extra[0] in line and "--cluster" in line


# 9. Help that helps


@pytest.mark.parametrize("command", ["evaluate", "run"])
def test_every_option_has_one_line_of_help(command):
    from evalcore.cli import build_parser

    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]
    for action in sub._actions:
        if action.dest == "help":
            continue
        assert action.help, f"{command} {action.option_strings} has no help"
    text = cli(command, "--help").stdout
    for needle in ("--iou-threshold", "(default 0.5)", "--matching", "--bootstrap-seed", "(default 42)", "--tile-km", "kilometres"):
        assert needle in text, needle


# 10. Argument checks happen before any data is read, with one prefix


def test_bad_size_bins_are_refused_before_any_data_is_read_with_one_prefix(data, unreadable, tmp_path):
    pred, ref = data
    line = one_error_line(cli("evaluate", "-p", str(unreadable), "-r", str(ref), "-o", str(tmp_path / "m.json"), "--size-bins", "5,2,1"))
    assert "--size-bins" in line and "increasing" in line
    assert line.count("evalcore") == 1, line  # "evalcore: error: evaluate: argument --size-bins: ..."


# 11. Tables users can join


def test_the_per_field_table_carries_the_reference_id_and_the_prediction_ids(tmp_path):
    from shapely.geometry import box

    crs = "EPSG:32613"
    ref = geopandas.GeoDataFrame({"field_id": ["A-1", "A-2"]}, geometry=[box(0, 0, 100, 100), box(500, 0, 600, 100)], crs=crs)
    ref.index = [10, 20]
    pred = geopandas.GeoDataFrame({"det": ["d9", "d8"]}, geometry=[box(0, 0, 100, 101), box(2000, 0, 2100, 100)], crs=crs)
    ref.to_file(tmp_path / "ref.gpkg")
    pred.to_file(tmp_path / "pred.gpkg")
    out = tmp_path / "fields.parquet"
    proc = cli(
        "evaluate", "-p", str(tmp_path / "pred.gpkg"), "-r", str(tmp_path / "ref.gpkg"), "--ref-id-column", "field_id",
        "--pred-id-column", "det", "--frame-out", str(out), "--predictions-out", str(tmp_path / "preds.parquet"),
        "-o", str(tmp_path / "m.json"), "-q",
    )
    assert proc.returncode == 0, proc.stderr
    frame = geopandas.read_parquet(out)
    assert frame["field_id"].tolist() == ["A-1", "A-2"]
    # With --pred-id-column the matched prediction's column holds its id, and says so (issue 33, item 13).
    assert frame["pred_id"].tolist()[0] == "d9" and frame["pred_id"].isna().tolist() == [False, True]
    assert frame["max_overlap_pred_id"].tolist()[0] == "d9"
    assert "pred_index" not in frame and "max_overlap_pred_index" not in frame
    preds = geopandas.read_parquet(tmp_path / "preds.parquet")
    assert preds["det"].tolist() == ["d9", "d8"]
    assert preds["home_ref_id"].tolist()[0] == "A-1" and preds["home_ref_id"].isna().tolist() == [False, True]
    assert "home_ref_index" not in preds and "pred_index" not in preds
    # Without id columns the labels are row positions, under the index names.
    proc = cli("evaluate", "-p", str(tmp_path / "pred.gpkg"), "-r", str(tmp_path / "ref.gpkg"), "--frame-out", str(tmp_path / "f2.parquet"),
               "--predictions-out", str(tmp_path / "p2.parquet"), "-o", str(tmp_path / "m2.json"), "-q")
    assert proc.returncode == 0, proc.stderr
    frame, preds = geopandas.read_parquet(tmp_path / "f2.parquet"), geopandas.read_parquet(tmp_path / "p2.parquet")
    assert frame["ref_index"].tolist() == [0, 1] and frame["pred_index"].tolist()[0] == 0 and "pred_id" not in frame
    assert preds["pred_index"].tolist() == [0, 1] and preds["home_ref_index"].tolist()[0] == 0 and "home_ref_id" not in preds


def test_duplicate_or_missing_ids_are_refused(tmp_path):
    from shapely.geometry import box

    ref = geopandas.GeoDataFrame({"field_id": ["A", "A"]}, geometry=[box(0, 0, 1, 1), box(5, 0, 6, 1)], crs="EPSG:32613")
    ref.to_file(tmp_path / "ref.gpkg")
    line = one_error_line(cli("evaluate", "-p", str(tmp_path / "ref.gpkg"), "-r", str(tmp_path / "ref.gpkg"), "--ref-id-column", "field_id", "-o", str(tmp_path / "m.json")))
    assert "share the id 'A'" in line
    line = one_error_line(cli("evaluate", "-p", str(tmp_path / "ref.gpkg"), "-r", str(tmp_path / "ref.gpkg"), "--ref-id-column", "nope", "-o", str(tmp_path / "m.json")))
    assert "'nope' is not a column" in line and "'field_id'" in line


def test_evaluate_frame_offers_the_geodataframe():
    from shapely.geometry import box

    import evalcore

    ref = geopandas.GeoDataFrame(geometry=[box(0, 0, 100, 100)], crs="EPSG:32613")
    frame = evalcore.evaluate_frame(ref, ref, geometry=True)
    assert isinstance(frame, geopandas.GeoDataFrame) and frame.crs.to_epsg() == 32613
    assert frame.geometry.iloc[0].equals(ref.geometry.iloc[0])
    assert not isinstance(evalcore.evaluate_frame(ref, ref), geopandas.GeoDataFrame)


# 13. The summary reads right


def test_no_match_reads_na_not_zero_and_the_group_precision_note(tmp_path):
    from shapely.geometry import box

    crs = "EPSG:32613"
    ref = geopandas.GeoDataFrame({"county": ["a", "b"]}, geometry=[box(0, 0, 100, 100), box(500, 0, 600, 100)], crs=crs)
    far = geopandas.GeoDataFrame(geometry=[box(5000, 0, 5100, 100)], crs=crs)
    ref.to_file(tmp_path / "ref.gpkg")
    far.to_file(tmp_path / "far.gpkg")
    proc = cli("evaluate", "-p", str(tmp_path / "far.gpkg"), "-r", str(tmp_path / "ref.gpkg"), "-o", str(tmp_path / "m.json"))
    assert proc.returncode == 0, proc.stderr
    assert "mean IoU n/a (no matches)" in proc.stdout and "mean IoU 0.000" not in proc.stdout
    proc = cli("evaluate", "-p", str(tmp_path / "far.gpkg"), "-r", str(tmp_path / "ref.gpkg"), "--strata-column", "county", "-o", str(tmp_path / "m.json"))
    assert "overlap no reference field" in proc.stdout and "above the overall one" in proc.stdout


@pytest.mark.cluster
def test_ids_on_a_cluster_equal_ids_in_process(tmp_path):
    from shapely.geometry import box

    crs = "EPSG:32613"
    ref = geopandas.GeoDataFrame({"field_id": ["A-1", "A-2", "A-3"]}, geometry=[box(0, 0, 100, 100), box(500, 0, 600, 100), box(900, 0, 990, 90)], crs=crs)
    pred = geopandas.GeoDataFrame({"det": ["d9", "d8"]}, geometry=[box(0, 0, 100, 101), box(500, 0, 600, 99)], crs=crs)
    ref.to_parquet(tmp_path / "ref.parquet")
    pred.to_parquet(tmp_path / "pred.parquet")
    common = ["-p", str(tmp_path / "pred.parquet"), "-r", str(tmp_path / "ref.parquet"), "--ref-id-column", "field_id", "--pred-id-column", "det", "-q"]
    proc = cli("evaluate", *common, "--cluster", "local", "--workers", "1", "--in-process-below", "0",
               "--frame-out", f"{tmp_path / 'parts'}/", "--predictions-out", f"{tmp_path / 'pred-parts'}/",
               "--tiles-out", str(tmp_path / "tiles.parquet"), "-o", str(tmp_path / "c.json"))
    assert proc.returncode == 0, proc.stderr
    assert "Dask dashboard" in proc.stderr  # the cluster ran, though the layers are tiny
    frame = geopandas.read_parquet(tmp_path / "parts").sort_values("field_id")
    assert frame["field_id"].tolist() == ["A-1", "A-2", "A-3"]
    assert frame["pred_id"].tolist()[:2] == ["d9", "d8"] and frame["pred_id"].isna().tolist() == [False, False, True]
    cluster_preds = geopandas.read_parquet(tmp_path / "pred-parts").sort_values("det")
    assert cluster_preds["home_ref_id"].tolist() == ["A-2", "A-1"] and "home_ref_index" not in cluster_preds
    cluster_tiles = geopandas.read_parquet(tmp_path / "tiles.parquet")
    # The tile key column, as the summary names a tile (issue 33, item 13).
    assert cluster_tiles["tile"].tolist() == [f"{e}_{x}_{y}" for e, x, y in zip(cluster_tiles["epsg"], cluster_tiles["tile_x"], cluster_tiles["tile_y"])]

    # Without --in-process-below 0, five rows are evaluated in this process, which says so,
    # into the same kind of output (a directory of parts) with the same numbers.
    small = cli("evaluate", *common[:-1], "--cluster", "local", "--frame-out", f"{tmp_path / 'small'}/",
                "--predictions-out", f"{tmp_path / 'small-preds'}/", "--tiles-out", str(tmp_path / "small-tiles.parquet"), "-o", str(tmp_path / "s.json"))
    assert small.returncode == 0, small.stderr
    assert "evaluating in this process: the layers hold 5 rows, fewer than --in-process-below 200,000" in small.stderr
    assert "Dask dashboard" not in small.stderr
    assert json.loads((tmp_path / "s.json").read_text()) == json.loads((tmp_path / "c.json").read_text())
    in_process = geopandas.read_parquet(tmp_path / "small").sort_values("field_id")
    assert in_process["field_id"].tolist() == ["A-1", "A-2", "A-3"]
    assert in_process["pred_id"].tolist()[:2] == ["d9", "d8"]
    # The same columns, the same values, in this process and on the cluster.
    assert list(in_process.columns) == list(frame.columns)
    small_preds = geopandas.read_parquet(tmp_path / "small-preds").sort_values("det")
    assert list(small_preds.columns) == list(cluster_preds.columns)
    assert small_preds.drop(columns="geometry").reset_index(drop=True).equals(cluster_preds.drop(columns="geometry").reset_index(drop=True))
    small_tiles = geopandas.read_parquet(tmp_path / "small-tiles.parquet")
    assert small_tiles.drop(columns="geometry").equals(cluster_tiles.drop(columns="geometry"))

"""The command line: outputs, the summary, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import geopandas
import pytest
from shapely.geometry import box

from evalcore.cli import main

X0, Y0 = 500_000.0, 4_400_000.0


@pytest.fixture()
def layer_files(tmp_path: Path) -> tuple[Path, Path]:
    ref = geopandas.GeoDataFrame(
        {"county": ["a", "b", None]},
        geometry=[box(X0, Y0, X0 + 100, Y0 + 100), box(X0 + 200, Y0, X0 + 300, Y0 + 100), box(X0 + 400, Y0, X0 + 500, Y0 + 100)],
        crs="EPSG:32613",
    )
    pred = geopandas.GeoDataFrame(
        {"score": [0.9, 0.8]},
        geometry=[box(X0, Y0, X0 + 100, Y0 + 100), box(X0 + 5000, Y0, X0 + 5100, Y0 + 100)],
        crs="EPSG:32613",
    ).to_crs("EPSG:4326")
    ref_path, pred_path = tmp_path / "ref.gpkg", tmp_path / "pred.parquet"
    ref.to_file(ref_path, layer="fields")
    pred.to_parquet(pred_path)
    return pred_path, ref_path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_evaluate_writes_json_with_nulls_and_frame(layer_files, tmp_path, capsys):
    pred, ref = layer_files
    out = tmp_path / "out" / "metrics.json"
    out.parent.mkdir()  # evalcore creates no missing parent directory
    frame_out = tmp_path / "fields.parquet"
    status, stdout, _ = _run(
        capsys, "evaluate", "-p", str(pred), "-r", str(ref), "--ref-layer", "fields",
        "--strata-column", "county", "--size-bins", "0,0.5,1,2", "--frame-out", str(frame_out), "-o", str(out),
    )
    assert status == 0
    metrics = json.loads(out.read_text())
    # 1 of 3 reference fields matched by 1 of 2 predictions; the other overlaps nothing.
    assert (metrics["count_tp"], metrics["count_fp"], metrics["count_fn"]) == (1, 1, 2)
    assert metrics["count_fp_unassigned"] == 1
    assert math.isclose(metrics["recall"], 1 / 3)
    assert metrics["area_error_signed_mean_m2"] is not None
    # NaN is written as null: stratum "b" has no match, so its mean IoU-based signed error is undefined.
    assert metrics["per_stratum"]["b"]["area_error_signed_mean_m2"] is None
    assert "precision" in stdout and "recall" in stdout
    frame = geopandas.read_parquet(frame_out)
    assert len(frame) == 3 and frame.crs.to_epsg() == 32613
    assert frame["ref_index"].tolist() == list(range(3))  # the reference index as a named column
    assert frame["matched"].tolist() == [True, False, False]
    assert not list(tmp_path.glob("**/*.tmp"))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--iou-threshold", "1.5"), "--iou-threshold"),  # the CLI names the flag
        (("--bootstrap", "-1"), "bootstrap"),
        (("--strata-column", "nope"), "'nope'"),
        (("--size-bins", "2,1"), "--size-bins"),
        (("--boundary-tolerance-m", "0"), "--boundary-tolerance-m"),
        (("--equal-area-crs", "EPSG:4326"), "equal_area_crs"),
        (("--matching", "best"), "matching"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(layer_files, tmp_path, capsys, args, needle):
    pred, ref = layer_files
    out = tmp_path / "metrics.json"
    status, _, err = _run(capsys, "evaluate", "-p", str(pred), "-r", str(ref), "-o", str(out), *args)
    assert status == 2
    assert err.count("\n") == 1 and needle in err
    assert "Traceback" not in err
    assert not out.exists()


def test_missing_empty_and_corrupt_files(layer_files, tmp_path, capsys):
    pred, ref = layer_files
    out = tmp_path / "metrics.json"
    missing = tmp_path / "nope.gpkg"
    status, _, err = _run(capsys, "evaluate", "-p", str(pred), "-r", str(missing), "-o", str(out))
    assert status == 2 and str(missing) in err and "does not exist" in err

    empty = tmp_path / "empty.gpkg"
    empty.write_bytes(b"")
    status, _, err = _run(capsys, "evaluate", "-p", str(empty), "-r", str(ref), "-o", str(out))
    assert status == 2 and str(empty) in err and "predicted" in err

    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 this is not parquet at all")
    status, _, err = _run(capsys, "evaluate", "-p", str(corrupt), "-r", str(ref), "-o", str(out))
    assert status == 2 and str(corrupt) in err and err.count("\n") == 1
    assert not out.exists()


def test_missing_crs_is_a_one_line_error(tmp_path, capsys):
    layer = geopandas.GeoDataFrame(geometry=[box(0, 0, 1, 1)])
    path = tmp_path / "nocrs.parquet"
    layer.to_parquet(path)
    status, _, err = _run(capsys, "evaluate", "-p", str(path), "-r", str(path), "-o", str(tmp_path / "m.json"))
    assert status == 2 and "no CRS" in err

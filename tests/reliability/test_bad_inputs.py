"""The bad-input corpus: every kind of bad input gets one readable line or a documented handling.

Each case builds its input in ``tmp_path`` (nothing binary is committed), runs
``evalcore evaluate`` in-process and checks the outcome listed in docs/reliability.md:

* errors: exit status 2, exactly one line on standard error that names the file, layer,
  row or column at fault, no traceback, and no output file left behind;
* documented handling: exit status 0, nothing on standard error, and the dropped and
  repaired counts in the metrics.

A few error cases also go through the distributed path (a LocalCluster with one worker),
whose chunked readers (evalcore/distributed/sources.py) are a different code path, and
through ``evalcore run``'s checks made before the flow starts.
"""

from __future__ import annotations

import json
import os
import struct
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd
import pyogrio
import pytest
import shapely
from pyproj import Transformer
from shapely.geometry import GeometryCollection, LineString, Point, Polygon, box

import evalcore.cli
import flows.evaluate  # noqa: F401  Prefect sets up its log handlers on import: not inside a test's captured stderr
from evalcore.cli import main

X0, Y0 = 500_000.0, 4_400_000.0
UTM = "EPSG:32613"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


# --------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------


def squares(n: int, dx: float = 0.0) -> list[Polygon]:
    """``n`` 100 m squares 200 m apart in UTM 13N, shifted by ``dx`` metres."""
    return [box(X0 + 200 * i + dx, Y0, X0 + 200 * i + 100 + dx, Y0 + 100) for i in range(n)]


def frame(geoms: list, crs: object = UTM, **columns: object) -> geopandas.GeoDataFrame:
    return geopandas.GeoDataFrame(columns, geometry=geopandas.GeoSeries(geoms, crs=crs), crs=crs)


def reference(tmp: Path) -> Path:
    """The good reference layer: three squares with a stratum column, in a GeoPackage."""
    path = tmp / "in" / "reference.gpkg"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        frame(squares(3), county=["a", "b", None]).to_file(path, layer="fields")
    return path


def predicted(tmp: Path, **columns: object) -> Path:
    """A good predicted layer (GeoParquet): the reference squares shifted by 10 m."""
    path = tmp / "in" / "predicted.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = columns or {"score": [0.9, 0.5, 0.2]}
    frame(squares(3, dx=10.0), **columns).to_parquet(path)
    return path


def write_wkb_layer(path: Path, wkb: list[bytes], crs: str = UTM, layer: str = "fields") -> Path:
    """A GeoPackage layer from raw ISO WKB (for geometry kinds shapely cannot build)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pyogrio.raw.write(
        path, geometry=np.array(wkb, dtype=object), field_data=[np.arange(len(wkb))], fields=["id"],
        geometry_type="Unknown", crs=crs, driver="GPKG", layer=layer,
    )
    return path


def _points(coords: list[tuple[float, float]]) -> bytes:
    return struct.pack("<I", len(coords)) + b"".join(struct.pack("<dd", *c) for c in coords)


def wkb_circularstring(coords: list[tuple[float, float]]) -> bytes:
    return struct.pack("<BI", 1, 8) + _points(coords)


def wkb_linestring(coords: list[tuple[float, float]]) -> bytes:
    return struct.pack("<BI", 1, 2) + _points(coords)


def wkb_compoundcurve(parts: list[bytes]) -> bytes:
    return struct.pack("<BII", 1, 9, len(parts)) + b"".join(parts)


def wkb_curvepolygon(rings: list[bytes]) -> bytes:
    return struct.pack("<BII", 1, 10, len(rings)) + b"".join(rings)


def wkb_multisurface(parts: list[bytes]) -> bytes:
    return struct.pack("<BII", 1, 12, len(parts)) + b"".join(parts)


def curved_wkb() -> list[bytes]:
    """A CurvePolygon (a circle of radius 100 m), a MultiSurface (a circle and a square) and
    a CurvePolygon whose ring is a CompoundCurve (a half circle closed by a line)."""
    x, y = X0, Y0 + 1_000
    circle = wkb_curvepolygon([wkb_circularstring([(x, y), (x + 100, y + 100), (x + 200, y), (x + 100, y - 100), (x, y)])])
    x2 = X0 + 1_000
    circle2 = wkb_curvepolygon([wkb_circularstring([(x2, y), (x2 + 100, y + 100), (x2 + 200, y), (x2 + 100, y - 100), (x2, y)])])
    square = shapely.to_wkb(box(x2 + 500, y, x2 + 600, y + 100), flavor="iso")
    x3 = X0 + 2_000
    half = wkb_curvepolygon([wkb_compoundcurve([
        wkb_circularstring([(x3, y), (x3 + 100, y + 100), (x3 + 200, y)]),
        wkb_linestring([(x3 + 200, y), (x3, y)]),
    ])])
    return [circle, wkb_multisurface([circle2, square]), half]


# --------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------


@dataclass
class Case:
    """One kind of bad input.

    ``build(tmp)`` writes the inputs and returns ``(args, needles)``: the arguments after
    ``evalcore evaluate`` (``-o`` is added) and the texts the error line must contain.
    ``status`` 2 is an error; 0 a documented handling, checked by ``check(metrics)``.
    """

    kind: str
    build: Callable[[Path], tuple[list[str], list[str]]]
    status: int = 2
    check: Callable[[dict], None] | None = None
    setup: Callable[[pytest.MonkeyPatch, Path], None] | None = field(default=None)


def _pair(pred: Path, ref: Path | None = None, *extra: str) -> list[str]:
    return ["-p", str(pred), "-r", str(ref), *extra]


def _with_pred(write: Callable[[Path], None], name: str, *extra: str, needles: tuple[str, ...] = ()) -> Callable:
    """A case whose predicted layer ``tmp/in/<name>`` is written by ``write``; the reference is good."""

    def build(tmp: Path) -> tuple[list[str], list[str]]:
        path = tmp / "in" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
        return _pair(path, reference(tmp), *extra), [str(path), *needles]

    return build


def _bytes(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


def _truncated(write: Callable[[Path], None], keep: float) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        write(path)
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * keep)])

    return build


def _gpkg(gdf: geopandas.GeoDataFrame, layer: str = "fields") -> Callable[[Path], None]:
    return lambda path: gdf.to_file(path, layer=layer, driver="GPKG")


def _parquet(gdf: geopandas.GeoDataFrame) -> Callable[[Path], None]:
    return lambda path: gdf.to_parquet(path)


def _parts(*frames: geopandas.GeoDataFrame | bytes) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        path.mkdir()
        for k, f in enumerate(frames):
            target = path / f"part-{k}.parquet"
            target.write_bytes(f) if isinstance(f, bytes) else f.to_parquet(target)

    return build


def _multi_layer(path: Path) -> None:
    frame(squares(3, 10.0)).to_file(path, layer="fields_2023")
    frame(squares(3, 20.0)).to_file(path, layer="fields_2024")


def _attribute_table(path: Path) -> None:
    pyogrio.write_dataframe(pd.DataFrame({"score": [0.5, 0.6]}), path, layer="scores")


def _no_crs_gpkg(path: Path) -> None:
    warnings.filterwarnings("ignore", message="'crs' was not provided")
    pyogrio.raw.write(path, geometry=shapely.to_wkb(np.array(squares(2), dtype=object)), field_data=[np.arange(2)],
                      fields=["id"], geometry_type="Polygon", crs=None, driver="GPKG", layer="fields")


def _no_crs_shapefile(path: Path) -> None:
    frame(squares(2)).to_file(path)
    path.with_suffix(".prj").unlink()


def _m_polygons(path: Path) -> None:
    m = shapely.from_wkt(f"POLYGON M (({X0 + 10} {Y0} 1, {X0 + 110} {Y0} 2, {X0 + 110} {Y0 + 100} 3, {X0 + 10} {Y0 + 100} 4, {X0 + 10} {Y0} 1))")
    zm = shapely.from_wkt(
        f"POLYGON ZM (({X0 + 210} {Y0} 5 1, {X0 + 310} {Y0} 5 2, {X0 + 310} {Y0 + 100} 5 3, {X0 + 210} {Y0 + 100} 5 4, {X0 + 210} {Y0} 5 1))"
    )
    write_wkb_layer(path, [shapely.to_wkb(g, flavor="iso", output_dimension=4) for g in (m, zm)])


def _curved_gpkg(path: Path) -> None:
    write_wkb_layer(path, curved_wkb())


def _curved_parquet(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    wkb = [shapely.to_wkb(box(X0, Y0, X0 + 100, Y0 + 100), flavor="iso"), *curved_wkb()]
    geo = {"version": "1.0.0", "primary_column": "geometry", "columns": {"geometry": {
        "encoding": "WKB", "geometry_types": [], "crs": Transformer.from_crs(UTM, UTM).source_crs.to_json_dict()}}}
    table = pa.table({"id": np.arange(len(wkb)), "geometry": pa.array(wkb, type=pa.binary())})
    pq.write_table(table.replace_schema_metadata({b"geo": json.dumps(geo).encode()}), path)


SELF_TOUCHING = Polygon([(X0, Y0), (X0 + 100, Y0), (X0 + 100, Y0 + 100), (X0 + 50, Y0 + 100), (X0 + 70, Y0 + 50),
                         (X0 + 30, Y0 + 50), (X0 + 50, Y0 + 100), (X0, Y0 + 100), (X0, Y0)])
BOW_TIE = Polygon([(X0 + 200, Y0), (X0 + 300, Y0 + 100), (X0 + 300, Y0), (X0 + 200, Y0 + 100), (X0 + 200, Y0)])



def _square_with_vertex(x: float) -> Polygon:
    """A 100 m square whose second vertex has the given x (NaN, inf): shapely warns while it
    builds that, which is the point here."""
    coords = np.array([(X0 + 200, Y0), (x, Y0), (X0 + 300, Y0 + 100), (X0 + 200, Y0 + 100), (X0 + 200, Y0)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return shapely.from_wkb(struct.pack("<BIII", 1, 3, 1, len(coords)) + coords.astype("<f8").tobytes())


NAN_SQUARE = _square_with_vertex(np.nan)
INF_SQUARE = _square_with_vertex(np.inf)


def _pdc_box() -> Polygon:
    """A box straddling 180 degrees in EPSG:3832 (PDC Mercator), where it is an ordinary box."""
    t = Transformer.from_crs("EPSG:4326", "EPSG:3832", always_xy=True)
    (x0, x1), (y0, y1) = t.transform([179.9, -179.9], [-20.0, -19.9])
    return box(x0, y0, x1, y1)


def _output_not_writable(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    locked = tmp / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: give the check the answer a normal user gets
        real = evalcore.cli.checks._writable
        monkeypatch.setattr(evalcore.cli.checks, "_writable", lambda d: False if Path(d) == locked else real(d))


def _counts(**expected: int) -> Callable[[dict], None]:
    def check(metrics: dict) -> None:
        assert {k: metrics[k] for k in expected} == expected

    return check


def _rates(value: float, **counts: int) -> Callable[[dict], None]:
    def check(metrics: dict) -> None:
        _counts(**counts)(metrics)
        assert metrics["precision"] == metrics["recall"] == value

    return check


GOOD = frame(squares(3, 10.0), score=[0.9, 0.5, 0.2])

CASES = [
    # ---- files
    Case("path_does_not_exist", lambda t: (_pair(t / "in" / "nope.gpkg", reference(t)), [str(t / "in" / "nope.gpkg"), "does not exist"])),
    Case("empty_file", _with_pred(_bytes(b""), "empty.gpkg", needles=("empty (0 bytes)",))),
    Case("truncated_geopackage", _with_pred(_truncated(_gpkg(GOOD), 0.5), "truncated.gpkg", needles=("Cannot read",))),
    Case("truncated_geoparquet", _with_pred(_truncated(_parquet(GOOD), 0.6), "truncated.parquet", needles=("Cannot read",))),
    Case("corrupt_geoparquet", _with_pred(_bytes(b"PAR1" + b"\x00garbage" * 50 + b"PAR1"), "corrupt.parquet", needles=("Cannot read",))),
    Case("not_a_vector_file", _with_pred(_bytes(b"just some text\n"), "notes.gpkg", needles=("Cannot read",))),
    Case("invalid_geojson", _with_pred(_bytes(b'{"type": "FeatureCollection", "features": [{'), "broken.geojson", needles=("Cannot read",))),
    Case("parquet_without_geo_metadata", _with_pred(lambda p: pd.DataFrame({"a": [1]}).to_parquet(p), "plain.parquet", needles=("geo",))),
    Case("directory_without_parquet", _with_pred(lambda p: p.mkdir(), "empty_dir", needles=("no .parquet files",))),
    Case("parts_with_different_columns",
         _with_pred(_parts(GOOD, GOOD.rename(columns={"score": "confidence"})), "parts", needles=("part-1.parquet", "columns", "'score'"))),
    Case("parts_with_different_types",
         _with_pred(_parts(GOOD, GOOD.assign(score=GOOD["score"].astype(str))), "parts", needles=("part-1.parquet", "'score'", "string"))),
    Case("parts_with_different_crs", _with_pred(_parts(GOOD, GOOD.to_crs("EPSG:4326")), "parts", needles=("part-1.parquet", "CRS"))),
    Case("corrupt_part", _with_pred(_parts(GOOD, b"PAR1 not really PAR1"), "parts", needles=("part-1.parquet",))),
    Case("layer_does_not_exist", _with_pred(_gpkg(GOOD), "layers.gpkg", "--pred-layer", "fields_2025", needles=("'fields_2025'", "'fields'"))),
    Case("several_layers_none_named", _with_pred(_multi_layer, "two.gpkg", needles=("'fields_2023'", "'fields_2024'", "--pred-layer"))),
    Case("table_without_geometry", _with_pred(_attribute_table, "table.gpkg", needles=("without geometry", "'score'"))),
    Case("layer_name_for_geoparquet", _with_pred(_parquet(GOOD), "p.parquet", "--pred-layer", "x", needles=("GeoParquet has no layers",))),
    # ---- CRS
    Case("missing_crs_geoparquet", _with_pred(_parquet(frame(squares(2), crs=None)), "nocrs.parquet", needles=("no CRS",))),
    Case("missing_crs_geopackage", _with_pred(_no_crs_gpkg, "nocrs.gpkg", needles=("no CRS",))),
    Case("shapefile_without_prj", _with_pred(_no_crs_shapefile, "nocrs.shp", needles=("no CRS",))),
    # ---- columns
    Case("strata_column_does_not_exist",
         lambda t: (_pair(predicted(t), reference(t), "--strata-column", "district"), ["--strata-column", "'district'", "'county'", str(reference(t))])),
    Case("score_column_does_not_exist",
         lambda t: (_pair(predicted(t), reference(t), "--score-column", "confidence"), ["--score-column", "'confidence'", "'score'", str(predicted(t))])),
    Case("score_not_numeric",
         lambda t: (_pair(predicted(t, score=["0.9", "high", "0.2"]), reference(t), "--score-column", "score"), ["'score'", "not numeric", "row 1", "'high'"])),
    Case("score_boolean",
         lambda t: (_pair(predicted(t, score=[True, False, True]), reference(t), "--score-column", "score"), ["'score'", "not numeric", "bool"])),
    Case("score_missing_value",
         lambda t: (_pair(predicted(t, score=[0.9, 0.5, np.nan]), reference(t), "--score-column", "score"), ["'score'", "row 2", "missing"])),
    Case("score_infinite",
         lambda t: (_pair(predicted(t, score=[np.inf, 0.5, 0.2]), reference(t), "--score-column", "score"), ["'score'", "row 0", "not finite"])),
    Case("score_out_of_range",
         lambda t: (_pair(predicted(t, score=[0.9, 1.5, -0.1]), reference(t), "--score-column", "score"), ["'score'", "row 1", "1.5", "outside [0, 1]", "2 of 3"])),
    # ---- coordinates
    Case("nan_coordinates", _with_pred(_parquet(frame([*squares(1, 10.0), NAN_SQUARE])), "nan.parquet", needles=("NaN or infinite", "row 1 "))),
    Case("infinite_coordinates", _with_pred(_gpkg(frame([*squares(1, 10.0), INF_SQUARE])), "inf.gpkg", needles=("NaN or infinite", "row 1 "))),
    Case("enormous_coordinates", _with_pred(_parquet(frame([*squares(1, 10.0), box(1e30, 1e30, 1.5e30, 1.5e30)])), "huge.parquet", needles=("row 1 ", "longer than"))),
    Case("coordinates_that_cannot_be_reprojected",
         _with_pred(_parquet(frame([*squares(1, 10.0), box(5e7, Y0, 5e7 + 100, Y0 + 100)])), "far.parquet", needles=("cannot be reprojected", "row 1 "))),
    Case("longitude_out_of_range",
         _with_pred(_parquet(frame([box(-105.0, 39.7, -104.99, 39.71), box(500.0, 40.0, 500.01, 40.01)], crs="EPSG:4326")), "lon.parquet", needles=("row 1 ", "longitude"))),
    Case("antimeridian_crossing",
         _with_pred(_parquet(frame([box(-105.0, 39.7, -104.99, 39.71), Polygon([(179.9, 10), (-179.9, 10), (-179.9, 10.1), (179.9, 10.1)])], crs="EPSG:4326")),
                    "am.parquet", needles=("antimeridian", "row 1."))),
    Case("antimeridian_in_0_360_longitudes",
         _with_pred(_parquet(frame([box(179.9, 10, 180.1, 10.1)], crs="EPSG:4326")), "am360.parquet", needles=("row 0 ", "longitude"))),
    Case("antimeridian_in_projected_crs",
         _with_pred(_parquet(frame([_pdc_box()], crs="EPSG:3832")), "pdc.parquet", needles=("antimeridian", "row 0."))),
    Case("curved_geometries_in_geoparquet", _with_pred(_curved_parquet, "curved.parquet", needles=("curved", "rows 1, 2, 3"))),
    # ---- outputs
    Case("output_directory_not_writable",
         lambda t: (_pair(predicted(t), reference(t), "-o", str(t / "locked" / "m.json")), [str(t / "locked"), "not writable"]),
         setup=_output_not_writable),
    Case("output_parent_is_a_file",
         lambda t: ((t / "in").mkdir(exist_ok=True), (t / "in" / "a_file").write_text("x"),
                    (_pair(predicted(t), reference(t), "-o", str(t / "in" / "a_file" / "m.json")), ["a_file", "is a file"]))[-1]),
    Case("output_is_a_directory",
         lambda t: (_pair(predicted(t), reference(t), "-o", str(t / "in")), [str(t / "in"), "is a directory"])),
    Case("frame_out_not_writable",
         lambda t: (_pair(predicted(t), reference(t), "--frame-out", str(t / "locked" / "f.parquet")), ["--frame-out", "not writable"]),
         setup=_output_not_writable),
    # ---- parameters
    Case("iou_threshold_nan", lambda t: (_pair(predicted(t), reference(t), "--iou-threshold", "nan"), ["--iou-threshold", "nan"])),
    Case("tile_size_zero", lambda t: (_pair(predicted(t), reference(t), "--partition-km", "0"), ["partition_size_m", "0.0"])),
    Case("workers_zero", lambda t: (_pair(predicted(t), reference(t), "--cluster", "local", "--workers", "0"), ["--workers", "0"])),
    # ---- documented handling (exit status 0)
    Case("zero_row_layer", _with_pred(_parquet(GOOD.iloc[:0]), "zero.parquet"), 0,
         _rates(0.0, count_predicted=0, count_reference=3, count_predicted_dropped=0)),
    Case("zero_row_layers_both",
         lambda t: (predicted(t), GOOD.iloc[:0].to_file(t / "in" / "zero.gpkg", layer="fields"),
                    (_pair(t / "in" / "zero.gpkg", t / "in" / "zero.gpkg"), []))[-1], 0,
         _rates(1.0, count_predicted=0, count_reference=0)),
    Case("only_points", _with_pred(_parquet(frame([Point(X0, Y0), Point(X0 + 10, Y0)])), "points.parquet"), 0,
         _counts(count_predicted=0, count_predicted_dropped=2, count_reference=3)),
    Case("only_lines", _with_pred(_gpkg(frame([LineString([(X0, Y0), (X0 + 100, Y0)])] * 2)), "lines.gpkg"), 0,
         _counts(count_predicted=0, count_predicted_dropped=2)),
    Case("null_empty_and_mixed_rows",
         _with_pred(_parquet(frame([*squares(2, 10.0), None, Polygon(), Point(X0, Y0), LineString([(X0, Y0), (X0 + 1, Y0)])])), "mixed.parquet"), 0,
         _counts(count_predicted=2, count_predicted_dropped=4, count_tp=2)),
    Case("zero_area_polygons",
         _with_pred(_parquet(frame([*squares(1, 10.0), Polygon([(X0, Y0), (X0 + 50, Y0), (X0 + 100, Y0), (X0, Y0)])])), "flat.parquet"), 0,
         _counts(count_predicted=1, count_predicted_dropped=1)),
    Case("geometry_collections",
         _with_pred(_gpkg(frame([GeometryCollection([squares(1, 10.0)[0], Point(X0, Y0)]), GeometryCollection([Point(X0, Y0)]), squares(3, 10.0)[2]])),
                    "collections.gpkg"), 0,
         _counts(count_predicted=2, count_predicted_dropped=1, count_predicted_repaired=1, count_tp=2)),
    Case("z_polygons", _with_pred(_parquet(frame([shapely.force_3d(g, 7.0) for g in squares(3, 10.0)])), "z.parquet"), 0,
         _counts(count_predicted=3, count_tp=3, count_predicted_repaired=0)),
    Case("m_and_zm_polygons", _with_pred(_m_polygons, "m.gpkg"), 0, _counts(count_predicted=2, count_tp=2, count_predicted_repaired=0)),
    Case("curved_geometries_in_geopackage", _with_pred(_curved_gpkg, "curved.gpkg"), 0,
         _counts(count_predicted=3, count_predicted_repaired=3, count_predicted_dropped=0)),
    Case("duplicate_ids", _with_pred(_parquet(frame(squares(3, 10.0), field_id=[7, 7, 7])), "dups.parquet"), 0,
         _counts(count_predicted=3, count_tp=3)),
    Case("self_touching_and_self_crossing_rings", _with_pred(_gpkg(frame([SELF_TOUCHING, BOW_TIE, squares(3, 10.0)[2]])), "invalid.gpkg"), 0,
         _counts(count_predicted=3, count_predicted_repaired=2, count_predicted_dropped=0)),
    Case("layers_in_different_crs", _with_pred(_parquet(GOOD.to_crs("EPSG:4326")), "wgs84.parquet"), 0, _counts(count_tp=3)),
]

ERROR_CASES = [c for c in CASES if c.status == 2]


def test_the_corpus_is_large_and_documented():
    kinds = [c.kind for c in CASES]
    assert len(kinds) == len(set(kinds)) and len(kinds) >= 35
    text = DOCS.read_text(encoding="utf-8")
    missing = [k for k in kinds if f"`{k}`" not in text]
    assert not missing, f"docs/reliability.md lacks rows for {missing}"


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("case", CASES, ids=[c.kind for c in CASES])
def test_bad_input(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    if case.setup is not None:
        case.setup(monkeypatch, tmp_path)
    args, needles = case.build(tmp_path)
    out = tmp_path / "out" / "metrics.json"
    out.parent.mkdir(exist_ok=True)  # evalcore creates no missing parent directory
    if "-o" not in args:
        args = [*args, "-o", str(out)]
    before = _files(tmp_path)
    capsys.readouterr()
    status = main(["evaluate", "-q", *args])
    stdout, stderr = capsys.readouterr()
    assert "Traceback" not in stderr + stdout
    assert status == case.status, stderr
    if case.status == 2:
        assert stderr.count("\n") == 1 and stderr.startswith("evalcore: error: "), stderr
        for needle in needles:
            assert needle in stderr, (needle, stderr)
        assert _files(tmp_path) == before, "an output was left behind"
    else:
        assert stderr == ""
        case.check(json.loads(out.read_text()))


# --------------------------------------------------------------------------------------
# The same through `evalcore run` (checks made before the flow starts)
# --------------------------------------------------------------------------------------

RUN_CASES = ["strata_column_does_not_exist", "score_column_does_not_exist", "score_out_of_range", "several_layers_none_named",
             "parts_with_different_columns", "truncated_geopackage", "path_does_not_exist"]


@pytest.mark.parametrize("kind", RUN_CASES)
def test_bad_input_is_refused_before_the_flow_starts(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    import flows.evaluate

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the flow started")

    monkeypatch.setattr(flows.evaluate, "evaluate_layers", never)
    case = next(c for c in CASES if c.kind == kind)
    args, needles = case.build(tmp_path)
    capsys.readouterr()
    status = main(["run", *args, "-o", str(tmp_path / "run")])
    _, stderr = capsys.readouterr()
    assert status == 2 and stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    for needle in needles:
        assert needle in stderr, (needle, stderr)
    assert not (tmp_path / "run").exists()


def test_run_refuses_an_output_directory_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    target = tmp_path / "run"
    target.write_text("not a directory")
    status = main(["run", "-p", str(predicted(tmp_path)), "-r", str(reference(tmp_path)), "-o", str(target)])
    _, stderr = capsys.readouterr()
    assert status == 2 and "is a file" in stderr and stderr.count("\n") == 1


# --------------------------------------------------------------------------------------
# The distributed path: chunked readers, errors raised inside Dask tasks
# --------------------------------------------------------------------------------------

DISTRIBUTED_ERRORS = ["truncated_geopackage", "corrupt_geoparquet", "parts_with_different_types", "missing_crs_geoparquet",
                      "missing_crs_geopackage", "nan_coordinates", "longitude_out_of_range", "curved_geometries_in_geoparquet",
                      "several_layers_none_named", "layer_does_not_exist"]


@pytest.fixture(scope="module")
def client(local_clients):
    """A real LocalCluster of 1 worker process (the session's, tests/conftest.py)."""
    return local_clients.get(1)


def _layer_args(args: list[str]) -> dict:
    opts = dict(zip(args[::2], args[1::2]))
    return {"predicted": opts["-p"], "reference": opts["-r"], "pred_layer": opts.get("--pred-layer"), "ref_layer": opts.get("--ref-layer")}


def _input_error(exc: BaseException) -> BaseException | None:
    """The EvalInputError in an exception's chain (what ``evalcore.cli.main`` reports)."""
    from evalcore.cli import _input_error_in_chain

    return _input_error_in_chain(exc)


@pytest.mark.parametrize("kind", DISTRIBUTED_ERRORS)
def test_distributed_readers_give_the_same_errors(kind: str, client, tmp_path: Path):
    from evalcore.api import check_options
    from evalcore.distributed.runner import run_distributed

    case = next(c for c in CASES if c.kind == kind)
    args, needles = case.build(tmp_path)
    layers = _layer_args(args)
    with pytest.raises(Exception) as info:
        run_distributed(layers["predicted"], layers["reference"], client, check_options(), workdir=tmp_path / "work",
                        pred_layer=layers["pred_layer"], ref_layer=layers["ref_layer"], chunk_rows=2)
    error = _input_error(info.value)
    assert error is not None, repr(info.value)
    message = str(error)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)


def test_distributed_prepare_errors_are_raised_as_they_are(client, tmp_path: Path):
    from evalcore.api import check_options
    from evalcore.distributed.runner import run_distributed
    from evalcore.errors import EvalInputError

    layers = _layer_args(next(c for c in CASES if c.kind == "nan_coordinates").build(tmp_path)[0])
    with pytest.raises(EvalInputError):
        run_distributed(layers["predicted"], layers["reference"], client, check_options(), workdir=tmp_path / "work")


def test_distributed_strata_column_that_does_not_exist(client, tmp_path: Path):
    from evalcore.api import check_options
    from evalcore.distributed.runner import run_distributed

    ref = reference(tmp_path)
    with pytest.raises(Exception) as info:
        run_distributed(str(predicted(tmp_path)), str(ref), client, check_options(), strata="district", workdir=tmp_path / "work")
    message = str(_input_error(info.value))
    assert "'district'" in message and "'county'" in message and str(ref) in message


@pytest.mark.parametrize("kind", ["curved_geometries_in_geopackage", "geometry_collections", "m_and_zm_polygons", "null_empty_and_mixed_rows"])
def test_distributed_handling_counts_the_same(kind: str, client, tmp_path: Path):
    import evalcore
    from evalcore.api import check_options
    from evalcore.distributed.runner import run_distributed

    case = next(c for c in CASES if c.kind == kind)
    layers = _layer_args(case.build(tmp_path)[0])
    single = evalcore.evaluate(layers["predicted"], layers["reference"])
    spread = run_distributed(layers["predicted"], layers["reference"], client, check_options(), workdir=tmp_path / "work", chunk_rows=2)
    for key in ("count_predicted", "count_predicted_dropped", "count_predicted_repaired", "count_tp", "count_fp", "count_fn"):
        assert spread[key] == single[key], key
    case.check(spread)


@pytest.mark.cluster
def test_cli_on_a_cluster_reports_a_task_error_in_one_line(tmp_path: Path):
    """An error raised inside a Dask task reaches the terminal as one line naming the file.

    A real ``evalcore`` process: what the user sees, with no test harness around stderr.
    """
    import subprocess
    import sys

    case = next(c for c in CASES if c.kind == "nan_coordinates")
    args, needles = case.build(tmp_path)
    out = tmp_path / "out" / "metrics.json"
    out.parent.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "evalcore.cli", "evaluate", "-q", *args, "--cluster", "local", "--workers", "1",
         "--workdir", str(tmp_path / "work"), "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("Dask dashboard")]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("evalcore: error: ")
    for needle in needles:
        assert needle in lines[0]
    assert not out.exists()

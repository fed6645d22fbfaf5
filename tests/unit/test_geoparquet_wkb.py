"""The stored-WKB GeoParquet writer against geopandas' own writer of the same geometries.

:func:`evalcore.writers.write_geoparquet_wkb` passes a partition's stored WKB to its output
without building geometries, reading the geometry types and the bounding box from the
bytes. The file must be the one ``GeoDataFrame.to_parquet`` writes (the same columns,
values, field and file metadata), its ``geo`` metadata's creator aside.
"""

from __future__ import annotations

import json

import geopandas
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st
from pyproj import CRS

from evalcore._wkb_kernels import _wkb_polygon_extent
from evalcore.arrays import binary_buffers
from evalcore.writers import write_geoparquet, write_geoparquet_wkb


def _polygon(x: float, y: float, w: float, h: float, hole: bool) -> shapely.Polygon:
    shell = shapely.box(x, y, x + w, y + h)
    if not hole:
        return shell
    inner = shapely.box(x + w / 4, y + h / 4, x + w / 2, y + h / 2)
    return shapely.Polygon(shell.exterior.coords, [inner.exterior.coords])


def _geometries(seed: int, n: int, empty: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x, y = rng.uniform(-1e5, 1e5, 2)
        w, h = rng.uniform(0.5, 300, 2)
        part = _polygon(x, y, w, h, hole=bool(i % 3 == 0))
        if i % 4 == 1:
            part = shapely.MultiPolygon([part, shapely.box(x + w + 10, y - 50, x + w + 40, y - 20)])
        out.append(part)
    if empty and n:
        out[n // 2] = shapely.Polygon()
    return np.asarray(out, dtype=object)


def _write_both(tmp_path, geoms: np.ndarray, crs: CRS | None) -> tuple[pa.Table, pa.Table]:
    frame = pd.DataFrame({"field_index": np.arange(len(geoms), dtype=np.int64), "label": [f"f{i}" for i in range(len(geoms))]})
    write_geoparquet(tmp_path / "geopandas.parquet", geopandas.GeoDataFrame(frame, geometry=geoms, crs=crs))
    write_geoparquet_wkb(tmp_path / "wkb.parquet", frame, pa.array(shapely.to_wkb(geoms), pa.binary()), crs)
    return pq.read_table(tmp_path / "geopandas.parquet"), pq.read_table(tmp_path / "wkb.parquet")


def _same_file(expected: pa.Table, got: pa.Table) -> None:
    assert got.equals(expected)
    assert got.schema.field("geometry").metadata == expected.schema.field("geometry").metadata
    geo_expected = json.loads(expected.schema.metadata[b"geo"])
    geo_got = json.loads(got.schema.metadata[b"geo"])
    assert geo_expected.pop("creator")["library"] == "geopandas"
    assert geo_got.pop("creator")["library"] == "evalcore"
    assert geo_got == geo_expected
    rest = {k: v for k, v in expected.schema.metadata.items() if k != b"geo"}
    assert {k: v for k, v in got.schema.metadata.items() if k != b"geo"} == rest


@pytest.mark.parametrize("crs", [CRS.from_epsg(5070), CRS.from_epsg(4326), None])
def test_the_file_is_geopandas_file(tmp_path, crs):
    geoms = _geometries(1, 500, empty=True)
    expected, got = _write_both(tmp_path, geoms, crs)
    _same_file(expected, got)
    back = geopandas.read_parquet(tmp_path / "wkb.parquet")
    assert back.crs == crs
    assert shapely.equals_exact(np.asarray(back.geometry.array), geoms, tolerance=0).all()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(0, 40), empty=st.booleans())
def test_types_and_box_match_geopandas(tmp_path_factory, seed, n, empty):
    expected, got = _write_both(tmp_path_factory.mktemp("w"), _geometries(seed, n, empty), CRS.from_epsg(32614))
    _same_file(expected, got)


def test_the_box_is_the_shells_box_worked_by_hand():
    # Two polygons and a multipolygon: the box is the shells' (a hole's corner is inside).
    geoms = [shapely.box(2, 3, 5, 7), _polygon(-1, 10, 4, 4, hole=True),
             shapely.MultiPolygon([shapely.box(20, -4, 21, -3), shapely.box(0, 0, 1, 1)]), shapely.Polygon()]
    wkb = pa.array(shapely.to_wkb(np.asarray(geoms, dtype=object)), pa.binary())
    offsets = np.frombuffer(wkb.buffers()[1], dtype=np.int32).astype(np.int64)
    data = np.frombuffer(wkb.buffers()[2], dtype=np.uint8)
    types, box = np.empty(4, np.int64), np.empty(4)
    assert _wkb_polygon_extent(data, offsets, types, box)
    assert types.tolist() == [3, 3, 6, 3]
    assert box.tolist() == [-1.0, -4.0, 21.0, 14.0]


@pytest.mark.parametrize("other", ["point", "big-endian", "missing", "z"])
def test_other_values_are_decoded_and_written_by_geopandas(tmp_path, other):
    geoms = _geometries(7, 30, empty=False)
    wkb = list(shapely.to_wkb(geoms))
    if other == "point":
        wkb[3] = shapely.to_wkb(shapely.Point(1, 2))
    elif other == "big-endian":
        wkb[3] = shapely.to_wkb(geoms[3], byte_order=0)
    elif other == "missing":
        wkb[3] = None
    else:
        wkb[3] = shapely.to_wkb(shapely.Polygon([(0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 0, 1)]))
    frame = pd.DataFrame({"field_index": np.arange(len(geoms), dtype=np.int64)})
    write_geoparquet_wkb(tmp_path / "wkb.parquet", frame, pa.array(wkb, pa.binary()), CRS.from_epsg(5070))
    decoded = shapely.from_wkb(np.asarray(wkb, dtype=object))
    write_geoparquet(tmp_path / "geopandas.parquet", geopandas.GeoDataFrame(frame, geometry=decoded, crs=5070))
    expected, got = pq.read_table(tmp_path / "geopandas.parquet"), pq.read_table(tmp_path / "wkb.parquet")
    assert got.equals(expected)
    assert json.loads(got.schema.metadata[b"geo"]) == json.loads(expected.schema.metadata[b"geo"])


def test_a_frame_with_a_geometry_column_is_refused(tmp_path):
    frame = pd.DataFrame({"geometry": [1]})
    with pytest.raises(ValueError, match="already has a geometry column"):
        write_geoparquet_wkb(tmp_path / "x.parquet", frame, pa.array([shapely.to_wkb(shapely.box(0, 0, 1, 1))]), None)


def test_binary_buffers_of_a_sliced_chunked_column():
    # Offsets of a slice start where the slice does; a null value is empty; large_binary is cast.
    values = [b"ab", None, b"", b"cde", b"f"]
    for typ in (pa.binary(), pa.large_binary()):
        column = pa.chunked_array([pa.array(values, typ).slice(1), pa.array([b"gh"], typ)])
        data, offsets = binary_buffers(column)
        assert offsets.dtype == np.int64 and len(offsets) == 6
        got = [bytes(data[offsets[i]:offsets[i + 1]]) for i in range(5)]
        assert got == [b"", b"", b"cde", b"f", b"gh"]
    data, offsets = binary_buffers(pa.array([], pa.binary()))
    assert len(data) == 0 and offsets.tolist() == [0]

"""What the report's overlays read of a run's per-field and per-prediction tables: the
tiles near one window at a time (not every window's at once, nor the cross product of a
zone's columns and rows, which held most of a country), and the error samples' positions
part by part (not whole columns), with the picks of the whole-table computation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalcore.html_report.overlays import _near_table, _neighbourhood, _read_near, _rows_at, _scan_errors, _Window


def _tile_points(tiles: pd.DataFrame, tile_m: float, crs: str = "EPSG:32612"):
    import geopandas
    import shapely

    x, y = (tiles["tile_x"].to_numpy() + 0.5) * tile_m, (tiles["tile_y"].to_numpy() + 0.5) * tile_m
    return geopandas.GeoDataFrame(tiles.assign(ref_index=np.arange(len(tiles))), geometry=shapely.points(x, y), crs=crs)


def test_each_window_reaches_its_own_tiles_only(tmp_path):
    tile_m = 10_000.0
    # Two windows of one tile's side, centred on tiles (0, 0) and (10, 10) of zone 32612.
    windows = [_Window(32612, 5_000.0, 5_000.0, tile_m, "a"), _Window(32612, 105_000.0, 105_000.0, tile_m, "b")]
    # half a side plus one tile of margin: x from -10 km to 20 km, tiles -1 to 2.
    assert _neighbourhood(windows[0], tile_m) == (-1, 2, -1, 2)
    assert _neighbourhood(windows[1], tile_m) == (9, 12, 9, 12)
    tiles = pd.DataFrame([(32612, x, y) for x in range(-2, 13) for y in range(-2, 13)] + [(32613, 0, 0)],
                         columns=["utm_epsg", "tile_x", "tile_y"])
    _tile_points(tiles, tile_m).to_parquet(tmp_path / "part-0000.parquet", row_group_size=20)
    table = _near_table(tmp_path, "utm_epsg", ("ref_index", "utm_epsg", "tile_x", "tile_y"))
    for window, (x0, x1, y0, y1) in zip(windows, [(-1, 2, -1, 2), (9, 12, 9, 12)], strict=True):
        kept = _read_near(table, window, tile_m)
        assert set(map(tuple, kept[["tile_x", "tile_y"]].to_numpy().tolist())) == {(x, y) for x in range(x0, x1 + 1) for y in range(y0, y1 + 1)}
        assert set(kept["utm_epsg"]) == {32612}


@pytest.mark.parametrize("batch_rows", [3, 4096])
def test_a_window_reads_only_the_row_groups_its_neighbourhood_meets(tmp_path, monkeypatch, batch_rows):
    """226 rows in row groups of 20 (tile_x -2 to 12, 15 rows each): the statistics say which
    groups can hold the window's tiles; a file written without statistics is read whole,
    and the rows are the same, whether a group is decoded in batches of 3 rows or at once."""
    import pyarrow.parquet as pq

    import evalcore.html_report.overlays as overlays

    monkeypatch.setattr(overlays, "NEAR_BATCH_ROWS", batch_rows)

    tile_m = 10_000.0
    tiles = pd.DataFrame([(32612, x, y) for x in range(-2, 13) for y in range(-2, 13)] + [(32613, 0, 0)],
                         columns=["utm_epsg", "tile_x", "tile_y"])
    with_stats, without = tmp_path / "a", tmp_path / "b"
    with_stats.mkdir(), without.mkdir()
    points = _tile_points(tiles, tile_m)
    points.to_parquet(with_stats / "part-0000.parquet", row_group_size=20)
    points.to_parquet(without / "part-0000.parquet", row_group_size=20, write_statistics=False)
    assert pq.ParquetFile(with_stats / "part-0000.parquet").metadata.num_row_groups == 12
    window = _Window(32612, 5_000.0, 5_000.0, tile_m, "a")  # tiles x -1..2: rows 15 to 74
    read: list = []
    original = pq.ParquetFile.iter_batches

    def counted(self, *args, row_groups=None, **kwargs):
        read.extend(row_groups)
        return original(self, *args, row_groups=row_groups, **kwargs)

    pq.ParquetFile.iter_batches = counted
    try:
        a = _read_near(_near_table(with_stats, "utm_epsg", ("ref_index", "utm_epsg", "tile_x", "tile_y")), window, tile_m)
        groups_with_stats = list(read)
        read.clear()
        b = _read_near(_near_table(without, "utm_epsg", ("ref_index", "utm_epsg", "tile_x", "tile_y")), window, tile_m)
    finally:
        pq.ParquetFile.iter_batches = original
    # Groups 0-3 hold tiles x -2 to 3; group 11 (rows 220-225) holds x 12 of zone 32612 and
    # the row of zone 32613 at x 0: its ranges (zones 32612-32613, x 0-12) meet the window's.
    assert groups_with_stats == [0, 1, 2, 3, 11]
    assert read == list(range(12))
    expected = points[points["utm_epsg"].eq(32612) & points["tile_x"].between(-1, 2) & points["tile_y"].between(-1, 2)]
    assert a["ref_index"].tolist() == b["ref_index"].tolist() == expected["ref_index"].tolist()


def test_a_window_far_from_every_row_reads_nothing_and_keeps_the_columns(tmp_path):
    tile_m = 10_000.0
    tiles = pd.DataFrame([(32612, 0, 0), (32612, 1, 1)], columns=["utm_epsg", "tile_x", "tile_y"])
    _tile_points(tiles, tile_m).to_parquet(tmp_path / "part-0000.parquet")
    got = _read_near(_near_table(tmp_path, "utm_epsg", ("ref_index", "utm_epsg", "tile_x", "tile_y")),
                     _Window(32612, 505_000.0, 505_000.0, tile_m, "far"), tile_m)
    assert len(got) == 0 and list(got.columns) == ["ref_index", "utm_epsg", "tile_x", "tile_y", "geometry"]
    assert got.crs == "EPSG:32612"


def test_a_window_reads_the_rows_of_its_neighbourhood_with_their_geometry(tmp_path):
    """Points in UTM 32612 written as parts in EPSG:4326, as the run's per-field table is:
    the rows read are exactly those whose tile is within one tile of the window, in the
    parts' order, with their geometry and CRS."""
    import geopandas
    import shapely

    tile_m = 1_000.0
    rng = np.random.default_rng(7)
    frames = []
    for k, n in enumerate([40, 31, 52]):  # parts of other lengths: their pandas metadata differ
        x, y = 500_000 + rng.uniform(0, 8_000, n), 4_000_000 + rng.uniform(0, 8_000, n)
        frame = geopandas.GeoDataFrame({"ref_index": np.arange(n) + 100 * k, "utm_epsg": np.where(np.arange(n) % 5 == 0, 32613, 32612),
                                        "tile_x": np.floor(x / tile_m).astype(int), "tile_y": np.floor(y / tile_m).astype(int)},
                                       geometry=shapely.points(x, y), crs="EPSG:32612").to_crs("EPSG:4326")
        frame.to_parquet(tmp_path / f"part-{k:04d}.parquet")
        frames.append(frame)
    whole = pd.concat(frames, ignore_index=True)
    # centred in tile (503, 4003): half a side plus a tile is 1.5 km, so tiles 502 (502.0 km) to 505 (505.0 km)
    window = _Window(32612, 503_500.0, 4_003_500.0, 1_000.0, "w")
    table = _near_table(tmp_path, "utm_epsg", ("ref_index", "utm_epsg", "tile_x", "tile_y", "not_a_column"))
    got = _read_near(table, window, tile_m)
    expected = whole[(whole["utm_epsg"] == 32612) & whole["tile_x"].between(502, 505) & whole["tile_y"].between(4002, 4005)]
    assert len(expected) > 0 and len(expected) < len(whole)
    assert got["ref_index"].tolist() == expected["ref_index"].tolist()
    assert got.crs == whole.crs
    assert shapely.equals(got.geometry.to_numpy(), expected.geometry.to_numpy()).all()
    assert _read_near(None, window, tile_m) is None
    assert _near_table(tmp_path / "absent", "utm_epsg", ("ref_index",)) is None


def test_positions_part_by_part_equal_the_whole_tables(tmp_path):
    rng = np.random.default_rng(4)
    codes = np.array(["M-FN-MISSED", "M-FN-LOCALISATION", None, "OK"], dtype=object)
    frames = []
    for k, n in enumerate([7, 0, 13, 5]):  # an empty part among them
        frame = pd.DataFrame({"ref_index": np.arange(n) + 100 * k, "utm_epsg": 32612, "tile_x": k, "tile_y": np.arange(n),
                              "error_code": pd.array(codes[rng.integers(0, 4, n)], dtype="string"),
                              "split": pd.array(rng.integers(0, 3, n) == 0, dtype="boolean")})
        if n:
            frame.loc[frame.index[0], "split"] = pd.NA
        frame.to_parquet(tmp_path / f"part-{k:04d}.parquet")
        frames.append(frame)
    whole = pd.concat(frames, ignore_index=True)
    wanted = [("M-FN-MISSED", None), ("split", "split"), ("M-FP-DUPLICATE", "merge")]
    scan = _scan_errors(tmp_path, wanted)
    found = scan.positions
    assert np.array_equal(found[wanted[0]], np.flatnonzero((whole["error_code"] == "M-FN-MISSED").fillna(False).to_numpy()))
    assert np.array_equal(found[wanted[1]], np.flatnonzero(whole["split"].fillna(False).astype(bool).to_numpy()))
    assert found[wanted[2]] is None  # no merge column in this table
    assert scan.sizes == [7, 0, 13, 5]
    pick = np.sort(found[wanted[0]])[:3]
    rows = _rows_at(scan, pick, ["ref_index", "tile_x", "tile_y"])
    assert rows.to_dict("list") == whole.iloc[pick][["ref_index", "tile_x", "tile_y"]].to_dict("list")

"""What the report's overlays read of a run's per-field and per-prediction tables: the
tiles near one window at a time (not every window's at once, nor the cross product of a
zone's columns and rows, which held most of a country), and the error samples' positions
part by part (not whole columns), with the picks of the whole-table computation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from evalcore.html_report.overlays import _near_table, _neighbourhood, _read_near, _rows_at, _scan_errors, _tile_filter, _Window


def test_each_window_reaches_its_own_tiles_only():
    tile_m = 10_000.0
    # Two windows of one tile's side, centred on tiles (0, 0) and (10, 10) of zone 32612.
    windows = [_Window(32612, 5_000.0, 5_000.0, tile_m, "a"), _Window(32612, 105_000.0, 105_000.0, tile_m, "b")]
    # half a side plus one tile of margin: x from -10 km to 20 km, tiles -1 to 2.
    assert _neighbourhood(windows[0], tile_m) == (-1, 2, -1, 2)
    assert _neighbourhood(windows[1], tile_m) == (9, 12, 9, 12)
    tiles = pd.DataFrame([(32612, x, y) for x in range(-2, 13) for y in range(-2, 13)] + [(32613, 0, 0)],
                         columns=["utm_epsg", "tile_x", "tile_y"])
    kept = ds.dataset(pa.Table.from_pandas(tiles)).to_table(filter=_tile_filter("utm_epsg", 32612, _neighbourhood(windows[0], tile_m))).to_pandas()
    assert set(map(tuple, kept[["tile_x", "tile_y"]].to_numpy().tolist())) == {(x, y) for x in range(-1, 3) for y in range(-1, 3)}
    assert set(kept["utm_epsg"]) == {32612}


def test_a_window_reads_the_rows_of_its_neighbourhood_with_their_geometry(tmp_path):
    """Points in UTM 32612 written as parts in EPSG:4326, as the run's per-field table is:
    the rows read are exactly those whose tile is within one tile of the window, in the
    parts' order, with their geometry and CRS."""
    import geopandas
    import shapely

    tile_m = 1_000.0
    rng = np.random.default_rng(7)
    frames = []
    for k in range(3):
        x, y = 500_000 + rng.uniform(0, 8_000, 40), 4_000_000 + rng.uniform(0, 8_000, 40)
        frame = geopandas.GeoDataFrame({"ref_index": np.arange(40) + 100 * k, "utm_epsg": np.where(np.arange(40) % 5 == 0, 32613, 32612),
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

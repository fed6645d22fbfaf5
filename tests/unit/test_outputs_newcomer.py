"""Outputs a newcomer reads (issue 33, item 13).

* ``tiles.parquet`` / ``--tiles-out`` start with the tile key the summary prints
  (``32614_57_402``): one filter finds the worst tile.
* Overlapping AOIs: the pairs are found (hand-made AOIs: overlapping, touching, apart,
  and AOIs larger than a grid cell, so the grid pieces are used), checked against a
  slow reference on whole polygons; the run warns once, naming the pairs and that a
  field counts in the first; disjoint AOIs give no warning.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import geopandas
import numpy as np
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st
from shapely.geometry import box

from evalcore.layer_warnings import MAX_PAIRS_NAMED, aoi_overlap_warning
from evalcore.levels import AoiLayer, overlapping_aois
from evalcore.sites import GRID_CELL_M, grid_pieces
from tests.common import cli_in_process

ROOT = Path(__file__).resolve().parents[2]
UTM = "EPSG:32613"
X0, Y0 = 500_000.0, 4_500_000.0


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The command in this process, what it prints captured (:func:`tests.common.cli_in_process`)."""
    return cli_in_process(*args, cwd=ROOT)


def _layer(geoms: list, pieces: bool = True) -> AoiLayer:
    geoms_ea = np.asarray(geoms, dtype=object)
    keys = [f"a{k}" for k in range(len(geoms))]
    if not pieces:
        return AoiLayer("id", np.asarray(keys, dtype=object), keys, geoms_ea, geoms_ea, None, "test")
    cut = [grid_pieces(np.asarray([g], dtype=object)) for g in geoms]
    return AoiLayer("id", np.asarray(keys, dtype=object), keys, geoms_ea, geoms_ea, None, "test",
                    np.concatenate(cut), np.concatenate([np.full(len(c), k, dtype=np.int64) for k, c in enumerate(cut)]))


def _slow_pairs(geoms: list) -> list[tuple[int, int]]:
    """Whole polygons, every pair: interiors meet = intersect and not only touch."""
    return [(i, j) for i in range(len(geoms)) for j in range(i + 1, len(geoms))
            if shapely.intersects(geoms[i], geoms[j]) and not shapely.touches(geoms[i], geoms[j])]


def test_overlapping_touching_and_apart():
    c = GRID_CELL_M
    geoms = [
        box(0, 0, 3 * c, 3 * c),            # a0: spans 3 x 3 grid cells
        box(2.5 * c, 2.5 * c, 5 * c, 5 * c),  # a1: overlaps a0 in one corner (0.25 cell²)
        box(3 * c, 0, 4 * c, 1 * c),        # a2: touches a0 along an edge only
        box(10 * c, 10 * c, 11 * c, 11 * c),  # a3: apart
        box(100, 100, 200, 200),            # a4: inside a0
        box(3 * c, 1 * c, 3.5 * c, 2 * c),  # a5: touches a0's edge and a2's corner
    ]
    expected = [(0, 1), (0, 4)]
    assert _slow_pairs(geoms) == expected
    assert overlapping_aois(_layer(geoms)) == expected
    assert overlapping_aois(_layer(geoms, pieces=False)) == expected
    assert overlapping_aois(_layer(geoms[2:4])) == []
    assert overlapping_aois(_layer(geoms[:1])) == []


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(1, 6), st.integers(1, 6)), min_size=2, max_size=7))
def test_pairs_equal_the_whole_polygon_reference(rects):
    # Rectangles on a half-cell lattice: many share edges or corners exactly, span grid lines, or overlap.
    h = GRID_CELL_M / 2
    geoms = [box(x * h, y * h, (x + w) * h, (y + v) * h) for x, y, w, v in rects]
    assert overlapping_aois(_layer(geoms)) == _slow_pairs(geoms)


def test_the_warning_names_the_pairs_and_the_first():
    keys = [f"k{i}" for i in range(10)]
    w = aoi_overlap_warning(keys, [(0, 3)])
    assert w["code"] == "overlapping_aois"
    assert "'k0' and 'k3'" in w["message"] and "counts in the first" in w["message"] and "('k0', not 'k3')" in w["message"]
    assert aoi_overlap_warning(keys, []) is None
    many = [(i, i + 1) for i in range(MAX_PAIRS_NAMED + 2)]
    text = aoi_overlap_warning(keys, many)["message"]
    assert "'k4' and 'k5'" in text and "'k5' and 'k6'" not in text and "and 2 more pair(s)" in text


def _aoi_run(tmp_path: Path, aois: list, name: str) -> subprocess.CompletedProcess:
    ref = geopandas.GeoDataFrame(geometry=[box(X0 + 100 * k, Y0, X0 + 100 * k + 80, Y0 + 80) for k in range(6)], crs=UTM)
    pred = geopandas.GeoDataFrame(geometry=[box(X0 + 100 * k, Y0, X0 + 100 * k + 80, Y0 + 79) for k in range(5)], crs=UTM)
    ref.to_parquet(tmp_path / "ref.parquet")
    pred.to_parquet(tmp_path / "pred.parquet")
    geopandas.GeoDataFrame({"aoi_id": [f"{name}{k}" for k in range(len(aois))]}, geometry=aois, crs=UTM).to_parquet(tmp_path / f"{name}.parquet")
    return _cli("evaluate", "-p", str(tmp_path / "pred.parquet"), "-r", str(tmp_path / "ref.parquet"), "--aoi", str(tmp_path / f"{name}.parquet"),
                "--aoi-id-column", "aoi_id", "--tiles-out", str(tmp_path / f"{name}-tiles.parquet"), "-o", str(tmp_path / f"{name}.json"))


def test_overlapping_aois_warn_once_naming_the_pairs(tmp_path):
    # east0 holds fields 0-2, east1 fields 2-5: field 2 (centroid x0+240) lies in both and counts in east0.
    aois = [box(X0 - 10, Y0 - 10, X0 + 290, Y0 + 90), box(X0 + 190, Y0 - 10, X0 + 600, Y0 + 90), box(X0 + 5000, Y0, X0 + 5100, Y0 + 100)]
    done = _aoi_run(tmp_path, aois, "east")
    assert done.returncode == 0, done.stderr
    text = done.stdout + done.stderr
    lines = [line for line in text.splitlines() if "AOIs overlap" in line]
    assert len(lines) == 1, text
    assert lines[0].startswith("warning: AOIs overlap: 'east0' and 'east1'.") and "counts in the first" in lines[0]
    assert "east2" not in lines[0]
    metrics = json.loads((tmp_path / "east.json").read_text())
    assert [w["code"] for w in metrics["warnings"]] == ["overlapping_aois"]
    per_aoi = metrics["aois"]["per_aoi"]
    assert (per_aoi["east0"]["count_reference"], per_aoi["east1"]["count_reference"]) == (3, 3)

    # Disjoint AOIs: no warning.
    done = _aoi_run(tmp_path, [aois[0], box(X0 + 290, Y0 - 10, X0 + 600, Y0 + 90)], "apart")
    assert done.returncode == 0, done.stderr
    assert "AOIs overlap" not in done.stdout + done.stderr
    assert json.loads((tmp_path / "apart.json").read_text())["warnings"] == []


def test_the_tile_table_has_the_key_the_summary_prints(tmp_path):
    data = tmp_path / "data"
    assert _cli("synth", "--n-ref", "400", "--seed", "5", "--out", str(data)).returncode == 0
    done = _cli("evaluate", "-p", str(data / "predicted.parquet"), "-r", str(data / "reference.parquet"), "--tiles-out", str(tmp_path / "tiles.parquet"),
                "-o", str(tmp_path / "m.json"))
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "worst tile " in line]
    worst = line.split("worst tile ", 1)[1].split()[0]
    tiles = geopandas.read_parquet(tmp_path / "tiles.parquet")
    assert tiles.columns[0] == "tile"
    (row,) = tiles[tiles["tile"] == worst].itertuples()  # one filter
    assert f"{row.epsg}_{row.tile_x}_{row.tile_y}" == worst
    assert json.loads((tmp_path / "m.json").read_text())["tiles"]["worst"]["f1"]["group"] == worst
    assert tiles["tile"].is_unique

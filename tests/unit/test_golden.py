"""Every output of the golden cases equals what the code wrote before (tests/golden/cases.py).

A change that reshapes the code (modules split, routing moved) must not change a number:
each case runs again here and its ``metrics.json`` must equal the stored one exactly (every
key, every float to the last bit, NaN as null), and each table cell by cell, geometry
included (as WKB).
"""

from __future__ import annotations

import json
from pathlib import Path

import geopandas
import pandas as pd
import pytest

from evalcore.cli import main as cli
from tests.golden.cases import HERE, TABLES, cases, command, data_dir


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return data_dir(tmp_path_factory.mktemp("golden"))


def _table(path: Path) -> pd.DataFrame:
    frame = geopandas.read_parquet(path) if b"geo" in path.read_bytes()[-65536:] else pd.read_parquet(path)
    if isinstance(frame, geopandas.GeoDataFrame):
        wkb = frame.geometry.to_wkb()
        frame = pd.DataFrame(frame)
        frame[wkb.name] = wkb
    return frame


@pytest.mark.parametrize("name", ["default", "full", "many_to_one_tiles", "study", "compare"])
def test_outputs_are_unchanged(name: str, data: Path, tmp_path: Path) -> None:
    args = cases(data)[name]
    assert cli(command(args, tmp_path)) == 0
    stored = HERE / name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in stored.iterdir())
    got = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8").replace(str(data), "<data>"))
    want = json.loads((stored / "metrics.json").read_text(encoding="utf-8"))
    assert got == want
    for file_name in TABLES.values():
        if (stored / file_name).exists():
            pd.testing.assert_frame_equal(_table(tmp_path / file_name), _table(stored / file_name), check_exact=True)

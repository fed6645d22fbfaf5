"""Reading GeoParquet chunks on the workers (evalcore.distributed.sources)."""

from __future__ import annotations

import geopandas
import numpy as np
from shapely.geometry import box

from evalcore.distributed.sources import LayerSource, plan_chunks, read_chunk


def test_a_file_written_with_a_stepped_index_keeps_every_geometry(tmp_path):
    # geopandas stores a RangeIndex with a step as metadata only; a chunk read must not
    # realign the geometries on it (every third row survived, the others became null).
    frame = geopandas.GeoDataFrame({"v": np.arange(30)}, geometry=[box(i, 0, i + 1, 1) for i in range(30)], crs="EPSG:32633")
    path = tmp_path / "every_third.parquet"
    frame.iloc[::3].to_parquet(path)
    source = LayerSource(str(path), None, "predicted")
    chunks = plan_chunks(source, 4) + plan_chunks(source, 50_000)
    read = [read_chunk(source, c) for c in chunks]
    assert sum(len(g) for g in read) == 20
    got = geopandas.pd.concat(read)
    assert not got.geometry.isna().any()
    assert got["v"].tolist() == list(range(0, 30, 3)) * 2
    assert [g.bounds[0] for g in got.geometry] == [float(v) for v in range(0, 30, 3)] * 2
    assert got.index.tolist() == list(range(10)) * 2  # positions in the file

"""GeoParquet on a store is read by row group: a chunk fetches its row groups, not the file
(in this process, against the moto server of tests/storage/conftest.py)."""

from __future__ import annotations

import os

import geopandas
import numpy as np
import pytest
import shapely

from evalcore import remote
from evalcore.distributed.sources import LayerSource, plan_chunks, read_chunk

N_GROUPS, GROUP_ROWS, PAD_BYTES = 8, 500, 4000


@pytest.fixture
def store_env(s3_store, monkeypatch: pytest.MonkeyPatch):
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in s3_store.env().items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    remote._filesystem.cache_clear()
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    yield s3_store
    remote._filesystem.cache_clear()
    s3fs.S3FileSystem.clear_instance_cache()


def test_a_chunk_reads_its_row_groups_not_the_whole_file(tmp_path, store_env, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    n = N_GROUPS * GROUP_ROWS
    x = rng.uniform(500_000, 510_000, n)
    frame = geopandas.GeoDataFrame(
        {"pad": [rng.bytes(PAD_BYTES) for _ in range(n)]},  # incompressible: row groups of about 2 MB
        geometry=shapely.box(x, 4_000_000, x + 50, 4_000_050), crs="EPSG:32633",
    )
    path = tmp_path / "big.parquet"
    frame.to_parquet(path, row_group_size=GROUP_ROWS)
    url = store_env.url("ranged", "big.parquet")
    store_env.fs().put_file(str(path), url[len("s3://"):])
    size = path.stat().st_size

    opened = []
    original = remote.open_input

    class Counting:
        """The store's file object, counting the bytes pyarrow reads through it."""

        def __init__(self, handle: object) -> None:
            self._handle, self.n_bytes = handle, 0

        def read(self, n: int = -1) -> bytes:
            data = self._handle.read(n)
            self.n_bytes += len(data)
            return data

        def __getattr__(self, name: str) -> object:
            return getattr(self._handle, name)

    def counting(u: str) -> object:
        handle = Counting(original(u))
        opened.append(handle)
        return handle

    monkeypatch.setattr(remote, "open_input", counting)
    source = LayerSource(url, None, "reference")
    chunks = plan_chunks(source, chunk_rows=GROUP_ROWS)
    assert len(chunks) == N_GROUPS
    planned = sum(h.n_bytes for h in opened)
    opened.clear()
    got = read_chunk(source, chunks[3])
    fetched = sum(h.n_bytes for h in opened)
    expected = frame.iloc[3 * GROUP_ROWS: 4 * GROUP_ROWS]
    assert got["pad"].tolist() == expected["pad"].tolist()
    assert shapely.equals_exact(got.geometry.values, expected.geometry.values, 0).all()
    # The plan reads footers only; a chunk its own row group (about 1/8 of the file) and the footer.
    assert planned < size / 10, (planned, size)
    assert fetched < 1.2 * size / N_GROUPS, (fetched, size)
    print(f"file {size / 1e6:.1f} MB; planning fetched {planned / 1e6:.2f} MB, one chunk {fetched / 1e6:.2f} MB")


def test_an_object_is_hashed_once_per_version(store_env, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run hashes each input for its signature and again for its input manifest: the second
    time the object's ETag names the version already streamed; a rewritten object is streamed anew."""
    import hashlib

    fs = store_env.fs()
    url = store_env.url("facts", "layer.bin")
    first, second = b"a" * 3000, b"b" * 3000
    fs.pipe_file(url[len("s3://"):], first)
    remote._FACTS.clear()
    opened = []

    def count_opens() -> None:  # on the file system object_facts gets (one per process and credentials)
        found, _ = remote.filesystem(url)
        original = found.open

        def opening(p, *args, **kwargs):
            opened.append(p)
            return original(p, *args, **kwargs)

        monkeypatch.setattr(found, "open", opening)

    count_opens()
    assert remote.object_facts(url)["sha256"] == hashlib.sha256(first).hexdigest()
    assert remote.object_facts(url)["sha256"] == hashlib.sha256(first).hexdigest()
    assert len(opened) == 1
    fs.pipe_file(url[len("s3://"):], second)
    remote._filesystem.cache_clear()  # a fresh file system, as a new listing would see the new ETag
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    count_opens()
    assert remote.object_facts(url)["sha256"] == hashlib.sha256(second).hexdigest()
    assert len(opened) == 2

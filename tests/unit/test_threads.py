"""Slices of one computation on this process's threads (:mod:`evalcore.threads`): every
slice covered once and in order, the thread count from the environment (1 in a Dask
worker), and the same bits for any thread count in each step that slices: PROJ's
transforms, GEOS's validity and centroids, the intersection areas, the boundary distances,
and a whole evaluation with the slicing thresholds lowered so that small layers are cut."""

from __future__ import annotations

import json

import numpy as np
import pytest
import shapely
from hypothesis import given
from hypothesis import strategies as st
from pyproj import CRS

import evalcore
from evalcore import boundary, crs, pairs, polygons, prepare, threads
from evalcore.synth import make_layers



@given(st.integers(0, 200), st.integers(1, 50), st.integers(1, 6))
def test_slices_cover_every_item_once_in_order(n_items, min_slice, n):
    import os

    os.environ["EVALCORE_THREADS"] = str(n)
    try:
        seen = threads.map_slices(lambda a, b: list(range(a, b)), n_items, min_slice)
    finally:
        del os.environ["EVALCORE_THREADS"]
    assert [i for part in seen for i in part] == list(range(n_items))
    # No slice is shorter than min_slice unless there is only one.
    assert len(seen) == 1 or all(len(part) >= min_slice for part in seen)
    assert len(seen) <= n


def test_the_thread_count_from_the_environment(monkeypatch):
    monkeypatch.setenv("EVALCORE_THREADS", "3")
    assert threads.n_threads() == 3
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv("EVALCORE_THREADS", bad)
        with pytest.raises(ValueError, match=f"EVALCORE_THREADS must be a positive integer, but got '{bad}'"):
            threads.n_threads()
    monkeypatch.delenv("EVALCORE_THREADS")
    assert 1 <= threads.n_threads() <= threads.MAX_THREADS


def test_map_elements_refuses_arrays_of_different_lengths():
    with pytest.raises(ValueError, match=r"one length, but got \[2, 3\]"):
        threads.map_elements(np.add, np.zeros(2), np.zeros(3), min_slice=1)


@pytest.mark.cluster
def test_one_thread_inside_a_dask_worker(local_clients, monkeypatch):
    monkeypatch.delenv("EVALCORE_THREADS", raising=False)
    client = local_clients.get(1)
    assert client.submit(threads.n_threads, pure=False).result() == 1


def _bits(values) -> bytes:
    return b"".join(np.asarray(v, dtype=np.float64).tobytes() for v in values)


@pytest.fixture
def small_slices(monkeypatch):
    """Slices of a few elements, so that the small test layers are cut into many."""
    monkeypatch.setattr(crs, "POINTS_PER_THREAD", 7)
    monkeypatch.setattr(boundary, "PAIRS_PER_THREAD", 3)
    monkeypatch.setattr(boundary, "PAIRS_PER_BATCH", 5)
    for module in (pairs, polygons, prepare):
        monkeypatch.setattr(module, "GEOMS_PER_THREAD", 4)


def test_each_step_gives_the_same_bits_on_any_number_of_threads(small_slices, monkeypatch):
    rng = np.random.default_rng(5)
    lon, lat = rng.uniform(-100, -90, 1000), rng.uniform(30, 45, 1000)
    ref = shapely.buffer(shapely.points(rng.uniform(0, 1000, 60), rng.uniform(0, 1000, 60)), rng.uniform(5, 40, 60), quad_segs=3)
    pred = shapely.buffer(shapely.points(rng.uniform(0, 1000, 60), rng.uniform(0, 1000, 60)), rng.uniform(5, 40, 60), quad_segs=5)
    out = {}
    for n in ("1", "2", "3", "7"):
        monkeypatch.setenv("EVALCORE_THREADS", n)
        out[n] = [
            _bits(crs.transform_xy(lon, lat, CRS.from_epsg(4326), CRS.from_epsg(6933))),
            _bits(shapely.get_coordinates(crs.transform_geoms(ref, CRS.from_epsg(32614), CRS.from_epsg(4326)))),
            _bits(boundary.pair_boundary_distances(ref, pred, None)),
            _bits([pairs._overlap_areas(ref, pred)]),
            threads.map_elements(shapely.is_valid, ref, min_slice=4).tobytes(),
            _bits(shapely.get_coordinates(threads.map_elements(shapely.centroid, pred, min_slice=4))),
        ]
    assert out["2"] == out["1"] and out["3"] == out["1"] and out["7"] == out["1"]
    # The transforms and the areas are not all zeros (the comparison compared something).
    assert np.any(pairs._overlap_areas(ref, pred) > 0)


def test_an_evaluation_gives_the_same_bits_on_any_number_of_threads(small_slices, monkeypatch):
    pred, ref = make_layers(400, 11, bad_rows=True)
    results = {}
    for n in ("1", "3"):
        monkeypatch.setenv("EVALCORE_THREADS", n)
        results[n] = json.dumps(evalcore.evaluate(pred, ref), sort_keys=True, default=str)
    assert results["1"] == results["3"]
    assert json.loads(results["1"])["count_reference"] > 300


def test_a_forked_child_slices_on_threads_of_its_own(monkeypatch):
    # The parent's pool threads do not exist in a forked child: it must not wait on them.
    import multiprocessing

    monkeypatch.setenv("EVALCORE_THREADS", "2")
    assert threads.map_slices(lambda a, b: b - a, 10, 1) == [5, 5]  # the parent's pool is made
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(threads.map_slices, (_length, 10, 1)).get(timeout=60) == [5, 5]


def _length(start: int, stop: int) -> int:
    return stop - start


def test_a_slice_that_slices_again_finishes(monkeypatch):
    # Each outer slice (on a pool thread) slices its own range: the inner pieces run on that
    # thread, and every item is still covered once, in order.
    monkeypatch.setenv("EVALCORE_THREADS", "2")

    def outer(a: int, b: int) -> list[int]:
        inner = threads.map_slices(lambda c, d: list(range(a + c, a + d)), b - a, 1)
        return [i for part in inner for i in part]

    import threading

    done: list = []
    runner = threading.Thread(target=lambda: done.append(threads.map_slices(outer, 40, 1)), daemon=True)
    runner.start()
    runner.join(timeout=60)
    assert done, "nested slices did not finish in 60 s (a pool thread waiting on its own pool)"
    parts = done[0]
    assert len(parts) == 2 and [i for part in parts for i in part] == list(range(40))
